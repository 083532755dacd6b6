"""Batches: their recorded layout, validation before tracing, and minibatch blocks.

A batch is a pytree of arrays with a shared leading axis ``[B, ...]``. A
multi-module batch is ``{module_id: batch}``. A learner built with a sample
batch keeps each module's *layout*: the tree structure plus each leaf's
trailing shape and dtype. Every batch is checked against it in Python, before
anything is traced, so a wrong key, shape or dtype is reported by name rather than as a
compile error or a silent recompilation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.core.metrics import ALL_MODULES
from jaxlearner.errors import ReadableKeyError
from jaxlearner.types import Batch, PyTree

Layout: TypeAlias = PyTree
"""A batch's structure with a ``jax.ShapeDtypeStruct(trailing_shape, dtype)`` per leaf."""


def normalize_batch(batch: Any, module_ids: tuple[str, ...]) -> dict[str, Batch]:
    """``{module_id: batch}`` from either that form or, for one module, a plain batch.

    Lists of numbers become arrays (:func:`arrays_from_lists`).

    Raises:
      TypeError: when a multi-module learner gets something else than a mapping.
      KeyError: on an unknown module id.
      ValueError: on a list of numbers that is not rectangular.
    """
    if len(module_ids) == 1 and not (isinstance(batch, Mapping) and module_ids[0] in batch):
        return {module_ids[0]: arrays_from_lists(module_ids[0], batch)}
    if not isinstance(batch, Mapping):
        raise TypeError(
            f"A learner with modules {list(module_ids)} needs a batch mapping module id to "
            f"that module's batch; got {type(batch).__name__}."
        )
    unknown = [m for m in batch if m not in module_ids]
    if unknown:
        raise ReadableKeyError(
            f"Batch has unknown module id(s) {unknown}; the learner's modules are "
            f"{list(module_ids)}."
        )
    if not batch:
        raise ValueError(f"Empty batch: expected data for some of the modules {list(module_ids)}.")
    return {m: arrays_from_lists(m, b) for m, b in batch.items()}


def arrays_from_lists(module_id: str, batch: Batch) -> Batch:
    """``batch`` with each (nested) list or tuple of numbers made one array by ``jnp.asarray``.

    Python floats become float32 and ints int32, as JAX makes them. A list
    that holds arrays is left as it is: it is the batch's structure.

    Raises:
      ValueError: when a list of numbers is not rectangular, naming its key.

    Example:
      >>> arrays_from_lists("policy", {"x": [[1.0, 2.0], [3.0, 4.0]]})["x"].dtype
      dtype('float32')
    """

    def convert(path: Any, leaf: Any) -> Any:
        if not _is_number_list(leaf):
            return leaf
        try:
            return jnp.asarray(leaf)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"Module {module_id!r}, batch key {jax.tree_util.keystr(path)}: got a list of "
                f"numbers that does not make an array ({error}); pass rows of equal length, or "
                "an array."
            ) from None

    return jax.tree_util.tree_map_with_path(convert, batch, is_leaf=_is_number_list)


def _is_number_list(node: Any) -> bool:
    if not isinstance(node, list | tuple) or not node:
        return False
    return all(
        isinstance(x, bool | int | float | np.number | np.bool_) or _is_number_list(x) for x in node
    )


def _dtype(x: Any) -> np.dtype:
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.result_type(x)


def _canonical_dtype(dtype: Any) -> np.dtype:
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def _check_not_float64(module_id: str, path: str, dtype: Any) -> None:
    if np.dtype(dtype) == np.float64 and not jax.config.jax_enable_x64:
        raise TypeError(
            f"Module {module_id!r}, batch key {path}: got float64 data, but JAX runs in 32-bit "
            "mode; cast it to float32 first (e.g. np.asarray(x, np.float32)) so nothing is "
            "converted silently."
        )


def batch_layout(module_id: str, batch: Batch) -> Layout:
    """The layout of one module's batch (trailing shapes and dtypes per leaf).

    Raises:
      ValueError: on a leaf without a leading axis, or leaves whose leading
        sizes differ.
      TypeError: on float64 data while JAX runs in 32-bit mode.
    """
    leaves = jax.tree_util.tree_leaves_with_path(batch)
    if not leaves:
        raise ValueError(f"Module {module_id!r}: the batch has no arrays.")
    batch_size(module_id, batch)
    for path, leaf in leaves:
        _check_not_float64(module_id, jax.tree_util.keystr(path), _dtype(leaf))
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(np.shape(x)[1:], _canonical_dtype(_dtype(x))),
        batch,
    )


