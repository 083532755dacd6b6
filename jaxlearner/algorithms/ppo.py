"""PPO with RLlib's semantics: clipped surrogate, clipped value loss, adaptive KL penalty.

Schulman et al. 2017, https://arxiv.org/abs/1707.06347. Field names and
defaults follow RLlib's ``PPOConfig`` (new API stack):

==========================  ==============  =====================================================
field                       default         meaning (RLlib's name where it differs)
==========================  ==============  =====================================================
``lr``                      5e-5            Adam learning rate; constant or piecewise schedule
``gamma``                   0.99            discount
``lambda_``                 1.0             GAE lambda
``clip_param``              0.3             surrogate clip ``epsilon`` (schedulable)
``vf_clip_param``           10.0            the *squared* value error is clipped at this
``vf_loss_coeff``           1.0             value loss weight
``entropy_coeff``           0.0             entropy bonus (schedulable)
``use_kl_loss``             True            add ``kl_coeff * KL(old || new)``
``kl_coeff``                0.2             initial KL coefficient, adapted after each update
``kl_target``               0.01            x1.5 above 2x target, x0.5 below 0.5x target
``grad_clip``               None            clip threshold (``grad_clip_by``: global_norm)
``train_batch_size``        4000            env steps per training iteration
``minibatch_size``          128
``num_epochs``              30
``shuffle``                 True            ``shuffle_batch_per_epoch``
``normalize_advantages``    True            standardize over the train batch (RLlib's GAE
                                            connector does this always)
``vf_share_layers``         False           one encoder for policy and value
``hidden_sizes``            (256, 256)      ``fcnet_hiddens``
``activation``              "tanh"          ``fcnet_activation``
==========================  ==============  =====================================================

As in RLlib, ``total = mean(-surrogate + vf_loss_coeff * min((V - V_target)^2,
vf_clip_param) - entropy_coeff * entropy) + kl_coeff * mean(KL)``. GAE
bootstraps on truncation (on the value of the final observation) and not on
termination.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlearner.algorithms.algorithm import Experience, OnPolicyAlgorithm, PostprocessFn
from jaxlearner.algorithms.builtin import BuiltinAlgorithm, recipe_json
from jaxlearner.algorithms.config import (
    check_fraction,
    check_positive,
    check_positive_int,
    check_schedule,
    freeze_schedule,
)
from jaxlearner.algorithms.distribution_spec import DistributionSpec, make_distribution
from jaxlearner.algorithms.models import actor_critic, distribution_for
from jaxlearner.algorithms.returns import gae
from jaxlearner.algorithms.spaces import bounds, zero_observation
from jaxlearner.core.additional_updates import adaptive_kl_coeff
from jaxlearner.core.context import LossContext
from jaxlearner.core.learner import Learner
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.optimizer import CLIP_MODES, Optimizer
from jaxlearner.core.schedules import ScheduleLike
from jaxlearner.core.state import ModuleState
from jaxlearner.types import Batch, Model, Params

MODULE_ID = "default_policy"


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO's configuration; see the module docstring for each field and RLlib's default."""

    lr: ScheduleLike = 5e-5
    gamma: float = 0.99
    lambda_: float = 1.0
    clip_param: ScheduleLike = 0.3
    vf_clip_param: float = 10.0
    vf_loss_coeff: float = 1.0
    entropy_coeff: ScheduleLike = 0.0
    use_kl_loss: bool = True
    kl_coeff: float = 0.2
    kl_target: float = 0.01
    grad_clip: float | None = None
    grad_clip_by: str = "global_norm"
    train_batch_size: int = 4000
    minibatch_size: int = 128
    num_epochs: int = 30
    shuffle: bool = True
    normalize_advantages: bool = True
    vf_share_layers: bool = False
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "tanh"
    log_std_init: float = 0.0

    def __post_init__(self) -> None:
        check_fraction("PPOConfig", gamma=self.gamma, lambda_=self.lambda_)
        check_schedule(
            "PPOConfig", lr=self.lr, clip_param=self.clip_param, entropy_coeff=self.entropy_coeff
        )
        check_positive("PPOConfig", vf_clip_param=self.vf_clip_param, kl_target=self.kl_target)
        check_positive_int(
            "PPOConfig",
            train_batch_size=self.train_batch_size,
            minibatch_size=self.minibatch_size,
            num_epochs=self.num_epochs,
        )
        if self.minibatch_size > self.train_batch_size:
            raise ValueError(
                f"PPOConfig.minibatch_size ({self.minibatch_size}) exceeds train_batch_size "
                f"({self.train_batch_size})."
            )
        if self.kl_coeff < 0 or self.vf_loss_coeff < 0:
            raise ValueError("PPOConfig.kl_coeff and vf_loss_coeff must be >= 0.")
        if self.grad_clip_by not in CLIP_MODES:
            raise ValueError(
                f"PPOConfig.grad_clip_by must be one of {CLIP_MODES}; got {self.grad_clip_by!r}."
            )
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        for name in ("lr", "clip_param", "entropy_coeff"):
            object.__setattr__(self, name, freeze_schedule(getattr(self, name)))


