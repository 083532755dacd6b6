"""Anakin's lower + compile beside the fused reference's, fresh processes (issue 24 item 5).

Run: ``python benchmarks/anakin_compile.py [--seeds 1 8] [--rounds 5] [--before DIR]
[--out results/anakin_compile-DATE.json]``. Each round starts one process per program and
seed count, in turn: jaxlearner's anakin PPO at purejaxrl's config (``bench_anakin.peer_trains``)
with its evaluation in the program and with ``evaluate=False``, and the fused reference; with
``--before DIR`` (another checkout of this repository, e.g. a ``git worktree`` of an older
commit) the two anakin programs built from that checkout run in the same rounds. A process
imports, builds, then times ``jax.jit(jax.vmap(train)).trace(keys)``, ``.lower()`` and
``.compile()`` once: a user's first compilation (no compilation cache), which a second call in
the same process would undercount. Prints per program the medians (trace + lower, compile,
total), its optimized HLO's fusion count (XLA:CPU compiles each fusion as a kernel, about 5 ms
apiece here), and the total's ratio to the reference's median; the load average is printed
with each round.
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

HERE = pathlib.Path(__file__).resolve().parent
PROGRAMS = {
    "anakin": "jaxlearner anakin",
    "anakin, evaluate=False": "jaxlearner anakin, evaluate=False",
    "reference": "fused reference (purejaxrl-style)",
}


def measure(root: pathlib.Path, program: str, seeds: int) -> dict:
    """One program's first trace, lower and compile in this process."""
    sys.path[:0] = [str(root), str(root / "benchmarks")]
    import bench_anakin
    import fused_ppo
    import jax

    train = bench_anakin.peer_trains(fused_ppo.FusedPPOConfig())[PROGRAMS[program]]
    keys = jax.random.split(jax.random.key(0), seeds)
    start = time.perf_counter()
    lowered = jax.jit(jax.vmap(train)).trace(keys).lower()
    lowered_at = time.perf_counter()
    text = lowered.compile().as_text()
    compiled_at = time.perf_counter()
    return {
        "lower_s": lowered_at - start,
        "compile_s": compiled_at - lowered_at,
        "total_s": compiled_at - start,
        "fusions": len(re.findall(r" fusion\(", text)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=pathlib.Path, help="another checkout's anakin, beside")
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)  # root, program, seeds
    args = parser.parse_args()
    if args.child:
        root, program, seeds = args.child
        print(json.dumps(measure(pathlib.Path(root), program, int(seeds))), flush=True)
        return
    if args.rounds < 1 or min(args.seeds) < 1:
        parser.error(f"--rounds and --seeds must be at least 1, got {args.rounds}, {args.seeds}")
    if args.before and not (args.before / "benchmarks" / "bench_anakin.py").is_file():
        parser.error(f"--before {args.before}: not a checkout of this repository")
    runs = [(HERE.parent, name, name) for name in PROGRAMS]
    if args.before:
        before = [name for name in PROGRAMS if name != "reference"]
        runs += [(args.before, name, f"{name} (before)") for name in before]
    results: dict[str, list[dict]] = {}
    for round_ in range(args.rounds):
        print(f"round {round_ + 1}, load average {os.getloadavg()[0]:.2f}", flush=True)
        for seeds in args.seeds:
            for root, program, label in runs:
                child = [sys.executable, __file__, "--child", str(root), program, str(seeds)]
                done = subprocess.run(child, capture_output=True, text=True, check=True)
                line = json.loads(done.stdout.strip().splitlines()[-1])
                results.setdefault(f"{label}, {seeds} seeds", []).append(line)
    summary = {}
    for seeds in args.seeds:
        reference = statistics.median(r["total_s"] for r in results[f"reference, {seeds} seeds"])
        for key, rows in results.items():
            if not key.endswith(f", {seeds} seeds"):
                continue
            medians = {k: statistics.median(r[k] for r in rows) for k in ("lower_s", "compile_s")}
            total = statistics.median(r["total_s"] for r in rows)
            summary[key] = {**medians, "total_s": total, "fusions": rows[0]["fusions"]}
            summary[key]["over_reference"] = total / reference
            print(
                f"{key}: lower {medians['lower_s']:.2f} s, compile {medians['compile_s']:.2f} s, "
                f"total {total:.2f} s ({total / reference:.2f}x the reference), "
                f"{rows[0]['fusions']} fusions"
            )
    if args.out:
        args.out.write_text(json.dumps({"runs": results, "medians": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
