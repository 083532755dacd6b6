"""Any gymnax environment behind the :class:`~jaxlearner.anakin.envs.Environment` interface.

gymnax (https://github.com/RobertTLange/gymnax) is an optional extra: this
module imports without it, and :func:`make_gymnax` asks for it only when
called. :func:`from_gymnax` wraps an environment object you already have.

The adapter calls gymnax's ``reset_env`` and ``step_env`` (no auto-reset of
their own) and leaves the time limit and the reset to
:func:`~jaxlearner.anakin.envs.step_with_auto_reset`, so ``terminated`` and
``truncated`` come apart exactly: gymnax runs with a ``max_steps_in_episode``
it never reaches (older gymnax folds the time limit into ``done``), and the
wrapper truncates at ``max_episode_steps``, by default the environment's own
``params.max_steps_in_episode``. gymnax's per-step ``info`` is not passed on.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, final

import jax
import jax.numpy as jnp
import numpy as np

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

_UNREACHABLE_STEPS = int(np.iinfo(np.int32).max)


@final
@dataclasses.dataclass(frozen=True, eq=False)
class GymnaxEnvironment:
    """A gymnax environment as a jaxlearner :class:`~jaxlearner.anakin.envs.Environment`.

    Build one with :func:`from_gymnax` or :func:`make_gymnax`. The state's
    ``dynamics`` is gymnax's own ``EnvState``.

    Attributes:
      env: the gymnax environment object (``gymnax.environments.environment.Environment``).
      params: its ``EnvParams``, as given (the time limit included).
      max_episode_steps: the time limit ``step`` truncates at; static.

    Example:
      >>> env = make_gymnax("CartPole-v1")  # doctest: +SKIP
      >>> state, obs = env.reset(jax.random.key(0))  # doctest: +SKIP
    """

    env: Any
    params: Any
    max_episode_steps: int

    def __post_init__(self) -> None:
        for method in ("reset_env", "step_env", "observation_space", "action_space"):
            if not callable(getattr(self.env, method, None)):
                raise TypeError(
                    f"env must be a gymnax environment with a {method} method, got "
                    f"{type(self.env).__name__}."
                )
        check_max_episode_steps(self.max_episode_steps)

    @property
    def observation_space(self) -> gymnasium.spaces.Space:
        """gymnax's observation space, as a ``gymnasium.spaces`` object."""
        return to_gymnasium_space(self.env.observation_space(self.params))

    @property
    def action_space(self) -> gymnasium.spaces.Space:
        """gymnax's action space, as a ``gymnasium.spaces`` object."""
        return to_gymnasium_space(self.env.action_space(self.params))

    def reset(self, key: jax.Array) -> tuple[EnvState, jax.Array]:
        """Start an episode with gymnax's ``reset_env``: ``key -> (state, obs)``."""
        return reset_episode(key, self._reset_dynamics)

    def step(self, state: EnvState, action: jax.typing.ArrayLike, key: jax.Array) -> StepOutput:
        """One gymnax ``step_env`` with jaxlearner's truncation and automatic reset.

        Args:
          state: the :class:`~jaxlearner.anakin.envs.EnvState` from ``reset`` or ``step``.
          action: one action of ``action_space``.
          key: a typed PRNG key, split for the transition and the reset.

        Returns:
          ``(state, obs, reward, terminated, truncated, info)``, as
          :func:`~jaxlearner.anakin.envs.step_with_auto_reset` describes.
        """
        return step_with_auto_reset(
            state,
            action,
            key,
            step_dynamics=self._step_dynamics,
            reset_dynamics=self._reset_dynamics,
            max_episode_steps=self.max_episode_steps,
        )

    def _untimed_params(self) -> Any:
        """The params with a time limit gymnax never reaches: truncation is the wrapper's."""
        if hasattr(self.params, "max_steps_in_episode"):
            return dataclasses.replace(self.params, max_steps_in_episode=_UNREACHABLE_STEPS)
        return self.params

    def _reset_dynamics(self, key: jax.Array) -> tuple[Any, jax.Array]:
        obs, gymnax_state = self.env.reset_env(key, self._untimed_params())
        return gymnax_state, obs

    def _step_dynamics(
        self, gymnax_state: Any, action: jax.typing.ArrayLike, key: jax.Array
    ) -> tuple[Any, jax.Array, jax.Array, jax.Array]:
        obs, gymnax_state, reward, done, _ = self.env.step_env(
            key, gymnax_state, action, self._untimed_params()
        )
        return gymnax_state, obs, jnp.asarray(reward, jnp.float32), jnp.asarray(done, jnp.bool_)


def from_gymnax(
    env: Any, params: Any = None, *, max_episode_steps: int | None = None
) -> GymnaxEnvironment:
    """Wrap a gymnax environment object.

    Args:
      env: a gymnax environment (what ``gymnax.make`` returns first).
      params: its ``EnvParams``; ``None`` uses ``env.default_params``.
      max_episode_steps: the time limit; ``None`` uses
        ``params.max_steps_in_episode``.

    Returns:
      A :class:`GymnaxEnvironment`.

    Raises:
      TypeError: ``env`` is not a gymnax environment.
      ValueError: no time limit given and ``params`` has none.

    Example:
      >>> import gymnax  # doctest: +SKIP
      >>> env = from_gymnax(*gymnax.make("Acrobot-v1"))  # doctest: +SKIP
    """
    if params is None:
        params = getattr(env, "default_params", None)
    if max_episode_steps is None:
        max_episode_steps = getattr(params, "max_steps_in_episode", None)
        if max_episode_steps is None:
            raise ValueError(
                f"{type(params).__name__} has no max_steps_in_episode; pass max_episode_steps."
            )
        max_episode_steps = int(max_episode_steps)
    return GymnaxEnvironment(env=env, params=params, max_episode_steps=max_episode_steps)


