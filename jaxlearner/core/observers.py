"""Observers: module state that learns from collected experience, as init/update pairs.

Gradient steps learn from batches; some state learns from the experience itself: running
observation statistics (RLlib's ``MeanStdFilter``, SB3's ``VecNormalize``, brax's
``running_statistics``), a count of observed steps, a replay priority scale. An
:class:`Observer` declares such state the way an optax transformation declares its state:
``init(params) -> state`` makes the initial value, stored in the module's
``extra[observer.name]``, and ``update(state, experience) -> state`` folds in one collected
batch, purely (jit- and vmap-safe). Because the state lives in
:class:`~jaxlearner.core.state.ModuleState`, checkpoints, devices and vmapped seeds carry
it with no further code, and the loss reads it as ``ctx.extra[name]``, the act functions as
``module.extra[name]``.

A module's observers are listed in its :class:`~jaxlearner.ModuleSpec` (``observers=``);
:func:`make_observe` turns them into the one function every driver calls, once per
collected batch and before postprocessing:

* the gymnasium feeds of the :func:`~jaxlearner.Trainer` (on-policy and replay),
* :mod:`jaxlearner.anakin.train`'s iteration (and its replay warm-up),
* the :func:`~jaxlearner.MultiAgentTrainer`, one call per policy's batch,
* the :func:`~jaxlearner.OfflineTrainer`, once over its whole dataset.

A driver that holds a :class:`~jaxlearner.LearnerState` calls
:meth:`jaxlearner.Learner.observe`; one inside a compiled program calls
:func:`observe_modules` (or an algorithm's ``observe``) directly.

An experience batch is a mapping of ``[T, N, ...]`` arrays (``T`` steps of ``N``
environments): ``obs``, ``actions``, ``rewards``, ``terminated``, ``truncated``,
``next_obs``, ``valid`` (``[T, N]`` bool, false for padding steps) and the act function's
extras. A recorded dataset is observed as one environment, ``[steps, 1, ...]``. On a mesh
the update sees the global batch, so sums over it are global: N devices give what 1 device
gives when an observer merges by sums and counts (never by averaging means).

Example: a running count of observed steps and the observations' running mean.
  >>> import jax, jax.numpy as jnp, jaxlearner as jl
  >>> def init(params):
  ...     return {"count": jnp.zeros(()), "mean": jnp.zeros(4)}
  >>> def update(state, experience):
  ...     valid = experience["valid"].astype(jnp.float32)              # [T, N]
  ...     n = valid.sum()
  ...     total = state["count"] + n
  ...     batch_sum = (experience["obs"] * valid[..., None]).sum((0, 1))  # [4]
  ...     mean = state["mean"] + (batch_sum - n * state["mean"]) / jnp.maximum(total, 1.0)
  ...     return {"count": total, "mean": mean}
  >>> steps = jl.Observer("obs_stats", init, update)
  >>> observe = jl.make_observe(steps)
  >>> module = jl.ModuleState(params={}, opt_states={}, extra={"obs_stats": init({})},
  ...                         hyperparams={}, grad_steps=jnp.int32(0), env_steps=jnp.int32(0))
  >>> experience = {"obs": jnp.ones((3, 2, 4)), "valid": jnp.ones((3, 2), bool)}
  >>> module = jax.jit(observe)(module, experience)
  >>> float(module.extra["obs_stats"]["count"]), module.extra["obs_stats"]["mean"].tolist()
  (6.0, [1.0, 1.0, 1.0, 1.0])
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias, final

import jax

from jaxlearner.core.placement import Placement
from jaxlearner.core.state import LearnerState, ModuleState
from jaxlearner.errors import ReadableKeyError
from jaxlearner.types import Experience, Params, PyTree

ObserveFn: TypeAlias = Callable[[ModuleState, Experience], ModuleState]
"""``observe(module_state, experience [T, N, ...]) -> module_state``, pure."""


@final
@dataclasses.dataclass(frozen=True)
class Observer:
    """State of a module that is updated from collected experience: an init/update pair.

    Attributes:
      name: the key of the state in ``ModuleState.extra`` (and ``ctx.extra`` in the loss).
      init: ``init(params) -> state``, the initial state: a pytree of arrays whose shapes
        and dtypes never change (the update is compiled for them).
      update: ``update(state, experience) -> state``, pure; ``experience`` is a mapping
        of ``[T, N, ...]`` arrays with a ``[T, N]`` ``valid`` mask (see the module
        docstring). Must return the same structure, shapes and dtypes as ``init``.

    Raises:
      TypeError: for a name that is not a non-empty string, or ``init``/``update`` that are
        not callable.

    Example:
      >>> import jax.numpy as jnp, jaxlearner as jl
      >>> step_count = jl.Observer(
      ...     "observed_steps",
      ...     init=lambda params: jnp.zeros((), jnp.int32),
      ...     update=lambda count, experience: count + experience["valid"].sum(dtype=jnp.int32),
      ... )
      >>> spec = jl.ModuleSpec(model, loss, optax.adam(1e-3), observers=[step_count])
      ... # doctest: +SKIP
    """

    name: str
    init: Callable[[Params], PyTree]
    update: Callable[[PyTree, Experience], PyTree]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Observer.name must be a non-empty string; got {self.name!r}.")
        for field in ("init", "update"):
            if not callable(getattr(self, field)):
                raise TypeError(
                    f"Observer {self.name!r}: {field} must be callable; got "
                    f"{getattr(self, field)!r}."
                )


def check_observers(observers: object, taken: Sequence[str] = ()) -> tuple[Observer, ...]:
    """A module's observers as a tuple, checked: each an :class:`Observer`, names unique.

    Args:
      observers: a sequence of :class:`Observer`.
      taken: ``extra`` names already used by the module (its additional updates'), which
        an observer may not reuse.

    Raises:
      TypeError: for something else than a sequence of observers.
      ValueError: for two observers of one name, or a name already taken.
    """
    if not isinstance(observers, Sequence) or isinstance(observers, str):
        raise TypeError(
            f"ModuleSpec.observers must be a sequence of jl.Observer; got "
            f"{type(observers).__name__} {observers!r}."
        )
    names: set[str] = set(taken)
    for observer in observers:
        if not isinstance(observer, Observer):
            raise TypeError(
                f"ModuleSpec.observers holds {type(observer).__name__} {observer!r}; expected "
                "jl.Observer(name, init, update)."
            )
        if observer.name in names:
            raise ValueError(
                f"Observer name {observer.name!r} is used twice in one module's extra state; "
                f"names in use: {sorted(names)}."
            )
        names.add(observer.name)
    return tuple(observers)


def make_observe(*observers: Observer) -> ObserveFn:
    """The function that folds one experience batch into a module's observed state.

    Args:
      *observers: the module's observers, applied in order, each to its own
        ``extra[observer.name]``.

    Returns:
      ``observe(module_state, experience) -> module_state``, pure; the identity when
      there are no observers. Only the observers' ``extra`` entries change.

    Example:
      >>> observe = jl.make_observe(*learner.specs["default_policy"].observers)
      ... # doctest: +SKIP
      >>> module = observe(module, experience)                       # doctest: +SKIP
    """
    observers = check_observers(list(observers))

    def observe(module: ModuleState, experience: Experience) -> ModuleState:
        if not observers:
            return module
        extra = dict(module.extra)
        for observer in observers:
            extra[observer.name] = observer.update(extra[observer.name], experience)
        return module.replace(extra=extra)

    return observe


def observe_modules(
    observes: Mapping[str, ObserveFn],
    state: LearnerState,
    experiences: Mapping[str, Experience],
) -> LearnerState:
    """Each module's experience folded into its observed state, the rest of ``state`` kept.

    Args:
      observes: ``{module_id: observe}`` (from :func:`make_observe`).
      state: the learner state.
      experiences: ``{module_id: experience}`` for some of the modules.

    Returns:
      The new learner state, pure.
    """
    modules = dict(state.modules)
    for module_id, experience in experiences.items():
        modules[module_id] = observes[module_id](modules[module_id], experience)
    return state.replace_modules(modules)


def make_learner_observe(
    observers: Mapping[str, Sequence[Observer]], placement: Placement, jit: bool
) -> Callable[[LearnerState, Mapping[str, Experience]], LearnerState]:
    """What :meth:`~jaxlearner.Learner.observe` runs: ``observe(state, experiences) -> state``.

    Args:
      observers: each module's observers, ``{module_id: observers}``.
      placement: the learner's placement (a mesh keeps the state replicated; several
        processes' experiences are joined along their ``N`` axes).
      jit: compile the update (``False``: run it with jit disabled).

    Returns:
      A function that refuses experience of an unknown module (``KeyError``), leaves out
      modules without observers, and returns ``state`` itself, with no device call, when no
      module is left.
    """
    observes = {m: make_observe(*module) for m, module in observers.items() if module}
    jitted = placement.jit_observe(functools.partial(observe_modules, observes))

    def observe(state: LearnerState, experiences: Mapping[str, Experience]) -> LearnerState:
        unknown = [m for m in experiences if m not in observers]
        if unknown:
            raise ReadableKeyError(
                f"observe got experience of unknown module(s) {unknown}; modules: "
                f"{list(observers)}."
            )
        observed = {m: e for m, e in experiences.items() if m in observes}
        if not observed:
            return state
        observed = placement.global_experience(observed)
        if jit:
            return jitted(state, observed)
        with jax.disable_jit():
            return jitted(state, observed)

    return observe
