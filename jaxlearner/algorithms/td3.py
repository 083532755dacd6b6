"""TD3: twin critics, target policy smoothing, delayed actor and target updates.

Fujimoto, van Hoof and Meger 2018, "Addressing Function Approximation Error in
Actor-Critic Methods", https://arxiv.org/abs/1802.09477, as SB3's ``TD3`` (and RLlib's
old-stack ``TD3Config``) run it. With ``mu`` the deterministic actor (``tanh``, in
``[-1, 1]`` per action dimension) and ``(low, high)`` the ``Box``'s bounds:

* acting: ``low + (a + 1) / 2 * (high - low)`` for ``a = clip(mu(s) + eps, -1, 1)``,
  ``eps ~ N(0, exploration_noise^2)``, and ``a = mu(s)`` to evaluate; before learning starts,
  ``a`` uniform in ``[-1, 1]`` (``warmup_actions="uniform"``, SB3's warm-up). The replay
  buffer keeps ``a`` (the action in ``[-1, 1]``), as SB3's keeps its scaled action;
* critics: ``sum_i mean(mask * weights * L(Q_i(s, a) - y))`` with
  ``y = rewards + discounts * min_i Q'_i(s', clip(mu'(s') + clip(xi, -c, c), -1, 1))``,
  ``xi ~ N(0, target_noise^2)``, ``c = target_noise_clip`` (target policy smoothing) and
  ``L`` the squared error (``td_error_loss_fn="mse"``, SB3's ``F.mse_loss``) or Huber;
* actor: ``-mean(mask * Q_1(s, mu(s)))`` with the critics held fixed, applied every
  ``policy_delay``-th gradient step only (:func:`delayed`: the actor's Adam neither moves nor
  advances its moments in between, as SB3 steps its actor optimizer);
* targets: ``mu'`` and ``Q'`` (``extra["target_params"]``, all of the module's params) take
  one polyak step of ``tau`` on the same steps (``jl.target_update`` with
  ``period=policy_delay`` over the ``grad_steps`` counter).

Config fields (SB3's defaults where RLlib has no new-stack TD3; RLlib's flat names for
the fields shared with :mod:`~jaxlearner.algorithms.sac`):

============================================  ===========  ===================================
field                                         default      meaning (SB3's name)
============================================  ===========  ===================================
``actor_lr``, ``critic_lr``                   1e-3         Adam learning rates
                                                           (``learning_rate``)
``gamma``                                     0.99         discount
``tau``                                       5e-3         polyak step of the targets
``policy_delay``                              2            gradient steps per actor and target
                                                           update
``target_noise``                              0.2          ``target_policy_noise``
``target_noise_clip``                         0.5          ``target_noise_clip``
``exploration_noise``                         0.1          std of the Gaussian action noise
                                                           (``NormalActionNoise``'s sigma)
``train_batch_size``                          256          ``batch_size``
``replay_buffer_capacity``                    1000000      ``buffer_size``
``num_steps_sampled_before_learning_starts``  100          ``learning_starts``
``warmup_actions``                            "uniform"    "uniform" (SB3) or "policy" (the
                                                           noisy actor from the first step)
``training_intensity``                        None         rows trained on per env step
                                                           (None: one update per env step)
``rollout_fragment_length``                   1            ``train_freq``
``n_step``                                    1            n-step targets
``hidden_sizes``                              (400, 300)   ``net_arch``: the actor's and each
                                                           critic's layers
``activation``                                "relu"       ``activation_fn``
``ortho_init``                                True         orthogonal init; False: PyTorch's
                                                           default (SB3's)
``td_error_loss_fn``                          "mse"        critics' loss: "mse" or "huber"
``grad_clip``, ``grad_clip_by``               None, ...    clipping of each optimizer
``prioritized_replay``, ``_alpha``,           False, ...   as :mod:`~jaxlearner.algorithms.sac`
``_beta``, ``_eps``
``replay_frame_stack``                        None         frames kept once per frame
``norm_obs``, ``clip_obs``, ``norm_reward``,  False, ...   running normalization, as SAC's
``clip_reward``, ``num_envs_per_env_runner``
============================================  ===========  ===================================

One module, ``"default_policy"`` (:class:`TD3Networks`), with two named optimizers,
``actor`` and ``critic``, each following the gradient of its own term of :func:`td3_loss`.
Both terms are computed from the params before the step (SB3 computes the actor's after the
critics' step of the same update): one compiled program, no second pass.

Example:
  >>> import gymnasium as gym, jaxlearner as jl
  >>> env = gym.make("Pendulum-v1")
  >>> td3 = jl.algorithms.build("td3", env.observation_space, env.action_space)
  >>> trainer = jl.Trainer(td3.learner, "Pendulum-v1", num_envs=1)   # doctest: +SKIP
  >>> stats = trainer.step()                                          # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn

from jaxlearner.algorithms.algorithm import MODULE_ID, OffPolicyAlgorithm
from jaxlearner.algorithms.builtin import BuiltinAlgorithm, register_builtin, single_module_learner
from jaxlearner.algorithms.config import (
    check_bool,
    check_choice,
    check_learning_rates,
    check_non_negative,
    check_positive_int,
    freeze_schedule,
)
from jaxlearner.algorithms.networks.acting import WARMUP_ACTIONS, explore_and_exploit
from jaxlearner.algorithms.networks.encoders import dense, encoder_for
from jaxlearner.algorithms.networks.models import state_action_critics
from jaxlearner.algorithms.replay.off_policy import (
    masked_mean,
    module_context,
    off_policy_algorithm,
    replay_layout,
    replay_module_spec,
    td_error_loss,
)
from jaxlearner.algorithms.replay.off_policy_config import TD_ERROR_LOSSES, check_off_policy_config
from jaxlearner.core.additional_updates import target_update
from jaxlearner.core.context import LossContext
from jaxlearner.core.learner import Learner
from jaxlearner.core.optimizer import Optimizer
from jaxlearner.core.schedules import ScheduleLike
from jaxlearner.core.state import ModuleState
from jaxlearner.types import Batch, Params

TARGET = "target_params"
"""The ``extra`` entry holding the target actor and critics (a copy of all the params)."""


@dataclasses.dataclass(frozen=True)
class TD3Config:
    """TD3's configuration; see the module docstring for each field and its default."""

    actor_lr: ScheduleLike = 1e-3
    critic_lr: ScheduleLike = 1e-3
    gamma: float = 0.99
    tau: ScheduleLike = 5e-3
    policy_delay: int = 2
    target_noise: float = 0.2
    target_noise_clip: float = 0.5
    exploration_noise: float = 0.1
    train_batch_size: int = 256
    replay_buffer_capacity: int = 1_000_000
    num_steps_sampled_before_learning_starts: int = 100
    warmup_actions: str = "uniform"
    training_intensity: float | None = None
    rollout_fragment_length: int = 1
    n_step: int = 1
    hidden_sizes: tuple[int, ...] = (400, 300)
    activation: str = "relu"
    ortho_init: bool = True
    td_error_loss_fn: str = "mse"
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
        owner = "TD3Config"
        for name in ("actor_lr", "critic_lr", "tau"):
            object.__setattr__(self, name, freeze_schedule(getattr(self, name)))
        check_off_policy_config(owner, self)
        check_learning_rates(owner, actor_lr=self.actor_lr, critic_lr=self.critic_lr)
        check_positive_int(owner, policy_delay=self.policy_delay)
        check_non_negative(
            owner,
            target_noise=self.target_noise,
            target_noise_clip=self.target_noise_clip,
            exploration_noise=self.exploration_noise,
        )
        check_choice(owner, "warmup_actions", self.warmup_actions, WARMUP_ACTIONS)
        check_bool(owner, ortho_init=self.ortho_init)
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))


