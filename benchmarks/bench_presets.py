"""The preset matrix: every classic-control row and the MuJoCo PPO and SAC rows beside the library
whose settings they are, same budget, same evaluation, a whole process each.

Run: ``python benchmarks/bench_presets.py --peer-python PEER_VENV/bin/python [--rows PATTERN
...] [--seeds 0 1 2] [--full-mujoco]``, one row at a time and never beside other heavy work
(the wall times are compared). ``--rows`` takes ``fnmatch`` patterns of the rows' names
(``"ppo/Acrobot-v1*"``, ``"dqn/*"``); the default is :data:`MATRIX`. ``--table`` only rebuilds
the table from the results already kept.

For each row and seed, one after the other (ours, peer, ours, peer, ...):

* ours: ``jaxlearner train ALGO --env ENV --preset ORIGIN --seed S --stop-reward none
  --no-compilation-cache`` at the row's budget (MuJoCo: :data:`MUJOCO_BUDGETS` unless
  ``--full-mujoco``, with ``--keep-schedules`` so that the schedules run as the peer's do),
  evaluating every ``eval_every`` env steps; then ``jaxlearner eval RUN --episodes 10 --seed
  S+10000`` on the last checkpoint (10 deterministic episodes, after the timed run);
* the peer: ``peer_zoo.py`` in the peer virtualenv (SB3 PPO, SB3 DQN, sbx SAC or sbx TD3
  with RL Zoo's entry for the row; a row tuned here runs beside the zoo's entry it was tuned
  from), the same budget, cadence and final evaluation, every evaluation from the same starts
  (``--eval-seed S+10000``: episode ``i`` from ``reset(seed=S+10000+i)`` on both sides).
  A row with no zoo entry behind it (APPO's) has no peer and says so.

Each run's result is kept as ``benchmarks/results/presets/ROW/SIDE-SEED.json`` as soon as the
run ends, and a run whose file exists is not run again (delete it to rerun), so the matrix is
filled over several sittings; the run folders go under ``--runs``. After every run the row's
summary (``results/presets/ROW.json``: each side's mean, min and max final return, mean wall
time, the wall ratio and the verdict) and the table of every row with results
(``results/presets/table.md``, what ``docs/benchmarks.md`` shows) are written again.

The verdict: ``ok`` when our mean final return is at least the peer's lowest seed (within its
seed spread, or above it) and our mean wall time at most the peer's; ``return`` or ``slower``
(or both) when not; ``partial`` until both sides have every seed.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ppo_workload import machine

from jaxlearner.algorithms.presets import PRESETS, Preset

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results" / "presets"
CLASSIC = (
    "CartPole-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Pendulum-v1",
    "LunarLander-v3",
)
"""The classic-control (and Box2D) environments of the matrix, at their rows' full budgets."""
MUJOCO_BUDGETS = {"ppo": 300_000, "sac": 50_000, "td3": 50_000}
"""The MuJoCo rows' reduced budgets (their full 1M-10M do not fit a sitting on two cores)."""
ONLINE = ("ppo", "appo", "dqn", "sac", "td3")
EVAL_SEED_OFFSET = 10_000
"""Both sides' final evaluation of training seed S starts its episodes from ``S + 10_000 + i``."""


def matrix() -> list[Preset]:
    """The rows of the matrix: every online classic-control row, the MuJoCo PPO and SAC rows."""
    rows = []
    for row in PRESETS:
        if row.algorithm not in ONLINE:
            continue
        mujoco = row.env_id.endswith("-v5") and row.algorithm in MUJOCO_BUDGETS
        if row.env_id in CLASSIC or mujoco:
            rows.append(row)
    return rows


