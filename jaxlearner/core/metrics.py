"""Metrics: checking what losses return and reducing it over minibatch steps.

The update returns ``{module_id: {name: value}, "__all__": {name: value}}``,
every value a scalar device array. Per-step values are stacked by
``lax.scan`` and reduced inside the compiled update, by each key's declared
reduction (the mean unless the module's spec says otherwise).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from jaxlearner.types import Metrics, Reduction

ALL_MODULES = "__all__"
"""The metrics key for learner-wide values (RLlib's ``ALL_MODULES``)."""

_REDUCERS = {
    "mean": lambda x: jnp.mean(x, axis=0),
    "sum": lambda x: jnp.sum(x, axis=0),
    "min": lambda x: jnp.min(x, axis=0),
    "max": lambda x: jnp.max(x, axis=0),
    "last": lambda x: x[-1],
}


def check_loss_metrics(owner: str, metrics: Any) -> dict[str, jax.Array]:
    """Validates the metrics a loss returned: a mapping of names to scalars.

    Raises:
      TypeError: when ``metrics`` is not a mapping with string keys.
      ValueError: when a value is not a scalar.
    """
    if not isinstance(metrics, Mapping):
        raise TypeError(
            f"The loss of {owner} must return (loss, metrics) with metrics a dict of scalars; "
            f"got metrics of type {type(metrics).__name__}."
        )
    checked = {}
    for name, value in metrics.items():
        if not isinstance(name, str):
            raise TypeError(f"The loss of {owner} returned a metric with non-string key {name!r}.")
        value = jnp.asarray(value)
        if value.shape != ():
            raise ValueError(
                f"The loss of {owner} returned metric {name!r} of shape {value.shape}; metrics "
                "must be scalars (reduce them in the loss, e.g. with .mean())."
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


def last_update_metrics(
    stacked: Mapping[str, Mapping[str, jax.Array]],
) -> dict[str, dict[str, jax.Array]]:
    """The metrics of the last of ``U`` scanned updates, ``nonfinite`` excepted: its largest.

    Drivers that run several updates in one ``lax.scan`` (replay and offline
    training) report the last update's metrics; a non-finite value in any update
    is still reported, even when a later one hides it.

    Args:
      stacked: ``{owner: {name: [U]}}``, the scanned updates' metrics.

    Returns:
      ``{owner: {name: scalar}}``.

    Example:
      >>> stacked = {"m": {"loss": jnp.array([1.0, 2.0]), "nonfinite": jnp.array([1, 0])}}
      >>> {k: int(v) for k, v in last_update_metrics(stacked)["m"].items()}
      {'loss': 2, 'nonfinite': 1}
    """
    return {
        owner: {
            name: jnp.max(values) if name == "nonfinite" else values[-1]
            for name, values in by_name.items()
        }
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
