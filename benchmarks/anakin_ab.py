"""Piecewise schedules with and without ``jnp.interp``'s search loop, in anakin (issue 24).

Run: ``python benchmarks/schedule_loop_ab.py [--seeds 1] [--repeats 5]``. Builds anakin's PPO
program at purejaxrl's config (``evaluate=False``) twice from the same code, once with the
schedules' ``interpolate`` swapped for ``jnp.interp`` while it is traced (the loop) and once
as it is (no loop), plus the fused reference (all three from ``bench_anakin.peer_trains``);
checks the search loop is in the one compiled program and not the other and that the two
give bit-equal outputs, then times them interleaved (A, B, reference, A, B, ...). Prints the
medians; writes nothing.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import bench_anakin
import fused_ppo

from jaxlearner.core import schedules


def compiled_anakin(reference, keys, with_loop: bool):
    """Anakin's program (``bench_anakin.peer_trains``, ``evaluate=False``), its schedules
    traced through ``jnp.interp`` when ``with_loop``. The trains are built afresh per
    variant, so no jitted function inside keeps a trace of the other variant."""
    train = bench_anakin.peer_trains(reference)["jaxlearner anakin, evaluate=False"]
    without_loop = schedules.interpolate
    if with_loop:
        schedules.interpolate = lambda x, xp, fp: jnp.interp(x, xp, fp)
    try:
        compiled = jax.jit(jax.vmap(train)).lower(keys).compile()
    finally:
        schedules.interpolate = without_loop
    searches = "searchsorted_scan" in compiled.as_text()
    assert searches == with_loop, f"with_loop={with_loop}, but the search loop: {searches}"
    return compiled


def _host(leaf):
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(leaf))
    return np.asarray(leaf)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    reference = fused_ppo.FusedPPOConfig()
    keys = jax.random.split(jax.random.key(0), args.seeds)
    programs = {}
    for name, with_loop in (("with the loop", True), ("without", False)):
        start = time.perf_counter()
        programs[name] = compiled_anakin(reference, keys, with_loop)
        print(f"{name}: lower + compile {time.perf_counter() - start:.1f} s", flush=True)
    start = time.perf_counter()
    train = bench_anakin.peer_trains(reference)["fused reference (purejaxrl-style)"]
    programs["reference"] = jax.jit(jax.vmap(train)).lower(keys).compile()
    print(f"reference: lower + compile {time.perf_counter() - start:.1f} s")
    outputs = {name: jax.block_until_ready(program(keys)) for name, program in programs.items()}
    leaves = [jax.tree.leaves(outputs[name]) for name in ("with the loop", "without")]
    pairs = zip(*leaves, strict=True)
    equal = all(np.array_equal(_host(a), _host(b), equal_nan=True) for a, b in pairs)
    print("the two jaxlearner programs' outputs bit-equal:", equal)
    times = {name: [] for name in programs}
    for _ in range(args.repeats):
        for name, program in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(program(keys))
            times[name].append(time.perf_counter() - start)
    steps = args.seeds * reference.num_updates * reference.num_envs * reference.num_steps
    for name, calls in times.items():
        median = statistics.median(calls)
        print(
            f"{name}: median {median:.2f} s, fastest {min(calls):.2f} s, "
            f"{steps / median:,.0f} env steps/s; calls {[round(c, 2) for c in calls]}"
        )
    print("load average", pathlib.Path("/proc/loadavg").read_text().split()[:3])


if __name__ == "__main__":
    main()
