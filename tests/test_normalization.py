"""Observation and reward normalization: the statistics, their drivers, devices and checkpoints."""

from __future__ import annotations

import functools
import json
import math

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import maybe_jit, tree_equal

import jaxlearner as jl
from jaxlearner import anakin, envs
from jaxlearner.algorithms.trajectories.normalization import (
    OBS_MOMENTS,
    RETURN_MOMENTS,
    Normalization,
    discounted_returns,
    initial_moments,
    merge_moments,
)
from jaxlearner.training.env_runner import EnvRunner

CARTPOLE = gym.make("CartPole-v1")
PENDULUM = gym.make("Pendulum-v1")
TINY_PPO = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1, "hidden_sizes": (8,)}
NORMALIZED = {"norm_obs": True, "norm_reward": True}


def random_experience(rng, steps=5, envs=3, features=4):
    """``[T, N]`` experience with episode ends and padding steps."""
    return {
        "obs": rng.normal(3.0, 2.0, size=(steps, envs, features)).astype(np.float32),
        "rewards": rng.normal(1.0, 0.5, size=(steps, envs)).astype(np.float32),
        "terminated": rng.random((steps, envs)) < 0.15,
        "truncated": rng.random((steps, envs)) < 0.1,
        "valid": rng.random((steps, envs)) < 0.85,
    }


def reference_returns(experiences, gamma, envs):
    """SB3's ``VecNormalize`` running return, step by step in plain Python: the ``R_t`` of
    every valid step, in order."""
    running, seen = np.zeros(envs), []
    for experience in experiences:
        for t in range(experience["rewards"].shape[0]):
            for n in range(envs):
                if not experience["valid"][t, n]:
                    continue
                running[n] = gamma * running[n] + experience["rewards"][t, n]
                seen.append(running[n])
                if experience["terminated"][t, n] or experience["truncated"][t, n]:
                    running[n] = 0.0
    return np.array(seen), running


# The pure functions, against numpy


def test_merge_moments_equals_numpy_over_the_concatenated_valid_rows(jit):
    rng = np.random.default_rng(0)
    batches = [random_experience(rng) for _ in range(4)]
    merge = maybe_jit(merge_moments, jit)
    moments = initial_moments((4,))
    for batch in batches:
        moments = merge(moments, batch["obs"], batch["valid"])
    rows = np.concatenate([b["obs"][b["valid"]] for b in batches])
    assert float(moments.count) == len(rows)
    np.testing.assert_allclose(moments.mean, rows.mean(0), rtol=1e-5)
    np.testing.assert_allclose(moments.var, rows.var(0), rtol=1e-4)


def test_merge_moments_keeps_the_old_moments_when_no_row_is_valid(jit):
    old = jl.algorithms.trajectories.normalization.RunningMoments(
        jnp.array([1.0, 2.0]), jnp.array([3.0, 4.0]), jnp.array(5.0)
    )
    new = maybe_jit(merge_moments, jit)(old, jnp.full((3, 2), 100.0), jnp.zeros(3, bool))
    assert tree_equal(new, old)
    # No data yet and no valid row: variance 1 stays, so normalizing is the identity.
    empty = maybe_jit(merge_moments, jit)(initial_moments((2,)), jnp.ones((3, 2)), jnp.zeros(3))
    assert empty.var.tolist() == [1.0, 1.0] and float(empty.count) == 0.0


def test_discounted_returns_follow_vecnormalize_step_by_step(jit):
    rng = np.random.default_rng(1)
    experience = random_experience(rng, steps=7, envs=3)
    returns = maybe_jit(functools.partial(discounted_returns, gamma=0.9), jit)
    after, values = returns(jnp.array([0.5, -1.0, 2.0]), experience)
    # Hand derivation for env 0 when nothing ends: R_0 = 0.9 * 0.5 + r_0, R_1 = 0.9 R_0 + r_1.
    running = np.array([0.5, -1.0, 2.0])
    for t in range(7):
        for n in range(3):
            if experience["valid"][t, n]:
                running[n] = 0.9 * running[n] + experience["rewards"][t, n]
                assert values[t, n] == pytest.approx(running[n], rel=1e-5)
                if experience["terminated"][t, n] or experience["truncated"][t, n]:
                    running[n] = 0.0
    np.testing.assert_allclose(after, running, rtol=1e-5)


