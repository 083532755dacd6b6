"""PQN on MinAtar beside the purejaxql-style fused reference (``fused_pqn.py``): env steps per
second and the greedy return after the budget, one seed per process.

Run: ``python benchmarks/bench_pqn.py --side {jaxlearner,reference} --seed S [--steps 5000000]
[--env Breakout-MinAtar] [--chunk 61]``, nothing else running. Both sides train at purejaxql's
MinAtar settings (jaxlearner: the ``pqn`` preset row for ``gymnax:*-MinAtar`` with its
schedules stretched to ``--steps``, as ``jaxlearner train --max-steps`` does; the reference:
``fused_pqn.MINATAR``, whose schedules run over the same budget) in compiled blocks of
``--chunk`` updates (``AnakinTrainer(iterations_per_step=chunk)``; the reference's
``train_chunk``). Steps per second are those of the blocks after the first (compiling is in
the first); the return is the mean of 128 greedy episodes, each env's first, after the
budget. Prints one JSON line and writes it to ``results/pqn/ENV/SIDE-SEED.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import jax

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def ours(env_name: str, steps: int, seed: int, chunk: int) -> dict:
    import jaxlearner as jl
    from jaxlearner import anakin
    from jaxlearner.algorithms.presets import preset_row

    env_id = f"gymnax:{env_name}"
    row = preset_row("pqn", env_id).with_budget(steps)
    env = anakin.envs.make(env_id)
    algorithm = jl.algorithms.build("pqn", env.observation_space, env.action_space, row.config)
    trainer = anakin.AnakinTrainer(
        algorithm, env, num_envs=row.num_envs, iterations_per_step=chunk, eval_episodes=128,
        seed=seed, progress=False,
    )  # fmt: skip
    per_block = trainer.env_steps_per_iteration
    blocks = steps // per_block
    start = time.perf_counter()
    trainer.step()
    first = time.perf_counter()
    for _ in range(blocks - 1):
        trainer.step()
    end = time.perf_counter()
    result = trainer.eval()
    return _result(blocks * per_block, start, first, end, per_block, result["return_mean"])


def reference(env_name: str, steps: int, seed: int, chunk: int) -> dict:
    import fused_pqn

    init, train_chunk, evaluate, _ = fused_pqn.make(env_name, steps)
    config = fused_pqn.MINATAR
    per_block = chunk * config["NUM_ENVS"] * config["NUM_STEPS"]
    blocks = steps // per_block
    state = init(jax.random.key(seed))
    start = time.perf_counter()
    state, _ = train_chunk(state, chunk)
    jax.block_until_ready(state)
    first = time.perf_counter()
    for _ in range(blocks - 1):
        state, _ = train_chunk(state, chunk)
    jax.block_until_ready(state)
    end = time.perf_counter()
    final = float(evaluate(state, jax.random.key(seed + 10_000)))
    return _result(blocks * per_block, start, first, end, per_block, final)


def _result(env_steps, start, first, end, per_block, final_return) -> dict:
    return {
        "final_return": round(final_return, 3),
        "env_steps": env_steps,
        "steps_per_s": round((env_steps - per_block) / (end - first), 1),
        "first_block_s": round(first - start, 2),
        "wall_s": round(end - start, 2),
        "load": os.getloadavg(),
        "machine": f"{os.cpu_count()} CPUs, jax {jax.__version__} on {jax.default_backend()}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--side", choices=("jaxlearner", "reference"), required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=5_000_000)
    parser.add_argument("--env", default="Breakout-MinAtar")
    parser.add_argument("--chunk", type=int, default=61)
    args = parser.parse_args()
    run = ours if args.side == "jaxlearner" else reference
    result = run(args.env, args.steps, args.seed, args.chunk)
    result = {"side": args.side, "seed": args.seed, "env": args.env, **result}
    out = HERE / "results" / "pqn" / args.env / f"{args.side}-{args.seed}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
