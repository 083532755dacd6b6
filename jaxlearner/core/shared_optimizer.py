"""Shared optimizers: one optax value over several modules' params.

RLlib's ``register_optimizer(module_id=ALL_MODULES, ...)``: one Adam and one
global-norm clip spanning, say, a shared encoder module and two heads. A
learner's ``shared_optimizers={"name": jl.SharedOptimizer(optimizer, module_ids)}``
(or ``{"name": (optimizer, module_ids)}``) names each one.

How a step goes: each module's gradient is computed as for any module (its own
loss, or the joint loss); the shared optimizer takes the tree ``{module_id:
grads}`` of its modules, clips it by its ``grad_clip_by`` over all of them
(``"global_norm"``: one norm over every module's gradients), steps once, and
its updates are split back to the modules. Each module's ``grad_steps`` advances
as for any module. Its state is one optax state over ``{module_id: params}``,
kept in :attr:`~jaxlearner.LearnerState.shared_opt_states` under its name, so it
is checkpointed and placed on devices with the rest of the state.

Rules, checked when the learner is built (before anything is compiled):

* a module of a shared optimizer has no optimizer of its own
  (``jl.ModuleSpec(model, loss)`` with neither ``optimizer`` nor ``optimizers``),
  and a module without one must be in a shared optimizer;
* a module is in at most one shared optimizer; each names at least one module
  and only modules of the learner;
* a shared optimizer's modules are trained together: all of them or none
  (``modules_to_train``, the batch's module ids).

Its scheduled hyperparameters (a learning-rate schedule) read the counters of
its first module. Metrics: each of its modules reports ``grad_norm/NAME`` (its
own part, before clipping) and ``learning_rate/NAME``; ``"__all__"`` reports
``grad_norm/NAME``, the norm over all of them, and ``learning_rate/NAME``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeAlias, final

import jax
import jax.numpy as jnp
import optax

from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.optimizer import (
    ModuleOptimizer,
    OptimizerLike,
    as_optimizer,
    clipping,
    learning_rate,
    set_scheduled_hyperparams,
    transformation,
)
from jaxlearner.types import Params, PyTree


@dataclasses.dataclass(frozen=True)
class SharedOptimizer:
    """One optimizer over several modules' params (RLlib's ``ALL_MODULES`` optimizer).

    Attributes:
      optimizer: a :class:`~jaxlearner.Optimizer` or a built optax
        transformation; its ``grad_clip`` applies over all of its modules'
        gradients together.
      module_ids: the modules it updates (at least one, no repeats); none of
        them may have an optimizer of its own.

    Raises:
      TypeError, ValueError: for an optimizer of another type, an empty or
        repeating list of module ids, or an id that is no string.

    Example:
      >>> import optax, jaxlearner as jl
      >>> shared = jl.SharedOptimizer(
      ...     jl.Optimizer(optax.adam, learning_rate=1e-3, grad_clip=0.5),
      ...     ("encoder", "pi", "vf"))
    """

    optimizer: OptimizerLike
    module_ids: Sequence[str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "optimizer", as_optimizer(self.optimizer, "shared"))
        ids = self.module_ids
        if isinstance(ids, str) or not isinstance(ids, Sequence | frozenset | set):
            raise TypeError(
                "SharedOptimizer.module_ids must be a list or tuple of module ids, e.g. "
                f"('encoder', 'pi'); got {type(ids).__name__} {ids!r}."
            )
        ids = tuple(ids)
        if not ids:
            raise ValueError(
                "SharedOptimizer.module_ids is empty; name the modules it updates, e.g. "
                "('encoder', 'pi', 'vf')."
            )
        for module_id in ids:
            if not isinstance(module_id, str) or not module_id:
                raise TypeError(
                    f"SharedOptimizer.module_ids must be non-empty strings; got {module_id!r}."
                )
        repeated = sorted({m for m in ids if ids.count(m) > 1})
        if repeated:
            raise ValueError(f"SharedOptimizer.module_ids names {repeated} more than once: {ids}.")
        object.__setattr__(self, "module_ids", ids)


SharedOptimizerLike: TypeAlias = SharedOptimizer | tuple[OptimizerLike, Sequence[str]]
"""A :class:`SharedOptimizer`, or its two fields as a pair ``(optimizer, module_ids)``."""


def check_shared_optimizers(value: object) -> dict[str, SharedOptimizer]:
    """A learner's ``shared_optimizers``, as ``{name: SharedOptimizer}``, checked on their own.

    Raises:
      TypeError: for something else than ``{name: SharedOptimizer or (optimizer,
        module_ids)}``.
      ValueError: for an empty name, or a module claimed by two shared optimizers.
    """
    if not isinstance(value, Mapping):
        raise TypeError(
            "Learner shared_optimizers must be a mapping {name: jl.SharedOptimizer(optimizer, "
            f"module_ids)}}; got {type(value).__name__} {value!r}."
        )
    shared: dict[str, SharedOptimizer] = {}
    owners: dict[str, str] = {}
    for name, entry in value.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"Shared optimizer names must be non-empty strings; got {name!r}.")
        if isinstance(entry, tuple | list) and len(entry) == 2:
            entry = SharedOptimizer(*entry)
        if not isinstance(entry, SharedOptimizer):
            raise TypeError(
                f"Shared optimizer {name!r} must be a jl.SharedOptimizer or a pair (optimizer, "
                f"module_ids); got {type(entry).__name__} {entry!r}."
            )
        for module_id in entry.module_ids:
            if module_id in owners:
                raise ValueError(
                    f"Module {module_id!r} is claimed by two shared optimizers, "
                    f"{owners[module_id]!r} and {name!r}; a module's params have one optimizer."
                )
            owners[module_id] = name
        shared[name] = entry
    return shared


@final
@dataclasses.dataclass(frozen=True, eq=False)
class SharedOptimizers:
    """A learner's shared optimizers, checked against its modules and composed once.

    Attributes:
      shared: ``{name: SharedOptimizer}`` (:func:`check_shared_optimizers`'s).
      specs: the learner's module specs.

    Raises:
      ValueError: (when built) for an unknown module, a module in a shared
        optimizer that has optimizers of its own, or a module with neither.

    Example:
      >>> shared = SharedOptimizers(learner.config.shared_optimizers, learner.specs)
      ... # doctest: +SKIP
      >>> states = shared.init({m: s.params for m, s in state.modules.items()})  # doctest: +SKIP
    """

    shared: Mapping[str, SharedOptimizer]
    specs: Mapping[str, ModuleSpec]

    def __post_init__(self) -> None:
        for name, entry in self.shared.items():
            unknown = [m for m in entry.module_ids if m not in self.specs]
            if unknown:
                raise ValueError(
                    f"Shared optimizer {name!r} names unknown module(s) {unknown}; the "
                    f"learner's modules are {list(self.specs)}."
                )
            own = [m for m in entry.module_ids if self.specs[m].named_optimizers]
            if own:
                raise ValueError(
                    f"Module(s) {own} are in shared optimizer {name!r} and have optimizers of "
                    "their own too; give them jl.ModuleSpec(model, loss) without optimizer=, "
                    "or leave them out of the shared optimizer."
                )
        for module_id, spec in self.specs.items():
            if not spec.named_optimizers and module_id not in self.owner:
                raise ValueError(
                    f"Module {module_id!r} has no optimizer: give ModuleSpec(optimizer=...) "
                    "(e.g. optax.adam(3e-4)) or optimizers={'actor': ..., 'critic': ...}, or "
                    "put it in a shared optimizer, Learner(shared_optimizers={'name': "
                    f"jl.SharedOptimizer(optimizer, [{module_id!r}, ...])}})."
                )

    @functools.cached_property
    def owner(self) -> dict[str, str]:
        """``{module_id: name}`` of every module in a shared optimizer."""
        return {m: name for name, entry in self.shared.items() for m in entry.module_ids}

    def view(self, module_id: str) -> ModuleOptimizer:
        """A module's part of its shared optimizer, for its gradient and ``grad_norm/NAME``."""
        name = self.owner[module_id]
        return ModuleOptimizer({name: self.shared[name].optimizer}, None, module_id)

    def check_trained(self, trained: Collection[str]) -> None:
        """Raises unless each shared optimizer's modules are all in ``trained`` or none is.

        Raises:
          ValueError: naming the shared optimizer, its modules and those trained.
        """
        for name, entry in self.shared.items():
            present = [m for m in entry.module_ids if m in trained]
            if present and len(present) != len(entry.module_ids):
                raise ValueError(
                    f"Shared optimizer {name!r} updates {list(entry.module_ids)} together, but "
                    f"this step trains only {present} of them; train all of its modules or none "
                    "(modules_to_train, and a batch for each of them)."
                )

    def init(self, params: Mapping[str, Params]) -> dict[str, optax.OptState]:
        """Each shared optimizer's initial state over ``{module_id: params}`` of its modules,
        compiled as one program (as :meth:`ModuleOptimizer.init`)."""
        return {
            name: jax.jit(transformation(entry.optimizer).init)(
                {m: params[m] for m in entry.module_ids}
            )
            for name, entry in self.shared.items()
        }

    def _present(self, grads: Mapping[str, PyTree]) -> dict[str, tuple[str, ...]]:
        """``{name: module_ids}`` of the shared optimizers whose modules ``grads`` holds."""
        self.check_trained(tuple(grads))
        return {
            name: entry.module_ids
            for name, entry in self.shared.items()
            if entry.module_ids[0] in grads
        }

    def grad_norms(self, grads: Mapping[str, PyTree]) -> dict[str, jax.Array]:
        """``{"grad_norm/NAME": L2 norm over all of its modules' gradients}``."""
        return {
            f"grad_norm/{name}": optax.tree.norm({m: grads[m] for m in ids})
            for name, ids in self._present(grads).items()
        }

    def clip(self, grads: Mapping[str, PyTree]) -> dict[str, PyTree]:
        """``grads`` with each shared optimizer's modules clipped together, as its
        ``grad_clip_by`` says; other modules' gradients as they were."""
        clipped = dict(grads)
        for name, ids in self._present(grads).items():
            clip = clipping(self.shared[name].optimizer)
            if clip is not None:
                joint = {m: grads[m] for m in ids}
                clipped.update(clip.update(joint, clip.init(joint), joint)[0])
        return clipped

    def step(
        self,
        grads: Mapping[str, PyTree],
        opt_states: Mapping[str, optax.OptState],
        params: Mapping[str, Params],
        counters: Mapping[str, Mapping[str, jax.Array]],
    ) -> tuple[dict[str, PyTree], dict[str, optax.OptState], dict[str, dict[str, Any]]]:
        """One step of each shared optimizer whose modules ``grads`` holds (clipped already).

        Args:
          grads: ``{module_id: grads}`` after :meth:`clip`.
          opt_states: the state's ``shared_opt_states``.
          params: ``{module_id: params}``.
          counters: ``{module_id: counters}``; a shared optimizer's schedules read
            its first module's.

        Returns:
          ``(updates, new_states, rates)``: ``{module_id: updates}`` for the modules
          of the shared optimizers that stepped, their new states by name, and
          ``{module_id: {"learning_rate/NAME": rate}}`` where the rate was injected.
        """
        updates: dict[str, PyTree] = {}
        new_states: dict[str, optax.OptState] = {}
        rates: dict[str, dict[str, Any]] = {}
        for name, ids in self._present(grads).items():
            optimizer = self.shared[name].optimizer
            state = set_scheduled_hyperparams(opt_states[name], optimizer, dict(counters[ids[0]]))
            step_updates, new_states[name] = transformation(optimizer, clip=False).update(
                {m: grads[m] for m in ids}, state, {m: params[m] for m in ids}
            )
            updates.update(step_updates)
            rate = learning_rate(new_states[name])
            named = {} if rate is None else {f"learning_rate/{name}": jnp.asarray(rate, "float32")}
            rates.update(dict.fromkeys(ids, named))
        return updates, new_states, rates
