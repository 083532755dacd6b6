"""Anakin and the fused reference under XLA:CPU settings, one process per setting (issue 24).

Run: ``python benchmarks/anakin_xla_flags.py [--taskset-one-core] [--repeats 3]
[--out results/anakin_xla_flags-DATE.jsonl] -- "" "--xla_cpu_use_xnnpack=true" ...`` (after
``--``, one ``XLA_FLAGS`` value per run; ``""`` is XLA's defaults). For each value a fresh
process with ``XLA_FLAGS`` set to it compiles anakin's PPO program
(``evaluate=False``) and the fused reference at purejaxrl's config, 1 seed
(``bench_anakin.peer_trains``), makes one untimed call each (whose return it reads), then
``--repeats`` calls interleaved, and prints one JSON line: the flags, each program's compile
time, median and fastest call, return, and the load average. ``--taskset-one-core`` adds a run
pinned to CPU 0 with no flags. The ratio to read is anakin's against the reference's in the
same line: a setting the library could choose for its own programs (``compiler_options``) is
only a lever if it moves that ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
NAMES = ("jaxlearner anakin, evaluate=False", "fused reference (purejaxrl-style)")


def measure(repeats: int) -> dict:
    """Compile and time both programs in this process (``XLA_FLAGS`` already set)."""
    sys.path.insert(0, str(HERE))
    import bench_anakin
    import fused_ppo
    import jax

    trains = bench_anakin.peer_trains(fused_ppo.FusedPPOConfig())
    keys = jax.random.split(jax.random.key(0), 1)
    compiled, compile_s, returns = {}, {}, {}
    for name in NAMES:
        start = time.perf_counter()
        compiled[name] = jax.jit(jax.vmap(trains[name])).lower(keys).compile()
        compile_s[name] = time.perf_counter() - start
        returns[name] = bench_anakin.final_return(jax.block_until_ready(compiled[name](keys))[1])
    times = {name: [] for name in NAMES}
    for _ in range(repeats):
        for name in NAMES:
            start = time.perf_counter()
            jax.block_until_ready(compiled[name](keys))
            times[name].append(time.perf_counter() - start)
    anakin, reference = (statistics.median(times[name]) for name in NAMES)
    return {
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "programs": {
            name: {
                "lower_and_compile_s": compile_s[name],
                "median_s": statistics.median(times[name]),
                "fastest_s": min(times[name]),
                "times_s": times[name],
                "final_return": returns[name],
            }
            for name in NAMES
        },
        "anakin_over_reference_env_steps_per_s": reference / anakin,
        "load_average_1min": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("flags", nargs="*", help="XLA_FLAGS values, one run each, after --")
    parser.add_argument("--taskset-one-core", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.child:
        print(json.dumps(measure(args.repeats)), flush=True)
        return
    if not args.flags and not args.taskset_one_core:
        parser.error('nothing to run: XLA_FLAGS values after -- (e.g. -- "") or --taskset-one-core')
    runs = [([], flags) for flags in args.flags]
    if args.taskset_one_core:
        runs.append((["taskset", "-c", "0"], ""))
    child = [sys.executable, __file__, "--child", "--repeats", str(args.repeats)]
    for prefix, flags in runs:
        env = {**os.environ, "XLA_FLAGS": flags}
        done = subprocess.run(prefix + child, env=env, capture_output=True, text=True, check=True)
        line = json.loads(done.stdout.strip().splitlines()[-1])
        line["pinned_to_one_core"] = bool(prefix)
        print(json.dumps(line), flush=True)
        if args.out:
            with args.out.open("a") as out:
                out.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
