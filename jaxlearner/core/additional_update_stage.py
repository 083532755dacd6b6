"""Additional updates outside the gradient steps: at an update's start, and on request.

Two stages beside RLlib's three gradient stages (:mod:`jaxlearner.core.gradients`), both
running a module's :class:`~jaxlearner.AdditionalUpdate` functions, as declared on its
:class:`~jaxlearner.ModuleSpec`:

* :func:`run_update_start`: the ``after="update_start"`` updates of the modules an update
  trains, once, before its first gradient step (RLlib's ``before_gradient_based_update``);
  :func:`~jaxlearner.make_update` calls it, so the losses see what it wrote.
* :func:`make_additional_update`: the ``after="additional_update"`` updates of chosen
  modules, with values from outside the learner (RLlib's ``additional_update(
  module_ids_to_update=..., **kwargs)``: a KL sampled by the env runners, a timestep).
  :meth:`~jaxlearner.Learner.additional_update` checks its inputs in Python, then runs it
  jitted, compiled once per choice of modules and value names.

Example:
  >>> import jaxlearner as jl
  >>> def set_beta(module, values):
  ...     return module.replace(extra={**module.extra, "beta": values["beta"]})
  >>> beta = jl.AdditionalUpdate(set_beta, after="additional_update", takes=("beta",),
  ...                            init_extra=lambda params: {"beta": 0.0})
  >>> spec = jl.ModuleSpec(model, loss, optax.adam(1e-3), additional_updates=[beta])
  ... # doctest: +SKIP
  >>> state = learner.additional_update(state, module_ids=["policy"], beta=0.5)
  ... # doctest: +SKIP
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.placement import Placement
from jaxlearner.core.state import LearnerState
from jaxlearner.errors import ReadableKeyError

AdditionalUpdateFn: TypeAlias = Callable[
    [LearnerState, tuple[str, ...], Mapping[str, Any]], LearnerState
]
"""The pure ``additional_update(state, module_ids, values) -> state``; ``module_ids`` static."""

STAGE = "additional_update"


def run_update_start(
    specs: Mapping[str, ModuleSpec],
    state: LearnerState,
    trained: Collection[str],
    env_steps: Mapping[str, jax.Array],
) -> LearnerState:
    """Each trained module's ``after="update_start"`` updates, on ``{"env_steps": ...}``.

    Args:
      specs: module id -> spec.
      state: the state before the update's gradient steps.
      trained: the modules the update trains.
      env_steps: ``{module_id: int32}``, the env steps the update accounts for.

    Returns:
      The state with those modules updated; ``state`` itself when none has such an update.
    """
    modules = dict(state.modules)
    for m in trained:
        for additional in specs[m].updates_after("update_start"):
            values = {"env_steps": jnp.asarray(env_steps[m], jnp.int32)}
            modules[m] = additional.fn(modules[m], values)
    if all(modules[m] is state.modules[m] for m in modules):
        return state
    return state.replace_modules(modules)


def make_additional_update(specs: Mapping[str, ModuleSpec]) -> AdditionalUpdateFn:
    """The pure function behind :meth:`~jaxlearner.Learner.additional_update`.

    Args:
      specs: module id -> spec.

    Returns:
      ``additional_update(state, module_ids, values) -> state``: for each module of
      ``module_ids`` (a tuple, static), each of its ``after="additional_update"`` updates in
      the spec's order, called as ``fn(module_state, {name: values[name] for name in
      takes})``. No validation happens (see :func:`check_additional_update`); jittable and
      vmappable over ``state`` and ``values``.

    Example:
      >>> run = jax.jit(make_additional_update(learner.specs), static_argnums=1)
      ... # doctest: +SKIP
      >>> state = run(state, ("policy",), {"sampled_kl": 0.02})   # doctest: +SKIP
    """
    specs = dict(specs)

    def additional_update(
        state: LearnerState, module_ids: tuple[str, ...], values: Mapping[str, Any]
    ) -> LearnerState:
        modules = dict(state.modules)
        for m in module_ids:
            for additional in specs[m].updates_after(STAGE):
                modules[m] = additional.fn(modules[m], {n: values[n] for n in additional.takes})
        return state.replace_modules(modules)

    return additional_update


def check_additional_update(
    specs: Mapping[str, ModuleSpec], module_ids: object, values: Mapping[str, Any]
) -> tuple[str, ...]:
    """The modules to update, checked with the values in Python before anything is traced.

    Args:
      specs: module id -> spec.
      module_ids: a collection of module ids, or ``None``: every module with an
        ``after="additional_update"`` update.
      values: the outside values by name.

    Returns:
      The module ids, in the order given (duplicates dropped).

    Raises:
      TypeError: for a string or other non-collection ``module_ids``; a value no chosen
        module's update takes, or one not a number, array or pytree of them; a value an
        update takes but that is missing (each names the valid names).
      KeyError: for an unknown module id.
      ValueError: for no module to update, or a chosen module with no such update.
    """
    able = [m for m, spec in specs.items() if spec.updates_after(STAGE)]
    chosen = _chosen_modules(specs, module_ids, able)
    takes = {n for m in chosen for u in specs[m].updates_after(STAGE) for n in u.takes}
    unknown = sorted(set(values) - takes)
    if unknown:
        raise TypeError(
            f"learner.additional_update got value(s) {unknown} that no additional update of "
            f"{list(chosen)} takes; they take {sorted(takes)} "
            "(declare jl.AdditionalUpdate(fn, after='additional_update', takes=(...)))."
        )
    for m in chosen:
        for update in specs[m].updates_after(STAGE):
            missing = [n for n in update.takes if n not in values]
            if missing:
                raise TypeError(
                    f"learner.additional_update: module {m!r}'s update "
                    f"{getattr(update.fn, '__name__', update.fn)!r} takes {list(update.takes)}; "
                    f"missing {missing}."
                )
    for name, value in values.items():
        for leaf in jax.tree.leaves(value):
            if not isinstance(leaf, int | float | np.ndarray | np.generic | jax.Array):
                raise TypeError(
                    f"learner.additional_update value {name!r} holds {type(leaf).__name__} "
                    f"{leaf!r}; expected numbers or arrays (or a pytree of them)."
                )
    return chosen


def _chosen_modules(
    specs: Mapping[str, ModuleSpec], module_ids: object, able: list[str]
) -> tuple[str, ...]:
    if not able:
        raise ValueError(
            "learner.additional_update: no module has an additional update to run; declare "
            "jl.AdditionalUpdate(fn, after='additional_update') in a ModuleSpec's "
            "additional_updates."
        )
    if module_ids is None:
        return tuple(able)
    if isinstance(module_ids, str) or not isinstance(module_ids, Collection):
        hint = f" (did you mean [{module_ids!r}]?)" if isinstance(module_ids, str) else ""
        raise TypeError(
            f"learner.additional_update module_ids must be a collection of module ids or "
            f"None; got {module_ids!r}{hint}."
        )
    chosen = tuple(dict.fromkeys(module_ids))
    for m in chosen:
        if m not in specs:
            raise ReadableKeyError(
                f"learner.additional_update got unknown module id {m!r}; modules: {list(specs)}."
            )
        if m not in able:
            raise ValueError(
                f"learner.additional_update: module {m!r} has no after='additional_update' "
                f"update; modules that have one: {able}."
            )
    if not chosen:
        raise ValueError(f"learner.additional_update got no module ids; modules with one: {able}.")
    return chosen


def make_learner_additional_update(
    specs: Mapping[str, ModuleSpec], placement: Placement, jit: bool
) -> Callable[[LearnerState, object, Mapping[str, Any]], LearnerState]:
    """What :meth:`~jaxlearner.Learner.additional_update` runs, after checking the state.

    Args:
      specs: module id -> spec.
      placement: the learner's placement (a mesh keeps the state replicated).
      jit: compile (``False``: run with jit disabled).

    Returns:
      ``run(state, module_ids, values) -> state``: the inputs checked
      (:func:`check_additional_update`), then the pure function jitted once per module
      choice (and recompiled, as ``jax.jit`` does, for new value names or shapes).
    """
    pure = make_additional_update(specs)

    @functools.cache
    def compiled(module_ids: tuple[str, ...]) -> Callable[..., LearnerState]:
        return placement.jit_stage(functools.partial(pure, module_ids=module_ids))

    def run(state: LearnerState, module_ids: object, values: Mapping[str, Any]) -> LearnerState:
        chosen = check_additional_update(specs, module_ids, values)
        if jit:
            return compiled(chosen)(state, values=dict(values))
        with jax.disable_jit():
            return pure(state, chosen, dict(values))

    return run
