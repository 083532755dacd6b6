"""A learner state's leaves as a checkpoint stores them, and the state a restore expects.

Orbax-free helpers of :mod:`jaxlearner.checkpoint`. Every array leaf of a
:class:`~jaxlearner.LearnerState` is saved under a numbered name and described
in the JSON metadata by its path (as Python would index it, e.g.
``.modules['policy'].params['w']``), shape and dtype, with a sha256 digest of
its bytes. Typed PRNG keys are stored as their key data and weakly typed
scalars are marked, so that restoring gives back exactly the state that was
saved.

Restoring builds the state the learner expects with ``jax.eval_shape``
(:func:`abstract_state`) and compares it leaf by leaf with the saved
description (:func:`check_structure`) before any array is read; the target is
a learner on its default device, or a :class:`Placement` such as a
:class:`~jaxlearner.LearnerGroup` with its sharding.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.batch import Layout
from jaxlearner.learner import Learner
from jaxlearner.state import LearnerState


def leaves_with_paths(tree: Any) -> list[tuple[str, Any]]:
    """A tree's leaves with their paths as Python would index them, in flattening order."""
    return [(_path_text(p), x) for p, x in jax.tree_util.tree_leaves_with_path(tree)]


def _path_text(path: tuple[Any, ...]) -> str:
    """A leaf's path as Python would index it, e.g. ``.modules['policy'].params['w']``.

    Written out here rather than with ``jax.tree_util.keystr`` so that saved paths do not
    change with JAX's formatting.
    """
    parts = []
    for entry in path:
        if isinstance(entry, jax.tree_util.DictKey):
            parts.append(f"[{entry.key!r}]")
        elif isinstance(entry, jax.tree_util.GetAttrKey):
            parts.append(f".{entry.name}")
        elif isinstance(entry, jax.tree_util.SequenceKey):
            parts.append(f"[{entry.idx}]")
        else:
            parts.append(f"[{getattr(entry, 'key', entry)!r}]")
    return "".join(parts)


def describe_leaf(path: str, leaf: Any) -> dict[str, Any]:
    """A leaf's path, shape and dtype, as the metadata records them."""
    return {"path": path, "shape": list(leaf.shape), "dtype": str(leaf.dtype)}


def _is_key(leaf: Any) -> bool:
    return jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key)


def stored_shape_dtype(leaf: Any) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype a leaf is stored with (typed keys as their key data)."""
    if _is_key(leaf):
        data = jax.eval_shape(jax.random.key_data, leaf)
        return data.shape, data.dtype
    return tuple(leaf.shape), leaf.dtype


def storable_leaves(
    state: LearnerState, digests: bool
) -> tuple[dict[str, jax.Array], list[dict[str, Any]]]:
    """The state's leaves as named arrays for orbax, and their descriptions."""
    named = leaves_with_paths(state)
    width = max(5, len(str(len(named) - 1)))
    arrays: dict[str, jax.Array] = {}
    leaves = []
    for index, (path, leaf) in enumerate(named):
        leaf = leaf if isinstance(leaf, jax.Array) else jnp.asarray(leaf)
        record = {"name": f"{index:0{width}d}", **describe_leaf(path, leaf)}
        if _is_key(leaf):
            record["key_impl"] = str(jax.random.key_impl(leaf))
            leaf = jax.random.key_data(leaf)
        elif leaf.weak_type:
            record["weak_type"] = True
        arrays[record["name"]] = leaf
        leaves.append(record)
    if digests:
        for record, host in zip(leaves, (host_value(x) for x in arrays.values()), strict=True):
            record["sha256"] = digest(host)
    return arrays, leaves


def logical_leaf(array: jax.Array, record: dict[str, Any], sharding: Any) -> jax.Array:
    """A restored array as the state held it: typed keys re-wrapped, weak scalars weak again."""
    if "key_impl" in record:
        return jax.random.wrap_key_data(array, impl=record["key_impl"])
    if record.get("weak_type") and array.ndim == 0 and sharding.is_fully_addressable:
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


