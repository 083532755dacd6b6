"""Evaluation over host env runners, written once: whole first episodes, and their results.

An evaluation plays one whole episode in each of its environments, from a fresh reset, and
reports :func:`episode_results` over them; taking each environment's first episode (rather
than the first episodes to finish) keeps short episodes from being over-represented.
:func:`~jaxlearner.training.env_runner.evaluate` steps a gymnasium runner's envs itself (one
jitted action per step); a recurrent policy there and the multi-agent runner collect by
rollouts instead, :func:`first_episodes`. Anakin's evaluation is compiled
(:func:`~jaxlearner.anakin.rollouts.make_evaluate`) and returns the same names.

Example:
  >>> episode_results([10.0, 30.0], [10, 30])["return_mean"]
  20.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

EVAL_BLOCK = 32
"""Env steps per rollout when an evaluation collects by rollouts."""


class EndedEpisodes(Protocol):
    """What :func:`first_episodes` reads of a rollout: the episodes it ended, in order."""

    episode_returns: Sequence[Any]
    episode_lengths: Sequence[int]
    episode_envs: Sequence[int]


def first_episodes(
    sample: Callable[[], EndedEpisodes], count: int, max_steps: int = 100_000
) -> dict[int, tuple[Any, int]]:
    """The first episode each of ``count`` environments ends, by rollouts of
    :data:`EVAL_BLOCK` steps.

    Args:
      sample: collects the next rollout of :data:`EVAL_BLOCK` steps (drawing its own key).
      count: the environments.
      max_steps: a bound on steps, against policies that never end an episode.

    Returns:
      ``{env: (return, length)}`` for every environment; a return is what the rollout holds
      (a float, or ``{agent_id: return}`` for the multi-agent runner).

    Raises:
      RuntimeError: when an episode has not finished within ``max_steps``.
    """
    episodes: dict[int, tuple[Any, int]] = {}
    steps = 0
    while len(episodes) < count:
        if steps >= max_steps:
            raise RuntimeError(
                f"{count - len(episodes)} evaluation episode(s) did not finish within "
                f"{max_steps} steps."
            )
        rollout = sample()
        steps += EVAL_BLOCK
        for env, episode_return, length in zip(
            rollout.episode_envs, rollout.episode_returns, rollout.episode_lengths, strict=True
        ):
            episodes.setdefault(env, (episode_return, length))
    return episodes


def episode_results(returns: Sequence[float], lengths: Sequence[int]) -> dict[str, float]:
    """An evaluation's results over its whole episodes.

    Args:
      returns: each episode's return (one per environment).
      lengths: their lengths.

    Returns:
      ``{"return_mean", "return_min", "return_max", "length_mean", "episodes"}``.
    """
    values = np.asarray(returns, np.float64)
    return {
        "return_mean": float(values.mean()),
        "return_min": float(values.min()),
        "return_max": float(values.max()),
        "length_mean": float(np.mean(lengths)),
        "episodes": float(len(values)),
    }