def ppo_loss(distribution: DistributionSpec, use_kl_loss: bool):
    """PPO's loss for a policy with ``distribution``; ``loss(params, batch, ctx)``.

    The batch holds ``[B]`` rows of ``obs``, ``actions``, ``logp`` (behaviour
    log-probabilities), ``dist_inputs`` (behaviour distribution inputs),
    ``advantages``, ``value_targets`` and ``mask`` (1 for rows to train on).
    Hyperparameters come from ``ctx.hyperparams`` (``clip_param``,
    ``vf_clip_param``, ``vf_loss_coeff``, ``entropy_coeff``) and the KL
    coefficient from ``ctx.extra["kl_coeff"]``.

    Returns:
      A loss returning ``(total, metrics)`` with ``policy_loss``,
      ``vf_loss``, ``vf_loss_unclipped``, ``entropy``, ``mean_kl``,
      ``clip_fraction`` and ``vf_explained_var``.
    """

    def loss(params: Params, batch: Batch, ctx: LossContext) -> tuple[jax.Array, dict]:
        dist_inputs, values = ctx.apply(params, batch["obs"])
        policy = make_distribution(distribution, dist_inputs)
        behaviour = make_distribution(distribution, batch["dist_inputs"])
        mask = batch["mask"]
        count = jnp.maximum(mask.sum(), 1.0)
        mean = lambda x: (x * mask).sum() / count
        hp = ctx.hyperparams
        ratio = jnp.exp(policy.log_prob(batch["actions"]) - batch["logp"])
        advantages = batch["advantages"]
        clip = hp["clip_param"]
        surrogate = jnp.minimum(
            ratio * advantages, jnp.clip(ratio, 1.0 - clip, 1.0 + clip) * advantages
        )
        vf_error = (values - batch["value_targets"]) ** 2
        vf_loss = jnp.minimum(vf_error, hp["vf_clip_param"])
        entropy = policy.entropy()
        kl = behaviour.kl(policy)
        total = mean(-surrogate + hp["vf_loss_coeff"] * vf_loss - hp["entropy_coeff"] * entropy)
        if use_kl_loss:
            total = total + ctx.extra["kl_coeff"] * mean(kl)
        targets = batch["value_targets"]
        target_var = mean((targets - mean(targets)) ** 2)
        explained = 1.0 - mean((targets - values) ** 2) / jnp.maximum(target_var, 1e-8)
        return total, {
            "policy_loss": -mean(surrogate),
            "vf_loss": mean(vf_loss),
            "vf_loss_unclipped": mean(vf_error),
            "entropy": mean(entropy),
            "mean_kl": mean(kl),
            "clip_fraction": mean((jnp.abs(ratio - 1.0) > clip).astype(jnp.float32)),
            "vf_explained_var": explained,
        }

    return loss


