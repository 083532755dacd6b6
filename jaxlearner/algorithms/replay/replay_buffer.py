"""A fixed-capacity, device-resident replay buffer as a pytree, with pure jittable functions.

The buffer is a ``flax.struct.dataclass``: storage arrays with a leading
``[capacity]`` axis, the next write position and the number of filled rows.
:func:`add` and :func:`sample` return new values and never modify their
input, so they run inside ``jax.jit`` (donate the buffer to update it in
place), ``lax.scan`` or ``vmap``. The capacity and every shape are static;
the position and size are traced, so adding and sampling compile once.

Example:
  >>> example = {"obs": jnp.zeros(4), "action": jnp.zeros((), jnp.int32)}
  >>> buffer = replay_buffer_init(example, capacity=1000)
  >>> add_fn = jax.jit(add, donate_argnums=0)
  >>> buffer = add_fn(buffer, {"obs": jnp.ones((8, 4)), "action": jnp.arange(8)})
  >>> batch = sample(buffer, jax.random.key(0), batch_size=32)   # {"obs": [32, 4], ...}
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jax.typing import ArrayLike

from jaxlearner.types import PyTree


@struct.dataclass
class ReplayBuffer:
    """Circular storage of transitions.

    Attributes:
      storage: a pytree like one transition, each leaf ``[capacity, ...]``.
      position: int32 scalar, the row the next transition is written to.
      size: int32 scalar, the number of filled rows (at most ``capacity``).
    """

    storage: PyTree
    position: jax.Array
    size: jax.Array

    @property
    def capacity(self) -> int:
        """The number of rows (static)."""
        return int(jax.tree.leaves(self.storage)[0].shape[0])


def replay_buffer_init(example_transition: PyTree, capacity: int) -> ReplayBuffer:
    """An empty buffer shaped for ``example_transition``.

    Args:
      example_transition: one transition (no leading batch axis), a pytree of
        arrays, e.g. ``{"obs": [4], "action": [], "reward": [], ...}``; only
        its shapes and dtypes are used.
      capacity: the number of transitions kept, a positive Python int.

    Returns:
      A :class:`ReplayBuffer` with zeroed storage, ``position = size = 0``.

    Raises:
      ValueError: on a non-positive capacity or a transition with no arrays.

    Example:
      >>> buffer = replay_buffer_init({"obs": jnp.zeros(4)}, capacity=100)
      >>> buffer.storage["obs"].shape, int(buffer.size)
      ((100, 4), 0)
    """
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
        raise ValueError(f"replay_buffer_init: capacity must be a positive int; got {capacity!r}.")
    if not jax.tree.leaves(example_transition):
        raise ValueError(
            "replay_buffer_init: example_transition has no arrays; got "
            f"{example_transition!r}. Pass one transition, e.g. {{'obs': obs, 'reward': 0.0}}."
        )
    storage = jax.tree.map(
        lambda x: jnp.zeros((capacity, *jnp.shape(x)), jnp.result_type(x)), example_transition
    )
    # Two distinct arrays, so the buffer can be donated (one array may not be donated twice).
    return ReplayBuffer(
        storage=storage, position=jnp.zeros((), jnp.int32), size=jnp.zeros((), jnp.int32)
    )


def add(buffer: ReplayBuffer, transitions: PyTree) -> ReplayBuffer:
    """Writes ``N`` transitions at the current position, wrapping around the end.

    When the buffer is full the oldest transitions are overwritten. ``N``
    may exceed the space left before the end (the write wraps to row 0) but
    not the capacity: shapes are static, so that is checked in Python when
    the function is called or traced.

    Args:
      buffer: the buffer.
      transitions: a pytree with the buffer's structure, each leaf
        ``[N, *leaf_shape]`` with the stored dtype.

    Returns:
      The new buffer, its position advanced by ``N`` modulo the capacity, its size
      ``min(size + N, capacity)``.

    Raises:
      ValueError: on a different structure, trailing shape or dtype, leaves
        with different ``N``, or ``N > capacity``.

    Example:
      >>> buffer = replay_buffer_init({"obs": jnp.zeros(2)}, capacity=3)
      >>> buffer = add(buffer, {"obs": jnp.ones((2, 2))})
      >>> int(buffer.position), int(buffer.size)
      (2, 2)
    """
    count = _check_transitions(buffer, transitions)
    capacity = buffer.capacity
    rows = (buffer.position + jnp.arange(count, dtype=jnp.int32)) % capacity
    storage = jax.tree.map(
        lambda stored, new: stored.at[rows].set(jnp.asarray(new, stored.dtype)),
        buffer.storage,
        transitions,
    )
    return ReplayBuffer(
        storage=storage,
        position=(buffer.position + count) % capacity,
        size=jnp.minimum(buffer.size + count, capacity),
    )


def sample(buffer: ReplayBuffer, key: jax.Array, batch_size: int) -> PyTree:
    """``batch_size`` transitions drawn uniformly, with replacement, from the filled rows.

    Drawing with replacement means a buffer holding fewer than
    ``batch_size`` transitions still returns a full batch (with repeats);
    check :func:`can_sample` to wait for enough data.

    Sampling a buffer nothing was added to is an error. Called eagerly it
    raises ``ValueError``; under ``jit`` the size is traced and cannot be
    checked, and the result is rows of the initial storage (all zeros).

    Args:
      buffer: the buffer.
      key: a PRNG key.
      batch_size: the number of transitions, a positive Python int (static).

    Returns:
      A pytree like one transition, each leaf ``[batch_size, ...]``.

    Raises:
      ValueError: on a non-positive ``batch_size``, or (eagerly) an empty buffer.

    Example:
      >>> buffer = add(replay_buffer_init({"x": jnp.zeros(())}, 4), {"x": jnp.arange(2.0)})
      >>> sample(buffer, jax.random.key(0), batch_size=5)["x"].shape   # rows 0 and 1 only
      (5,)
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"sample: batch_size must be a positive int; got {batch_size!r}.")
    if _concrete_int(buffer.size) == 0:
        raise ValueError(
            "sample: the replay buffer is empty; add transitions first (check "
            "can_sample(buffer, batch_size))."
        )
    rows = jax.random.randint(key, (batch_size,), 0, jnp.maximum(buffer.size, 1))
    return jax.tree.map(lambda stored: stored[rows], buffer.storage)


