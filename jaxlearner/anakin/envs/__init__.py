"""Pure-JAX environments behind one functional interface, with automatic reset.

``reset(key) -> (state, obs)`` and ``step(state, action, key) -> (state, obs,
reward, terminated, truncated, info)`` are pure, so a rollout is one
``lax.scan`` that vmaps over environments and seeds. When an episode ends,
``step`` returns the first observation of the next one and keeps the last
in ``info["final_obs"]`` (see :func:`step_with_auto_reset`).

Built in: gymnasium's ``CartPole-v1`` and ``Pendulum-v1``, matched to
gymnasium step for step. Any gymnax environment fits the same interface
through :mod:`jaxlearner.anakin.envs.gymnax` (gymnax is an optional extra).

Example:
  >>> import jax
  >>> from jaxlearner.anakin.envs import make
  >>> env = make("CartPole-v1")
  >>> env.observation_space.shape, int(env.action_space.n)
  ((4,), 2)
  >>> states, obs = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), 8))
  >>> obs.shape
  (8, 4)
"""

from __future__ import annotations

from typing import Any

from jaxlearner.anakin.envs.cartpole import CartPole, CartPoleState
from jaxlearner.anakin.envs.environment import (
    Environment,
    EnvState,
    StepInfo,
    StepOutput,
    reset_episode,
    step_with_auto_reset,
)
from jaxlearner.anakin.envs.gymnax import is_gymnax, make_gymnax
from jaxlearner.anakin.envs.pendulum import Pendulum, PendulumState
from jaxlearner.errors import ReadableKeyError

_REGISTRY: dict[str, type[CartPole] | type[Pendulum]] = {
    "CartPole-v1": CartPole,
    "Pendulum-v1": Pendulum,
}


def registered_ids() -> tuple[str, ...]:
    """The environment ids :func:`make` knows, sorted.

    Example:
      >>> registered_ids()
      ('CartPole-v1', 'Pendulum-v1')
    """
    return tuple(sorted(_REGISTRY))


def make(env_id: str, **kwargs: Any) -> Environment:
    """Build a registered environment by its gymnasium id, or a gymnax one by ``"gymnax:NAME"``.

    Args:
      env_id: ``"CartPole-v1"`` or ``"Pendulum-v1"``; or ``"gymnax:NAME"`` for gymnax's
        environment ``NAME`` (:func:`~jaxlearner.anakin.envs.gymnax.make_gymnax`).
      **kwargs: the environment's config fields, as gymnasium's ``make``
        keywords: ``max_episode_steps`` for both, ``sutton_barto_reward`` for
        CartPole, ``gravity`` (gymnasium's ``g``) for Pendulum; for gymnax,
        ``max_episode_steps`` and ``gymnax.make``'s keywords.

    Returns:
      The :class:`Environment`.

    Raises:
      TypeError: ``env_id`` is not a string, or a keyword is unknown or mistyped.
      KeyError: ``env_id`` is not registered; the message lists the ids that are.
      ValueError: an unknown gymnax name; the message lists gymnax's.
      ImportError: a gymnax id without gymnax installed.

    Example:
      >>> make("Pendulum-v1", gravity=9.81)
      Pendulum(max_episode_steps=200, gravity=9.81)
    """
    if not isinstance(env_id, str):
        raise TypeError(f"env_id must be a str, got {env_id!r} ({type(env_id).__name__}).")
    if is_gymnax(env_id):
        return make_gymnax(env_id, **kwargs)
    if env_id not in _REGISTRY:
        raise ReadableKeyError(
            f"Unknown environment id {env_id!r}. Available: {', '.join(registered_ids())}. "
            "For a gymnax environment: gymnax:NAME."
        )
    return _REGISTRY[env_id](**kwargs)


__all__ = [
    "CartPole",
    "CartPoleState",
    "EnvState",
    "Environment",
    "Pendulum",
    "PendulumState",
    "StepInfo",
    "StepOutput",
    "make",
    "registered_ids",
    "reset_episode",
    "step_with_auto_reset",
]