def slug(row: Preset) -> str:
    """A row's name as a folder name: ``ppo-Acrobot-v1-rl_zoo3``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{row.algorithm}-{row.env_id}-{row.origin}")


def budget(row: Preset, full_mujoco: bool) -> int:
    if row.env_id.endswith("-v5") and not full_mujoco:
        return min(row.max_steps, MUJOCO_BUDGETS[row.algorithm])
    return row.max_steps


def zoo_entry(row: Preset) -> str | None:
    """The RL Zoo entry behind a row (its own, or the one a row tuned here started from)."""
    found = re.search(r"rl_zoo3/hyperparams/(\w+)\.yml: (\S+)", row.source)
    if found is None or found.group(1) != row.algorithm:
        return None
    return found.group(2)


def run(command: list[str]) -> tuple[float, str]:
    """``command`` to its end: its wall time and standard output."""
    start = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return time.perf_counter() - start, done.stdout


def last_env_steps(folder: pathlib.Path) -> float:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return max(float(r.get("env_steps", 0)) for r in rows)


def eval_seed(seed: int) -> int:
    """The final evaluation's starts for training seed ``seed``, one seed for both sides: the
    10 episodes start from ``reset(seed=eval_seed + i)``, ``i < 10``."""
    return EVAL_SEED_OFFSET + seed


def ours(row: Preset, seed: int, steps: int, out: pathlib.Path) -> dict:
    command = [sys.executable, "-m", "jaxlearner.cli", "train", row.algorithm, "--env", row.env_id]
    command += ["--preset", row.origin, "--seed", str(seed), "--max-steps", str(steps)]
    command += ["--eval-every", str(row.eval_every), "--stop-reward", "none", "--out", str(out)]
    command += ["--no-compilation-cache", "--no-progress", "--keep-schedules"]
    wall, _ = run(command)
    evaluation = [sys.executable, "-m", "jaxlearner.cli", "eval", str(out), "--episodes", "10"]
    _, printed = run([*evaluation, "--seed", str(eval_seed(seed))])
    found = re.search(r"return (-?[0-9.]+)", printed)
    if found is None:
        raise RuntimeError(f"jaxlearner eval {out} printed no return: {printed!r}")
    return {
        "final_return": float(found.group(1)),
        "wall_s": wall,
        "env_steps": last_env_steps(out),
        "eval_seed": eval_seed(seed),
    }


def peer(python: str, row: Preset, entry: str, seed: int, steps: int, out: pathlib.Path) -> dict:
    command = [python, str(HERE / "peer_zoo.py"), row.algorithm, row.env_id, "--entry", entry]
    command += ["--seed", str(seed), "--max-steps", str(steps), "--eval-every", str(row.eval_every)]
    command += ["--eval-seed", str(eval_seed(seed))]
    wall, printed = run([*command, "--out", str(out)])
    result = json.loads(printed.strip().splitlines()[-1])
    return {
        "final_return": result["final_return"],
        "wall_s": wall,
        "env_steps": result["env_steps"],
        "eval_seed": eval_seed(seed),
    }


def summary(runs: list[dict]) -> dict:
    returns = [r["final_return"] for r in runs]
    return {
        "seeds": [r["seed"] for r in runs],
        "final_return_mean": statistics.fmean(returns),
        "final_return_min": min(returns),
        "final_return_max": max(returns),
        "wall_s_mean": statistics.fmean(r["wall_s"] for r in runs),
    }


def row_summary(row: Preset, seeds: list[int], entry: str | None, steps: int) -> dict:
    """The row's kept runs, summarized, with the verdict."""
    folder = RESULTS / slug(row)
    sides: dict[str, list[dict]] = {"jaxlearner": [], "peer": []}
    for path in sorted(folder.glob("*.json")):
        side, seed = path.stem.rsplit("-", 1)
        sides[side].append({"seed": int(seed), **json.loads(path.read_text())})
    entry_info = {"row": row.name, "source": row.source, "budget": steps, "peer_entry": entry}
    report = {**entry_info, **{side: summary(r) for side, r in sides.items() if r}}
    report["shared_starts"] = all("eval_seed" in r for runs in sides.values() for r in runs)
    if entry is None:
        report["verdict"] = "no peer"
        return report
    complete = all(sorted(r["seed"] for r in sides[s]) == sorted(seeds) for s in sides)
    if not complete:
        report["verdict"] = "partial"
        return report
    ours_, theirs = report["jaxlearner"], report["peer"]
    report["wall_ratio"] = ours_["wall_s_mean"] / theirs["wall_s_mean"]
    failed = []
    if ours_["final_return_mean"] < theirs["final_return_min"]:
        failed.append("return")
    if report["wall_ratio"] > 1.0:
        failed.append("slower")
    report["verdict"] = " and ".join(failed) or "ok"
    return report


