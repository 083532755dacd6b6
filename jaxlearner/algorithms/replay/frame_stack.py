"""Stacked-frame observations kept once per frame: the replay memory of pixel tasks.

Atari observations are the last ``S`` frames stacked on the last axis, ``[H, W, S]``
(gymnasium's ``FrameStackObservation``, channels last). Consecutive observations share
``S - 1`` frames and a transition's next observation shares ``S - 1`` with its
observation, so storing rows as they are keeps every frame ``2 S`` times: 56,448 bytes per
``84 x 84 x 4`` uint8 transition, 5.6 GB for 100k transitions.

A :class:`FrameStore` keeps two frames per transition in a ring of its own: the newest
frame of the observation and the newest frame of the next observation (the next one is
kept too because an episode cut by a time limit bootstraps on a final observation no later
transition starts from). The rows then hold, instead of pixels, ``[S]`` int32 slot indices
into the ring, one per stacked frame. Per ``84 x 84 x 4`` uint8 transition that is
``2 x 7,056 + 2 x 16 = 14,144`` bytes of observations (1.41 GB for 100k, a quarter).

:func:`encode` finds each stacked frame's slot from the pixels themselves: slot ``k < S - 1``
of an observation is the frame in slot ``k`` of the previous step's next observation of the
same environment when their pixels are equal (the episode goes on), else the frame in slot
``k + 1`` of the observation itself when equal (``FrameStackObservation`` pads an episode's
first observation with its reset frame), and a next observation's slot ``k`` is its
observation's slot ``k + 1``. Every slot is checked pixel for pixel, so :func:`decode`
returns exactly what was encoded; a valid row whose frames are none of these is not a
transition of a frame-stacked environment: it is stored as not valid (``mask`` 0) and
counted in ``mismatches``. One per environment is what a resume that restarts the
environments leaves; many mean the observations are not stacks of ``S`` consecutive frames,
and the trainer stops with an error. A source is at most ``S - 1`` steps older than
its row, and the ring holds ``S - 1`` steps more than the replay buffer, so no row
outlives its frames.

Example:
  >>> store = frame_store_init((84, 84), jnp.uint8, stack=4, num_envs=2, capacity=1000)
  >>> store, slots = encode(store, experience)       # obs, next_obs: [T, 2, 84, 84, 4]
  ... # doctest: +SKIP
  >>> decode(store, slots["obs"][0]).shape            # doctest: +SKIP
  (2, 84, 84, 4)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class FrameStore:
    """A ring of frames that stacked observations point into.

    Attributes:
      frames: ``[F, *frame]`` the frames (``frame`` is the observation shape without
        its last, stacking axis), ``F = 2 (capacity + (S - 1) N)``.
      position: int32 scalar, the slot the next frame is written to.
      last: ``[N, S]`` int32, the slots of each environment's last next observation.
      has_last: ``[N]`` bool, whether ``last`` holds one (false before the first add).
      mismatches: int32 scalar, valid transitions so far whose observations were not
        stacks of consecutive frames (see the module docstring).
    """

    frames: jax.Array
    position: jax.Array
    last: jax.Array
    has_last: jax.Array
    mismatches: jax.Array

    @property
    def stack(self) -> int:
        """Frames per observation ``S`` (static)."""
        return int(self.last.shape[1])


def frame_store_init(
    frame_shape: tuple[int, ...], dtype: Any, stack: int, num_envs: int, capacity: int
) -> FrameStore:
    """An empty store for a replay buffer of ``capacity`` transitions from ``num_envs`` envs.

    Args:
      frame_shape: one frame's shape, e.g. ``(84, 84)``.
      dtype: the observations' dtype (uint8 for Atari).
      stack: frames per observation ``S >= 2``.
      num_envs: environments per rollout ``N`` (every :func:`encode` must have ``N``).
      capacity: the replay buffer's capacity in transitions.

    Raises:
      ValueError: for a ``stack`` below 2 or a non-positive ``num_envs`` or ``capacity``.

    Example:
      >>> store = frame_store_init((84, 84), jnp.uint8, stack=4, num_envs=1, capacity=10)
      >>> store.frames.shape
      (26, 84, 84)
    """
    checks = (("stack", stack, 2), ("num_envs", num_envs, 1), ("capacity", capacity, 1))
    for name, value, low in checks:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"frame_store_init: {name} must be an int >= {low}; got {value!r}.")
    slots = 2 * (capacity + (stack - 1) * num_envs)
    return FrameStore(
        frames=jnp.zeros((slots, *frame_shape), dtype),
        position=jnp.zeros((), jnp.int32),
        last=jnp.zeros((num_envs, stack), jnp.int32),
        has_last=jnp.zeros((num_envs,), bool),
        mismatches=jnp.zeros((), jnp.int32),
    )


def encode(store: FrameStore, experience: Mapping[str, Any]) -> tuple[FrameStore, dict[str, Any]]:
    """Writes a rollout's frames to the store; its ``obs`` and ``next_obs`` become slots.

    Args:
      store: the store.
      experience: ``[T, N, ...]`` columns with ``obs`` and ``next_obs`` ``[T, N, *frame, S]``
        and ``valid`` ``[T, N]`` (rows that are not valid are not counted as mismatches).

    Returns:
      ``(store, experience)``: the store with the rollout's ``2 T N`` frames written and
      ``last`` set to its last next observations; the experience with ``obs`` and
      ``next_obs`` replaced by ``[T, N, S]`` int32 slots, and ``valid`` false where a row's
      frames were not stacks of consecutive frames (counted in ``mismatches``; such a row
      is not a transition of the environment, e.g. the first after a resume that restarted
      it, and the losses leave it out); other columns unchanged.

    Raises:
      ValueError: when the observations' shape, dtype, stack or ``N`` are not the store's,
        or the rollout has more transitions than the store's capacity.
    """
    obs, next_obs = jnp.asarray(experience["obs"]), jnp.asarray(experience["next_obs"])
    _check_shapes(store, obs, next_obs)
    steps, envs = obs.shape[0], obs.shape[1]
    size = store.frames.shape[0]
    rows = jnp.arange(steps, dtype=jnp.int32)[:, None] * envs + jnp.arange(envs, dtype=jnp.int32)
    own = (store.position + 2 * rows) % size  # [T, N] the slot of each obs's newest frame
    own_next = (own + 1) % size
    # The rollout's frames are written first and the last frames read after: the slots
    # written never hold them (the store keeps (S - 1) N slots pairs beyond the capacity).
    # Read first, XLA keeps the old store alive for the read by copying all of it, twice.
    frame = obs.shape[2:-1]
    frames = store.frames.at[own.reshape(-1)].set(obs[..., -1].reshape(-1, *frame))
    frames = frames.at[own_next.reshape(-1)].set(next_obs[..., -1].reshape(-1, *frame))
    last_frames = jnp.moveaxis(frames[store.last], 1, -1)  # [N, *frame, S]

    def step(carry: tuple, inputs: tuple) -> tuple[tuple, tuple]:
        prev_slots, prev_obs, has_prev = carry
        o, n, o_slot, n_slot, valid = inputs
        slots, bad = _obs_slots(o, o_slot, prev_slots, prev_obs, has_prev)
        next_slots, next_bad = _next_slots(n, o, slots, n_slot)
        bad = (bad | next_bad) & valid
        return (next_slots, n, jnp.ones_like(has_prev)), (slots, next_slots, bad)

    carry = (store.last, last_frames, store.has_last)
    valid = jnp.asarray(experience["valid"], bool)
    (last, _, has_last), (slots, next_slots, bad) = jax.lax.scan(
        step, carry, (obs, next_obs, own, own_next, valid)
    )
    store = FrameStore(
        frames=frames,
        position=(store.position + 2 * steps * envs) % size,
        last=last,
        has_last=has_last,
        mismatches=store.mismatches + bad.sum(dtype=jnp.int32),
    )
    encoded = {"obs": slots, "next_obs": next_slots, "valid": valid & ~bad}
    return store, {**experience, **encoded}


def decode(store: FrameStore, slots: jax.Array) -> jax.Array:
    """The stacked observations ``[..., *frame, S]`` that ``[..., S]`` slots point to.

    Example:
      >>> store = frame_store_init((2,), jnp.uint8, stack=2, num_envs=1, capacity=4)
      >>> decode(store, jnp.zeros((3, 2), jnp.int32)).shape
      (3, 2, 2)
    """
    return jnp.moveaxis(store.frames[slots], slots.ndim - 1, -1)


def _equal(a: jax.Array, b: jax.Array) -> jax.Array:
    """``[N]`` whether each environment's frames ``a[n]`` and ``b[n]`` are equal."""
    return (a == b).reshape(a.shape[0], -1).all(axis=1)


