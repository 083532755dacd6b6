"""Where the time of ``jaxlearner train ppo`` goes, whole process (issue 24, item 1).

Run: ``python benchmarks/profile_train.py [--algorithm ppo] [--seeds 0 1 2]
[--compare-compile-ahead]`` (the last: per seed, a run with the Trainer's ``compile_ahead``
off right after the one with it on, and the ratio of their median whole-process times). Each seed
is a fresh process that runs the command line's ``train`` with its embedded defaults
(PPO: CartPole-v1 until two evaluations in a row reach 475) and the compilation cache
off, as ``bench_e2e.py --cache off`` does. Inside it, wall-clock spans are recorded
around:

- ``import``: ``import jaxlearner.cli`` (jax, flax, optax, gymnasium, ...);
- ``env step``: the vectorized gymnasium environments' ``step`` in the rollouts;
- ``rollout (policy, host)``: the rest of ``EnvRunner.sample``: the jitted policy's
  dispatch and wait, copying actions to the host, stacking the rollout;
- ``learn (postprocess, update)``: the trainer's feed, which postprocesses (GAE) and
  dispatches the update, and the rest of ``Driver.step`` that waits for its metrics;
- ``evaluation``: ``Driver.eval``'s episodes;
- ``checkpoint``: ``CheckpointManager.save`` (orbax, asynchronous) and ``close``;
- ``other``: the rest (argument parsing, building the learner, writers, start-up).

Compilation (tracing, lowering and XLA, from ``jax.monitoring``) is counted inside the
span that triggered it and reported beside it. Spans nest (``env step`` inside the
rollout, the rollout inside ``Driver.step``); each row is exclusive of the rows inside
it. No cProfile: its overhead would inflate the Python-heavy rows. Writes
``benchmarks/results/profile_train.json``.
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

ROWS = ("import", "env step", "rollout", "learn", "evaluation", "checkpoint", "other")
LABELS = {
    "rollout": "rollout (policy, host)",
    "learn": "learn (postprocess, update)",
}

# The child: times the spans, then prints one JSON line of seconds per row and of the
# compilation inside each.
CHILD = r"""
import json, sys, time
spans = []  # (row, start, end) in time.time()
start = time.time()
import jaxlearner.cli
spans.append(("import", start, time.time()))
from jaxlearner.training import compile_clock
compile_clock.listen()
import gymnasium
from jaxlearner.checkpoint.manager import CheckpointManager
from jaxlearner.training.env_runner import EnvRunner
from jaxlearner.training.driver import Driver
from jaxlearner.training.trainer import EnvEngine

def timed(owner, name, row):
    inner = getattr(owner, name)
    def wrapper(*args, **kwargs):
        began = time.time()
        try:
            return inner(*args, **kwargs)
        finally:
            spans.append((row, began, time.time()))
    setattr(owner, name, wrapper)

for vector_env in (gymnasium.vector.SyncVectorEnv, gymnasium.vector.AsyncVectorEnv):
    timed(vector_env, "step", "env step")
timed(EnvRunner, "sample", "rollout")
timed(Driver, "step", "learn")  # the step less its rollout: postprocess, update, metrics
timed(Driver, "eval", "evaluation")
timed(CheckpointManager, "save", "checkpoint")
timed(CheckpointManager, "close", "checkpoint")
if sys.argv[1] == "--no-compile-ahead":  # the A/B of --compare-compile-ahead
    sys.argv.pop(1)
    made = EnvEngine.__init__
    def without_compile_ahead(self, *args, **kwargs):
        made(self, *args, **{**kwargs, "compile_ahead": False})
    EnvEngine.__init__ = without_compile_ahead
code = jaxlearner.cli.main(sys.argv[1:])
end = time.time()
compile_spans = list(compile_clock._SPANS)
def merged(intervals):
    out = []
    for b, e in sorted(intervals):
        if out and b <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((b, e))
    return out

# Exclusive seconds: each span less the spans nested in it.
rows, compiling = {}, {}
for row, began, ended in spans:
    inner = merged(
        (b, e) for r, b, e in spans if began <= b and e <= ended and (b, e) != (began, ended)
    )
    own = (ended - began) - sum(e - b for b, e in inner)
    own_compile = compile_clock.union_seconds(compile_spans, began, ended) - sum(
        compile_clock.union_seconds(compile_spans, b, e) for b, e in inner
    )
    rows[row] = rows.get(row, 0.0) + own
    compiling[row] = compiling.get(row, 0.0) + max(own_compile, 0.0)
total = end - start
rows["other"] = total - sum(e - b for b, e in merged((b, e) for _, b, e in spans))
compiling["other"] = compile_clock.union_seconds(compile_spans, start, end) - sum(
    compiling.values())
print(json.dumps({"code": code, "total": total, "rows": rows, "compile": compiling}))
"""


def profile_once(
    algorithm: str, seed: int, folder: pathlib.Path, compile_ahead: bool = True
) -> dict:
    """One ``jaxlearner train`` in a fresh process, with its spans; the child's report."""
    out = folder / f"{algorithm}-{seed}-{compile_ahead}"
    argv = [] if compile_ahead else ["--no-compile-ahead"]
    argv += ["train", algorithm, "--out", str(out), "--seed", str(seed), "--no-progress"]
    argv.append("--no-compilation-cache")
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        raise SystemExit(f"jaxlearner train failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(reports: list[dict]) -> str:
    """Median seconds per row, of them compiling, and the share of the whole process."""
    total = statistics.median(r["total"] for r in reports)
    lines = [
        "| where | seconds (median) | of it compiling | share |",
        "|---|---|---|---|",
    ]
    for row in ROWS:
        seconds = statistics.median(r["rows"].get(row, 0.0) for r in reports)
        compiling = statistics.median(r["compile"].get(row, 0.0) for r in reports)
        lines.append(
            f"| {LABELS.get(row, row)} | {seconds:.2f} | {compiling:.2f} | {seconds / total:.0%} |"
        )
    lines.append(f"| **whole process** | {total:.2f} | | 100% |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="ppo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--compare-compile-ahead",
        action="store_true",
        help="per seed, a run with the Trainer's compile_ahead off right after one with it on",
    )
    args = parser.parse_args()
    from ppo_workload import machine, write_results

    load_before = os.getloadavg()
    variants = (True, False) if args.compare_compile_ahead else (True,)
    reports: dict[bool, list[dict]] = {variant: [] for variant in variants}
    with tempfile.TemporaryDirectory() as folder:
        for seed in args.seeds:
            for variant in variants:
                report = profile_once(args.algorithm, seed, pathlib.Path(folder), variant)
                reports[variant].append(report)
                print(f"seed {seed}, compile_ahead={variant}: {json.dumps(report)}", flush=True)
    for variant in variants:
        print(f"compile_ahead={variant}:\n{table(reports[variant])}")
    load = {"before": load_before, "after": os.getloadavg()}
    print(f"{machine()}; load average {load}")
    name = f"profile_train-{args.algorithm}"
    results = {"machine": machine(), "load": load, "seeds": args.seeds, "reports": reports[True]}
    if args.compare_compile_ahead:
        name += "-compile-ahead-ab"
        results["reports_without_compile_ahead"] = reports[False]
        ratio = statistics.median(r["total"] for r in reports[True]) / statistics.median(
            r["total"] for r in reports[False]
        )
        results["median_total_ratio"] = ratio
        print(f"median whole-process time, compile_ahead on / off: {ratio:.3f}")
    print(f"wrote {write_results(name, results)}")


if __name__ == "__main__":
    main()