def test_the_return_statistics_equal_numpy_over_every_running_return(jit):
    rng = np.random.default_rng(2)
    experiences = [random_experience(rng, steps=6, envs=3) for _ in range(3)]
    norm = Normalization(rewards=True, gamma=0.97, num_envs=3)
    (observer,) = norm.observers(gym.spaces.Box(-1.0, 1.0, (4,)))
    update = maybe_jit(observer.update, jit)
    state = observer.init({})
    for experience in experiences:
        state = update(state, experience)
    seen, running = reference_returns(experiences, 0.97, 3)
    assert float(state.moments.count) == len(seen)
    assert float(state.moments.mean) == pytest.approx(seen.mean(), rel=1e-4)
    assert float(state.moments.var) == pytest.approx(seen.var(), rel=1e-4)
    np.testing.assert_allclose(state.returns, running, rtol=1e-5)


def test_normalizing_and_scaling_by_hand(jit):
    norm = Normalization(observations=True, rewards=True, clip_obs=2.0, clip_reward=3.0)
    extra = {
        OBS_MOMENTS: jl.algorithms.trajectories.normalization.RunningMoments(
            jnp.array([1.0, -1.0]), jnp.array([4.0, 0.25]), jnp.array(10.0)
        ),
        RETURN_MOMENTS: jl.algorithms.trajectories.normalization.ReturnMoments(
            jnp.zeros(1), initial_moments(()).replace(var=jnp.array(16.0))
        ),
    }
    observation = maybe_jit(norm.observation, jit)
    reward = maybe_jit(norm.reward, jit)
    # (3 - 1) / 2 = 1; (-1.5 + 1) / 0.5 = -1; (9 - 1) / 2 = 4 -> clipped to 2.
    np.testing.assert_allclose(
        observation(extra, jnp.array([[3.0, -1.5], [9.0, -1.0]])),
        [[1.0, -1.0], [2.0, 0.0]],
        rtol=1e-6,
    )
    # r / sqrt(16) = r / 4: 2 -> 0.5, 40 -> 10 -> clipped to 3; no shift.
    np.testing.assert_allclose(reward(extra, jnp.array([2.0, 40.0, -2.0])), [0.5, 3.0, -0.5])
    off = Normalization()
    obs = jnp.array([5.0])
    assert (
        off.observation({}, obs) is obs and off.reward({}, obs) is obs and not off.observers(None)
    )


# Devices, checkpoints, drivers


def test_eight_devices_give_what_one_device_gives():
    assert len(jax.devices()) == 8
    config = {**TINY_PPO, **NORMALIZED, "num_envs_per_env_runner": 8}
    rng = np.random.default_rng(3)
    experiences = [random_experience(rng, steps=4, envs=8) for _ in range(3)]
    results = []
    for devices in (None, "all"):
        learner = jl.algorithms.ppo(CARTPOLE.observation_space, CARTPOLE.action_space, config)
        learner = learner if devices is None else learner.on(devices)
        state = learner.init(jax.random.key(0))
        for experience in experiences:
            state = learner.observe(state, {"default_policy": experience})
        results.append(jax.device_get(state.modules["default_policy"].extra))
    one, many = results
    for name in (OBS_MOMENTS, RETURN_MOMENTS):
        jax.tree.map(
            lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), many[name], one[name]
        )


