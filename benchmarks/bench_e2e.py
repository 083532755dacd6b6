"""End to end: ``jaxlearner train ALGO`` until its evaluation reaches the threshold, and peers.

Run: ``python benchmarks/bench_e2e.py [--algorithms ppo dqn sac] [--seeds 0 1 2]
[--cache off warm] [--no-peers] [--name bench_e2e]``. For each algorithm and seed it runs the
command line with its embedded defaults (PPO and DQN on CartPole-v1, SAC on
Pendulum-v1), then reads the run's metrics to find the first evaluation at or
above the threshold of the algorithms issue (475, 400, -250). Reports env steps
and the trainer's time to that point, and the command's whole wall time
(start-up and compilation included). Writes ``benchmarks/results/bench_e2e.json``.

Each ``--cache`` is a variant: ``off`` runs with ``--no-compilation-cache``
(every run compiles), ``warm`` with a fresh cache folder that one untimed run
per algorithm fills first (as a user's second run finds it).

Peers (skipped with ``--no-peers``; they need the ``bench`` extra): SB3 PPO,
sbx DQN and sbx SAC with RL-Zoo's hyperparameters (``peer_e2e.py``), each a
subprocess timed the same way, evaluating as often (in env steps) and as long
(10 deterministic episodes) as ``jaxlearner train`` and stopping, like it,
after two evaluations in a row at or above the threshold. For each seed the
variants run one after the other (jaxlearner, peer, jaxlearner, peer, ...),
so machine load falls on all of them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ppo_workload import machine, write_results

from jaxlearner.cli import DEFAULTS
from jaxlearner.training.outputs.loggers import read_json_lines

THRESHOLDS = {"ppo": 475.0, "dqn": 400.0, "sac": -250.0}
PEERS = {"ppo": "sb3-ppo", "dqn": "sbx-dqn", "sac": "sbx-sac"}
"""The peer run (``peer_e2e.py``) for each algorithm."""
PEER_SCRIPT = pathlib.Path(__file__).resolve().parent / "peer_e2e.py"


def run_once(
    algorithm: str, seed: int, folder: pathlib.Path, cache: str | None = None
) -> dict[str, float]:
    """One ``jaxlearner train``; ``cache``: a compilation-cache folder, or ``None`` for off."""
    out = folder / f"{algorithm}-{seed}-{'off' if cache is None else 'warm'}"
    cache_flags = ["--no-compilation-cache"] if cache is None else ["--compilation-cache", cache]
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxlearner.cli",
            "train",
            algorithm,
            "--out",
            str(out),
            "--seed",
            str(seed),
            "--no-progress",
            "--stop-reward",
            str(THRESHOLDS[algorithm]),
            *cache_flags,
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


def run_peer(algorithm: str, seed: int) -> dict[str, float]:
    """One ``peer_e2e.py`` run, timed as a whole like ``run_once``."""
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            str(PEER_SCRIPT),
            PEERS[algorithm],
            "--seed",
            str(seed),
            "--threshold",
            str(THRESHOLDS[algorithm]),
            "--eval-every",
            str(DEFAULTS[algorithm].eval_every),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {"seed": seed, **result, "command_wall_s": wall}


def run_algorithm(
    algorithm: str, seeds: list[int], caches: list[str], peers: bool, folder: pathlib.Path
) -> dict[str, list[dict[str, float]]]:
    """Every variant of one algorithm, per seed one after the other: ``{variant: runs}``."""
    cache_folder = str(folder / "compilation-cache")
    if "warm" in caches:  # fills the cache, untimed
        run_once(algorithm, seeds[0], folder / "warm-up", cache_folder)
    variants = {f"jaxlearner, cache {cache}": cache for cache in caches}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    peers = peers and algorithm in PEERS  # an algorithm without a peer runs alone
    if peers:
        runs[PEERS[algorithm]] = []
    for seed in seeds:
        for name, cache in variants.items():
            runs[name].append(
                run_once(algorithm, seed, folder, cache_folder if cache == "warm" else None)
            )
        if peers:
            runs[PEERS[algorithm]].append(run_peer(algorithm, seed))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--algorithms", nargs="+", default=["ppo", "dqn", "sac"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--cache", nargs="+", choices=["off", "warm"], default=["off", "warm"])
    parser.add_argument("--no-peers", action="store_true", help="skip SB3 and sbx")
    parser.add_argument("--name", default="bench_e2e", help="results/NAME.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for algorithm in args.algorithms:
            (pathlib.Path(folder) / "warm-up").mkdir(exist_ok=True)
            results[algorithm] = run_algorithm(
                algorithm, args.seeds, args.cache, not args.no_peers, pathlib.Path(folder)
            )
    report = {"machine": machine(), "thresholds": THRESHOLDS, "results": results}
    report["load"] = {"before": load_before, "after": os.getloadavg()}
    write_results(args.name, report)
    print(f"machine: {report['machine']}")
    print(
        "| algorithm | environment | threshold | variant | seeds reaching it | median env steps | "
        "median training time (s) | median command wall time (s) | wall / peer's |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for algorithm, variants in results.items():
        peer = variants.get(PEERS.get(algorithm, ""))
        peer_wall = statistics.median(r["command_wall_s"] for r in peer) if peer else None
        for variant, runs in variants.items():
            ok = [r for r in runs if r["reached"]]
            median = lambda key, rows=ok: (
                statistics.median(r[key] for r in rows) if rows else float("nan")
            )
            wall = median("command_wall_s", runs)
            ratio = "-" if peer_wall is None else f"{wall / peer_wall:.2f}"
            print(
                f"| {algorithm} | {DEFAULTS[algorithm].env} | {THRESHOLDS[algorithm]:g} | "
                f"{variant} | {len(ok)}/{len(runs)} | {median('env_steps'):.0f} | "
                f"{median('train_time_s'):.1f} | {wall:.1f} | {ratio} |"
            )


if __name__ == "__main__":
    main()
