"""Rollouts from gymnasium vector environments with a jitted policy.

The :class:`EnvRunner` steps a ``gymnasium.vector.VectorEnv`` with a pure
policy ``policy(params, obs, key) -> (actions, extras)``, jitted once. Per step
the observations go to the device and the actions come back (the environment
lives on the host); everything else the policy returns (log-probabilities,
values) stays on the device until the rollout ends, and is stacked once per rollout
(:func:`~jaxlearner.training.rollout.stack_steps`).

Autoreset: gymnasium 1.x vector envs reset a finished sub-environment either
in the same step (``SAME_STEP``: the returned observation is already the next
episode's first, the finished episode's last observation is in
``infos["final_obs"]``) or on the next step (``NEXT_STEP``: the step after a
done ignores the action and only resets). The runner reads
``envs.metadata["autoreset_mode"]`` and handles both: ``next_obs`` is always
the true next observation of the transition (the final observation when it
ended the episode), and ``valid`` is ``False`` for ``NEXT_STEP``'s reset-only
steps, which must not be trained on. Environments the runner creates use
``SAME_STEP``, so every collected step is valid.

Recurrent policies: a :class:`~jaxlearner.algorithms.algorithm.RecurrentAct`
(PPO with ``use_lstm``) is called ``act(params, carry, obs, is_first, key) ->
(actions, extras, carry)``. The runner keeps the carry of its ``N``
sub-environments on the device from step to step and from one ``sample`` to
the next (starting from ``initial_carry(N)``), and ``is_first [N]``: true at
the first step of every episode (after :meth:`EnvRunner.reset`, after a
``SAME_STEP`` done, after a ``NEXT_STEP`` reset-only step), where the policy
zeroes that environment's carry. Both are part of :meth:`EnvRunner.get_state`.

Atari: for an ``ALE/...`` id the rollout's ``rewards`` and ``terminated`` are what the
agent learns from (:class:`~jaxlearner.training.atari.AtariSignals`: rewards clipped to
their sign, a lost life terminates), while the episode returns and lengths are the whole
game's.

This module and :mod:`jaxlearner.algorithms.networks.spaces` are where gymnasium enters.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias, final

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.algorithms.algorithm import RecurrentAct
from jaxlearner.training.atari import AtariSignals, is_atari
from jaxlearner.training.env_state import (
    capture_layers,
    decode_array,
    encode_array,
    restore_layers,
)
from jaxlearner.training.evaluation import EVAL_BLOCK, episode_results, first_episodes
from jaxlearner.training.rollout import HOST_COLUMNS, Rollout, stack_steps
from jaxlearner.training.vector_env import EnvLike, make_vector_env
from jaxlearner.types import Params

Policy: TypeAlias = Callable[[Params, jax.Array, jax.Array], tuple[jax.Array, Mapping[str, Any]]]
"""``policy(params, obs [N, ...], key) -> (actions [N, ...], extras {name: [N, ...]})``,
or a :class:`~jaxlearner.algorithms.algorithm.RecurrentAct`."""

EVAL_KEY_BLOCK = 32
"""Steps per key split in :func:`evaluate`: the key stream of rollouts of 32 steps."""


@final
class EnvRunner:
    """Collects rollouts of a policy from a gymnasium vector environment.

    Args:
      env: see :func:`make_vector_env`.
      num_envs: sub-environments.
      vectorization: ``"sync"`` or ``"async"``.
      env_config: keyword arguments for ``gymnasium.make`` or the factory.
      seed: seeds the first reset.

    Example:
      >>> runner = EnvRunner("CartPole-v1", num_envs=2, seed=0)
      >>> def random_policy(params, obs, key):
      ...     return jax.random.randint(key, obs.shape[:1], 0, 2), {}
      >>> rollout = runner.sample(random_policy, None, 8, jax.random.key(0))
      >>> rollout.obs.shape
      (8, 2, 4)
    """

    def __init__(
        self,
        env: EnvLike,
        *,
        num_envs: int = 1,
        vectorization: Literal["sync", "async"] = "sync",
        env_config: Mapping[str, Any] | None = None,
        seed: int = 0,
    ) -> None:
        self._envs = make_vector_env(env, num_envs, vectorization, env_config)
        mode = self._envs.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
        self._mode = gym.vector.AutoresetMode(mode)
        if self._mode == gym.vector.AutoresetMode.DISABLED:
            raise ValueError(
                "The vector env's autoreset_mode is DISABLED; EnvRunner needs NEXT_STEP or "
                "SAME_STEP so that finished sub-environments reset."
            )
        self._policies: dict[tuple[int, str, bool], Callable[..., Any]] = {}
        # ALE games: clipped rewards and life losses for learning (see training/atari.py).
        self._signals = AtariSignals() if is_atari(env) else None
        self.reset(seed)

    def reset(self, seed: int | None = None) -> None:
        """Resets every sub-environment and the episode counters."""
        obs, infos = self._envs.reset(seed=seed)
        self._obs = _as_obs(obs)
        if self._signals is not None:
            self._signals.reset(infos)
        n = self._envs.num_envs
        self._resetting = np.zeros(n, bool)  # NEXT_STEP: this env's next step only resets
        self._returns = np.zeros(n, np.float64)
        self._lengths = np.zeros(n, np.int64)
        self._first = np.ones(n, bool)  # the next step is an episode's first
        self._carry: Any = None  # a recurrent policy's state, made at its first sample
        self._saved_carry: list[np.ndarray] | None = None  # from set_state, until then

    @property
    def envs(self) -> gym.vector.VectorEnv:
        """The underlying vector env."""
        return self._envs

    @property
    def num_envs(self) -> int:
        """Sub-environments stepped together."""
        return int(self._envs.num_envs)

    @property
    def observation_space(self) -> gym.Space:
        """One sub-environment's observation space."""
        return self._envs.single_observation_space

    @property
    def action_space(self) -> gym.Space:
        """One sub-environment's action space."""
        return self._envs.single_action_space

    @property
    def observations(self) -> np.ndarray:
        """``[N, ...]`` the observations the next step acts in (host arrays)."""
        return self._obs

    @property
    def autoreset_mode(self) -> gym.vector.AutoresetMode:
        """``SAME_STEP`` or ``NEXT_STEP``."""
        return self._mode

    def _recurrent_carry(self, policy: RecurrentAct) -> Any:
        """The carry to act with: kept, restored by :meth:`set_state`, or the initial one."""
        if self._carry is not None:
            return self._carry
        initial = policy.initial_carry(self.num_envs)
        if self._saved_carry is None:
            return initial
        leaves, treedef = jax.tree.flatten(initial)
        saved = self._saved_carry
        if [np.shape(x) for x in saved] != [np.shape(x) for x in leaves]:
            raise ValueError(
                f"The runner's saved recurrent state has shapes {[np.shape(x) for x in saved]}; "
                f"this policy's carry has {[np.shape(x) for x in leaves]}."
            )
        self._saved_carry = None
        return jax.tree.unflatten(treedef, [jnp.asarray(x) for x in saved])

    def _compiled(self, policy: Policy, impl: Any, actions_only: bool) -> Callable[..., Any]:
        """``policy`` jitted to take its key as key data (a host array, indexed for free),
        wrapped back with ``impl`` (``None``: raw ``uint32`` keys); compiled once per policy.
        A recurrent policy keeps its signature (carry and ``is_first`` before the key)."""
        cache_key = (id(policy), str(impl), actions_only)
        if cache_key not in self._policies:

            def wrap(key_data: jax.Array) -> jax.Array:
                return key_data if impl is None else jax.random.wrap_key_data(key_data, impl=impl)

            if isinstance(policy, RecurrentAct):

                def act(params: Params, carry: Any, obs: Any, first: Any, key_data: Any) -> Any:
                    return policy(params, carry, obs, first, wrap(key_data))

            else:

                def act(params: Params, obs: jax.Array, key_data: jax.Array) -> Any:
                    actions, extras = policy(params, obs, wrap(key_data))
                    return actions if actions_only else (actions, extras)

            self._policies[cache_key] = jax.jit(act)
        return self._policies[cache_key]

    def sample(self, policy: Policy, params: Params, num_steps: int, key: jax.Array) -> Rollout:
        """Steps all sub-environments ``num_steps`` times with ``policy``.

        Args:
          policy: ``policy(params, obs [N, ...], key) -> (actions, extras)``,
            pure, or a :class:`~jaxlearner.algorithms.algorithm.RecurrentAct`
            (whose carry the runner keeps); jitted once per policy object.
          params: passed to the policy (e.g. a module's params).
          num_steps: steps ``T`` per sub-environment.
          key: split once per step.

        Returns:
          A :class:`Rollout` of ``[T, N]`` arrays.
        """
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
            raise ValueError(f"num_steps must be a positive int; got {num_steps!r}.")
        # The keys as one host array: indexing a device array would cost a dispatch per step.
        keys, impl = _split_to_host(key, num_steps)
        act = self._compiled(policy, impl, actions_only=False)
        recurrent = isinstance(policy, RecurrentAct)
        if recurrent:
            self._carry = self._recurrent_carry(policy)
        columns: dict[str, list[Any]] = {name: [] for name in HOST_COLUMNS}
        extras: list[Mapping[str, Any]] = []
        episode_returns: list[float] = []
        episode_lengths: list[int] = []
        episode_envs: list[int] = []
        for step_key in keys:
            if recurrent:
                actions, extra, self._carry = act(
                    params, self._carry, self._obs, self._first, step_key
                )
            else:
                actions, extra = act(params, self._obs, step_key)
            host_actions = np.asarray(actions)
            obs, rewards, terminated, truncated, infos = self._envs.step(host_actions)
            obs = _as_obs(obs)
            valid = ~self._resetting
            done = (terminated | truncated) & valid
            next_obs = obs.copy()
            if self._mode == gym.vector.AutoresetMode.SAME_STEP and done.any():
                final = infos["final_obs"]
                for i in np.flatnonzero(done):
                    next_obs[i] = np.asarray(final[i], next_obs.dtype)
            rewards = np.where(valid, rewards, 0.0)
            learned = (rewards, terminated)  # what the rollout holds
            if self._signals is not None:
                learned = self._signals(rewards, terminated, done, infos)
            self._returns += rewards
            self._lengths += valid
            for i in np.flatnonzero(done):
                episode_returns.append(float(self._returns[i]))
                episode_lengths.append(int(self._lengths[i]))
                episode_envs.append(int(i))
            self._returns[done] = 0.0
            self._lengths[done] = 0
            row = (
                self._obs,
                host_actions,
                learned[0].astype(np.float32),
                learned[1] & valid,
                truncated & valid,
                next_obs,
                valid,
            )
            for name, value in zip(HOST_COLUMNS, row, strict=True):
                columns[name].append(value)
            extras.append(extra)
            if self._mode == gym.vector.AutoresetMode.NEXT_STEP:
                self._resetting = done
                self._first = ~valid  # this reset-only step's observation starts an episode
            else:
                self._first = done  # the observation is already the next episode's first
            self._obs = obs
        stacked = {name: np.stack(values) for name, values in columns.items()}
        return Rollout(
            **stacked,
            extras=stack_steps(extras),
            last_obs=self._obs,
            episode_returns=episode_returns,
            episode_lengths=episode_lengths,
            episode_envs=episode_envs,
        )

    def share_compiled(self, other: EnvRunner) -> None:
        """Acts with ``other``'s compiled policies: a runner rebuilt with a new env config
        (same envs count and spaces) acts without compiling again."""
        self._policies = other._policies

    def close(self) -> None:
        """Closes the environments."""
        self._envs.close()

    def get_state(self) -> dict[str, Any]:
        """The runner's state as JSON: its observations, episode counters, a recurrent
        policy's carry and episode starts, and the envs'.

        With a ``SyncVectorEnv`` the sub-environments' plain attributes are
        captured too (numbers, arrays, strings and numpy random generators of
        every wrapper and of the base env), which is their whole state for
        environments such as gymnasium's classic control and toy text ones, so
        :meth:`set_state` continues exactly where this runner was. Environments
        whose state lives elsewhere (a physics engine's memory, other
        processes with ``"async"``) are not captured; ``env_state_exact``
        says which case applies.
        """
        subs = getattr(self._envs, "envs", None)
        exact = isinstance(self._envs, gym.vector.SyncVectorEnv) and subs is not None
        return {
            "obs": encode_array(self._obs),
            "resetting": encode_array(self._resetting),
            "returns": encode_array(self._returns),
            "lengths": encode_array(self._lengths),
            "first": encode_array(self._first),
            "carry": None
            if self._carry is None
            else [encode_array(np.asarray(x)) for x in jax.tree.leaves(self._carry)],
            "env_state_exact": exact,
            "envs": capture_layers([_layers(env) for env in subs]) if exact else None,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores what :meth:`get_state` captured.

        Raises:
          ValueError: when the number of sub-environments or their wrapper
            layers differ from the captured ones.
        """
        obs = decode_array(state["obs"])
        if obs.shape[0] != self.num_envs:
            raise ValueError(
                f"The saved runner had {obs.shape[0]} environments; this one has {self.num_envs}."
            )
        self._obs = obs
        self._resetting = decode_array(state["resetting"])
        self._returns = decode_array(state["returns"])
        self._lengths = decode_array(state["lengths"])
        # States saved before recurrent policies existed: the next step starts afresh.
        self._first = decode_array(state["first"]) if "first" in state else np.ones(len(obs), bool)
        self._carry = None
        saved_carry = state.get("carry")
        self._saved_carry = None if saved_carry is None else [decode_array(x) for x in saved_carry]
        if self._signals is not None:
            self._signals.reset({})  # lives are known again after the next step
        subs = getattr(self._envs, "envs", None)
        if subs is not None:
            restore_layers([_layers(env) for env in subs], state.get("envs"))


def _layers(env: gym.Env) -> list[Any]:
    """An env's wrappers, outermost first, then the base env."""
    layers = [env]
    while isinstance(layers[-1], gym.Wrapper):
        layers.append(layers[-1].env)
    return layers


def _as_obs(obs: Any) -> np.ndarray:
    """Observations as a numpy array, float64 narrowed to float32 (JAX's default)."""
    obs = np.asarray(obs)
    return obs.astype(np.float32) if obs.dtype == np.float64 else obs


def _split_to_host(key: jax.Array, num: int) -> tuple[np.ndarray, Any]:
    """``num`` keys split from ``key`` as host key data, and their impl (``None``: raw keys)."""
    typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    return np.asarray(_split_key_data(key, num)), jax.random.key_impl(key) if typed else None


@functools.partial(jax.jit, static_argnums=1)
def _split_key_data(key: jax.Array, num: int) -> jax.Array:
    """``jax.random.split(key, num)``'s key data in one dispatch (eagerly: two)."""
    keys = jax.random.split(key, num)
    typed = jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key)
    return jax.random.key_data(keys) if typed else keys


