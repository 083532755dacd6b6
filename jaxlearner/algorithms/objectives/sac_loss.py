"""SAC's per-optimizer loss: twin critics, the actor and the temperature.

Haarnoja et al. 2018, https://arxiv.org/abs/1801.01290 and
https://arxiv.org/abs/1812.05905; discrete actions as in Christodoulou 2019,
https://arxiv.org/abs/1910.07207. With RLlib's semantics (see
:mod:`jaxlearner.algorithms.sac`): the module's three named optimizers
``actor``, ``critic`` and ``temperature`` each follow the gradient of their own
term of :func:`sac_loss`. With ``alpha = exp(log_alpha)``, ``(a', logp')``
sampled from the policy at ``s'`` and ``(a~, logp~)`` at ``s``:

* critic: ``sum_i mean(mask * weights * L(Q_i(s, a) - y))`` (``weights`` the
  importance weights of prioritized replay, else ones) with
  ``y = rewards + discounts * (min_i Q_target_i(s', a') - alpha * logp')`` and
  ``L`` the Huber loss (delta 1, RLlib's choice) or the squared error;
* actor: ``mean(mask * (alpha * logp~ - min_i Q_i(s, a~)))``;
* temperature: ``-mean(mask * log_alpha * (logp~ + target_entropy))``.

For discrete actions the expectations over actions are exact sums over the
policy's probabilities instead of samples.

Every term is written so that it depends only on its own optimizer's params
(the critics are frozen in the actor term, ``alpha`` in the actor and critic
terms, the log-probabilities in the temperature term); the per-optimizer loss
then makes each optimizer follow its own term. With no path between terms,
XLA prunes each optimizer's backward pass to its own term, so the three cost
about one backward pass of the summed loss (``benchmarks/bench_off_policy.py``
measures both).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxlearner.algorithms.config import check_choice
from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec, make_distribution
from jaxlearner.algorithms.replay.off_policy import masked_mean, td_error_loss
from jaxlearner.algorithms.replay.off_policy_config import TD_ERROR_LOSSES
from jaxlearner.core.context import LossContext
from jaxlearner.types import Batch, Params

TARGET = "target_critic"
"""The ``extra`` entry holding the target critics' params (the ``critic`` subtree)."""


def sac_loss(distribution: DistributionSpec, td_error_loss_fn: str = "huber"):
    """SAC's per-optimizer loss; ``loss(params, batch, ctx)``.

    The batch holds ``[B]`` replay rows ``obs``, ``actions``, ``rewards``,
    ``next_obs``, ``discounts`` and ``mask`` (see
    :mod:`jaxlearner.algorithms.replay.off_policy`), and with prioritized replay the
    importance weights ``weights`` of the critic term. ``ctx.apply`` is a
    :class:`~jaxlearner.algorithms.networks.models.SACNetworks`' ``apply`` (methods ``policy``,
    ``q_values``, ``log_alpha``); the target critics' params are
    ``ctx.extra["target_critic"]`` and the target entropy is
    ``ctx.hyperparams["target_entropy"]``. For ``Box`` actions, ``ctx.key`` is
    split into ``(next_key, current_key)``: ``a'`` at ``s'`` is drawn with
    ``next_key``, ``a~`` at ``s`` with ``current_key``.

    Args:
      distribution: the actor's distribution (``tanh_gaussian`` or ``categorical``).
      td_error_loss_fn: the critics' loss, ``"huber"`` (delta 1) or ``"mse"``.

    Returns:
      A loss returning ``({"actor", "critic", "temperature"}, metrics)`` with
      metrics ``policy_loss``, ``qf_loss``, ``alpha_loss``, ``alpha_value``,
      ``logps`` (mean log-probability of the policy's actions at ``s``),
      ``qf_mean``, ``qf_max``, ``qf_min``, ``td_error_mean`` and ``target_mean``.

    Raises:
      ValueError: for another distribution kind or ``td_error_loss_fn``.

    Example:
      >>> loss = sac_loss(DistributionSpec("tanh_gaussian", (1,), (-2.0,), (2.0,)))
      >>> terms, metrics = loss(params, batch, ctx)       # doctest: +SKIP
    """
    if distribution.kind not in ("tanh_gaussian", "categorical"):
        raise ValueError(
            f"sac_loss supports 'tanh_gaussian' and 'categorical' actors; got "
            f"{distribution.kind!r}."
        )
    check_choice("sac_loss", "td_error_loss_fn", td_error_loss_fn, TD_ERROR_LOSSES)

    def loss(params: Params, batch: Batch, ctx: LossContext) -> tuple[dict, dict]:
        mask = batch["mask"]
        terms = sac_terms(distribution, params, batch, ctx)
        td_errors = terms.q_taken - terms.target[None]  # [critics, B]
        weights = batch.get("weights", jnp.ones_like(mask))
        critic_loss = sum(
            masked_mean(weights * td_error_loss(td_errors[i], td_error_loss_fn), mask)
            for i in range(td_errors.shape[0])
        )
        target_entropy = ctx.hyperparams["target_entropy"]
        losses = {
            "actor": masked_mean(terms.actor_objective, mask),
            "critic": critic_loss,
            "temperature": -masked_mean(
                terms.log_alpha * jax.lax.stop_gradient(terms.logps + target_entropy), mask
            ),
        }
        return losses, _metrics(
            losses, terms.alpha, terms.logps, terms.q_taken, td_errors, terms.target, mask
        )

    return loss


