"""``learner.on(n).update`` time per device count, on the PPO workload of bench_update.py.

Run: ``python benchmarks/bench_group.py [--repeats 5] [--fake-cpu-devices 8]``.
On a CPU host the devices are fake (``--xla_force_host_platform_device_count``)
and share the same cores, so the table shows the group's overhead, not
scaling; on a GPU/TPU host (no fake devices) it shows scaling. Writes
``benchmarks/results/bench_group.json``.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--repeats", type=int, default=5)
parser.add_argument("--fake-cpu-devices", type=int, default=8)
args = parser.parse_args()
if args.fake_cpu_devices:
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_force_host_platform_device_count={args.fake_cpu_devices}"
    )

import jax  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ppo_workload as w  # noqa: E402


def main() -> None:
    batch = w.make_batch()
    # 4000 rows and minibatches of 128 split over 1, 2, 4 and 8 devices.
    counts = [n for n in (1, 2, 4, 8) if n <= jax.device_count()]
    learner = w.make_learner()
    state = learner.init(jax.random.key(0))
    calls, holders = {"learner.update (no mesh)": None}, {}
    holders["learner.update (no mesh)"] = state

    def plain():
        holders["learner.update (no mesh)"], metrics = learner.update(
            holders["learner.update (no mesh)"], batch
        )
        return metrics

    calls["learner.update (no mesh)"] = plain
    for n in counts:
        placed = learner.on(n)
        name = f"mesh, {n} device{'s' if n > 1 else ''}"
        holders[name] = placed.placement.put(state)

        def call(placed=placed, name=name):
            holders[name], metrics = placed.update(holders[name], batch)
            return metrics

        calls[name] = call
    results = w.measure(calls, args.repeats)
    report = {"machine": w.machine(), "results": results}
    w.write_results("bench_group", report)
    print(f"machine: {report['machine']}")
    print(w.table(results))


if __name__ == "__main__":
    main()
