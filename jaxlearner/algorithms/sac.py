"""SAC with RLlib's semantics: twin critics, polyak targets, learned temperature.

Haarnoja et al. 2018, https://arxiv.org/abs/1801.01290 and
https://arxiv.org/abs/1812.05905; discrete actions as in Christodoulou 2019,
https://arxiv.org/abs/1910.07207. Field names and defaults follow RLlib's
``SACConfig`` (new API stack):

============================================  ===========  ===================================
field                                         default      meaning (RLlib's name if different)
============================================  ===========  ===================================
``actor_lr``                                  3e-5         actor's Adam learning rate
``critic_lr``                                 3e-4         critics' Adam learning rate
``alpha_lr``                                  3e-4         temperature's Adam learning rate
``gamma``                                     0.99         discount
``tau``                                       5e-3         polyak step of the target critics
                                                           after every gradient step
``initial_alpha``                             1.0          initial temperature
``target_entropy``                            "auto"       ``-dim(A)`` (Box) or
                                                           ``0.98 * log(n)`` (Discrete)
``train_batch_size``                          256          rows sampled per update
``replay_buffer_capacity``                    1000000      ``replay_buffer_config["capacity"]``
``num_steps_sampled_before_learning_starts``  1500         env steps before the first update
``warmup_actions``                            "policy"     how those steps act: "policy" (its
                                                           samples, RLlib) or "uniform" (the
                                                           action space's, SB3)
``training_intensity``                        None         rows trained on per env step
                                                           (None: one update per env step)
``rollout_fragment_length``                   4            env steps per sub-env per iteration
``n_step``                                    1            n-step targets
``twin_q``                                    True         two critics, the smaller Q is used
``hidden_sizes``                              (256, 256)   actor's and each critic's layers
``activation``                                "relu"       ``fcnet_activation``
``ortho_init``                                True         orthogonal init; False: PyTorch's
                                                           default (SB3's SAC; SB3's name)
``log_std_range``                             (-5, 2)      the actor's log-std bounds
``log_std_bound``                             "tanh"       kept in them by "tanh" (squashed,
                                                           CleanRL) or "clip" (SB3, sbx,
                                                           with (-20, 2))
``td_error_loss_fn``                          "huber"      critics' loss: "huber" or "mse"
``grad_clip``                                 None         clip threshold for each optimizer
``grad_clip_by``                              "global..."  "value", "norm" or "global_norm"
``prioritized_replay``                        False        proportional prioritized replay
``prioritized_replay_alpha``                  0.6          priority exponent
``prioritized_replay_beta``                   0.4          importance-weight exponent (constant)
``prioritized_replay_eps``                    1e-6         added to every priority
``replay_frame_stack``                        None         frames stacked on the observations'
                                                           last axis, kept once per frame
``norm_obs``, ``clip_obs``                    False, 10    running observation mean/std
                                                           (SB3's ``VecNormalize`` names)
``norm_reward``, ``clip_reward``              False, 10    rewards / std of the running
                                                           discounted return
``num_envs_per_env_runner``                   1            envs the running returns are kept for
============================================  ===========  ===================================

The replay buffer keeps raw observations and rewards; a sampled batch is normalized with
the statistics of the moment it is sampled (as SB3 samples through ``VecNormalize``), so
no stored row goes stale as the statistics move
(:mod:`~jaxlearner.algorithms.trajectories.normalization`).

The learning rates are schedulable. RLlib's actor learning rate is ten times
smaller than the critic's (3e-5); the SAC papers use 3e-4 for all three.

One module, ``"default_policy"`` (:func:`~jaxlearner.algorithms.networks.models.sac_networks`),
with three named optimizers ``actor``, ``critic`` and ``temperature``, each
following the gradient of its own term of the per-optimizer loss
(:func:`~jaxlearner.algorithms.objectives.sac_loss.sac_loss`, whose module writes the
three terms out).

Design decisions:

* **Target critics**: only the critics have targets, kept in
  ``extra["target_critic"]`` (the ``critic`` subtree of the params) and moved
  by one polyak step after every gradient step (:func:`critic_polyak_update`,
  :func:`~jaxlearner.target_update` with ``select`` picking the critics;
  ``tau`` is the traced hyperparameter ``"tau"``). ``jl.polyak_update`` would
  also average the actor and temperature, which the loss never reads.
* **Prioritized replay** (off by default), as RLlib's SAC: only the critic
  term is importance-weighted, and a row's priority is the mean over the
  critics of ``|Q_i(s, a) - y|``, computed before the gradient step with a
  fresh sample of ``a'`` for ``Box`` actions (the loss's own sample is not
  returned; metrics are scalars).
* **Training intensity**, rollouts and replay rows: as for DQN (see
  :mod:`jaxlearner.algorithms.dqn` and :mod:`jaxlearner.algorithms.replay.off_policy`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import gymnasium
import jax
import jax.numpy as jnp

from jaxlearner.algorithms.algorithm import MODULE_ID, OffPolicyAlgorithm
from jaxlearner.algorithms.builtin import BuiltinAlgorithm, register_builtin, single_module_learner
from jaxlearner.algorithms.config import (
    check_bool,
    check_choice,
    check_learning_rates,
    check_positive,
    config_adam,
    freeze_schedule,
)
from jaxlearner.algorithms.networks.acting import (
    WARMUP_ACTIONS,
    explore_and_exploit,
    uniform_actions,
)
from jaxlearner.algorithms.networks.distribution_spec import make_distribution
from jaxlearner.algorithms.networks.heads import check_log_std
from jaxlearner.algorithms.networks.models import SACNetworks, sac_networks
from jaxlearner.algorithms.objectives.sac_loss import TARGET, sac_loss, sac_terms
from jaxlearner.algorithms.replay.off_policy import (
    module_context,
    off_policy_algorithm,
    replay_layout,
    replay_module_spec,
)
from jaxlearner.algorithms.replay.off_policy_config import check_off_policy_config
from jaxlearner.core.additional_updates import AdditionalUpdate, target_update
from jaxlearner.core.learner import Learner
from jaxlearner.core.schedules import ScheduleLike
from jaxlearner.core.state import ModuleState
from jaxlearner.types import Batch, Params

DISCRETE_TARGET_ENTROPY_SCALE = 0.98
"""``target_entropy="auto"`` for ``Discrete(n)`` is this times ``log(n)`` (RLlib's old stack)."""


@dataclasses.dataclass(frozen=True)
class SACConfig:
    """SAC's configuration; see the module docstring for each field and RLlib's default."""

    actor_lr: ScheduleLike = 3e-5
    critic_lr: ScheduleLike = 3e-4
    alpha_lr: ScheduleLike = 3e-4
    gamma: float = 0.99
    tau: ScheduleLike = 5e-3
    initial_alpha: float = 1.0
    target_entropy: float | str = "auto"
    train_batch_size: int = 256
    replay_buffer_capacity: int = 1_000_000
    num_steps_sampled_before_learning_starts: int = 1500
    warmup_actions: str = "policy"
    training_intensity: float | None = None
    rollout_fragment_length: int = 4
    n_step: int = 1
    twin_q: bool = True
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    ortho_init: bool = True
    log_std_range: tuple[float, float] = (-5.0, 2.0)
    log_std_bound: str = "tanh"
    td_error_loss_fn: str = "huber"
    grad_clip: float | None = None
    grad_clip_by: str = "global_norm"
    prioritized_replay: bool = False
    prioritized_replay_alpha: float = 0.6
    prioritized_replay_beta: float = 0.4
    prioritized_replay_eps: float = 1e-6
    replay_frame_stack: int | None = None
    norm_obs: bool = False
    norm_reward: bool = False
    clip_obs: float = 10.0
    clip_reward: float = 10.0
    num_envs_per_env_runner: int = 1

    def __post_init__(self) -> None:
        owner = "SACConfig"
        for name in ("actor_lr", "critic_lr", "alpha_lr", "tau"):
            object.__setattr__(self, name, freeze_schedule(getattr(self, name)))
        check_off_policy_config(owner, self)
        check_learning_rates(
            owner, actor_lr=self.actor_lr, critic_lr=self.critic_lr, alpha_lr=self.alpha_lr
        )
        check_positive(owner, initial_alpha=self.initial_alpha)
        check_choice(owner, "warmup_actions", self.warmup_actions, WARMUP_ACTIONS)
        bounds = check_log_std(owner, self.log_std_range, self.log_std_bound)
        object.__setattr__(self, "log_std_range", bounds)
        check_bool(owner, ortho_init=self.ortho_init)
        if self.target_entropy != "auto" and (
            isinstance(self.target_entropy, bool)
            or not isinstance(self.target_entropy, int | float)
            or not math.isfinite(self.target_entropy)
        ):
            raise ValueError(
                f"{owner}.target_entropy must be 'auto' or a finite number; got "
                f"{self.target_entropy!r}."
            )
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))


