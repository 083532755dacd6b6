"""The functional environment interface: pure ``reset``/``step`` with automatic reset.

An :class:`Environment` is an immutable object whose ``reset`` and ``step``
are pure functions of arrays, so a whole rollout can be one ``lax.scan``,
vmapped over environments and seeds, under one ``jax.jit``. Everything that
changes lives in an :class:`EnvState` pytree: the environment's own dynamics
state, the time step within the episode (for truncation) and the running
episode return (for logging).

``step`` resets by itself when an episode ends, in the way of gymnasium's
``SAME_STEP`` autoreset mode: the observation it returns is then the first
observation of the next episode, and ``info["final_obs"]`` holds the last
observation of the finished one, so a learner can bootstrap from it on
truncation.

This module is where gymnasium enters ``jaxlearner.anakin.envs``: spaces are real
``gymnasium.spaces`` objects, so an algorithm recipe builds its models from
``env.observation_space`` and ``env.action_space`` as it would for a
gymnasium environment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeAlias, runtime_checkable

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlearner.types import PyTree

StepInfo: TypeAlias = dict[str, jax.Array]
"""``{"final_obs", "episode_return", "episode_length"}``, see :func:`step_with_auto_reset`."""

StepOutput: TypeAlias = tuple["EnvState", jax.Array, jax.Array, jax.Array, jax.Array, StepInfo]
"""``(state, obs, reward, terminated, truncated, info)``, as gymnasium's ``step``."""

ResetDynamicsFn: TypeAlias = Callable[[jax.Array], tuple[PyTree, jax.Array]]
"""``reset_dynamics(key) -> (dynamics, obs)``: the start of a fresh episode."""

StepDynamicsFn: TypeAlias = Callable[
    [PyTree, jax.Array, jax.Array], tuple[PyTree, jax.Array, jax.Array, jax.Array]
]
"""``step_dynamics(dynamics, action, key) -> (dynamics, obs, reward, terminated)``.

One transition with no time limit and no reset: ``terminated`` is the
environment's own terminal condition (the pole fell), never a time limit.
"""


@struct.dataclass
class EnvState:
    """The state of one environment: its dynamics plus episode bookkeeping.

    Attributes:
      dynamics: the environment's own state, e.g. a
        :class:`~jaxlearner.anakin.envs.cartpole.CartPoleState`.
      time: int32 scalar, steps taken in the current episode (0 after a reset).
        ``step`` truncates the episode when it reaches ``max_episode_steps``.
      episode_return: float32 scalar, sum of the rewards of the current episode.

    Batched over environments (``jax.vmap(env.reset)(keys)``) every leaf gains
    a leading ``[N]`` axis.

    Example:
      >>> import jax
      >>> from jaxlearner.anakin.envs import make
      >>> state, obs = make("CartPole-v1").reset(jax.random.key(0))
      >>> int(state.time), float(state.episode_return)
      (0, 0.0)
    """

    dynamics: PyTree
    time: jax.Array
    episode_return: jax.Array


@runtime_checkable
class Environment(Protocol):
    """A pure-JAX environment with automatic reset.

    Implementations are immutable and hashable (frozen dataclasses), so
    ``jax.jit(env.step)`` closes over them and ``env`` can be a static
    argument. ``reset`` and ``step`` act on one environment; vmap them for many.

    Attributes:
      observation_space: a ``gymnasium.spaces`` description of one observation.
      action_space: a ``gymnasium.spaces`` description of one action.
      max_episode_steps: steps after which ``step`` truncates an episode.

    Example:
      >>> import jax
      >>> from jaxlearner.anakin.envs import Environment, make
      >>> env = make("Pendulum-v1")
      >>> isinstance(env, Environment)
      True
      >>> state, obs = env.reset(jax.random.key(0))
      >>> state, obs, reward, terminated, truncated, info = env.step(
      ...     state, jax.numpy.zeros(1), jax.random.key(1))
      >>> obs.shape, info["final_obs"].shape
      ((3,), (3,))
    """

    @property
    def observation_space(self) -> gymnasium.spaces.Space: ...

    @property
    def action_space(self) -> gymnasium.spaces.Space: ...

    @property
    def max_episode_steps(self) -> int: ...

    def reset(self, key: jax.Array) -> tuple[EnvState, jax.Array]:
        """Start an episode: ``key -> (state, obs)``."""
        ...

    def step(self, state: EnvState, action: jax.typing.ArrayLike, key: jax.Array) -> StepOutput:
        """One step with automatic reset: see :func:`step_with_auto_reset`."""
        ...