def make_learner(
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    config: PPOConfig,
) -> Learner:
    """PPO's learner: one actor-critic module trained in minibatch epochs.

    Use :func:`ppo` (or ``RECIPE.learner``), which also makes the typed config.
    """
    spec, layout = ppo_module(observation_space, action_space, config)
    return Learner(
        {MODULE_ID: spec},
        minibatch_size=config.minibatch_size,
        num_epochs=config.num_epochs,
        shuffle=config.shuffle,
        batch_layout={MODULE_ID: layout},
        recipe=recipe_json("ppo", observation_space, action_space, config),
    )


def ppo_module(
    observation_space: gymnasium.Space, action_space: gymnasium.Space, config: PPOConfig
) -> tuple[ModuleSpec, dict[str, jax.ShapeDtypeStruct]]:
    """One PPO module for the two spaces: its spec and its batch layout.

    The module-level fields of ``config`` (model, optimizer, loss coefficients,
    KL) shape the module; the learner-level ones (``minibatch_size``,
    ``num_epochs``, ``shuffle``) are for the :class:`~jaxlearner.Learner` that
    holds it. For learners of several PPO modules (multi-agent).

    Example:
      >>> spec, layout = ppo_module(env.observation_space, env.action_space, PPOConfig())
      ... # doctest: +SKIP
      >>> learner = jl.Learner({"left": spec, "right": spec},
      ...                      batch_layout={"left": layout, "right": layout})  # doctest: +SKIP
    """
    model = actor_critic(
        observation_space,
        action_space,
        config.hidden_sizes,
        config.activation,
        share_encoder=config.vf_share_layers,
        log_std_init=config.log_std_init,
    )
    distribution = distribution_for(action_space)
    return _module_spec(model, distribution, config), _batch_layout(observation_space, distribution)


def _module_spec(model: Model, distribution: DistributionSpec, config: PPOConfig) -> ModuleSpec:
    """The module: PPO's loss, Adam, the loss coefficients and the adaptive KL coefficient."""
    optimizer = Optimizer(
        optax.adam,
        learning_rate=config.lr,
        grad_clip=config.grad_clip,
        grad_clip_by=config.grad_clip_by,
    )
    return ModuleSpec(
        model,
        ppo_loss(distribution, config.use_kl_loss),
        optimizer,
        hyperparams={
            "clip_param": config.clip_param,
            "vf_clip_param": config.vf_clip_param,
            "vf_loss_coeff": config.vf_loss_coeff,
            "entropy_coeff": config.entropy_coeff,
        },
        additional_updates=[adaptive_kl_coeff(config.kl_coeff, config.kl_target)],
        init_input=lambda batch: batch["obs"],
        metric_reductions={"mean_kl": "mean"},
    )


def make_algorithm(
    learner: Learner,
    action_space: gymnasium.Space,
    config: PPOConfig,
    module_id: str = MODULE_ID,
) -> OnPolicyAlgorithm:
    """PPO around ``learner`` (one of :func:`make_learner`): act functions and postprocess.

    They apply the learner's own model (``learner.specs[module_id].model``,
    ``"default_policy"`` unless another PPO module of a multi-module learner is
    named); nothing is built but these functions.
    """
    model = learner.specs[module_id].model
    act = _act(model, distribution_for(action_space), bounds(action_space))
    return OnPolicyAlgorithm(
        name="ppo",
        module_id=module_id,
        learner=learner,
        config=config,
        explore=lambda module, obs, key: act(module, obs, key, False),
        exploit=lambda module, obs, key: act(module, obs, key, True),
        rollout_steps=functools.partial(_rollout_steps, config.train_batch_size),
        postprocess=_postprocess(model, config),
    )


def _act(model: Model, distribution: DistributionSpec, box: tuple | None) -> Callable:
    """``act(module, obs, key, deterministic)``: sample (or the mode), clipped to a ``Box``;
    extras ``actions`` (unclipped), ``logp``, ``vf_preds`` and ``dist_inputs``."""

    def act(module: ModuleState, obs: jax.Array, key: jax.Array, deterministic: bool):
        dist_inputs, values = model.apply(module.params, obs)
        policy = make_distribution(distribution, dist_inputs)
        actions = policy.mode() if deterministic else policy.sample(key)
        env_actions = actions if box is None else jnp.clip(actions, box[0], box[1])
        return env_actions, {
            "actions": actions,
            "logp": policy.log_prob(actions),
            "vf_preds": values,
            "dist_inputs": dist_inputs,
        }

    return act