def evaluate(
    runner: EnvRunner,
    policy: Policy,
    params: Params,
    key: jax.Array,
    seed: int | None = None,
    max_steps: int = 100_000,
) -> dict[str, float]:
    """The first episode of every sub-environment, from a fresh reset.

    Taking one whole episode per sub-environment (rather than the first
    episodes to finish) keeps short episodes from being over-represented.

    All sub-environments step together; each step is one call of the jitted
    policy returning only the actions (compiled once per policy and runner),
    one copy of the actions to the host and one step of the vector env, so
    evaluation costs about what the environment does.
    The loop stops as soon as every sub-environment has finished its first
    episode. Which key each step gets is the same as in
    :meth:`EnvRunner.sample`'s rollouts of 32 steps, so a stochastic
    policy's episodes do not change either.

    Args:
      runner: an :class:`EnvRunner`; one episode per sub-environment is run.
      policy: as for :meth:`EnvRunner.sample`, e.g. a deterministic policy.
      params: the policy's params.
      key: PRNG key.
      seed: seed of the reset.
      max_steps: a bound on steps, against policies that never end an episode.

    Returns:
      ``{"return_mean", "return_min", "return_max", "length_mean", "episodes"}``.

    Raises:
      RuntimeError: when an episode has not finished within ``max_steps``.

    Example:
      >>> runner = EnvRunner("CartPole-v1", num_envs=4)
      >>> push_right = lambda params, obs, key: (jnp.ones(obs.shape[:1], jnp.int32), {})
      >>> evaluate(runner, push_right, None, jax.random.key(0), seed=0)["episodes"]
      4.0
    """
    runner.reset(seed)
    if isinstance(policy, RecurrentAct):
        return _evaluate_by_rollouts(runner, policy, params, key, max_steps)
    envs, count = runner.envs, runner.num_envs
    next_step = runner.autoreset_mode == gym.vector.AutoresetMode.NEXT_STEP
    obs = runner._obs
    resetting = np.zeros(count, bool)
    finished = np.zeros(count, bool)
    returns = np.zeros(count, np.float64)
    lengths = np.zeros(count, np.int64)
    steps = 0
    keys, act = None, None
    while not finished.all():
        if steps >= max_steps:
            raise RuntimeError(
                f"{int((~finished).sum())} evaluation episode(s) did not finish within "
                f"{max_steps} steps."
            )
        if steps % EVAL_KEY_BLOCK == 0:
            key, block_key = jax.random.split(key)
            keys, impl = _split_to_host(block_key, EVAL_KEY_BLOCK)
            act = runner._compiled(policy, impl, actions_only=True)
        actions = np.asarray(act(params, obs, keys[steps % EVAL_KEY_BLOCK]))
        obs, rewards, terminated, truncated, _ = envs.step(actions)
        obs = _as_obs(obs)
        steps += 1
        counted = ~resetting & ~finished
        returns += np.where(counted, rewards, 0.0)
        lengths += counted
        done = terminated | truncated
        finished |= done & counted
        if next_step:
            resetting = done & ~resetting
    runner._obs, runner._resetting = obs, resetting
    runner._returns[:] = 0.0
    runner._lengths[:] = 0
    return episode_results(returns, lengths)


def _evaluate_by_rollouts(
    runner: EnvRunner, policy: RecurrentAct, params: Params, key: jax.Array, max_steps: int
) -> dict[str, float]:
    """The first episode of every sub-environment by rollouts (with the carry
    :meth:`EnvRunner.sample` keeps, for a recurrent policy)."""

    def sample() -> Rollout:
        nonlocal key
        key, sample_key = jax.random.split(key)
        return runner.sample(policy, params, EVAL_BLOCK, sample_key)

    episodes = first_episodes(sample, runner.num_envs, max_steps)
    return episode_results(
        [episode_return for episode_return, _ in episodes.values()],
        [length for _, length in episodes.values()],
    )