def reset_episode(key: jax.Array, reset_dynamics: ResetDynamicsFn) -> tuple[EnvState, jax.Array]:
    """Start a fresh episode: new dynamics, ``time = 0``, ``episode_return = 0``.

    Args:
      key: one typed PRNG key (``jax.random.key``), shape ``[]``.
      reset_dynamics: ``key -> (dynamics, obs)``, the environment's initial
        state distribution.

    Returns:
      ``(state, obs)``: an :class:`EnvState` and the first observation.

    Raises:
      ValueError: ``key`` is a batch of keys (vmap ``reset`` over them instead).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> reset_dynamics = lambda key: (jnp.zeros(2), jnp.zeros(2))
      >>> state, obs = reset_episode(jax.random.key(0), reset_dynamics)
      >>> int(state.time)
      0
    """
    _check_single_key(key, "reset")
    # Strong dtypes, so a lax.scan carry starting here has the types step returns.
    dynamics, obs = _strongly_typed(reset_dynamics(key))
    state = EnvState(
        dynamics=dynamics,
        time=jnp.zeros((), jnp.int32),
        episode_return=jnp.zeros((), jnp.float32),
    )
    return state, obs


def step_with_auto_reset(
    state: EnvState,
    action: jax.typing.ArrayLike,
    key: jax.Array,
    *,
    step_dynamics: StepDynamicsFn,
    reset_dynamics: ResetDynamicsFn,
    max_episode_steps: int,
) -> StepOutput:
    """One environment step, truncating at a time limit and resetting when done.

    The contract every :class:`Environment` ``step`` follows:

    - ``terminated`` is the environment's terminal condition; ``truncated`` is
      ``state.time + 1 >= max_episode_steps`` (gymnasium's ``TimeLimit``:
      both can be true on the same step).
    - When ``terminated | truncated``, the returned ``state`` and ``obs`` are
      those of a fresh episode drawn with ``key``; otherwise the episode goes
      on. ``reward`` is always the reward of this transition.
    - ``info["final_obs"]``: the observation this transition reached, before
      any reset. It equals ``obs`` while the episode goes on, and is the last
      observation of the finished episode when it ends: the value to bootstrap
      from on truncation.
    - ``info["episode_return"]`` (float32) and ``info["episode_length"]``
      (int32): return and length of the episode up to and including this
      step; on a done step, those of the finished episode (for logging, select
      them with ``terminated | truncated``).

    Args:
      state: the current :class:`EnvState`.
      action: one action, as ``action_space`` describes it.
      key: one typed PRNG key; split into the transition's key and the reset's.
      step_dynamics: ``(dynamics, action, key) -> (dynamics, obs, reward,
        terminated)``, one transition with no time limit and no reset.
      reset_dynamics: ``key -> (dynamics, obs)``, the initial state distribution.
      max_episode_steps: the time limit; static.

    Returns:
      ``(state, obs, reward, terminated, truncated, info)``: ``reward``
      float32 ``[]``; ``terminated``, ``truncated`` bool ``[]``; ``info`` as above.

    Raises:
      TypeError: ``state`` is not an :class:`EnvState`.
      ValueError: ``key`` is a batch of keys.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> reset_dynamics = lambda key: (jnp.zeros(()), jnp.zeros(1))
      >>> def step_dynamics(position, action, key):
      ...     position = position + action
      ...     return position, position[None], jnp.float32(1.0), position > 2
      >>> state, obs = reset_episode(jax.random.key(0), reset_dynamics)
      >>> for _ in range(3):
      ...     state, obs, reward, terminated, truncated, info = step_with_auto_reset(
      ...         state, 1.0, jax.random.key(1), step_dynamics=step_dynamics,
      ...         reset_dynamics=reset_dynamics, max_episode_steps=10)
      >>> bool(terminated), float(obs[0]), float(info["final_obs"][0])
      (True, 0.0, 3.0)
      >>> int(info["episode_length"]), int(state.time)
      (3, 0)
    """
    if not isinstance(state, EnvState):
        raise TypeError(
            f"step expects the EnvState returned by reset or step, got {type(state).__name__}."
        )
    _check_single_key(key, "step")
    step_key, reset_key = jax.random.split(key)
    dynamics, next_obs, reward, terminated = step_dynamics(state.dynamics, action, step_key)
    reward = jnp.asarray(reward, jnp.float32)
    terminated = jnp.asarray(terminated, jnp.bool_)
    time = state.time + 1
    episode_return = state.episode_return + reward
    truncated = time >= max_episode_steps
    done = terminated | truncated

    reset_state, reset_obs = reset_episode(reset_key, reset_dynamics)
    continued = EnvState(dynamics=dynamics, time=time, episode_return=episode_return)
    new_state = _select(done, reset_state, continued)
    obs = _select(done, reset_obs, next_obs)
    info = {"final_obs": next_obs, "episode_return": episode_return, "episode_length": time}
    return new_state, obs, reward, terminated, truncated, info