def target_entropy_for(action_space: gymnasium.Space, target_entropy: float | str) -> float:
    """The target entropy: a number as given, or ``"auto"`` resolved for the space.

    ``"auto"``: ``-prod(shape)`` for a ``Box`` (Haarnoja et al. 2018) and
    ``0.98 * log(n)`` for ``Discrete(n)``, 98% of the uniform policy's entropy
    (Christodoulou 2019).
    """
    if target_entropy != "auto":
        return float(target_entropy)
    if isinstance(action_space, gymnasium.spaces.Discrete):
        return DISCRETE_TARGET_ENTROPY_SCALE * math.log(int(action_space.n))
    return -float(math.prod(action_space.shape))


def sac_td_errors(
    model: SACNetworks, module: ModuleState, batch: Batch, key: jax.Array
) -> jax.Array:
    """``[B]``: the mean over the critics of ``|Q_i(s, a) - y|`` (RLlib's SAC priorities).

    Computed as :func:`sac_loss` computes them, for the module's params and
    target critics; ``key`` draws ``a'`` for ``Box`` actions.
    """
    ctx = module_context(model.apply, module, key)
    terms = sac_terms(model.distribution, module.params, batch, ctx)
    return jnp.abs(terms.q_taken - terms.target[None]).mean(axis=0)


