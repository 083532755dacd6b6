"""Which modules an update trains: RLlib's ``modules_to_train`` and ``should_module_be_updated``.

``modules_to_train`` (a field of :class:`~jaxlearner.LearnerConfig`) takes four forms:

* ``None``: every module is trained;
* a collection of module ids: those are trained;
* a predicate ``module_id -> bool``: asked once per module when the learner is built;
* a predicate ``(module_id, batch) -> bool`` (RLlib's ``should_module_be_updated(module_id,
  multi_agent_batch)``): asked on the host before each update, for each module the batch
  holds. A predicate that accepts a second positional argument is this form.

The first three fix the set once; :meth:`~jaxlearner.Learner.update` then never looks at the
batch's values. The fourth decides per batch, so it sees the batch as the host knows it
without waiting for the device (:func:`batch_view`): the module ids it holds, every leaf's
shape and dtype, and the values of leaves that are numpy arrays. A leaf already on the device
(a ``jax.Array``) is shown as a ``jax.ShapeDtypeStruct``: reading its values would wait for
whatever computes it. To decide on values, pass numpy arrays. On several processes each
sees its own slice of the batch, and all must decide alike (module ids and shapes agree).

Each distinct set of trained modules is a static part of the compiled update: the learner
compiles its update once per set (and batch shape) and keeps each; a predicate that
alternates between two sets compiles twice in all, not once per call. For a batch predicate,
:attr:`~jaxlearner.Learner.modules_to_train` lists every module (each may be chosen).

Example:
  >>> import numpy as np
  >>> def should_module_be_updated(module_id, batch):
  ...     return module_id in batch and batch[module_id]["x"].shape[0] >= 32
  >>> selection = ModuleSelection(should_module_be_updated, ("a", "b"))
  >>> sorted(selection.select({"a": {"x": np.zeros((64, 3))}, "b": {"x": np.zeros((8, 3))}}))
  ['a']
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeAlias, final

import jax
import numpy as np

ModulePredicate: TypeAlias = Callable[[str], bool]
"""``module_id -> bool``, asked once per module when the learner is built."""

BatchPredicate: TypeAlias = Callable[[str, Mapping[str, Any]], bool]
"""``(module_id, batch) -> bool``, asked before each update (``should_module_be_updated``)."""

ModulesToTrain: TypeAlias = Collection[str] | ModulePredicate | BatchPredicate | None
"""``None`` (train all), a collection of module ids, or a predicate on ids (and the batch)."""


def freeze_rule(rule: object) -> ModulesToTrain:
    """``modules_to_train`` checked: ``None``, a frozenset of ids, or a predicate of 1 or 2 args.

    Raises:
      TypeError: for a string (the hint names the set it may mean), another value, or a
        callable that cannot take one or two positional arguments.
    """
    if rule is None:
        return None
    if isinstance(rule, str):
        raise TypeError(
            f"modules_to_train must be None, a collection of ids or a predicate; got the string "
            f"{rule!r} (did you mean {{{rule!r}}}?)."
        )
    if isinstance(rule, Collection):
        return frozenset(rule)
    if callable(rule):
        takes_batch(rule)  # raises on a callable of no usable arity
        return rule
    raise TypeError(
        "modules_to_train must be None, a collection of module ids, a predicate "
        "module_id -> bool or a predicate (module_id, batch) -> bool; got "
        f"{type(rule).__name__} {rule!r}."
    )


def takes_batch(predicate: Callable[..., Any]) -> bool:
    """Whether a ``modules_to_train`` predicate is the ``(module_id, batch)`` form.

    It is when it accepts a second positional argument (RLlib's
    ``should_module_be_updated(module_id, multi_agent_batch=None)`` does). A callable
    without an inspectable signature (some builtins) is taken as ``module_id -> bool``.

    Raises:
      TypeError: for a callable that cannot take one positional argument, or needs more
        than two.
    """
    try:
        parameters = inspect.signature(predicate).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    variadic = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    if len(required) > 2 or (not positional and not variadic):
        raise TypeError(
            f"A modules_to_train predicate takes (module_id) or (module_id, batch); "
            f"{predicate!r} has the signature {inspect.signature(predicate)}."
        )
    return variadic or len(positional) >= 2


def static_trained(rule: ModulesToTrain, module_ids: Sequence[str]) -> frozenset[str]:
    """The modules ``rule`` trains among ``module_ids``; for a batch predicate, all of them.

    Raises:
      ValueError: for a collection that names an unknown module, or a predicate that raises.
      TypeError: for a predicate that returns something else than a bool.
    """
    if rule is None:
        return frozenset(module_ids)
    if isinstance(rule, frozenset):
        unknown = sorted(rule - set(module_ids))
        if unknown:
            raise ValueError(
                f"modules_to_train names unknown module(s) {unknown}; modules: {list(module_ids)}."
            )
        return rule
    if takes_batch(rule):
        return frozenset(module_ids)
    return frozenset(m for m in module_ids if ask(rule, m))


def ask(predicate: Callable[..., Any], module_id: str, *batch: Mapping[str, Any]) -> bool:
    """``predicate(module_id, *batch)``, its answer checked to be a bool on the host.

    Raises:
      ValueError: when the predicate raises (its error chained), naming the module.
      TypeError: when it returns anything but ``True``/``False`` (a numpy bool passes).
    """
    form = "(module_id, batch)" if batch else "(module_id)"
    try:
        answer = predicate(module_id, *batch)
    except Exception as error:
        raise ValueError(
            f"The modules_to_train predicate{form} raised {type(error).__name__} for module "
            f"{module_id!r}: {error}"
        ) from error
    if isinstance(answer, bool | np.bool_):
        return bool(answer)
    hint = (
        " A jax.Array answer would wait for the device; decide on shapes or numpy values."
        if isinstance(answer, jax.Array)
        else ""
    )
    raise TypeError(
        f"The modules_to_train predicate{form} returned {type(answer).__name__} {answer!r} for "
        f"module {module_id!r}; expected True or False.{hint}"
    )


def batch_view(batch: Mapping[str, Any]) -> dict[str, Any]:
    """The batch as a batch predicate sees it: numpy leaves as they are, device arrays as
    ``jax.ShapeDtypeStruct`` (shape and dtype, no values), so deciding never waits for the device.

    Example:
      >>> import jax.numpy as jnp
      >>> batch_view({"a": {"x": jnp.zeros((4, 2))}})["a"]["x"]
      ShapeDtypeStruct(shape=(4, 2), dtype=float32)
    """
    return {
        m: jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype) if isinstance(x, jax.Array) else x, b
        )
        for m, b in batch.items()
    }


def with_module(
    rule: ModulesToTrain, module_id: str, train: bool | None, module_ids: Sequence[str]
) -> ModulesToTrain:
    """``rule`` for a learner that gains ``module_id``: trained if ``train``, frozen if not.

    ``train=None`` keeps ``rule``: a predicate is asked, a collection leaves the new module
    out, ``None`` trains it. A predicate keeps its form (with or without the batch).
    """
    if train is None:
        return rule
    if callable(rule) and not isinstance(rule, Collection):
        if takes_batch(rule):
            return lambda m, batch: train if m == module_id else rule(m, batch)
        return lambda m: train if m == module_id else rule(m)
    current = set(module_ids) if rule is None else set(rule)
    return frozenset(current | {module_id} if train else current - {module_id})


@final
class ModuleSelection:
    """A learner's ``modules_to_train`` rule, resolved: the modules each batch trains.

    Args:
      rule: a frozen ``modules_to_train`` (see :func:`freeze_rule`).
      module_ids: the learner's modules.

    Attributes:
      candidates: the modules that may be trained: the fixed set, or every module for a
        batch predicate.
      per_batch: whether the set is decided for each batch.
    """

    def __init__(self, rule: ModulesToTrain, module_ids: Sequence[str]) -> None:
        self._rule = rule
        self.candidates = static_trained(rule, module_ids)
        self.per_batch = callable(rule) and not isinstance(rule, Collection) and takes_batch(rule)

    def select(self, batch: Mapping[str, Any]) -> frozenset[str]:
        """The modules this batch trains: the fixed set, or the predicate's choice among the
        batch's modules (asked once each, in sorted order, on :func:`batch_view`).

        Raises:
          ValueError, TypeError: as :func:`ask`.
        """
        if not self.per_batch:
            return self.candidates
        view = batch_view(batch)
        return frozenset(m for m in sorted(batch) if ask(self._rule, m, view))
