"""PQN: the Q(lambda) targets against purejaxql's recursion, the loss, the LayerNorm network,
epsilon over env steps, bad input, the recipe, and learning CartPole on gymnasium envs and in
Anakin (slow)."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxlearner as jl
from jaxlearner import anakin
from jaxlearner.algorithms.networks.models import q_network
from jaxlearner.algorithms.pqn import PQNConfig, pqn_loss, q_lambda_targets
from jaxlearner.algorithms.presets import preset_row
from jaxlearner.core.context import LossContext
from jaxlearner.core.registry import learner_from_recipe

CARTPOLE = gym.make("CartPole-v1")
SMALL = {"train_batch_size": 64, "minibatch_size": 16, "num_epochs": 2, "hidden_sizes": (8,)}


def purejaxql_targets(rewards, dones, q_next_max, last_q, gamma, lambda_):
    """purejaxql's ``_get_target`` recursion (pqn_minatar.py) in numpy, with every row
    bootstrapping on the next row's recorded ``max_a Q`` (``q_next_max[t]``; purejaxql's scan
    reads ``last_q`` at row ``T - 2`` too, which ``benchmarks/fused_pqn.py`` keeps)."""
    steps = rewards.shape[0]
    targets = np.zeros_like(rewards)
    last_q = last_q * (1 - dones[-1])
    returns = rewards[-1] + gamma * last_q
    targets[-1] = returns
    next_q = last_q
    for t in range(steps - 2, -1, -1):
        next_q = q_next_max[t]
        bootstrap = rewards[t] + gamma * (1 - dones[t]) * next_q
        returns = bootstrap + gamma * lambda_ * (returns - next_q)
        returns = (1 - dones[t]) * returns + dones[t] * rewards[t]
        targets[t] = returns
    return targets


def test_q_lambda_targets_follow_purejaxqls_recursion_without_truncations():
    rng = np.random.default_rng(0)
    steps, envs, actions = 9, 3, 4
    rewards = rng.normal(size=(steps, envs)).astype(np.float32)
    terminated = rng.uniform(size=(steps, envs)) < 0.2
    q_obs = rng.normal(size=(steps, envs, actions)).astype(np.float32)
    q_last = rng.normal(size=(envs, actions)).astype(np.float32)
    # Within an episode the next observation is the next row's; after an end it is the final
    # one, whose value a termination never reads.
    q_next = np.concatenate([q_obs[1:], q_last[None]])
    experience = {
        "rewards": rewards,
        "terminated": terminated,
        "truncated": np.zeros_like(terminated),
    }
    config = PQNConfig(gamma=0.9, lambda_=0.65)
    ours = q_lambda_targets(experience, q_obs, q_next, config)
    # purejaxql's scan reads Q of row t + 1 as the bootstrap of row t.
    expected = purejaxql_targets(
        rewards, terminated.astype(np.float32), q_obs[1:].max(-1), q_last.max(-1), 0.9, 0.65
    )
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)


def test_a_truncation_bootstraps_on_the_final_observation_and_cuts_the_trace():
    rewards = np.asarray([[1.0], [2.0], [3.0]], np.float32)
    q_obs = np.asarray([[[0.0, 5.0]], [[1.0, 0.0]], [[7.0, 2.0]]], np.float32)
    q_next = np.asarray([[[1.0, 0.0]], [[0.0, 4.0]], [[2.0, 2.5]]], np.float32)  # row 1: final
    experience = {
        "rewards": rewards,
        "terminated": np.zeros((3, 1), bool),
        "truncated": np.asarray([[False], [True], [False]]),
    }
    config = PQNConfig(gamma=0.5, lambda_=0.5, reward_scale=2.0)
    targets = np.asarray(q_lambda_targets(experience, q_obs, q_next, config))[:, 0]
    last = 6.0 + 0.5 * 2.5
    truncated = 4.0 + 0.5 * 4.0  # the final observation's max Q, not the next episode's
    first = 2.0 + 0.5 * (0.5 * 1.0 + 0.5 * truncated)
    np.testing.assert_allclose(targets, [first, truncated, last], rtol=1e-6)


def test_pqn_loss_is_half_the_masked_mean_squared_td_error():
    q_table = jnp.asarray([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]])
    apply = lambda params, obs: params * q_table[obs]
    batch = {
        "obs": jnp.asarray([0, 1, 2]),
        "actions": jnp.asarray([1, 0, 0]),
        "targets": jnp.asarray([1.0, 1.5, 0.0]),
        "mask": jnp.asarray([1.0, 1.0, 0.0]),
    }
    ctx = LossContext("default_policy", apply, jax.random.key(0), {}, {}, {})
    value, metrics = pqn_loss()(2.0, batch, ctx)
    td = np.asarray([4.0 - 1.0, 1.0 - 1.5])
    np.testing.assert_allclose(value, 0.5 * np.mean(td**2), rtol=1e-6)
    np.testing.assert_allclose(metrics["td_error_mean"], np.mean(np.abs(td)), rtol=1e-6)
    np.testing.assert_allclose(metrics["qf_mean"], 2.5, rtol=1e-6)


def test_the_q_network_normalizes_each_layer_before_its_activation():
    space = gym.spaces.Box(-1, 1, (3,))
    plain = q_network(space, gym.spaces.Discrete(2), (5, 4))
    normed = q_network(space, gym.spaces.Discrete(2), (5, 4), layer_norm=True)
    obs = jnp.asarray([[0.3, -0.2, 0.9]])
    plain_params = plain.init(jax.random.key(0), obs)
    params = normed.init(jax.random.key(0), obs)
    mlp = params["params"]["encoder"]["mlp"]
    assert sorted(mlp) == ["dense_0", "dense_1", "layer_norm_0", "layer_norm_1"]
    assert sorted(plain_params["params"]["encoder"]["mlp"]) == ["dense_0", "dense_1"]
    hidden = obs @ mlp["dense_0"]["kernel"] + mlp["dense_0"]["bias"]
    normalized = (hidden - hidden.mean()) / jnp.sqrt(hidden.var() + 1e-6)
    features = jax.nn.relu(normalized) @ mlp["dense_1"]["kernel"] + mlp["dense_1"]["bias"]
    features = jax.nn.relu((features - features.mean()) / jnp.sqrt(features.var() + 1e-6))
    head = params["params"]["q"]
    expected = features @ head["kernel"] + head["bias"]
    np.testing.assert_allclose(normed.apply(params, obs), expected, rtol=1e-4, atol=1e-5)


def test_epsilon_runs_over_the_env_steps_trained_on():
    config = {**SMALL, "epsilon": ((0, 1.0), (64, 0.0))}
    algorithm = jl.algorithms.build(
        "pqn", CARTPOLE.observation_space, CARTPOLE.action_space, config
    )
    trainer = jl.Trainer(algorithm, "CartPole-v1", num_envs=4, seed=0, progress=False)
    module = trainer.state.modules["default_policy"]
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(256, 4)), jnp.float32)
    greedy, _ = algorithm.exploit(module, obs, jax.random.key(0))
    explored, _ = algorithm.explore(module, obs, jax.random.key(1))
    assert 0.3 < float(jnp.mean(explored != greedy)) < 0.7  # epsilon 1: uniform over 2 actions
    row = trainer.step()
    assert row["env_steps"] == 64 and "default_policy/td_error_mean" in row
    module = trainer.state.modules["default_policy"]
    greedy, _ = algorithm.exploit(module, obs, jax.random.key(0))
    explored, _ = algorithm.explore(module, obs, jax.random.key(1))
    assert bool(jnp.all(explored == greedy))  # epsilon 0 after 64 env steps


def test_a_rollout_becomes_rows_of_targets_masked_where_invalid():
    algorithm = jl.algorithms.build("pqn", CARTPOLE.observation_space, CARTPOLE.action_space, SMALL)
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    rng = np.random.default_rng(1)
    experience = {
        "obs": rng.normal(size=(16, 4, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, (16, 4)).astype(np.int32),
        "rewards": np.ones((16, 4), np.float32),
        "terminated": rng.uniform(size=(16, 4)) < 0.1,
        "truncated": np.zeros((16, 4), bool),
        "next_obs": rng.normal(size=(16, 4, 4)).astype(np.float32),
        "valid": rng.uniform(size=(16, 4)) < 0.9,
    }
    batch = jax.jit(algorithm.postprocess)(module, experience)
    assert {k: v.shape for k, v in batch.items()} == {
        "obs": (64, 4),
        "actions": (64,),
        "targets": (64,),
        "mask": (64,),
    }
    np.testing.assert_array_equal(batch["mask"], experience["valid"].reshape(-1))
    model = algorithm.learner.specs["default_policy"].model
    q = lambda obs: model.apply(module.params, obs.reshape(64, 4)).reshape(16, 4, 2)
    expected = q_lambda_targets(experience, q(experience["obs"]), q(experience["next_obs"]),
                                algorithm.config)  # fmt: skip
    np.testing.assert_allclose(batch["targets"], np.asarray(expected).reshape(-1), rtol=1e-5)


@pytest.mark.parametrize(
    "config, message",
    [
        ({"lambda_": 1.5}, "PQNConfig.lambda_ must be a number in [0, 1]"),
        ({"reward_scale": 0.0}, "PQNConfig.reward_scale must be"),
        ({"layer_norm": "yes"}, "PQNConfig.layer_norm must be True or False"),
        ({"minibatch_size": 4096}, "PQNConfig.minibatch_size (4096) exceeds train_batch_size"),
        ({"grad_clip_by": "max"}, "PQNConfig.grad_clip_by must be one of"),
    ],
)
def test_bad_pqn_config_is_one_line_naming_the_field(config, message):
    with pytest.raises((ValueError, TypeError)) as error:
        PQNConfig(**config)
    text = str(error.value)
    assert message in text and "\n" not in text


def test_pqn_refuses_a_batch_that_does_not_split_over_the_envs_and_box_actions():
    algorithm = jl.algorithms.build("pqn", CARTPOLE.observation_space, CARTPOLE.action_space, SMALL)
    with pytest.raises(ValueError, match="train_batch_size 64 does not split over 5"):
        algorithm.rollout_steps(5)
    with pytest.raises(TypeError, match="Discrete") as error:
        jl.algorithms.pqn(CARTPOLE.observation_space, gym.spaces.Box(-1, 1, (2,)))
    assert "\n" not in str(error.value)


def test_pqn_recipe_rebuilds_the_learner_and_its_algorithm():
    learner = jl.algorithms.pqn(CARTPOLE.observation_space, CARTPOLE.action_space, SMALL)
    rebuilt = learner_from_recipe(learner.recipe)
    assert rebuilt.recipe == learner.recipe and learner.recipe["algorithm"] == "pqn"
    algorithm = jl.algorithms.algorithm_for(rebuilt)
    assert algorithm.name == "pqn" and algorithm.config.hidden_sizes == (8,)


def _cartpole_row():
    row = preset_row("pqn", "CartPole-v1")
    return row.config, row.num_envs


@pytest.mark.slow
def test_pqn_learns_cartpole_on_gymnasium_envs():
    config, num_envs = _cartpole_row()
    algorithm = jl.algorithms.build(
        "pqn", CARTPOLE.observation_space, CARTPOLE.action_space, config
    )
    trainer = jl.Trainer(algorithm, "CartPole-v1", num_envs=num_envs, seed=0, progress=False)
    history = trainer.run([jl.RewardBound(475.0), jl.MaxEnvSteps(400_000)], steps_per_eval=24_576)
    assert max(row.get("eval/return_mean", 0.0) for row in history) >= 475.0


@pytest.mark.slow
def test_pqn_learns_cartpole_in_anakin():
    config, num_envs = _cartpole_row()
    env = anakin.envs.make("CartPole-v1")
    algorithm = jl.algorithms.build("pqn", env.observation_space, env.action_space, config)
    trainer = anakin.AnakinTrainer(
        algorithm, env, num_envs=num_envs, iterations_per_step=12, progress=False
    )
    history = trainer.run([jl.RewardBound(475.0), jl.MaxEnvSteps(400_000)], steps_per_eval=24_576)
    assert max(row.get("eval/return_mean", 0.0) for row in history) >= 475.0
