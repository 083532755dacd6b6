"""What a learner compiles: its update, RLlib's three gradient stages, observe, additional update.

:func:`learner_functions` builds, once per :class:`~jaxlearner.Learner`, the pure
functions (:func:`~jaxlearner.make_update`,
:func:`~jaxlearner.core.gradients.make_gradient_stages`) and each one compiled
with the placement's shardings: one ``jax.jit`` per public step, at the
outermost function. With ``jit=False`` the same functions run eagerly instead,
so losses see concrete arrays and can be printed or stepped through.

The set of trained modules is static. When ``modules_to_train`` decides per batch
(:mod:`jaxlearner.core.module_selection`), :meth:`LearnerFunctions.for_modules` builds
the functions of each set the first time it is asked for it and keeps them, so each
distinct set compiles once (per batch shape) however often it comes back.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection, Mapping
from typing import Any, final

import jax

from jaxlearner.core.additional_update_stage import make_learner_additional_update
from jaxlearner.core.gradients import GradientStages, make_gradient_stages
from jaxlearner.core.learner_config import LearnerConfig
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.observers import make_learner_observe
from jaxlearner.core.placement import Placement
from jaxlearner.core.state import LearnerState
from jaxlearner.core.update import UpdateFn, make_update
from jaxlearner.types import Experience


@final
@dataclasses.dataclass(frozen=True, eq=False)
class LearnerFunctions:
    """A learner's functions, pure and compiled.

    Attributes:
      update: the pure ``update(state, batch, env_steps) -> (state, metrics)``.
      stages: the pure three stages (:class:`~jaxlearner.core.gradients.GradientStages`).
      compiled_update: ``update`` jitted with the placement's shardings (or eager).
      compiled_stages: each stage jitted likewise (or eager).
      observe: ``observe(state, experiences) -> state``, compiled (or eager).
      additional_update: ``run(state, module_ids, values) -> state``, checked, then
        compiled (or eager); see :mod:`jaxlearner.core.additional_update_stage`.
      trained: the modules these functions train.
      build: ``build(trained) -> LearnerFunctions``, the functions of another set.
      siblings: the functions of other trained sets, built by :meth:`for_modules`.
    """

    update: UpdateFn
    stages: GradientStages
    compiled_update: UpdateFn
    compiled_stages: GradientStages
    observe: Callable[[LearnerState, Mapping[str, Experience]], LearnerState]
    additional_update: Callable[[LearnerState, Any, Mapping[str, Any]], LearnerState]
    trained: frozenset[str]
    build: Callable[[frozenset[str]], LearnerFunctions]
    siblings: dict[frozenset[str], LearnerFunctions] = dataclasses.field(default_factory=dict)

    def for_modules(self, trained: frozenset[str]) -> LearnerFunctions:
        """The functions that train ``trained``: these, or a sibling built once and kept."""
        if trained == self.trained:
            return self
        if trained not in self.siblings:
            self.siblings[trained] = self.build(trained)
        return self.siblings[trained]


def learner_functions(
    specs: Mapping[str, ModuleSpec],
    config: LearnerConfig,
    trained: Collection[str],
    placement: Placement,
) -> LearnerFunctions:
    """Builds a learner's pure functions and compiles each (or wraps it to run eagerly).

    Args:
      specs: module id -> :class:`~jaxlearner.ModuleSpec`.
      config: the learner's configuration (``jit`` and ``donate_state`` apply here).
      trained: the ids of the modules to train.
      placement: where the learner runs; on a mesh, each epoch's minibatches
        are constrained to split over its ``"data"`` axis.

    Example:
      >>> functions = learner_functions(specs, config, {"policy"}, Placement())  # doctest: +SKIP
      >>> state, metrics = functions.compiled_update(state, batch, env_steps)    # doctest: +SKIP
    """
    constrain = None if placement.mesh is None else placement.constrain_minibatch
    update = make_update(specs, config, trained, constrain_minibatch=constrain)
    stages = make_gradient_stages(specs, config, trained)
    if config.jit:
        compiled_update = placement.jit(update, config.donate_state)
        compiled_stages = stages.wrapped(placement.jit_stage, config.donate_state)
    else:
        compiled_update, compiled_stages = _eager(update), stages.wrapped(_eager, False)
    observers = {m: spec.observers for m, spec in specs.items()}
    observe = make_learner_observe(observers, placement, config.jit)
    additional_update = make_learner_additional_update(specs, placement, config.jit)
    build = functools.partial(_build, specs, config, placement)
    return LearnerFunctions(
        update,
        stages,
        compiled_update,
        compiled_stages,
        observe,
        additional_update,
        frozenset(trained),
        build,
    )


def _build(
    specs: Mapping[str, ModuleSpec], config: LearnerConfig, placement: Placement, trained: Any
) -> LearnerFunctions:
    return learner_functions(specs, config, trained, placement)


def _eager(fn: Callable[..., Any], donate_state: bool = False) -> Callable[..., Any]:
    """``fn`` run under ``jax.disable_jit()``, its loops in Python on concrete arrays."""

    def eager(*args: Any) -> Any:
        with jax.disable_jit():
            return fn(*args)

    return eager
