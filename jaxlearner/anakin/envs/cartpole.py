"""CartPole-v1 in pure JAX, matching gymnasium's ``CartPoleEnv`` under ``TimeLimit(500)``.

The dynamics, constants, order of operations, Euler integration, termination
thresholds, reward and initial-state distribution are gymnasium 1.x's
(``gymnasium/envs/classic_control/cartpole.py``, after Barto, Sutton and
Anderson, 1983). Two differences, both deliberate:

- gymnasium integrates in float64 and casts the observation to float32; this
  integrates in the state's dtype, float32 by default (float64 under
  ``jax.enable_x64`` with a float64 state). One step agrees with gymnasium's
  to float32 rounding; the uncontrolled cart-pole amplifies differences over
  long horizons, as it does any perturbation.
- gymnasium warns and returns reward 0 when stepped after termination; here
  ``step`` resets on termination (see
  :func:`~jaxlearner.anakin.envs.environment.step_with_auto_reset`), so every step
  returns the reward of a live or terminating step: ``1.0`` (or ``0.0`` /
  ``-1.0`` with ``sutton_barto_reward=True``).
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
    discrete_space,
    reset_episode,
    step_with_auto_reset,
)

if TYPE_CHECKING:
    import gymnasium

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_POLE + MASS_CART
LENGTH = 0.5  # half the pole's length, as in gymnasium
POLE_MASS_LENGTH = MASS_POLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02  # seconds between state updates
THETA_THRESHOLD_RADIANS = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
RESET_BOUND = 0.05  # every state variable starts uniform in [-0.05, 0.05)


@struct.dataclass
class CartPoleState:
    """CartPole's physical state, gymnasium's ``env.unwrapped.state`` as named scalars.

    Attributes:
      x: cart position (m), float ``[]``.
      x_dot: cart velocity (m/s), float ``[]``.
      theta: pole angle from upright (rad), float ``[]``.
      theta_dot: pole angular velocity (rad/s), float ``[]``.

    Example:
      >>> import jax.numpy as jnp
      >>> state = CartPoleState(*jnp.array([0.01, 0.0, -0.02, 0.0]))
      >>> observe(state)
      Array([ 0.01,  0.  , -0.02,  0.  ], dtype=float32)
    """

    x: jax.Array
    x_dot: jax.Array
    theta: jax.Array
    theta_dot: jax.Array


def observe(state: CartPoleState) -> jax.Array:
    """The observation of a state: ``[x, x_dot, theta, theta_dot]`` as float32 ``[4]``.

    Args:
      state: a :class:`CartPoleState`.

    Returns:
      float32 ``[4]``, as gymnasium's ``np.array(self.state, dtype=np.float32)``.

    Example:
      >>> observe(CartPoleState(0.0, 1.0, 0.0, -1.0))
      Array([ 0.,  1.,  0., -1.], dtype=float32)
    """
    return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot]).astype(jnp.float32)


def reset_dynamics(key: jax.Array) -> tuple[CartPoleState, jax.Array]:
    """Draw an initial state: each variable uniform in ``[-0.05, 0.05)``, float32.

    Args:
      key: a typed PRNG key.

    Returns:
      ``(state, obs)``: a :class:`CartPoleState` and its float32 ``[4]`` observation.

    Example:
      >>> import jax
      >>> state, obs = reset_dynamics(jax.random.key(0))
      >>> bool(jax.numpy.all(jax.numpy.abs(obs) <= 0.05))
      True
    """
    values = jax.random.uniform(key, (4,), jnp.float32, -RESET_BOUND, RESET_BOUND)
    state = CartPoleState(x=values[0], x_dot=values[1], theta=values[2], theta_dot=values[3])
    return state, observe(state)


def step_dynamics(
    state: CartPoleState, action: jax.typing.ArrayLike, sutton_barto_reward: bool = False
) -> tuple[CartPoleState, jax.Array, jax.Array, jax.Array]:
    """One Euler step of the cart-pole, with gymnasium's reward and termination.

    Computes in the dtype of ``state``, in gymnasium's order of operations
    (https://coneural.org/florian/papers/05_cart_pole.pdf for the equations).

    Args:
      state: a :class:`CartPoleState`.
      action: int ``[]`` (or ``[1]``); ``1`` pushes the cart right, anything
        else pushes it left (gymnasium asserts ``action in {0, 1}``, which a
        traced function cannot).
      sutton_barto_reward: reward ``0`` per live step and ``-1`` on termination
        instead of ``1`` per step; static.

    Returns:
      ``(state, obs, reward, terminated)``: the next state, its float32 ``[4]``
      observation, float32 ``[]`` reward and bool ``[]`` ``terminated`` (the
      cart left ``[-2.4, 2.4]`` or the pole left ``[-12°, 12°]``).

    Raises:
      ValueError, TypeError: ``action`` is not one integer.

    Example:
      >>> state = CartPoleState(0.0, 0.0, 0.0, 0.0)
      >>> state, obs, reward, terminated = step_dynamics(state, 1)
      >>> obs  # pushed right: the cart speeds up, the pole starts to fall left
      Array([ 0.        ,  0.19512196,  0.        , -0.29268292], dtype=float32)
      >>> float(reward), bool(terminated)
      (1.0, False)
    """
    action = _check_discrete_action(action)
    force = jnp.where(action == 1, FORCE_MAG, -FORCE_MAG)
    costheta = jnp.cos(state.theta)
    sintheta = jnp.sin(state.theta)
    temp = (force + POLE_MASS_LENGTH * jnp.square(state.theta_dot) * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASS_POLE * jnp.square(costheta) / TOTAL_MASS)
    )
    xacc = temp - POLE_MASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    next_state = CartPoleState(
        x=state.x + TAU * state.x_dot,
        x_dot=state.x_dot + TAU * xacc,
        theta=state.theta + TAU * state.theta_dot,
        theta_dot=state.theta_dot + TAU * thetaacc,
    )
    terminated = (
        (next_state.x < -X_THRESHOLD)
        | (next_state.x > X_THRESHOLD)
        | (next_state.theta < -THETA_THRESHOLD_RADIANS)
        | (next_state.theta > THETA_THRESHOLD_RADIANS)
    )
    if sutton_barto_reward:
        reward = jnp.where(terminated, -1.0, 0.0).astype(jnp.float32)
    else:
        reward = jnp.ones((), jnp.float32)
    return next_state, observe(next_state), reward, terminated


@final
@dataclasses.dataclass(frozen=True)
class CartPole:
    """gymnasium's ``CartPole-v1`` as a pure-JAX :class:`~jaxlearner.anakin.envs.Environment`.

    Observation ``[x, x_dot, theta, theta_dot]`` float32 ``[4]``; action int
    ``[]`` in ``{0, 1}`` (push left, push right); reward ``1`` per step,
    the terminating step included; terminated when ``|x| > 2.4`` or
    ``|theta| > 12°``; truncated after ``max_episode_steps``.

    Attributes:
      max_episode_steps: time limit, 500 as gymnasium's registration; static.
      sutton_barto_reward: gymnasium's ``sutton_barto_reward`` option (reward
        ``0`` per step and ``-1`` on termination); static.

    Example:
      >>> import jax
      >>> env = CartPole()
      >>> state, obs = jax.jit(env.reset)(jax.random.key(0))
      >>> state, obs, reward, terminated, truncated, info = jax.jit(env.step)(
      ...     state, 1, jax.random.key(1))
      >>> obs.shape, float(reward), int(state.time)
      ((4,), 1.0, 1)
    """

    max_episode_steps: int = 500
    sutton_barto_reward: bool = False

    def __post_init__(self) -> None:
        check_max_episode_steps(self.max_episode_steps)
        if not isinstance(self.sutton_barto_reward, bool):
            raise TypeError(
                f"sutton_barto_reward must be a bool, got {self.sutton_barto_reward!r}."
            )

    @property
    def observation_space(self) -> gymnasium.spaces.Box:
        """gymnasium's ``Box(-high, high, (4,), float32)``, ``high = [4.8, inf, 24°, inf]``."""
        high = np.array(
            [X_THRESHOLD * 2, np.inf, THETA_THRESHOLD_RADIANS * 2, np.inf], dtype=np.float32
        )
        return box_space(-high, high)

    @property
    def action_space(self) -> gymnasium.spaces.Discrete:
        """``Discrete(2)``: 0 pushes the cart left, 1 pushes it right."""
        return discrete_space(2)

    def reset(self, key: jax.Array) -> tuple[EnvState, jax.Array]:
        """Start an episode: ``key -> (state, obs)``, obs float32 ``[4]``.

        Example:
          >>> import jax
          >>> state, obs = CartPole().reset(jax.random.key(0))
          >>> obs.shape, obs.dtype
          ((4,), dtype('float32'))
        """
        return reset_episode(key, reset_dynamics)

    def step(self, state: EnvState, action: jax.typing.ArrayLike, key: jax.Array) -> StepOutput:
        """One step with automatic reset (contract in ``step_with_auto_reset``).

        Args:
          state: the :class:`~jaxlearner.anakin.envs.EnvState` from ``reset`` or ``step``.
          action: int ``[]`` in ``{0, 1}``.
          key: a typed PRNG key, used only if the episode ends (for the reset).

        Returns:
          ``(state, obs, reward, terminated, truncated, info)``.

        Example:
          >>> import jax
          >>> env = CartPole()
          >>> state, obs = env.reset(jax.random.key(0))
          >>> state, obs, reward, terminated, truncated, info = env.step(
          ...     state, 0, jax.random.key(1))
          >>> bool(terminated), bool(truncated), int(info["episode_length"])
          (False, False, 1)
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
        self, state: CartPoleState, action: jax.typing.ArrayLike, key: jax.Array
    ) -> tuple[CartPoleState, jax.Array, jax.Array, jax.Array]:
        del key  # the cart-pole is deterministic
        return step_dynamics(state, action, self.sutton_barto_reward)


def _check_discrete_action(action: jax.typing.ArrayLike) -> jax.Array:
    """One integer action as an int ``[]`` array, or a clear error before tracing goes on."""
    action = jnp.asarray(action)
    if action.size != 1:
        raise ValueError(
            f"CartPole takes one action per environment, got shape {action.shape}; "
            "for a batch of environments vmap step."
        )
    if not (jnp.issubdtype(action.dtype, jnp.integer) or action.dtype == jnp.bool_):
        raise TypeError(
            f"CartPole actions are integers in {{0, 1}}, got dtype {action.dtype}; "
            "sample an index (e.g. jax.random.categorical), not logits or probabilities."
        )
    return action.reshape(())
