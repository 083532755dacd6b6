"""One DQN update of RL Zoo's Atari preset (Nature CNN, batch 32) beside PyTorch's, on CPU.

Run: ``python benchmarks/bench_cnn_update.py [--repeats 3] [--calls 30] [--peer-python
PEER_VENV/bin/python]``. Ours is the Trainer's replay call as it runs after the warm-up
(:class:`~jaxlearner.training.feeds.ReplayFeed`: 4 transitions of one environment added to a
framed replay buffer of 10,240, then one update on 32 sampled rows), on synthetic uint8 frames
(no ALE needed); the peer is ``peer_cnn_update.py`` (SB3's DQN step in PyTorch) in the peer
virtualenv. The two alternate ``--repeats`` times, each the median of ``--calls`` calls; prints
the medians in milliseconds with the load average and writes
``results/bench_cnn_update-<date>.json``. Run nothing else meanwhile: PyTorch and XLA both use
every core, and either slows many times over beside another busy process.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import time

import gymnasium as gym
import jax
import numpy as np

import jaxlearner as jl
from jaxlearner.training.feeds import ReplayFeed

HERE = pathlib.Path(__file__).resolve().parent
OBS = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)


def experience(rng: np.random.Generator, frames: np.ndarray) -> dict:
    """A 4-step rollout of one environment whose observations are consecutive frame stacks."""
    stacks = np.stack([frames[i : i + 4] for i in range(5)])  # [5, 4, 84, 84]
    obs = np.moveaxis(stacks, 1, -1)[:, None]  # [5, 1, 84, 84, 4]
    steps = 4
    return {
        "obs": obs[:steps],
        "next_obs": obs[1:],
        "actions": rng.integers(0, 4, (steps, 1)).astype(np.int32),
        "rewards": rng.random((steps, 1)).astype(np.float32),
        "terminated": np.zeros((steps, 1), bool),
        "truncated": np.zeros((steps, 1), bool),
        "valid": np.ones((steps, 1), bool),
    }


def ours(calls: int) -> float:
    """Median milliseconds of the replay feed's add-and-update call."""
    config, _ = jl.algorithms.preset("dqn", "ALE/Breakout-v5")
    config = dataclasses.replace(
        config, replay_buffer_capacity=10_240, num_steps_sampled_before_learning_starts=0
    )
    algorithm = jl.algorithms.build("dqn", OBS, gym.spaces.Discrete(4), config)
    state = algorithm.learner.init(jax.random.key(0))
    module = state.modules[algorithm.module_id]
    feed, rng = ReplayFeed(algorithm), np.random.default_rng(0)
    first = rng.integers(0, 255, (1, 84, 84), np.uint8)  # an episode's start: padded
    frames = np.concatenate([first.repeat(4, 0), rng.integers(0, 255, (4, 84, 84), np.uint8)])
    times = []
    for i in range(calls + 5):
        rollout = experience(rng, frames)
        frames = np.concatenate([frames[4:], rng.integers(0, 255, (4, 84, 84), np.uint8)])
        start = time.perf_counter()
        state, _ = feed.learn(state, module, rollout, 4, 4 * i, jax.random.key(i))
        jax.block_until_ready(state)
        if i >= 5:
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--peer-python", default="/work/benchvenv/bin/python")
    args = parser.parse_args()
    load = os.getloadavg()
    rows: dict[str, list[float]] = {"jaxlearner": [], "pytorch": []}
    for _ in range(args.repeats):
        rows["jaxlearner"].append(ours(args.calls))
        peer = [args.peer_python, str(HERE / "peer_cnn_update.py"), "--calls", str(args.calls)]
        done = subprocess.run(peer, capture_output=True, text=True, check=True)
        rows["pytorch"].append(json.loads(done.stdout.strip().splitlines()[-1])["ms"])
    result = {
        "rows_ms": rows,
        "ratio": statistics.median(rows["jaxlearner"]) / statistics.median(rows["pytorch"]),
        "load": {"before": load, "after": os.getloadavg()},
        "jax": jax.__version__,
    }
    name = f"bench_cnn_update-{datetime.date.today()}.json"
    (HERE / "results" / name).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
