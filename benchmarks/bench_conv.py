"""The Nature CNN's gradient with flax's ``nn.Conv`` and with our ``Conv``, outside and inside
a ``lax.scan`` (where every update runs), and one DQN update of RL Zoo's Atari preset.

Run: ``python benchmarks/bench_conv.py [--repeats 5]``. Prints a markdown table of median
milliseconds per call (the calls interleaved, the load average beside them) and writes
``benchmarks/results/bench_conv.json``. On XLA:CPU a convolution's kernel gradient inside a
while loop takes a slow path (jax-ml/jax#12868); ``jaxlearner.algorithms.networks.
convolution`` computes it from the input's patches instead.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.algorithms.networks.convolution import Conv

LAYERS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
BATCH = 32


class NatureCNN(nn.Module):
    """The Nature DQN's convolutions, with flax's ``nn.Conv`` or our ``Conv``."""

    ours: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, (features, kernel, stride) in enumerate(LAYERS):
            if self.ours:
                x = Conv(features, kernel, stride, "VALID", name=f"conv_{i}")(x)
            else:
                x = nn.Conv(features, (kernel, kernel), (stride, stride), "VALID", name=f"c{i}")(x)
            x = nn.relu(x)
        return nn.Dense(512)(x.reshape(x.shape[0], -1))


def gradient_calls() -> dict[str, tuple]:
    """``name -> (jitted fn, args)``: the CNN's gradient, outside and inside a scan."""
    x = jnp.asarray(np.random.default_rng(0).random((BATCH, 84, 84, 4), np.float32))
    calls = {}
    for ours in (False, True):
        model = NatureCNN(ours)
        params = model.init(jax.random.key(0), x)
        grad = jax.grad(lambda p, x, model=model: jnp.sum(model.apply(p, x) ** 2))
        in_scan = lambda p, x, grad=grad: jax.lax.scan(
            lambda c, _: (c, grad(p, x)), 0, None, length=1
        )[1]
        label = "Conv (ours)" if ours else "flax nn.Conv"
        calls[f"{label}, outside a scan"] = (jax.jit(grad), (params, x))
        calls[f"{label}, inside a scan"] = (jax.jit(in_scan), (params, x))
    return calls


def dqn_update_call() -> tuple:
    """One update of DQN with RL Zoo's Atari preset on a batch of 32 transitions."""
    import gymnasium as gym

    import jaxlearner as jl

    space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    config, _ = jl.algorithms.preset("dqn", "ALE/Pong-v5")
    algorithm = jl.algorithms.build("dqn", space, gym.spaces.Discrete(6), config)
    state = algorithm.learner.init(jax.random.key(0))
    rng = np.random.default_rng(0)
    batch = {
        "obs": rng.integers(0, 255, (BATCH, 84, 84, 4), np.uint8),
        "next_obs": rng.integers(0, 255, (BATCH, 84, 84, 4), np.uint8),
        "actions": np.zeros(BATCH, np.int32),
        "rewards": np.zeros(BATCH, np.float32),
        "discounts": np.full(BATCH, 0.99, np.float32),
        "mask": np.ones(BATCH, np.float32),
    }
    module = algorithm.module_id
    update = jax.jit(
        lambda s, b: algorithm.learner.update_fn(s, {module: b}, {module: jnp.int32(4)})[1]
    )
    return update, (state, batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    calls = gradient_calls()
    calls["DQN update, Atari preset (Conv)"] = dqn_update_call()
    for fn, call_args in calls.values():
        jax.block_until_ready(fn(*call_args))  # compiled before timing
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, (fn, call_args) in calls.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(*call_args))
            times[name].append((time.perf_counter() - start) * 1e3)
    load = os.getloadavg()
    print(f"| call | median ms ({args.repeats} interleaved) |\n|---|---|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.1f} |")
    print(f"\nload average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; jax {jax.__version__}")
    out = pathlib.Path(__file__).parent / "results" / "bench_conv.json"
    out.write_text(json.dumps({"ms": times, "load": load, "jax": jax.__version__}, indent=1))


if __name__ == "__main__":
    main()
