"""Gymnasium vector environments from an id, an instance, a factory or a vector env.

What :class:`~jaxlearner.training.env_runner.EnvRunner` steps, and what ``jaxlearner record``
records from. Environments created here reset a finished sub-environment in the same step
(gymnasium's ``SAME_STEP`` autoreset mode).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias

import gymnasium as gym

from jaxlearner.training.atari import make_env

EnvLike: TypeAlias = str | gym.Env | gym.vector.VectorEnv | Callable[[], gym.Env]
"""A gymnasium id, an env instance, a vector env, or a factory returning an env."""

VECTORIZATION: tuple[str, ...] = ("sync", "async")


def make_vector_env(
    env: EnvLike,
    num_envs: int = 1,
    vectorization: Literal["sync", "async"] = "sync",
    env_config: Mapping[str, Any] | None = None,
) -> gym.vector.VectorEnv:
    """A gymnasium vector env from an id, an instance, a factory or a vector env.

    Args:
      env: a registered id (``"CartPole-v1"``; ``ALE/`` ids get the DeepMind
        preprocessing of :mod:`jaxlearner.training.atari`), an ``Env`` instance (only with
        ``num_envs=1``), a factory ``() -> Env``, or a ``VectorEnv`` (used as is).
      num_envs: sub-environments.
      vectorization: ``"sync"`` (one process) or ``"async"`` (one spawned
        process per sub-environment).
      env_config: keyword arguments for ``gymnasium.make`` or the factory.

    Returns:
      The vector env; those created here use the ``SAME_STEP`` autoreset mode.

    Raises:
      ValueError: on a bad ``num_envs`` or ``vectorization``, or an instance
        with ``num_envs > 1``.
      gymnasium.error.Error: for an unknown id (gymnasium's own message).
      ImportError: for an ``ALE/`` id without ale-py (naming the extra).

    Example:
      >>> envs = make_vector_env("CartPole-v1", num_envs=4)
      >>> envs.num_envs
      4
    """
    if isinstance(env, gym.vector.VectorEnv):
        return env
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int; got {num_envs!r}.")
    if vectorization not in VECTORIZATION:
        raise ValueError(f"vectorization must be one of {VECTORIZATION}; got {vectorization!r}.")
    config = dict(env_config or {})
    if isinstance(env, str):
        factory: Callable[[], gym.Env] = lambda: make_env(env, **config)
        factory()  # an unknown id raises gymnasium's error, naming the id, here
    elif isinstance(env, gym.Env):
        if num_envs != 1:
            raise ValueError(
                f"An env instance can be vectorized only with num_envs=1 (got {num_envs}); "
                "pass an id or a factory (lambda: MyEnv()) for several copies."
            )
        factory = lambda: env
    elif callable(env):
        factory = lambda: env(**config)
    else:
        raise TypeError(
            "env must be a gymnasium id, an Env, a VectorEnv or a factory () -> Env; got "
            f"{type(env).__name__}."
        )
    mode = gym.vector.AutoresetMode.SAME_STEP
    if vectorization == "sync":
        return gym.vector.SyncVectorEnv([factory] * num_envs, autoreset_mode=mode)
    # JAX is multithreaded: forking it can deadlock, so workers are spawned.
    return gym.vector.AsyncVectorEnv([factory] * num_envs, autoreset_mode=mode, context="spawn")
