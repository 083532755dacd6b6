"""Where the time of an anakin PPO iteration goes, beside the fused reference (issue 24, item 1).

Run: ``python benchmarks/profile_anakin.py [--seeds 1] [--updates 3] [--repeats 3]`` (with
``--seeds 8`` the profiled call hung once, every thread waiting, on 2026-11-27).

Both programs of ``bench_anakin.py --peer`` (``jaxlearner.anakin`` with ``evaluate=False`` and
the purejaxrl-style ``fused_ppo.py``, purejaxrl's CartPole config: 4 envs x 128 steps, 4 epochs
x 4 minibatches, 64x64 networks) run ``--updates`` updates, ``jax.jit(jax.vmap(train))`` over
the seeds. For each: the median of ``--repeats`` unprofiled calls (the wall time per update),
then one call under ``jax.profiler`` whose trace holds one event per executed XLA:CPU thunk
(a fusion, a copy, a dot, a custom call; the thunks inside a ``while`` loop once per trip).

Each event is attributed to a phase through the compiled HLO's nesting (which loop's body
holds the thunk's instruction), by the loop directly inside the outer loop over updates that
holds it: the first to run with 128 trips is the rollout (policy, action sampling and the
environment step, with the loops inside it); 4 trips with loops inside, the update (epochs of
minibatches); 5 trips, threefry's hash, which JAX lowers on CPU as a loop; any other
loop by its trip count (the reference's GAE scan: 128 steps that XLA runs as 8 trips); the
rest of the outer loop's body is "between the loops" (jaxlearner's postprocess,
whose GAE is no loop, schedules, metrics, shuffles). Reported per update: thunks executed and
profiled microseconds per phase. Profiling adds a fixed cost to every thunk, so the profiled
shares overweight the phases with many small thunks; the thunk counts are
exact and do not depend on the machine's load. Writes ``results/profile_anakin.json``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gzip
import json
import pathlib
import re
import statistics
import sys
import tempfile
import time

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_anakin
import fused_ppo
from ppo_workload import machine, write_results

VARIANTS = ("jaxlearner anakin, evaluate=False", "fused reference (purejaxrl-style)")

_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")
_INSTRUCTION = re.compile(r"^\s+(?:ROOT )?%?([\w.\-]+) = ")
_CALLED = re.compile(r"(?:body|to_apply|branch_computations|calls)=\{?([^}\s]+(?:, %[\w.\-]+)*)")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


@dataclasses.dataclass
class Hlo:
    """The compiled module's nesting: each instruction's computation, each computation's caller."""

    computation_of: dict[str, str]
    caller_of: dict[str, str]  # computation -> the instruction (a while, call, conditional)
    trips: dict[str, int]  # while instruction -> its known trip count


def parse_hlo(text: str) -> Hlo:
    """The nesting of ``compiled.as_text()``: which instruction calls which computation."""
    computation_of: dict[str, str] = {}
    caller_of: dict[str, str] = {}
    trips: dict[str, int] = {}
    current = ""
    for line in text.splitlines():
        head = _COMPUTATION.match(line)
        if head and not line.startswith(" "):
            current = head.group(1)
            continue
        found = _INSTRUCTION.match(line)
        if not found:
            continue
        name = found.group(1)
        computation_of[name] = current
        if " fusion(" in line:
            continue  # a fusion's inner instructions are not thunks of their own
        for group in _CALLED.findall(line):
            for callee in group.split(","):
                caller_of[callee.strip().lstrip("%")] = name
        trip = _TRIPS.search(line)
        if " while(" in line and trip:
            trips[name] = int(trip.group(1))
    return Hlo(computation_of, caller_of, trips)


def loop_chain(hlo: Hlo, instruction: str) -> list[str]:
    """The while loops around ``instruction``, outermost first."""
    chain = []
    computation = hlo.computation_of.get(instruction)
    while computation in hlo.caller_of:
        caller = hlo.caller_of[computation]
        if caller in hlo.trips:
            chain.append(caller)
        computation = hlo.computation_of.get(caller)
    return chain[::-1]


def trace_events(path: pathlib.Path) -> list[dict]:
    """All events of a profiler trace file (``*.trace.json.gz``, Chrome trace format)."""
    with gzip.open(path) as trace:
        return json.loads(trace.read())["traceEvents"]


def thunk_events(path: pathlib.Path) -> list[dict]:
    """The trace's events of executed thunks (named after their HLO instruction)."""
    return [
        e
        for e in trace_events(path)
        if e.get("ph") == "X"
        and not e["name"].startswith(("$", "end:"))
        and re.fullmatch(r"[\w\-]+\.\d+|[a-z_\-]+", e["name"])
    ]


def _nested(hlo: Hlo, loop: str) -> list[str]:
    """The loops directly or indirectly inside ``loop``."""
    return [w for w in hlo.trips if loop in loop_chain(hlo, w)]


