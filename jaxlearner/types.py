"""Type aliases and protocols shared across jaxlearner.

Everything a user passes in as behaviour (models, losses, additional updates)
is described here by a ``Protocol``, so any object of the right shape works:
a ``flax.linen.Module`` is a :class:`Model`, a plain function is a
:class:`LossFn`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

import jax

if TYPE_CHECKING:
    from jaxlearner.context import LossContext

PyTree: TypeAlias = Any
"""Any JAX pytree (nested dicts, lists, tuples, dataclasses of arrays)."""

Params: TypeAlias = PyTree
"""A module's trainable parameters, e.g. flax's ``{"params": {...}}``."""

Batch: TypeAlias = PyTree
"""A pytree of arrays sharing a leading batch axis ``[B, ...]``."""

Metrics: TypeAlias = Mapping[str, jax.Array]
"""A flat mapping from metric name to a scalar array."""

Reduction: TypeAlias = Literal["mean", "sum", "min", "max", "last"]
"""How a metric is reduced over the minibatch steps of one update."""

REDUCTIONS: tuple[str, ...] = ("mean", "sum", "min", "max", "last")

LossValue: TypeAlias = jax.Array | Mapping[str, jax.Array]
"""A scalar loss, or one scalar per named optimizer of the module."""


class Model(Protocol):
    """Anything with flax.linen's ``init``/``apply`` pair.

    ``init(key, *args, **kwargs) -> params`` and
    ``apply(params, *args, **kwargs) -> outputs``.
    """

    def init(self, rngs: Any, *args: Any, **kwargs: Any) -> Params: ...

    def apply(self, variables: Params, *args: Any, **kwargs: Any) -> Any: ...


class LossFn(Protocol):
    """A module's loss: ``loss(params, batch, ctx) -> (loss, metrics)``.

    Pure: hyperparameters come from ``ctx.hyperparams`` and ``ctx.extra``,
    randomness from ``ctx.key``, the model from ``ctx.apply``. ``loss`` is a
    scalar, or a mapping ``{optimizer_name: scalar}`` when each named
    optimizer of the module follows the gradient of its own loss term (as in
    SAC's actor, critic and temperature losses).
    """

    def __call__(
        self, params: Params, batch: Batch, ctx: LossContext
    ) -> tuple[LossValue, Metrics]: ...


class JointLossFn(Protocol):
    """A learner-level loss over several modules at once.

    ``joint_loss(params, batch, ctx) -> (scalar, metrics)`` where ``params``,
    ``batch`` and ``ctx`` are mappings from module id to that module's
    params, batch and :class:`~jaxlearner.LossContext`. Gradients flow to
    every module being trained.
    """

    def __call__(
        self,
        params: Mapping[str, Params],
        batch: Mapping[str, Batch],
        ctx: Mapping[str, LossContext],
    ) -> tuple[jax.Array, Metrics]: ...


ScheduleFn: TypeAlias = Callable[[jax.Array], jax.Array]
"""An optax-style schedule: ``count -> value``."""
