"""Rollouts and evaluations of pure-JAX environments, each one ``lax`` loop.

An algorithm's act functions are pure functions of a
:class:`~jaxlearner.ModuleState`, and a pure-JAX environment's ``reset`` and
``step`` are pure functions of arrays, so acting in ``N`` environments for
``T`` steps is a ``lax.scan`` over ``jax.vmap(env.step)``, traceable inside a
larger compiled function (see :mod:`jaxlearner.anakin.train`).

A recurrent algorithm (its act functions are
:class:`~jaxlearner.algorithms.algorithm.RecurrentAct` values, e.g. PPO with
``use_lstm``) also carries a :class:`Memory`: each environment's recurrent
state and whether its next step starts an episode, where the act function
resets the state. :func:`make_recurrent_rollout` takes and returns it; the
evaluation keeps its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, TypeAlias

import jax
import jax.numpy as jnp

from jaxlearner.algorithms.algorithm import Algorithm, Experience, RecurrentAct
from jaxlearner.anakin.envs.environment import Environment, EnvState
from jaxlearner.core.packing import packed_scan
from jaxlearner.core.state import ModuleState

ROLLOUT_UNROLL = 4
"""Environment steps per iteration of the rollout's ``lax.scan`` on CUDA GPUs (read when traced).

There XLA runs the rollout's loop from the host: each iteration launches its
kernels as one CUDA graph and reads the loop's predicate back, about 11 us of
idle GPU per iteration at purejaxrl's CartPole config. Four steps per iteration
made Anakin 1.3x faster on an H200 (benchmarks/README.md, "Fourth sitting: the
GAE unroll measured, then the rollout's loop unrolled").
On other platforms the scan keeps one step per iteration: on the CPU, where a
loop iteration costs no round trip, unrolling only lengthened the program
(4 steps: 3.5 -> 4.3 s a call). The choice is made per platform when the
program is lowered (``lax.platform_dependent``); the CPU program is unchanged.
"""

RolloutFn: TypeAlias = Callable[
    [ModuleState, EnvState, jax.Array, jax.Array],
    tuple[EnvState, jax.Array, Experience, dict[str, jax.Array]],
]
"""``rollout(module_state, env_states, obs, key) -> (env_states, obs, experience, episodes)``."""


class Memory(NamedTuple):
    """A recurrent policy's state in ``N`` environments.

    Attributes:
      carry: the act function's carry, leaves ``[N, ...]``.
      is_first: ``[N]`` bool, the next step is an episode's first (the carry is reset).
    """

    carry: Any
    is_first: jax.Array


RecurrentRolloutFn: TypeAlias = Callable[
    [ModuleState, EnvState, jax.Array, Memory, jax.Array],
    tuple[EnvState, jax.Array, Memory, Experience, dict[str, jax.Array]],
]
"""``rollout(module_state, env_states, obs, memory, key) -> (env_states, obs, memory,
experience, episodes)``."""

EvaluateFn: TypeAlias = Callable[[ModuleState, jax.Array], dict[str, jax.Array]]
"""``evaluate(module_state, key) -> {"return_mean", "return_min", "return_max", "length_mean"}``."""


def initial_memory(algorithm: Algorithm, num_envs: int) -> Memory | None:
    """A recurrent algorithm's :class:`Memory` before any step (every episode starts);
    ``None`` for a feed-forward one."""
    if not isinstance(algorithm.explore, RecurrentAct):
        return None
    return Memory(algorithm.explore.initial_carry(num_envs), jnp.ones(num_envs, jnp.bool_))


def _act(
    act: Any, module: ModuleState, obs: jax.Array, memory: Memory | None, key: jax.Array
) -> tuple[jax.Array, Any, Any]:
    """``(actions, extras, carry)`` of a feed-forward (``memory=None``) or recurrent act."""
    if memory is None:
        return (*act(module, obs, key), None)
    return act(module, memory.carry, obs, memory.is_first, key)


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

    if isinstance(algorithm.explore, RecurrentAct):
        raise TypeError(
            f"Algorithm {algorithm.name!r} is recurrent; its rollout carries a Memory: use "
            "make_recurrent_rollout."
        )
    rollout = _make_rollout(algorithm, env, num_envs, num_steps)

    def stateless(
        module: ModuleState, env_states: EnvState, obs: jax.Array, key: jax.Array
    ) -> tuple[EnvState, jax.Array, Experience, dict[str, jax.Array]]:
        env_states, obs, _, experience, episodes = rollout(module, env_states, obs, None, key)
        return env_states, obs, experience, episodes

    return stateless


def make_recurrent_rollout(
    algorithm: Algorithm, env: Environment, num_envs: int, num_steps: int
) -> RecurrentRolloutFn:
    """:func:`make_rollout` for a recurrent algorithm: the :class:`Memory` goes in and out.

    Each step acts with ``explore(module, carry, obs, is_first, key)`` and
    keeps the carry it returns; ``is_first`` is true after an episode ended
    (the environment has already reset). The act extras (``state_in``,
    ``is_first``) join the experience, for ``postprocess``.

    Returns:
      ``rollout(module_state, env_states, obs, memory, key) -> (env_states,
      obs, memory, experience, episodes)``; start from :func:`initial_memory`.

    Raises:
      TypeError: for a feed-forward algorithm (use :func:`make_rollout`).

    Example:
      >>> rollout = make_recurrent_rollout(lstm_ppo, env, num_envs=8, num_steps=128)
      ... # doctest: +SKIP
      >>> env_states, obs, memory, experience, episodes = jax.jit(rollout)(
      ...     module_state, env_states, obs, initial_memory(lstm_ppo, 8), key)  # doctest: +SKIP
    """
    if not isinstance(algorithm.explore, RecurrentAct):
        raise TypeError(f"Algorithm {algorithm.name!r} is not recurrent; use make_rollout.")
    return _make_rollout(algorithm, env, num_envs, num_steps)


def _make_rollout(
    algorithm: Algorithm, env: Environment, num_envs: int, num_steps: int
) -> Callable[..., tuple[EnvState, jax.Array, Any, Experience, dict[str, jax.Array]]]:
    """The rollout with an optional memory: ``None`` in and out for feed-forward acts."""

    def step(module: ModuleState, carry: tuple, key: jax.Array) -> tuple[tuple, tuple]:
        env_states, obs, memory = carry
        act_key, env_key = jax.random.split(key)
        actions, extras, recurrent_carry = _act(algorithm.explore, module, obs, memory, act_key)
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
            **extras,  # an extras["actions"] (before clipping) is the one to train on
        }
        # The environment reset where an episode ended: its next step is the next one's first.
        done = terminated | truncated
        memory = None if memory is None else Memory(recurrent_carry, done)
        return (env_states, next_obs, memory), (
            transition,
            info["episode_return"],
            info["episode_length"],
        )

    # Traced once: the loop's two platform branches below reuse this trace.
    traced_step = jax.jit(step)

    def rollout(
        module: ModuleState, env_states: EnvState, obs: jax.Array, memory: Any, key: jax.Array
    ) -> tuple[EnvState, jax.Array, Any, Experience, dict[str, jax.Array]]:
        # One stored array per shape and dtype, not one per output (core/packing.py).
        scan = functools.partial(packed_scan, lambda carry, k: traced_step(module, carry, k))
        keys = jax.random.split(key, num_steps)
        carry = (env_states, obs, memory)
        (env_states, obs, memory), (experience, returns, lengths) = jax.lax.platform_dependent(
            carry, keys, cuda=functools.partial(scan, unroll=ROLLOUT_UNROLL), default=scan
        )
        # Derived after the loop rather than stored by each step: on an accelerator every
        # array a step stores is one more kernel launch per step (benchmarks/hlo_kernels.py).
        done = experience["terminated"] | experience["truncated"]
        experience = {**experience, "valid": jnp.ones_like(done)}
        count = done.sum(dtype=jnp.int32)
        mean = lambda x: jnp.where(
            count > 0, (x * done).sum() / jnp.maximum(count, 1), jnp.nan
        ).astype(jnp.float32)
        episodes = {
            "num_episodes": count,
            "episode_return_mean": mean(returns),
            "episode_length_mean": mean(lengths.astype(jnp.float32)),
        }
        return env_states, obs, memory, experience, episodes

    return rollout


def make_evaluate(algorithm: Algorithm, env: Environment, num_envs: int) -> EvaluateFn:
    """A pure ``evaluate(module_state, key) -> metrics`` with the deterministic policy.

    Resets ``num_envs`` environments and steps them with
    ``algorithm.exploit`` until each has finished its first episode (a
    ``lax.while_loop``, at most ``env.max_episode_steps`` steps, after which
    every episode has been truncated), as
    :func:`jaxlearner.training.env_runner.evaluate` does with gymnasium.

    Args:
      algorithm: supplies ``exploit(module_state, obs [N, ...], key)`` (or a
        recurrent one, whose state starts afresh in each environment).
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
        memory = initial_memory(algorithm, num_envs)

        def unfinished(carry: tuple) -> jax.Array:
            *_, finished, _, _, time, _ = carry
            return ~jnp.all(finished) & (time < env.max_episode_steps)

        def step(carry: tuple) -> tuple:
            env_states, obs, key, finished, returns, lengths, time, memory = carry
            key, act_key, env_key = jax.random.split(key, 3)
            actions, _, recurrent_carry = _act(algorithm.exploit, module, obs, memory, act_key)
            env_states, obs, _, terminated, truncated, info = jax.vmap(env.step)(
                env_states, actions, jax.random.split(env_key, num_envs)
            )
            done = terminated | truncated
            memory = None if memory is None else Memory(recurrent_carry, done)
            first = done & ~finished
            returns = jnp.where(first, info["episode_return"], returns)
            lengths = jnp.where(first, info["episode_length"].astype(jnp.float32), lengths)
            return env_states, obs, key, finished | first, returns, lengths, time + 1, memory

        time = jnp.zeros((), jnp.int32)
        carry = (env_states, obs, key, finished, zeros, zeros, time, memory)
        *_, returns, lengths, _, _ = jax.lax.while_loop(unfinished, step, carry)
        return {
            "return_mean": returns.mean(),
            "return_min": returns.min(),
            "return_max": returns.max(),
            "length_mean": lengths.mean(),
        }

    return evaluate
