"""Pure-JAX CartPole-v1 and Pendulum-v1 against gymnasium, and the auto-reset contract.

Tolerances. gymnasium integrates in float64 and casts observations to
float32; the JAX environments integrate in float32. So:

- One float32 step from gymnasium's state (rounded to float32) agrees to
  ``1e-5``: the rounding of the inputs (relative 6e-8) through ~20 float32
  operations on values of magnitude <= 8. Pendulum's angle is not wrapped and
  reaches ~80 rad in 200 fast steps, where float32 spacing is 7.6e-6, so its
  observations get ``atol=2e-5`` and its rewards (``theta^2`` up to pi^2,
  derivative 2 pi) ``atol=1e-4``.
- Long float32 trajectories are compared one step at a time, each step from
  gymnasium's own state, because the upright cart-pole's unstable mode grows
  errors by e^(4/s * 10 s) ~ 1e17 over 500 steps: any rounding difference
  (even float64 ``sin`` in XLA versus numpy) would show. Free-running float32
  trajectories are compared over whole short episodes (<= 30 steps, growth
  x10): ``atol=1e-5``.
- Under ``jax.enable_x64`` with a float64 state the same code runs gymnasium's
  float64 arithmetic: one CartPole step gives gymnasium's next state to
  ``rtol=1e-12`` (last-bit differences of ``sin``/``cos`` allowed), and
  200 free-running Pendulum steps give its observations to float32 rounding
  (``rtol=1e-6``), which shows the only difference is float32.
"""

from __future__ import annotations

import functools

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.envs.classic_control.pendulum import angle_normalize as gym_angle_normalize
from helpers import assert_trees_close, maybe_jit, tree_equal

from jaxlearner.anakin.envs import (
    CartPole,
    CartPoleState,
    Environment,
    EnvState,
    Pendulum,
    PendulumState,
    cartpole,
    make,
    pendulum,
    registered_ids,
)
from jaxlearner.anakin.envs.environment import reset_episode, step_with_auto_reset
from jaxlearner.anakin.envs.gymnax import from_gymnax, to_gymnasium_space

ENV_IDS = ("CartPole-v1", "Pendulum-v1")


@functools.cache
def _jitted(env, method, batched):
    """One compilation of ``env.method`` (vmapped or not) shared by the tests: envs are hashable."""
    fn = getattr(env, method)
    return jax.jit(jax.vmap(fn) if batched else fn)


def env_fn(env, method, use_jit, batched=False):
    """``env.reset``/``env.step``, optionally vmapped, jitted (cached) or run with jit disabled."""
    if use_jit:
        return _jitted(env, method, batched)
    fn = getattr(env, method)
    return maybe_jit(jax.vmap(fn) if batched else fn, False)


def _cartpole_policy(name):
    """A deterministic CartPole controller ``(obs, rng) -> action``."""

    def linear(k_theta, k_theta_dot, k_x, k_x_dot):
        return lambda o, rng: int(
            k_theta * o[2] + k_theta_dot * o[3] + k_x * o[0] + k_x_dot * o[1] > 0
        )

    return {
        "random": lambda o, rng: int(rng.integers(2)),
        "always_left": lambda o, rng: 0,
        "always_right": lambda o, rng: 1,
        # Stabilises the pole and the cart: survives to the time limit.
        "balance": linear(10.0, 2.0, 0.1, 0.5),
        # Stabilises the pole but feeds the cart's drift back: leaves the track.
        "drift": linear(10.0, 2.0, -0.1, -0.5),
    }[name]


def _pendulum_policy(name):
    """A deterministic Pendulum controller ``(obs, rng) -> float32 [1]``."""
    return {
        "random": lambda o, rng: rng.uniform(-2, 2, (1,)).astype(np.float32),
        "out_of_range": lambda o, rng: rng.uniform(-6, 6, (1,)).astype(np.float32),
        # Pumps energy in: reaches the velocity clip of 8 rad/s.
        "pump": lambda o, rng: np.array([5.0 if o[2] >= 0 else -5.0], np.float32),
    }[name]


