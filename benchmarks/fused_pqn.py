"""A purejaxql-style fused PQN: the reference beside which ``bench_pqn.py`` measures ours.

Written here after purejaxql's ``pqn_minatar.py`` (https://github.com/mttga/purejaxql, its
``config/alg/pqn_minatar.yaml``), with nothing of jaxlearner's: gymnax's environment vmapped
over ``NUM_ENVS``, a CNN (16 3x3 filters without padding, LayerNorm, ReLU; 128 units,
LayerNorm, ReLU; a linear head; He-normal kernels, observations divided by 255 as purejaxql
does), epsilon-greedy collection of ``NUM_STEPS`` steps, Q(lambda) targets from the recorded
Q-values by purejaxql's reverse scan as it is written (no bootstrap at any episode end; row
``T - 2`` bootstraps on the last observation's Q, not on row ``T - 1``'s), ``NUM_EPOCHS`` epochs
of ``NUM_MINIBATCHES`` shuffled minibatches of ``0.5 * mean(td^2)``, RAdam behind global-norm
clipping, the learning rate falling linearly to 0 over the run's gradient steps and epsilon
over the first ``EPS_DECAY`` of its updates. ``train_chunk(state)`` runs ``chunk`` updates in
one compiled call; ``evaluate(state, key)`` plays ``TEST_NUM_ENVS`` greedy episodes.

Used by ``bench_pqn.py``; ``python benchmarks/fused_pqn.py --steps 200000`` trains once and
prints the final evaluation.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, NamedTuple

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax

MINATAR = {
    "NUM_ENVS": 128,
    "NUM_STEPS": 32,
    "EPS_START": 1.0,
    "EPS_FINISH": 0.05,
    "EPS_DECAY": 0.1,
    "NUM_MINIBATCHES": 32,
    "NUM_EPOCHS": 2,
    "LR": 5e-4,
    "MAX_GRAD_NORM": 10.0,
    "GAMMA": 0.99,
    "LAMBDA": 0.65,
    "TEST_NUM_ENVS": 128,
}
"""purejaxql's ``pqn_minatar.yaml``."""


class QNetwork(nn.Module):
    action_dim: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = x / 255.0
        x = nn.Conv(16, (3, 3), padding="VALID", kernel_init=nn.initializers.he_normal())(x)
        x = nn.relu(nn.LayerNorm()(x))
        x = x.reshape((x.shape[0], -1))
        x = nn.Dense(128, kernel_init=nn.initializers.he_normal())(x)
        x = nn.relu(nn.LayerNorm()(x))
        return nn.Dense(self.action_dim)(x)


class State(NamedTuple):
    params: Any
    opt_state: Any
    env_state: Any
    obs: jax.Array
    key: jax.Array
    updates: jax.Array
    returns: jax.Array  # each env's return so far
    finished_sum: jax.Array  # returns of the episodes ended in the last chunk, summed
    finished_count: jax.Array


