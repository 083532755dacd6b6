"""MuJoCo locomotion: ``jaxlearner train`` with its presets beside SB3 PPO and sbx SAC.

Run: ``python benchmarks/bench_mujoco.py --peer-python PEER_VENV/bin/python [--seeds 0 1 2]
[--workloads ppo:HalfCheetah-v5:300000 sac:Hopper-v5:50000 ...] [--eval-every-ppo 25000]
[--eval-every-sac 5000]``. The default workloads are issue 29's: PPO on HalfCheetah-v5 and
Hopper-v5 at 300k env steps, SAC on both at 50k.

For each workload and seed it runs, interleaved and each a whole process timed from start
to exit: ``jaxlearner train ALGO --env ENV --max-steps N --seed S --stop-reward none``
(the env's preset: RL Zoo's settings translated, with ``norm_obs``/``norm_reward`` where
the zoo normalizes; compilation cache off; no stop at a reward threshold, equal budgets),
then ``peer_zoo.py`` in the peer virtualenv (SB3 PPO or sbx SAC with the zoo's entry,
``VecNormalize`` where it normalizes). Both evaluate every
``--eval-every-*`` env steps, 10 deterministic episodes on a separate env with frozen
statistics, and the final policy the same way (jaxlearner's with ``jaxlearner eval`` on its
last checkpoint, after the timed run: the command line prints its closing evaluation but
does not keep it in the run folder). Reported per row: the mean and spread (min, max) of the final
evaluation over seeds, env steps per second of the whole process, and wall time; the
ratios jaxlearner / peer of wall time; the load average before and after. Writes
``benchmarks/results/bench_mujoco.json`` and one learning-curve PNG per workload with both
libraries' runs, drawn by ``jaxlearner plot``. The run folders are kept under ``--runs``.

The peer virtualenv needs ``pip install torch==2.13.0`` (a CPU wheel) first, then
``pip install -e ".[bench]" "gymnasium[mujoco]"`` (or SB3, sbx-rl and ``pip install rl_zoo3
--no-deps``: only the zoo's tables are read).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ppo_workload import machine, write_results

from jaxlearner.training.outputs.loggers import read_json_lines

HERE = pathlib.Path(__file__).resolve().parent
WORKLOADS = (
    "ppo:HalfCheetah-v5:300000",
    "ppo:Hopper-v5:300000",
    "sac:HalfCheetah-v5:50000",
    "sac:Hopper-v5:50000",
)


def timed(command: list[str]) -> tuple[float, str]:
    """Runs ``command`` to its end; its wall time and standard output."""
    start = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return time.perf_counter() - start, done.stdout


def final_evaluation(run: pathlib.Path) -> tuple[float, float]:
    """The last evaluation's return and its env steps, from a run folder's metrics."""
    rows = [r for r in read_json_lines(run / "metrics.jsonl") if "eval/return_mean" in r]
    return float(rows[-1]["eval/return_mean"]), float(rows[-1]["env_steps"])


def ours(algorithm: str, env: str, steps: int, seed: int, every: int, out: pathlib.Path):
    command = [sys.executable, "-m", "jaxlearner.cli", "train", algorithm, "--env", env]
    command += ["--max-steps", str(steps), "--eval-every", str(every), "--seed", str(seed)]
    command += ["--out", str(out), "--no-compilation-cache", "--no-progress"]
    # Equal budgets: no stop at gymnasium's reward_threshold (HalfCheetah's 4800 ended a
    # run at 226k of 300k env steps), as the peer trains its whole budget.
    command += ["--stop-reward", "none"]
    wall, _ = timed(command)
    return wall, *closing_evaluation(out)


def closing_evaluation(run: pathlib.Path) -> tuple[float, float]:
    """The final policy's 10-episode deterministic evaluation (``jaxlearner eval RUN``, on
    the last checkpoint, after the timed run) and the env steps it was trained for; the
    command line's own closing evaluation is printed, not kept in the run folder."""
    done = subprocess.run(
        [sys.executable, "-m", "jaxlearner.cli", "eval", str(run), "--episodes", "10"],
        check=True,
        capture_output=True,
        text=True,
    )
    found = re.search(r"return (-?[0-9.]+)", done.stdout)
    if found is None:
        raise RuntimeError(f"jaxlearner eval {run} printed no return: {done.stdout!r}")
    rows = read_json_lines(run / "metrics.jsonl")
    return float(found.group(1)), max(float(r.get("env_steps", 0)) for r in rows)