class SACTerms(NamedTuple):
    """What SAC's three loss terms are built from (``q_taken`` is ``[critics, B]``)."""

    log_alpha: jax.Array
    alpha: jax.Array
    q_taken: jax.Array
    target: jax.Array
    actor_objective: jax.Array
    logps: jax.Array


def sac_terms(
    distribution: DistributionSpec, params: Params, batch: Batch, ctx: LossContext
) -> SACTerms:
    """The critics' Q-values and targets, the actor's objective and log-probabilities.

    What :func:`sac_loss` and the priorities of prioritized replay are built
    from, for ``[B]`` replay rows; see :func:`sac_loss` for ``batch`` and ``ctx``.

    Args:
      distribution: the actor's distribution (``tanh_gaussian`` or ``categorical``).
      params: the module's params (``actor``, ``critic`` and ``log_alpha``).
      batch: the replay rows.
      ctx: the loss context, with the target critics in ``ctx.extra["target_critic"]``.

    Returns:
      :class:`SACTerms`: ``log_alpha``, ``alpha`` (gradient-free), ``q_taken``
      ``[critics, B]``, the gradient-free ``target`` ``[B]``, the actor's
      objective ``[B]`` and ``logps`` ``[B]``.
    """
    log_alpha = ctx.apply(params, method="log_alpha")
    alpha = jax.lax.stop_gradient(jnp.exp(log_alpha))
    rows = batch["obs"].shape[0]
    # One actor pass over obs and next_obs together.
    both = jnp.concatenate([batch["obs"], batch["next_obs"]])
    dist_inputs = ctx.apply(params, both, method="policy")
    nets = _param_views(params, ctx.extra[TARGET])
    inputs = _TermInputs(ctx, batch, dist_inputs[:rows], dist_inputs[rows:], alpha, nets)
    if distribution.is_discrete:
        q_taken, next_value, actor_objective, logps = _discrete_terms(inputs)
    else:
        q_taken, next_value, actor_objective, logps = _continuous_terms(distribution, inputs)
    target = jax.lax.stop_gradient(batch["rewards"] + batch["discounts"] * next_value)
    return SACTerms(log_alpha, alpha, q_taken, target, actor_objective, logps)


