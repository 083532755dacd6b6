"""Resident memory per 1,000 checkpoint saves and per 1,000 Trainer iterations.

Run: ``python benchmarks/bench_memory.py [--saves 3000] [--iterations 3000] [--async-save]``.

Saves: a small state (one ``Dense(1)`` module, Adam) saved ``--saves`` times into one
directory with ``max_to_keep=2``, as a training loop does. Iterations: ``jl.Trainer``
running PPO on CartPole with a tiny batch. Each warms up first (the first saves and
iterations compile, open files and fill caches), then reports the resident set size
(``/proc/self/statm``) at every checkpoint of the run, the slope in MB per 1,000 by least
squares, and, for the saves, the Python objects tracemalloc sees grow most (ours or
orbax's). The load average is printed with each result: on a machine shared with other
work, RSS noise grows with it.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time
import tracemalloc

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    """The process's resident set size in MB, from ``/proc/self/statm``."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE / 1e6


def slope_per_1000(points: list[tuple[int, float]]) -> float:
    """The least-squares slope of ``(count, MB)`` points, in MB per 1,000."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in points)
    variance = sum((x - mean_x) ** 2 for x, _ in points) or 1.0
    return 1000 * covariance / variance


def measure_saves(count: int, async_save: bool, warmup: int = 200) -> dict[str, object]:
    """RSS over ``count`` saves after ``warmup``; the top tracemalloc growth by line."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    import jaxlearner as jl

    def loss(params, batch, ctx):
        return jnp.mean((ctx.apply(params, batch["x"])[:, 0] - batch["y"]) ** 2), {}

    batch = {"x": np.ones((16, 3), np.float32), "y": np.zeros(16, np.float32)}
    spec = jl.ModuleSpec(nn.Dense(1), loss, optax.adam(1e-3))
    learner = jl.Learner({"m": spec}, minibatch_size=8, sample_batch=batch)
    state = learner.init(jax.random.key(0), batch)
    with tempfile.TemporaryDirectory() as folder:
        ckpt = jl.CheckpointManager(pathlib.Path(folder), max_to_keep=2, async_save=async_save)
        for step in range(1, warmup + 1):
            ckpt.save(step, state, learner)
        ckpt.wait_until_finished()
        tracemalloc.start(10)
        before = tracemalloc.take_snapshot()
        points = [(0, rss_mb())]
        start = time.perf_counter()
        for i in range(1, count + 1):
            ckpt.save(warmup + i, state, learner)
            if i % max(1, count // 10) == 0:
                ckpt.wait_until_finished()
                points.append((i, rss_mb()))
        seconds = time.perf_counter() - start
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        growth = after.compare_to(before, "lineno")[:5]
        ours = [tracemalloc.Filter(True, "*/jaxlearner/*")]  # allocated by a line of ours
        own = sum(s.size_diff for s in after.filter_traces(ours).compare_to(before, "lineno"))
        ckpt.close()
    return {
        "slope": slope_per_1000(points),
        "points": points,
        "seconds": seconds,
        "top": [str(stat) for stat in growth],
        "ours_mb": own / 1e6,
    }


def measure_iterations(count: int, warmup: int = 50) -> dict[str, object]:
    """RSS over ``count`` Trainer iterations of a tiny PPO after ``warmup``."""
    import gymnasium as gym

    import jaxlearner as jl

    env = gym.make("CartPole-v1")
    config = {"train_batch_size": 64, "minibatch_size": 64, "num_epochs": 1, "hidden_sizes": [8]}
    learner = jl.algorithms.ppo(env.observation_space, env.action_space, config)
    trainer = jl.Trainer(learner, "CartPole-v1", num_envs=4, seed=0, progress=False)
    for _ in range(warmup):
        trainer.step()
    points = [(0, rss_mb())]
    start = time.perf_counter()
    for i in range(1, count + 1):
        trainer.step()
        if i % max(1, count // 10) == 0:
            points.append((i, rss_mb()))
    seconds = time.perf_counter() - start
    trainer.close()
    return {"slope": slope_per_1000(points), "points": points, "seconds": seconds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=3000)
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--async-save", action="store_true", help="orbax's background saves")
    args = parser.parse_args(argv)
    if args.saves:
        result = measure_saves(args.saves, args.async_save)
        print(
            f"saves: {result['slope']:+.1f} MB RSS per 1,000 saves over {args.saves} "
            f"({result['seconds']:.0f} s, async={args.async_save}); load average "
            f"{os.getloadavg()[0]:.1f}"
        )
        print("  RSS (saves, MB):", [(x, round(y, 1)) for x, y in result["points"]])
        print(f"  Python objects allocated by jaxlearner's lines: {result['ours_mb']:+.2f} MB")
        print("  tracemalloc growth:", *result["top"], sep="\n    ")
    if args.iterations:
        result = measure_iterations(args.iterations)
        print(
            f"iterations: {result['slope']:+.1f} MB RSS per 1,000 Trainer iterations over "
            f"{args.iterations} ({result['seconds']:.0f} s); load average "
            f"{os.getloadavg()[0]:.1f}"
        )
        print("  RSS (iterations, MB):", [(x, round(y, 1)) for x, y in result["points"]])
    sys.stdout.flush()


if __name__ == "__main__":
    main()
