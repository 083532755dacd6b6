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
    parser.add_argument(
        "--stages-only", action="store_true", help="only lower and compile each, timed"
    )
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

    # Where compile time goes: each lowered and compiled apart, twice, interleaved.
    env_steps = {w.MODULE_ID: jax.numpy.int32(w.NUM_TRANSITIONS)}
    stages = {"learner.update": [], "hand-written jit": []}
    for _ in range(2):
        stages["learner.update"].append(
            w.compile_stats(learner.update_fn, state, {w.MODULE_ID: batch}, env_steps)[1]
        )
        stages["hand-written jit"].append(w.compile_stats(hand_written, carry, batch)[1])
    if args.stages_only:
        print_stages(stages)
        return
    results = w.measure(
        {"learner.update": learner_call, "hand-written jit": baseline_call}, args.repeats
    )
    ratio = results["learner.update"]["median_s"] / results["hand-written jit"]["median_s"]
    for name, runs in stages.items():
        results[name]["stages"] = runs
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
    print_stages(stages)


def print_stages(stages: dict[str, list[dict[str, float]]]) -> None:
    print("| variant | lower (s) | compile (s) | StableHLO (kchars) | HLO instructions |")
    print("|---|---|---|---|---|")
    for name, runs in stages.items():
        lower = ", ".join(f"{r['lower_s']:.2f}" for r in runs)
        compile_s = ", ".join(f"{r['compile_s']:.2f}" for r in runs)
        print(
            f"| {name} | {lower} | {compile_s} | {runs[0]['stablehlo_chars'] / 1000:.0f} | "
            f"{runs[0]['hlo_instructions']:,} |"
        )


if __name__ == "__main__":
    main()
