"""Metrics: checking what losses return and reducing it over minibatch steps.

The update returns ``{module_id: {name: value}, "__all__": {name: value}}``,
every value a device array. Per-step values are stacked by ``lax.scan`` and
reduced inside the compiled update, by each key's declared reduction (the mean
unless the module's spec says otherwise) or as the learner's ``reduce_fn``
says (:func:`reduce_steps`: one reduction for all, none, or a function).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp

from jaxlearner.types import REDUCTIONS, Metrics, Reduction

ALL_MODULES = "__all__"
"""The metrics key for learner-wide values (RLlib's ``ALL_MODULES``)."""

StackedMetrics: TypeAlias = Mapping[str, Mapping[str, jax.Array]]
"""An update's per-step metrics, ``{owner: {name: [steps, ...]}}``."""

ReduceFn: TypeAlias = Callable[[StackedMetrics], Mapping[str, Mapping[str, Any]]]
"""A custom reduction ``fn(stacked) -> {owner: {name: value}}``, traced in the update."""

ResultsFn: TypeAlias = Callable[
    [Mapping[str, Any], Mapping[str, Mapping[str, Any]]], Mapping[str, Mapping[str, Any]]
]
"""RLlib's ``compile_results``: ``fn(batch, metrics) -> {owner: {name: value}}``, traced at the
end of every update on its whole batch and metrics (:func:`add_results`)."""

REDUCE_FN_NAMES: tuple[str, ...] = ("default", *REDUCTIONS)
"""The names ``reduce_fn`` accepts (besides ``None`` and a callable)."""

PER_UPDATE_COUNTS = ("num_env_steps_trained", "num_agent_steps_trained")
"""The metrics that count what one update trained on (their ``_lifetime`` totals aside)."""

_REDUCERS = {
    "mean": lambda x: jnp.mean(x, axis=0),
    "sum": lambda x: jnp.sum(x, axis=0),
    "min": lambda x: jnp.min(x, axis=0),
    "max": lambda x: jnp.max(x, axis=0),
    "last": lambda x: x[-1],
}


def check_loss_metrics(
    owner: str, metrics: Any, source: str = "The loss", returns: str = "(loss, metrics)"
) -> dict[str, jax.Array]:
    """Validates the metrics a loss (or another ``source`` of ``owner``) returned: a mapping
    of names to scalars.

    Raises:
      TypeError: when ``metrics`` is not a mapping with string keys.
      ValueError: when a value is not a scalar.
    """
    if not isinstance(metrics, Mapping):
        raise TypeError(
            f"{source} of {owner} must return {returns} with metrics a dict of scalars; "
            f"got metrics of type {type(metrics).__name__}."
        )
    checked = {}
    for name, value in metrics.items():
        if not isinstance(name, str):
            raise TypeError(f"{source} of {owner} returned a metric with non-string key {name!r}.")
        value = jnp.asarray(value)
        if value.shape != ():
            raise ValueError(
                f"{source} of {owner} returned metric {name!r} of shape {value.shape}; metrics "
                "must be scalars (reduce them, e.g. with .mean())."
            )
        checked[name] = value.astype(jnp.float32) if value.dtype == jnp.float64 else value
    return checked


def reduce_metrics(stacked: Metrics, reductions: Mapping[str, Reduction]) -> dict[str, jax.Array]:
    """Reduces stacked per-step metrics ``{name: [steps]}`` to scalars.

    Args:
      stacked: each metric's values over the steps, leading axis ``[steps]``.
      reductions: ``{name: reduction}``; unlisted names use ``"mean"``.

    Returns:
      ``{name: scalar}``.
    """
    return {
        name: _REDUCERS[reductions.get(name, "mean")](values) for name, values in stacked.items()
    }


def check_reduce_fn(reduce_fn: object) -> None:
    """Checks a learner's ``reduce_fn`` before anything is traced.

    Raises:
      ValueError: for a string that is not one of :data:`REDUCE_FN_NAMES`.
      TypeError: for anything else that is not ``None`` or a callable.
    """
    if reduce_fn is None or callable(reduce_fn):
        return
    if isinstance(reduce_fn, str) and reduce_fn in REDUCE_FN_NAMES:
        return
    expected = (
        f"one of {list(REDUCE_FN_NAMES)}, None (the stacked [steps, ...] values) or a callable "
        "fn(stacked) -> metrics over {owner: {name: [steps, ...]}}"
    )
    if isinstance(reduce_fn, str):
        raise ValueError(
            f"Learner reduce_fn {reduce_fn!r} is not a known reduction; use {expected}."
        )
    raise TypeError(
        f"Learner reduce_fn must be {expected}; got {type(reduce_fn).__name__} {reduce_fn!r}."
    )


def reduce_steps(
    reduce_fn: ReduceFn | str | None,
    stacked: StackedMetrics,
    declared: Mapping[str, Mapping[str, jax.Array]],
) -> dict[str, dict[str, Any]]:
    """An update's metrics as the learner's ``reduce_fn`` gives them (jittable).

    Args:
      reduce_fn: ``"default"`` returns ``declared``; ``"mean"``, ``"sum"``,
        ``"min"``, ``"max"`` or ``"last"`` reduces every per-step metric so;
        ``None`` keeps them stacked, ``[steps, ...]``; a callable gets
        ``stacked`` and returns ``{owner: {name: value}}``.
      stacked: the steps' metrics, ``{owner: {name: [steps, ...]}}``.
      declared: the update's metrics with each declared reduction, and the
        per-update values (counters, ``extra/...``, ``nonfinite``) that have
        no steps; those are kept whatever ``reduce_fn`` is.

    Returns:
      ``{owner: {name: value}}``: for each owner of ``declared``, the reduced
      per-step metrics, then its per-update values.

    Raises:
      TypeError: when a callable returns something else than a mapping of mappings.

    Example:
      >>> stacked = {"m": {"loss": jnp.array([3.0, 1.0])}}
      >>> declared = {"m": {"loss": jnp.array(2.0), "num_grad_steps": jnp.array(2)}}
      >>> {k: v.tolist() for k, v in reduce_steps(None, stacked, declared)["m"].items()}
      {'loss': [3.0, 1.0], 'num_grad_steps': 2}
      >>> float(reduce_steps("min", stacked, declared)["m"]["loss"])
      1.0
    """
    if isinstance(reduce_fn, str) and reduce_fn == "default":
        return {owner: dict(values) for owner, values in declared.items()}
    if reduce_fn is None:
        reduced: Mapping[str, Any] = stacked
    elif isinstance(reduce_fn, str):
        reduced = {o: reduce_metrics(v, dict.fromkeys(v, reduce_fn)) for o, v in stacked.items()}
    else:
        reduced = reduce_fn({owner: dict(values) for owner, values in stacked.items()})
        if not isinstance(reduced, Mapping) or not all(
            isinstance(v, Mapping) for v in reduced.values()
        ):
            raise TypeError(
                "The learner's reduce_fn must return {owner: {name: value}}, as the stacked "
                f"metrics it gets; got {type(reduced).__name__} {reduced!r:.200}."
            )
    metrics = {
        owner: {
            **reduced.get(owner, {}),
            **{k: v for k, v in values.items() if k not in stacked.get(owner, {})},
        }
        for owner, values in declared.items()
    }
    return metrics | {o: dict(v) for o, v in reduced.items() if o not in metrics}


def add_results(
    results_fn: ResultsFn,
    batch: Mapping[str, Any],
    metrics: Mapping[str, Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """An update's metrics with what the learner's ``results_fn`` makes of them and its batch.

    Args:
      results_fn: ``fn(batch, metrics) -> {owner: {name: value}}``, pure (traced in the update).
      batch: the update's whole batch, ``{module_id: [B, ...]}``.
      metrics: the update's metrics, reduced as ``reduce_fn`` says.

    Returns:
      ``metrics`` with each value ``results_fn`` returned added under its owner (a new owner
      added too); a name already there is replaced. Values may have any shape.

    Raises:
      TypeError: when ``results_fn`` returns something else than ``{owner: {name: array}}``.

    Example:
      >>> def results(batch, metrics):
      ...     return {"policy": {"reward_histogram": jnp.histogram(batch["policy"]["r"], 4)[0]}}
      >>> metrics = add_results(results, {"policy": {"r": jnp.arange(8.0)}}, {"policy": {}})
      >>> metrics["policy"]["reward_histogram"].tolist()
      [2.0, 2.0, 2.0, 2.0]
    """
    added = results_fn(dict(batch), {owner: dict(values) for owner, values in metrics.items()})
    merged = {owner: dict(values) for owner, values in metrics.items()}
    expected = "{owner: {name: array}}"
    if not isinstance(added, Mapping):
        raise TypeError(
            f"The learner's results_fn must return {expected}; got {type(added).__name__}."
        )
    for owner, values in added.items():
        if not isinstance(owner, str) or not isinstance(values, Mapping):
            raise TypeError(
                f"The learner's results_fn must return {expected}; got {owner!r}: "
                f"{type(values).__name__}."
            )
        for name, value in values.items():
            try:
                merged.setdefault(owner, {})[name] = jnp.asarray(value)
            except TypeError:
                raise TypeError(
                    f"The learner's results_fn returned {owner}/{name} of type "
                    f"{type(value).__name__}; values must be arrays (or numbers)."
                ) from None
    return merged


def last_update_metrics(
    stacked: Mapping[str, Mapping[str, jax.Array]],
) -> dict[str, dict[str, jax.Array]]:
    """The metrics of the last of ``U`` scanned updates, with two exceptions.

    Drivers that run several updates in one ``lax.scan`` (replay and offline
    training) report the last update's metrics, but ``nonfinite`` is its
    largest (a non-finite value in any update is still reported, even when a
    later one hides it) and the counts of :data:`PER_UPDATE_COUNTS`
    (``num_env_steps_trained``, ``num_agent_steps_trained``) are summed over
    the ``U`` updates.

    Args:
      stacked: ``{owner: {name: [U]}}``, the scanned updates' metrics.

    Returns:
      ``{owner: {name: scalar}}``.

    Example:
      >>> stacked = {"m": {"loss": jnp.array([1.0, 2.0]), "nonfinite": jnp.array([1, 0]),
      ...                  "num_env_steps_trained": jnp.array([8, 0])}}
      >>> {k: int(v) for k, v in last_update_metrics(stacked)["m"].items()}
      {'loss': 2, 'nonfinite': 1, 'num_env_steps_trained': 8}
    """

    def last(name: str, values: jax.Array) -> jax.Array:
        if name == "nonfinite":
            return jnp.max(values, axis=0)
        return jnp.sum(values, axis=0) if name in PER_UPDATE_COUNTS else values[-1]

    return {
        owner: {name: last(name, values) for name, values in by_name.items()}
        for owner, by_name in stacked.items()
    }


def flatten_steps(tree: Any) -> Any:
    """Merges the ``[epochs, minibatches]`` axes of scanned metrics into one ``[steps]`` axis."""
    return jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), tree)


def iter_metrics(metrics: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Each value of nested metrics with its ``"/"``-joined key, in insertion order.

    The one traversal behind the writers' lenient ``flatten_metrics``
    (:mod:`jaxlearner.training.outputs.loggers`) and the checkpoints' strict one
    (:mod:`jaxlearner.checkpoint.metadata`).

    Example:
      >>> list(iter_metrics({"policy": {"loss": 0.5}, "env_steps": 10}))
      [('policy/loss', 0.5), ('env_steps', 10)]
    """
    for name, value in metrics.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            yield from iter_metrics(value, key + "/")
        else:
            yield key, value