PREFIX = "gymnax:"
"""The prefix of a gymnax id where a gymnasium id could stand (``"gymnax:Breakout-MinAtar"``):
``jaxlearner train ppo --env gymnax:Breakout-MinAtar`` trains it in one compiled program."""


def is_gymnax(env_id: object) -> bool:
    """Whether ``env_id`` names a gymnax environment (starts with :data:`PREFIX`).

    Example:
      >>> is_gymnax("gymnax:Breakout-MinAtar"), is_gymnax("CartPole-v1")
      (True, False)
    """
    return isinstance(env_id, str) and env_id.startswith(PREFIX)


def gymnax_names() -> tuple[str, ...]:
    """The environment names gymnax registers (``gymnax.registered_envs``), as gymnax lists them.

    Raises:
      ImportError: gymnax is not installed; the message names ``jaxlearner[gymnax]``.

    Example:
      >>> "Breakout-MinAtar" in gymnax_names()  # doctest: +SKIP
      True
    """
    return tuple(_gymnax().registered_envs)


def check_gymnax_id(env_id: str) -> str:
    """The gymnax name in ``"gymnax:NAME"``, checked against gymnax's registry.

    Args:
      env_id: ``"gymnax:NAME"``.

    Returns:
      ``NAME``.

    Raises:
      ImportError: gymnax is not installed (one line naming ``jaxlearner[gymnax]``).
      ValueError: ``NAME`` is not a gymnax environment; the message lists those that are.

    Example:
      >>> check_gymnax_id("gymnax:Breakout-MinAtar")  # doctest: +SKIP
      'Breakout-MinAtar'
    """
    if not is_gymnax(env_id):
        raise ValueError(f"A gymnax id starts with {PREFIX!r}; got {env_id!r}.")
    name = env_id[len(PREFIX) :]
    names = gymnax_names()
    if name not in names:
        raise ValueError(
            f"{env_id}: gymnax has no environment {name!r}; gymnax's environments: "
            f"{', '.join(names)} (as gymnax:NAME)."
        )
    return name


def make_gymnax(
    env_id: str, *, max_episode_steps: int | None = None, **kwargs: Any
) -> GymnaxEnvironment:
    """``gymnax.make(env_id, **kwargs)``, wrapped by :func:`from_gymnax`.

    Args:
      env_id: a gymnax id, e.g. ``"Acrobot-v1"`` (``gymnax.registered_envs``), with or
        without the ``"gymnax:"`` prefix.
      max_episode_steps: the time limit; ``None`` uses gymnax's.
      **kwargs: passed to ``gymnax.make``.

    Returns:
      A :class:`GymnaxEnvironment`.

    Raises:
      ImportError: gymnax is not installed (the message names ``jaxlearner[gymnax]``).
      ValueError: an unknown name; the message lists gymnax's environments.

    Example:
      >>> env = make_gymnax("CartPole-v1")  # doctest: +SKIP
      >>> env.max_episode_steps  # doctest: +SKIP
      500
    """
    name = check_gymnax_id(env_id if is_gymnax(env_id) else PREFIX + env_id)
    env, params = _gymnax().make(name, **kwargs)
    return from_gymnax(env, params, max_episode_steps=max_episode_steps)


def _gymnax() -> Any:
    """The gymnax module, or an ``ImportError`` that says how to install it."""
    try:
        import gymnax
    except ImportError as error:
        raise ImportError(
            "gymnax environments need gymnax, which is not installed: "
            'pip install "jaxlearner[gymnax]"'
        ) from error
    return gymnax


def to_gymnasium_space(space: Any) -> gymnasium.spaces.Space:
    """Convert a gymnax ``Discrete`` or ``Box`` space to its gymnasium equivalent.

    Args:
      space: a gymnax space (``gymnax.environments.spaces``).

    Returns:
      ``gymnasium.spaces.Discrete(n)``, or a ``gymnasium.spaces.Box`` with
      gymnax's bounds broadcast to its shape, in its dtype.

    Raises:
      TypeError: any other kind of space.

    Example:
      >>> to_gymnasium_space(env.action_space(params))  # doctest: +SKIP
      Discrete(2)
    """
    kind = type(space).__name__
    if kind == "Discrete":
        return discrete_space(int(space.n))
    if kind == "Box":
        dtype = np.dtype(space.dtype)
        low = np.broadcast_to(np.asarray(space.low, dtype), space.shape)
        high = np.broadcast_to(np.asarray(space.high, dtype), space.shape)
        return box_space(low, high, tuple(space.shape), dtype)
    raise TypeError(f"Only gymnax Discrete and Box spaces convert to gymnasium spaces, got {kind}.")