def test_the_trainer_counts_every_step_and_evaluation_leaves_the_statistics_frozen():
    config = {**TINY_PPO, **NORMALIZED, "num_envs_per_env_runner": 4}
    learner = jl.algorithms.ppo(CARTPOLE.observation_space, CARTPOLE.action_space, config)
    trainer = jl.Trainer(learner, "CartPole-v1", num_envs=4, progress=False)
    trainer.step()
    trainer.step()
    extra = jax.device_get(trainer.state.modules["default_policy"].extra)
    assert float(extra[OBS_MOMENTS].count) == trainer.counters.env_steps == 128
    assert float(extra[RETURN_MOMENTS].moments.count) == 128
    assert float(extra[RETURN_MOMENTS].moments.var) > 0.0
    trainer.eval()
    assert tree_equal(jax.device_get(trainer.state.modules["default_policy"].extra), extra)


def recording_sampler(runner, experiences):
    """``runner.sample`` that also keeps each rollout's experience (host copies)."""
    sample = runner.sample

    def recording(*args, **kwargs):
        rollout = sample(*args, **kwargs)
        experiences.append(jax.device_get(rollout.experience()))
        return rollout

    return recording


@pytest.mark.parametrize("num_envs", [1, 16])
def test_the_trainers_statistics_equal_numpy_over_every_step_of_every_env(num_envs, monkeypatch):
    config = {**TINY_PPO, **NORMALIZED, "train_batch_size": 16 * 12}
    config["num_envs_per_env_runner"] = num_envs
    learner = jl.algorithms.ppo(CARTPOLE.observation_space, CARTPOLE.action_space, config)
    trainer = jl.Trainer(learner, "CartPole-v1", num_envs=num_envs, progress=False)
    experiences = []
    monkeypatch.setattr(
        trainer.engine.runner, "sample", recording_sampler(trainer.engine.runner, experiences)
    )
    for _ in range(3):
        trainer.step()
    extra = jax.device_get(trainer.state.modules["default_policy"].extra)
    obs = np.concatenate([e["obs"].reshape(-1, 4) for e in experiences])
    assert float(extra[OBS_MOMENTS].count) == len(obs) == 3 * 16 * 12
    np.testing.assert_allclose(extra[OBS_MOMENTS].mean, obs.mean(0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(extra[OBS_MOMENTS].var, obs.var(0), rtol=1e-4)
    # Each environment's own running return, through the episodes that ended in it.
    seen, running = reference_returns(experiences, 0.99, num_envs)
    assert float(extra[RETURN_MOMENTS].moments.count) == len(seen)
    assert float(extra[RETURN_MOMENTS].moments.var) == pytest.approx(seen.var(), rel=1e-4)
    np.testing.assert_allclose(extra[RETURN_MOMENTS].returns, running, rtol=1e-5)


def observed_rollout(name, config, num_envs=4, steps=16):
    """A CartPole rollout of a fresh learner (the act normalizes with the initial statistics),
    and the module after observing it: the act's statistics and the postprocess's differ, as
    in every driver."""
    algorithm = jl.algorithms.build(name, CARTPOLE.observation_space, CARTPOLE.action_space, config)
    state = algorithm.learner.init(jax.random.key(0))
    runner = EnvRunner("CartPole-v1", num_envs=num_envs, seed=0)
    rollout = runner.sample(
        algorithm.explore, state.modules["default_policy"], steps, jax.random.key(1)
    )
    runner.close()
    experience = rollout.experience()
    state = algorithm.learner.observe(state, {"default_policy": experience})
    return algorithm, state.modules["default_policy"], experience


def test_ppo_values_both_ends_of_every_td_error_on_one_normalization(jit):
    # With lambda 0 and raw advantages, A_t = r_t + gamma (1 - terminated_t) V(s'_t) - V(s_t):
    # both values from the statistics postprocess holds (those including this batch), not
    # V(s_t) from the act's statistics (those before it).
    config = {**TINY_PPO, "norm_obs": True, "lambda_": 0.0, "gamma": 0.9}
    config["normalize_advantages"] = False
    algorithm, module, experience = observed_rollout("ppo", config)
    batch = maybe_jit(algorithm.postprocess, jit)(module, experience)
    model = algorithm.learner.specs["default_policy"].model
    norm = Normalization(observations=True)
    value = lambda obs: model.apply(module.params, norm.observation(module.extra, obs))[1]
    rows = lambda x: np.asarray(x).reshape(-1, *np.shape(x)[2:])
    obs, next_obs = rows(experience["obs"]), rows(experience["next_obs"])
    not_terminal = 1.0 - rows(experience["terminated"])
    expected = rows(experience["rewards"]) + 0.9 * not_terminal * value(next_obs) - value(obs)
    np.testing.assert_allclose(batch["advantages"], expected, rtol=1e-5, atol=1e-6)
    # The loss trains on the observations as the act normalized them: its first ratio is 1.
    np.testing.assert_array_equal(batch["obs"], rows(experience["normalized_obs"]))


def test_appo_normalizes_a_rows_observations_and_next_observations_alike():
    config = {"norm_obs": True, "rollout_fragment_length": 8, "train_batch_size": 64}
    algorithm, module, experience = observed_rollout("appo", config)
    batch = algorithm.postprocess(module, experience)
    # Within a row, a step that does not end its episode leads to the next step's
    # observation, so the two must be normalized the same.
    going_on = (batch["terminated"] + batch["truncated"])[:, :-1] == 0
    assert going_on.sum() > 40
    np.testing.assert_allclose(
        batch["next_obs"][:, :-1][going_on], batch["obs"][:, 1:][going_on], rtol=1e-6
    )
    norm = Normalization(observations=True)
    np.testing.assert_allclose(
        batch["obs"][0], norm.observation(module.extra, experience["obs"][:8, 0]), rtol=1e-6
    )


def test_the_act_functions_see_normalized_observations():
    config = {**TINY_PPO, "norm_obs": True, "clip_obs": 5.0}
    algorithm = jl.algorithms.build(
        "ppo", CARTPOLE.observation_space, CARTPOLE.action_space, config
    )
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    obs = jnp.array([[0.3, -1.0, 0.05, 2.0]])
    moments = module.extra[OBS_MOMENTS].replace(
        mean=jnp.array([0.1, 0.0, -0.2, 1.0]), var=jnp.array([4.0, 1.0, 0.01, 9.0])
    )
    shifted = module.replace(extra={**module.extra, OBS_MOMENTS: moments})
    _, extras = algorithm.exploit(shifted, obs, jax.random.key(1))
    expected = jnp.clip((obs - moments.mean) / jnp.sqrt(moments.var + 1e-8), -5.0, 5.0)
    dist_inputs, _ = algorithm.learner.specs["default_policy"].model.apply(module.params, expected)
    np.testing.assert_allclose(extras["dist_inputs"], dist_inputs, rtol=1e-5)


@pytest.mark.parametrize(
    ("name", "space", "config"),
    [
        ("sac", PENDULUM, {**NORMALIZED, "num_envs_per_env_runner": 2}),
        ("dqn", CARTPOLE, {"norm_obs": True}),
        ("appo", CARTPOLE, {**NORMALIZED, "num_envs_per_env_runner": 2}),
    ],
)
def test_a_checkpoint_restores_the_statistics_bit_exactly(tmp_path, name, space, config):
    config = {
        **config,
        **(
            {"num_steps_sampled_before_learning_starts": 8, "train_batch_size": 8}
            if name != "appo"
            else {"train_batch_size": 100}
        ),
    }
    learner = jl.algorithms.build(name, space.observation_space, space.action_space, config)
    env_id = space.spec.id
    trainer = jl.Trainer(learner, env_id, num_envs=2, progress=False)
    for _ in range(3):
        trainer.step()
    extra = trainer.state.modules["default_policy"].extra
    assert float(extra[OBS_MOMENTS].count) == trainer.counters.env_steps
    with jl.CheckpointManager(tmp_path / "ckpt") as checkpoint:
        trainer.save(checkpoint)
        checkpoint.wait_until_finished()
        other = jl.Trainer(learner, env_id, num_envs=2, progress=False, seed=9)
        other.restore(checkpoint)
    restored = other.state.modules["default_policy"].extra
    for key in [k for k in (OBS_MOMENTS, RETURN_MOMENTS) if k in extra]:
        assert tree_equal(jax.device_get(restored[key]), jax.device_get(extra[key]))
    state = jl.restore(tmp_path / "ckpt")[1]
    assert tree_equal(
        jax.device_get(state.modules["default_policy"].extra[OBS_MOMENTS]),
        jax.device_get(extra[OBS_MOMENTS]),
    )


def test_anakin_keeps_one_set_of_statistics_per_seed():
    env = envs.make("CartPole-v1")
    config = {**TINY_PPO, **NORMALIZED, "num_envs_per_env_runner": 4}
    algorithm = jl.algorithms.build("ppo", env.observation_space, env.action_space, config)
    run = anakin.AnakinConfig(num_envs=4, num_iterations=2, evaluate=False)
    train = jax.jit(jax.vmap(anakin.make_train(algorithm, env, run)))
    state, _ = train(jax.random.split(jax.random.key(0), 3))
    extra = jax.device_get(state.learner.modules["default_policy"].extra)
    assert extra[OBS_MOMENTS].count.tolist() == [128.0] * 3
    assert extra[RETURN_MOMENTS].returns.shape == (3, 4)
    assert len({tuple(row) for row in extra[OBS_MOMENTS].mean.round(5).tolist()}) == 3


def test_the_command_line_trains_evaluates_and_records_with_the_statistics(tmp_path, monkeypatch):
    from jaxlearner.cli import main

    run = tmp_path / "run"
    tiny = ["--max-steps", "512", "--eval-every", "512", "--num-envs", "4", "--no-progress"]
    config = ["norm_obs=True", "norm_reward=True", "train_batch_size=256", "hidden_sizes=[8]"]
    assert main(["train", "ppo", "--out", str(run), *tiny, "--config", *config]) == 0
    saved = json.loads((run / "run.json").read_text())["config"]
    assert saved["num_envs_per_env_runner"] == 4  # the run's envs, set by the command line
    before = jl.restore(run / "checkpoints")[1].modules["default_policy"].extra
    assert float(before[OBS_MOMENTS].count) == 512.0
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert main(["record", str(run), "--episodes", "2", "--out", str(tmp_path / "data")]) == 0
    after = jl.restore(run / "checkpoints")[1].modules["default_policy"].extra
    assert tree_equal(jax.device_get(after), jax.device_get(before))  # evaluation observes nothing


# Bad input


def test_normalizing_a_space_that_is_not_a_box_names_the_space():
    space = gym.spaces.Discrete(16)
    with pytest.raises(ValueError, match=r"norm_obs normalizes Box.*Discrete\(16\)"):
        jl.algorithms.ppo(space, CARTPOLE.action_space, {"norm_obs": True})
    jl.algorithms.ppo(space, CARTPOLE.action_space, {"norm_reward": True})  # rewards only: fine


def test_reward_statistics_are_refused_with_asynchronous_env_runners_before_ray_starts():
    # Fragments of different runners' environments would share one running return each.
    config = {**NORMALIZED, "num_envs_per_env_runner": 2, "train_batch_size": 100}
    learner = jl.algorithms.appo(CARTPOLE.observation_space, CARTPOLE.action_space, config)
    with pytest.raises(ValueError, match=r"2 asynchronous env runners .*\(asynchronous=False\)"):
        jl.Trainer(learner, "CartPole-v1", num_envs=2, num_env_runners=2, progress=False)


def test_a_trainer_with_another_number_of_envs_than_the_reward_statistics_is_refused():
    learner = jl.algorithms.ppo(
        CARTPOLE.observation_space, CARTPOLE.action_space, {**TINY_PPO, "norm_reward": True}
    )
    with pytest.raises(ValueError, match=r"num_envs_per_env_runner=1.*4 environments.*=4"):
        jl.Trainer(learner, "CartPole-v1", num_envs=4, progress=False)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("norm_obs", "yes", "norm_obs must be True or False; got 'yes'"),
        ("norm_reward", 1, "norm_reward must be True or False; got 1"),
        ("clip_obs", 0.0, "clip_obs must be a positive finite number; got 0.0"),
        ("clip_reward", math.inf, "clip_reward must be a positive finite number; got inf"),
        ("num_envs_per_env_runner", 0, "num_envs_per_env_runner must be an int >= 1; got 0"),
    ],
)
def test_bad_normalization_fields_are_refused_when_the_config_is_made(field, value, message):
    with pytest.raises(ValueError, match=f"PPOConfig.{message}"):
        jl.algorithms.PPOConfig(**{field: value})
    with pytest.raises(ValueError, match="SACConfig"):
        jl.algorithms.SACConfig(**{field: value})
    with pytest.raises(TypeError):
        jl.algorithms.DQNConfig(norm_reward=True)  # DQN normalizes observations only


