"""Rollout: the arrays of ``T`` steps of ``N`` gymnasium environments, as the runner collects them.

:class:`~jaxlearner.training.env_runner.EnvRunner` returns one per ``sample``;
:meth:`Rollout.experience` is what the algorithms' ``postprocess`` or ``transitions``, and the
module's observers, read.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class Rollout:
    """``T`` steps of ``N`` environments, time-major.

    Attributes:
      obs: ``[T, N, ...]`` observations the actions were taken in.
      actions: ``[T, N, ...]`` actions, as the policy returned them.
      rewards: ``[T, N]`` float32.
      terminated: ``[T, N]`` bool, the episode ended in a terminal state.
      truncated: ``[T, N]`` bool, the episode was cut (time limit).
      next_obs: ``[T, N, ...]`` the observation each transition led to: the
        final observation when the step ended the episode.
      valid: ``[T, N]`` bool, ``False`` for reset-only steps (``NEXT_STEP``).
      extras: ``{name: [T, N, ...]}`` what the policy returned besides the
        actions (device arrays).
      last_obs: ``[N, ...]`` the observations to act in next.
      episode_returns: returns of the episodes completed during the rollout.
      episode_lengths: their lengths.
      episode_envs: the sub-environment each of them ran in.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    next_obs: np.ndarray
    valid: np.ndarray
    extras: dict[str, jax.Array]
    last_obs: np.ndarray
    episode_returns: list[float]
    episode_lengths: list[int]
    episode_envs: list[int]

    @property
    def env_steps(self) -> int:
        """Environment steps taken (reset-only steps excluded)."""
        return int(self.valid.sum())

    def experience(self) -> dict[str, Any]:
        """The ``[T, N]`` arrays an algorithm's ``postprocess`` or ``transitions`` reads.

        ``obs``, ``actions``, ``rewards``, ``terminated``, ``truncated``,
        ``next_obs``, ``valid`` and the policy's extras (an ``extras["actions"]``
        replaces the env actions: it is the action to train on).
        """
        return {
            "obs": self.obs,
            "actions": self.actions,
            "rewards": self.rewards,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "next_obs": self.next_obs,
            "valid": self.valid,
            **self.extras,
        }
