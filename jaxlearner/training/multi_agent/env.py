"""PettingZoo parallel environments: checking them, making copies, and a small cooperative one.

This is the only module that imports PettingZoo (the ``pettingzoo`` extra:
``pip install jaxlearner[pettingzoo]``). The multi-agent runner and trainer
use a ``ParallelEnv`` through its API only: ``possible_agents``, ``agents``,
``observation_space(agent)``, ``action_space(agent)``, ``reset`` and
``step`` with dicts keyed by agent id.

:class:`GridSpread` is a cooperative task in the spirit of MPE's
``simple_spread`` (which PettingZoo moved to the separate ``mpe2`` package):
``n`` agents on a small grid must cover ``n`` landmarks between them. It is
pure Python and NumPy, needs no download, and a learning test fits in a
minute.

Example:
  >>> env = GridSpread()
  >>> obs, infos = env.reset(seed=0)
  >>> sorted(obs), obs["agent_0"].shape
  (['agent_0', 'agent_1'], (8,))
  >>> obs, rewards, terminated, truncated, infos = env.step({"agent_0": 0, "agent_1": 4})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeAlias

import gymnasium
import numpy as np

try:
    from pettingzoo import ParallelEnv
except ImportError as error:  # pragma: no cover - the extra is installed in the tests
    raise ImportError(
        "jaxlearner's multi-agent training needs PettingZoo: pip install 'jaxlearner[pettingzoo]'."
    ) from error

ParallelEnvFactory: TypeAlias = Callable[..., ParallelEnv]
"""A class or function making a new ``pettingzoo.ParallelEnv`` at each call
(``GridSpread``, ``rps_v2.parallel_env``, ``lambda: MyEnv(...)``)."""

MOVES = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], np.int64)
"""GridSpread's actions: stay, left, right, down, up (as ``[dx, dy]``)."""


