"""Pendulum-v1 in pure JAX, matching gymnasium's ``PendulumEnv`` under ``TimeLimit(200)``.

The swing-up dynamics, constants, order of operations, action clipping,
velocity clipping, cost (with the angle normalised to ``[-pi, pi)``) and
initial-state distribution are gymnasium 1.x's
(``gymnasium/envs/classic_control/pendulum.py``). The episode never
terminates; it is truncated after ``max_episode_steps``.

gymnasium integrates in float64 and casts the observation to float32; this
integrates in the state's dtype, float32 by default (float64 under
``jax.enable_x64`` with a float64 state), so one step agrees with
gymnasium's to float32 rounding. Like gymnasium, the angle is not wrapped
in the state (only in the cost and, through cos/sin, the observation).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, final

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlearner.anakin.envs.environment import (
    EnvState,
    StepOutput,
    box_space,
    check_max_episode_steps,
    reset_episode,
    step_with_auto_reset,
)

if TYPE_CHECKING:
    import gymnasium

MAX_SPEED = 8.0
MAX_TORQUE = 2.0
DT = 0.05
MASS = 1.0
POLE_LENGTH = 1.0
DEFAULT_GRAVITY = 10.0
RESET_ANGLE = math.pi  # the angle starts uniform in [-pi, pi]
RESET_SPEED = 1.0  # the angular velocity starts uniform in [-1, 1]


@struct.dataclass
class PendulumState:
    """Pendulum's physical state, gymnasium's ``env.unwrapped.state`` as named scalars.

    Attributes:
      theta: angle from upright (rad), float ``[]``; not wrapped, as in gymnasium.
      theta_dot: angular velocity (rad/s), float ``[]``, within ``[-8, 8]``.

    Example:
      >>> observe(PendulumState(theta=0.0, theta_dot=1.0))
      Array([1., 0., 1.], dtype=float32)
    """

    theta: jax.Array
    theta_dot: jax.Array


def angle_normalize(x: jax.typing.ArrayLike) -> jax.Array:
    """Wrap an angle into ``[-pi, pi)``: gymnasium's ``((x + pi) % (2 pi)) - pi``.

    Args:
      x: angles in radians, any shape.

    Returns:
      The same angles wrapped, same shape.

    Example:
      >>> angle_normalize(jax.numpy.array([0.5, 4.0, -7.0]))  # 4 - 2 pi, -7 + 2 pi
      Array([ 0.5      , -2.2831852, -0.7168145], dtype=float32)
    """
    return ((jnp.asarray(x) + math.pi) % (2 * math.pi)) - math.pi


def observe(state: PendulumState) -> jax.Array:
    """The observation of a state: ``[cos theta, sin theta, theta_dot]`` float32 ``[3]``.

    Args:
      state: a :class:`PendulumState`.

    Returns:
      float32 ``[3]``.

    Example:
      >>> observe(PendulumState(theta=math.pi / 2, theta_dot=-2.0))
      Array([-4.371139e-08,  1.000000e+00, -2.000000e+00], dtype=float32)
    """
    theta = jnp.asarray(state.theta)
    return jnp.stack([jnp.cos(theta), jnp.sin(theta), jnp.asarray(state.theta_dot)]).astype(
        jnp.float32
    )


def reset_dynamics(key: jax.Array) -> tuple[PendulumState, jax.Array]:
    """Draw an initial state: angle uniform in ``[-pi, pi]``, velocity in ``[-1, 1]``, float32.

    Args:
      key: a typed PRNG key.

    Returns:
      ``(state, obs)``: a :class:`PendulumState` and its float32 ``[3]`` observation.

    Example:
      >>> state, obs = reset_dynamics(jax.random.key(0))
      >>> bool(abs(state.theta_dot) <= 1.0)
      True
    """
    high = jnp.array([RESET_ANGLE, RESET_SPEED], jnp.float32)
    theta, theta_dot = jax.random.uniform(key, (2,), jnp.float32, -high, high)
    state = PendulumState(theta=theta, theta_dot=theta_dot)
    return state, observe(state)


def step_dynamics(
    state: PendulumState, action: jax.typing.ArrayLike, gravity: float = DEFAULT_GRAVITY
) -> tuple[PendulumState, jax.Array, jax.Array]:
    """One semi-implicit Euler step of the pendulum, with gymnasium's cost.

    ``u = clip(action, -2, 2)``; reward ``-(angle_normalize(theta)^2 +
    0.1 theta_dot^2 + 0.001 u^2)`` of the state *before* the step;
    ``theta_dot' = clip(theta_dot + (3 g / (2 l) sin theta + 3 / (m l^2) u) dt, -8, 8)``;
    ``theta' = theta + theta_dot' dt``. Computes in the dtype of ``state``.

    Args:
      state: a :class:`PendulumState`.
      action: the torque, float ``[1]`` (or ``[]``); clipped to ``[-2, 2]``.
      gravity: ``g``, gymnasium's ``Pendulum-v1`` keyword; static.

    Returns:
      ``(state, obs, reward)``: the next state, its float32 ``[3]`` observation
      and the float32 ``[]`` reward.

    Raises:
      ValueError: ``action`` holds more than one number.

    Example:
      >>> state = PendulumState(theta=0.0, theta_dot=0.0)
      >>> state, obs, reward = step_dynamics(state, jax.numpy.array([5.0]))  # clipped to 2
      >>> float(state.theta_dot), float(reward)  # 3 * 2 * 0.05 = 0.3; -0.001 * 2^2
      (0.30000001192092896, -0.004000000189989805)
    """
    u = jnp.clip(_check_torque(action), -MAX_TORQUE, MAX_TORQUE)
    cost = angle_normalize(state.theta) ** 2 + 0.1 * state.theta_dot**2 + 0.001 * (u**2)
    # Python floats, in gymnasium's order: 3 * g / (2 * l) * sin(theta) + 3.0 / (m * l**2) * u.
    gravity_coefficient = 3 * gravity / (2 * POLE_LENGTH)
    torque_coefficient = 3.0 / (MASS * POLE_LENGTH**2)
    theta_dot = (
        state.theta_dot + (gravity_coefficient * jnp.sin(state.theta) + torque_coefficient * u) * DT
    )
    theta_dot = jnp.clip(theta_dot, -MAX_SPEED, MAX_SPEED)
    next_state = PendulumState(theta=state.theta + theta_dot * DT, theta_dot=theta_dot)
    return next_state, observe(next_state), (-cost).astype(jnp.float32)


@final
@dataclasses.dataclass(frozen=True)
class Pendulum:
    """gymnasium's ``Pendulum-v1`` as a pure-JAX :class:`~jaxlearner.anakin.envs.Environment`.

    Observation ``[cos theta, sin theta, theta_dot]`` float32 ``[3]`` in
    ``[-1, 1] x [-1, 1] x [-8, 8]``; action a torque float32 ``[1]`` in
    ``[-2, 2]`` (clipped); reward in ``[-16.27, 0]``; never terminated;
    truncated after ``max_episode_steps``.

    Attributes:
      max_episode_steps: time limit, 200 as gymnasium's registration; static.
      gravity: gymnasium's ``g`` keyword (default 10.0); static, must be finite.

    Example:
      >>> env = Pendulum()
      >>> state, obs = jax.jit(env.reset)(jax.random.key(0))
      >>> state, obs, reward, terminated, truncated, info = jax.jit(env.step)(
      ...     state, jax.numpy.array([1.0]), jax.random.key(1))
      >>> obs.shape, bool(terminated), int(state.time)
      ((3,), False, 1)
    """

    max_episode_steps: int = 200
    gravity: float = DEFAULT_GRAVITY

    def __post_init__(self) -> None:
        check_max_episode_steps(self.max_episode_steps)
        if isinstance(self.gravity, bool) or not isinstance(self.gravity, int | float):
            raise TypeError(f"gravity must be a float, got {self.gravity!r}.")
        if not math.isfinite(self.gravity):
            raise ValueError(f"gravity must be finite, got {self.gravity}.")

    @property
    def observation_space(self) -> gymnasium.spaces.Box:
        """gymnasium's ``Box(-high, high, (3,), float32)``, ``high = [1, 1, 8]``."""
        high = np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32)
        return box_space(-high, high)

    @property
    def action_space(self) -> gymnasium.spaces.Box:
        """gymnasium's ``Box(-2, 2, (1,), float32)``: the torque."""
        return box_space(-MAX_TORQUE, MAX_TORQUE, (1,))

    def reset(self, key: jax.Array) -> tuple[EnvState, jax.Array]:
        """Start an episode: ``key -> (state, obs)``, obs float32 ``[3]``.

        Example:
          >>> state, obs = Pendulum().reset(jax.random.key(0))
          >>> obs.shape, obs.dtype
          ((3,), dtype('float32'))
        """
        return reset_episode(key, reset_dynamics)

    def step(self, state: EnvState, action: jax.typing.ArrayLike, key: jax.Array) -> StepOutput:
        """One step with automatic reset (contract in ``step_with_auto_reset``).

        Args:
          state: the :class:`~jaxlearner.anakin.envs.EnvState` from ``reset`` or ``step``.
          action: the torque, float ``[1]``; clipped to ``[-2, 2]``.
          key: a typed PRNG key, used only if the episode ends (for the reset).

        Returns:
          ``(state, obs, reward, terminated, truncated, info)``; ``terminated``
          is always ``False``.

        Example:
          >>> env = Pendulum(max_episode_steps=1)
          >>> state, obs = env.reset(jax.random.key(0))
          >>> state, obs, reward, terminated, truncated, info = env.step(
          ...     state, jax.numpy.zeros(1), jax.random.key(1))
          >>> bool(truncated), int(info["episode_length"]), int(state.time)
          (True, 1, 0)
        """
        return step_with_auto_reset(
            state,
            action,
            key,
            step_dynamics=self._step_dynamics,
            reset_dynamics=reset_dynamics,
            max_episode_steps=self.max_episode_steps,
        )

    def _step_dynamics(
        self, state: PendulumState, action: jax.typing.ArrayLike, key: jax.Array
    ) -> tuple[PendulumState, jax.Array, jax.Array, jax.Array]:
        del key  # the pendulum is deterministic
        next_state, obs, reward = step_dynamics(state, action, self.gravity)
        return next_state, obs, reward, jnp.zeros((), jnp.bool_)


def _check_torque(action: jax.typing.ArrayLike) -> jax.Array:
    """One torque as a float ``[]`` array, or a clear error before tracing goes on."""
    action = jnp.asarray(action)
    if action.size != 1:
        raise ValueError(
            f"Pendulum takes one torque per environment (shape (1,)), got shape "
            f"{action.shape}; for a batch of environments vmap step."
        )
    if not jnp.issubdtype(action.dtype, jnp.floating):
        action = action.astype(jnp.float32)
    return action.reshape(())