# Learning: a task that needs normalization


SCALE = np.array([1000.0, 300.0, 5000.0, 300.0], np.float32)
SHIFT = np.array([3000.0, -1000.0, 500.0, 2000.0], np.float32)


def badly_scaled_cartpole():
    """CartPole whose observations are ``obs * SCALE + SHIFT``: features in the thousands, so
    a tanh network saturates unless its inputs are normalized (the task is CartPole's)."""
    env = gym.make("CartPole-v1")
    space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    transform = lambda obs: (obs * SCALE + SHIFT).astype(np.float32)
    return gym.wrappers.TransformObservation(env, transform, space)


@pytest.mark.slow
def test_ppo_solves_badly_scaled_cartpole_with_norm_obs_and_not_without():
    # RL Zoo's PPO CartPole-v1 settings (as `jaxlearner train ppo`), clip_obs 5.
    # Measured here (seeds 0-4): with norm_obs solved at 29k-57k env steps (seed 1: 28,672);
    # without, every evaluation stayed at 239 or below in 60k steps (304 at most over 5 seeds).
    config = {
        "lr": ((0, 1e-3), (100_000, 0.0)),
        "clip_param": ((0, 0.2), (100_000, 0.0)),
        "train_batch_size": 256,
        "minibatch_size": 256,
        "num_epochs": 20,
        "gamma": 0.98,
        "lambda_": 0.8,
        "vf_loss_coeff": 0.5,
        "vf_clip_param": 1e6,
        "use_kl_loss": False,
        "grad_clip": 0.5,
        "hidden_sizes": (64, 64),
        "clip_obs": 5.0,
    }
    space = badly_scaled_cartpole().observation_space
    evaluations = {}
    for norm_obs in (True, False):
        learner = jl.algorithms.ppo(space, CARTPOLE.action_space, {**config, "norm_obs": norm_obs})
        trainer = jl.Trainer(learner, badly_scaled_cartpole, num_envs=8, seed=1, progress=False)
        history = trainer.run(
            [jl.MaxEnvSteps(60_000), jl.RewardBound(475.0, times=2)], steps_per_eval=4096
        )
        evaluations[norm_obs] = [h["eval/return_mean"] for h in history if "eval/return_mean" in h]
    print("with norm_obs", evaluations[True], "without", evaluations[False])
    assert evaluations[True][-2:] >= [475.0, 475.0]
    assert max(evaluations[False]) < 350.0