def _gym_episode(env_id, policy, seed, max_episode_steps=None):
    """One gymnasium episode: the state before each step, actions, and what step returned."""
    env = gymnasium.make(env_id, max_episode_steps=max_episode_steps)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    episode = {k: [] for k in ("state", "action", "obs", "reward", "terminated", "truncated")}
    while True:
        action = policy(obs, rng)
        episode["state"].append(np.array(env.unwrapped.state, np.float64))
        obs, reward, terminated, truncated, _ = env.step(action)
        for name, value in zip(
            ("action", "obs", "reward", "terminated", "truncated"),
            (action, obs, reward, terminated, truncated),
            strict=True,
        ):
            episode[name].append(value)
        if terminated or truncated:
            return {k: np.array(v) for k, v in episode.items()}


def _dynamics(env_id, states, dtype=jnp.float32):
    """gymnasium's ``env.unwrapped.state`` rows ``[..., d]`` as the JAX env's dynamics."""
    fields = CartPoleState if env_id == "CartPole-v1" else PendulumState
    return fields(*[jnp.asarray(column, dtype) for column in np.moveaxis(states, -1, 0)])


@functools.cache
def _jitted_step_each(env):
    """``jax.lax.map`` of ``env.step`` over a batch, jitted.

    ``lax.map`` rather than ``vmap``: XLA's compile time for a vmapped
    threefry grows with the batch, and these batches are episodes.
    """
    return jax.jit(
        lambda states, actions, keys: jax.lax.map(lambda x: env.step(*x), (states, actions, keys))
    )


EAGER_STEPS = 32  # eager comparisons take episodes of at most this many steps


def _steps_from_gym_states(env, env_id, episode, use_jit, dtype=jnp.float32):
    """Each step of ``episode`` taken by the JAX env from gymnasium's state before it.

    One call over the ``T`` steps: ``state_t`` is gymnasium's state with
    ``time = t`` and the return so far, so truncation and the episode return
    are checked along with the dynamics. Episodes are padded to a fixed length
    (and the padding cut off again) so every episode shares one compilation:
    jitted, ``lax.map`` over the time limit; eager, ``vmap`` over ``EAGER_STEPS``.
    """
    length = len(episode["action"])
    padded = env.max_episode_steps if use_jit else EAGER_STEPS
    assert length <= padded

    def pad(x):
        return np.concatenate([x, np.repeat(x[-1:], padded - length, 0)])

    returns = np.cumsum(episode["reward"]) - episode["reward"]
    states = EnvState(
        dynamics=_dynamics(env_id, pad(episode["state"]), dtype),
        time=jnp.arange(padded, dtype=jnp.int32),
        episode_return=jnp.asarray(pad(returns), jnp.float32),
    )
    keys = jax.random.split(jax.random.key(0), padded)
    step_each = _jitted_step_each(env) if use_jit else maybe_jit(jax.vmap(env.step), False)
    out = step_each(states, jnp.asarray(pad(episode["action"])), keys)
    return jax.tree.map(lambda x: np.asarray(x)[:length], out)


def _assert_matches_gym(env_id, episode, out, obs_atol, reward_atol):
    state, obs, reward, terminated, truncated, info = out
    length = len(episode["action"])
    np.testing.assert_allclose(info["final_obs"], episode["obs"], rtol=1e-5, atol=obs_atol)
    np.testing.assert_allclose(reward, episode["reward"], rtol=1e-5, atol=reward_atol)
    np.testing.assert_array_equal(terminated, episode["terminated"])
    np.testing.assert_array_equal(truncated, episode["truncated"])
    np.testing.assert_array_equal(info["episode_length"], np.arange(1, length + 1))
    np.testing.assert_allclose(
        info["episode_return"], np.cumsum(episode["reward"]), rtol=1e-5, atol=reward_atol * length
    )
    # Only the last step ended the episode: there, obs is a fresh start.
    np.testing.assert_array_equal(state.time, np.r_[np.arange(1, length), 0])
    np.testing.assert_array_equal(obs[:-1], info["final_obs"][:-1])
    assert make(env_id).observation_space.contains(np.asarray(obs[-1]))


