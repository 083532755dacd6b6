"""DQN and SAC update steps: ``learner.update_fn`` against hand-written single ``jax.jit``s.

Run: ``python benchmarks/bench_off_policy.py [--repeats 5] [--steps 100]``. Writes
``benchmarks/results/bench_off_policy.json`` and prints a markdown table.

Each variant's step samples its batch from a device replay buffer and takes
one gradient step; a timed call runs ``--steps`` such steps as one
``lax.scan`` inside one ``jax.jit``, as the Trainer runs an iteration's
updates::

    def step(state, key):
        batch = replay_buffer.sample(buffer, key, batch_size)
        return learner.update_fn(state, {module_id: batch}, {module_id: 1})

    jax.jit(lambda state, buffer, keys: jax.lax.scan(step, state, keys))

The variants are timed interleaved in one process (``ppo_workload.measure``).
The hand-written steps use the same networks, optax chains and targets:

* DQN, RLlib's defaults on CartPole shapes (obs 4, 2 actions): a 50 000-row
  buffer, batches of 32, a dueling 256x256 ReLU Q-network, double-Q Huber TD
  loss, Adam 5e-4 (eps 1e-8) after global-norm clipping at 40, a hard target
  copy every 500 env steps (one env step per update).
* SAC, RLlib's defaults on Pendulum shapes (obs 3, a 1-D action in [-2, 2]):
  batches of 256, a tanh-Gaussian actor and twin critics of 256x256 ReLU,
  three Adams (actor 3e-5, critic 3e-4, temperature 3e-4), Huber critic loss,
  a polyak step (tau 5e-3) of the target critics after every step. The
  hand-written step differentiates the sum of the three terms once (the terms'
  stop-gradients make that equal to each optimizer's own term). The learner
  runs one backward pass per optimizer for its per-optimizer loss, each pruned
  by XLA to its own term; the "summed loss" row is the learner with the terms
  summed into one scalar, for comparison.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ppo_workload as w

import jaxlearner as jl
from jaxlearner.algorithms.networks.distribution_spec import make_distribution
from jaxlearner.algorithms.replay import replay_buffer

MODULE_ID = "default_policy"


def filled_buffer(obs_dim: int, action_shape: tuple, discrete: bool, capacity: int, seed: int):
    """A replay buffer full of random transitions."""
    rng = np.random.default_rng(seed)
    actions = (
        rng.integers(0, 2, capacity).astype(np.int32)
        if discrete
        else rng.uniform(-2, 2, (capacity, *action_shape)).astype(np.float32)
    )
    rows = {
        "obs": rng.normal(size=(capacity, obs_dim)).astype(np.float32),
        "actions": actions,
        "rewards": rng.normal(size=capacity).astype(np.float32),
        "next_obs": rng.normal(size=(capacity, obs_dim)).astype(np.float32),
        "discounts": np.where(rng.random(capacity) < 0.05, 0.0, 0.99).astype(np.float32),
        "mask": np.ones(capacity, np.float32),
    }
    buffer = replay_buffer.replay_buffer_init(jax.tree.map(lambda x: x[0], rows), capacity)
    return replay_buffer.add(buffer, rows)


def learner_step(learner: jl.Learner, batch_size: int):
    """The Trainer's step: sample, then the learner's pure update."""

    def step(state, buffer, key):
        batch = replay_buffer.sample(buffer, key, batch_size)
        return learner.update_fn(state, {MODULE_ID: batch}, {MODULE_ID: jnp.int32(1)})

    return step


def huber(x: jax.Array) -> jax.Array:
    return jnp.where(jnp.abs(x) < 1.0, 0.5 * x**2, jnp.abs(x) - 0.5)


def dqn_hand_written(model, params, batch_size: int):
    """DQN's step as one hand-written jit: double-Q Huber loss, clip + Adam, target copy."""
    transform = optax.chain(optax.clip_by_global_norm(40.0), optax.adam(5e-4, eps=1e-8))

    def loss_fn(p, target, batch):
        q_both = model.apply(p, jnp.concatenate([batch["obs"], batch["next_obs"]]))
        q, next_online = q_both[:batch_size], q_both[batch_size:]
        next_target = model.apply(target, batch["next_obs"])
        next_action = jnp.argmax(next_online, axis=-1)
        next_value = jnp.take_along_axis(next_target, next_action[:, None], -1)[:, 0]
        y = jax.lax.stop_gradient(batch["rewards"] + batch["discounts"] * next_value)
        q_taken = jnp.take_along_axis(q, batch["actions"][:, None], -1)[:, 0]
        mask = batch["mask"]
        return (huber(q_taken - y) * mask).sum() / jnp.maximum(mask.sum(), 1.0)

    def step(carry, buffer, key):
        params, opt_state, target, last, env_steps = carry
        batch = replay_buffer.sample(buffer, key, batch_size)
        loss, grads = jax.value_and_grad(loss_fn)(params, target, batch)
        updates, opt_state = transform.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        env_steps = env_steps + 1
        due = env_steps - last >= 500
        target = jax.tree.map(lambda p, t: jnp.where(due, p, t), params, target)
        last = jnp.where(due, env_steps, last)
        return (params, opt_state, target, last, env_steps), loss

    zero = jnp.zeros((), jnp.int32)
    carry = (params, transform.init(params), jax.tree.map(jnp.array, params), zero, zero)
    return step, carry


