"""What a loss sees besides its params and batch, and the shape of a loss.

:class:`LossContext` is the ``ctx`` every loss receives; :class:`LossFn` (a
module's loss) and :class:`JointLossFn` (a learner-level loss over several
modules) are the protocols a loss function satisfies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeAlias

import jax

from jaxlearner.types import Batch, Metrics, Params, PyTree


@dataclasses.dataclass(frozen=True)
class LossContext:
    """The loss context ``ctx`` passed to every loss.

    Attributes:
      module_id: the id of the module whose loss this is.
      apply: the module's ``model.apply``: ``ctx.apply(params, *inputs, **kwargs)``.
      key: a fresh typed PRNG key for this module and minibatch step.
      extra: the module's non-gradient state (``ModuleState.extra``), e.g.
        target params or the KL coefficient.
      hyperparams: current value of each scheduled coefficient, float32 scalars.
      counters: the module's ``grad_steps`` and ``env_steps`` before this step.

    Example:
      >>> def loss(params, batch, ctx):
      ...     logits = ctx.apply(params, batch["obs"])
      ...     entropy = -(jax.nn.softmax(logits) * jax.nn.log_softmax(logits)).sum(-1).mean()
      ...     return -ctx.hyperparams["entropy_coeff"] * entropy, {"entropy": entropy}
    """

    module_id: str
    apply: Callable[..., Any]
    key: jax.Array
    extra: Mapping[str, PyTree]
    hyperparams: Mapping[str, jax.Array]
    counters: Mapping[str, jax.Array]


LossValue: TypeAlias = jax.Array | Mapping[str, jax.Array]
"""A scalar loss, or one scalar per named optimizer of the module."""


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