def _postprocess(model: Model, config: PPOConfig) -> PostprocessFn:
    """GAE advantages (standardized over valid rows if configured) and value targets."""

    def postprocess(module: ModuleState, experience: Experience) -> Batch:
        rewards = experience["rewards"]
        steps, envs = rewards.shape
        next_obs = experience["next_obs"]
        flat_next = next_obs.reshape(steps * envs, *next_obs.shape[2:])
        next_values = model.apply(module.params, flat_next)[1].reshape(steps, envs)
        advantages, targets = gae(
            rewards,
            experience["vf_preds"],
            next_values,
            experience["terminated"],
            experience["truncated"],
            config.gamma,
            config.lambda_,
        )
        mask = experience["valid"].astype(jnp.float32)
        if config.normalize_advantages:
            count = jnp.maximum(mask.sum(), 1.0)
            mean = (advantages * mask).sum() / count
            std = jnp.sqrt((((advantages - mean) * mask) ** 2).sum() / count)
            advantages = (advantages - mean) / jnp.maximum(std, 1e-4)
        batch = {
            "obs": experience["obs"],
            "actions": experience["actions"],
            "logp": experience["logp"],
            "dist_inputs": experience["dist_inputs"],
            "advantages": advantages,
            "value_targets": targets,
            "mask": mask,
        }
        return jax.tree.map(lambda x: x.reshape(steps * envs, *x.shape[2:]), batch)

    return postprocess


def _rollout_steps(train_batch_size: int, num_envs: int) -> int:
    if train_batch_size % num_envs:
        raise ValueError(
            f"PPO's train_batch_size {train_batch_size} does not split over "
            f"{num_envs} environments; use a multiple of num_envs."
        )
    return train_batch_size // num_envs


RECIPE = BuiltinAlgorithm("ppo", PPOConfig, make_learner, make_algorithm)
"""PPO's registry entry: its ``learner``, ``build`` and ``algorithm_for``."""


def build(
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    config: PPOConfig | dict[str, Any] | None = None,
) -> OnPolicyAlgorithm:
    """PPO's :class:`~jaxlearner.algorithms.OnPolicyAlgorithm` (learner, act and postprocess).

    Args:
      observation_space: one environment's observation space.
      action_space: one environment's action space (``Discrete``,
        ``MultiDiscrete``, ``MultiBinary`` or 1-D ``Box``).
      config: a :class:`PPOConfig`, a dict of its fields, or ``None``.

    Raises:
      ValueError: on unknown config fields (valid names listed) or invalid values.
      TypeError: on unsupported spaces.

    Example:
      >>> algorithm = jl.algorithms.build(
      ...     "ppo", env.observation_space, env.action_space)  # doctest: +SKIP
    """
    return RECIPE.build(observation_space, action_space, config)


def ppo(
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    config: PPOConfig | dict[str, Any] | None = None,
) -> Learner:
    """A PPO :class:`~jaxlearner.Learner` for the two spaces.

    The learner has one module, ``"default_policy"``, and knows its batch
    layout, so ``learner.init(key)`` needs no sample batch.

    Example:
      >>> import gymnasium as gym, jax, jaxlearner as jl
      >>> env = gym.make("CartPole-v1")
      >>> learner = jl.algorithms.ppo(env.observation_space, env.action_space, {"lr": 3e-4})
      >>> state = learner.init(jax.random.key(0))
    """
    return RECIPE.learner(observation_space, action_space, config)


def _batch_layout(observation_space: gymnasium.Space, distribution: DistributionSpec) -> dict:
    obs = zero_observation(observation_space)
    actions = np.zeros(
        distribution.action_shape, np.int32 if distribution.is_discrete else np.float32
    )
    row = np.zeros((), np.float32)
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
        {
            "obs": obs,
            "actions": actions,
            "logp": row,
            "dist_inputs": np.zeros((distribution.num_inputs,), np.float32),
            "advantages": row,
            "value_targets": row,
            "mask": row,
        },
    )