ZOO_ACROBOT = {
    # RL Zoo's PPO Acrobot-v1 row (16 envs of 256 steps, SB3's other defaults).
    "lr": 3e-4,
    "adam_epsilon": 1e-5,
    "gamma": 0.99,
    "lambda_": 0.94,
    "grad_clip": 0.5,
    "train_batch_size": 4096,
    "minibatch_size": 64,
    "num_epochs": 4,
    "normalize_advantages": "minibatch",
    "entropy_coeff": 0.0,
    "vf_clip_param": 1e10,
    "num_envs_per_env_runner": 16,
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags",
    [{"norm_obs": True}, {"norm_reward": True}, NORMALIZED],
    ids=["norm_obs", "norm_reward", "both"],
)
def test_ppo_learns_acrobot_with_sixteen_envs_in_every_normalization_mode(flags):
    # Measured here, seed 0: solved (two evaluations in a row >= -100) at 57,344 env steps
    # with norm_obs (seeds 1 and 2: 57,344 and 73,728), 32,768 with norm_reward, 24,576 with
    # both. While the act's values (old statistics) met next values on the new statistics,
    # norm_obs stayed at -500 through 80k env steps (the mean training return fell from -497).
    learner = jl.algorithms.ppo(
        gym.make("Acrobot-v1").observation_space,
        gym.make("Acrobot-v1").action_space,
        {**ZOO_ACROBOT, **flags},
    )
    trainer = jl.Trainer(learner, "Acrobot-v1", num_envs=16, progress=False)
    history = trainer.run(
        [jl.MaxEnvSteps(150_000), jl.RewardBound(-100.0, times=2)], steps_per_eval=8192
    )
    evaluations = [h["eval/return_mean"] for h in history if "eval/return_mean" in h]
    print(flags, evaluations)
    assert min(evaluations[-2:]) >= -100.0


