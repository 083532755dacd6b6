"""What a loss sees besides its params and batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax


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
    # Mapping[str, PyTree]; spelt out as Any (what PyTree is) because jaxlearner.types
    # refers to LossContext in the LossFn protocols, and context must not import types back.
    extra: Mapping[str, Any]
    hyperparams: Mapping[str, jax.Array]
    counters: Mapping[str, jax.Array]
