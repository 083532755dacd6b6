"""Proportional prioritized replay (Schaul et al. 2016, https://arxiv.org/abs/1511.05952) on device.

The prioritized counterpart of :mod:`jaxlearner.algorithms.replay.replay_buffer`: a
``flax.struct.dataclass`` holding a
:class:`~jaxlearner.algorithms.replay.replay_buffer.ReplayBuffer` (the transitions, written by
its :func:`~jaxlearner.algorithms.replay.replay_buffer.add`) and
two binary trees over the rows' priorities, with pure functions that run
inside ``jax.jit`` (donate the buffer), ``lax.scan`` and ``vmap``. The
capacity and every shape are static; positions, sizes, priorities and
``beta`` are traced, so adding, sampling and updating compile once.

Row ``i`` holds priority ``p_i = |priority| + eps`` and is drawn with
probability ``P(i) = p_i^alpha / sum_k p_k^alpha``. The trees have
``leaves = 2^ceil(log2(capacity))`` leaves in flat ``[2 * leaves]`` arrays:
node ``1`` is the root, node ``n`` has children ``2n`` and ``2n + 1``, row
``i`` is leaf ``leaves + i`` (node ``0`` and leaves past the capacity are
unused). The sum tree gives the prefix-sum search for sampling, the min tree
the smallest priority for normalising the importance weights; both are
``O(log capacity)`` per row.

Example:
  >>> example = {"obs": jnp.zeros(4), "action": jnp.zeros((), jnp.int32)}
  >>> buffer = prioritized_replay_init(example, capacity=1000, alpha=0.6)
  >>> buffer = jax.jit(add, donate_argnums=0)(
  ...     buffer, {"obs": jnp.ones((8, 4)), "action": jnp.arange(8)})
  >>> batch, indices, weights = sample(buffer, jax.random.key(0), batch_size=32, beta=0.4)
  >>> td_errors = jnp.ones(32)   # from the loss, weighted by `weights`
  >>> buffer = update_priorities(buffer, indices, jnp.abs(td_errors))
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.typing import ArrayLike

from jaxlearner.algorithms.replay import replay_buffer
from jaxlearner.algorithms.replay.replay_buffer import ReplayBuffer
from jaxlearner.types import PyTree


@struct.dataclass
class PrioritizedReplayBuffer:
    """Circular storage of transitions with a priority per row.

    Attributes:
      replay: the :class:`~jaxlearner.algorithms.replay.replay_buffer.ReplayBuffer` of
        transitions, its write position and size.
      sum_tree: float32 ``[2 * leaves]``, leaf ``leaves + i`` holds
        ``p_i^alpha`` (0 for empty rows), every inner node the sum of its
        children.
      min_tree: float32 ``[2 * leaves]``, the same leaves with ``inf`` for
        empty and zero-priority rows, every inner node the min of its children.
      max_priority: float32 scalar, the largest ``p_i`` written so far (1 at
        first); new rows get it, as in the paper's Algorithm 1.
      alpha: float32 scalar, the priority exponent. A traced leaf, so buffers
        with different ``alpha`` share one compilation (and can be vmapped);
        changing it affects only priorities written afterwards.
      eps: float32 scalar added to every priority, so no row is starved.
    """

    replay: ReplayBuffer
    sum_tree: jax.Array
    min_tree: jax.Array
    max_priority: jax.Array
    alpha: jax.Array
    eps: jax.Array

    @property
    def capacity(self) -> int:
        """The number of rows (static)."""
        return self.replay.capacity

    @property
    def size(self) -> jax.Array:
        """int32 scalar, the number of filled rows."""
        return self.replay.size


class PrioritizedSample(NamedTuple):
    """What :func:`sample` returns (unpacks as ``batch, indices, weights``).

    Attributes:
      batch: a pytree like one transition, each leaf ``[batch_size, ...]``.
      indices: int32 ``[batch_size]``, the rows drawn; pass them back to
        :func:`update_priorities`.
      weights: float32 ``[batch_size]``, importance weights in ``(0, 1]``;
        multiply the per-transition losses by them.
    """

    batch: PyTree
    indices: jax.Array
    weights: jax.Array


def prioritized_replay_init(
    example_transition: PyTree, capacity: int, alpha: float = 0.6, eps: float = 1e-6
) -> PrioritizedReplayBuffer:
    """An empty prioritized buffer shaped for ``example_transition``.

    Args:
      example_transition: one transition (no leading batch axis), a pytree of
        arrays; only its shapes and dtypes are used.
      capacity: the number of transitions kept, a positive Python int.
      alpha: the priority exponent in ``[0, 1]``: 0 samples uniformly, 1 in
        proportion to the priorities (the paper uses 0.6 for proportional
        prioritization).
      eps: a non-negative number added to every priority.

    Returns:
      A :class:`PrioritizedReplayBuffer` with no rows and ``max_priority = 1``.

    Raises:
      ValueError: on a non-positive capacity, an empty transition, ``alpha``
        outside ``[0, 1]`` or a negative ``eps``.

    Example:
      >>> buffer = prioritized_replay_init({"obs": jnp.zeros(4)}, capacity=5)
      >>> buffer.replay.storage["obs"].shape, buffer.sum_tree.shape   # 8 leaves
      ((5, 4), (16,))
    """
    replay = replay_buffer.replay_buffer_init(example_transition, capacity)
    _check_scalar("prioritized_replay_init", "alpha", alpha, 0.0, 1.0)
    _check_scalar("prioritized_replay_init", "eps", eps, 0.0, np.inf)
    leaves = 1 << (capacity - 1).bit_length()
    # Separate arrays throughout, so the buffer can be donated.
    return PrioritizedReplayBuffer(
        replay=replay,
        sum_tree=jnp.zeros(2 * leaves, jnp.float32),
        min_tree=jnp.full(2 * leaves, jnp.inf, jnp.float32),
        max_priority=jnp.ones((), jnp.float32),
        alpha=jnp.asarray(alpha, jnp.float32),
        eps=jnp.asarray(eps, jnp.float32),
    )


def add(
    buffer: PrioritizedReplayBuffer, transitions: PyTree, priorities: ArrayLike | None = None
) -> PrioritizedReplayBuffer:
    """Writes ``N`` transitions as :func:`~.replay_buffer.add` does, with priorities.

    Args:
      buffer: the buffer.
      transitions: a pytree with the buffer's structure, each leaf
        ``[N, *leaf_shape]`` with the stored dtype.
      priorities: ``[N]`` priorities (e.g. ``|TD error|``; the absolute value
        is taken and ``eps`` added), or ``None`` to give every new row the
        largest priority seen so far, as the paper does for transitions whose
        TD error is not known yet.

    Returns:
      The new buffer; overwritten rows lose their old priorities.

    Raises:
      ValueError: as :func:`jaxlearner.algorithms.replay.replay_buffer.add`, when ``priorities``
        is not ``[N]``, or (for concrete priorities) when one is not finite.

    Example:
      >>> buffer = prioritized_replay_init({"x": jnp.zeros(())}, 4, alpha=1.0, eps=0.0)
      >>> buffer = add(buffer, {"x": jnp.arange(2.0)}, priorities=jnp.asarray([1.0, 3.0]))
      >>> buffer = add(buffer, {"x": jnp.arange(1.0)})     # gets the max priority, 3
      >>> buffer.sum_tree[4:7].tolist(), int(buffer.size)
      ([1.0, 3.0, 3.0], 3)
    """
    replay = replay_buffer.add(buffer.replay, transitions)  # checks the transitions
    count = jnp.shape(jax.tree.leaves(transitions)[0])[0]
    rows = (buffer.replay.position + jnp.arange(count, dtype=jnp.int32)) % buffer.capacity
    if priorities is None:
        priorities = jnp.broadcast_to(buffer.max_priority, (count,))
    else:
        priorities = _priorities("add", priorities, count, buffer.eps)
    return _write(buffer, replay, rows, priorities, jnp.ones(count, bool))


def update_priorities(
    buffer: PrioritizedReplayBuffer, indices: ArrayLike, priorities: ArrayLike
) -> PrioritizedReplayBuffer:
    """Sets the priorities of sampled rows, e.g. to their new ``|TD error|``.

    Row ``indices[k]`` gets ``p = |priorities[k]| + eps`` (its leaf
    ``p^alpha``), and ``max_priority`` becomes the largest ``p`` written. A row
    named more than once (a batch drawn with replacement) gets the last of its
    priorities, as if they were set one after another; the result does not
    depend on the scatter order of the device. Indices of empty rows are
    ignored (an error when concrete and out of ``[0, capacity)``). A row
    overwritten by :func:`add` between sampling and this update receives the
    priority meant for its old transition, as in other implementations.

    Args:
      buffer: the buffer.
      indices: int ``[M]`` rows, e.g. :func:`sample`'s ``indices``.
      priorities: ``[M]`` non-negative priorities (the absolute value is taken).

    Returns:
      The new buffer.

    Raises:
      ValueError: when ``indices`` and ``priorities`` are not both ``[M]``, or
        (when concrete) an index lies outside ``[0, capacity)`` or a priority
        is not finite.

    Example:
      >>> buffer = prioritized_replay_init({"x": jnp.zeros(())}, 4, alpha=1.0, eps=0.0)
      >>> buffer = add(buffer, {"x": jnp.arange(3.0)})
      >>> buffer = update_priorities(buffer, jnp.asarray([2, 0, 2]), jnp.asarray([5.0, 2.0, 7.0]))
      >>> buffer.sum_tree[4:7].tolist(), float(buffer.max_priority)   # row 2: the last, 7
      ([2.0, 1.0, 7.0], 7.0)
    """
    indices = jnp.asarray(indices)
    if indices.ndim != 1 or not jnp.issubdtype(indices.dtype, jnp.integer):
        raise ValueError(
            f"update_priorities: indices must be a 1-D integer array; got shape "
            f"{indices.shape} and dtype {indices.dtype}."
        )
    priorities = _priorities("update_priorities", priorities, indices.shape[0], buffer.eps)
    concrete = _concrete(indices)
    if (
        concrete is not None
        and concrete.size
        and not (concrete.min() >= 0 and concrete.max() < buffer.capacity)
    ):
        raise ValueError(
            f"update_priorities: indices must lie in [0, {buffer.capacity}); got "
            f"{concrete.min()} .. {concrete.max()}."
        )
    if indices.shape[0] == 0:
        return buffer
    indices = indices.astype(jnp.int32)
    keep = _last_occurrence(indices) & (indices >= 0) & (indices < buffer.replay.size)
    return _write(buffer, buffer.replay, indices, priorities, keep)


def sample(
    buffer: PrioritizedReplayBuffer, key: jax.Array, batch_size: int, beta: ArrayLike
) -> PrioritizedSample:
    """Draws ``batch_size`` rows in proportion to ``p_i^alpha``, with importance weights.

    Stratified, as in the paper: the total priority is cut into
    ``batch_size`` equal segments and one row is drawn uniformly within each,
    so every row is drawn with probability ``P(i)`` per draw and a batch
    covers the distribution more evenly than independent draws.

    The importance weights are ``w_i = (N * P(i))^-beta / max_j w_j`` over
    the ``N`` filled rows ``j``, which is ``(min_j p_j^alpha / p_i^alpha)^beta``
    (from the min tree). Normalising by the buffer's largest weight, the
    paper's ``max_i w_i``, rather than the batch's, keeps a row's weight a
    function of the priorities alone (not of what else was drawn with it)
    and every weight in ``(0, 1]``, so the updates are only ever scaled down.
    Rows of zero priority (``eps = 0``) are never drawn and do not count in
    the max.

    Sampling an empty buffer is an error. Called eagerly it raises
    ``ValueError``; under ``jit`` the size is traced and cannot be checked,
    and the result is row 0 of the initial storage with weight 0.

    Args:
      buffer: the buffer.
      key: a PRNG key.
      batch_size: the number of rows, a positive Python int (static).
      beta: the importance-weight exponent in ``[0, 1]`` (annealed to 1 in the
        paper), a scalar (may be traced).

    Returns:
      A :class:`PrioritizedSample` ``(batch, indices, weights)``.

    Raises:
      ValueError: on a non-positive ``batch_size``, a Python or NumPy ``beta``
        outside ``[0, 1]``, or (eagerly) an empty buffer.

    Example:
      >>> buffer = prioritized_replay_init({"x": jnp.zeros(())}, 4, alpha=1.0, eps=0.0)
      >>> buffer = add(buffer, {"x": jnp.arange(3.0)}, jnp.asarray([2.0, 2.0, 4.0]))
      >>> batch, indices, weights = sample(buffer, jax.random.key(0), 4, beta=1.0)
      >>> indices.tolist()          # one draw in each of [0, 2) [2, 4) [4, 6) [6, 8)
      [0, 1, 2, 2]
      >>> weights.tolist()          # (N P)^-1 = (3 * [1/4, 1/4, 1/2])^-1, over its max 4/3
      [1.0, 1.0, 0.5, 0.5]
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"sample: batch_size must be a positive int; got {batch_size!r}.")
    _check_scalar("sample", "beta", beta, 0.0, 1.0)
    size = _concrete(buffer.size)
    if size is not None and int(size) == 0:
        raise ValueError(
            "sample: the replay buffer is empty; add transitions first (check "
            "can_sample(buffer, batch_size))."
        )
    total = buffer.sum_tree[1]
    offsets = jax.random.uniform(key, (batch_size,), jnp.float32)
    targets = (jnp.arange(batch_size, dtype=jnp.float32) + offsets) * (total / batch_size)
    indices = _find_prefix(buffer.sum_tree, targets)
    leaves = buffer.sum_tree.shape[0] // 2
    drawn = buffer.sum_tree[leaves + indices]
    weights = (buffer.min_tree[1] / drawn) ** jnp.asarray(beta, jnp.float32)
    weights = jnp.where(drawn > 0, weights, 0.0)
    batch = jax.tree.map(lambda stored: stored[indices], buffer.replay.storage)
    return PrioritizedSample(batch, indices, weights)