def critic_polyak_update(tau: ScheduleLike = 5e-3) -> AdditionalUpdate:
    """Polyak step of the target critics after every gradient step.

    ``extra["target_critic"] <- tau * params["params"]["critic"] + (1 - tau) *
    extra["target_critic"]``, starting from a copy of the critics; ``tau`` is
    the traced hyperparameter ``"tau"``. This is :func:`~jaxlearner.target_update`
    with ``select`` picking the critics.
    """
    return target_update(tau, target=TARGET, select=_critics, after="grad_step")


def _critics(params: Params) -> Params:
    return params["params"]["critic"]


def make_learner(
    observation_space: gymnasium.Space, action_space: gymnasium.Space, config: SACConfig
) -> Learner:
    """SAC's learner: one module of actor, critics and temperature, one gradient step per
    ``update``."""
    model = sac_networks(
        observation_space,
        action_space,
        config.hidden_sizes,
        config.activation,
        num_critics=2 if config.twin_q else 1,
        initial_alpha=config.initial_alpha,
        ortho_init=config.ortho_init,
        log_std_range=config.log_std_range,
        log_std_bound=config.log_std_bound,
    )
    distribution = model.distribution
    action_dtype = jnp.int32 if distribution.is_discrete else jnp.float32
    spec = replay_module_spec(
        model,
        sac_loss(distribution, config.td_error_loss_fn),
        observation_space,
        config,
        optimizers={
            "actor": config_adam(config, config.actor_lr),
            "critic": config_adam(config, config.critic_lr),
            "temperature": config_adam(config, config.alpha_lr),
        },
        hyperparams={"target_entropy": target_entropy_for(action_space, config.target_entropy)},
        additional_updates=[critic_polyak_update(config.tau)],
    )
    layout = replay_layout(
        observation_space, distribution.action_shape, action_dtype, config.prioritized_replay
    )
    return single_module_learner("sac", observation_space, action_space, config, spec, layout)


def make_algorithm(
    learner: Learner, action_space: gymnasium.Space, config: SACConfig
) -> OffPolicyAlgorithm:
    """SAC around ``learner`` (one of :func:`make_learner`): actions sampled from the
    learner's own squashed Gaussian (or categorical) policy to explore, its mode to
    evaluate, and the critics' TD errors for prioritized replay."""
    model = learner.specs[MODULE_ID].model
    discrete = model.distribution.is_discrete
    uniform_until = 0
    if config.warmup_actions == "uniform":
        uniform_until = config.num_steps_sampled_before_learning_starts
    act = _act(model, int(action_space.start) if discrete else 0, uniform_until)
    action_dtype = jnp.int32 if discrete else jnp.float32
    return off_policy_algorithm(
        "sac",
        learner,
        config,
        explore_and_exploit(act),
        action_dtype,
        lambda module, batch, key: sac_td_errors(model, module, batch, key),
    )


def _act(model: SACNetworks, start: int, uniform_until: int) -> Callable:
    """``act(module, obs, key, deterministic)``: a sample (or the mode) of the policy; a
    ``Discrete`` space's ``start`` is added for the environment, the index trained on.

    A sample is drawn uniformly from the action space instead (SB3's warm-up) while the module
    has trained on fewer than ``uniform_until`` env steps: before its first update, since the
    first update counts every env step collected until then."""

    def act(module: ModuleState, obs: jax.Array, key: jax.Array, deterministic: bool):
        dist_inputs = model.apply(module.params, obs, method="policy")
        policy = make_distribution(model.distribution, dist_inputs)
        actions = policy.mode() if deterministic else policy.sample(key)
        if uniform_until and not deterministic:
            # A key folded from the sample's: the policy's own samples stay as they were.
            uniform = uniform_actions(
                model.distribution, actions.shape[:1], jax.random.fold_in(key, 1)
            )
            actions = jnp.where(module.env_steps < uniform_until, uniform, actions)
        if start == 0:
            return actions, {}
        return actions + start, {"actions": actions}

    return act


RECIPE = BuiltinAlgorithm("sac", SACConfig, make_learner, make_algorithm)
"""SAC's registry entry: its ``learner``, ``build`` and ``algorithm_for``."""

build, sac = register_builtin(
    RECIPE,
    OffPolicyAlgorithm,
    action_space=(
        "a bounded 1-D ``Box`` (tanh-Gaussian actor) or a ``Discrete`` (categorical actor; "
        "a ``start`` offset is added to the actions sent to the environment)."
    ),
    type_error="for other action spaces.",
    doc=RECIPE.learner_doc(
        "Its optimizers are ``actor``, ``critic`` and ``temperature``; it trains on whole "
        "replay batches, one gradient step per ``update``.",
        env_id="Pendulum-v1",
    ),
)