class TD3Networks(nn.Module):
    """TD3's deterministic actor and stacked critics in one module.

    Attributes:
      actor: ``obs [..., *obs] -> pre-tanh actions [..., d]``.
      critic: stacked ``Q(s, a)``: ``(obs, action [..., d]) -> [C, ...]``.

    Example:
      >>> model = td3_networks(gymnasium.spaces.Box(-1, 1, (3,)), gymnasium.spaces.Box(-2, 2, (1,)))
      >>> params = model.init(jax.random.key(0), jnp.zeros((8, 3)))
      >>> model.apply(params, jnp.zeros((8, 3)), method="policy").shape        # in [-1, 1]
      (8, 1)
      >>> model.apply(params, jnp.zeros((8, 3)), jnp.zeros((8, 1)), method="q_values").shape
      (2, 8)
    """

    actor: nn.Module
    critic: nn.Module

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(mu(obs) [..., d], Q(obs, mu(obs)) [C, ...])``: creates every param."""
        actions = self.policy(obs)
        return actions, self.critic(obs, actions)

    def policy(self, obs: jax.Array) -> jax.Array:
        """``mu(obs)``: actions ``[..., d]`` in ``[-1, 1]``."""
        return jnp.tanh(self.actor(obs))

    def q_values(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        """Every critic's ``Q(obs, action)`` ``[C, ...]``, actions ``[..., d]`` in ``[-1, 1]``."""
        if self.is_initializing():
            self(obs)
        return self.critic(obs, action)


