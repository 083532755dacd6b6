"""TD3's update with the actor's term on every gradient step against only on its delayed ones.

Run: ``python benchmarks/ab_td3_actor_term.py`` (nothing else running). One jitted
``learner.update`` on HalfCheetah-v5's shapes (batch 256, 400x300, ``policy_delay=2``), 50
warm-up calls, then 5 x 400 timed; prints the median and the five figures, twice, alternating.
"every step" passes ``policy_delay=1`` to :func:`~jaxlearner.algorithms.td3.td3_loss` (the
actor's Adam still steps every second update): how TD3 ran before the loss skipped the term.
"""

import sys
import time

import gymnasium as gym
import jax
import numpy as np

import jaxlearner as jl
import jaxlearner.algorithms.td3  # the module: jl.algorithms.td3 is its constructor

TD3 = sys.modules["jaxlearner.algorithms.td3"]
ORIGINAL = TD3.td3_loss


def batch(size: int = 256) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "obs": rng.normal(size=(size, 17)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (size, 6)).astype(np.float32),
        "rewards": rng.normal(size=size).astype(np.float32),
        "next_obs": rng.normal(size=(size, 17)).astype(np.float32),
        "discounts": np.full(size, 0.99, np.float32),
        "mask": np.ones(size, np.float32),
    }


def timed(label: str, loss_factory) -> None:
    TD3.td3_loss = loss_factory
    env = gym.make("HalfCheetah-v5")
    learner = jl.algorithms.td3(env.observation_space, env.action_space)
    state = learner.init(jax.random.key(0))
    update = jax.jit(learner.update, donate_argnums=0)
    rows = batch()
    for _ in range(50):
        state, _ = update(state, rows)
    jax.block_until_ready(state)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(400):
            state, _ = update(state, rows)
        jax.block_until_ready(state)
        times.append((time.perf_counter() - start) / 400 * 1e3)
    figures = [round(x, 3) for x in times]
    print(f"{label}: {sorted(times)[2]:.3f} ms per update (median of 5 x 400) {figures}")


def every_step(target_noise, target_noise_clip, td_error_loss_fn, policy_delay=1):
    del policy_delay
    return ORIGINAL(target_noise, target_noise_clip, td_error_loss_fn, 1)


if __name__ == "__main__":
    for _ in range(2):
        timed("actor term every step", every_step)
        timed("actor term on its steps", ORIGINAL)
