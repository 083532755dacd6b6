"""EnvRunner: shapes, dtypes, episode accounting across autoreset, terminated vs truncated."""

import gymnasium as gym
import jax
import numpy as np
import pytest

from jaxlearner.training.env_runner import EnvRunner, evaluate, make_vector_env


def random_discrete(params, obs, key):
    return jax.random.randint(key, obs.shape[:1], 0, 2), {"zeros": obs[:, 0] * 0}


def random_box(params, obs, key):
    return jax.random.uniform(key, (obs.shape[0], 1), minval=-2.0, maxval=2.0), {}


def push_right(params, obs, key):
    return jax.numpy.ones(obs.shape[:1], jax.numpy.int32), {}


def test_cartpole_shapes_dtypes_and_device_extras():
    runner = EnvRunner("CartPole-v1", num_envs=3, seed=0)
    rollout = runner.sample(random_discrete, None, 20, jax.random.key(0))
    assert rollout.obs.shape == (20, 3, 4) and rollout.obs.dtype == np.float32
    assert rollout.next_obs.shape == (20, 3, 4)
    assert rollout.actions.shape == (20, 3) and rollout.actions.dtype == np.int32
    assert rollout.rewards.dtype == np.float32 and rollout.rewards.shape == (20, 3)
    assert rollout.terminated.dtype == bool and rollout.truncated.dtype == bool
    assert rollout.last_obs.shape == (3, 4)
    assert isinstance(rollout.extras["zeros"], jax.Array)
    assert rollout.extras["zeros"].shape == (20, 3)
    assert rollout.valid.all() and rollout.env_steps == 60
    # Consecutive steps chain: the next step's obs is this step's next_obs unless it ended.
    done = rollout.terminated | rollout.truncated
    np.testing.assert_array_equal(rollout.obs[1:][~done[:-1]], rollout.next_obs[:-1][~done[:-1]])


def test_pendulum_shapes_and_truncation_at_200():
    runner = EnvRunner("Pendulum-v1", num_envs=2, seed=1)
    rollout = runner.sample(random_box, None, 210, jax.random.key(0))
    assert rollout.obs.shape == (210, 2, 3) and rollout.actions.shape == (210, 2, 1)
    assert rollout.actions.dtype == np.float32
    # Pendulum never terminates; every episode is truncated after exactly 200 steps.
    assert not rollout.terminated.any()
    assert rollout.truncated[199].all() and rollout.truncated.sum() == 2
    assert rollout.episode_lengths == [200, 200]
    np.testing.assert_allclose(
        rollout.episode_returns, rollout.rewards[:200].sum(0).astype(np.float64), rtol=1e-5
    )


@pytest.mark.parametrize("mode", ["same", "next"])
def test_episode_accounting_across_autoreset(mode):
    if mode == "same":
        runner = EnvRunner("CartPole-v1", num_envs=2, seed=3)
    else:
        envs = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
        assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
        runner = EnvRunner(envs, seed=3)
    # Always pushing right ends CartPole episodes in about 10 steps: several per env.
    rollout = runner.sample(push_right, None, 60, jax.random.key(0))
    done = rollout.terminated | rollout.truncated
    assert len(rollout.episode_returns) == done.sum() >= 4
    # CartPole pays 1 per step: an episode's return is its length.
    assert rollout.episode_returns == [float(n) for n in rollout.episode_lengths]
    assert rollout.terminated.sum() == done.sum()  # terminated, not truncated
    if mode == "next":
        # The step after each done only resets: masked, no reward, no done.
        for t, i in zip(*np.nonzero(done[:-1]), strict=True):
            assert not rollout.valid[t + 1, i] and rollout.rewards[t + 1, i] == 0
        assert rollout.env_steps == 120 - (~rollout.valid).sum()
        # A done step's next_obs is its final observation, outside the bounds.
        assert (np.abs(rollout.next_obs[done][:, 2]) > 0.2095).all()
    else:
        assert rollout.valid.all()
        # SAME_STEP: next_obs is the final observation, obs of the next step a fresh start.
        assert (np.abs(rollout.next_obs[done][:, 2]) > 0.2095).all()
        t, i = np.nonzero(done[:-1])
        assert (np.abs(rollout.obs[t + 1, i]) <= 0.05).all()
    # Episode lengths add up to the valid steps of finished episodes.
    valid_steps = sum(rollout.episode_lengths)
    assert valid_steps <= rollout.env_steps


def test_env_forms_and_errors():
    assert make_vector_env(lambda: gym.make("CartPole-v1"), num_envs=2).num_envs == 2
    assert make_vector_env(gym.make("CartPole-v1")).num_envs == 1
    with pytest.raises(ValueError, match="only with num_envs=1"):
        make_vector_env(gym.make("CartPole-v1"), num_envs=2)
    with pytest.raises(gym.error.Error, match="CartPole-v99|CartPol"):
        make_vector_env("CartPol-v1")
    with pytest.raises(ValueError, match="vectorization must be one of"):
        make_vector_env("CartPole-v1", vectorization="threads")
    with pytest.raises(ValueError, match="num_envs must be a positive int"):
        make_vector_env("CartPole-v1", num_envs=0)
    with pytest.raises(TypeError, match="env must be a gymnasium id"):
        make_vector_env(42)
    runner = EnvRunner("CartPole-v1")
    with pytest.raises(ValueError, match="num_steps must be a positive int"):
        runner.sample(random_discrete, None, 0, jax.random.key(0))


