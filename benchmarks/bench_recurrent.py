"""Time to solve CartPole without its velocities: jaxlearner's LSTM PPO beside sb3-contrib's.

Run: ``python benchmarks/bench_recurrent.py [--seeds 0 1 2] [--eval-every 10240]``.
Needs the ``bench`` extra (torch, stable-baselines3, sb3-contrib).

The task is CartPole-v1 with observations ``[x, theta]`` only (RL Zoo's
``CartPoleNoVel-v1``): a policy must infer the velocities from what it saw, so
both sides use an LSTM policy.

* **jaxlearner**: ``jl.Trainer`` with PPO ``use_lstm=True`` and the settings of
  ``tests/test_recurrent.py`` (RL Zoo's RecurrentPPO ones, with 32 envs,
  1024-step batches, ``head_hidden_sizes=(64,)``; lr and clip annealed to 0
  over 200k steps).
* **sb3-contrib**: ``RecurrentPPO`` with RL Zoo's ``ppo_lstm.yml`` settings
  for ``CartPoleNoVel-v1`` (8 envs of 32 steps, 20 epochs, lr and clip
  annealed to 0 over 100k steps, ``VecNormalize`` of observations and
  rewards, an LSTM of 64 for each of actor and critic); torch on one thread,
  as RL Zoo's ``--num-threads 1``.

Both evaluate every ``--eval-every`` env steps with 10 deterministic episodes
and stop after two evaluations in a row at or above 475 (``jl.RewardBound(475,
times=2)``), or at their schedule's end. Each run is a subprocess, timed whole
(imports, compilation and evaluations included), the two alternating per seed
so machine load falls on both alike. Reports env steps and seconds (from the
start of the run, evaluations included) to the first evaluation at or above 475
(``first_*``, as ``bench_e2e.py``) and to the first of two in a row
(``solved_*``), and the whole wall time; writes
``benchmarks/results/bench_recurrent.json``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ppo_workload import machine, write_results

THRESHOLD = 475.0
SIDES = ("jaxlearner", "sb3-contrib")


def masked_cartpole():
    """CartPole-v1 with observations ``[x, theta]`` (gymnasium's, velocities dropped)."""
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    low, high = env.observation_space.low[[0, 2]], env.observation_space.high[[0, 2]]
    return gym.wrappers.TransformObservation(
        env, lambda obs: obs[[0, 2]], gym.spaces.Box(low, high)
    )


def solve_times(evaluations: list[tuple[float, float, float]]) -> dict[str, float]:
    """From ``(return, env steps, seconds)`` per evaluation: the first evaluation at or above
    the threshold (``first_*``, as ``bench_e2e.py`` reports) and the first of the first two in
    a row (``solved_*``, where both sides stop)."""
    nan = float("nan")
    above = [r >= THRESHOLD for r, _, _ in evaluations]
    first = next((e for e, ok in zip(evaluations, above, strict=True) if ok), (nan, nan, nan))
    pairs = [i for i in range(len(above) - 1) if above[i] and above[i + 1]]
    solved = evaluations[pairs[0]] if pairs else (nan, nan, nan)
    return {
        "solved": bool(pairs),
        "first_env_steps": first[1],
        "first_time_s": first[2],
        "solved_env_steps": solved[1],
        "solved_time_s": solved[2],
        "evaluations": [round(r, 1) for r, _, _ in evaluations],
    }


def run_jaxlearner(seed: int, eval_every: int) -> dict[str, float]:
    """The learning test's run, stopped at two evaluations >= 475 in a row or 200k steps."""
    import jaxlearner as jl

    steps = 200_000
    config = {
        "use_lstm": True,
        "lstm_cell_size": 64,
        "max_seq_len": 32,
        "hidden_sizes": (64,),
        "activation": "relu",
        "head_hidden_sizes": (64,),
        "lr": [[0, 1e-3], [steps, 0.0]],
        "clip_param": [[0, 0.2], [steps, 0.0]],
        "gamma": 0.98,
        "lambda_": 0.8,
        "entropy_coeff": 0.0,
        "use_kl_loss": False,
        "vf_clip_param": 1e4,
        "grad_clip": 0.5,
        "train_batch_size": 1024,
        "minibatch_size": 256,
        "num_epochs": 8,
    }
    start = time.perf_counter()
    env = masked_cartpole()
    learner = jl.algorithms.ppo(env.observation_space, env.action_space, config)
    trainer = jl.Trainer(learner, masked_cartpole, num_envs=32, seed=seed, progress=False)
    evaluations: list[tuple[float, float, float]] = []  # (return, env steps, seconds so far)

    def note_evaluation(stats: dict[str, float]) -> None:
        if "eval/return_mean" in stats:
            elapsed = time.perf_counter() - start
            evaluations.append((stats["eval/return_mean"], stats["env_steps"], elapsed))

    trainer.run(
        [jl.RewardBound(THRESHOLD, times=2), jl.MaxEnvSteps(steps)],
        steps_per_eval=eval_every,
        on_iteration=note_evaluation,
    )
    return {**solve_times(evaluations), "total_env_steps": trainer.counters.env_steps}


def run_sb3(seed: int, eval_every: int) -> dict[str, float]:
    """RL Zoo's RecurrentPPO on CartPoleNoVel-v1, stopped as the jaxlearner run is."""
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback, EvalCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    from torch import nn

    torch.set_num_threads(1)
    n_envs, n_timesteps = 8, 100_000
    linear = lambda initial: lambda remaining: remaining * initial  # RL Zoo's lin_X
    start = time.perf_counter()
    evaluations: list[tuple[float, float, float]] = []  # (return, env steps, seconds so far)

    class TwoInARow(BaseCallback):
        def _on_step(self) -> bool:
            elapsed = time.perf_counter() - start
            evaluations.append((self.parent.last_mean_reward, self.num_timesteps, elapsed))
            return not solve_times(evaluations)["solved"]

    env = VecNormalize(make_vec_env(masked_cartpole, n_envs=n_envs, seed=seed))
    eval_env = VecNormalize(
        make_vec_env(masked_cartpole, n_envs=1, seed=seed + 10_000),
        training=False,
        norm_reward=False,
    )
    model = RecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(0.001),
        clip_range=linear(0.2),
        policy_kwargs={
            "ortho_init": False,
            "activation_fn": nn.ReLU,
            "lstm_hidden_size": 64,
            "enable_critic_lstm": True,
            "net_arch": {"pi": [64], "vf": [64]},
        },
        seed=seed,
        verbose=0,
    )
    evaluation = EvalCallback(  # syncs eval_env's normalisation from env's before evaluating
        eval_env,
        callback_after_eval=TwoInARow(),
        n_eval_episodes=10,
        eval_freq=max(eval_every // n_envs, 1),
        deterministic=True,
        verbose=0,
    )
    model.learn(total_timesteps=n_timesteps, callback=evaluation)
    return {**solve_times(evaluations), "total_env_steps": model.num_timesteps}


def child(side: str, seed: int, eval_every: int) -> None:
    run = run_jaxlearner if side == "jaxlearner" else run_sb3
    print(json.dumps(run(seed, eval_every)))


def timed(side: str, seed: int, eval_every: int) -> dict[str, float]:
    """One run in a fresh process, with its whole wall time."""
    command = [sys.executable, __file__, "--child", side, "--seeds", str(seed)]
    command += ["--eval-every", str(eval_every)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {**result, "wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-every", type=int, default=10_240, help="env steps")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.seeds[0], args.eval_every)
        return
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    for seed in args.seeds:
        for side in SIDES:
            result = timed(side, seed, args.eval_every)
            runs[side].append({"seed": seed, **result})
            print(side, seed, json.dumps(result), flush=True)
    summary = {}
    for side, results in runs.items():
        solved = [r for r in results if r["solved"]]
        median = lambda key, rows: statistics.median(r[key] for r in rows) if rows else None
        summary[side] = {
            "solved": f"{len(solved)}/{len(results)}",
            "median_first_env_steps": median("first_env_steps", results),
            "median_first_time_s": median("first_time_s", results),
            "median_solved_env_steps": median("solved_env_steps", solved),
            "median_solved_time_s": median("solved_time_s", solved),
            "median_wall_s": median("wall_s", results),
        }
        print(side, json.dumps(summary[side]), flush=True)
    write_results(
        "bench_recurrent",
        {"machine": machine(), "eval_every": args.eval_every, "runs": runs, "summary": summary},
    )


if __name__ == "__main__":
    main()
