"""Anakin's program with and without one change, beside the fused reference (issue 24).

Run: ``python benchmarks/anakin_ab.py --change CHANGE [--values V ...] [--seeds 1]
[--repeats 5]``. Builds anakin's PPO program at purejaxrl's config (``evaluate=False``) twice
from the same code, once with ``--change`` undone while it is traced and once as it is, plus
the fused reference (all three from ``bench_anakin.peer_trains``); checks the compiled programs
differ where the change says (so the A/B cannot compare two equal programs unnoticed), says
whether each anakin program's outputs are bit-equal to the first's, prints the return each
program reaches (``bench_anakin.final_return``), then times them interleaved (A, B, reference,
A, B, ...). Prints the medians; writes nothing. The changes:

* ``schedule-loop``: the schedules' ``interpolate`` against ``jnp.interp`` (a search loop per
  scheduled value per step);
* ``backward-unroll``: GAE's backward scan at ``returns.BACKWARD_UNROLL`` steps per loop
  iteration against one (on GPU and TPU; on the CPU the two programs are the same and the
  script says so);
* ``rollout-unroll``: the rollout's scan at ``rollouts.ROLLOUT_UNROLL`` steps per loop
  iteration against one (on CUDA; elsewhere the two programs are the same and the script
  says so);
* ``iteration-packed``: the iteration loop's metrics stored as one array per dtype
  (``core.packing.packed_scan``) against one array per metric (``lax.scan``).

``--values`` sweeps the change's setting instead (one program per value, named
``attribute=value``; the first is the one the others are checked against), e.g.
``--change rollout-unroll --values 1 4 16`` or ``--change backward-unroll --values 16 128``
(GAE's whole rollout in one loop iteration).
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import re
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import bench_anakin
import fused_ppo

from jaxlearner.algorithms.trajectories import returns
from jaxlearner.anakin import rollouts
from jaxlearner.core import schedules


def loop_trips(text: str, trips: int) -> int:
    """How many while loops of the optimized HLO ``text`` run ``trips`` times."""
    return len(re.findall(rf'"known_trip_count":{{"n":"{trips}"}}', text))


# name: (module, attribute, the value while the change is undone, whether a compiled program
# with the change undone differs from one with it: text, text -> bool)
CHANGES = {
    "schedule-loop": (
        schedules,
        "interpolate",
        lambda x, xp, fp: jnp.interp(x, xp, fp),
        lambda undone, done: "searchsorted_scan" in undone and "searchsorted_scan" not in done,
    ),
    "backward-unroll": (
        returns,
        "BACKWARD_UNROLL",
        1,
        lambda undone, done: loop_trips(undone, 128) > loop_trips(done, 128),
    ),
    "rollout-unroll": (rollouts, "ROLLOUT_UNROLL", 1, str.__ne__),
    "iteration-packed": (
        importlib.import_module("jaxlearner.anakin.train"),
        "packed_scan",
        lambda body, init, xs=None, length=None, unroll=1: jax.lax.scan(
            body, init, xs, length=length, unroll=unroll
        ),
        lambda undone, done: (
            undone.count("dynamic-update-slice") > done.count("dynamic-update-slice")
        ),
    ),
}


KEEP = object()  # compiled_anakin's value for the attribute as the code sets it


def compiled_anakin(reference, keys, change: str, value):
    """Anakin's program (``bench_anakin.peer_trains``, ``evaluate=False``), traced with
    ``change``'s attribute set to ``value`` (the code as it is where ``value`` is ``KEEP``).
    The trains are built afresh per variant, so no jitted function inside keeps a trace of the
    other variant."""
    train = bench_anakin.peer_trains(reference)["jaxlearner anakin, evaluate=False"]
    module, attribute, _, _ = CHANGES[change]
    kept = getattr(module, attribute)
    if value is not KEEP:
        setattr(module, attribute, value)
    try:
        return jax.jit(jax.vmap(train)).lower(keys).compile()
    finally:
        setattr(module, attribute, kept)


def variants(change: str, values: list[int] | None) -> dict[str, object]:
    """Name -> the attribute's value: "before" (undone) and "after" (as it is), or one per
    value of a sweep."""
    _, attribute, before, _ = CHANGES[change]
    if not values:
        return {"before": before, "after": KEEP}
    return {f"{attribute}={value}": value for value in values}


def _host(leaf):
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(leaf))
    return np.asarray(leaf)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--change", choices=sorted(CHANGES), required=True)
    parser.add_argument("--values", type=int, nargs="+", help="sweep the change's setting")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.values and not isinstance(CHANGES[args.change][2], int):
        sweepable = sorted(name for name, change in CHANGES.items() if isinstance(change[2], int))
        parser.error(f"--values sweeps a number; {args.change} has none (sweepable: {sweepable})")
    reference = fused_ppo.FusedPPOConfig()
    keys = jax.random.split(jax.random.key(0), args.seeds)
    programs = {}
    for name, value in variants(args.change, args.values).items():
        start = time.perf_counter()
        programs[name] = compiled_anakin(reference, keys, args.change, value)
        print(f"{name}: lower + compile {time.perf_counter() - start:.1f} s", flush=True)
    # A sweep's programs need only differ; before/after differ where the change says.
    differs = str.__ne__ if args.values else CHANGES[args.change][3]
    first, *others = list(programs)
    for name in others:
        where = {
            "rollout-unroll": " (it changes only the CUDA program)",
            "backward-unroll": " (it changes only the GPU and TPU programs)",
        }.get(args.change, "")
        assert differs(programs[first].as_text(), programs[name].as_text()), (
            f"{args.change}: {name}'s compiled program is {first}'s{where}"
        )
    start = time.perf_counter()
    train = bench_anakin.peer_trains(reference)["fused reference (purejaxrl-style)"]
    programs["reference"] = jax.jit(jax.vmap(train)).lower(keys).compile()
    print(f"reference: lower + compile {time.perf_counter() - start:.1f} s")
    outputs = {name: jax.block_until_ready(program(keys)) for name, program in programs.items()}
    for name in others:
        pairs = zip(jax.tree.leaves(outputs[first]), jax.tree.leaves(outputs[name]), strict=True)
        equal = all(np.array_equal(_host(a), _host(b), equal_nan=True) for a, b in pairs)
        print(f"{name}'s outputs bit-equal to {first}'s:", equal)
    for name, (_, metrics) in outputs.items():
        print(f"{name}: return, last 10 updates {bench_anakin.final_return(metrics):.0f}")
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