@pytest.mark.slow
def test_ppo_learns_cartpole_with_sixteen_envs_and_norm_obs():
    # RL Zoo's CartPole-v1 row on 16 envs of 32 steps, with norm_obs: two of seeds 0-2 reach
    # two evaluations in a row at 475 within 100k env steps. Measured on a 2-core AMD EPYC,
    # under these tests' compile settings: seed 0 no (its evaluations fell back after 352),
    # seed 1 at 28,672, seed 2 at 69,632 env steps; under XLA's defaults all three (73,728,
    # 28,672, 65,536); an earlier CI machine solved seed 0 at 40,960. Before values were taken
    # on one normalization, seed 0's best two evaluations in a row in 100k were 500 and 119.
    config = {
        "lr": ((0, 1e-3), (100_000, 0.0)),
        "clip_param": ((0, 0.2), (100_000, 0.0)),
        "train_batch_size": 512,
        "minibatch_size": 256,
        "num_epochs": 20,
        "gamma": 0.98,
        "lambda_": 0.8,
        "vf_clip_param": 1e6,
        "grad_clip": 0.5,
        "normalize_advantages": "minibatch",
        "norm_obs": True,
    }
    learner = jl.algorithms.ppo(CARTPOLE.observation_space, CARTPOLE.action_space, config)
    ends = {}
    for seed in (0, 1, 2):
        trainer = jl.Trainer(learner, "CartPole-v1", num_envs=16, seed=seed, progress=False)
        history = trainer.run(
            [jl.MaxEnvSteps(100_000), jl.RewardBound(475.0, times=2)], steps_per_eval=4096
        )
        trainer.close()
        evaluations = [h["eval/return_mean"] for h in history if "eval/return_mean" in h]
        ends[seed] = (trainer.counters.env_steps, evaluations[-2:])
        if sum(min(last) >= 475.0 for _, last in ends.values()) == 2:
            break
    print(ends)
    assert sum(min(last) >= 475.0 for _, last in ends.values()) == 2, ends
