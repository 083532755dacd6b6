"""The Trainer's counters, the episode statistics read from them, and env-config schedules
over them.

:class:`TrainerCounters` is the run's progress that checkpoints keep (JSON);
:func:`episode_stats` is what an iteration reports of its last 100 episodes; an
:data:`EnvConfig` is a mapping of env keyword arguments or a schedule ``config(counters)``
(scheduled domain randomization), checked by :func:`check_env_config` and resolved by
:func:`resolve_env_config`.

Example:
  >>> counters = TrainerCounters(recent_returns=[1.0, 3.0], recent_lengths=[10, 30])
  >>> episode_stats(counters)["episode_return_mean"]
  2.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from jaxlearner.training.rollout import Rollout

RECENT_EPISODES = 100
"""Episodes in the moving window of ``episode_return_mean`` (RLlib's default)."""


@dataclasses.dataclass
class TrainerCounters:
    """The trainer's progress, saved with checkpoints (JSON).

    Attributes:
      iteration: training iterations done.
      env_steps: env steps collected over the run's lifetime.
      episodes: episodes completed.
      time_total_s: seconds spent in ``step`` and ``eval``.
      recent_returns: returns of the last episodes (window of 100).
      recent_lengths: their lengths.
    """

    iteration: int = 0
    env_steps: int = 0
    episodes: int = 0
    time_total_s: float = 0.0
    recent_returns: list[float] = dataclasses.field(default_factory=list)
    recent_lengths: list[int] = dataclasses.field(default_factory=list)

    def count(self, rollout: Rollout) -> None:
        """Counts the episodes one iteration's rollout ended (the driver counts the
        iteration, its env steps and its seconds)."""
        self.episodes += len(rollout.episode_returns)
        self.recent_returns = (self.recent_returns + rollout.episode_returns)[-RECENT_EPISODES:]
        self.recent_lengths = (self.recent_lengths + rollout.episode_lengths)[-RECENT_EPISODES:]


def episode_stats(counters: TrainerCounters) -> dict[str, float]:
    """:func:`window_stats` of the counters' last episodes."""
    return window_stats(counters.recent_returns, counters.recent_lengths)


def window_stats(returns: Sequence[float], lengths: Sequence[int]) -> dict[str, float]:
    """``episode_return_mean`` / ``_min`` / ``_max`` and ``episode_len_mean`` over a window of
    recent episodes (none before the first episode ends): what every row reports of them.

    Example:
      >>> window_stats([1.0, 3.0], [10, 30])["episode_return_max"]
      3.0
    """
    if not len(returns):
        return {}
    values = np.asarray(returns, np.float64)
    return {
        "episode_return_mean": float(values.mean()),
        "episode_return_min": float(values.min()),
        "episode_return_max": float(values.max()),
        "episode_len_mean": float(np.mean(lengths)),
    }


EnvConfig = Mapping[str, Any] | Callable[["TrainerCounters"], Mapping[str, Any]]
"""An env config: keyword arguments for ``gymnasium.make`` or the factory, or a schedule of
them, ``config(trainer.counters)`` (scheduled domain randomization)."""


def check_env_config(name: str, value: object) -> None:
    """Raises ``TypeError`` unless ``value`` is ``None``, a mapping or a callable."""
    if value is not None and not isinstance(value, Mapping) and not callable(value):
        raise TypeError(
            f"{name} must be a mapping of env keyword arguments or a schedule "
            f"config(counters) -> mapping; got {type(value).__name__}."
        )


def resolve_env_config(config: EnvConfig, counters: TrainerCounters) -> Mapping[str, Any]:
    """``config`` itself, or a schedule's value for ``counters`` (which must be a mapping)."""
    value = config(counters) if callable(config) else config
    if not isinstance(value, Mapping):
        raise TypeError(
            f"An env_config schedule must return a mapping of env keyword arguments; got "
            f"{type(value).__name__} at iteration {counters.iteration}."
        )
    return value
