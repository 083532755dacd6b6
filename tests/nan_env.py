"""CartPole whose rewards turn NaN after a number of steps: a run whose loss goes NaN.

``register()`` adds ``NaNCartPole-v1`` to gymnasium's registry, so the command
line can train on it (in a subprocess: ``python -c "import nan_env; ..."``).
"""

from __future__ import annotations

import math

import gymnasium as gym

ENV_ID = "NaNCartPole-v1"


class NaNRewardAfter(gym.Wrapper):
    """Rewards are NaN from this env's ``after + 1``-th step on (counted over episodes)."""

    def __init__(self, env: gym.Env, after: int) -> None:
        super().__init__(env)
        self._after, self._steps = after, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        return obs, math.nan if self._steps > self._after else reward, terminated, truncated, info


def make(after: int = 150, **kwargs) -> gym.Env:
    """CartPole-v1 with rewards NaN after ``after`` steps of each env."""
    return NaNRewardAfter(gym.make("CartPole-v1", **kwargs), after)


def register(after: int = 150) -> None:
    """Registers ``NaNCartPole-v1``: each env's rewards NaN after ``after`` steps."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=lambda **kwargs: make(after, **kwargs))
