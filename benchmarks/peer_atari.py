"""One SB3 run on an Atari game for ``bench_pixels.py``, at the settings ``jaxlearner`` runs.

Run (``bench_pixels.py`` does, in the ``bench`` virtualenv, and times the whole process):
``python benchmarks/peer_atari.py {dqn,ppo} --env ALE/Breakout-v5 --steps N
[--learning-starts L]``. Needs SB3, ale-py and opencv.

The environment is SB3's own Atari pipeline on ALE v5 with ALE's frame skip off, as an SB3
user writes it: ``make_atari_env(id, n_envs, env_kwargs={"frameskip": 1})`` (SB3's
``AtariWrapper``: 30 no-op starts, frame skip 4 with max-pooling, a life loss ending the
episode, FIRE on reset, 84x84 grayscale, clipped rewards) and ``VecFrameStack(4)``; v5's
sticky actions are kept, as jaxlearner keeps them. The hyperparameters are RL Zoo's ``atari``
entries (``dqn.yml``, ``ppo.yml``), with a budget of ``--steps`` and, for DQN, a warm-up and
buffer of the benchmark's size (``--learning-starts``, ``--steps``). After training, one
evaluation of 10 episodes on 10 environments stepped together (deterministic), as
``jaxlearner train`` evaluates once at the end. Torch uses both cores, as XLA does.

Prints one JSON line: ``steps``, ``train_s`` and ``eval_return``.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("algorithm", choices=["dqn", "ppo"])
    parser.add_argument("--env", default="ALE/Breakout-v5")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--learning-starts", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import ale_py
    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    torch.set_num_threads(2)
    start = time.perf_counter()

    def envs(count: int, seed: int):
        venv = make_atari_env(args.env, count, seed=seed, env_kwargs={"frameskip": 1})
        return VecFrameStack(venv, 4)

    if args.algorithm == "dqn":
        model = DQN(
            "CnnPolicy",
            envs(1, args.seed),
            buffer_size=args.steps,
            learning_rate=1e-4,
            batch_size=32,
            learning_starts=args.learning_starts,
            target_update_interval=1000,
            train_freq=4,
            gradient_steps=1,
            exploration_fraction=0.1,
            exploration_final_eps=0.01,
            optimize_memory_usage=False,
            seed=args.seed,
        )
    else:
        model = PPO(
            "CnnPolicy",
            envs(8, args.seed),
            n_steps=128,
            n_epochs=4,
            batch_size=256,
            learning_rate=lambda remaining: 2.5e-4 * remaining,
            clip_range=lambda remaining: 0.1 * remaining,
            vf_coef=0.5,
            ent_coef=0.01,
            seed=args.seed,
        )
    model.learn(total_timesteps=args.steps)
    train_s = time.perf_counter() - start
    eval_env = envs(10, args.seed + 10_000)
    returns, _ = evaluate_policy(model, eval_env, n_eval_episodes=10, return_episode_rewards=True)
    print(
        json.dumps(
            {
                "steps": int(model.num_timesteps),
                "train_s": train_s,
                "eval_return": float(sum(returns) / len(returns)),
            }
        )
    )


if __name__ == "__main__":
    main()
