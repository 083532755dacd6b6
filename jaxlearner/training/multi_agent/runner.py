"""Rollouts from copies of a PettingZoo parallel environment, one batch of rows per policy.

The :class:`MultiAgentEnvRunner` steps ``N`` copies of a ``ParallelEnv``
together. Agents are grouped by the policy (module) they act with; each step,
every policy acts once, in one jitted call, on the observations of all its
agents in all copies (``[N * k, ...]`` rows for ``k`` agents, copy-major:
row ``i * k + j`` is copy ``i``'s ``j``-th agent of the group). A policy's
experience is the ``[T, N * k]`` stack of those rows, one column per
(copy, agent) stream, which is what PPO's postprocess (GAE along time) reads.

Agents that are not live in a copy (before they appear, after they are
done) get zero observations, their actions are not sent, and their rows are
marked ``valid = False`` so that no loss trains on them; their rewards are 0
and the done flags of their last live step cut GAE's trace. A copy whose
agents are all done is reset in the same step (the transition keeps the
true final observations), so every step of every copy is an env step.

PettingZoo itself is imported only by :mod:`jaxlearner.training.multi_agent.env`;
this module uses the ``ParallelEnv`` API.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias, final

import jax
import numpy as np

from jaxlearner.core.state import ModuleState
from jaxlearner.training.env_state import (
    decode_array,
    encode_array,
    plain_attributes,
    restore_layers,
)
from jaxlearner.training.multi_agent.env import ParallelEnvFactory, make_parallel_envs
from jaxlearner.training.rollout import HOST_COLUMNS, stack_steps

MultiAgentPolicy: TypeAlias = Callable[
    [Mapping[str, ModuleState], Mapping[str, jax.Array], jax.Array],
    Mapping[str, tuple[jax.Array, Mapping[str, Any]]],
]
"""``policy(modules {id: state}, obs {id: [N * k, ...]}, key) -> {id: (actions, extras)}``."""


@dataclasses.dataclass(frozen=True)
class MultiAgentRollout:
    """``T`` steps of ``N`` copies of a parallel env.

    Attributes:
      experience: ``{module_id: {name: [T, N * k, ...]}}``: ``obs``,
        ``actions``, ``rewards``, ``terminated``, ``truncated``, ``next_obs``,
        ``valid`` (host arrays) and the policy's extras (device arrays; an
        extra ``"actions"`` replaces the env actions, as it is the action to
        train on).
      env_steps: env steps taken, ``T * N``.
      agent_steps: ``{module_id: steps of live agents}`` (the valid rows).
      episode_returns: per completed episode, ``{agent_id: return}`` of the
        agents that were live in it.
      episode_lengths: their lengths in env steps.
      episode_envs: the copy each of them ran in.
    """

    experience: dict[str, dict[str, Any]]
    env_steps: int
    agent_steps: dict[str, int]
    episode_returns: list[dict[str, float]]
    episode_lengths: list[int]
    episode_envs: list[int]


@final
class MultiAgentEnvRunner:
    """Collects rollouts of several policies from copies of a PettingZoo parallel env.

    Args:
      env: a class or factory making a new ``ParallelEnv`` per call.
      groups: ``{module_id: [agent_id, ...]}``, the agents each policy acts
        for (every agent in exactly one group; see
        :func:`~jaxlearner.training.multi_agent.agent_groups`).
      num_envs: copies stepped together.
      env_config: keyword arguments for the factory.
      seed: seeds the first reset (copy ``i`` with ``seed + i``).

    Example:
      >>> runner = MultiAgentEnvRunner(GridSpread, {"shared": ["agent_0", "agent_1"]},
      ...                              num_envs=2)                         # doctest: +SKIP
      >>> rollout = runner.sample(policy, modules, 16, jax.random.key(0))  # doctest: +SKIP
      >>> rollout.experience["shared"]["obs"].shape                       # doctest: +SKIP
      (16, 4, 8)
    """

    def __init__(
        self,
        env: ParallelEnvFactory,
        groups: Mapping[str, Sequence[str]],
        *,
        num_envs: int = 1,
        env_config: Mapping[str, Any] | None = None,
        seed: int = 0,
    ) -> None:
        self._envs = make_parallel_envs(env, num_envs, env_config)
        self._groups = {module_id: list(agents) for module_id, agents in groups.items()}
        first = self._envs[0]
        self._agents = [agent for agents in self._groups.values() for agent in agents]
        self._zeros = {
            agent: np.zeros(
                first.observation_space(agent).shape, first.observation_space(agent).dtype
            )
            for agent in self._agents
        }
        self._policies: dict[int, Callable[..., Any]] = {}
        self.reset(seed)

    @property
    def num_envs(self) -> int:
        """Copies of the env stepped together."""
        return len(self._envs)

    @property
    def envs(self) -> list[Any]:
        """The env copies."""
        return list(self._envs)

    def reset(self, seed: int | None = None) -> None:
        """Resets every copy (copy ``i`` with ``seed + i``) and the episode counters."""
        self._obs = []
        for i, env in enumerate(self._envs):
            obs, _ = env.reset(seed=None if seed is None else seed + i)
            self._obs.append(dict(obs))
        self._returns = [dict.fromkeys(self._agents, 0.0) for _ in self._envs]
        self._seen = [set(env.agents) for env in self._envs]
        self._lengths = [0 for _ in self._envs]

    def _jitted(self, policy: MultiAgentPolicy) -> Callable[..., Any]:
        if id(policy) not in self._policies:
            self._policies[id(policy)] = jax.jit(policy)
        return self._policies[id(policy)]

    def _group_obs(self) -> dict[str, np.ndarray]:
        """``{module_id: [N * k, ...]}`` observations, zeros for agents that are not live."""
        return {
            module_id: np.stack(
                [
                    _as_obs(obs[agent])
                    if agent in env.agents and agent in obs
                    else self._zeros[agent]
                    for env, obs in zip(self._envs, self._obs, strict=True)
                    for agent in agents
                ]
            )
            for module_id, agents in self._groups.items()
        }

    def sample(
        self,
        policy: MultiAgentPolicy,
        modules: Mapping[str, ModuleState],
        num_steps: int,
        key: jax.Array,
    ) -> MultiAgentRollout:
        """Steps every copy ``num_steps`` times, every policy acting for its agents.

        Args:
          policy: ``policy(modules, obs, key) -> {module_id: (actions, extras)}``,
            pure; jitted once per policy object.
          modules: each acting module's state (passed to ``policy``).
          num_steps: steps ``T`` per copy.
          key: split once per step.

        Returns:
          A :class:`MultiAgentRollout`.
        """
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
            raise ValueError(f"num_steps must be a positive int; got {num_steps!r}.")
        act = self._jitted(policy)
        columns = {m: {name: [] for name in HOST_COLUMNS} for m in self._groups}
        extras: dict[str, list[Mapping[str, Any]]] = {m: [] for m in self._groups}
        finished: list[tuple[int, dict[str, float], int]] = []
        for step_key in jax.random.split(key, num_steps):
            obs = self._group_obs()
            outputs = act(modules, obs, step_key)
            host_actions = {m: np.asarray(outputs[m][0]) for m in self._groups}
            step = {m: _empty_step(len(self._envs) * len(a)) for m, a in self._groups.items()}
            for i, env in enumerate(self._envs):
                self._step_copy(i, env, host_actions, step, finished)
            for m in self._groups:
                step[m]["obs"] = obs[m]
                step[m]["actions"] = host_actions[m]
                step[m]["next_obs"] = np.stack(step[m]["next_obs"])
                for name in HOST_COLUMNS:
                    columns[m][name].append(step[m][name])
                extras[m].append(outputs[m][1])
        experience = {
            m: {
                **{name: np.stack(values) for name, values in columns[m].items()},
                **stack_steps(extras[m]),
            }
            for m in self._groups
        }
        return MultiAgentRollout(
            experience=experience,
            env_steps=num_steps * len(self._envs),
            agent_steps={m: int(experience[m]["valid"].sum()) for m in self._groups},
            episode_returns=[returns for _, returns, _ in finished],
            episode_lengths=[length for _, _, length in finished],
            episode_envs=[i for i, _, _ in finished],
        )

    def _step_copy(
        self,
        i: int,
        env: Any,
        host_actions: Mapping[str, np.ndarray],
        step: Mapping[str, dict[str, Any]],
        finished: list[tuple[int, dict[str, float], int]],
    ) -> None:
        """Steps copy ``i`` with its live agents' actions; records rows into ``step``."""
        live = set(env.agents)
        actions = {}
        for m, agents in self._groups.items():
            for j, agent in enumerate(agents):
                if agent in live:
                    actions[agent] = _env_action(host_actions[m][i * len(agents) + j])
        next_obs, rewards, terminated, truncated, _ = env.step(actions)
        self._lengths[i] += 1
        for agent, reward in rewards.items():
            if agent in live:
                self._returns[i][agent] = self._returns[i].get(agent, 0.0) + float(reward)
        episode_over = not env.agents
        for m, agents in self._groups.items():
            for j, agent in enumerate(agents):
                row = i * len(agents) + j
                if agent not in live:
                    step[m]["next_obs"].append(self._zeros[agent])
                    continue
                step[m]["valid"][row] = True
                step[m]["rewards"][row] = float(rewards.get(agent, 0.0))
                step[m]["terminated"][row] = bool(terminated.get(agent, False))
                # An agent the env dropped without a flag (or with the episode) is cut there.
                dropped = agent not in env.agents and not step[m]["terminated"][row]
                step[m]["truncated"][row] = bool(truncated.get(agent, False)) or dropped
                step[m]["next_obs"].append(_as_obs(next_obs.get(agent, self._zeros[agent])))
        self._seen[i] |= set(env.agents)
        if episode_over:
            returns = {a: r for a, r in self._returns[i].items() if a in self._seen[i] or r}
            finished.append((i, returns, self._lengths[i]))
            reset_obs, _ = env.reset()
            self._obs[i] = dict(reset_obs)
            self._returns[i] = dict.fromkeys(self._agents, 0.0)
            self._seen[i] = set(env.agents)
            self._lengths[i] = 0
        else:
            self._obs[i] = dict(next_obs)

    def get_state(self) -> dict[str, Any]:
        """The runner's state as JSON: observations, episode counters and each copy's state.

        Each copy's plain attributes (numbers, arrays, strings, numpy random
        generators, of the env and of every wrapper reached through ``.env``)
        and its live ``agents`` are captured; for pure-Python envs such as
        :class:`~jaxlearner.training.multi_agent.env.GridSpread` that is their
        whole state, so :meth:`set_state` continues exactly.
        """
        return {
            "obs": [
                {agent: encode_array(value) for agent, value in obs.items() if agent in self._zeros}
                for obs in self._obs
            ],
            "returns": self._returns,
            "seen": [sorted(seen) for seen in self._seen],
            "lengths": self._lengths,
            "envs": [
                {
                    "agents": list(env.agents),
                    "layers": [plain_attributes(layer) for layer in _layers(env)],
                }
                for env in self._envs
            ],
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores what :meth:`get_state` captured.

        Raises:
          ValueError: when the number of copies or their wrapper layers differ.
        """
        if len(state["envs"]) != len(self._envs):
            raise ValueError(
                f"The saved runner had {len(state['envs'])} env copies; this one has "
                f"{len(self._envs)}."
            )
        envs = [_layers(env) for env in self._envs]
        restore_layers(envs, [saved["layers"] for saved in state["envs"]])
        for env, saved in zip(self._envs, state["envs"], strict=True):
            env.agents = list(saved["agents"])
        self._obs = [
            {agent: decode_array(value) for agent, value in obs.items()} for obs in state["obs"]
        ]
        self._returns = [dict(returns) for returns in state["returns"]]
        self._seen = [set(seen) for seen in state["seen"]]
        self._lengths = list(state["lengths"])

    def close(self) -> None:
        """Closes every copy."""
        for env in self._envs:
            env.close()


def _empty_step(rows: int) -> dict[str, Any]:
    return {
        "rewards": np.zeros(rows, np.float32),
        "terminated": np.zeros(rows, bool),
        "truncated": np.zeros(rows, bool),
        "valid": np.zeros(rows, bool),
        "next_obs": [],
    }


def _layers(env: Any) -> list[Any]:
    """An env's wrappers (reached through ``.env``), outermost first, then the base env."""
    layers = [env]
    while True:
        inner = getattr(layers[-1], "env", None)
        if inner is None or inner is layers[-1] or not hasattr(inner, "step"):
            return layers
        layers.append(inner)


def _env_action(action: np.ndarray) -> Any:
    """One agent's action as an env takes it: a Python scalar, or an array."""
    return action.item() if action.ndim == 0 else action


def _as_obs(obs: Any) -> np.ndarray:
    """An observation as a numpy array, float64 narrowed to float32 (JAX's default)."""
    obs = np.asarray(obs)
    return obs.astype(np.float32) if obs.dtype == np.float64 else obs