def box_space(
    low: np.ndarray | float,
    high: np.ndarray | float,
    shape: tuple[int, ...] | None = None,
    dtype: np.typing.DTypeLike = np.float32,
) -> gymnasium.spaces.Box:
    """A ``gymnasium.spaces.Box``, float32 unless told, as gymnasium's classic control builds it.

    Args:
      low: lower bounds, an array of the space's shape or a scalar.
      high: upper bounds, as ``low``.
      shape: the shape when ``low`` and ``high`` are scalars.
      dtype: the element type.

    Returns:
      ``gymnasium.spaces.Box(low, high, shape, dtype)``.

    Example:
      >>> box_space(-2.0, 2.0, (1,))
      Box(-2.0, 2.0, (1,), float32)
    """
    return gymnasium.spaces.Box(low=low, high=high, shape=shape, dtype=dtype)


def discrete_space(n: int) -> gymnasium.spaces.Discrete:
    """A ``gymnasium.spaces.Discrete(n)`` of actions ``0 .. n - 1``.

    Args:
      n: the number of actions.

    Returns:
      ``gymnasium.spaces.Discrete(n)``.

    Example:
      >>> discrete_space(2)
      Discrete(2)
    """
    return gymnasium.spaces.Discrete(n)


def check_max_episode_steps(max_episode_steps: Any) -> None:
    """Raise unless ``max_episode_steps`` is a positive Python int.

    Args:
      max_episode_steps: the value a config received.

    Raises:
      TypeError: not an ``int`` (``bool`` included).
      ValueError: not positive.

    Example:
      >>> check_max_episode_steps(500)
    """
    if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int | np.integer):
        raise TypeError(
            f"max_episode_steps must be an int, got {max_episode_steps!r} "
            f"({type(max_episode_steps).__name__})."
        )
    if max_episode_steps < 1:
        raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}.")


def _select(pred: jax.Array, on_true: PyTree, on_false: PyTree) -> PyTree:
    """Leafwise ``jnp.where(pred, on_true, on_false)`` over two same-structured pytrees."""
    return jax.tree.map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


def _strongly_typed(tree: PyTree) -> PyTree:
    """Each leaf as an array of its canonical dtype, without JAX's weak typing.

    A Python scalar in a state (``time=0``) is weakly typed; ``step`` returns
    it strongly typed, and a ``lax.scan`` carry must keep one type.
    """
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.result_type(x)), tree)


def _check_single_key(key: jax.Array, fn_name: str) -> None:
    """Reject a batch of keys passed where one key is expected, with a hint to vmap."""
    shape = jnp.shape(key)
    typed = jax.dtypes.issubdtype(getattr(key, "dtype", None), jax.dtypes.prng_key)
    if (typed and shape != ()) or (not typed and len(shape) != 1):
        raise ValueError(
            f"{fn_name} expects one PRNG key (jax.random.key(seed)), got a key array of "
            f"shape {shape}; for many environments use jax.vmap(env.{fn_name}) over a "
            "batch of keys."
        )