class _Actor(nn.Module):
    encoder: nn.Module
    action_size: int
    ortho_init: bool

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        features = self.encoder(obs)
        return dense(self.action_size, 0.01, "mu", features.shape[-1], self.ortho_init)(features)


def td3_networks(
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    hidden_sizes: Sequence[int] = (400, 300),
    activation: str = "relu",
    num_critics: int = 2,
    ortho_init: bool = True,
) -> TD3Networks:
    """:class:`TD3Networks` for two gymnasium spaces: an MLP actor with a ``tanh`` output and
    ``num_critics`` critics on the observation and action concatenated (SB3's ``TD3Policy``).

    Raises:
      TypeError: unless ``action_space`` is a 1-D ``Box`` with finite bounds.
    """
    _check_action_space(action_space)
    (size,) = action_space.shape
    actor = _Actor(
        encoder_for(observation_space, hidden_sizes, activation, ortho_init), size, ortho_init
    )
    critic = state_action_critics(
        observation_space, hidden_sizes, activation, ortho_init, num_critics
    )
    return TD3Networks(actor, critic)


def _check_action_space(action_space: gymnasium.Space) -> None:
    box = gymnasium.spaces.Box
    if not isinstance(action_space, box) or len(action_space.shape) != 1:
        raise TypeError(
            f"TD3 needs a 1-D Box action space (continuous actions); got {action_space!r}. "
            "For discrete actions use dqn or sac."
        )
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        raise TypeError(
            f"TD3 scales its tanh actor into the Box's bounds, which must be finite; got "
            f"{action_space!r}."
        )