def _metrics(
    losses: dict[str, jax.Array],
    alpha: jax.Array,
    logps: jax.Array,
    q_taken: jax.Array,
    td_errors: jax.Array,
    target: jax.Array,
    mask: jax.Array,
) -> dict[str, jax.Array]:
    """:func:`sac_loss`'s metrics; ``q_taken`` and ``td_errors`` are ``[critics, B]``."""
    valid = mask > 0
    return {
        "policy_loss": losses["actor"],
        "qf_loss": losses["critic"],
        "alpha_loss": losses["temperature"],
        "alpha_value": alpha,
        "logps": masked_mean(logps, mask),
        "qf_mean": masked_mean(q_taken[0], mask),
        "qf_max": jnp.max(jnp.where(valid, q_taken[0], -jnp.inf)),
        "qf_min": jnp.min(jnp.where(valid, q_taken[0], jnp.inf)),
        "td_error_mean": masked_mean(jnp.abs(td_errors).mean(0), mask),
        "target_mean": masked_mean(target, mask),
    }


class _Params(NamedTuple):
    """The module's params three ways: as they are, with target critics, with frozen critics."""

    live: Params
    target: Params
    frozen: Params


def _param_views(params: Params, target_critic: Params) -> _Params:
    """``params`` as they are, with the target critics, and with gradient-free critics."""
    critic = params["params"]["critic"]
    return _Params(
        live=params,
        target={"params": {**params["params"], "critic": target_critic}},
        frozen={"params": {**params["params"], "critic": jax.lax.stop_gradient(critic)}},
    )


class _TermInputs(NamedTuple):
    """What the terms of either action kind are computed from (``dist_inputs`` at ``s``,
    ``next_dist_inputs`` at ``s'``, ``alpha`` gradient-free)."""

    ctx: LossContext
    batch: Batch
    dist_inputs: jax.Array
    next_dist_inputs: jax.Array
    alpha: jax.Array
    nets: _Params


def _continuous_terms(
    distribution: DistributionSpec, inputs: _TermInputs
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``Q_i(s, a) [C, B]``, ``E[min_i Q_target_i(s', a') - alpha logp'] [B]``, the actor's
    objective ``alpha logp~ - min_i Q_i(s, a~) [B]`` and ``logp~ [B]``, with sampled actions."""
    ctx, batch, _, _, alpha, nets = inputs
    now = make_distribution(distribution, inputs.dist_inputs)
    nxt = make_distribution(distribution, inputs.next_dist_inputs)
    next_key, current_key = jax.random.split(ctx.key)
    next_actions, next_logp = nxt.sample_and_log_prob(next_key)
    next_q = ctx.apply(nets.target, batch["next_obs"], next_actions, method="q_values")
    next_value = next_q.min(axis=0) - alpha * next_logp
    q_taken = ctx.apply(nets.live, batch["obs"], batch["actions"], method="q_values")
    actions, logps = now.sample_and_log_prob(current_key)
    q_policy = ctx.apply(nets.frozen, batch["obs"], actions, method="q_values").min(axis=0)
    return q_taken, next_value, alpha * logps - q_policy, logps


def _discrete_terms(inputs: _TermInputs) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """As :func:`_continuous_terms`, with exact expectations over the ``n`` actions; the last
    output is ``sum_a pi(a|s) log pi(a|s)``, minus the policy's entropy."""
    ctx, batch, _, _, alpha, nets = inputs
    log_probs = jax.nn.log_softmax(inputs.dist_inputs, axis=-1)
    next_log_probs = jax.nn.log_softmax(inputs.next_dist_inputs, axis=-1)
    next_q = ctx.apply(nets.target, batch["next_obs"], method="q_values").min(axis=0)
    next_value = jnp.sum(jnp.exp(next_log_probs) * (next_q - alpha * next_log_probs), axis=-1)
    q_all = ctx.apply(nets.live, batch["obs"], method="q_values")  # [C, B, n]
    actions = batch["actions"].astype(jnp.int32)
    index = jnp.broadcast_to(actions[None, :, None], (*q_all.shape[:-1], 1))
    q_taken = jnp.take_along_axis(q_all, index, axis=-1)[..., 0]
    probs = jnp.exp(log_probs)
    q_policy = jax.lax.stop_gradient(q_all.min(axis=0))
    actor_objective = jnp.sum(probs * (alpha * log_probs - q_policy), axis=-1)
    return q_taken, next_value, actor_objective, jnp.sum(probs * log_probs, axis=-1)
