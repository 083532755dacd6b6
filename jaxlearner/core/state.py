"""The learner state: an immutable pytree of arrays.

Everything that changes during training is here (params, optimizer states,
non-gradient extras, scheduled hyperparameters, counters, the PRNG key) and
nothing else: models, losses, optimizers and configs live outside, in the
:class:`~jaxlearner.Learner` that built the state. A state can therefore be
passed through ``jax.jit``, ``jax.vmap``, sharded, and checkpointed as is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxlearner.types import Params, PyTree


@struct.dataclass
class ModuleState:
    """The training state of one module.

    Attributes:
      params: the model's parameters (flax's ``{"params": ...}``).
      opt_states: optax state of each named optimizer, by name.
      extra: non-gradient state, e.g. ``{"target_params": ..., "kl_coeff": ...}``;
        changed by additional updates, read by the loss through ``ctx.extra``.
      hyperparams: current value of each of the module's scheduled
        coefficients (entropy coefficient, clip parameter, ...), float32
        scalars, read by the loss through ``ctx.hyperparams``.
      grad_steps: int32 scalar, gradient steps this module has taken.
      env_steps: int32 scalar, rows of this module's batches trained on
        (counted once per update, not once per epoch), or the ``env_steps``
        passed to ``update``.
    """

    params: Params
    opt_states: dict[str, optax.OptState]
    extra: dict[str, PyTree]
    hyperparams: dict[str, jax.Array]
    grad_steps: jax.Array
    env_steps: jax.Array

    @property
    def counters(self) -> dict[str, jax.Array]:
        """The counters schedules may read, by name."""
        return {"grad_steps": self.grad_steps, "env_steps": self.env_steps}


@struct.dataclass
class LearnerState:
    """The whole learner state: every module plus learner-wide counters and key.

    Attributes:
      modules: each module's :class:`ModuleState`, by module id.
      key: a typed PRNG key (``jax.random.key``), split once per update.
      updates: int32 scalar, calls of ``update`` so far.
      grad_steps: int32 scalar, minibatch steps taken (skipped ones included).
      skipped_steps: int32 scalar, minibatch steps skipped because a loss or
        gradient was not finite (only with ``skip_nonfinite=True``).
      shared_opt_states: the optax state of each of the learner's shared
        optimizers (:class:`~jaxlearner.SharedOptimizer`), by name, each over
        ``{module_id: params}`` of its modules; ``{}`` without any.

    Example:
      >>> state = learner.init(jax.random.key(0), batch)      # doctest: +SKIP
      >>> state.modules["policy"].params                      # doctest: +SKIP
    """

    modules: dict[str, ModuleState]
    key: jax.Array
    updates: jax.Array
    grad_steps: jax.Array
    skipped_steps: jax.Array
    shared_opt_states: dict[str, optax.OptState] = struct.field(default_factory=dict)

    def replace_modules(self, modules: Mapping[str, ModuleState]) -> LearnerState:
        """A copy with ``modules`` replaced (other fields kept)."""
        return self.replace(modules=dict(modules))


def zero_counter() -> jax.Array:
    """A fresh int32 scalar counter."""
    return jnp.zeros((), jnp.int32)


def select_tree(predicate: jax.Array, on_true: Any, on_false: Any) -> Any:
    """Leafwise ``where(predicate, on_true, on_false)`` over two same-structured trees.

    Typed PRNG keys are selected through their key data, which ``jnp.where``
    does not accept directly.
    """

    def select(a: jax.Array, b: jax.Array) -> jax.Array:
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            data = jnp.where(predicate, jax.random.key_data(a), jax.random.key_data(b))
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(a))
        return jnp.where(predicate, a, b)

    return jax.tree.map(select, on_true, on_false)