def _side(s: dict | None) -> str:
    """One side's cell: mean (min, max), seeds."""
    if s is None:
        return "-"
    spread = f"{s['final_return_min']:.1f}, {s['final_return_max']:.1f}"
    return f"{s['final_return_mean']:.1f} ({spread}), {len(s['seeds'])} seeds"


NOT_SHARED = (
    "(a) Run before 2026-12-02: the two sides' final evaluations did not start from the same "
    "states (ours from reset seeds 0-9 for every training seed, the peer's from seed + 10000 "
    "after its evaluations during the run had moved its environments' generator on). Since "
    "then both start episode i of training seed S from reset(seed=S + 10000 + i)."
)


def table() -> str:
    """Every summarized row as a markdown table."""
    lines = [
        "| row | budget | jaxlearner mean (min, max) | peer mean (min, max) | wall s ours / peer "
        "(ratio) | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for path in sorted(RESULTS.glob("*.json")):
        r = json.loads(path.read_text())
        ours_, theirs = _side(r.get("jaxlearner")), _side(r.get("peer"))
        walls = "-"
        if "jaxlearner" in r and "peer" in r:
            walls = f"{r['jaxlearner']['wall_s_mean']:.0f} / {r['peer']['wall_s_mean']:.0f}"
            walls += f" ({r['wall_ratio']:.2f}x)" if "wall_ratio" in r else ""
        peer_name = r["peer_entry"] or "none"
        lines.append(
            f"| {r['row']} (peer: {peer_name}) | {r['budget']:,} | {ours_} | {theirs} | {walls} "
            f"| {r['verdict']}{'' if r.get('shared_starts') else ' (a)'} |"
        )
    lines += ["", NOT_SHARED]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peer-python", default=None)
    parser.add_argument("--rows", nargs="+", default=["*"], help="fnmatch patterns of row names")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--full-mujoco", action="store_true")
    parser.add_argument("--runs", type=pathlib.Path, default=pathlib.Path("runs/bench_presets"))
    parser.add_argument("--table", action="store_true", help="only rebuild the table")
    args = parser.parse_args()
    rows = [r for r in matrix() if any(fnmatch.fnmatch(r.name, p) for p in args.rows)]
    if not args.table and args.peer_python is None:
        parser.error("--peer-python is needed to run rows (or --table to rebuild the table)")
    for row in [] if args.table else rows:
        entry, steps = zoo_entry(row), budget(row, args.full_mujoco)
        folder = RESULTS / slug(row)
        folder.mkdir(parents=True, exist_ok=True)
        for seed in args.seeds:
            sides = [("jaxlearner", None)] + ([("peer", entry)] if entry else [])
            for side, zoo in sides:
                kept = folder / f"{side}-{seed}.json"
                if kept.exists():
                    continue
                out = args.runs / slug(row) / f"{side}-{seed}-{int(time.time())}"
                load = os.getloadavg()
                if zoo is None:
                    result = ours(row, seed, steps, out)
                else:
                    result = peer(args.peer_python, row, zoo, seed, steps, out)
                result.update(load_before=load, load_after=os.getloadavg(), machine=machine())
                kept.write_text(json.dumps(result, indent=2) + "\n")
                print(row.name, side, seed, json.dumps(result), flush=True)
                summarized = row_summary(row, args.seeds, entry, steps)
                (RESULTS / f"{slug(row)}.json").write_text(json.dumps(summarized, indent=2) + "\n")
                (RESULTS / "table.md").write_text(table())
    for row in rows:
        summarized = row_summary(row, args.seeds, zoo_entry(row), budget(row, args.full_mujoco))
        if "jaxlearner" in summarized or "peer" in summarized:
            (RESULTS / f"{slug(row)}.json").write_text(json.dumps(summarized, indent=2) + "\n")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "table.md").write_text(table())
    print((RESULTS / "table.md").read_text())


if __name__ == "__main__":
    main()