def plain_paths(tree: Any) -> list[tuple[str, Any]]:
    """Leaves by ``"a/b/0"`` paths: a dataclass field and the dict orbax restores it as agree."""

    def name(entry: Any) -> str:
        for attribute in ("key", "name", "idx"):
            if hasattr(entry, attribute):
                return str(getattr(entry, attribute))
        return str(entry)

    return [
        ("/".join(name(entry) for entry in path), leaf)
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    ]


def describe_extra_arrays(tree: Any, digests: bool) -> list[dict[str, Any]]:
    """The path, shape, dtype (and sha256) of each array in ``extra_arrays``."""
    records = []
    for path, leaf in plain_paths(tree):
        if not isinstance(leaf, jax.Array | np.ndarray | np.generic):
            raise TypeError(
                f"save's extra_arrays must hold arrays only; {path} is {type(leaf).__name__}."
            )
        if _is_key(leaf):
            raise TypeError(
                f"save's extra_arrays cannot hold typed PRNG keys ({path}); store "
                "jax.random.key_data(key) and re-wrap it with jax.random.wrap_key_data."
            )
        record = {"path": path, "shape": list(np.shape(leaf)), "dtype": str(leaf.dtype)}
        if digests:
            record["sha256"] = digest(host_value(leaf))
        records.append(record)
    return records


def abstract_state(learner: Learner, layout: Mapping[str, Layout], key_impl: str | None) -> Any:
    """The learner's state as ``ShapeDtypeStruct`` leaves, from its ``init`` traced abstractly.

    The sample batch is abstract, with the saved layout and as many rows as a minibatch (the
    size the loss is written for; nothing is computed or allocated, whatever the size).
    """
    rows = learner.config.minibatch_size or 2
    sample = {
        module_id: jax.tree.map(
            lambda s: jax.ShapeDtypeStruct((rows, *s.shape), s.dtype), layout[module_id]
        )
        for module_id in learner.module_ids
    }
    unplaced = learner.on()  # the abstract state needs no devices
    return jax.eval_shape(
        lambda batch: unplaced.init(jax.random.key(0, impl=key_impl), batch), sample
    )


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


def check_structure(step: int, saved: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """Raises naming the first leaf whose path, shape or dtype differs."""

    def text(leaf: dict[str, Any]) -> str:
        return f"{leaf['dtype']}[{', '.join(map(str, leaf['shape']))}]"

    saved_paths = {leaf["path"] for leaf in saved}
    expected_paths = {leaf["path"] for leaf in expected}
    for position in range(max(len(saved), len(expected))):
        old = saved[position] if position < len(saved) else None
        new = expected[position] if position < len(expected) else None
        if old is not None and new is not None and old["path"] == new["path"]:
            if old["shape"] == new["shape"] and old["dtype"] == new["dtype"]:
                continue
            path, detail = old["path"], f"saved {text(old)}, expected {text(new)}"
        elif old is not None and old["path"] not in expected_paths:
            path, detail = old["path"], f"saved {text(old)}, expected no such leaf"
        elif new is not None and new["path"] not in saved_paths:
            path, detail = new["path"], f"saved no such leaf, expected {text(new)}"
        else:
            path, detail = (old or new)["path"], "the leaves are in a different order"
        raise ValueError(
            f"Checkpoint step {step} does not match this learner's state at {path}: {detail}. "
            "Nothing was restored: restoring never casts, reshapes or skips a leaf; build the "
            "learner as it was when the step was saved."
        )


def unpack_target(target: object) -> tuple[Learner, jax.sharding.Sharding | None]:
    """The learner of a restore or save target, and its placement's state sharding.

    ``None`` stands for the default device.
    """
    if isinstance(target, Learner):
        return target, target.placement.state_sharding
    raise TypeError(f"Expected a jl.Learner; got {type(target).__name__}.")


def default_device() -> jax.Device:
    """The device a plain learner's state lives on (JAX's default device)."""
    return next(iter(jnp.zeros(()).devices()))