def td3_loss(
    target_noise: float = 0.2,
    target_noise_clip: float = 0.5,
    td_error_loss_fn: str = "mse",
    policy_delay: int = 1,
):
    """TD3's per-optimizer loss; ``loss(params, batch, ctx) -> ({"actor", "critic"}, metrics)``.

    ``batch`` holds ``[B]`` replay rows (``obs``, ``actions`` in ``[-1, 1]``, ``rewards``,
    ``next_obs``, ``discounts``, ``mask``; ``weights`` with prioritized replay), ``ctx.apply``
    is a :class:`TD3Networks`' ``apply``, the targets are ``ctx.extra["target_params"]`` and
    ``ctx.key`` draws the target policy's smoothing noise. Metrics: ``policy_loss``,
    ``qf_loss``, ``qf_mean``, ``qf_max``, ``qf_min``, ``td_error_mean``, ``target_mean``.

    With ``policy_delay > 1`` the actor's term is computed (forward and backward) only on
    the gradient steps whose actor update :func:`delayed` applies, the ``policy_delay``-th,
    ``2 * policy_delay``-th, ... (``ctx.counters["grad_steps"]``, the steps taken before this
    one, is ``policy_delay - 1`` modulo ``policy_delay``); on the others it is 0, and so is
    ``policy_loss``.

    Example:
      >>> loss = td3_loss(target_noise=0.2, target_noise_clip=0.5)
      >>> terms, metrics = loss(params, batch, ctx)                       # doctest: +SKIP
    """
    check_choice("td3_loss", "td_error_loss_fn", td_error_loss_fn, TD_ERROR_LOSSES)

    def loss(params: Params, batch: Batch, ctx: LossContext) -> tuple[dict, dict]:
        mask = batch["mask"]
        q_taken, target = _critic_terms(params, batch, ctx, target_noise, target_noise_clip)
        td_errors = q_taken - target[None]  # [C, B]
        weights = batch.get("weights", jnp.ones_like(mask))
        critic_loss = sum(
            masked_mean(weights * td_error_loss(td_errors[i], td_error_loss_fn), mask)
            for i in range(td_errors.shape[0])
        )
        losses = {"actor": _actor_term(params, batch, ctx, policy_delay), "critic": critic_loss}
        valid = mask > 0
        return losses, {
            "policy_loss": losses["actor"],
            "qf_loss": critic_loss,
            "qf_mean": masked_mean(q_taken[0], mask),
            "qf_max": jnp.max(jnp.where(valid, q_taken[0], -jnp.inf)),
            "qf_min": jnp.min(jnp.where(valid, q_taken[0], jnp.inf)),
            "td_error_mean": masked_mean(jnp.abs(td_errors).mean(0), mask),
            "target_mean": masked_mean(target, mask),
        }

    return loss


def _actor_term(params: Params, batch: Batch, ctx: LossContext, policy_delay: int) -> jax.Array:
    """``-mean(mask * Q_1(s, mu(s)))`` with the critics held fixed, on the steps that update
    the actor (every one when ``policy_delay`` is 1), else 0."""

    def term() -> jax.Array:
        critics = jax.lax.stop_gradient(_critics(params))
        frozen = {"params": {**params["params"], "critic": critics}}
        actions = ctx.apply(params, batch["obs"], method="policy")
        q_policy = ctx.apply(frozen, batch["obs"], actions, method="q_values")[0]
        return -masked_mean(q_policy, batch["mask"])

    if policy_delay == 1:
        return term()
    due = ctx.counters["grad_steps"] % policy_delay == policy_delay - 1
    return jax.lax.cond(due, term, lambda: jnp.zeros((), jnp.float32))


def _critic_terms(
    params: Params, batch: Batch, ctx: LossContext, noise: float, noise_clip: float
) -> tuple[jax.Array, jax.Array]:
    """``Q_i(s, a) [C, B]`` and the gradient-free smoothed target ``y [B]``."""
    target_params = ctx.extra[TARGET]
    next_actions = ctx.apply(target_params, batch["next_obs"], method="policy")
    smoothing = noise * jax.random.normal(ctx.key, next_actions.shape, next_actions.dtype)
    next_actions = jnp.clip(next_actions + jnp.clip(smoothing, -noise_clip, noise_clip), -1, 1)
    next_q = ctx.apply(target_params, batch["next_obs"], next_actions, method="q_values")
    target = jax.lax.stop_gradient(batch["rewards"] + batch["discounts"] * next_q.min(axis=0))
    q_taken = ctx.apply(params, batch["obs"], batch["actions"], method="q_values")
    return q_taken, target


def _critics(params: Params) -> Params:
    return params["params"]["critic"]


def delayed(factory: Callable[..., optax.GradientTransformation], every: int) -> Callable:
    """``factory`` applied on every ``every``-th update only (the ``every``-th, ``2 * every``-th,
    ...): zero updates and an unchanged inner state in between (TD3's delayed actor).

    A factory of ``learning_rate`` for :class:`~jaxlearner.Optimizer`, so the rate stays
    schedulable; ``optax.conditionally_mask`` counts the calls.

    Example:
      >>> actor = jl.Optimizer(delayed(optax.adam, 2), learning_rate=1e-3)  # doctest: +SKIP
    """

    def delayed_factory(learning_rate: float) -> optax.GradientTransformation:
        return optax.conditionally_mask(
            factory(learning_rate), lambda step: step % every == every - 1
        )

    return delayed_factory


