"""RLlib's APPO on bench_runners.py's 5 ms environment: env steps/s with 1, 2 and 4 env runners.

The peer of ``bench_runners.py``'s asynchronous APPO rows: the same environment (CartPole-v1
whose step sleeps 5 ms), 4 environments per runner, half a core each, fragments of 32 steps,
1,024 env steps per update, the learner in the driver (``num_learners=0``, as ours is).
Run it in a scratch virtualenv with RLlib (not a jaxlearner dependency; ``pip install
torch==2.13.0`` first, then ``"ray[rllib]"``):

  python benchmarks/peer_runners.py [--runners 1 2 4] [--iterations 3]

Each row: ``algo.train()`` after one warm-up call, env steps sampled over the timed calls (RLlib's
``num_env_steps_sampled_lifetime``) per second. Prints one JSON line per row and writes
``benchmarks/results/peer_runners.json`` with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

import gymnasium as gym

STEP_SECONDS = 0.005


class SlowCartPole(gym.Wrapper):
    """CartPole-v1 whose every step takes 5 ms longer (bench_runners.py's)."""

    def __init__(self, config=None) -> None:
        super().__init__(gym.make("CartPole-v1"))

    def step(self, action):
        time.sleep(STEP_SECONDS)
        return self.env.step(action)


def sampled(result: dict) -> float:
    return float(result["env_runners"]["num_env_steps_sampled_lifetime"])


def measure(runners: int, iterations: int) -> dict:
    from ray.rllib.algorithms.appo import APPOConfig

    config = (
        APPOConfig()
        .environment("SlowCartPole")
        .env_runners(
            num_env_runners=runners,
            num_envs_per_env_runner=4,
            num_cpus_per_env_runner=0.5,
            rollout_fragment_length=32,
        )
        .learners(num_learners=0)
        .training(train_batch_size_per_learner=1024, minibatch_size=256)
    )
    algo = config.build_algo()
    try:
        before = sampled(algo.train())  # builds the learner, fills the pipeline
        start = time.perf_counter()
        for _ in range(iterations):
            result = algo.train()
        seconds = time.perf_counter() - start
    finally:
        algo.stop()
    steps = sampled(result) - before
    return {"runners": runners, "env_steps_per_s": steps / seconds, "seconds": seconds,
            "env_steps": steps}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runners", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--iterations", type=int, default=3)
    args = parser.parse_args()
    import ray
    from ray.tune.registry import register_env

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False)
    register_env("SlowCartPole", lambda config: SlowCartPole(config))
    report = {"ray": ray.__version__, "load_before": os.getloadavg(), "rows": []}
    for runners in args.runners:
        row = {**measure(runners, args.iterations), "load": os.getloadavg()}
        report["rows"].append(row)
        print(json.dumps(row), flush=True)
    report["load_after"] = os.getloadavg()
    ray.shutdown()
    out = pathlib.Path(__file__).resolve().parent / "results" / "peer_runners.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