def phases(
    hlo: Hlo, events: list[dict], updates: int, num_steps: int, epochs: int
) -> dict[str, dict[str, float]]:
    """Per update: thunks executed and profiled microseconds by phase."""
    outer = [w for w, n in hlo.trips.items() if n == updates]
    by_phase: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    first_seen: dict[str, float] = {}
    rows = []
    chains: dict[str, list[str]] = {}  # per instruction: a trace repeats each name many times
    for event in events:
        name = event["name"]
        if name not in hlo.computation_of or name in hlo.trips:
            continue
        if name not in chains:
            chains[name] = loop_chain(hlo, name)
        chain = chains[name]
        inside = [w for w in chain if w in outer]
        if not inside:
            rows.append(("outside the updates", name, event))
            continue
        depth = chain.index(inside[0])
        child = chain[depth + 1] if depth + 1 < len(chain) else None
        rows.append((child or "between", name, event))
        if child is not None:
            first_seen[child] = min(first_seen.get(child, event["ts"]), event["ts"])
    labels = {"between": "between the loops", "outside the updates": "outside the updates"}
    steps = [w for w in sorted(first_seen, key=first_seen.get) if hlo.trips[w] == num_steps]
    for index, loop in enumerate(steps):
        labels[loop] = f"rollout ({num_steps} steps)" if index == 0 else "GAE scan"
    for loop in first_seen:
        trips = hlo.trips[loop]
        if trips == 5:
            labels[loop] = "threefry's hash, rolled (5 trips)"
        elif trips == epochs and any(hlo.trips.get(w) for w in _nested(hlo, loop)):
            labels[loop] = f"update ({epochs} epochs of minibatches)"
        else:
            labels.setdefault(loop, f"another loop ({trips} trips)")
    for phase, _, event in rows:
        entry = by_phase[labels[phase]]
        entry[0] += 1
        entry[1] += event.get("dur", 0.0)
    return {
        phase: {"thunks": count / updates, "profiled_us": micros / updates}
        for phase, (count, micros) in by_phase.items()
    }


def time_and_trace(train, keys: jax.Array, repeats: int, trace_dir: str):
    """Compiles ``jax.jit(jax.vmap(train))``, calls it once, times ``repeats`` calls, then
    profiles one call into ``trace_dir``; returns the compiled program, the times (s) and the
    trace file."""
    compiled = jax.jit(jax.vmap(train)).lower(keys).compile()
    jax.block_until_ready(compiled(keys))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(keys))
        times.append(time.perf_counter() - start)
    jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
    jax.block_until_ready(compiled(keys))
    jax.profiler.stop_trace()
    return compiled, times, sorted(pathlib.Path(trace_dir).rglob("*.trace.json.gz"))[-1]


def profile(train, keys: jax.Array, config: fused_ppo.FusedPPOConfig, repeats: int) -> dict:
    """Wall time per update unprofiled, and the phases of one profiled call."""
    updates = config.num_updates
    with tempfile.TemporaryDirectory() as trace_dir:
        compiled, times, path = time_and_trace(train, keys, repeats, trace_dir)
        events = thunk_events(path)
    hlo = parse_hlo(compiled.as_text())
    return {
        "wall_us_per_update": statistics.median(times) / updates * 1e6,
        "phases": phases(hlo, events, updates, config.num_steps, config.update_epochs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    steps = fused_ppo.PURE_JAX_RL.num_envs * fused_ppo.PURE_JAX_RL.num_steps
    reference = dataclasses.replace(fused_ppo.PURE_JAX_RL, total_timesteps=steps * args.updates)
    trains = bench_anakin.peer_trains(reference)
    report = {"machine": machine(), "updates": args.updates, "results": []}
    for seeds in args.seeds:
        keys = jax.random.split(jax.random.key(0), seeds)
        for variant in VARIANTS:
            result = {"variant": variant, "seeds": seeds}
            result.update(profile(trains[variant], keys, reference, args.repeats))
            report["results"].append(result)
    print(
        "| variant | seeds | wall per update, unprofiled (ms) | phase | thunks per update "
        "| profiled ms per update | profiled share |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in report["results"]:
        total = sum(p["profiled_us"] for p in r["phases"].values())
        for phase, p in sorted(r["phases"].items(), key=lambda kv: -kv[1]["profiled_us"]):
            print(
                f"| {r['variant']} | {r['seeds']} | {r['wall_us_per_update'] / 1e3:.2f} | {phase} "
                f"| {p['thunks']:,.0f} | {p['profiled_us'] / 1e3:.2f} "
                f"| {p['profiled_us'] / total:.0%} |"
            )
    print(f"wrote {write_results('profile_anakin', report)}")


if __name__ == "__main__":
    main()
