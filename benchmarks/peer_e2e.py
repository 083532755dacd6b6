"""One peer run for ``bench_e2e.py``: SB3 or sbx with RL-Zoo's hyperparameters, to a threshold.

Run (``bench_e2e.py`` does, as a subprocess, and times the whole process):
``python benchmarks/peer_e2e.py {sb3-ppo,sbx-dqn,sbx-sac} --seed S --threshold R
--eval-every N``. Needs the ``bench`` extra (``pip install torch==2.13.0`` first
for a CPU wheel, then ``pip install -e .[bench]``).

The hyperparameters are RL-Zoo's (``rl-baselines3-zoo/hyperparams/{ppo,dqn,sac}.yml``;
RL-Zoo trains sbx with the same files), their ``n_timesteps`` the length the
schedules are set for. Evaluation follows ``jaxlearner train``: every
``--eval-every`` env steps (all environments together), 10 episodes of the
deterministic policy on as many environments stepped together (one episode each, as
``jaxlearner train`` evaluates; before 2026-11-26 the peers evaluated on one environment,
which cost them more wall time than us), and the run stops once two
evaluations in a row reach the threshold (``jl.RewardBound(threshold,
times=2)``), or at ``n_timesteps``.

Prints one JSON line: ``reached``, ``env_steps`` and ``train_time_s`` at the
first evaluation at or above the threshold (time from building the model,
evaluations included), and ``total_env_steps``. Torch runs on one thread.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any


def linear(initial: float) -> Callable[[float], float]:
    """RL-Zoo's ``lin_X``: ``X`` times SB3's remaining progress (1 at the start, 0 at the end)."""
    return lambda progress_remaining: progress_remaining * initial


def sb3_ppo() -> tuple[Any, str, int, dict]:
    """SB3 PPO, RL-Zoo's CartPole-v1 (``ppo.yml``): 64x64 tanh MlpPolicy, 8 envs."""
    from stable_baselines3 import PPO

    return (
        PPO,
        "CartPole-v1",
        8,
        {
            "n_timesteps": 100_000,
            "n_steps": 32,
            "batch_size": 256,
            "gae_lambda": 0.8,
            "gamma": 0.98,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "learning_rate": linear(0.001),
            "clip_range": linear(0.2),
        },
    )


def sbx_dqn() -> tuple[Any, str, int, dict]:
    """sbx DQN, RL-Zoo's CartPole-v1 (``dqn.yml``): 256x256 Q-network, 1 env."""
    from sbx import DQN

    return (
        DQN,
        "CartPole-v1",
        1,
        {
            "n_timesteps": 50_000,
            "learning_rate": 2.3e-3,
            "batch_size": 64,
            "buffer_size": 100_000,
            "learning_starts": 1000,
            "gamma": 0.99,
            "target_update_interval": 10,
            "train_freq": 256,
            "gradient_steps": 128,
            "exploration_fraction": 0.16,
            "exploration_final_eps": 0.04,
            "policy_kwargs": {"net_arch": [256, 256]},
        },
    )


def sbx_sac() -> tuple[Any, str, int, dict]:
    """sbx SAC, RL-Zoo's Pendulum-v1 (``sac.yml``): learning rate 1e-3, sbx's defaults else."""
    from sbx import SAC

    return SAC, "Pendulum-v1", 1, {"n_timesteps": 20_000, "learning_rate": 1e-3}


PEERS = {"sb3-ppo": sb3_ppo, "sbx-dqn": sbx_dqn, "sbx-sac": sbx_sac}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, required=True)
    parser.add_argument("--eval-every", type=int, required=True, help="env steps")
    parser.add_argument("--eval-episodes", type=int, default=10)
    args = parser.parse_args()

    import torch
    from stable_baselines3.common.callbacks import BaseCallback, EvalCallback
    from stable_baselines3.common.env_util import make_vec_env

    # One thread: the fastest for these small MLPs, and it keeps OpenMP's spinning workers
    # from stalling SB3 on a small, shared machine (RL-Zoo's --num-threads 1).
    torch.set_num_threads(1)

    algorithm, env_id, n_envs, hyperparams = PEERS[args.peer]()
    n_timesteps = hyperparams.pop("n_timesteps")
    start = time.perf_counter()
    first: dict[str, float] = {}

    class TwoInARow(BaseCallback):
        """Stops training once two evaluations in a row reach the threshold."""

        def __init__(self) -> None:
            super().__init__()
            self.streak = 0

        def _on_step(self) -> bool:
            if self.parent.last_mean_reward >= args.threshold:
                self.streak += 1
                first.setdefault("env_steps", self.num_timesteps)
                first.setdefault("train_time_s", time.perf_counter() - start)
            else:
                self.streak = 0
            return self.streak < 2

    env = make_vec_env(env_id, n_envs=n_envs, seed=args.seed)
    model = algorithm("MlpPolicy", env, seed=args.seed, verbose=0, **hyperparams)
    # One environment per evaluation episode, stepped together, as jaxlearner evaluates
    # (evaluate_policy runs one episode on each of them).
    evaluation = EvalCallback(
        make_vec_env(env_id, n_envs=args.eval_episodes, seed=args.seed + 10_000),
        callback_after_eval=TwoInARow(),
        n_eval_episodes=args.eval_episodes,
        eval_freq=max(args.eval_every // n_envs, 1),
        deterministic=True,
        verbose=0,
    )
    model.learn(total_timesteps=n_timesteps, callback=evaluation)
    print(
        json.dumps(
            {
                "reached": bool(first),
                "env_steps": first.get("env_steps", float("nan")),
                "train_time_s": first.get("train_time_s", float("nan")),
                "total_env_steps": model.num_timesteps,
            }
        )
    )


if __name__ == "__main__":
    main()