def make(env_name: str, total_steps: int, config: dict = MINATAR):
    env, env_params = gymnax.make(env_name)
    n, steps = config["NUM_ENVS"], config["NUM_STEPS"]
    num_updates = total_steps // (n * steps)
    network = QNetwork(env.action_space(env_params).n)
    grad_steps = num_updates * config["NUM_MINIBATCHES"] * config["NUM_EPOCHS"]
    lr = optax.linear_schedule(config["LR"], 1e-20, grad_steps)
    tx = optax.chain(optax.clip_by_global_norm(config["MAX_GRAD_NORM"]), optax.radam(lr))
    eps = optax.linear_schedule(
        config["EPS_START"], config["EPS_FINISH"], config["EPS_DECAY"] * num_updates
    )
    reset = jax.vmap(env.reset, in_axes=(0, None))
    vmapped_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def step(keys, env_state, action, params):
        """gymnax's step as purejaxql's gymnax gave it: ``done`` for any episode end (gymnax
        0.0.9 returns ``terminated`` and ``truncated`` apart)."""
        out = vmapped_step(keys, env_state, action, params)
        done = out[3] | out[4] if len(out) == 6 else out[3]
        return out[0], out[1], out[2], done, out[-1]

    def greedy_or_random(key, q, epsilon):
        random_key, coin = jax.random.split(key)
        greedy = jnp.argmax(q, axis=-1)
        random = jax.random.randint(random_key, greedy.shape, 0, q.shape[-1])
        return jnp.where(jax.random.uniform(coin, greedy.shape) < epsilon, random, greedy)

    def init(key) -> State:
        key, init_key, env_key = jax.random.split(key, 3)
        obs, env_state = reset(jax.random.split(env_key, n), env_params)
        params = network.init(init_key, obs)
        zero = jnp.zeros(())
        return State(
            params, tx.init(params), env_state, obs, key, jnp.zeros((), jnp.int32),
            jnp.zeros(n), zero, zero,
        )  # fmt: skip

    def update(state: State, _):
        def env_step(carry, _):
            params, env_state, obs, key, returns, total, count = carry
            key, act_key, step_key = jax.random.split(key, 3)
            q = network.apply(params, obs)
            action = greedy_or_random(act_key, q, eps(state.updates))
            next_obs, env_state, reward, done, _ = step(
                jax.random.split(step_key, n), env_state, action, env_params
            )
            returns = returns + reward
            total = total + jnp.sum(jnp.where(done, returns, 0.0))
            count = count + jnp.sum(done)
            returns = jnp.where(done, 0.0, returns)
            carry = (params, env_state, next_obs, key, returns, total, count)
            return carry, (obs, action, reward, done, q)

        carry = (state.params, state.env_state, state.obs, state.key, state.returns,
                 state.finished_sum, state.finished_count)  # fmt: skip
        carry, (obs, actions, rewards, dones, q_vals) = jax.lax.scan(env_step, carry, None, steps)
        params, env_state, last_obs, key, returns, total, count = carry
        gamma, lam = config["GAMMA"], config["LAMBDA"]
        dones = dones.astype(jnp.float32)
        last_q = jnp.max(network.apply(params, last_obs), axis=-1) * (1 - dones[-1])
        last_return = rewards[-1] + gamma * last_q

        def target(carry, t):
            returns_next, next_q = carry
            reward, done, q = t
            bootstrap = reward + gamma * (1 - done) * next_q
            value = bootstrap + gamma * lam * (returns_next - next_q)
            value = (1 - done) * value + done * reward
            return (value, jnp.max(q, axis=-1)), value

        _, targets = jax.lax.scan(
            target, (last_return, last_q), (rewards[:-1], dones[:-1], q_vals[:-1]), reverse=True
        )
        targets = jnp.concatenate([targets, last_return[None]])

        def epoch(carry, _):
            params, opt_state, key = carry
            key, perm_key = jax.random.split(key)
            order = jax.random.permutation(perm_key, n * steps)
            cut = lambda x: x.reshape(n * steps, *x.shape[2:])[order].reshape(
                config["NUM_MINIBATCHES"], -1, *x.shape[2:]
            )

            def minibatch(carry, batch):
                params, opt_state = carry
                b_obs, b_actions, b_targets = batch

                def loss(p):
                    q = network.apply(p, b_obs)
                    taken = jnp.take_along_axis(q, b_actions[:, None], axis=-1)[:, 0]
                    return 0.5 * jnp.mean(jnp.square(taken - b_targets))

                value, grads = jax.value_and_grad(loss)(params)
                changes, opt_state = tx.update(grads, opt_state, params)
                return (optax.apply_updates(params, changes), opt_state), value

            (params, opt_state), losses = jax.lax.scan(
                minibatch, (params, opt_state), (cut(obs), cut(actions), cut(targets))
            )
            return (params, opt_state, key), losses

        (params, opt_state, key), losses = jax.lax.scan(
            epoch, (params, state.opt_state, key), None, config["NUM_EPOCHS"]
        )
        state = State(params, opt_state, env_state, last_obs, key, state.updates + 1, returns,
                      total, count)  # fmt: skip
        return state, losses.mean()

    def train_chunk(state: State, chunk: int) -> tuple[State, jax.Array]:
        state = state._replace(finished_sum=jnp.zeros(()), finished_count=jnp.zeros(()))
        state, losses = jax.lax.scan(update, state, None, chunk)
        return state, losses

    def evaluate(state: State, key: jax.Array) -> jax.Array:
        """The mean return of ``TEST_NUM_ENVS`` greedy episodes (each env's first)."""
        m = config["TEST_NUM_ENVS"]
        key, reset_key = jax.random.split(key)
        obs, env_state = reset(jax.random.split(reset_key, m), env_params)

        def play(carry, _):
            env_state, obs, key, returns, alive = carry
            key, step_key = jax.random.split(key)
            action = jnp.argmax(network.apply(state.params, obs), axis=-1)
            obs, env_state, reward, done, _ = step(
                jax.random.split(step_key, m), env_state, action, env_params
            )
            returns = returns + alive * reward
            alive = alive * (1 - done)
            return (env_state, obs, key, returns, alive), None

        carry = (env_state, obs, key, jnp.zeros(m), jnp.ones(m))
        (_, _, _, returns, _), _ = jax.lax.scan(play, carry, None, env_params.max_steps_in_episode)
        return returns.mean()

    return (
        init,
        jax.jit(train_chunk, static_argnums=1, donate_argnums=0),
        jax.jit(evaluate),
        (num_updates),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="Breakout-MinAtar")
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    init, train_chunk, evaluate, updates = make(args.env, args.steps)
    state = init(jax.random.key(args.seed))
    start = time.perf_counter()
    state, _ = train_chunk(state, updates)
    jax.block_until_ready(state)
    print(f"{updates} updates in {time.perf_counter() - start:.1f} s (compile included); "
          f"greedy return {float(evaluate(state, jax.random.key(10_000))):.2f}")  # fmt: skip


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
