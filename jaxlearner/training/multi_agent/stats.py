"""The multi-agent trainer's progress and its episode statistics per agent and per policy."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from jaxlearner.training.multi_agent.runner import MultiAgentRollout
from jaxlearner.training.trainer_counters import window_stats

RECENT_EPISODES = 100
"""Episodes in the moving window of the episode statistics (RLlib's default)."""


@dataclasses.dataclass
class MultiAgentCounters:
    """The trainer's progress, saved with checkpoints (JSON).

    Attributes:
      iteration: training iterations done.
      env_steps: env steps collected (every copy's steps).
      agent_steps: ``{policy_id: steps of its live agents}``.
      episodes: episodes completed.
      time_total_s: seconds spent in ``step`` and ``eval``.
      recent_returns: per recent episode (window of 100), ``{agent_id: return}``.
      recent_lengths: their lengths.
    """

    iteration: int = 0
    env_steps: int = 0
    agent_steps: dict[str, int] = dataclasses.field(default_factory=dict)
    episodes: int = 0
    time_total_s: float = 0.0
    recent_returns: list[dict[str, float]] = dataclasses.field(default_factory=list)
    recent_lengths: list[int] = dataclasses.field(default_factory=list)

    def count(self, rollout: MultiAgentRollout) -> None:
        """Counts one iteration's agent steps and the episodes it ended (the driver counts
        the iteration, its env steps and its seconds)."""
        for policy_id, steps in rollout.agent_steps.items():
            self.agent_steps[policy_id] = self.agent_steps.get(policy_id, 0) + steps
        self.episodes += len(rollout.episode_returns)
        self.recent_returns = (self.recent_returns + rollout.episode_returns)[-RECENT_EPISODES:]
        self.recent_lengths = (self.recent_lengths + rollout.episode_lengths)[-RECENT_EPISODES:]


def episode_stats(
    counters: MultiAgentCounters, groups: Mapping[str, list[str]]
) -> dict[str, float]:
    """Statistics of the last 100 episodes, flat as the trainer reports them.

    ``episode_return_mean`` / ``_min`` / ``_max`` of the team return (the sum
    of an episode's agents' returns, as in RLlib), ``episode_len_mean``,
    ``agent_episode_return_mean/<agent_id>`` and
    ``module_episode_return_mean/<policy_id>`` (over the returns of all its
    agents); empty before the first episode ends.

    Example:
      >>> counters = MultiAgentCounters(recent_returns=[{"a": 1.0, "b": 3.0}],
      ...                               recent_lengths=[25])
      >>> episode_stats(counters, {"p": ["a", "b"]})["module_episode_return_mean/p"]
      2.0
    """
    if not counters.recent_returns:
        return {}
    totals = [sum(returns.values()) for returns in counters.recent_returns]
    stats = window_stats(totals, counters.recent_lengths)
    for policy_id, agents in groups.items():
        module_values = []
        for agent in agents:
            values = [r[agent] for r in counters.recent_returns if agent in r]
            if values:
                stats[f"agent_episode_return_mean/{agent}"] = float(np.mean(values))
                module_values.extend(values)
        if module_values:
            stats[f"module_episode_return_mean/{policy_id}"] = float(np.mean(module_values))
    return stats
