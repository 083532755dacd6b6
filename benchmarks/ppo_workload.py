"""RLlib's default PPO learner workload, and a hand-written fused update of the same math.

4000 transitions of CartPole-shaped data (obs 4, 2 actions), minibatches of 128
(31 per epoch; the 32 remaining rows are left out of each epoch), 30 epochs,
separate 256x256 tanh policy and value MLPs, one Adam optimizer with global-norm
clipping, PPO's clipped surrogate, clipped value loss and entropy bonus.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

NUM_TRANSITIONS, OBS, ACTIONS = 4000, 4, 2
MINIBATCH, EPOCHS = 128, 30
LR, GRAD_CLIP, CLIP, VF_CLIP, VF_COEFF, ENTROPY_COEFF = 5e-5, 0.5, 0.2, 10.0, 1.0, 0.01


class SeparateMLPs(nn.Module):
    """Policy logits and value from separate 256x256 tanh MLPs."""

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        def mlp(x: jax.Array, out: int, name: str) -> jax.Array:
            for i in range(2):
                x = nn.tanh(nn.Dense(256, name=f"{name}_{i}")(x))
            return nn.Dense(out, name=f"{name}_out")(x)

        return mlp(obs, ACTIONS, "pi"), mlp(obs, 1, "vf")[:, 0]


def ppo_terms(logits, values, batch):
    """The PPO loss terms of one minibatch (shared by both implementations)."""
    log_probs = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(log_probs, batch["actions"][:, None], -1)[:, 0]
    ratio = jnp.exp(logp - batch["logp"])
    surrogate = jnp.minimum(
        ratio * batch["advantages"],
        jnp.clip(ratio, 1 - CLIP, 1 + CLIP) * batch["advantages"],
    )
    vf_loss = jnp.minimum((values - batch["value_targets"]) ** 2, VF_CLIP)
    entropy = -(jnp.exp(log_probs) * log_probs).sum(-1)
    loss = -surrogate.mean() + VF_COEFF * vf_loss.mean() - ENTROPY_COEFF * entropy.mean()
    return loss, {
        "policy_loss": -surrogate.mean(),
        "vf_loss": vf_loss.mean(),
        "entropy": entropy.mean(),
    }


def make_batch(seed: int = 0) -> dict[str, np.ndarray]:
    """4000 CartPole-shaped transitions."""
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.normal(size=(NUM_TRANSITIONS, OBS)).astype(np.float32),
        "actions": rng.integers(0, ACTIONS, NUM_TRANSITIONS).astype(np.int32),
        "logp": np.full(NUM_TRANSITIONS, np.log(0.5), np.float32),
        "advantages": rng.normal(size=NUM_TRANSITIONS).astype(np.float32),
        "value_targets": rng.normal(size=NUM_TRANSITIONS).astype(np.float32),
    }


def make_hand_written(params):
    """A single ``jax.jit`` of the same computation: scan over epochs and minibatches."""
    model = SeparateMLPs()
    transform = optax.chain(optax.clip_by_global_norm(GRAD_CLIP), optax.adam(LR))

    def loss_fn(p, minibatch):
        logits, values = model.apply(p, minibatch["obs"])
        return ppo_terms(logits, values, minibatch)

    @jax.jit
    def update(carry, batch):
        def epoch(carry, key):
            order = jax.random.permutation(key, NUM_TRANSITIONS)
            used = (NUM_TRANSITIONS // MINIBATCH) * MINIBATCH
            order = order[:used].reshape(-1, MINIBATCH)
            blocks = jax.tree.map(lambda x: x[order], batch)

            def step(carry, minibatch):
                p, opt_state = carry
                (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, minibatch)
                updates, opt_state = transform.update(grads, opt_state, p)
                return (optax.apply_updates(p, updates), opt_state), {"loss": loss, **metrics}

            return jax.lax.scan(step, carry, blocks)

        (p, opt_state), key = carry
        key, sub = jax.random.split(key)
        (p, opt_state), metrics = jax.lax.scan(epoch, (p, opt_state), jax.random.split(sub, EPOCHS))
        return ((p, opt_state), key), jax.tree.map(jnp.mean, metrics)

    carry = ((params, transform.init(params)), jax.random.key(1))
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


def machine() -> str:
    """A one-line description of where the numbers were measured."""
    import os
    import platform

    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"jax {jax.__version__} on {jax.devices()[0].platform} ({jax.device_count()} devices)"
    )