def _obs_slots(
    obs: jax.Array, own: jax.Array, prev_slots: jax.Array, prev_obs: jax.Array, has_prev: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """``[N, S]`` slots of one step's observations and ``[N]`` whether any frame had none.

    The newest frame is the step's own; older ones come from the previous next observation
    (the episode goes on) or repeat the newer slot (an episode's padded first observation).
    """
    stack = obs.shape[-1]
    columns: list[jax.Array] = [own] * stack
    bad = jnp.zeros(obs.shape[0], bool)
    for k in range(stack - 2, -1, -1):
        goes_on = has_prev & _equal(obs[..., k], prev_obs[..., k])
        padded = _equal(obs[..., k], obs[..., k + 1])
        columns[k] = jnp.where(goes_on, prev_slots[:, k], columns[k + 1])
        bad = bad | ~(goes_on | padded)
    return jnp.stack(columns, axis=1), bad


def _next_slots(
    next_obs: jax.Array, obs: jax.Array, slots: jax.Array, own: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """``[N, S]`` slots of one step's next observations: the observation's frames shifted
    by one and the step's own newest frame; ``[N]`` whether any older frame was not those."""
    stack = obs.shape[-1]
    bad = jnp.zeros(obs.shape[0], bool)
    for k in range(stack - 1):
        bad = bad | ~_equal(next_obs[..., k], obs[..., k + 1])
    return jnp.concatenate([slots[:, 1:], own[:, None]], axis=1), bad


def _check_shapes(store: FrameStore, obs: jax.Array, next_obs: jax.Array) -> None:
    """Raises ``ValueError`` unless both are ``[T, N, *frame, S]`` of the store's dtype."""
    frame, (envs, stack) = store.frames.shape[1:], store.last.shape
    expected = (envs, *frame, stack)
    for name, value in (("obs", obs), ("next_obs", next_obs)):
        if value.ndim < 3 or value.shape[1:] != expected or value.dtype != store.frames.dtype:
            raise ValueError(
                f"encode: {name} has shape {value.shape} and dtype {value.dtype}; the frame "
                f"store takes [T, {', '.join(map(str, expected))}] {store.frames.dtype} "
                f"({envs} environments, frames {frame}, {stack} stacked on the last axis)."
            )
    steps, capacity = obs.shape[0], store.frames.shape[0] // 2 - (stack - 1) * envs
    if steps * envs > capacity:
        raise ValueError(
            f"encode: a rollout of {steps * envs} transitions ({steps} steps x {envs} "
            f"environments), more than the store's capacity ({capacity}); make the replay "
            "buffer hold at least one rollout."
        )


@struct.dataclass
class FramedReplay:
    """A replay buffer whose rows hold frame slots, and the :class:`FrameStore` they point to.

    Attributes:
      replay: the rows' buffer (uniform or prioritized), ``obs`` and ``next_obs`` ``[S]``
        int32 slots.
      frames: the frames.
    """

    replay: Any
    frames: FrameStore


def decode_rows(store: FrameStore, rows: Mapping[str, Any]) -> dict[str, Any]:
    """Sampled rows with their ``obs`` and ``next_obs`` slots replaced by the observations."""
    return {
        **rows,
        "obs": decode(store, rows["obs"]),
        "next_obs": decode(store, rows["next_obs"]),
    }
