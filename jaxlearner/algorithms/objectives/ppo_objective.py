"""PPO's loss: the clipped surrogate, clipped value loss, entropy bonus and KL penalty.

Schulman et al. 2017, https://arxiv.org/abs/1707.06347, with RLlib's
semantics (see :mod:`jaxlearner.algorithms.ppo`): :func:`ppo_objective` is the
masked objective given the model's outputs; :func:`ppo_loss` applies a
feed-forward model to ``[B]`` rows and :func:`recurrent_ppo_loss` unrolls a
recurrent one over ``[B, L]`` sequences; :func:`ppo_batch_layout` and
:func:`ppo_sequence_batch_layout` are the batches they read; :func:`check_ppo_fields`
checks the config fields PPO and APPO share.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.algorithms.config import (
    check_bool,
    check_fraction,
    check_learning_rates,
    check_non_negative,
    check_policy_network_config,
    check_positive,
    check_schedule,
    freeze_schedules,
)
from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec, make_distribution
from jaxlearner.algorithms.networks.recurrent import initial_carry, unroll
from jaxlearner.algorithms.networks.spaces import zero_observation
from jaxlearner.algorithms.trajectories.normalization import check_normalization_config
from jaxlearner.core.context import LossContext
from jaxlearner.types import Batch, Model, Params


def ppo_loss(distribution: DistributionSpec, use_kl_loss: bool, normalize_advantages: bool = False):
    """PPO's loss for a policy with ``distribution``; ``loss(params, batch, ctx)``.

    The batch holds ``[B]`` rows of ``obs``, ``actions``, ``logp`` (behaviour
    log-probabilities), ``dist_inputs`` (behaviour distribution inputs),
    ``advantages``, ``value_targets`` and ``mask`` (1 for rows to train on).
    Hyperparameters come from ``ctx.hyperparams`` (``clip_param``,
    ``vf_clip_param``, ``vf_loss_coeff``, ``entropy_coeff``) and the KL
    coefficient from ``ctx.extra["kl_coeff"]``. With ``normalize_advantages`` the
    minibatch's advantages are standardized over its own rows first
    (:func:`standardize_advantages`, SB3's ``normalize_advantage``).

    Returns:
      A loss returning ``(total, metrics)`` with ``policy_loss``,
      ``vf_loss``, ``vf_loss_unclipped``, ``entropy``, ``mean_kl``,
      ``clip_fraction`` and ``vf_explained_var``.
    """

    def loss(params: Params, batch: Batch, ctx: LossContext) -> tuple[jax.Array, dict]:
        dist_inputs, values = ctx.apply(params, batch["obs"])
        return ppo_objective(
            distribution,
            use_kl_loss,
            dist_inputs,
            values,
            batch,
            ctx,
            normalize_advantages=normalize_advantages,
        )

    return loss


def recurrent_ppo_loss(
    distribution: DistributionSpec, use_kl_loss: bool, normalize_advantages: bool = False
):
    """PPO's loss for a recurrent model, on ``[B, L]`` sequences; ``loss(params, batch, ctx)``.

    The batch holds sequences ``[B, L, ...]`` of the same keys as
    :func:`ppo_loss` (``mask [B, L]`` is 0 on padding and on steps not to
    train on), plus ``is_first [B, L]`` (an episode starts: the carry is
    zeroed) and ``state_in``, the carry each sequence starts from (leaves
    ``[B, cell_size]``). The model (``ctx.apply(params, carry, obs,
    is_first)``, one step) is unrolled over ``L`` with ``lax.scan``
    (:func:`~jaxlearner.algorithms.networks.recurrent.unroll`); the objective is
    :func:`ppo_loss`'s over the ``B * L`` steps, padding masked out.

    Returns:
      A loss returning ``(total, metrics)``, the metrics of :func:`ppo_loss`.
    """

    def loss(params: Params, batch: Batch, ctx: LossContext) -> tuple[jax.Array, dict]:
        _, (dist_inputs, values) = unroll(
            ctx.apply, params, batch["state_in"], batch["obs"], batch["is_first"]
        )
        steps = {k: v for k, v in batch.items() if k not in ("state_in", "is_first", "obs")}
        rows = lambda x: x.reshape(-1, *x.shape[2:])
        flat = jax.tree.map(rows, steps)
        return ppo_objective(
            distribution,
            use_kl_loss,
            rows(dist_inputs),
            rows(values),
            flat,
            ctx,
            normalize_advantages=normalize_advantages,
        )

    return loss


def ppo_objective(
    distribution: DistributionSpec,
    use_kl_loss: bool,
    dist_inputs: jax.Array,
    values: jax.Array,
    batch: Batch,
    ctx: LossContext,
    *,
    normalize_advantages: bool = False,
) -> tuple[jax.Array, dict]:
    """PPO's masked objective given the model's outputs ``dist_inputs [B, P]``, ``values [B]``.

    ``batch`` holds ``[B]`` rows of ``actions``, ``logp``, ``dist_inputs``,
    ``advantages``, ``value_targets`` and ``mask``; see :func:`ppo_loss`. With
    ``normalize_advantages`` the advantages are standardized over the rows first
    (:func:`standardize_advantages`).
    """
    policy = make_distribution(distribution, dist_inputs)
    behaviour = make_distribution(distribution, batch["dist_inputs"])
    mask = batch["mask"]
    count = jnp.maximum(mask.sum(), 1.0)
    mean = lambda x: (x * mask).sum() / count
    hp = ctx.hyperparams
    ratio = jnp.exp(policy.log_prob(batch["actions"]) - batch["logp"])
    advantages = batch["advantages"]
    if normalize_advantages:
        advantages = standardize_advantages(advantages, mask)
    clip = hp["clip_param"]
    surrogate = clipped_surrogate(ratio, advantages, clip)
    vf_error = (values - batch["value_targets"]) ** 2
    vf_loss = jnp.minimum(vf_error, hp["vf_clip_param"])
    entropy = policy.entropy()
    kl = behaviour.kl(policy)
    total = mean(-surrogate + hp["vf_loss_coeff"] * vf_loss - hp["entropy_coeff"] * entropy)
    if use_kl_loss:
        total = total + ctx.extra["kl_coeff"] * mean(kl)
    explained = explained_variance(batch["value_targets"], values, mean)
    return total, {
        "policy_loss": -mean(surrogate),
        "vf_loss": mean(vf_loss),
        "vf_loss_unclipped": mean(vf_error),
        "entropy": mean(entropy),
        "mean_kl": mean(kl),
        "clip_fraction": mean((jnp.abs(ratio - 1.0) > clip).astype(jnp.float32)),
        "vf_explained_var": explained,
    }


def standardize_advantages(advantages: jax.Array, mask: jax.Array) -> jax.Array:
    """``advantages [B]`` standardized over the rows where ``mask [B]`` is 1, as SB3's PPO
    does each minibatch: ``(A - mean) / (std + 1e-8)`` with the unbiased standard deviation
    (``torch.std``'s), left as they are when fewer than two rows count.

    Example:
      >>> standardize_advantages(jnp.array([1.0, 3.0, 50.0]), jnp.array([1.0, 1.0, 0.0]))
      Array([-0.70710677,  0.70710677, 33.941124  ], dtype=float32)
    """
    mean, std = masked_mean_std(advantages, mask, ddof=1)
    return jnp.where(mask.sum() > 1.0, (advantages - mean) / (std + 1e-8), advantages)


def masked_mean_std(x: jax.Array, mask: jax.Array, ddof: int = 0) -> tuple[jax.Array, jax.Array]:
    """The mean and standard deviation of ``x [B]`` over the rows where ``mask [B]`` is 1,
    the squared deviations divided by ``max(count - ddof, 1)`` (``ddof=1``: unbiased).

    Example:
      >>> masked_mean_std(jnp.array([1.0, 3.0, 50.0]), jnp.array([1.0, 1.0, 0.0]))
      (Array(2., dtype=float32), Array(1., dtype=float32))
    """
    count = mask.sum()
    mean = (x * mask).sum() / jnp.maximum(count, 1.0)
    return mean, jnp.sqrt((((x - mean) * mask) ** 2).sum() / jnp.maximum(count - ddof, 1.0))


def clipped_surrogate(ratio: jax.Array, advantages: jax.Array, clip: jax.Array) -> jax.Array:
    """PPO's clipped surrogate per row: ``min(r * A, clip(r, 1 - clip, 1 + clip) * A)``
    (to maximise; PPO and APPO take ``-mean`` of it as the policy loss)."""
    return jnp.minimum(ratio * advantages, jnp.clip(ratio, 1.0 - clip, 1.0 + clip) * advantages)


def explained_variance(
    targets: jax.Array, values: jax.Array, mean: Callable[[jax.Array], jax.Array]
) -> jax.Array:
    """``1 - Var(targets - values) / Var(targets)`` with ``mean`` the (masked) mean over rows,
    the variance floored at ``1e-8``: the ``vf_explained_var`` metric."""
    target_var = mean((targets - mean(targets)) ** 2)
    return 1.0 - mean((targets - values) ** 2) / jnp.maximum(target_var, 1e-8)


def ppo_batch_layout(observation_space: gymnasium.Space, distribution: DistributionSpec) -> dict:
    """The rows :func:`ppo_loss` reads, as ``jax.ShapeDtypeStruct`` leaves (no leading axis)."""
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


def ppo_sequence_batch_layout(
    observation_space: gymnasium.Space,
    distribution: DistributionSpec,
    model: Model,
    max_seq_len: int,
) -> dict:
    """The sequences :func:`recurrent_ppo_loss` reads: :func:`ppo_batch_layout`'s keys as
    ``[max_seq_len, ...]`` sequences, ``is_first [max_seq_len]`` bool and ``state_in`` (one
    carry per sequence)."""
    steps = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct((max_seq_len, *s.shape), s.dtype),
        ppo_batch_layout(observation_space, distribution),
    )
    carry = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), initial_carry(model, 1)
    )
    is_first = jax.ShapeDtypeStruct((max_seq_len,), np.dtype(np.bool_))
    return {**steps, "is_first": is_first, "state_in": carry}


def check_ppo_fields(config: Any) -> None:
    """Checks the fields PPO's and APPO's configs share (each keeps them itself, with RLlib's
    flat names), and stores their schedules as tuples.

    ``gamma`` and ``lambda_`` in ``[0, 1]``; the normalization fields; ``lr``,
    ``clip_param`` and ``entropy_coeff`` schedules; ``kl_target`` positive;
    ``kl_coeff`` and ``vf_loss_coeff`` finite and ``>= 0``; the actor-critic network and
    ``ortho_init``.

    Args:
      config: a frozen ``PPOConfig`` or ``APPOConfig``; its class name starts each message.

    Raises:
      ValueError: naming the field, the value received and what is valid.
      TypeError: for an ``ortho_init`` that is not a bool.

    Example:
      >>> check_ppo_fields(PPOConfig())                                 # doctest: +SKIP
    """
    owner = type(config).__name__
    check_fraction(owner, gamma=config.gamma, lambda_=config.lambda_)
    check_normalization_config(owner, config)
    check_schedule(
        owner, lr=config.lr, clip_param=config.clip_param, entropy_coeff=config.entropy_coeff
    )
    check_learning_rates(owner, lr=config.lr)
    check_positive(owner, kl_target=config.kl_target)
    check_non_negative(owner, kl_coeff=config.kl_coeff, vf_loss_coeff=config.vf_loss_coeff)
    check_policy_network_config(config)
    check_bool(owner, ortho_init=config.ortho_init)
    freeze_schedules(config, "lr", "clip_param", "entropy_coeff")