def can_sample(buffer: PrioritizedReplayBuffer, batch_size: ArrayLike) -> jax.Array:
    """Whether the buffer holds at least ``batch_size`` transitions (a bool scalar array).

    Example:
      >>> bool(can_sample(prioritized_replay_init({"x": jnp.zeros(())}, 10), 1))
      False
    """
    return replay_buffer.can_sample(buffer.replay, batch_size)


def _write(
    buffer: PrioritizedReplayBuffer,
    replay: ReplayBuffer,
    rows: jax.Array,
    priorities: jax.Array,
    keep: jax.Array,
) -> PrioritizedReplayBuffer:
    """Sets the leaves of the (distinct) ``rows[keep]`` to ``priorities^alpha``, and the max."""
    leaf_values = priorities**buffer.alpha
    written = jnp.where(keep, priorities, 0.0)
    sum_tree, min_tree = _set_leaves(buffer.sum_tree, buffer.min_tree, rows, leaf_values, keep)
    return PrioritizedReplayBuffer(
        replay=replay,
        sum_tree=sum_tree,
        min_tree=min_tree,
        max_priority=jnp.maximum(buffer.max_priority, jnp.max(written, initial=0.0)),
        alpha=buffer.alpha,
        eps=buffer.eps,
    )


def _set_leaves(
    sum_tree: jax.Array, min_tree: jax.Array, rows: jax.Array, values: jax.Array, keep: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Writes ``values`` at the leaves of ``rows`` where ``keep``, and recomputes their ancestors.

    The kept rows must be distinct. Each level's parents are recomputed from
    their children rather than adjusted by differences, so rows sharing a
    parent write the same value and the tree never drifts from its leaves.
    """
    size = sum_tree.shape[0]
    leaves = size // 2
    nodes = leaves + jnp.clip(rows, 0, leaves - 1)
    # Dropped writes go past the end of the array (mode="drop").
    targets = jnp.where(keep, nodes, size)
    sum_tree = sum_tree.at[targets].set(values, mode="drop")
    min_tree = min_tree.at[targets].set(jnp.where(values > 0, values, jnp.inf), mode="drop")

    def level(_: int, carry: tuple) -> tuple:
        sum_tree, min_tree, nodes = carry
        nodes = nodes // 2
        left, right = 2 * nodes, 2 * nodes + 1
        targets = jnp.where(keep, nodes, size)
        sum_tree = sum_tree.at[targets].set(sum_tree[left] + sum_tree[right], mode="drop")
        min_tree = min_tree.at[targets].set(
            jnp.minimum(min_tree[left], min_tree[right]), mode="drop"
        )
        return sum_tree, min_tree, nodes

    depth = leaves.bit_length() - 1
    sum_tree, min_tree, _ = jax.lax.fori_loop(0, depth, level, (sum_tree, min_tree, nodes))
    return sum_tree, min_tree


def _find_prefix(sum_tree: jax.Array, targets: jax.Array) -> jax.Array:
    """The rows ``i`` with ``sum_{k<i} p_k <= target < sum_{k<=i} p_k``, int32 ``[M]``.

    Descends from the root, going right when the target reaches past the left
    subtree's sum. A subtree of sum zero is never entered, so a target at or
    past the total (float rounding) still ends on a row of positive priority.
    """
    leaves = sum_tree.shape[0] // 2

    def level(_: int, carry: tuple) -> tuple:
        nodes, targets = carry
        left_sum, right_sum = sum_tree[2 * nodes], sum_tree[2 * nodes + 1]
        go_right = (targets >= left_sum) & (right_sum > 0)
        targets = jnp.where(go_right, targets - left_sum, targets)
        return 2 * nodes + go_right.astype(jnp.int32), targets

    start = jnp.ones(targets.shape, jnp.int32)
    depth = leaves.bit_length() - 1
    nodes, _ = jax.lax.fori_loop(0, depth, level, (start, targets))
    return nodes - leaves


def _last_occurrence(indices: jax.Array) -> jax.Array:
    """bool ``[M]``: ``indices[k]`` does not occur again after position ``k``."""
    order = jnp.argsort(indices, stable=True)
    ordered = indices[order]
    last = jnp.append(ordered[1:] != ordered[:-1], True)
    return jnp.zeros(indices.shape, bool).at[order].set(last)


def _priorities(name: str, priorities: ArrayLike, count: int, eps: jax.Array) -> jax.Array:
    """``|priorities| + eps`` as float32 ``[count]``, after checking the shape (and values)."""
    priorities = jnp.asarray(priorities)
    if priorities.shape != (count,):
        raise ValueError(
            f"{name}: priorities must have shape ({count},), one per transition; got "
            f"{priorities.shape}."
        )
    concrete = _concrete(priorities)
    if concrete is not None and not np.all(np.isfinite(concrete)):
        raise ValueError(f"{name}: priorities must be finite; got {concrete!r}.")
    return jnp.abs(priorities.astype(jnp.float32)) + eps


def _concrete(x: jax.Array) -> np.ndarray | None:
    """``x`` on the host, or ``None`` when it is traced."""
    try:
        return np.asarray(x)
    except jax.errors.TracerArrayConversionError:
        return None


def _check_scalar(name: str, key: str, value: ArrayLike, low: float, high: float) -> None:
    """A scalar; Python and NumPy values must lie in ``[low, high]`` (JAX arrays pass unchecked)."""
    if jnp.ndim(value) != 0:
        raise ValueError(f"{name}: {key} must be a scalar; got shape {jnp.shape(value)}.")
    if isinstance(value, int | float | np.number | np.ndarray) and not low <= value <= high:
        raise ValueError(f"{name}: {key} must lie in [{low:g}, {high:g}]; got {value!r}.")
