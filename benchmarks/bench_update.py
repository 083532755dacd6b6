"""``learner.update`` of the real PPO learner against a hand-written fused ``jax.jit``.

Run: ``python benchmarks/bench_update.py [--repeats 7]``. Writes
``benchmarks/results/bench_update.json`` and prints the markdown table for
``benchmarks/README.md``. The goal is a ratio of at most 1.05.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ppo_workload as w


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    batch = w.make_batch()
    learner = w.make_learner()
    state = learner.init(jax.random.key(0))
    hand_written, carry = w.make_hand_written(learner, state.modules[w.MODULE_ID])
    holder = {"state": state, "carry": carry}

    def learner_call():
        holder["state"], metrics = learner.update(holder["state"], batch)
        return metrics

    def baseline_call():
        holder["carry"], metrics = hand_written(holder["carry"], batch)
        return metrics

    results = w.measure(
        {"learner.update": learner_call, "hand-written jit": baseline_call}, args.repeats
    )
    ratio = results["learner.update"]["median_s"] / results["hand-written jit"]["median_s"]
    report = {
        "workload": "PPO (jl.algorithms.ppo), 4000 x obs 4, minibatch 128, 30 epochs, "
        "2 x 256x256 tanh MLPs, Adam, global-norm clip",
        "machine": w.machine(),
        "results": results,
        "ratio": ratio,
    }
    w.write_results("bench_update", report)
    print(f"machine: {report['machine']}")
    print(w.table(results))
    print(f"ratio learner / hand-written: {ratio:.3f} (goal <= 1.05)")


if __name__ == "__main__":
    main()