def sac_hand_written(model, params, batch_size: int, target_entropy: float):
    """SAC's step as one hand-written jit: one gradient of the summed terms, three Adams."""
    rates = {"actor": 3e-5, "critic": 3e-4, "temperature": 3e-4}
    transforms = {name: optax.adam(rate) for name, rate in rates.items()}
    spec = model.distribution

    def loss_fn(p, target_critic, batch, key):
        log_alpha = model.apply(p, method="log_alpha")
        alpha = jax.lax.stop_gradient(jnp.exp(log_alpha))
        both = jnp.concatenate([batch["obs"], batch["next_obs"]])
        dist_inputs = model.apply(p, both, method="policy")
        now = make_distribution(spec, dist_inputs[:batch_size])
        nxt = make_distribution(spec, dist_inputs[batch_size:])
        next_key, current_key = jax.random.split(key)
        next_actions, next_logp = nxt.sample_and_log_prob(next_key)
        target = {"params": {**p["params"], "critic": target_critic}}
        next_q = model.apply(target, batch["next_obs"], next_actions, method="q_values")
        y = batch["rewards"] + batch["discounts"] * (next_q.min(0) - alpha * next_logp)
        y = jax.lax.stop_gradient(y)
        mask = batch["mask"]
        mean = lambda x: (x * mask).sum() / jnp.maximum(mask.sum(), 1.0)
        q = model.apply(p, batch["obs"], batch["actions"], method="q_values")
        critic_loss = mean(huber(q[0] - y)) + mean(huber(q[1] - y))
        actions, logp = now.sample_and_log_prob(current_key)
        frozen = {"params": {**p["params"], "critic": jax.lax.stop_gradient(p["params"]["critic"])}}
        q_new = model.apply(frozen, batch["obs"], actions, method="q_values").min(0)
        actor_loss = mean(alpha * logp - q_new)
        alpha_loss = -mean(log_alpha * jax.lax.stop_gradient(logp + target_entropy))
        return actor_loss + critic_loss + alpha_loss

    def step(carry, buffer, key):
        params, opt_states, target_critic = carry
        sample_key, loss_key = jax.random.split(key)
        batch = replay_buffer.sample(buffer, sample_key, batch_size)
        loss, grads = jax.value_and_grad(loss_fn)(params, target_critic, batch, loss_key)
        new_params, new_states = {}, {}
        for name, transform in transforms.items():
            own = params["params"][name]
            updates, new_states[name] = transform.update(
                grads["params"][name], opt_states[name], own
            )
            new_params[name] = optax.apply_updates(own, updates)
        target_critic = optax.incremental_update(new_params["critic"], target_critic, 5e-3)
        return ({"params": new_params}, new_states, target_critic), loss

    opt_states = {name: t.init(params["params"][name]) for name, t in transforms.items()}
    carry = (params, opt_states, jax.tree.map(jnp.array, params["params"]["critic"]))
    return step, carry