def can_sample(buffer: ReplayBuffer, batch_size: ArrayLike) -> jax.Array:
    """Whether the buffer holds at least ``batch_size`` transitions (a bool scalar array).

    Example:
      >>> buffer = replay_buffer_init({"x": jnp.zeros(())}, 10)
      >>> bool(can_sample(buffer, 1))
      False
    """
    return buffer.size >= batch_size


def _concrete_int(x: jax.Array) -> int | None:
    """``int(x)``, or ``None`` when ``x`` is traced."""
    try:
        return int(x)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError):
        return None


def _check_transitions(buffer: ReplayBuffer, transitions: PyTree) -> int:
    """The number ``N`` of transitions, after checking them against the storage."""
    structure = jax.tree.structure(buffer.storage)
    if jax.tree.structure(transitions) != structure:
        raise ValueError(
            f"add: transitions have structure {jax.tree.structure(transitions)}; the buffer "
            f"stores {structure}."
        )
    counts = set()
    paths = jax.tree_util.tree_flatten_with_path(buffer.storage)[0]
    for (path, stored), new in zip(paths, jax.tree.leaves(transitions), strict=True):
        name = jax.tree_util.keystr(path) or "transitions"
        shape, dtype = jnp.shape(new), jnp.result_type(new)
        if shape[1:] != stored.shape[1:] or not shape:
            raise ValueError(
                f"add: {name} has shape {shape}; expected [N, *{stored.shape[1:]}] "
                "(a leading axis of N transitions)."
            )
        if dtype != stored.dtype:
            raise ValueError(
                f"add: {name} has dtype {dtype}; the buffer stores {stored.dtype}. Cast it "
                f"with .astype({stored.dtype.name!r})."
            )
        counts.add(shape[0])
    if len(counts) > 1:
        raise ValueError(f"add: leaves have different numbers of transitions {sorted(counts)}.")
    (count,) = counts
    if count > buffer.capacity:
        raise ValueError(
            f"add: {count} transitions exceed the capacity {buffer.capacity}; add at most "
            f"{buffer.capacity} at a time."
        )
    return count
