"""RLlib's default PPO learner workload, and a hand-written fused update of the same loss.

4000 transitions of CartPole-shaped data (obs 4, 2 actions), minibatches of 128
(31 per epoch; the 32 remaining rows are left out of each epoch: the learner's
``drop_last=True``, as the results recorded so far were measured; by default it
would wrap around and take 32), 30 epochs,
separate 256x256 tanh policy and value MLPs, one Adam optimizer with global-norm
clipping: the real ``jl.algorithms.ppo`` learner. The hand-written baseline
calls the same loss function on the same model inside its own single
``jax.jit`` (scan over epochs and minibatches), so the ratio measures what the
learner adds around the loss.
"""

from __future__ import annotations

import json
import os
import pathlib
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxlearner as jl

NUM_TRANSITIONS, MINIBATCH, EPOCHS, LR, GRAD_CLIP = 4000, 128, 30, 5e-5, 0.5
MODULE_ID = "default_policy"
CONFIG = {
    "lr": LR,
    "train_batch_size": NUM_TRANSITIONS,
    "minibatch_size": MINIBATCH,
    "num_epochs": EPOCHS,
    "hidden_sizes": (256, 256),
    "activation": "tanh",
    "grad_clip": GRAD_CLIP,
    "grad_clip_by": "global_norm",
}


def make_learner() -> jl.Learner:
    """The real PPO learner with RLlib's defaults and global-norm clipping (``drop_last``)."""
    env = gym.make("CartPole-v1")
    learner = jl.algorithms.ppo(env.observation_space, env.action_space, CONFIG)
    return learner.replace(drop_last=True)


def make_batch(seed: int = 0) -> dict[str, np.ndarray]:
    """4000 CartPole-shaped postprocessed transitions."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(NUM_TRANSITIONS, 2)).astype(np.float32)
    actions = rng.integers(0, 2, NUM_TRANSITIONS).astype(np.int32)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return {
        "obs": rng.normal(size=(NUM_TRANSITIONS, 4)).astype(np.float32),
        "actions": actions,
        "logp": log_probs[np.arange(NUM_TRANSITIONS), actions].astype(np.float32),
        "dist_inputs": logits,
        "advantages": rng.normal(size=NUM_TRANSITIONS).astype(np.float32),
        "value_targets": rng.normal(size=NUM_TRANSITIONS).astype(np.float32),
        "mask": np.ones(NUM_TRANSITIONS, np.float32),
    }


def make_hand_written(learner: jl.Learner, module: jl.ModuleState) -> tuple[Callable, Any]:
    """A single ``jax.jit`` of the same computation around the learner's own loss.

    Returns:
      ``(update, carry)`` with ``update(carry, batch) -> (carry, metrics)``.
    """
    spec = learner.specs[MODULE_ID]
    transform = optax.chain(optax.clip_by_global_norm(GRAD_CLIP), optax.adam(LR))
    hyperparams = dict(module.hyperparams)
    extra = dict(module.extra)

    def loss_fn(params, minibatch, key):
        ctx = jl.LossContext(MODULE_ID, spec.model.apply, key, extra, hyperparams, {})
        return spec.loss(params, minibatch, ctx)

    @jax.jit
    def update(carry, batch):
        def epoch(carry, key):
            order = jax.random.permutation(key, NUM_TRANSITIONS)
            used = (NUM_TRANSITIONS // MINIBATCH) * MINIBATCH
            order = order[:used].reshape(-1, MINIBATCH)
            blocks = jax.tree.map(lambda x: x[order], batch)

            def step(carry, minibatch):
                params, opt_state = carry
                (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                    params, minibatch, key
                )
                updates, opt_state = transform.update(grads, opt_state, params)
                return (optax.apply_updates(params, updates), opt_state), {"loss": loss, **metrics}

            return jax.lax.scan(step, carry, blocks)

        (params, opt_state), key = carry
        key, sub = jax.random.split(key)
        (params, opt_state), metrics = jax.lax.scan(
            epoch, (params, opt_state), jax.random.split(sub, EPOCHS)
        )
        return ((params, opt_state), key), jax.tree.map(jnp.mean, metrics)

    carry = ((module.params, transform.init(module.params)), jax.random.key(1))
    return update, carry


def measure(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, dict[str, float]]:
    """Times each call: once cold (compiling), then ``repeats`` times interleaved.

    Interleaving A, B, A, B, ... spreads machine noise evenly over the variants.
    Each call waits for its results.

    Returns:
      ``{name: {"compile_s", "median_s", "min_s", "max_s", "repeats"}}``;
      ``compile_s`` is the first call's time minus the steady median.
    """
    first, times = {}, {name: [] for name in calls}
    for name, call in calls.items():
        start = time.perf_counter()
        jax.block_until_ready(call())
        first[name] = time.perf_counter() - start
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            jax.block_until_ready(call())
            times[name].append(time.perf_counter() - start)
    results = {}
    for name in calls:
        median = statistics.median(times[name])
        results[name] = {
            "compile_s": max(first[name] - median, 0.0),
            "median_s": median,
            "min_s": min(times[name]),
            "max_s": max(times[name]),
            "repeats": repeats,
        }
    return results


def compile_stats(function: Callable, *args: Any) -> tuple[Any, dict[str, float]]:
    """``jax.jit(function)`` lowered, then compiled, for ``args``; each step timed.

    Returns:
      ``(compiled, stats)``: the compiled executable and ``{"lower_s"``
      (tracing and lowering to StableHLO), ``"compile_s"`` (XLA),
      ``"stablehlo_chars"`` (the lowered program's text length),
      ``"hlo_instructions"`` (instructions of the optimized HLO, all
      computations; what XLA's CPU backend turns into code)``}``.
    """
    inner = function.__wrapped__ if hasattr(function, "lower") else function  # unjit a jax.jit
    start = time.perf_counter()
    # A fresh function each time, so neither tracing nor compiling hits JAX's in-memory caches.
    lowered = jax.jit(lambda *a: inner(*a)).lower(*args)
    lower_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start
    optimized = compiled.as_text() or ""
    return compiled, {
        "lower_s": lower_s,
        "compile_s": compile_s,
        "stablehlo_chars": len(lowered.as_text()),
        "hlo_instructions": sum(" = " in line for line in optimized.splitlines()),
    }


RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def write_results(name: str, report: dict) -> pathlib.Path:
    """Writes ``report`` as ``benchmarks/results/NAME.json``; returns the path."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def machine() -> str:
    """A one-line description of where the numbers were measured."""
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"jax {jax.__version__} on {jax.devices()[0].platform} ({jax.device_count()} devices)"
    )


def table(results: dict[str, dict[str, float]]) -> str:
    """The results as a markdown table."""
    lines = [
        "| variant | compile (s) | median per update (s) | min (s) | max (s) |",
        "|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['compile_s']:.2f} | {r['median_s']:.3f} | {r['min_s']:.3f} | "
            f"{r['max_s']:.3f} |"
        )
    return "\n".join(lines)
