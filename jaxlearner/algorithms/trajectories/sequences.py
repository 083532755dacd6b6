"""Cutting time-major rollouts into fixed-length, zero-padded sequences for recurrent learners.

A rollout of ``N`` environments for ``T`` steps is ``[T, N, ...]``. A
recurrent learner trains on sequences ``[S, L, ...]`` of ``L = max_seq_len``
steps (RLlib's ``max_seq_len``): each environment's ``T`` steps are cut into
``K = ceil(T / L)`` consecutive chunks, the last one zero-padded, so ``S = N *
K`` (sequence ``n * K + k`` is environment ``n``'s ``k``-th chunk). A chunk may
span an episode boundary: the learner resets the recurrent state inside it
where ``is_first`` says an episode starts, as the acting loop did, and starts
each chunk from the state stored at its first step (:func:`chunk_starts`).

Shapes are static (``T``, ``N`` and ``L`` are Python ints), so both functions
run the same under ``jax.jit`` and without it.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from jaxlearner.types import PyTree


def _time_and_envs(tree: PyTree, what: str) -> tuple[int, int]:
    shapes = {
        jax.tree_util.keystr(path): jnp.shape(leaf)
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    }
    if not shapes:
        raise ValueError(f"{what}: got no arrays.")
    short = {key: shape for key, shape in shapes.items() if len(shape) < 2}
    if short:
        raise ValueError(f"{what} needs time-major [T, N, ...] arrays; got shapes {short}.")
    leading = {key: shape[:2] for key, shape in shapes.items()}
    if len(set(leading.values())) > 1:
        raise ValueError(
            f"{what}: the arrays disagree on their [T, N] (time steps, environments): {leading}."
        )
    return next(iter(leading.values()))


def _check_length(max_seq_len: int) -> None:
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or max_seq_len < 1:
        raise ValueError(f"max_seq_len must be a positive int; got {max_seq_len!r}.")


def num_sequences(num_steps: int, num_envs: int, max_seq_len: int) -> int:
    """``S = num_envs * ceil(num_steps / max_seq_len)``, the sequences a rollout becomes."""
    _check_length(max_seq_len)
    return num_envs * math.ceil(num_steps / max_seq_len)


def chunk_sequences(tree: PyTree, max_seq_len: int) -> tuple[PyTree, jax.Array]:
    """Time-major ``[T, N, ...]`` arrays as zero-padded sequences ``[S, L, ...]`` and their mask.

    Args:
      tree: a pytree of ``[T, N, ...]`` arrays sharing ``T`` and ``N``.
      max_seq_len: ``L``, steps per sequence.

    Returns:
      ``(sequences, mask)``: the tree with leaves ``[N * K, L, ...]`` (``K =
      ceil(T / L)``; padded steps are zeros of the leaf's dtype), and ``mask
      [N * K, L]`` float32, 1 for real steps and 0 for padding.

    Raises:
      ValueError: when the arrays disagree on ``[T, N]``, have fewer than two
        axes, or ``max_seq_len`` is not a positive int.

    Example:
      >>> x = jnp.arange(5)[:, None] * jnp.ones((1, 2), jnp.int32)   # [T=5, N=2]
      >>> sequences, mask = chunk_sequences(x, 2)
      >>> sequences[:3].tolist(), mask[:3].tolist()   # environment 0: [0 1] [2 3] [4 pad]
      ([[0, 1], [2, 3], [4, 0]], [[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    """
    _check_length(max_seq_len)
    steps, envs = _time_and_envs(tree, "chunk_sequences")
    chunks = math.ceil(steps / max_seq_len)
    padding = chunks * max_seq_len - steps

    def chunk(x: Any) -> jax.Array:
        x = jnp.asarray(x)
        x = jnp.pad(x, [(0, padding)] + [(0, 0)] * (x.ndim - 1))
        x = jnp.swapaxes(x, 0, 1)  # [N, K * L, ...]
        return x.reshape(envs * chunks, max_seq_len, *x.shape[2:])

    mask = jnp.ones((steps, envs), jnp.float32)
    return jax.tree.map(chunk, tree), chunk(mask)


def chunk_starts(tree: PyTree, max_seq_len: int) -> PyTree:
    """Each sequence's first step of time-major ``[T, N, ...]`` arrays: ``[N * K, ...]``.

    Entry ``n * K + k`` is ``x[k * L, n]``, in the order of :func:`chunk_sequences`;
    for a stored recurrent state, the state each sequence starts from.

    Raises:
      ValueError: as :func:`chunk_sequences`.

    Example:
      >>> x = jnp.arange(5)[:, None] * jnp.ones((1, 2), jnp.int32)   # [T=5, N=2]
      >>> chunk_starts(x, 2).tolist()
      [0, 2, 4, 0, 2, 4]
    """
    _check_length(max_seq_len)
    steps, envs = _time_and_envs(tree, "chunk_starts")
    chunks = math.ceil(steps / max_seq_len)

    def starts(x: Any) -> jax.Array:
        x = jnp.swapaxes(jnp.asarray(x)[::max_seq_len], 0, 1)  # [N, K, ...]
        return x.reshape(envs * chunks, *x.shape[2:])

    return jax.tree.map(starts, tree)