def make_learner(
    observation_space: gymnasium.Space, action_space: gymnasium.Space, config: TD3Config
) -> Learner:
    """TD3's learner: one module of actor and twin critics, one gradient step per ``update``."""
    model = td3_networks(
        observation_space,
        action_space,
        config.hidden_sizes,
        config.activation,
        ortho_init=config.ortho_init,
    )
    clip = {"grad_clip": config.grad_clip, "grad_clip_by": config.grad_clip_by}
    spec = replay_module_spec(
        model,
        td3_loss(
            config.target_noise,
            config.target_noise_clip,
            config.td_error_loss_fn,
            config.policy_delay,
        ),
        observation_space,
        config,
        optimizers={
            "actor": Optimizer(
                delayed(optax.adam, config.policy_delay), learning_rate=config.actor_lr, **clip
            ),
            "critic": Optimizer(optax.adam, learning_rate=config.critic_lr, **clip),
        },
        additional_updates=[
            target_update(config.tau, period=config.policy_delay, counter="grad_steps")
        ],
    )
    layout = replay_layout(
        observation_space, action_space.shape, jnp.float32, config.prioritized_replay
    )
    return single_module_learner("td3", observation_space, action_space, config, spec, layout)


def make_algorithm(
    learner: Learner, action_space: gymnasium.Space, config: TD3Config
) -> OffPolicyAlgorithm:
    """TD3 around ``learner`` (one of :func:`make_learner`): the actor with Gaussian noise to
    explore (uniform before learning starts, as SB3), the actor alone to evaluate, and the
    critics' TD errors for prioritized replay."""
    model = learner.specs[MODULE_ID].model
    low = jnp.asarray(action_space.low, jnp.float32)
    high = jnp.asarray(action_space.high, jnp.float32)
    uniform_until = 0
    if config.warmup_actions == "uniform":
        uniform_until = config.num_steps_sampled_before_learning_starts
    noise = config.exploration_noise

    def act(module: ModuleState, obs: jax.Array, key: jax.Array, deterministic: bool):
        actions = model.apply(module.params, obs, method="policy")
        if not deterministic:
            noise_key, uniform_key = jax.random.split(key)
            noisy = actions + noise * jax.random.normal(noise_key, actions.shape, actions.dtype)
            actions = jnp.clip(noisy, -1.0, 1.0)
            if uniform_until:
                uniform = jax.random.uniform(uniform_key, actions.shape, actions.dtype, -1.0, 1.0)
                actions = jnp.where(module.env_steps < uniform_until, uniform, actions)
        return low + (actions + 1.0) * 0.5 * (high - low), {"actions": actions}

    def td_errors(module: ModuleState, batch: Batch, key: jax.Array) -> jax.Array:
        ctx = module_context(model.apply, module, key)
        q_taken, target = _critic_terms(
            module.params, batch, ctx, config.target_noise, config.target_noise_clip
        )
        return jnp.abs(q_taken - target[None]).mean(axis=0)

    return off_policy_algorithm(
        "td3", learner, config, explore_and_exploit(act), jnp.float32, td_errors
    )


RECIPE = BuiltinAlgorithm("td3", TD3Config, make_learner, make_algorithm)
"""TD3's registry entry: its ``learner``, ``build`` and ``algorithm_for``."""

build, td3 = register_builtin(
    RECIPE,
    OffPolicyAlgorithm,
    action_space="a 1-D ``Box`` with finite bounds (the tanh actor is scaled into them).",
    type_error="for other action spaces.",
    doc=RECIPE.learner_doc(
        "Its optimizers are ``actor`` (stepped every ``policy_delay``-th update) and "
        "``critic``; it trains on whole replay batches, one gradient step per ``update``.",
        env_id="Pendulum-v1",
    ),
)