def batch_size(module_id: str, batch: Batch) -> int:
    """The shared leading size of a module's batch.

    Raises:
      ValueError: when a leaf is a scalar or the leading sizes differ.
    """
    sizes: dict[str, int] = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(batch):
        shape = np.shape(leaf)
        key = jax.tree_util.keystr(path)
        if not shape:
            raise ValueError(
                f"Module {module_id!r}, batch key {key}: got a scalar; every batch entry needs "
                "a leading batch axis [B, ...]."
            )
        sizes[key] = shape[0]
    if len(set(sizes.values())) > 1:
        raise ValueError(
            f"Module {module_id!r}: batch entries disagree on the leading batch size: {sizes}."
        )
    return next(iter(sizes.values()))


def validate_batch(module_id: str, batch: Batch, layout: Layout) -> int:
    """Checks a module's batch against its recorded layout; returns the batch size.

    Raises:
      KeyError: a key is missing or unexpected (named, with the expected keys).
      ValueError: a trailing shape differs, or leading sizes disagree.
      TypeError: a dtype differs, or float64 leaks in.
    """
    expected = dict(_paths(layout))
    received = dict(_paths(batch))
    missing = [p for p in expected if p not in received]
    extra = [p for p in received if p not in expected]
    if missing or extra:
        raise ReadableKeyError(
            f"Module {module_id!r}: batch keys do not match the learner's batch layout. "
            f"Missing: {_names(missing)}; unexpected: {_names(extra)}; expected keys: "
            f"{_names(expected)}."
        )
    if jax.tree.structure(batch) != jax.tree.structure(layout):
        raise ReadableKeyError(
            f"Module {module_id!r}: batch structure {jax.tree.structure(batch)} differs from "
            f"the learner's batch layout {jax.tree.structure(layout)}."
        )
    size = batch_size(module_id, batch)
    for path, spec in expected.items():
        leaf = received[path]
        shape, dtype = np.shape(leaf), _dtype(leaf)
        _check_not_float64(module_id, path, dtype)
        if tuple(shape[1:]) != tuple(spec.shape):
            raise ValueError(
                f"Module {module_id!r}, batch key {path}: expected shape [B, "
                f"{', '.join(map(str, spec.shape))}] (trailing {tuple(spec.shape)}), got "
                f"{tuple(shape)}."
            )
        if _canonical_dtype(dtype) != spec.dtype:
            raise TypeError(
                f"Module {module_id!r}, batch key {path}: expected dtype {spec.dtype}, got "
                f"{np.dtype(dtype)}."
            )
    return size


def _names(paths: object) -> str:
    return "[" + ", ".join(str(p) for p in paths) + "]"


def _paths(tree: PyTree) -> list[tuple[str, Any]]:
    return [
        (jax.tree_util.keystr(path), leaf)
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    ]


def minibatch_plan(
    size: int, minibatch_size: int | None, module_id: str, drop_last: bool = False
) -> tuple[int, int]:
    """``(minibatch_size, num_minibatches)`` for a module's batch of ``size`` rows.

    ``minibatch_size=None`` means the whole batch is one minibatch. Otherwise
    an epoch takes ``ceil(size / minibatch_size)`` minibatches, the last one
    completed with rows from the start of the epoch's order, so every row is
    trained on in every epoch (RLlib's cyclic minibatch iterator wraps around
    too); with ``drop_last`` it takes ``size // minibatch_size`` and the rows
    past them are left out of that epoch (with shuffling, different rows each
    epoch).

    Raises:
      ValueError: when the batch is smaller than one minibatch.

    Example:
      >>> minibatch_plan(100, 32, "policy"), minibatch_plan(100, 32, "policy", drop_last=True)
      ((32, 4), (32, 3))
    """
    if minibatch_size is None:
        return size, 1
    if size < minibatch_size:
        raise ValueError(
            f"Module {module_id!r}: the batch has {size} rows, fewer than minibatch_size="
            f"{minibatch_size}; pass at least {minibatch_size} rows or a smaller minibatch_size."
        )
    return minibatch_size, size // minibatch_size if drop_last else -(-size // minibatch_size)


