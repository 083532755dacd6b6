"""Type aliases and protocols shared across jaxlearner.

Behaviour a user passes in is described by a ``Protocol``, so any object of
the right shape works: a ``flax.linen.Module`` is a :class:`Model`; the loss
protocols live beside the context a loss receives, in
:mod:`jaxlearner.core.context`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol, TypeAlias

import jax

PyTree: TypeAlias = Any
"""Any JAX pytree (nested dicts, lists, tuples, dataclasses of arrays)."""

Params: TypeAlias = PyTree
"""A module's trainable parameters, e.g. flax's ``{"params": {...}}``."""

Batch: TypeAlias = PyTree
"""A pytree of arrays sharing a leading batch axis ``[B, ...]``."""

Experience: TypeAlias = Mapping[str, jax.Array]
"""Collected experience as ``[T, N, ...]`` arrays (``T`` steps of ``N`` environments):
``obs``, ``actions``, ``rewards``, ``terminated``, ``truncated``, ``next_obs``, ``valid``
(``[T, N]`` bool) and the act function's extras."""

Metrics: TypeAlias = Mapping[str, jax.Array]
"""A flat mapping from metric name to a scalar array."""

Reduction: TypeAlias = Literal["mean", "sum", "min", "max", "last"]
"""How a metric is reduced over the minibatch steps of one update."""

REDUCTIONS: tuple[str, ...] = ("mean", "sum", "min", "max", "last")


class Model(Protocol):
    """Anything with flax.linen's ``init``/``apply`` pair.

    ``init(key, *args, **kwargs) -> params`` and
    ``apply(params, *args, **kwargs) -> outputs``.
    """

    def init(self, rngs: Any, *args: Any, **kwargs: Any) -> Params: ...

    def apply(self, variables: Params, *args: Any, **kwargs: Any) -> Any: ...


ScheduleFn: TypeAlias = Callable[[jax.Array], jax.Array]
"""An optax-style schedule: ``count -> value``."""