def scanned(step, holder: dict, name: str, buffer, keys):
    """A call running one step per key as a ``lax.scan`` in one jit, as the Trainer does."""

    @jax.jit
    def run(carry, buffer, keys):
        carry, outputs = jax.lax.scan(lambda c, key: step(c, buffer, key), carry, keys)
        return carry, jax.tree.map(lambda x: x[-1], outputs)

    def call():
        holder[name], out = run(holder[name], buffer, keys)
        return out

    return call


def run_dqn(repeats: int, steps: int) -> dict:
    env = gym.make("CartPole-v1")
    algorithm = jl.algorithms.build("dqn", env.observation_space, env.action_space)
    learner, batch_size = algorithm.learner, algorithm.train_batch_size
    state = learner.init(jax.random.key(0))
    buffer = filled_buffer(4, (), True, algorithm.replay_capacity, seed=0)
    hand, carry = dqn_hand_written(
        learner.specs[MODULE_ID].model, state.modules[MODULE_ID].params, batch_size
    )
    keys = jax.random.split(jax.random.key(1), steps)
    holder = {"learner": state, "hand": carry}
    calls = {
        "learner.update_fn": scanned(
            learner_step(learner, batch_size), holder, "learner", buffer, keys
        ),
        "hand-written jit": scanned(hand, holder, "hand", buffer, keys),
    }
    return w.measure(calls, repeats)


def run_sac(repeats: int, steps: int) -> dict:
    env = gym.make("Pendulum-v1")
    algorithm = jl.algorithms.build(
        "sac", env.observation_space, env.action_space, {"replay_buffer_capacity": 100_000}
    )
    learner, batch_size = algorithm.learner, algorithm.train_batch_size
    spec = learner.specs[MODULE_ID]

    def summed(params, batch, ctx):
        terms, metrics = spec.loss(params, batch, ctx)
        return sum(terms.values()), metrics

    summed_learner = jl.Learner(
        {MODULE_ID: dataclasses.replace(spec, loss=summed)}, batch_layout=learner.batch_layout
    )
    state = learner.init(jax.random.key(0))
    buffer = filled_buffer(3, (1,), False, algorithm.replay_capacity, seed=0)
    hand, carry = sac_hand_written(spec.model, state.modules[MODULE_ID].params, batch_size, -1.0)
    keys = jax.random.split(jax.random.key(1), steps)
    holder = {"learner": state, "summed": state, "hand": carry}
    calls = {
        "learner.update_fn": scanned(
            learner_step(learner, batch_size), holder, "learner", buffer, keys
        ),
        "learner.update_fn, summed loss": scanned(
            learner_step(summed_learner, batch_size), holder, "summed", buffer, keys
        ),
        "hand-written jit": scanned(hand, holder, "hand", buffer, keys),
    }
    return w.measure(calls, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100, help="gradient steps per timed call")
    args = parser.parse_args()

    report = {"machine": w.machine(), "steps_per_call": args.steps, "workloads": {}}
    workloads = {
        "dqn": ("DQN, CartPole shapes, batch 32, dueling 256x256, RLlib defaults", run_dqn),
        "sac": ("SAC, Pendulum shapes, batch 256, twin 256x256 critics, RLlib defaults", run_sac),
    }
    for name, (description, run) in workloads.items():
        results = run(args.repeats, args.steps)
        for result in results.values():
            result["grad_steps_per_s"] = args.steps / result["median_s"]
        baseline = results["hand-written jit"]["median_s"]
        report["workloads"][name] = {
            "workload": description,
            "results": results,
            "ratios": {k: r["median_s"] / baseline for k, r in results.items()},
        }
    w.write_results("bench_off_policy", report)
    print(f"machine: {report['machine']}; {args.steps} gradient steps per timed call")
    print("| workload | variant | compile (s) | grad steps / s | median (ms / step) | ratio |")
    print("|---|---|---|---|---|---|")
    for name, workload in report["workloads"].items():
        for variant, r in workload["results"].items():
            print(
                f"| {name} | {variant} | {r['compile_s']:.2f} | {r['grad_steps_per_s']:.0f} | "
                f"{1e3 * r['median_s'] / args.steps:.2f} | {workload['ratios'][variant]:.3f} |"
            )


if __name__ == "__main__":
    main()
