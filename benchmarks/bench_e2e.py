"""End to end: ``jaxlearner train ALGO`` until its evaluation reaches the threshold.

Run: ``python benchmarks/bench_e2e.py [--algorithms ppo dqn sac] [--seeds 0 1 2]``.
For each algorithm and seed it runs the command line with its embedded
defaults (PPO and DQN on CartPole-v1, SAC on Pendulum-v1), then reads the run's
metrics to find the first evaluation at or above the threshold of the
algorithms issue (475, 400, -250). Reports env steps and the trainer's time to
that point, and the command's whole wall time (start-up and compilation
included). Writes ``benchmarks/results/bench_e2e.json``.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ppo_workload import machine, write_results

from jaxlearner.training.loggers import read_json_lines

THRESHOLDS = {"ppo": 475.0, "dqn": 400.0, "sac": -250.0}


def run_once(algorithm: str, seed: int, folder: pathlib.Path) -> dict[str, float]:
    out = folder / f"{algorithm}-{seed}"
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxlearner.training.cli",
            "train",
            algorithm,
            "--out",
            str(out),
            "--seed",
            str(seed),
            "--no-progress",
            "--stop-reward",
            str(THRESHOLDS[algorithm]),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    records = read_json_lines(out / "metrics.jsonl")
    reached = [
        r
        for r in records
        if r.get("eval/return_mean") is not None and r["eval/return_mean"] >= THRESHOLDS[algorithm]
    ]
    first = reached[0] if reached else None
    times = {r["step"]: r["time_total_s"] for r in records if "time_total_s" in r}
    return {
        "seed": seed,
        "reached": first is not None,
        "env_steps": first["env_steps"] if first else float("nan"),
        "train_time_s": times.get(first["step"], float("nan")) if first else float("nan"),
        "command_wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--algorithms", nargs="+", default=["ppo", "dqn", "sac"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for algorithm in args.algorithms:
            results[algorithm] = [
                run_once(algorithm, seed, pathlib.Path(folder)) for seed in args.seeds
            ]
    report = {"machine": machine(), "thresholds": THRESHOLDS, "results": results}
    write_results("bench_e2e", report)
    print(f"machine: {report['machine']}")
    print(
        "| algorithm | environment | threshold | seeds reaching it | median env steps | "
        "median training time (s) | median command wall time (s) |"
    )
    print("|---|---|---|---|---|---|---|")
    envs = {"ppo": "CartPole-v1", "dqn": "CartPole-v1", "sac": "Pendulum-v1"}
    for algorithm, runs in results.items():
        ok = [r for r in runs if r["reached"]]
        median = lambda key, rows=ok: (
            statistics.median(r[key] for r in rows) if rows else float("nan")
        )
        print(
            f"| {algorithm} | {envs[algorithm]} | {THRESHOLDS[algorithm]:g} | "
            f"{len(ok)}/{len(runs)} | {median('env_steps'):.0f} | "
            f"{median('train_time_s'):.1f} | {median('command_wall_s', runs):.1f} |"
        )


if __name__ == "__main__":
    main()
