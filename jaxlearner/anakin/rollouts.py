"""Rollouts and evaluations of pure-JAX environments, each one ``lax`` loop.

An algorithm's act functions are pure functions of a
:class:`~jaxlearner.ModuleState`, and a pure-JAX environment's ``reset`` and
``step`` are pure functions of arrays, so acting in ``N`` environments for
``T`` steps is a ``lax.scan`` over ``jax.vmap(env.step)``, traceable inside a
larger compiled function (see :mod:`jaxlearner.anakin.train`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import jax
import jax.numpy as jnp

from jaxlearner.algorithms.algorithm import Algorithm, Experience
from jaxlearner.anakin.envs.environment import Environment, EnvState
from jaxlearner.core.state import ModuleState

RolloutFn: TypeAlias = Callable[
    [ModuleState, EnvState, jax.Array, jax.Array],
    tuple[EnvState, jax.Array, Experience, dict[str, jax.Array]],
]
"""``rollout(module_state, env_states, obs, key) -> (env_states, obs, experience, episodes)``."""

EvaluateFn: TypeAlias = Callable[[ModuleState, jax.Array], dict[str, jax.Array]]
"""``evaluate(module_state, key) -> {"return_mean", "return_min", "return_max", "length_mean"}``."""


def make_rollout(
    algorithm: Algorithm, env: Environment, num_envs: int, num_steps: int
) -> RolloutFn:
    """A pure rollout of ``num_steps`` steps of ``num_envs`` environments with ``explore``.

    The environments reset themselves when an episode ends (``SAME_STEP``),
    so every step is a valid transition, and ``next_obs`` is the observation
    the transition reached (the final one when the episode ended), as the
    :class:`~jaxlearner.training.env_runner.EnvRunner` collects from gymnasium.

    Args:
      algorithm: supplies ``explore(module_state, obs [N, ...], key)``.
      env: a pure-JAX environment.
      num_envs: ``N``, environments stepped together (vmapped).
      num_steps: ``T``, steps per environment (a ``lax.scan``).

    Returns:
      ``rollout(module_state, env_states, obs, key) -> (env_states, obs,
      experience, episodes)``: the environments' new states and observations;
      ``experience``, ``[T, N, ...]`` arrays ``obs``, ``actions``, ``rewards``,
      ``terminated``, ``truncated``, ``next_obs``, ``valid`` and the act
      extras, as an algorithm's ``postprocess`` and ``transitions`` read
      them; ``episodes``, statistics of the episodes that ended:
      ``num_episodes`` (int32), ``episode_return_mean`` and
      ``episode_length_mean`` (float32, NaN when none ended).

    Example:
      >>> rollout = make_rollout(algorithm, env, num_envs=8, num_steps=128)  # doctest: +SKIP
      >>> env_states, obs = jax.vmap(env.reset)(jax.random.split(key, 8))    # doctest: +SKIP
      >>> env_states, obs, experience, episodes = jax.jit(rollout)(
      ...     module_state, env_states, obs, key)                             # doctest: +SKIP
    """

    def step(module: ModuleState, carry: tuple, key: jax.Array) -> tuple[tuple, tuple]:
        env_states, obs = carry
        act_key, env_key = jax.random.split(key)
        actions, extras = algorithm.explore(module, obs, act_key)
        env_states, next_obs, rewards, terminated, truncated, info = jax.vmap(env.step)(
            env_states, actions, jax.random.split(env_key, num_envs)
        )
        transition = {
            "obs": obs,
            "actions": actions,
            "rewards": rewards,
            "terminated": terminated,
            "truncated": truncated,
            "next_obs": info["final_obs"],
            "valid": jnp.ones_like(terminated),
            **extras,  # an extras["actions"] (before clipping) is the one to train on
        }
        done = terminated | truncated
        episodes = (done, info["episode_return"], info["episode_length"])
        return (env_states, next_obs), (transition, episodes)

    def rollout(
        module: ModuleState, env_states: EnvState, obs: jax.Array, key: jax.Array
    ) -> tuple[EnvState, jax.Array, Experience, dict[str, jax.Array]]:
        (env_states, obs), (experience, (done, returns, lengths)) = jax.lax.scan(
            lambda carry, k: step(module, carry, k),
            (env_states, obs),
            jax.random.split(key, num_steps),
        )
        count = done.sum(dtype=jnp.int32)
        mean = lambda x: jnp.where(
            count > 0, (x * done).sum() / jnp.maximum(count, 1), jnp.nan
        ).astype(jnp.float32)
        episodes = {
            "num_episodes": count,
            "episode_return_mean": mean(returns),
            "episode_length_mean": mean(lengths.astype(jnp.float32)),
        }
        return env_states, obs, experience, episodes

    return rollout


def make_evaluate(algorithm: Algorithm, env: Environment, num_envs: int) -> EvaluateFn:
    """A pure ``evaluate(module_state, key) -> metrics`` with the deterministic policy.

    Resets ``num_envs`` environments and steps them with
    ``algorithm.exploit`` until each has finished its first episode (a
    ``lax.while_loop``, at most ``env.max_episode_steps`` steps, after which
    every episode has been truncated), as
    :func:`jaxlearner.training.env_runner.evaluate` does with gymnasium.

    Args:
      algorithm: supplies ``exploit(module_state, obs [N, ...], key)``.
      env: a pure-JAX environment.
      num_envs: environments, one episode each.

    Returns:
      ``evaluate(module_state, key) -> {"return_mean", "return_min",
      "return_max", "length_mean"}``, float32 scalars over the episodes.

    Example:
      >>> evaluate = make_evaluate(algorithm, env, num_envs=16)     # doctest: +SKIP
      >>> jax.jit(evaluate)(state.learner.modules["default_policy"], key)  # doctest: +SKIP
    """

    def evaluate(module: ModuleState, key: jax.Array) -> dict[str, jax.Array]:
        reset_key, key = jax.random.split(key)
        env_states, obs = jax.vmap(env.reset)(jax.random.split(reset_key, num_envs))
        zeros = jnp.zeros(num_envs, jnp.float32)
        finished = jnp.zeros(num_envs, jnp.bool_)

        def unfinished(carry: tuple) -> jax.Array:
            *_, finished, _, _, time = carry
            return ~jnp.all(finished) & (time < env.max_episode_steps)

        def step(carry: tuple) -> tuple:
            env_states, obs, key, finished, returns, lengths, time = carry
            key, act_key, env_key = jax.random.split(key, 3)
            actions, _ = algorithm.exploit(module, obs, act_key)
            env_states, obs, _, terminated, truncated, info = jax.vmap(env.step)(
                env_states, actions, jax.random.split(env_key, num_envs)
            )
            first = (terminated | truncated) & ~finished
            returns = jnp.where(first, info["episode_return"], returns)
            lengths = jnp.where(first, info["episode_length"].astype(jnp.float32), lengths)
            return env_states, obs, key, finished | first, returns, lengths, time + 1

        carry = (env_states, obs, key, finished, zeros, zeros, jnp.zeros((), jnp.int32))
        *_, returns, lengths, _ = jax.lax.while_loop(unfinished, step, carry)
        return {
            "return_mean": returns.mean(),
            "return_min": returns.min(),
            "return_max": returns.max(),
            "length_mean": lengths.mean(),
        }

    return evaluate
