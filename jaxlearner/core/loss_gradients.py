"""Calling the losses: each module's own loss or one joint loss, and their gradients.

The first of RLlib's three stages (:mod:`jaxlearner.core.gradients`) starts here:
the module states with their scheduled hyperparameters at the current counters,
one :class:`~jaxlearner.LossContext` per module, and the loss's gradients by
optimizer name, ``{name: grads over all of the module's params}``. A scalar loss
gives every optimizer the same tree; a per-optimizer loss ``{name: scalar}``
gives each optimizer the gradient of its own term; a joint loss over modules
gives each trained module the gradient of the one scalar.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxlearner.core.context import JointLossFn, LossContext
from jaxlearner.core.initialization import module_key
from jaxlearner.core.metrics import check_loss_metrics
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.schedules import current_value
from jaxlearner.core.state import ModuleState
from jaxlearner.types import Batch, Params, PyTree

LossResult = tuple[jax.Array | None, dict[str, PyTree], dict[str, jax.Array]]
"""A trained module's ``(loss or None under a joint loss, {optimizer: grads}, metrics)``."""


def refresh_hyperparams(spec: ModuleSpec, module: ModuleState) -> ModuleState:
    """The module state with each scheduled hyperparameter at its current value."""
    if not spec.hyperparams:
        return module
    values = {
        name: current_value(value, module.hyperparams[name], module.counters, name)
        for name, value in spec.hyperparams.items()
    }
    return module.replace(hyperparams={**module.hyperparams, **values})


def loss_contexts(
    specs: Mapping[str, ModuleSpec], modules: Mapping[str, ModuleState], key: jax.Array
) -> dict[str, LossContext]:
    """Each module's :class:`~jaxlearner.LossContext`, with its own key folded from ``key``."""
    return {
        m: LossContext(
            module_id=m,
            apply=specs[m].model.apply,
            key=module_key(key, m),
            extra=module.extra,
            hyperparams=module.hyperparams,
            counters=module.counters,
        )
        for m, module in modules.items()
    }


def loss_gradients(
    specs: Mapping[str, ModuleSpec],
    modules: Mapping[str, ModuleState],
    batch: Mapping[str, Batch],
    key: jax.Array,
    trained: Sequence[str],
    joint_loss: JointLossFn | None,
    names: Mapping[str, Sequence[str]] | None = None,
) -> tuple[dict[str, LossResult], jax.Array, dict[str, jax.Array]]:
    """The losses of the trained modules and their gradients by optimizer.

    Args:
      specs: module id -> spec.
      modules: the states of the modules the losses see (with their current
        hyperparameters, :func:`refresh_hyperparams`): the trained ones, or with
        a joint loss every module of the batch.
      batch: ``{module_id: [B_m, ...]}`` for those modules.
      key: the step's key; each module's loss gets its own fold of it.
      trained: the modules to differentiate.
      joint_loss: the learner's loss over all modules, or ``None`` for each
        module's own.
      names: each trained module's optimizer names; default its spec's (a
        module of a shared optimizer has none: the shared optimizer's name).

    Returns:
      ``(results, total_loss, joint_metrics)``: ``results[m]`` is a
      :data:`LossResult`; ``total_loss`` the sum of the modules' losses (or the
      joint loss); ``joint_metrics`` what the joint loss returned (``{}`` without).
    """
    contexts = loss_contexts(specs, modules, key)
    names = {m: tuple((names or {}).get(m, specs[m].named_optimizers)) for m in trained}
    if joint_loss is None:
        results: dict[str, LossResult] = {
            m: _module_gradients(specs[m], m, names[m], modules[m].params, batch[m], contexts[m])
            for m in trained
        }
        total = sum(loss for loss, _, _ in results.values())
        return results, total, {}
    total, grads, joint_metrics = _joint_gradients(joint_loss, modules, batch, contexts, trained)
    return (
        {m: (None, dict.fromkeys(names[m], grads[m]), {}) for m in trained},
        total,
        joint_metrics,
    )


def _check_loss(owner: str, loss: Any, names: Sequence[str]) -> None:
    if isinstance(loss, Mapping):
        if set(loss) != set(names):
            raise ValueError(
                f"The loss of {owner} returned per-optimizer losses for {sorted(loss)}, but the "
                f"module's optimizers are {sorted(names)}; return one scalar, or one per "
                "optimizer name."
            )
        values = list(loss.values())
    else:
        values = [loss]
    for value in values:
        if jnp.shape(value) != () or not jnp.issubdtype(jnp.result_type(value), jnp.floating):
            raise ValueError(
                f"The loss of {owner} must be a float scalar (or a dict of them, one per "
                f"optimizer); got shape {jnp.shape(value)} and dtype {jnp.result_type(value)}."
            )


def _module_gradients(
    spec: ModuleSpec,
    module_id: str,
    names: Sequence[str],
    params: Params,
    batch: Batch,
    ctx: LossContext,
) -> LossResult:
    """``(total_loss, {optimizer: grads}, metrics)`` of one module's own loss.

    A scalar loss gives every optimizer the same gradient (each then uses its
    own params' share). A per-optimizer loss ``{name: scalar}`` gives each
    optimizer the gradient of its own term, one backward pass per term.
    """
    owner = f"module {module_id!r}"

    def loss_fn(p: Params) -> tuple[Any, Any]:
        output = spec.loss(p, batch, ctx)
        if not (isinstance(output, tuple) and len(output) == 2):
            raise TypeError(
                f"The loss of {owner} must return a pair (loss, metrics); got "
                f"{type(output).__name__}."
            )
        loss, metrics = output
        _check_loss(owner, loss, names)
        return loss, check_loss_metrics(owner, metrics)

    loss, pullback, metrics = jax.vjp(loss_fn, params, has_aux=True)
    if isinstance(loss, Mapping):
        grads = {}
        for name in names:
            cotangent = {k: jnp.asarray(k == name, jnp.result_type(v)) for k, v in loss.items()}
            (grads[name],) = pullback(cotangent)
        total = sum(loss.values())
        metrics = {**{f"loss/{name}": value for name, value in loss.items()}, **metrics}
    else:
        (shared,) = pullback(jnp.ones_like(loss))
        grads = dict.fromkeys(names, shared)
        total = loss
    return total, grads, metrics


def _joint_gradients(
    joint_loss: JointLossFn,
    modules: Mapping[str, ModuleState],
    minibatch: Mapping[str, Batch],
    contexts: Mapping[str, LossContext],
    trained: Sequence[str],
) -> tuple[jax.Array, dict[str, PyTree], dict[str, jax.Array]]:
    """The joint loss, its gradient for each trained module (``{module_id: grads}``), and
    its metrics."""

    def loss_fn(trained_params: dict[str, Params]) -> tuple[jax.Array, Any]:
        params = {
            m: trained_params[m] if m in trained_params else jax.lax.stop_gradient(s.params)
            for m, s in modules.items()
        }
        output = joint_loss(params, dict(minibatch), dict(contexts))
        if not (isinstance(output, tuple) and len(output) == 2):
            raise TypeError(
                f"The joint loss must return a pair (loss, metrics); got {type(output).__name__}."
            )
        loss, metrics = output
        _check_loss("the learner (joint loss)", loss, ())
        return loss, check_loss_metrics("the learner (joint loss)", metrics)

    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        {m: modules[m].params for m in trained}
    )
    return loss, grads, metrics