class GridSpread(ParallelEnv):
    """``n`` agents on a ``size x size`` grid cover ``n`` landmarks; a shared reward.

    Each step every agent moves (stay, left, right, down, up; walls stop it).
    Every agent receives the team reward, minus the mean over landmarks of
    the Manhattan distance from the landmark to its closest agent, divided
    by ``size - 1`` (so in ``[-2, 0]``), and loses ``collision_penalty`` when it
    shares its cell with another agent (MPE ``simple_spread``'s shared and
    local rewards). The agents must split up: two on one landmark leave the
    other uncovered. Episodes are truncated after ``max_cycles`` steps.

    An agent observes, scaled by ``1 / (size - 1)``: its position, each
    landmark's position relative to it, and each other agent's relative
    position (``4 n`` floats, the same layout for every agent, so agents can
    share a policy); with ``agent_indicator``, followed by a one-hot of its
    index (``5 n`` floats), which lets a shared policy tell the agents apart
    and so break their symmetry (PettingZoo's SuperSuit ``agent_indicator``).

    Args:
      n_agents: agents and landmarks, ``>= 1``.
      size: the grid's side, ``>= 2``.
      max_cycles: steps per episode.
      collision_penalty: subtracted from an agent's reward per step it shares a cell.
      agent_indicator: append the agent's one-hot index to its observation.
      render_mode: ``None`` or ``"ansi"``.

    Example:
      >>> env = GridSpread(n_agents=3, size=6)
      >>> env.possible_agents
      ['agent_0', 'agent_1', 'agent_2']
    """

    metadata: ClassVar[dict[str, Any]] = {
        "name": "grid_spread_v0",
        "render_modes": ["ansi"],
        "is_parallelizable": True,
    }

    def __init__(
        self,
        n_agents: int = 2,
        size: int = 5,
        max_cycles: int = 25,
        collision_penalty: float = 0.5,
        agent_indicator: bool = False,
        render_mode: str | None = None,
    ) -> None:
        for name, value, low in (("n_agents", n_agents, 1), ("size", size, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"GridSpread {name} must be an int >= {low}; got {value!r}.")
        if isinstance(max_cycles, bool) or not isinstance(max_cycles, int) or max_cycles < 1:
            raise ValueError(f"GridSpread max_cycles must be a positive int; got {max_cycles!r}.")
        if 2 * n_agents > size * size:
            raise ValueError(
                f"GridSpread needs room for {n_agents} agents and landmarks: size {size} gives "
                f"{size * size} cells, fewer than 2 * n_agents = {2 * n_agents}."
            )
        if render_mode not in (None, "ansi"):
            raise ValueError(f"GridSpread render_mode must be None or 'ansi'; got {render_mode!r}.")
        self.size = size
        self.max_cycles = max_cycles
        self.collision_penalty = float(collision_penalty)
        self.agent_indicator = bool(agent_indicator)
        self.render_mode = render_mode
        self.possible_agents = [f"agent_{i}" for i in range(n_agents)]
        self.agents: list[str] = []
        features = (5 if agent_indicator else 4) * n_agents
        self._observation_space = gymnasium.spaces.Box(-1.0, 1.0, (features,), np.float32)
        self._action_space = gymnasium.spaces.Discrete(len(MOVES))
        self._rng = np.random.default_rng()
        self._positions = np.zeros((n_agents, 2), np.int64)
        self._landmarks = np.zeros((n_agents, 2), np.int64)
        self._steps = 0

    def observation_space(self, agent: str) -> gymnasium.spaces.Box:
        """Every agent's: ``Box(-1, 1, (4 n,), float32)`` (``5 n`` with ``agent_indicator``)."""
        return self._observation_space

    def action_space(self, agent: str) -> gymnasium.spaces.Discrete:
        """Every agent's: ``Discrete(5)``."""
        return self._action_space

    def reset(
        self, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        """Places landmarks and agents on distinct random cells; seeds the env's generator."""
        del options
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        n = len(self.possible_agents)
        cells = self._rng.choice(self.size * self.size, size=2 * n, replace=False)
        xy = np.stack([cells % self.size, cells // self.size], axis=-1)
        self._landmarks, self._positions = xy[:n], xy[n:]
        self._steps = 0
        self.agents = list(self.possible_agents)
        return self._observations(), {agent: {} for agent in self.agents}

    def step(self, actions: Mapping[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """Moves every agent; an agent without an action stays.

        Raises:
          KeyError: for an action of an agent that is not live.
          ValueError: for an action outside ``range(5)``.
        """
        unknown = sorted(set(actions) - set(self.agents))
        if unknown:
            raise KeyError(f"Actions for agents {unknown} that are not live: {self.agents}.")
        for index, agent in enumerate(self.possible_agents):
            if agent in actions:
                move = int(actions[agent])
                if not 0 <= move < len(MOVES):
                    raise ValueError(f"GridSpread action of {agent} must be in 0..4; got {move}.")
                self._positions[index] = np.clip(
                    self._positions[index] + MOVES[move], 0, self.size - 1
                )
        self._steps += 1
        distances = np.abs(self._landmarks[:, None, :] - self._positions[None, :, :]).sum(-1)
        team = -distances.min(axis=1).mean() / (self.size - 1)
        shared_cell = (self._positions[:, None, :] == self._positions[None, :, :]).all(-1)
        collisions = shared_cell.sum(axis=1) - 1
        agents = self.agents
        rewards = {
            agent: float(team - self.collision_penalty * (collisions[i] > 0))
            for i, agent in enumerate(self.possible_agents)
        }
        done = self._steps >= self.max_cycles
        observations = self._observations()
        self.agents = [] if done else list(self.possible_agents)
        return (
            observations,
            rewards,
            dict.fromkeys(agents, False),
            dict.fromkeys(agents, done),
            {agent: {} for agent in agents},
        )

    def _observations(self) -> dict[str, np.ndarray]:
        scale = 1.0 / (self.size - 1)
        observations = {}
        for i, agent in enumerate(self.possible_agents):
            own = self._positions[i]
            others = np.delete(self._positions, i, axis=0) - own
            parts = [own * scale, (self._landmarks - own).ravel() * scale, others.ravel() * scale]
            if self.agent_indicator:
                parts.append(np.eye(len(self.possible_agents))[i])
            observations[agent] = np.concatenate(parts).astype(np.float32)
        return observations

    def render(self) -> str | None:
        """The grid as text: landmarks ``L``, agents ``0``, ``1``, ..., in ``"ansi"`` mode."""
        if self.render_mode != "ansi":
            return None
        grid = [["." for _ in range(self.size)] for _ in range(self.size)]
        for x, y in self._landmarks:
            grid[y][x] = "L"
        for i, (x, y) in enumerate(self._positions):
            grid[y][x] = str(i % 10)
        return "\n".join("".join(row) for row in reversed(grid))

    def close(self) -> None:
        """Nothing to release."""


def make_parallel_envs(
    env: ParallelEnvFactory, count: int, env_config: Mapping[str, Any] | None = None
) -> list[ParallelEnv]:
    """``count`` new environments from a factory, checked.

    Args:
      env: a class or function returning a new ``pettingzoo.ParallelEnv`` per call.
      count: how many.
      env_config: keyword arguments for the factory.

    Raises:
      TypeError: for an env instance (copies are needed: pass its class or a
        factory), a factory returning something else than a ``ParallelEnv``,
        or the same instance twice.
      ValueError: for a bad ``count``, or an env without agents.

    Example:
      >>> envs = make_parallel_envs(GridSpread, 2, {"size": 4})
      >>> len(envs), envs[0].size
      (2, 4)
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"num_envs must be a positive int; got {count!r}.")
    if isinstance(env, ParallelEnv) or not callable(env):
        raise TypeError(
            "env must be a class or factory making a new pettingzoo.ParallelEnv per call "
            f"(GridSpread, rps_v2.parallel_env, lambda: MyEnv(...)); got {type(env).__name__}."
        )
    config = dict(env_config or {})
    envs = [env(**config) for _ in range(count)]
    for made in envs:
        check_parallel_env(made)
    if len({id(made) for made in envs}) != count:
        raise TypeError(
            "The env factory returned the same instance twice; it must make a new env per call."
        )
    return envs


def check_parallel_env(env: object) -> None:
    """Checks ``env`` is a ``pettingzoo.ParallelEnv`` with agents and gymnasium spaces.

    Raises:
      TypeError: for anything else than a ``ParallelEnv``, or spaces that are
        not gymnasium spaces.
      ValueError: for no (or repeated) ``possible_agents``.

    Example:
      >>> check_parallel_env(GridSpread())
    """
    if not isinstance(env, ParallelEnv):
        raise TypeError(
            f"Expected a pettingzoo.ParallelEnv; got {type(env).__name__}. An AEC env converts "
            "with pettingzoo.utils.aec_to_parallel."
        )
    agents = list(getattr(env, "possible_agents", None) or [])
    if not agents or len(set(agents)) != len(agents):
        raise ValueError(
            f"The env's possible_agents must be a non-empty list of distinct ids; got {agents!r}."
        )
    for agent in agents:
        for kind in ("observation_space", "action_space"):
            space = getattr(env, kind)(agent)
            if not isinstance(space, gymnasium.Space):
                raise TypeError(
                    f"The env's {kind}({agent!r}) is a {type(space).__name__}, not a gymnasium "
                    "space."
                )
