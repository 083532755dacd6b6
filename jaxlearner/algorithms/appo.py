"""APPO (IMPALA with PPO's clipped surrogate), with RLlib's semantics and V-trace targets.

Espeholt et al. 2018 (IMPALA, V-trace), https://arxiv.org/abs/1802.01561; the
clipped surrogate of Schulman et al. 2017, https://arxiv.org/abs/1707.06347.
Field names and defaults follow RLlib's ``APPOConfig`` (new API stack):

================================  ==========  ==============================================
field                             default     meaning (RLlib's name where it differs)
================================  ==========  ==============================================
``lr``                            5e-4        Adam learning rate; constant or piecewise schedule
``gamma``                         0.99        discount
``lambda_``                       1.0         V-trace's trace coefficient (``c_s = lambda_ *
                                              min(1, rho_s)``)
``vtrace_clip_rho_threshold``     1.0         ``rho_bar``, the clip of ``rho`` in the targets
``vtrace_clip_pg_rho_threshold``  1.0         the clip of ``rho`` in the pg advantages
``clip_param``                    0.4         surrogate clip ``epsilon`` (schedulable)
``vf_loss_coeff``                 0.5         weight of ``0.5 * (V - vs)^2``
``entropy_coeff``                 0.01        entropy bonus (schedulable)
``use_kl_loss``                   False       add ``kl_coeff * KL(old || new)``
``kl_coeff``                      1.0         initial KL coefficient, adapted after each update
``kl_target``                     0.01        x1.5 above 2x target, x0.5 below 0.5x target
``tau``                           1.0         the old policy after each update:
                                              ``old <- tau * params + (1 - tau) * old``
``grad_clip``                     40.0        clip threshold (``grad_clip_by``: global_norm)
``rollout_fragment_length``       50          ``L``: the length of the sequences trained on
``train_batch_size``              500         env steps per training iteration, at least
                                              (whole sequences per env: see below)
``minibatch_size``                None        env steps per minibatch (a multiple of ``L``);
                                              ``None``: the whole batch
``num_epochs``                    1
``shuffle``                       True        shuffle the sequences each epoch
``policy_lag``                    0           collect with the params of this many updates
                                              ago (jaxlearner's; RLlib's lag is asynchrony)
``vf_share_layers``               False       one encoder for policy and value
``hidden_sizes``                  (256, 256)  ``fcnet_hiddens``
``activation``                    "tanh"      ``fcnet_activation``
``head_hidden_sizes``             ()          ``head_fcnet_hiddens``
``head_activation``               "relu"      ``head_fcnet_activation``
``log_std_init``                  0.0         initial state-independent log-std (Box actions)
``ortho_init``                    True        orthogonal init (gain sqrt(2) hidden, 0.01
                                              policy, 1 value); False: PyTorch's default
                                              (SB3's ``ortho_init``)
``conv_padding``                  "same"      the CNN's padding for images ("valid": Nature's)
``conv_filters``                  None        the CNN's ``(out_channels, kernel, stride)``
                                              layers; None: the Nature DQN's
                                              (): no CNN, pixels flattened
``norm_obs``, ``norm_reward``     False       observation normalization and reward scaling,
``clip_obs``, ``clip_reward``     10.0        as PPO's (SB3's ``VecNormalize`` names; see
``num_envs_per_env_runner``       1           ``trajectories.normalization``)
================================  ==========  ==============================================

A rollout of ``[T, N]`` steps is cut into ``T / L * N`` sequences of ``L`` steps
of one environment each (rows ``[L, ...]``). Each of the ``N`` environments collects
the fewest whole sequences that make at least ``train_batch_size`` env steps in
all, ``T = ceil(train_batch_size / (N * L)) * L``, as RLlib's samplers collect
whole fragments until they hold ``train_batch_size`` steps: RLlib's defaults
(500 and ``L = 50``) on the :func:`~jaxlearner.Trainer`'s 8 environments collect
2 sequences per environment, 800 env steps; a ``train_batch_size`` of ``N``
times a multiple of ``L`` is collected exactly. Minibatches take whole sequences, so
the loss can run :func:`~jaxlearner.algorithms.trajectories.returns.vtrace` backwards in time
over each. Inside the loss, from the current params: the values of every
observation and next observation; from the *old* policy ``pi_old`` (the module's
``extra["old_params"]``, the params at the start of this update with ``tau = 1``,
RLlib's target network): the importance ratios ``rho = pi_old(a|x) / mu(a|x)``
against the behaviour policy ``mu`` whose log-probabilities the rollout carries.
V-trace gives the value targets ``vs`` and advantages ``A``, then::

    r = pi(a|x) / pi_old(a|x)
    total = mean(-min(r * A, clip(r, 1 - clip_param, 1 + clip_param) * A)
                 + vf_loss_coeff * 0.5 * (V - vs)^2 - entropy_coeff * entropy)
            [+ kl_coeff * mean(KL(pi_old || pi))]

At ``r = 1`` (the first gradient step of an update) the gradient is IMPALA's,
``min(1, rho) * (q - V) * grad log pi``. RLlib additionally multiplies ``r`` by
``clip(rho, 0, 2)``, applying the importance weight a second time; here it
enters once, through V-trace's advantages. ``policy_lag`` makes
:func:`~jaxlearner.Trainer` collect with stale params, so ``mu != pi_old`` is
exercised without asynchronous workers.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.algorithms.algorithm import (
    MODULE_ID,
    Experience,
    OnPolicyAlgorithm,
    PostprocessFn,
    algorithm_fields,
)
from jaxlearner.algorithms.builtin import BuiltinAlgorithm, register_builtin, single_module_learner
from jaxlearner.algorithms.config import (
    check_fraction,
    check_minibatch_size,
    check_positive,
    check_positive_int,
    config_adam,
)
from jaxlearner.algorithms.networks.acting import explore_and_exploit, policy_actions
from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec, make_distribution
from jaxlearner.algorithms.networks.encoders import ConvFilters
from jaxlearner.algorithms.networks.heads import distribution_for
from jaxlearner.algorithms.networks.models import actor_critic, actor_critic_options
from jaxlearner.algorithms.networks.spaces import bounds, zero_observation
from jaxlearner.algorithms.objectives.ppo_objective import (
    check_ppo_fields,
    clipped_surrogate,
    explained_variance,
)
from jaxlearner.algorithms.trajectories.normalization import Normalization, normalization_for
from jaxlearner.algorithms.trajectories.returns import vtrace
from jaxlearner.core.additional_updates import adaptive_kl_coeff, polyak_update
from jaxlearner.core.context import LossContext
from jaxlearner.core.learner import Learner
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.schedules import ScheduleLike
from jaxlearner.core.state import ModuleState
from jaxlearner.types import Batch, Model, Params

OLD_PARAMS = "old_params"
"""The ``extra`` entry holding the old policy's params (RLlib's target network)."""


@dataclasses.dataclass(frozen=True)
class APPOConfig:
    """APPO's configuration; see the module docstring for each field and RLlib's default.

    Raises:
      ValueError: for values out of range, with the value received; for a
        ``train_batch_size`` or ``minibatch_size`` that is not a multiple of
        ``rollout_fragment_length``.

    Example:
      >>> APPOConfig(rollout_fragment_length=32, train_batch_size=512, policy_lag=1)
      ... # doctest: +ELLIPSIS
      APPOConfig(lr=0.0005, ...)
    """

    lr: ScheduleLike = 5e-4
    gamma: float = 0.99
    lambda_: float = 1.0
    vtrace_clip_rho_threshold: float = 1.0
    vtrace_clip_pg_rho_threshold: float = 1.0
    clip_param: ScheduleLike = 0.4
    vf_loss_coeff: float = 0.5
    entropy_coeff: ScheduleLike = 0.01
    use_kl_loss: bool = False
    kl_coeff: float = 1.0
    kl_target: float = 0.01
    tau: float = 1.0
    grad_clip: float | None = 40.0
    grad_clip_by: str = "global_norm"
    rollout_fragment_length: int = 50
    train_batch_size: int = 500
    minibatch_size: int | None = None
    num_epochs: int = 1
    shuffle: bool = True
    policy_lag: int = 0
    vf_share_layers: bool = False
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "tanh"
    head_hidden_sizes: tuple[int, ...] = ()
    head_activation: str = "relu"
    log_std_init: float = 0.0
    ortho_init: bool = True
    conv_padding: str = "same"
    conv_filters: ConvFilters | None = None
    norm_obs: bool = False
    norm_reward: bool = False
    clip_obs: float = 10.0
    clip_reward: float = 10.0
    num_envs_per_env_runner: int = 1

    def __post_init__(self) -> None:
        check_ppo_fields(self)
        check_fraction("APPOConfig", tau=self.tau)
        check_positive(
            "APPOConfig",
            vtrace_clip_rho_threshold=self.vtrace_clip_rho_threshold,
            vtrace_clip_pg_rho_threshold=self.vtrace_clip_pg_rho_threshold,
        )
        check_positive_int(
            "APPOConfig",
            rollout_fragment_length=self.rollout_fragment_length,
            train_batch_size=self.train_batch_size,
            num_epochs=self.num_epochs,
        )
        if self.minibatch_size is not None:
            check_positive_int("APPOConfig", minibatch_size=self.minibatch_size)
        lag = self.policy_lag
        if isinstance(lag, bool) or not isinstance(lag, int) or lag < 0:
            raise ValueError(f"APPOConfig.policy_lag must be an int >= 0; got {self.policy_lag!r}.")
        length = self.rollout_fragment_length
        for name in ("train_batch_size", "minibatch_size"):
            value = getattr(self, name)
            if value is not None and value % length:
                raise ValueError(
                    f"APPOConfig.{name} ({value}) must be a multiple of rollout_fragment_length "
                    f"({length}): batches are whole sequences of {length} steps."
                )
        check_minibatch_size(self)


def appo_loss(distribution: DistributionSpec, use_kl_loss: bool):
    """APPO's loss for a policy with ``distribution``; ``loss(params, batch, ctx)``.

    The batch holds ``[B, L]`` sequences (one environment's consecutive steps
    per row): ``obs`` and ``next_obs`` ``[B, L, ...]``, ``actions``, ``logp``
    (the behaviour policy's log-probabilities), ``rewards``, ``terminated``,
    ``truncated`` (0/1 floats) and ``mask`` (1 for steps to train on).
    ``ctx.apply(params, obs [M, ...])`` returns ``(dist_inputs [M, D], values
    [M])``; the old policy's params are ``ctx.extra["old_params"]``.
    Coefficients come from ``ctx.hyperparams`` (``gamma``, ``lambda_``,
    ``vtrace_clip_rho_threshold``, ``vtrace_clip_pg_rho_threshold``,
    ``clip_param``, ``vf_loss_coeff``, ``entropy_coeff``) and the KL coefficient
    from ``ctx.extra["kl_coeff"]``. V-trace runs over each row's ``L`` steps; the
    last step of a row bootstraps on the value of its next observation.

    Returns:
      A loss returning ``(total, metrics)`` with ``policy_loss``, ``vf_loss``,
      ``entropy``, ``mean_kl`` (old to new), ``clip_fraction``,
      ``vf_explained_var``, ``mean_rho`` and ``mean_abs_log_rho`` (of
      ``pi_old / mu``: 1 and 0 on-policy).

    Example:
      >>> loss = appo_loss(DistributionSpec("categorical", (2,)), use_kl_loss=False)
      >>> total, metrics = loss(params, batch, ctx)                  # doctest: +SKIP
    """

    def loss(params: Params, batch: Batch, ctx: LossContext) -> tuple[jax.Array, dict]:
        mask = batch["mask"]
        rows, length = mask.shape
        flat = lambda x: x.reshape(rows * length, *x.shape[2:])
        # One forward pass over the observations and next observations together.
        dist_inputs, values = ctx.apply(
            params, jnp.concatenate([flat(batch["obs"]), flat(batch["next_obs"])])
        )
        steps = rows * length
        values, next_values = values[:steps].reshape(mask.shape), values[steps:]
        policy = make_distribution(distribution, dist_inputs[:steps])
        old_inputs = jax.lax.stop_gradient(ctx.apply(ctx.extra[OLD_PARAMS], flat(batch["obs"]))[0])
        old = make_distribution(distribution, old_inputs)
        actions = flat(batch["actions"])
        logp = policy.log_prob(actions).reshape(mask.shape)
        old_logp = old.log_prob(actions).reshape(mask.shape)
        hp = ctx.hyperparams
        log_rhos = old_logp - batch["logp"]
        time_major = lambda x: jnp.swapaxes(x, 0, 1)
        targets = vtrace(
            time_major(values),
            time_major(next_values.reshape(mask.shape)),
            time_major(batch["rewards"]),
            time_major(hp["gamma"] * (1.0 - batch["terminated"])),
            time_major(log_rhos),
            time_major(batch["truncated"]),
            lambda_=hp["lambda_"],
            clip_rho_threshold=hp["vtrace_clip_rho_threshold"],
            clip_pg_rho_threshold=hp["vtrace_clip_pg_rho_threshold"],
        )
        vs, advantages = time_major(targets.vs), time_major(targets.pg_advantages)
        count = jnp.maximum(mask.sum(), 1.0)
        mean = lambda x: (x * mask).sum() / count
        ratio = jnp.exp(logp - old_logp)
        clip = hp["clip_param"]
        surrogate = clipped_surrogate(ratio, advantages, clip)
        vf_loss = 0.5 * (values - vs) ** 2
        entropy = policy.entropy().reshape(mask.shape)
        kl = old.kl(policy).reshape(mask.shape)
        total = mean(-surrogate + hp["vf_loss_coeff"] * vf_loss - hp["entropy_coeff"] * entropy)
        if use_kl_loss:
            total = total + ctx.extra["kl_coeff"] * mean(kl)
        explained = explained_variance(vs, values, mean)
        return total, {
            "policy_loss": -mean(surrogate),
            "vf_loss": mean(vf_loss),
            "entropy": mean(entropy),
            "mean_kl": mean(kl),
            "clip_fraction": mean((jnp.abs(ratio - 1.0) > clip).astype(jnp.float32)),
            "vf_explained_var": explained,
            "mean_rho": mean(jnp.exp(log_rhos)),
            "mean_abs_log_rho": mean(jnp.abs(log_rhos)),
        }

    return loss


def make_learner(
    observation_space: gymnasium.Space, action_space: gymnasium.Space, config: APPOConfig
) -> Learner:
    """APPO's learner: one actor-critic module trained on whole sequences."""
    model = actor_critic(observation_space, action_space, **actor_critic_options(config))
    distribution = distribution_for(action_space)
    length = config.rollout_fragment_length
    observers = normalization_for(config, config.gamma).observers(observation_space)
    return single_module_learner(
        "appo",
        observation_space,
        action_space,
        config,
        _module_spec(model, distribution, config, observers),
        _batch_layout(observation_space, distribution, length),
        minibatch_size=None if config.minibatch_size is None else config.minibatch_size // length,
        num_epochs=config.num_epochs,
        shuffle=config.shuffle,
    )


def _module_spec(
    model: Model, distribution: DistributionSpec, config: APPOConfig, observers: tuple
) -> ModuleSpec:
    """The module: APPO's loss, Adam, the coefficients, the old policy and the KL coefficient."""
    return ModuleSpec(
        model,
        appo_loss(distribution, config.use_kl_loss),
        config_adam(config),
        hyperparams={
            "gamma": config.gamma,
            "lambda_": config.lambda_,
            "vtrace_clip_rho_threshold": config.vtrace_clip_rho_threshold,
            "vtrace_clip_pg_rho_threshold": config.vtrace_clip_pg_rho_threshold,
            "clip_param": config.clip_param,
            "vf_loss_coeff": config.vf_loss_coeff,
            "entropy_coeff": config.entropy_coeff,
        },
        additional_updates=[
            polyak_update(config.tau, target=OLD_PARAMS, after="update"),
            adaptive_kl_coeff(config.kl_coeff, config.kl_target),
        ],
        init_input=lambda batch: batch["obs"][:, 0],
        metric_reductions={"mean_kl": "mean"},
        observers=observers,
    )


def make_algorithm(
    learner: Learner, action_space: gymnasium.Space, config: APPOConfig
) -> OnPolicyAlgorithm:
    """APPO around ``learner`` (one of :func:`make_learner`): act functions and postprocess,
    which apply the learner's own model; nothing is built but these functions."""
    model = learner.specs[MODULE_ID].model
    norm = normalization_for(config, config.gamma)
    act = _act(model, distribution_for(action_space), bounds(action_space), norm)
    return OnPolicyAlgorithm(
        **algorithm_fields("appo", learner, config, explore_and_exploit(act)),
        rollout_steps=functools.partial(_rollout_steps, config, norm),
        postprocess=_postprocess(config.rollout_fragment_length, norm),
        policy_lag=config.policy_lag,
    )


def _act(
    model: Model, distribution: DistributionSpec, box: tuple | None, norm: Normalization
) -> Callable:
    """``act(module, obs, key, deterministic)``: sample (or the mode), clipped to a ``Box``;
    extras ``actions`` (unclipped) and ``logp``, the behaviour policy's; observations
    normalized with the module's statistics."""

    def act(module: ModuleState, obs: jax.Array, key: jax.Array, deterministic: bool):
        obs = norm.observation(module.extra, obs)
        dist_inputs, _ = model.apply(module.params, obs)
        return policy_actions(distribution, box, dist_inputs, key, deterministic)

    return act


def _postprocess(length: int, norm: Normalization) -> PostprocessFn:
    """Cuts a ``[T, N]`` rollout into ``T / length * N`` rows of ``length`` steps of one env.

    Row ``k * N + n`` holds env ``n``'s steps ``k * length`` to ``(k + 1) * length - 1``.
    Only the normalization statistics come from the module: observations, next observations
    and rewards with the statistics that include this batch, so the loss values both ends of
    a row on one normalization; targets are the loss's, from the current params.
    """

    def postprocess(module: ModuleState, experience: Experience) -> Batch:
        experience = norm.experience(module.extra, experience)
        batch = {
            "obs": experience["obs"],
            "next_obs": experience["next_obs"],
            "actions": experience["actions"],
            "logp": experience["logp"],
            "rewards": experience["rewards"].astype(jnp.float32),
            "terminated": experience["terminated"].astype(jnp.float32),
            "truncated": experience["truncated"].astype(jnp.float32),
            "mask": experience["valid"].astype(jnp.float32),
        }
        return jax.tree.map(functools.partial(_sequences, length), batch)

    return postprocess


def _sequences(length: int, x: jax.Array) -> jax.Array:
    """``[T, N, ...] -> [T / length * N, length, ...]``, each row one env's consecutive steps."""
    steps, envs = x.shape[:2]
    x = x.reshape(steps // length, length, envs, *x.shape[2:])
    return jnp.swapaxes(x, 1, 2).reshape(steps // length * envs, length, *x.shape[3:])


def _rollout_steps(config: APPOConfig, norm: Normalization, num_envs: int) -> int:
    """Steps per environment: the fewest whole sequences making ``train_batch_size`` in all.

    Example: 500 env steps in sequences of 50 over 8 environments is
    ``ceil(500 / 400) = 2`` sequences each, 100 steps per environment, 800 in all.
    """
    norm.check_num_envs("APPOConfig", num_envs)
    length = config.rollout_fragment_length
    sequences = -(-config.train_batch_size // (num_envs * length))  # ceil, at least 1
    return sequences * length


RECIPE = BuiltinAlgorithm("appo", APPOConfig, make_learner, make_algorithm)
"""APPO's registry entry: its ``learner``, ``build`` and ``algorithm_for``."""

build, appo = register_builtin(
    RECIPE,
    OnPolicyAlgorithm,
    doc=RECIPE.learner_doc(
        "Its rows are sequences of ``rollout_fragment_length`` steps.",
        config='{"rollout_fragment_length": 32, "train_batch_size": 256}',
    ),
)


def _batch_layout(
    observation_space: gymnasium.Space, distribution: DistributionSpec, length: int
) -> dict:
    obs = zero_observation(observation_space)
    actions = np.zeros(
        distribution.action_shape, np.int32 if distribution.is_discrete else np.float32
    )
    step = np.zeros((length,), np.float32)
    sequence = lambda x: np.zeros((length, *x.shape), x.dtype)
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
        {
            "obs": sequence(obs),
            "next_obs": sequence(obs),
            "actions": sequence(actions),
            "logp": step,
            "rewards": step,
            "terminated": step,
            "truncated": step,
            "mask": step,
        },
    )
