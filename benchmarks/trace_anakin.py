"""Kernel-level profile of Anakin beside the fused reference, on any backend (issue 24, item 2).

Run: ``python benchmarks/trace_anakin.py --seeds 64 --updates 10 --out DIR [--variant anakin]``
(one process per variant is safer: on the 2-core CPU a second profiled call in the same process
hung once, as ``profile_anakin.py``'s did).

``profile_anakin.py`` attributes XLA:CPU thunks to phases; on a GPU the time is in kernels, so
this script keeps the raw material instead: for both programs of ``bench_anakin.py --peer``
(``jaxlearner.anakin`` with ``evaluate=False`` and the purejaxrl-style ``fused_ppo.py`` at
purejaxrl's CartPole config, ``--updates`` updates, ``jax.jit(jax.vmap(train))`` over the seeds)
it writes the optimized HLO (``NAME.hlo.txt``) and the profiler's trace of one call
(``NAME.trace.json.gz``, Chrome trace format) into ``--out``, and prints the median wall time
per update of ``--repeats`` unprofiled calls, then per trace process (host threads, each GPU
stream) the busy time and the events that take most of it, and per device the idle time
between kernels by the ops around it, so a first look needs no viewer.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import pathlib
import shutil
import statistics
import sys
import tempfile

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_anakin
import fused_ppo
from ppo_workload import machine
from profile_anakin import time_and_trace, trace_events

VARIANTS = {
    "jaxlearner anakin, evaluate=False": "anakin",
    "fused reference (purejaxrl-style)": "reference",
}


def process_names(events: list[dict]) -> dict[int, str]:
    """``{pid: name}`` of the trace's processes (host threads, each device)."""
    return {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}


def summarize(events: list[dict], updates: int, top: int) -> None:
    """Per process: busy microseconds per update and the ``top`` event names by time."""
    names = process_names(events)
    by_pid: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    counts: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for event in events:
        if event.get("ph") == "X":
            by_pid[event["pid"]][event["name"]] += event.get("dur", 0.0)
            counts[event["pid"]][event["name"]] += 1
    for pid, durations in sorted(by_pid.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(durations.values())
        print(
            f"  process {names.get(pid, pid)}: {sum(counts[pid].values()) / updates:,.0f} events, "
            f"{total / updates / 1e3:.2f} ms per update"
        )
        for name, micros in durations.most_common(top):
            print(
                f"    {micros / updates:9.1f} us/update  {counts[pid][name] / updates:7.1f} x  "
                f"{micros / total:5.1%}  {name[:110]}"
            )


def idle_gaps(events: list[dict], updates: int, top: int) -> None:
    """Per device process: span, busy and idle time per update, idle time by neighbouring ops.

    A latency-bound program leaves its device idle between kernels while the host launches the
    next one; each gap is attributed to the pair (HLO op of the kernel before, of the kernel
    after), which names the loop whose launches cost it (a kernel launched outside a command
    buffer shows up with its own fusion's name).
    """
    names = process_names(events)
    for pid, name in names.items():
        if "device" not in name:
            continue
        kernels = sorted(
            (e for e in events if e.get("pid") == pid and e.get("ph") == "X"),
            key=lambda e: e["ts"],
        )
        if not kernels:
            continue
        pairs: collections.Counter = collections.Counter()
        counts: collections.Counter = collections.Counter()
        busy, end, before = 0.0, kernels[0]["ts"], None
        for kernel in kernels:
            op = kernel["args"].get("hlo_op", kernel["name"])
            if kernel["ts"] > end:
                pairs[before, op] += kernel["ts"] - end
                counts[before, op] += 1
            finish = kernel["ts"] + kernel.get("dur", 0.0)
            if finish > end:
                busy += finish - max(kernel["ts"], end)
                end, before = finish, op
        span = end - kernels[0]["ts"]
        print(
            f"  {name}: span {span / updates / 1e3:.2f} ms per update, busy "
            f"{busy / updates / 1e3:.2f}, idle {(span - busy) / updates / 1e3:.2f}; idle by "
            "(op before, op after):"
        )
        for (first, second), micros in pairs.most_common(top):
            print(
                f"    {micros / updates:9.1f} us/update  {counts[first, second] / updates:7.1f} x"
                f"  {first} -> {second}"
            )


def trace_one(name: str, train, keys: jax.Array, updates: int, repeats: int, out: pathlib.Path):
    stem = VARIANTS[name]
    with tempfile.TemporaryDirectory() as trace_dir:
        compiled, times, path = time_and_trace(train, keys, repeats, trace_dir)
        shutil.copy(path, out / f"{stem}.trace.json.gz")
    (out / f"{stem}.hlo.txt").write_text(compiled.as_text())
    wall = statistics.median(times) / updates * 1e3
    print(f"\n{name}: {wall:.2f} ms per update unprofiled (median of {repeats})")
    return trace_events(out / f"{stem}.trace.json.gz")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=64)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument(
        "--variant", choices=sorted(VARIANTS.values()), nargs="+", default=list(VARIANTS.values())
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(machine())
    steps = fused_ppo.PURE_JAX_RL.num_envs * fused_ppo.PURE_JAX_RL.num_steps
    reference = dataclasses.replace(fused_ppo.PURE_JAX_RL, total_timesteps=steps * args.updates)
    trains = bench_anakin.peer_trains(reference)
    keys = jax.random.split(jax.random.key(0), args.seeds)
    for name in (name for name, stem in VARIANTS.items() if stem in args.variant):
        events = trace_one(name, trains[name], keys, args.updates, args.repeats, args.out)
        summarize(events, args.updates, args.top)
        idle_gaps(events, args.updates, args.top // 2)


if __name__ == "__main__":
    main()
