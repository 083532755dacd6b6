"""What ``jaxlearner train ALGORITHM`` does when the command line does not say (:data:`DEFAULTS`).

Each built-in algorithm has its own environment and the evaluation return that ends a run
there; its settings on that environment (config, envs, budget, evaluation cadence) are the
preset row for it (:mod:`jaxlearner.algorithms.presets`), the one table of tuned settings:
RL Zoo's for PPO, rows tuned here for DQN, SAC, APPO, BC and MARWIL. The configs' own
defaults, which the library uses (and ``--preset none``), stay RLlib's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxlearner.algorithms.presets import Preset, preset_row


@dataclasses.dataclass(frozen=True)
class Defaults:
    """An algorithm's own environment for ``jaxlearner train ALGORITHM``, and its preset there.

    Attributes:
      algorithm: the algorithm's name.
      env: the gymnasium environment id.
      stop_reward: the evaluation return that ends the run there.
      offline: trains on ``--dataset`` (BC, MARWIL); its env steps are dataset rows.

    The preset row on ``env`` gives :attr:`config`, :attr:`num_envs`, :attr:`max_steps` and
    :attr:`eval_every`.
    """

    algorithm: str
    env: str
    stop_reward: float
    offline: bool = False

    @property
    def preset(self) -> Preset:
        """The preset row ``jaxlearner train`` uses on :attr:`env`."""
        return preset_row(self.algorithm, self.env)

    @property
    def config(self) -> dict[str, Any]:
        """The preset's config fields."""
        return dict(self.preset.config)

    @property
    def num_envs(self) -> int:
        return self.preset.num_envs

    @property
    def max_steps(self) -> int:
        return self.preset.max_steps

    @property
    def eval_every(self) -> int:
        return self.preset.eval_every


DEFAULTS: dict[str, Defaults] = {
    "ppo": Defaults("ppo", "CartPole-v1", stop_reward=475.0),
    # Below CartPole's 475: the row tuned here stops at 400 after 7.7k-17.9k env steps.
    "dqn": Defaults("dqn", "CartPole-v1", stop_reward=400.0),
    # Pendulum-v1 has no reward_threshold in gymnasium.
    "sac": Defaults("sac", "Pendulum-v1", stop_reward=-250.0),
    # The zoo's Pendulum row, at SAC's stop reward.
    "td3": Defaults("td3", "Pendulum-v1", stop_reward=-250.0),
    "appo": Defaults("appo", "CartPole-v1", stop_reward=475.0),
    # purejaxql's CartPole row: stopped at 147,456 env steps (seed 0, 2026-12-02).
    "pqn": Defaults("pqn", "CartPole-v1", stop_reward=475.0),
    # Offline: the environment evaluates; "env steps" are dataset rows trained on.
    "bc": Defaults("bc", "CartPole-v1", stop_reward=475.0, offline=True),
    "marwil": Defaults("marwil", "CartPole-v1", stop_reward=475.0, offline=True),
}
