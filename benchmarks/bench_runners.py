"""Env steps/s of the Trainer with 0, 1, 2 and 4 Ray env runners, and the learner's idle time.

Run: ``python benchmarks/bench_runners.py [--iterations 6] [--runners 0 1 2 4]``.

Two environments: CartPole-v1 (a step costs microseconds: the runners' overhead shows) and
``SlowCartPole``, CartPole whose step sleeps 5 ms (a costly simulator: the runners' parallelism
shows, even on two cores, since a sleeping step holds no core). Two algorithms: PPO with
synchronous runners (each iteration gathers one batch from all runners, then updates) and
APPO with asynchronous ones (the runners keep sampling while the learner updates). Every
configuration trains the same batch size (1,024 env steps per update) with ``--num-envs 4``
environments per runner (the local runner, ``0``, steps 4 environments in this process).

For each row: env steps/s over the timed iterations (after ``2 + runners`` warm-up
iterations: compilation, and asynchronous runners out of step; ``--iterations`` timed ones, 5x
that on CartPole, at least 6 per runner asynchronously), and the learner's idle fraction:
the share of the timed seconds it spent waiting for rollouts (for the local runner: stepping
the environments itself). The goal (issue 26): at least 1.8x from 1 to 2 runners on the 5 ms
environment. Writes ``benchmarks/results/bench_runners.json`` with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

import gymnasium as gym
import jax
import numpy as np

import jaxlearner as jl
from jaxlearner.training.ray_runners import init_ray

STEP_SECONDS = 0.005
BATCH = 1024
ENVS_PER_RUNNER = 4


class SlowCartPole(gym.Wrapper):
    """CartPole-v1 whose every step takes 5 ms longer (a costly simulator)."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))

    def step(self, action):
        time.sleep(STEP_SECONDS)
        return self.env.step(action)


def make_slow_cartpole() -> gym.Env:
    return SlowCartPole()


ENVIRONMENTS = {"CartPole-v1": "CartPole-v1", "SlowCartPole (5 ms/step)": make_slow_cartpole}
ALGORITHMS = {
    "ppo (sync)": ("ppo", {"train_batch_size": BATCH, "minibatch_size": 256, "num_epochs": 4}),
    "appo (async)": (
        "appo",
        {"train_batch_size": BATCH, "minibatch_size": 256, "rollout_fragment_length": 32},
    ),
}


def measure(algorithm: str, config: dict, env, runners: int, iterations: int) -> dict:
    space = gym.make("CartPole-v1")
    make = getattr(jl.algorithms, algorithm)
    learner = make(space.observation_space, space.action_space, config)
    trainer = jl.Trainer(
        learner,
        env,
        num_envs=ENVS_PER_RUNNER,
        seed=0,
        progress=False,
        num_env_runners=runners,
        env_runners=jl.EnvRunnersConfig(cpus_per_env_runner=0.5),
        compile_ahead=False,
    )
    waits: list[float] = []
    sample = trainer.engine.runner.sample

    def timed_sample(*args, **kwargs):
        """The learner waits for a rollout (or, locally, collects it itself) in here."""
        start = time.perf_counter()
        rollout = sample(*args, **kwargs)
        waits.append(time.perf_counter() - start)
        return rollout

    trainer.engine.runner.sample = timed_sample
    try:
        # The warm-up compiles (the act functions here and in each runner, the update) and,
        # for asynchronous runners, lets their fragments fall out of step with each other:
        # they all start together, so the first ones arrive at once.
        for _ in range(2 + runners):
            trainer.step()
        del waits[:]
        rows, start = [], time.perf_counter()
        for _ in range(iterations):
            rows.append(trainer.step())
        seconds = time.perf_counter() - start
    finally:
        trainer.close()
    steps = trainer.env_steps_per_iteration * iterations
    lags = [row.get("env_runners/policy_lag", 0.0) for row in rows]
    return {
        "env_steps_per_s": steps / seconds,
        "learner_idle": sum(waits) / seconds,
        "seconds": seconds,
        "env_steps": steps,
        "policy_lag_mean": float(np.mean(lags)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--runners", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument("--envs", nargs="+", default=list(ENVIRONMENTS))
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS))
    args = parser.parse_args()
    init_ray(num_cpus=os.cpu_count())
    load_before = os.getloadavg()
    report = {"machine": {"cpus": os.cpu_count(), "jax": jax.__version__}, "rows": []}
    for env_name in args.envs:
        for name in args.algorithms:
            algorithm, config = ALGORITHMS[name]
            for runners in args.runners:
                # A fast environment's iteration is short: more of them. An asynchronous
                # run has a fragment in flight on every runner at both ends of the timing:
                # enough fragments that those ends weigh little.
                iterations = args.iterations * (5 if env_name == "CartPole-v1" else 1)
                if "async" in name:
                    iterations = max(iterations, 6 * runners)
                row = measure(algorithm, config, ENVIRONMENTS[env_name], runners, iterations)
                row.update(env=env_name, algorithm=name, runners=runners, load=os.getloadavg())
                report["rows"].append(row)
                print(json.dumps(row), flush=True)
    report["load"] = {"before": load_before, "after": os.getloadavg()}
    out = pathlib.Path(__file__).resolve().parent / "results" / "bench_runners.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