def epoch_blocks(
    batch: Batch,
    key: jax.Array,
    minibatch_size: int,
    num_minibatches: int,
    num_steps: int,
    shuffle: bool,
) -> Batch:
    """One epoch of a module's batch as ``[num_steps, minibatch_size, ...]`` blocks.

    The one place minibatches are cut. Rows are permuted with ``key`` (or kept
    in order without ``shuffle``) and cut into ``num_minibatches``
    minibatches: when those hold more rows than the batch, the order wraps
    around (the last minibatch ends with the epoch's first rows); when fewer,
    the rows past them are left out. The minibatches are cycled when the
    learner takes more steps than this module has minibatches (a multi-module
    batch whose modules have different sizes, as RLlib's cyclic minibatch
    iterator does).

    Args:
      batch: ``[B, ...]`` arrays.
      key: the epoch's key for this module.
      minibatch_size: rows per minibatch.
      num_minibatches: from :func:`minibatch_plan`: ``ceil(B / minibatch_size)``
        (every row), or ``B // minibatch_size`` (``drop_last``).
      num_steps: minibatch steps per epoch of the whole learner, >= num_minibatches.
      shuffle: whether to permute the rows.

    Returns:
      The batch with leaves of shape ``[num_steps, minibatch_size, ...]``.

    Example:
      >>> blocks = epoch_blocks({"i": jnp.arange(5)}, jax.random.key(0), 2, 3, 3, False)
      >>> blocks["i"].tolist()
      [[0, 1], [2, 3], [4, 0]]
    """
    size = jax.tree.leaves(batch)[0].shape[0]
    used = minibatch_size * num_minibatches
    order = jax.random.permutation(key, size) if shuffle else jnp.arange(size)
    if used < size:
        order = order[:used]
    elif used > size:
        order = order[np.arange(used) % size]
    order = order.reshape(num_minibatches, minibatch_size)
    if num_steps != num_minibatches:
        order = order[np.arange(num_steps) % num_minibatches]
    return jax.tree.map(lambda x: jnp.asarray(x)[order], batch)


def zeros_like_layout(layout: Layout, rows: int = 1) -> Batch:
    """A batch of zeros with ``layout``'s structure, trailing shapes and dtypes."""
    return jax.tree.map(lambda s: np.zeros((rows, *s.shape), s.dtype), layout)


def env_steps_by_module(
    env_steps: int | Mapping[str, int] | None, sizes: Mapping[str, int]
) -> dict[str, np.ndarray]:
    """``env_steps`` as ``update`` takes it, as one int32 per module of the batch.

    ``None`` counts each module's batch size; an int counts for every module. A mapping's
    ``"__all__"`` entry, the whole batch's env steps, is kept as one more int32.

    Raises:
      KeyError: when a mapping leaves out a module of the batch.
      ValueError: on a negative, non-int or out-of-range count.
    """
    if env_steps is None:
        return {m: np.int32(n) for m, n in sizes.items()}
    if isinstance(env_steps, Mapping):
        missing = sorted(set(sizes) - set(env_steps))
        if missing:
            raise ReadableKeyError(f"env_steps has no entry for module(s) {missing}.")
        values = {m: env_steps[m] for m in (*sizes, ALL_MODULES) if m in env_steps}
    else:
        values = dict.fromkeys(sizes, env_steps)
    for m, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ValueError(f"env_steps for {m!r} must be a non-negative int; got {value!r}.")
        if value > np.iinfo(np.int32).max:
            raise ValueError(f"env_steps for {m!r} is {value}, above the int32 counter's range.")
    return {m: np.int32(v) for m, v in values.items()}


def learner_layout(
    sample_batch: Batch | None,
    layout: Mapping[str, Layout] | None,
    module_ids: tuple[str, ...],
) -> dict[str, Layout] | None:
    """A learner's batch layout from a sample batch or given layouts (one, or neither).

    Raises:
      TypeError: when both are given.
      ValueError: when they do not cover exactly the learner's modules.
    """
    if sample_batch is not None and layout is not None:
        raise TypeError("Pass sample_batch= or batch_layout=, not both.")
    given = "sample_batch" if sample_batch is not None else "batch_layout"
    if sample_batch is not None:
        sample = normalize_batch(sample_batch, module_ids)
        layout = {m: batch_layout(m, b) for m, b in sample.items()}
    if layout is None:
        return None
    if set(layout) != set(module_ids):
        raise ValueError(
            f"{given} covers modules {sorted(layout)} but the learner has {sorted(module_ids)}."
        )
    return dict(layout)


def batch_sizes(batch: Mapping[str, Batch], layout: Mapping[str, Layout] | None) -> dict[str, int]:
    """Each module's batch size, checked against its layout (without one, on its own).

    Raises:
      KeyError, ValueError, TypeError: as :func:`validate_batch` and :func:`batch_layout`.
    """
    if layout is None:
        return {m: _checked_size(m, b) for m, b in batch.items()}
    return {m: validate_batch(m, b, layout[m]) for m, b in batch.items()}


def _checked_size(module_id: str, batch: Batch) -> int:
    batch_layout(module_id, batch)  # leading sizes, float64
    return batch_size(module_id, batch)
