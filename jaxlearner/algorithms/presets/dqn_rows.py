"""DQN's rows: RL Zoo's ``rl_zoo3/hyperparams/dqn.yml`` (rl_zoo3 2.9), typed in as the zoo writes
them and translated by :func:`~jaxlearner.algorithms.presets.sb3.zoo_row`."""

from __future__ import annotations

from jaxlearner.algorithms.presets.preset import ANY_ATARI, Preset
from jaxlearner.algorithms.presets.sb3 import zoo_row

_MLP = {"net_arch": (256, 256)}

_LUNAR_LANDER = {
    "n_timesteps": 1e5,
    "learning_rate": 6.3e-4,
    "batch_size": 128,
    "buffer_size": 50000,
    "learning_starts": 0,
    "gamma": 0.99,
    "target_update_interval": 250,
    "train_freq": 4,
    "gradient_steps": -1,
    "exploration_fraction": 0.12,
    "exploration_final_eps": 0.1,
    "policy_kwargs": _MLP,
}
"""The zoo's ``LunarLander-v3`` entry; it writes the same values again for ``Acrobot-v1``."""

ROWS: tuple[Preset, ...] = (
    zoo_row(
        "dqn",
        "CartPole-v1",
        "CartPole-v1",
        {
            "n_timesteps": 5e4,
            "learning_rate": 2.3e-3,
            "batch_size": 64,
            "buffer_size": 100000,
            "learning_starts": 1000,
            "gamma": 0.99,
            "target_update_interval": 10,
            "train_freq": 256,
            "gradient_steps": 128,
            "exploration_fraction": 0.16,
            "exploration_final_eps": 0.04,
            "policy_kwargs": _MLP,
        },
        notes="Behind SB3 on this row (preset matrix, 3 seeds, 2026-12-02): final returns "
        "450.7 / 132.5 / 16.4 against 500 on each, ours still swinging between 500 and under "
        "150 at 50k env steps; with SB3's PyTorch init (--config ortho_init=false) 500 / "
        "112.9 / 500, still swinging; the row tuned here (dqn/CartPole-v1, jaxlearner) holds "
        "500.",
    ),
    zoo_row(
        "dqn",
        "MountainCar-v0",
        "MountainCar-v0",
        {
            "n_timesteps": 1.2e5,
            "learning_rate": 4e-3,
            "batch_size": 128,
            "buffer_size": 10000,
            "learning_starts": 1000,
            "gamma": 0.98,
            "target_update_interval": 600,
            "train_freq": 16,
            "gradient_steps": 8,
            "exploration_fraction": 0.2,
            "exploration_final_eps": 0.07,
            "policy_kwargs": _MLP,
        },
    ),
    zoo_row("dqn", "LunarLander-v3", "LunarLander-v3", _LUNAR_LANDER),
    zoo_row("dqn", "Acrobot-v1", "Acrobot-v1", _LUNAR_LANDER),
    zoo_row(
        "dqn",
        ANY_ATARI,
        "atari",
        {
            "env_wrapper": ["stable_baselines3.common.atari_wrappers.AtariWrapper"],
            "frame_stack": 4,
            "policy": "CnnPolicy",
            "n_timesteps": 1e7,
            "buffer_size": 100000,
            "learning_rate": 1e-4,
            "batch_size": 32,
            "learning_starts": 100000,
            "target_update_interval": 1000,
            "train_freq": 4,
            "gradient_steps": 1,
            "exploration_fraction": 0.1,
            "exploration_final_eps": 0.01,
            "optimize_memory_usage": False,
        },
    ),
)
"""DQN's RL Zoo rows (classic control, and every Atari game)."""
