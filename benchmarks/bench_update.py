"""``learner.update`` against a hand-written fused ``jax.jit`` of the same PPO computation.

Run: ``python benchmarks/bench_update.py [--repeats 7]``. Writes
``benchmarks/results/bench_update.json`` and prints a markdown table row set
for ``benchmarks/README.md``. The goal is a ratio of at most 1.05.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import jax
import optax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ppo_workload as w

import jaxlearner as jl

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def make_learner() -> jl.Learner:
    def loss(params, batch, ctx):
        logits, values = ctx.apply(params, batch["obs"])
        return w.ppo_terms(logits, values, batch)

    spec = jl.ModuleSpec(
        w.SeparateMLPs(), loss, jl.Optimizer(optax.adam(w.LR), grad_clip=w.GRAD_CLIP)
    )
    return jl.Learner({"policy": spec}, minibatch_size=w.MINIBATCH, num_epochs=w.EPOCHS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    batch = w.make_batch()
    learner = make_learner()
    state = learner.init(jax.random.key(0), batch)
    hand_written, carry = w.make_hand_written(state.modules["policy"].params)
    holder = {"state": state, "carry": carry}

    def learner_call():
        holder["state"], metrics = learner.update(holder["state"], batch)
        return metrics

    def baseline_call():
        holder["carry"], loss = hand_written(holder["carry"], batch)
        return loss

    results = w.measure(
        {"learner.update": learner_call, "hand-written jit": baseline_call}, args.repeats
    )
    ratio = results["learner.update"]["median_s"] / results["hand-written jit"]["median_s"]
    report = {
        "workload": "PPO, 4000 x obs 4, minibatch 128, 30 epochs, 2 x 256x256 tanh MLPs",
        "machine": w.machine(),
        "results": results,
        "ratio": ratio,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_update.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"machine: {report['machine']}")
    print("| variant | compile (s) | median per update (s) | min (s) | max (s) |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['compile_s']:.2f} | {r['median_s']:.3f} | {r['min_s']:.3f} | "
            f"{r['max_s']:.3f} |"
        )
    print(f"ratio learner / hand-written: {ratio:.3f} (goal <= 1.05)")


if __name__ == "__main__":
    main()