def peer(python: str, algorithm: str, env: str, steps: int, seed: int, every: int, out):
    command = [python, str(HERE / "peer_zoo.py"), algorithm, env, "--seed", str(seed)]
    command += ["--max-steps", str(steps), "--eval-every", str(every), "--out", str(out)]
    wall, _ = timed(command)
    return wall, *final_evaluation(out)


def summary(rows: list[dict]) -> dict[str, float]:
    returns = [r["final_return"] for r in rows]
    return {
        "final_return_mean": statistics.fmean(returns),
        "final_return_min": min(returns),
        "final_return_max": max(returns),
        "wall_s_mean": statistics.fmean(r["wall_s"] for r in rows),
        "env_steps_per_s": statistics.fmean(r["env_steps"] / r["wall_s"] for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peer-python", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    parser.add_argument("--eval-every-ppo", type=int, default=25_000)
    parser.add_argument("--eval-every-sac", type=int, default=5_000)
    parser.add_argument(
        "--name",
        default="bench_mujoco",
        help="the sitting's name: results/NAME.json, results/NAME-ALGO-ENV.png and runs/NAME "
        "(a new name keeps an earlier sitting's files)",
    )
    parser.add_argument("--runs", type=pathlib.Path, default=None)
    args = parser.parse_args()
    args.runs = args.runs or pathlib.Path("runs") / args.name
    load_before = os.getloadavg()
    report: dict = {"machine": machine(), "load_before": load_before, "workloads": {}}
    for workload in args.workloads:
        algorithm, env, steps = workload.split(":")
        every = args.eval_every_ppo if algorithm == "ppo" else args.eval_every_sac
        results: dict[str, list[dict]] = {"jaxlearner": [], "peer": []}
        folder = args.runs / f"{algorithm}-{env}"
        for seed in args.seeds:  # interleaved: ours, peer, ours, peer, ...
            for side, run in (("jaxlearner", ours), ("peer", None)):
                out = folder / f"{side}-{seed}"
                if run is ours:
                    wall, final, env_steps = ours(algorithm, env, int(steps), seed, every, out)
                else:
                    wall, final, env_steps = peer(
                        args.peer_python, algorithm, env, int(steps), seed, every, out
                    )
                row = {"seed": seed, "wall_s": wall, "final_return": final, "env_steps": env_steps}
                results[side].append(row)
                print(workload, side, json.dumps(row), "load", os.getloadavg(), flush=True)
        entry = {side: {"runs": rows, **summary(rows)} for side, rows in results.items()}
        entry["wall_ratio"] = entry["jaxlearner"]["wall_s_mean"] / entry["peer"]["wall_s_mean"]
        runs = sorted(str(p) for p in folder.iterdir() if p.is_dir())
        prefix = "mujoco" if args.name == "bench_mujoco" else args.name
        png = HERE / "results" / f"{prefix}-{algorithm}-{env}.png"
        subprocess.run(
            [sys.executable, "-m", "jaxlearner.cli", "plot", *runs, "--out", str(png)], check=True
        )
        entry["plot"] = str(png.relative_to(HERE.parent))
        report["workloads"][workload] = entry
        report["load_after"] = os.getloadavg()
        write_results(args.name, report)  # after each workload: a cut sitting keeps its rows
        print(workload, json.dumps({k: v for k, v in entry.items() if k != "jaxlearner"}))
    print(HERE / "results" / f"{args.name}.json")


if __name__ == "__main__":
    main()
