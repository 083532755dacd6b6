"""Few arrays for a scan's per-step outputs: one per shape and dtype.

A ``lax.scan`` stores each array its body returns into a stacked ``[T, ...]``
output, one store per array per iteration. On a GPU each store is a kernel
launch, and latency-bound loops (PPO's minibatch steps, Anakin's rollout steps)
spend much of their time launching: the learner's 15 per-step metrics were 15
launches of a minibatch step's 85 (``benchmarks/hlo_kernels.py``). :func:`pack`
stacks the leaves that share a shape and dtype into one array, so the body
stores one array per group; :func:`unpack` splits the stacked outputs again
after the loop. Values are unchanged: stacking and indexing are exact.
:func:`packed_scan` is ``lax.scan`` with the two around its body.

:func:`concatenate` and :func:`split_on_host` do the same for a tree fetched to the host
after every call: one 1-D array per dtype leaves the compiled call, so a step that
returns 35 scalar metrics allocates and copies 2 buffers instead of 35 (about 0.5 ms
of a 6 ms SAC step on a 2-core CPU, ``benchmarks/README.md``).

Example:
  >>> import jax, jax.numpy as jnp
  >>> def body(carry, x):
  ...     packed, layout = pack({"loss": x, "grad_norm": 2 * x, "count": jnp.int32(1)})
  ...     return carry, packed
  >>> _, stacked = jax.lax.scan(body, None, jnp.arange(3.0))
  >>> [a.shape for a in stacked]
  [(3,), (3, 2)]
  >>> _, layout = pack({"loss": 0.0, "grad_norm": 0.0, "count": jnp.int32(1)})
  >>> unpack(stacked, layout, batch_ndim=1)["grad_norm"]
  Array([0., 2., 4.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Layout(NamedTuple):
    """Where each leaf went: the tree's structure and, per packed array, its leaves' indices.

    Attributes:
      treedef: the structure of the packed tree.
      groups: per packed array, the indices (in ``jax.tree.leaves`` order) of its
        leaves; a group of one is stored as the leaf itself, a larger one stacked
        on a new leading axis.
    """

    treedef: Any
    groups: tuple[tuple[int, ...], ...]


def pack(tree: Any) -> tuple[list[jax.Array], Layout]:
    """``tree``'s leaves as one array per (shape, dtype), with the :class:`Layout` to undo it.

    Args:
      tree: a pytree of arrays (or scalars), e.g. a scan body's per-step outputs.

    Returns:
      ``(arrays, layout)``: per group, its one leaf or its leaves stacked on a new
      axis 0 (``[k, *shape]``), in the order of each group's first leaf.
    """
    leaves, treedef = jax.tree.flatten(tree)
    leaves = [jnp.asarray(leaf) for leaf in leaves]
    groups: dict[tuple, list[int]] = {}
    for index, leaf in enumerate(leaves):
        groups.setdefault((leaf.shape, leaf.dtype), []).append(index)
    arrays = [
        leaves[members[0]] if len(members) == 1 else jnp.stack([leaves[i] for i in members])
        for members in groups.values()
    ]
    return arrays, Layout(treedef, tuple(tuple(members) for members in groups.values()))


def unpack(arrays: list[jax.Array], layout: Layout, batch_ndim: int = 0) -> Any:
    """The tree :func:`pack` packed, from its arrays with ``batch_ndim`` leading axes added.

    Args:
      arrays: :func:`pack`'s arrays, each with ``batch_ndim`` leading axes (a scan
        over ``T`` steps adds one: ``[T, k, *shape]``; nested scans add more).
      layout: the :class:`Layout` :func:`pack` returned.
      batch_ndim: the number of leading axes the scans added.

    Returns:
      The original tree, each leaf ``[*batch, *shape]``.
    """
    leaves: list[Any] = [None] * sum(len(members) for members in layout.groups)
    for array, members in zip(arrays, layout.groups, strict=True):
        if len(members) == 1:
            leaves[members[0]] = array
            continue
        for position, index in enumerate(members):
            leaves[index] = jnp.take(array, position, axis=batch_ndim)
    return jax.tree.unflatten(layout.treedef, leaves)


def packed_scan(
    body: Callable[[Any, Any], tuple[Any, Any]],
    init: Any,
    xs: Any = None,
    length: int | None = None,
    unroll: int = 1,
) -> tuple[Any, Any]:
    """``jax.lax.scan(body, init, xs, length, unroll=unroll)``, its per-step outputs stored packed.

    The same carry and stacked outputs as ``lax.scan`` (each leaf ``[T, ...]``), bit for
    bit; inside the loop the body's outputs are stored as one array per shape and dtype
    (:func:`pack`), and split again after it (:func:`unpack`).

    Example:
      >>> body = lambda c, x: (c + x, {"x": x, "twice": 2 * x, "n": jnp.int32(1)})
      >>> total, ys = packed_scan(body, 0.0, jnp.arange(3.0))
      >>> float(total), ys["twice"].tolist(), ys["n"].shape
      (3.0, [0.0, 2.0, 4.0], (3,))
    """
    layouts: list[Layout] = []  # the body's output layout, recorded while it is traced

    def packed_body(carry: Any, x: Any) -> tuple[Any, list[jax.Array]]:
        carry, outputs = body(carry, x)
        arrays, layout = pack(outputs)
        layouts[:] = [layout]
        return carry, arrays

    carry, stacked = jax.lax.scan(packed_body, init, xs, length=length, unroll=unroll)
    return carry, unpack(stacked, layouts[0], batch_ndim=1)


class FlatLayout(NamedTuple):
    """Where :func:`concatenate` put each leaf.

    Attributes:
      treedef: the structure of the tree.
      shapes: each leaf's shape, in ``jax.tree.leaves`` order.
      dtypes: each leaf's dtype (``numpy``), in the same order; the arrays are one per
        distinct dtype, in the order of each dtype's first leaf.
      sizes: each leaf's number of elements, in the same order.
    """

    treedef: Any
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[np.dtype, ...]
    sizes: tuple[int, ...]


def concatenate(tree: Any) -> tuple[tuple[jax.Array, ...], FlatLayout]:
    """``tree``'s leaves ravelled and joined into one 1-D array per dtype (exact: no casts).

    Args:
      tree: a pytree of arrays (or scalars), e.g. a step's metrics, inside a traced function.

    Returns:
      ``(arrays, layout)``: per dtype, the leaves of that dtype ravelled and joined
      (``[sum of their sizes]``), and the :class:`FlatLayout` for :func:`split_on_host`.

    Example:
      >>> arrays, layout = concatenate({"loss": jnp.float32(0.5), "steps": jnp.int32(3),
      ...                               "q": jnp.ones(2)})
      >>> [a.tolist() for a in arrays]
      [[0.5, 1.0, 1.0], [3]]
      >>> split_on_host(jax.device_get(arrays), layout)["steps"]
      array(3, dtype=int32)
    """
    leaves, treedef = jax.tree.flatten(tree)
    leaves = [jnp.asarray(leaf) for leaf in leaves]
    dtypes = tuple(np.dtype(leaf.dtype) for leaf in leaves)
    by_dtype: dict[np.dtype, list[jax.Array]] = {}
    for leaf, dtype in zip(leaves, dtypes, strict=True):
        by_dtype.setdefault(dtype, []).append(jnp.ravel(leaf))
    arrays = tuple(jnp.concatenate(parts) for parts in by_dtype.values())
    shapes = tuple(tuple(leaf.shape) for leaf in leaves)
    return arrays, FlatLayout(treedef, shapes, dtypes, tuple(int(leaf.size) for leaf in leaves))


def split_on_host(arrays: Any, layout: FlatLayout) -> Any:
    """The tree :func:`concatenate` joined, from its arrays on the host, as numpy arrays.

    Args:
      arrays: :func:`concatenate`'s arrays, fetched (``jax.device_get``) or numpy.
      layout: the :class:`FlatLayout` :func:`concatenate` returned.

    Returns:
      The original tree, each leaf a numpy array of its shape and dtype.
    """
    offsets = dict.fromkeys(layout.dtypes, 0)
    columns = dict(zip(offsets, (np.asarray(array) for array in arrays), strict=True))
    leaves = []
    for shape, dtype, size in zip(layout.shapes, layout.dtypes, layout.sizes, strict=True):
        start = offsets[dtype]
        leaves.append(columns[dtype][start : start + size].reshape(shape))
        offsets[dtype] = start + size
    return jax.tree.unflatten(layout.treedef, leaves)