def test_env_config_reaches_gymnasium():
    runner = EnvRunner("Pendulum-v1", env_config={"max_episode_steps": 5})
    rollout = runner.sample(random_box, None, 6, jax.random.key(0))
    assert rollout.truncated[4].all() and rollout.episode_lengths == [5]


def test_async_vectorization():
    runner = EnvRunner("CartPole-v1", num_envs=2, vectorization="async", seed=0)
    try:
        rollout = runner.sample(random_discrete, None, 5, jax.random.key(0))
        assert rollout.obs.shape == (5, 2, 4)
    finally:
        runner.close()


def test_evaluate_runs_one_whole_episode_per_env():
    runner = EnvRunner("CartPole-v1", num_envs=4, seed=0)
    stats = evaluate(runner, push_right, None, jax.random.key(0), seed=0)
    assert stats["episodes"] == 4
    assert stats["return_min"] <= stats["return_mean"] <= stats["return_max"] < 30
    assert stats["length_mean"] == stats["return_mean"]
    with pytest.raises(RuntimeError, match="did not finish within 64 steps"):
        evaluate(EnvRunner("Pendulum-v1"), random_box, None, jax.random.key(0), max_steps=64)


def lean_on_pole(params, obs, key):
    """Deterministic: push toward the side the pole leans to (episodes of varied lengths)."""
    return (obs[:, 2] > 0).astype(jax.numpy.int32), {}


def hand_run_episode(seed):
    """One CartPole episode of ``lean_on_pole`` by hand, with gymnasium's plain env."""
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    total, length, done = 0.0, 0, False
    while not done:
        action = int(obs[2] > 0)
        obs, reward, terminated, truncated, _ = env.step(action)
        total, length, done = total + reward, length + 1, terminated or truncated
    return total, length


@pytest.mark.parametrize("mode", ["same", "next"])
def test_evaluate_equals_hand_run_episodes(mode):
    # A vector env seeded with s seeds its sub-environment i with s + i.
    seed, count = 7, 5
    if mode == "same":
        runner = EnvRunner("CartPole-v1", num_envs=count)
    else:
        runner = EnvRunner(gym.make_vec("CartPole-v1", num_envs=count, vectorization_mode="sync"))
    stats = evaluate(runner, lean_on_pole, None, jax.random.key(0), seed=seed)
    episodes = [hand_run_episode(seed + i) for i in range(count)]
    returns = np.array([r for r, _ in episodes])
    assert len(set(returns)) > 1  # lengths differ: later steps of finished envs are ignored
    assert stats == {
        "return_mean": returns.mean(),
        "return_min": returns.min(),
        "return_max": returns.max(),
        "length_mean": np.mean([n for _, n in episodes]),
        "episodes": float(count),
    }
    # Evaluating again from the same seed gives the same episodes.
    assert evaluate(runner, lean_on_pole, None, jax.random.key(1), seed=seed) == stats


def sampled_evaluate(runner, policy, params, key, seed):
    """The reference: 32-step rollouts of ``EnvRunner.sample``, first episode of each env."""
    runner.reset(seed)
    returns, lengths = {}, {}
    while len(returns) < runner.num_envs:
        key, sample_key = jax.random.split(key)
        rollout = runner.sample(policy, params, 32, sample_key)
        for env, episode_return, length in zip(
            rollout.episode_envs, rollout.episode_returns, rollout.episode_lengths, strict=True
        ):
            returns.setdefault(env, episode_return)
            lengths.setdefault(env, length)
    return sorted(returns.values()), np.mean(list(lengths.values()))


def test_evaluate_keys_equal_those_of_sampled_rollouts():
    # A stochastic policy's episodes depend on every step's key: evaluate hands out the
    # keys that 32-step rollouts of EnvRunner.sample would, so the episodes are the same.
    runner = EnvRunner("CartPole-v1", num_envs=3)
    stats = evaluate(runner, random_discrete, None, jax.random.key(5), seed=11)
    returns, length_mean = sampled_evaluate(runner, random_discrete, None, jax.random.key(5), 11)
    assert stats["return_min"] == returns[0] and stats["return_max"] == returns[-1]
    assert stats["return_mean"] == pytest.approx(np.mean(returns))
    assert stats["length_mean"] == pytest.approx(length_mean)


@pytest.mark.parametrize("make_key", [jax.random.key, jax.random.PRNGKey])
def test_sample_gives_step_t_the_key_split_t(make_key):
    # Step t acts with jax.random.split(key, T)[t], typed keys and raw uint32 keys alike.
    runner = EnvRunner("CartPole-v1", num_envs=3, seed=0)
    key = make_key(4)
    rollout = runner.sample(random_discrete, None, 6, key)
    keys = jax.random.split(key, 6)
    expected = [random_discrete(None, rollout.obs[t], keys[t])[0] for t in range(6)]
    np.testing.assert_array_equal(rollout.actions, np.stack(expected))
