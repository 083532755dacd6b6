"""DQN with RLlib's semantics: double-Q, dueling, n-step targets, Huber loss, target network.

Mnih et al. 2015, https://www.nature.com/articles/nature14236; double Q-learning
(van Hasselt et al. 2016, https://arxiv.org/abs/1509.06461); dueling networks
(Wang et al. 2016, https://arxiv.org/abs/1511.06581). Field names and defaults
follow RLlib's ``DQNConfig`` (new API stack):

============================================  ==============  ==================================
field                                         default         meaning (RLlib's name if different)
============================================  ==============  ==================================
``lr``                                        5e-4            Adam learning rate (schedulable)
``adam_epsilon``                              1e-8            Adam's epsilon
``gamma``                                     0.99            discount
``train_batch_size``                          32              rows sampled per update
``replay_buffer_capacity``                    50000           ``replay_buffer_config`` capacity
``num_steps_sampled_before_learning_starts``  1000            env steps before the first update
``training_intensity``                        None            rows trained on per env step
                                                              (None: one update per env step)
``rollout_fragment_length``                   4               env steps per sub-env and iteration
``target_network_update_freq``                500             env steps between target updates
``tau``                                       1.0             1: copy; < 1: one polyak step per
                                                              target update (schedulable)
``n_step``                                    1               n-step targets
``double_q``                                  True            online argmax, target evaluation
``dueling``                                   True            value + advantage streams
``hidden_sizes``                              (256, 256)      ``fcnet_hiddens``
``head_hidden_sizes``                         ()              ``head_fcnet_hiddens``: hidden
                                                              layers of each (dueling) head
``activation``                                "relu"          ``fcnet_activation``
``ortho_init``                                True            orthogonal init; False: PyTorch's
                                                              default (SB3's DQN)
``epsilon``                                   ((0, 1.0),      epsilon-greedy: a piecewise schedule
                                              (10000, 0.05))  over env steps, or a constant
``td_error_loss_fn``                          "huber"         or "mse"
``grad_clip``                                 40.0            clip threshold, or None
``grad_clip_by``                              "global_norm"   "value", "norm" or "global_norm"
``prioritized_replay``                        False           proportional prioritized replay
                                                              (RLlib's default buffer is
                                                              prioritized; ours is uniform)
``prioritized_replay_alpha``                  0.6             priority exponent
``prioritized_replay_beta``                   0.4             importance-weight exponent,
                                                              constant (as RLlib's)
``prioritized_replay_eps``                    1e-6            added to every priority
``replay_frame_stack``                        None            frames stacked on the observations'
                                                              last axis, kept once per frame in
                                                              the buffer (Atari: 4)
``conv_padding``                              "same"          the CNN's padding for images;
                                                              "valid": the Nature DQN's
``conv_filters``                              None            the CNN's ``(out_channels, kernel,
                                                              stride)`` layers (RLlib's name);
                                                              None: the Nature DQN's
                                                              (): no CNN, pixels flattened
``norm_obs``, ``clip_obs``                    False, 10.0     running observation mean/std,
                                                              normalized batches sampled from
                                                              raw rows (SB3's ``VecNormalize``)
============================================  ==============  ==================================

The heads are linear on the encoder's features by default, as with RLlib's
new API stack (``head_fcnet_hiddens=[]``); RLlib's old stack gave each dueling
stream a hidden layer of 256 units (``hiddens=[256]``), which is
``head_hidden_sizes=(256,)`` here.

The loss is ``mean(mask * L(Q(s, a) - y))`` with ``L`` the Huber loss (delta
1) or the squared error and the target
``y = rewards + discounts * Q_target(s', argmax_a' Q(s', a'))`` (double-Q;
without it, ``max_a' Q_target(s', a')``); ``rewards`` and ``discounts`` hold
the n-step window of each replay row (see
:mod:`jaxlearner.algorithms.replay.off_policy`).

Design decisions:

* **Epsilon** is the module hyperparameter ``"epsilon"``: an RLlib-style
  list is a piecewise schedule over the module's ``env_steps`` counter. The
  explore function evaluates the schedule at ``module.env_steps`` itself
  (the value in ``module.hyperparams`` is only refreshed inside ``update`` and
  lags one update); a constant is read from the state, so it can be edited or
  swept there. ``module.env_steps`` counts the env steps passed to
  ``update``: pass the steps sampled since the previous update (the trainer
  does), so the schedule runs over sampled env steps as RLlib's does.
* **Target network**: ``extra["target_params"]``, all the Q-network's params.
  After each ``update``, once ``target_network_update_freq`` env steps (the
  ``env_steps`` counter) have passed since the last target update, ``tau == 1``
  copies the params (:func:`~jaxlearner.periodic_copy`) and ``tau < 1`` takes
  one polyak step ``target <- tau * params + (1 - tau) * target``, RLlib's
  ``sync_target_networks(tau)`` at that frequency (both are
  :func:`~jaxlearner.target_update`). Use
  ``target_network_update_freq=1`` for a polyak step after every update.
* **Training intensity**: ``OffPolicyAlgorithm.updates_per_step`` is
  ``training_intensity / train_batch_size``; ``None`` means one update per env
  step, RLlib's natural ratio for one environment.
* **Prioritized replay** (Schaul et al. 2016, https://arxiv.org/abs/1511.05952)
  is an option, off by default so results match the uniform replay earlier
  versions used: with ``prioritized_replay=True`` rows are sampled in
  proportion to ``(|TD error| + eps)^alpha``, each row's loss is multiplied by
  its importance weight ``batch["weights"]`` and the sampled rows' priorities
  become the TD errors the update trains on (see
  :func:`~jaxlearner.algorithms.replay.off_policy.make_replay_updates`). ``beta``
  stays constant, as in RLlib's ``PrioritizedEpisodeReplayBuffer``; the paper
  anneals it to 1.
* **Rollouts** are ``rollout_fragment_length`` steps per sub-environment per
  iteration, then ``updates_per_step`` updates per env step collected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import gymnasium
import jax
import jax.numpy as jnp

from jaxlearner.algorithms.algorithm import MODULE_ID, OffPolicyAlgorithm
from jaxlearner.algorithms.builtin import BuiltinAlgorithm, register_builtin, single_module_learner
from jaxlearner.algorithms.config import (
    check_bool,
    check_choice,
    check_conv_config,
    check_layers,
    check_learning_rates,
    check_positive,
    check_positive_int,
    check_schedule,
    config_adam,
    freeze_schedule,
)
from jaxlearner.algorithms.networks.acting import epsilon_greedy
from jaxlearner.algorithms.networks.encoders import ConvFilters
from jaxlearner.algorithms.networks.models import q_network, q_network_options
from jaxlearner.algorithms.replay.off_policy import (
    masked_mean,
    off_policy_algorithm,
    replay_layout,
    replay_module_spec,
    td_error_loss,
)
from jaxlearner.algorithms.replay.off_policy_config import TD_ERROR_LOSSES, check_off_policy_config
from jaxlearner.core.additional_updates import AdditionalUpdate, periodic_copy, target_update
from jaxlearner.core.context import LossContext
from jaxlearner.core.learner import Learner
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.schedules import ScheduleLike
from jaxlearner.core.state import ModuleState
from jaxlearner.types import Batch, Model, Params

TARGET = "target_params"


@dataclasses.dataclass(frozen=True)
class DQNConfig:
    """DQN's configuration; see the module docstring for each field and RLlib's default."""

    lr: ScheduleLike = 5e-4
    adam_epsilon: float = 1e-8
    gamma: float = 0.99
    train_batch_size: int = 32
    replay_buffer_capacity: int = 50_000
    num_steps_sampled_before_learning_starts: int = 1000
    training_intensity: float | None = None
    rollout_fragment_length: int = 4
    target_network_update_freq: int = 500
    tau: ScheduleLike = 1.0
    n_step: int = 1
    double_q: bool = True
    dueling: bool = True
    hidden_sizes: tuple[int, ...] = (256, 256)
    head_hidden_sizes: tuple[int, ...] = ()
    activation: str = "relu"
    ortho_init: bool = True
    epsilon: ScheduleLike = ((0, 1.0), (10_000, 0.05))
    td_error_loss_fn: str = "huber"
    grad_clip: float | None = 40.0
    grad_clip_by: str = "global_norm"
    prioritized_replay: bool = False
    prioritized_replay_alpha: float = 0.6
    prioritized_replay_beta: float = 0.4
    prioritized_replay_eps: float = 1e-6
    replay_frame_stack: int | None = None
    conv_padding: str = "same"
    conv_filters: ConvFilters | None = None
    norm_obs: bool = False
    clip_obs: float = 10.0

    def __post_init__(self) -> None:
        owner = "DQNConfig"
        for name in ("lr", "tau", "epsilon"):
            object.__setattr__(self, name, freeze_schedule(getattr(self, name)))
        check_off_policy_config(owner, self)
        check_schedule(owner, lr=self.lr, epsilon=self.epsilon)
        check_learning_rates(owner, lr=self.lr)
        check_positive(owner, adam_epsilon=self.adam_epsilon)
        check_positive_int(owner, target_network_update_freq=self.target_network_update_freq)
        check_bool(owner, ortho_init=self.ortho_init)
        check_layers(owner, head_hidden_sizes=self.head_hidden_sizes)
        check_conv_config(self)
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        object.__setattr__(self, "head_hidden_sizes", tuple(self.head_hidden_sizes))


def dqn_td_error(
    apply: Callable[[Params, jax.Array], jax.Array],
    params: Params,
    target_params: Params,
    batch: Batch,
    double_q: bool = True,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """DQN's TD errors ``Q(s, a) - y`` of ``[B]`` replay rows, and their parts.

    ``y = rewards + discounts * Q_target(s', argmax_a' Q(s', a'))`` with double-Q,
    else ``rewards + discounts * max_a' Q_target(s', a')``; ``y`` carries no
    gradient.

    Args:
      apply: ``apply(params, obs [B, ...]) -> Q-values [B, num_actions]``.
      params: the online network's params.
      target_params: the target network's params.
      batch: ``obs``, ``actions`` (int indices), ``rewards``, ``next_obs`` and
        ``discounts``, each ``[B, ...]``.
      double_q: pick the next action with the online network.

    Returns:
      ``(td_error, q_taken, target)``, each float ``[B]``.
    """
    obs, next_obs = batch["obs"], batch["next_obs"]
    rows = obs.shape[0]
    if double_q:
        # One pass of the online network over obs and next_obs together.
        q_both = apply(params, jnp.concatenate([obs, next_obs]))
        q, next_q_online = q_both[:rows], q_both[rows:]
    else:
        q = apply(params, obs)
    next_q_target = apply(target_params, next_obs)
    next_action = jnp.argmax(next_q_online if double_q else next_q_target, axis=-1)
    next_value = jnp.take_along_axis(next_q_target, next_action[:, None], axis=-1)[:, 0]
    target = jax.lax.stop_gradient(batch["rewards"] + batch["discounts"] * next_value)
    actions = batch["actions"].astype(jnp.int32)
    q_taken = jnp.take_along_axis(q, actions[:, None], axis=-1)[:, 0]
    return q_taken - target, q_taken, target


def dqn_loss(double_q: bool = True, td_error_loss_fn: str = "huber"):
    """DQN's TD loss; ``loss(params, batch, ctx)``.

    The batch holds ``[B]`` replay rows ``obs``, ``actions`` (int indices),
    ``rewards``, ``next_obs``, ``discounts`` and ``mask`` (see
    :mod:`jaxlearner.algorithms.replay.off_policy`), and with prioritized replay the
    importance weights ``weights``; the target network's params are
    ``ctx.extra["target_params"]`` and ``ctx.apply(params, obs)`` returns
    Q-values ``[B, num_actions]``. The loss is
    ``sum(mask * weights * L(td_error)) / max(sum(mask), 1)``, the weights
    ones when the batch has none (RLlib's ``mean(weights * huber(td_error))``).

    Args:
      double_q: pick the next action with the online network and evaluate it
        with the target network (else ``max`` of the target network).
      td_error_loss_fn: ``"huber"`` (delta 1) or ``"mse"``.

    Returns:
      A loss returning ``(total, metrics)`` with ``qf_mean``, ``qf_max``,
      ``qf_min``, ``td_error_mean`` (mean absolute TD error, unweighted) and
      ``target_mean``.

    Raises:
      ValueError: for an unknown ``td_error_loss_fn``.

    Example:
      >>> loss = dqn_loss(double_q=True)
      >>> value, metrics = loss(params, batch, ctx)      # doctest: +SKIP
    """
    check_choice("dqn_loss", "td_error_loss_fn", td_error_loss_fn, TD_ERROR_LOSSES)

    def loss(params: Params, batch: Batch, ctx: LossContext) -> tuple[jax.Array, dict]:
        td_error, q_taken, target = dqn_td_error(
            ctx.apply, params, ctx.extra[TARGET], batch, double_q
        )
        mask = batch["mask"]
        row_loss = td_error_loss(td_error, td_error_loss_fn)
        if "weights" in batch:
            row_loss = row_loss * batch["weights"]
        total = masked_mean(row_loss, mask)
        valid = mask > 0
        return total, {
            "qf_mean": masked_mean(q_taken, mask),
            "qf_max": jnp.max(jnp.where(valid, q_taken, -jnp.inf)),
            "qf_min": jnp.min(jnp.where(valid, q_taken, jnp.inf)),
            "td_error_mean": masked_mean(jnp.abs(td_error), mask),
            "target_mean": masked_mean(target, mask),
        }

    return loss


def periodic_polyak_update(period: int, tau: ScheduleLike) -> AdditionalUpdate:
    """One polyak step of ``extra["target_params"]`` every ``period`` env steps.

    After an update, if ``env_steps - last >= period``:
    ``target <- tau * params + (1 - tau) * target`` and ``last = env_steps``
    (RLlib's DQN with ``tau < 1``). ``tau`` is the traced hyperparameter
    ``"tau"``. The ``extra`` entries match :func:`~jaxlearner.periodic_copy`'s;
    both are :func:`~jaxlearner.target_update`.
    """
    return target_update(tau, period=period, counter="env_steps", after="update", target=TARGET)


def make_learner(
    observation_space: gymnasium.Space, action_space: gymnasium.Space, config: DQNConfig
) -> Learner:
    """DQN's learner: one Q-network module, one gradient step per ``update``."""
    model = q_network(observation_space, action_space, **q_network_options(config))
    spec = _module_spec(model, observation_space, config)
    layout = replay_layout(observation_space, (), jnp.int32, config.prioritized_replay)
    return single_module_learner("dqn", observation_space, action_space, config, spec, layout)


def _module_spec(model: Model, observation_space: gymnasium.Space, config: DQNConfig) -> ModuleSpec:
    """The module: the TD loss, Adam, epsilon and the target network's update (and what
    :func:`~jaxlearner.algorithms.replay.off_policy.replay_module_spec` adds)."""
    if config.tau == 1.0:
        target_update = periodic_copy(config.target_network_update_freq, "env_steps", TARGET)
    else:
        target_update = periodic_polyak_update(config.target_network_update_freq, config.tau)
    return replay_module_spec(
        model,
        dqn_loss(config.double_q, config.td_error_loss_fn),
        observation_space,
        config,
        optimizer=config_adam(config, eps=config.adam_epsilon),
        hyperparams={"epsilon": config.epsilon},
        additional_updates=[target_update],
    )


def make_algorithm(
    learner: Learner, action_space: gymnasium.Space, config: DQNConfig
) -> OffPolicyAlgorithm:
    """DQN around ``learner`` (one of :func:`make_learner`): epsilon-greedy over the
    Q-network's argmax to explore, the argmax alone to evaluate, and the TD errors that
    prioritized replay ranks rows by, all from the learner's own Q-network."""
    model = learner.specs[MODULE_ID].model

    def td_errors(module: ModuleState, batch: Batch, key: jax.Array) -> jax.Array:
        del key
        target_params = module.extra[TARGET]
        return dqn_td_error(model.apply, module.params, target_params, batch, config.double_q)[0]

    acts = epsilon_greedy(model, config.epsilon, action_space)
    return off_policy_algorithm("dqn", learner, config, acts, jnp.int32, td_errors)


RECIPE = BuiltinAlgorithm("dqn", DQNConfig, make_learner, make_algorithm)
"""DQN's registry entry: its ``learner``, ``build`` and ``algorithm_for``."""

build, dqn = register_builtin(
    RECIPE,
    OffPolicyAlgorithm,
    parts="learner, epsilon-greedy, transitions",
    action_space=(
        "a ``Discrete`` space (a ``start`` offset is added to the actions sent to the "
        "environment; the index is trained on)."
    ),
    type_error="for an action space that is not ``Discrete``.",
    doc=RECIPE.learner_doc(
        "It trains on whole replay batches, one gradient step per ``update``.",
        config='{"lr": 1e-3}',
    ),
)
