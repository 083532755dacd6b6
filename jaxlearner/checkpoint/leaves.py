"""A learner state as a checkpoint stores it: its natural tree of plain dicts and lists.

Orbax-free helpers of :mod:`jaxlearner.checkpoint.manager`. A
:class:`~jaxlearner.LearnerState` is saved as the nested dicts and lists
:func:`plain_tree` makes of it, so that plain orbax, without jaxlearner,
reads it back as ``restored["modules"]["policy"]["params"]["params"]
["Dense_0"]["kernel"]``: flax struct dataclasses and optax named tuples become
dicts of their fields, tuples become lists, typed PRNG keys their key data,
and empty nodes (``optax.EmptyState()``, ``{}``) stay empty. A leaf is named by
its ``"/"``-joined path in that tree (:func:`plain_paths`), e.g.
``modules/policy/params/params/Dense_0/kernel``, which is also how the
metadata keys each leaf's sha256 digest (:func:`digest`).

Restoring builds the state the learner expects with ``jax.eval_shape``
(:func:`abstract_state`), compares its leaves with the shapes and dtypes orbax
recorded (:func:`check_structure`) before any array is read, and puts the
arrays read back into the expected structure, key types and weak types
included (:func:`logical_leaf`).

A checkpoint reads the learner (a frozen value) directly: its specs, config,
batch layout and placement.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.core.batch import Layout
from jaxlearner.core.learner import Learner


def _entry_name(entry: Any) -> str:
    """A path entry as a name: a dict key, a field name or a sequence index."""
    for attribute in ("key", "name", "idx"):
        if hasattr(entry, attribute):
            return str(getattr(entry, attribute))
    return str(entry)


def path_name(path: tuple[Any, ...]) -> str:
    """A ``jax.tree_util`` key path as ``"a/b/0"``, the leaf's name in a checkpoint."""
    return "/".join(_entry_name(entry) for entry in path)


def plain_paths(tree: Any) -> list[tuple[str, Any]]:
    """Leaves by ``"a/b/0"`` paths, in flattening order: a field and the dict key it becomes agree.

    Example:
      >>> plain_paths({"w": 1, "opt": [2, {"mu": 3}]})
      [('opt/0', 2), ('opt/1/mu', 3), ('w', 1)]
    """
    return [(path_name(path), leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(tree)]


def plain_tree(tree: Any, leaf: Callable[[Any], Any]) -> Any:
    """``tree`` as nested dicts and lists, with ``leaf`` applied to each leaf.

    Nodes with named children (dicts, flax struct dataclasses, named tuples)
    become dicts keyed by those names; nodes with indexed children (tuples,
    lists) become lists; ``None`` stays ``None``; an empty node becomes ``[]``
    when it is a plain tuple or list and ``{}`` otherwise (``optax.EmptyState()``
    included). Orbax saves and restores all of these, empty ones too.

    Example:
      >>> import optax
      >>> plain_tree((optax.EmptyState(), {"count": 1}), lambda x: x)
      [{}, {'count': 1}]
    """
    children = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda node: node is not tree)[0]
    if children and children[0][0] == ():
        return leaf(tree)
    if not children:
        if tree is None:
            return None
        sequence = isinstance(tree, list | tuple) and not hasattr(tree, "_fields")
        return [] if sequence else {}
    if all(isinstance(path[0], jax.tree_util.SequenceKey) for path, _ in children):
        return [plain_tree(child, leaf) for _, child in children]
    return {_entry_name(path[0]): plain_tree(child, leaf) for path, child in children}


def is_key(leaf: Any) -> bool:
    """Whether a leaf (array or ``ShapeDtypeStruct``) is a typed PRNG key."""
    return jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key)


def stored_leaf(leaf: Any) -> jax.Array:
    """A state leaf as it is stored: an array, typed keys as their key data."""
    if is_key(leaf):
        return jax.random.key_data(leaf)
    return leaf if isinstance(leaf, jax.Array) else jnp.asarray(leaf)


def stored_shape_dtype(leaf: Any) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype a leaf is stored with (typed keys as their key data)."""
    if is_key(leaf):
        data = jax.eval_shape(jax.random.key_data, leaf)
        return data.shape, data.dtype
    return tuple(leaf.shape), leaf.dtype


def logical_leaf(array: jax.Array, expected: Any, key_impl: str | None, sharding: Any) -> jax.Array:
    """A restored array as the state held it: typed keys re-wrapped, weak scalars weak again.

    Args:
      array: the array read back.
      expected: the leaf of the abstract state (``jax.eval_shape`` records weak types).
      key_impl: the implementation typed keys were saved with.
      sharding: where the array lives.
    """
    if is_key(expected):
        return jax.random.wrap_key_data(array, impl=key_impl)
    if getattr(expected, "weak_type", False) and array.ndim == 0 and sharding.is_fully_addressable:
        weak = jnp.asarray(host_value(array).item())
        if weak.dtype == array.dtype and weak.weak_type:
            return jax.device_put(weak, sharding)
    return array


def host_value(array: jax.Array) -> np.ndarray:
    """An array's value on this host; also for arrays replicated over several processes."""
    if not isinstance(array, jax.Array):
        return np.asarray(array)
    if array.is_fully_addressable:
        return np.asarray(array)
    if array.is_fully_replicated:
        return np.asarray(array.addressable_shards[0].data)
    raise ValueError(
        "Digests need each state leaf on this process or replicated; got a leaf sharded as "
        f"{array.sharding}. Pass verify=False to save it without digests."
    )