@pytest.mark.parametrize(
    ("policy", "seed", "end", "use_jit"),
    [
        ("random", 0, "terminated", True),
        ("random", 0, "terminated", False),
        ("random", 1, "terminated", True),
        ("always_left", 2, "terminated", True),
        ("always_right", 3, "terminated", True),
        ("drift", 0, "cart_left_track", True),
        ("balance", 0, "truncated_at_500", True),
    ],
)
def test_cartpole_matches_gymnasium_step_by_step(policy, seed, end, use_jit):
    episode = _gym_episode("CartPole-v1", _cartpole_policy(policy), seed)
    last_obs = episode["obs"][-1]
    if end == "cart_left_track":
        assert abs(last_obs[0]) > cartpole.X_THRESHOLD and episode["terminated"][-1]
    if end == "truncated_at_500":
        assert len(episode["action"]) == 500 and not episode["terminated"].any()
    out = _steps_from_gym_states(make("CartPole-v1"), "CartPole-v1", episode, use_jit)
    _assert_matches_gym("CartPole-v1", episode, out, obs_atol=1e-5, reward_atol=0.0)
    assert np.all(np.abs(out[1][-1]) <= cartpole.RESET_BOUND)


@pytest.mark.parametrize(
    ("policy", "seed", "use_jit"),
    [("random", 0, True), ("random", 0, False), ("out_of_range", 1, True), ("pump", 2, True)],
)
def test_pendulum_matches_gymnasium_step_by_step(policy, seed, use_jit):
    limit = 200 if use_jit else EAGER_STEPS  # gymnasium's TimeLimit, or a short one
    env = make("Pendulum-v1", max_episode_steps=limit)
    episode = _gym_episode("Pendulum-v1", _pendulum_policy(policy), seed, limit)
    assert len(episode["action"]) == limit and episode["truncated"][-1]
    if policy == "out_of_range":
        assert np.abs(episode["action"]).max() > 2 * pendulum.MAX_TORQUE  # clipping exercised
    if policy == "pump":
        assert np.abs(episode["obs"][:, 2]).max() == pendulum.MAX_SPEED  # velocity clip reached
    out = _steps_from_gym_states(env, "Pendulum-v1", episode, use_jit)
    _assert_matches_gym("Pendulum-v1", episode, out, obs_atol=2e-5, reward_atol=1e-4)


@functools.cache
def _rollout(env):
    """``rollout(state, actions [T, ...])``: ``lax.scan`` of ``env.step``, no resyncing."""

    def rollout(state, actions):
        def body(state, action):
            state, obs, reward, terminated, truncated, info = env.step(
                state, action, jax.random.key(0)
            )
            return state, (obs, reward, terminated, truncated, info)

        return jax.lax.scan(body, state, actions)

    return rollout


@functools.cache
def _jitted_rollout(env):
    return jax.jit(_rollout(env))


def _free_rollout(env, state, actions, use_jit, length):
    """The first ``T`` steps of a rollout of ``actions [T, ...]`` padded to ``length``.

    Steps after the episode ends do not change the earlier ones; the padding
    gives every episode the same shapes and so one compilation.
    """
    count = len(actions)
    padded = np.concatenate([actions, np.repeat(actions[-1:], length - count, 0)])
    rollout = _jitted_rollout(env) if use_jit else maybe_jit(_rollout(env), False)
    _, outputs = rollout(state, jnp.asarray(padded))
    return jax.tree.map(lambda x: np.asarray(x)[:count], outputs)