def digest(array: np.ndarray) -> str:
    """The sha256 of an array's bytes, as hex."""
    # Hashing a byte view, not a copy: about 1 GB/s on one core.
    return hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8)).hexdigest()


def digests(tree: Any) -> dict[str, str]:
    """``{path: sha256}`` of every leaf of a plain tree, in flattening order."""
    return {path: digest(host_value(leaf)) for path, leaf in plain_paths(tree)}


def extra_array_digests(tree: Any, verify: bool) -> dict[str, str | None]:
    """``{path: sha256}`` of each array in ``extra_arrays`` (``None`` digests without ``verify``).

    Raises:
      TypeError: when a leaf is not an array, or is a typed PRNG key.
    """
    records: dict[str, str | None] = {}
    for path, leaf in plain_paths(tree):
        if not isinstance(leaf, jax.Array | np.ndarray | np.generic):
            raise TypeError(
                f"save's extra_arrays must hold arrays only; {path} is {type(leaf).__name__}."
            )
        if is_key(leaf):
            raise TypeError(
                f"save's extra_arrays cannot hold typed PRNG keys ({path}); store "
                "jax.random.key_data(key) and re-wrap it with jax.random.wrap_key_data."
            )
        records[path] = digest(host_value(leaf)) if verify else None
    return records


def check_module_ids(step: int, saved: list[str], expected: tuple[str, ...]) -> None:
    """Raises naming the modules only the checkpoint or only the learner has."""
    missing = [m for m in saved if m not in expected]
    extra = [m for m in expected if m not in saved]
    if missing or extra:
        problems = [f"module {m!r} is in the checkpoint but not in the learner" for m in missing]
        problems += [f"module {m!r} is in the learner but not in the checkpoint" for m in extra]
        raise ValueError(
            f"Checkpoint step {step} does not match this learner: {'; '.join(problems)} "
            f"(checkpoint modules: {saved}; learner modules: {list(expected)})."
        )


def stored_shapes(tree: Any) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """``{path: (shape, dtype)}`` as stored, of a state, an abstract state or orbax's metadata."""
    shapes = {}
    for path, leaf in plain_paths(tree):
        shape, dtype = stored_shape_dtype(leaf)
        shapes[path] = (tuple(shape), np.dtype(dtype))
    return shapes


def check_structure(
    step: int,
    saved: dict[str, tuple[tuple[int, ...], np.dtype]],
    expected: dict[str, tuple[tuple[int, ...], np.dtype]],
) -> None:
    """Raises naming the first leaf, in the expected state's order, whose shape or dtype differs.

    Args:
      step: the step, for the message.
      saved: ``{path: (shape, dtype)}`` as orbax recorded the step's leaves.
      expected: the same for the state the learner expects, in its flattening order.

    Raises:
      ValueError: naming the path and what was saved versus expected.
    """

    def text(entry: tuple[tuple[int, ...], np.dtype] | None) -> str:
        if entry is None:
            return "no such leaf"
        shape, dtype = entry
        return f"{dtype}[{', '.join(map(str, shape))}]"

    for path in dict.fromkeys([*expected, *saved]):
        old, new = saved.get(path), expected.get(path)
        if old != new:
            raise ValueError(
                f"Checkpoint step {step} does not match this learner's state at {path}: saved "
                f"{text(old)}, expected {text(new)}. Nothing was restored: restoring never "
                "casts, reshapes or skips a leaf; build the learner as it was when the step "
                "was saved."
            )


def abstract_state(learner: Learner, layout: Mapping[str, Layout], key_impl: str | None) -> Any:
    """The learner's state as ``ShapeDtypeStruct`` leaves, from its ``init`` traced abstractly.

    The sample batch is abstract, with the saved layout and as many rows as a minibatch (the
    size the loss is written for; nothing is computed or allocated, whatever the size). The
    learner is not changed; its state is built unplaced (the abstract state needs no devices).
    """
    rows = learner.config.minibatch_size or 2
    unplaced = learner.on()
    sample = {
        module_id: jax.tree.map(
            lambda s: jax.ShapeDtypeStruct((rows, *s.shape), s.dtype), layout[module_id]
        )
        for module_id in learner.module_ids
    }
    return jax.eval_shape(
        lambda batch: unplaced.init(jax.random.key(0, impl=key_impl), batch), sample
    )


def default_device() -> jax.Device:
    """The device a plain learner's state lives on (JAX's default device)."""
    return next(iter(jnp.zeros(()).devices()))