@pytest.mark.parametrize(("policy", "seed"), [("random", 4), ("always_left", 5)])
def test_cartpole_runs_whole_episodes_like_gymnasium_from_a_copied_state(policy, seed):
    # Jitted only: the eager cases of the step-by-step tests run the same step.
    episode = _gym_episode("CartPole-v1", _cartpole_policy(policy), seed)
    assert len(episode["action"]) <= 30  # short: float32 errors grow x10 at most
    state = EnvState(
        dynamics=_dynamics("CartPole-v1", episode["state"][0]),
        time=jnp.int32(0),
        episode_return=jnp.float32(0),
    )
    env = make("CartPole-v1")
    obs, reward, terminated, truncated, info = _free_rollout(
        env, state, episode["action"], True, length=30
    )
    np.testing.assert_allclose(info["final_obs"], episode["obs"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(reward, episode["reward"])
    np.testing.assert_array_equal(terminated, episode["terminated"])
    np.testing.assert_array_equal(truncated, episode["truncated"])


@pytest.mark.parametrize(("policy", "seed"), [("balance", 0), ("drift", 0), ("random", 1)])
def test_cartpole_in_float64_is_gymnasiums_arithmetic(policy, seed):
    episode = _gym_episode("CartPole-v1", _cartpole_policy(policy), seed)
    with jax.enable_x64(True):
        out = _steps_from_gym_states(make("CartPole-v1"), "CartPole-v1", episode, True, jnp.float64)
        _assert_matches_gym("CartPole-v1", episode, out, obs_atol=0.0, reward_atol=0.0)
        next_states = np.stack([np.asarray(x) for x in jax.tree.leaves(out[0].dynamics)], -1)
    # gymnasium's state after step t is its state before step t + 1.
    assert next_states.dtype == np.float64
    np.testing.assert_allclose(next_states[:-1], episode["state"][1:], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(("policy", "seed"), [("random", 0), ("pump", 2)])
def test_pendulum_in_float64_runs_whole_episodes_like_gymnasium(policy, seed):
    # The pendulum is tame enough that float64 free-running agrees for 200 steps.
    episode = _gym_episode("Pendulum-v1", _pendulum_policy(policy), seed)
    env = make("Pendulum-v1")
    with jax.enable_x64(True):
        state = EnvState(
            dynamics=_dynamics("Pendulum-v1", episode["state"][0], jnp.float64),
            time=jnp.int32(0),
            episode_return=jnp.float32(0),
        )
        obs, reward, terminated, truncated, info = _free_rollout(
            env, state, episode["action"], True, length=200
        )
        np.testing.assert_allclose(info["final_obs"], episode["obs"], rtol=1e-6, atol=1e-7)
    # Rewards are float32: equal to gymnasium's float64 rewards to float32 rounding.
    np.testing.assert_allclose(reward, episode["reward"], rtol=1e-7, atol=1e-7)
    np.testing.assert_array_equal(truncated, np.arange(1, 201) == 200)
    assert not np.any(terminated)


def test_cartpole_step_dynamics_by_hand(jit):
    # From rest, pushed right with 10 N: temp = 10 / 1.1; thetaacc = -temp / (0.5 (4/3 - 0.1/1.1))
    # = -14.634146; xacc = temp - 0.05 thetaacc / 1.1 = 9.756098. Euler: velocities gain
    # 0.02 * acceleration, positions still use the old (zero) velocities.
    state = CartPoleState(*jnp.zeros(4))
    step = maybe_jit(cartpole.step_dynamics, jit)
    next_state, obs, reward, terminated = step(state, 1)
    np.testing.assert_allclose(obs, [0.0, 0.19512196, 0.0, -0.29268292], rtol=1e-6)
    assert float(reward) == 1.0 and not bool(terminated)
    # Pushed left the mirror image; Sutton and Barto's reward is 0 while alive, -1 on falling.
    _, obs, reward, _ = step(state, 0)
    np.testing.assert_allclose(obs, [0.0, -0.19512196, 0.0, 0.29268292], rtol=1e-6)
    fallen = CartPoleState(*jnp.array([0.0, 0.0, 0.2094, 1.0]))
    step_sb = maybe_jit(lambda s, a: cartpole.step_dynamics(s, a, True), jit)
    _, _, reward, terminated = step_sb(fallen, 1)
    assert bool(terminated) and float(reward) == -1.0
    assert float(step_sb(state, 1)[2]) == 0.0


def test_pendulum_step_dynamics_by_hand(jit):
    # theta = theta_dot = 0, torque 5 clipped to 2: theta_dot' = 3 / (m l^2) * 2 * 0.05 = 0.3,
    # theta' = 0.3 * 0.05 = 0.015, reward = -(0 + 0 + 0.001 * 2^2) = -0.004.
    step = maybe_jit(pendulum.step_dynamics, jit)
    next_state, obs, reward = step(PendulumState(*jnp.zeros(2)), jnp.array([5.0]))
    np.testing.assert_allclose([next_state.theta, next_state.theta_dot], [0.015, 0.3], rtol=1e-6)
    np.testing.assert_allclose(obs, [np.cos(0.015), np.sin(0.015), 0.3], rtol=1e-6)
    np.testing.assert_allclose(reward, -0.004, rtol=1e-6)
    # Hanging down and spinning at 7.9 rad/s with full torque: the speed clips at 8.
    next_state, _, _ = step(PendulumState(jnp.float32(np.pi), jnp.float32(7.9)), jnp.array([2.0]))
    assert float(next_state.theta_dot) == 8.0


def test_angle_normalize_is_gymnasiums(jit):
    angles = np.linspace(-30, 30, 101)
    wrapped = maybe_jit(pendulum.angle_normalize, jit)(jnp.asarray(angles, jnp.float32))
    np.testing.assert_allclose(wrapped, gym_angle_normalize(angles), atol=1e-5)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_draws_gymnasiums_initial_distribution(env_id):
    env = make(env_id)
    keys = jax.random.split(jax.random.key(0), 1000)
    states, obs = jax.jit(lambda keys: jax.lax.map(env.reset, keys))(keys)
    values = np.stack([np.asarray(x) for x in jax.tree.leaves(states.dynamics)], -1)
    if env_id == "CartPole-v1":
        bounds = np.full(4, cartpole.RESET_BOUND)
    else:
        bounds = np.array([pendulum.RESET_ANGLE, pendulum.RESET_SPEED])
    # Uniform within the bounds: inside, close to both ends of every coordinate (1000 draws
    # all miss the last 2% with probability 0.98^1000 = 2e-9), centred (the standard error
    # of the mean of 1000 draws is bound / sqrt(3000) = 0.018 bound).
    assert np.all(np.abs(values) <= bounds + 1e-6)
    np.testing.assert_allclose(values.min(0), -bounds, rtol=0.02)
    np.testing.assert_allclose(values.max(0), bounds, rtol=0.02)
    assert np.all(np.abs(values.mean(0)) < 0.1 * bounds)
    assert all(env.observation_space.contains(o) for o in np.asarray(obs)[:100])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reset_starts_an_episode_from_its_key(env_id, jit):
    env = make(env_id)
    reset = env_fn(env, "reset", jit)
    state, obs = reset(jax.random.key(0))
    assert state.time.dtype == jnp.int32 and int(state.time) == 0
    assert state.episode_return.dtype == jnp.float32 and float(state.episode_return) == 0.0
    assert obs.dtype == jnp.float32 and env.observation_space.contains(np.asarray(obs))
    observe = cartpole.observe if env_id == "CartPole-v1" else pendulum.observe
    np.testing.assert_array_equal(obs, observe(state.dynamics))
    assert tree_equal(reset(jax.random.key(0)), (state, obs))
    assert not np.allclose(reset(jax.random.key(1))[1], obs)
    # (Jitted and eager draws agree to the last bit or so: jit may fuse the multiply-add.)
    assert_trees_close(env_fn(env, "reset", not jit)(jax.random.key(0)), (state, obs))


def _actions(env_id, rng, shape):
    if env_id == "CartPole-v1":
        return jnp.asarray(rng.integers(0, 2, shape), jnp.int32)
    return jnp.asarray(rng.uniform(-3, 3, (*shape, 1)), jnp.float32)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_jitted_vmapped_reset_and_step_match_one_env_at_a_time(env_id):
    # (vmap with jit disabled runs in the eager cases of the gymnasium comparisons above.)
    env = make(env_id)
    num_envs, num_steps = 4, 5
    # Three envs near the time limit, so each resets at a different step of the test.
    limit = env.max_episode_steps
    times = np.array([limit - 1, limit - 2, limit - 4, 0], np.int32)
    reset_keys = jax.random.split(jax.random.key(1), num_envs)
    step_keys = jax.random.split(jax.random.key(2), (num_steps, num_envs))
    actions = np.asarray(_actions(env_id, np.random.default_rng(0), (num_steps, num_envs)))
    reset, step = env_fn(env, "reset", True), env_fn(env, "step", True)
    batched_reset = env_fn(env, "reset", True, batched=True)
    batched_step = env_fn(env, "step", True, batched=True)

    states, obs = batched_reset(reset_keys)
    states = states.replace(time=times)
    singles = [
        (state.replace(time=time),)
        for (state, _), time in zip(map(reset, reset_keys), times, strict=True)
    ]
    for t in range(num_steps):
        out = batched_step(states, actions[t], step_keys[t])
        singles = [step(singles[i][0], actions[t, i], step_keys[t, i]) for i in range(num_envs)]
        assert_trees_close(out, jax.tree.map(lambda *xs: np.stack(xs), *singles))
        states = out[0]
        np.testing.assert_array_equal(out[4], times + t + 1 == limit)
    assert out[1].shape == (num_envs, *env.observation_space.shape)
    assert out[2].dtype == jnp.float32 and out[3].dtype == out[4].dtype == jnp.bool_


def test_termination_resets_and_reports_the_final_observation(jit):
    env = make("CartPole-v1")
    key = jax.random.key(7)
    # 0.02 s at 1 m/s from x = 2.39 ends at x = 2.41 > 2.4: the cart leaves the track.
    state = EnvState(
        dynamics=CartPoleState(*jnp.array([2.39, 1.0, 0.0, 0.0])),
        time=jnp.int32(41),
        episode_return=jnp.float32(41.0),
    )
    state, obs, reward, terminated, truncated, info = env_fn(env, "step", jit)(
        state, np.int32(1), key
    )
    assert bool(terminated) and not bool(truncated) and float(reward) == 1.0
    np.testing.assert_allclose(info["final_obs"][0], 2.41, rtol=1e-6)
    assert float(info["episode_return"]) == 42.0 and int(info["episode_length"]) == 42
    # The returned state and obs start the next episode, drawn with step's reset key.
    _, reset_key = jax.random.split(key)
    fresh_state, fresh_obs = env.reset(reset_key)
    # (Equal up to the last bit: jit may fuse the uniform draw's multiply-add.)
    assert_trees_close(state, fresh_state)
    assert_trees_close(obs, fresh_obs)


def test_a_step_that_does_not_end_the_episode_carries_on(jit):
    env = make("Pendulum-v1")
    state, obs = env_fn(env, "reset", jit)(jax.random.key(0))
    step = env_fn(env, "step", jit)
    total = 0.0
    for t in range(1, 4):
        state, obs, reward, terminated, truncated, info = step(
            state, jnp.array([0.5]), jax.random.key(t)
        )
        total += float(reward)
        assert not bool(terminated) and not bool(truncated)
        assert tree_equal(obs, info["final_obs"])
        assert int(state.time) == int(info["episode_length"]) == t
        np.testing.assert_allclose(state.episode_return, total, rtol=1e-6)
        np.testing.assert_allclose(info["episode_return"], total, rtol=1e-6)


@pytest.mark.parametrize(("env_id", "limit"), [("CartPole-v1", 500), ("Pendulum-v1", 200)])
def test_truncates_at_exactly_the_time_limit(env_id, limit):
    env = make(env_id)
    assert env.max_episode_steps == gymnasium.spec(env_id).max_episode_steps == limit
    policy = {
        "CartPole-v1": lambda obs: (
            10 * obs[2] + 2 * obs[3] + 0.1 * obs[0] + 0.5 * obs[1] > 0
        ).astype(jnp.int32),
        "Pendulum-v1": lambda obs: jnp.zeros(1),
    }[env_id]

    @jax.jit
    def rollout(key):
        def body(carry, key):
            state, obs = carry
            state, obs, reward, terminated, truncated, info = env.step(state, policy(obs), key)
            return (state, obs), (terminated, truncated, info["episode_length"], state.time)

        reset_key, step_key = jax.random.split(key)
        start = env.reset(reset_key)
        return jax.lax.scan(body, start, jax.random.split(step_key, 2 * limit + 1))[1]

    terminated, truncated, episode_length, time = rollout(jax.random.key(0))
    assert not np.any(terminated)
    np.testing.assert_array_equal(np.flatnonzero(truncated), [limit - 1, 2 * limit - 1])
    assert episode_length[limit - 1] == limit and time[limit - 1] == 0 and time[limit] == 1


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_one_step_episodes_truncate_every_step(env_id):
    env = make(env_id, max_episode_steps=1)
    state, _ = env.reset(jax.random.key(0))
    action = _actions(env_id, np.random.default_rng(0), ())
    step = env_fn(env, "step", False)  # eager: shares op compilations with other tests
    for t in range(3):
        state, _, _, _, truncated, info = step(state, action, jax.random.key(t))
        assert bool(truncated) and int(info["episode_length"]) == 1 and int(state.time) == 0


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_spaces_are_gymnasiums(env_id):
    env, gym_env = make(env_id), gymnasium.make(env_id)
    assert isinstance(env, Environment)
    for ours, theirs in [
        (env.observation_space, gym_env.observation_space),
        (env.action_space, gym_env.action_space),
    ]:
        assert type(ours) is type(theirs) and ours == theirs
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        if isinstance(theirs, gymnasium.spaces.Box):
            np.testing.assert_array_equal(ours.low, theirs.low)
            np.testing.assert_array_equal(ours.high, theirs.high)
    # Actions gymnasium samples are actions the JAX env takes.
    state, obs = env_fn(env, "reset", True)(jax.random.key(0))
    action = gym_env.action_space.sample()
    state, obs, *_ = env_fn(env, "step", True)(state, action, jax.random.key(1))
    assert obs.dtype == env.observation_space.dtype and obs.shape == env.observation_space.shape


def test_scan_rollout_compiles_once():
    env = make("CartPole-v1")
    num_envs, num_steps = 8, 64
    traces = {"rollout": 0, "step": 0}

    def counted_step(state, action, key):
        traces["step"] += 1
        return env.step(state, action, key)

    @jax.jit
    def rollout(key):
        traces["rollout"] += 1
        reset_key, key = jax.random.split(key)
        state, obs = jax.vmap(env.reset)(jax.random.split(reset_key, num_envs))

        def body(carry, key):
            state, obs = carry
            action_key, step_key = jax.random.split(key)
            actions = jax.random.bernoulli(action_key, shape=(num_envs,)).astype(jnp.int32)
            step_keys = jax.random.split(step_key, num_envs)
            state, obs, reward, terminated, truncated, info = jax.vmap(counted_step)(
                state, actions, step_keys
            )
            return (state, obs), reward

        return jax.lax.scan(body, (state, obs), jax.random.split(key, num_steps))

    for seed in range(4):
        (state, obs), rewards = rollout(jax.random.key(seed))
    assert traces == {"rollout": 1, "step": 1}
    assert rewards.shape == (num_steps, num_envs) and obs.shape == (num_envs, 4)


def test_make_lists_the_registered_ids_and_passes_config():
    assert registered_ids() == ENV_IDS
    assert make("CartPole-v1") == CartPole()
    assert make("Pendulum-v1", gravity=9.81, max_episode_steps=50) == Pendulum(50, 9.81)
    assert make("CartPole-v1", sutton_barto_reward=True).sutton_barto_reward
    with pytest.raises(KeyError, match="Available: CartPole-v1, Pendulum-v1") as error:
        make("cartpole")
    assert "'cartpole'" in str(error.value)
    with pytest.raises(TypeError, match="env_id must be a str"):
        make(CartPole)
    with pytest.raises(TypeError, match="unexpected keyword"):
        make("CartPole-v1", gravity=9.8)


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (lambda: CartPole(max_episode_steps=0), ValueError, ">= 1, got 0"),
        (lambda: CartPole(max_episode_steps=2.5), TypeError, "must be an int, got 2.5"),
        (lambda: Pendulum(max_episode_steps=True), TypeError, "must be an int, got True"),
        (lambda: CartPole(sutton_barto_reward=1), TypeError, "must be a bool"),
        (lambda: Pendulum(gravity=float("nan")), ValueError, "must be finite"),
        (lambda: Pendulum(gravity="10"), TypeError, "must be a float"),
    ],
)
def test_configs_are_validated(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_misuse_raises_clear_errors():
    cart, pend = make("CartPole-v1"), make("Pendulum-v1")
    state, obs = cart.reset(jax.random.key(0))
    with pytest.raises(ValueError, match=r"one PRNG key .* jax.vmap\(env.reset\)"):
        cart.reset(jax.random.split(jax.random.key(0), 4))
    with pytest.raises(ValueError, match="one action per environment"):
        cart.step(state, jnp.array([0, 1]), jax.random.key(0))
    with pytest.raises(TypeError, match="integers in"):
        cart.step(state, jnp.array(0.7), jax.random.key(0))
    with pytest.raises(TypeError, match="expects the EnvState"):
        cart.step(obs, 0, jax.random.key(0))
    pend_state, _ = pend.reset(jax.random.key(0))
    with pytest.raises(ValueError, match="one torque per environment"):
        pend.step(pend_state, jnp.zeros(2), jax.random.key(0))


def test_reset_episode_and_step_with_auto_reset_compose_any_dynamics(jit):
    # A counter that terminates when it passes 2, under a time limit of 10.
    def reset_dynamics(key):
        return jnp.int32(0), jnp.zeros(1)

    def step_dynamics(count, action, key):
        count = count + action
        return count, jnp.float32(count)[None], jnp.float32(1.0), count > 2

    def three_steps(key):
        state, _ = reset_episode(key, reset_dynamics)
        outs = []
        for _ in range(3):
            out = step_with_auto_reset(
                state,
                1,
                key,
                step_dynamics=step_dynamics,
                reset_dynamics=reset_dynamics,
                max_episode_steps=10,
            )
            state = out[0]
            outs.append(out)
        return outs

    outs = maybe_jit(three_steps, jit)(jax.random.key(0))
    assert [bool(out[3]) for out in outs] == [False, False, True]
    state, obs, _, _, _, info = outs[-1]
    assert float(obs[0]) == 0.0 and float(info["final_obs"][0]) == 3.0
    assert int(info["episode_length"]) == 3 and int(state.time) == 0


class _FakeSpace:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class Box(_FakeSpace):
    """Stands in for gymnax's ``spaces.Box`` (the adapter reads its name and fields)."""


class Discrete(_FakeSpace):
    """Stands in for gymnax's ``spaces.Discrete``."""


def test_gymnax_adapter_on_a_gymnax_shaped_environment(jit):
    """The adapter's logic without gymnax: a countdown with gymnax's method signatures."""
    from flax import struct

    @struct.dataclass
    class Params:
        max_steps_in_episode: int = 4

    @struct.dataclass
    class State:
        left: jax.Array
        time: int

    class Countdown:
        default_params = Params()

        def reset_env(self, key, params):
            state = State(left=jnp.int32(3), time=0)
            return jnp.float32(state.left)[None], state

        def step_env(self, key, state, action, params):
            # Old gymnax folds its time limit into done; the adapter must keep it unreachable.
            state = State(left=state.left - action, time=state.time + 1)
            done = (state.left <= 0) | (state.time >= params.max_steps_in_episode)
            return jnp.float32(state.left)[None], state, 1.0, done, {"discount": 1.0}

        def observation_space(self, params):
            return Box(low=0.0, high=3.0, shape=(1,), dtype=jnp.float32)

        def action_space(self, params):
            return Discrete(n=2, shape=(), dtype=jnp.int32)

    env = from_gymnax(Countdown())
    assert env.max_episode_steps == 4 and isinstance(env, Environment)
    assert env.observation_space == gymnasium.spaces.Box(0.0, 3.0, (1,), np.float32)
    assert env.action_space == gymnasium.spaces.Discrete(2)
    state, obs = env.reset(jax.random.key(0))
    step = maybe_jit(env.step, jit)
    flags = []
    for action in [1, 0, 0, 0, 1, 1, 1]:
        state, obs, reward, terminated, truncated, info = step(state, action, jax.random.key(1))
        flags.append((bool(terminated), bool(truncated)))
    # Four steps truncate (left 3 -> 2 -> 2 -> 2 -> 2), then three counting down terminate.
    assert flags == [(False, False)] * 3 + [(False, True)] + [(False, False)] * 2 + [(True, False)]
    with pytest.raises(TypeError, match="gymnax environment with a reset_env"):
        from_gymnax(object(), Params())
    with pytest.raises(TypeError, match="Discrete and Box"):
        to_gymnasium_space(_FakeSpace(n=2))


def test_gymnax_pendulum_matches_the_native_one():
    gymnax = pytest.importorskip("gymnax")
    from jaxlearner.anakin.envs.gymnax import make_gymnax

    adapted, native = make_gymnax("Pendulum-v1"), make("Pendulum-v1")
    assert adapted.max_episode_steps == 200
    assert adapted.observation_space == native.observation_space
    assert adapted.action_space == native.action_space
    assert isinstance(
        from_gymnax(*gymnax.make("CartPole-v1")).action_space, gymnasium.spaces.Discrete
    )

    def rollout(env):
        def body(carry, key):
            state, obs = carry
            action_key, step_key = jax.random.split(key)
            action = jax.random.uniform(action_key, (1,), minval=-3, maxval=3)
            state, obs, reward, terminated, truncated, info = env.step(state, action, step_key)
            return (state, obs), (obs, reward, terminated, truncated)

        start = env.reset(jax.random.key(0))
        return jax.lax.scan(body, start, jax.random.split(jax.random.key(1), 250))[1]

    # Both draw the reset from the same keys the same way, through one truncation at 200.
    ours, theirs = (
        jax.jit(rollout, static_argnums=0)(native),
        jax.jit(rollout, static_argnums=0)(adapted),
    )
    assert_trees_close(ours, theirs, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(np.flatnonzero(theirs[3]), [199])
