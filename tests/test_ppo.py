"""PPO: the loss against hand-computed values, postprocessing, the recipe."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_trees_close, maybe_jit

import jaxlearner as jl
from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec
from jaxlearner.algorithms.ppo import ppo_loss
from jaxlearner.training.env_runner import EnvRunner

CARTPOLE = gym.make("CartPole-v1")


def loss_context():
    """The context of the hand-computed loss tests: params hold the logits and values."""
    return jl.LossContext(
        module_id="p",
        apply=lambda p, obs: (p["logits"], p["values"]),
        key=jax.random.key(0),
        extra={"kl_coeff": jnp.asarray(0.2)},
        hyperparams={
            "clip_param": jnp.asarray(0.3),
            "vf_clip_param": jnp.asarray(5.0),
            "vf_loss_coeff": jnp.asarray(0.5),
            "entropy_coeff": jnp.asarray(0.1),
        },
        counters={},
    )


def test_ppo_loss_matches_hand_computed_values(jit):
    # Two actions. Row 0: new probs [.5, .5], action 0, old logp log .25 -> ratio 2,
    # advantage 1 -> surrogate min(2, clip(2, .7, 1.3)) = 1.3. Row 1: ratio 1, advantage -1
    # -> surrogate -1. Row 2 is masked out and must not count.
    # Values [1, 3] against targets 0: squared errors [1, 9], clipped at 5 -> mean 3.
    # Entropy log 2 each. KL(old || new): row 0 old probs [.25, .75] -> .25 log .5 + .75 log 1.5;
    # row 1 old = new -> 0.
    kl0 = 0.25 * np.log(0.5) + 0.75 * np.log(1.5)
    total = np.mean([-1.3, 1.0]) + 0.5 * 3.0 - 0.1 * np.log(2) + 0.2 * kl0 / 2
    batch = {
        "obs": jnp.zeros((3, 1)),
        "actions": jnp.asarray([0, 1, 0]),
        "logp": jnp.log(jnp.asarray([0.25, 0.5, 0.9])),
        "dist_inputs": jnp.log(jnp.asarray([[0.25, 0.75], [0.5, 0.5], [0.9, 0.1]])),
        "advantages": jnp.asarray([1.0, -1.0, 100.0]),
        "value_targets": jnp.zeros(3),
        "mask": jnp.asarray([1.0, 1.0, 0.0]),
    }
    params = {"logits": jnp.zeros((3, 2)), "values": jnp.asarray([1.0, 3.0, 50.0])}
    ctx = loss_context()
    loss = ppo_loss(DistributionSpec("categorical", (2,)), use_kl_loss=True)
    value, metrics = maybe_jit(lambda p, b: loss(p, b, ctx), jit)(params, batch)
    np.testing.assert_allclose(value, total, rtol=1e-5)
    np.testing.assert_allclose(metrics["policy_loss"], -0.15, rtol=1e-5)
    np.testing.assert_allclose(metrics["vf_loss"], 3.0, rtol=1e-6)
    np.testing.assert_allclose(metrics["vf_loss_unclipped"], 5.0, rtol=1e-6)
    np.testing.assert_allclose(metrics["entropy"], np.log(2), rtol=1e-6)
    np.testing.assert_allclose(metrics["mean_kl"], kl0 / 2, rtol=1e-5)
    np.testing.assert_allclose(metrics["clip_fraction"], 0.5)
    no_kl = ppo_loss(DistributionSpec("categorical", (2,)), use_kl_loss=False)
    value_no_kl, _ = no_kl(params, batch, ctx)
    np.testing.assert_allclose(value - value_no_kl, 0.2 * kl0 / 2, rtol=1e-4)


def collect(algorithm, state, num_envs=2, steps=16):
    runner = EnvRunner("CartPole-v1", num_envs=num_envs, seed=0)
    module = state.modules[algorithm.module_id]
    rollout = runner.sample(algorithm.explore, module, steps, jax.random.key(1))
    experience = rollout.experience()
    return rollout, experience


def test_postprocess_standardizes_advantages_and_flattens(jit):
    algorithm = jl.algorithms.build(
        "ppo",
        CARTPOLE.observation_space,
        CARTPOLE.action_space,
        {"train_batch_size": 32, "minibatch_size": 16, "hidden_sizes": (8,)},
    )
    state = algorithm.learner.init(jax.random.key(0))
    rollout, experience = collect(algorithm, state)
    batch = maybe_jit(algorithm.postprocess, jit)(state.modules["default_policy"], experience)
    assert batch["obs"].shape == (32, 4) and batch["advantages"].shape == (32,)
    np.testing.assert_allclose(float(batch["advantages"].mean()), 0.0, atol=1e-5)
    np.testing.assert_allclose(float(batch["advantages"].std()), 1.0, rtol=1e-4)
    # Rows keep time-major order: row t * N + n is step t of env n.
    np.testing.assert_array_equal(batch["obs"][3], rollout.obs[1, 1])
    state, metrics = algorithm.learner.update(state, batch)
    assert np.isfinite(float(metrics["default_policy"]["total_loss"]))


def _sb3_standardized(advantages, rows):
    """SB3's per-minibatch formula over ``rows`` of ``advantages`` (numpy)."""
    chosen = np.asarray(advantages)[rows]
    return (chosen - chosen.mean()) / (chosen.std(ddof=1) + 1e-8)


def test_the_loss_can_standardize_its_minibatchs_advantages(jit):
    # Row 3 is masked out: its advantage counts in neither the mean nor the std.
    batch = {
        "obs": jnp.zeros((4, 1)),
        "actions": jnp.asarray([0, 1, 0, 1]),
        "logp": jnp.log(jnp.asarray([0.25, 0.5, 0.9, 0.5])),
        "dist_inputs": jnp.log(jnp.asarray([[0.25, 0.75], [0.5, 0.5], [0.9, 0.1], [0.5, 0.5]])),
        "advantages": jnp.asarray([2.0, -1.0, 0.5, 100.0]),
        "value_targets": jnp.ones(4),
        "mask": jnp.asarray([1.0, 1.0, 1.0, 0.0]),
    }
    params = {"logits": jnp.zeros((4, 2)), "values": jnp.asarray([1.0, 3.0, 0.0, 50.0])}
    ctx = loss_context()
    spec = DistributionSpec("categorical", (2,))
    standardized = {
        **batch,
        "advantages": jnp.asarray([*_sb3_standardized(batch["advantages"], slice(0, 3)), 7.0]),
    }
    normalizing = ppo_loss(spec, use_kl_loss=True, normalize_advantages=True)
    value, metrics = maybe_jit(lambda p, b: normalizing(p, b, ctx), jit)(params, batch)
    expected, expected_metrics = ppo_loss(spec, use_kl_loss=True)(params, standardized, ctx)
    np.testing.assert_allclose(value, expected, rtol=1e-6)
    np.testing.assert_allclose(metrics["policy_loss"], expected_metrics["policy_loss"], rtol=1e-6)
    raw, _ = ppo_loss(spec, use_kl_loss=True)(params, batch, ctx)
    assert abs(float(raw) - float(value)) > 0.1  # the standardizing changed the loss


def test_minibatch_normalization_trains_as_sb3_on_each_minibatchs_raw_advantages():
    # One epoch of two unshuffled minibatches of 16: "minibatch" must take the steps that
    # normalize_advantages=False takes on advantages standardized per 16 rows by hand.
    config = {"train_batch_size": 32, "minibatch_size": 16, "num_epochs": 1, "shuffle": False}
    config["hidden_sizes"] = (8,)
    build = lambda normalize: jl.algorithms.build(
        "ppo",
        CARTPOLE.observation_space,
        CARTPOLE.action_space,
        {**config, "normalize_advantages": normalize},
    )
    per_minibatch, raw = build("minibatch"), build(False)
    state = per_minibatch.learner.init(jax.random.key(0))
    _, experience = collect(per_minibatch, state)
    module = state.modules["default_policy"]
    batch = per_minibatch.postprocess(module, experience)
    raw_batch = raw.postprocess(module, experience)
    np.testing.assert_array_equal(batch["advantages"], raw_batch["advantages"])  # not standardized
    assert abs(float(batch["advantages"].std()) - 1.0) > 0.1
    by_hand = np.concatenate(
        [_sb3_standardized(batch["advantages"], slice(i, i + 16)) for i in (0, 16)]
    )
    updated, metrics = per_minibatch.learner.update(state, batch)
    expected, expected_metrics = raw.learner.update(state, {**batch, "advantages": by_hand})
    assert_trees_close(
        updated.modules["default_policy"].params,
        expected.modules["default_policy"].params,
        rtol=1e-5,
        atol=1e-6,
    )
    np.testing.assert_allclose(
        metrics["default_policy"]["policy_loss"],
        expected_metrics["default_policy"]["policy_loss"],
        atol=1e-6,  # near 0: the standardized advantages' mean is 0 and the ratio near 1
    )


def test_recipe_and_config_validation():
    learner = jl.algorithms.ppo(CARTPOLE.observation_space, CARTPOLE.action_space, {"lr": 1e-3})
    assert learner.recipe["algorithm"] == "ppo"
    assert learner.recipe["config"]["lr"] == 1e-3
    assert learner.module_ids == ("default_policy",)
    assert learner.config.minibatch_size == 128 and learner.config.num_epochs == 30
    algorithm = jl.algorithms.algorithm_for(learner)
    assert algorithm.learner is learner and algorithm.config.lr == 1e-3
    with pytest.raises(ValueError, match=r"Unknown PPOConfig field\(s\) \['learning_rate'\]"):
        jl.algorithms.ppo(
            CARTPOLE.observation_space, CARTPOLE.action_space, {"learning_rate": 1e-3}
        )
    with pytest.raises(ValueError, match="PPOConfig.gamma must be a number in"):
        jl.algorithms.PPOConfig(gamma=1.5)
    with pytest.raises(ValueError, match="minibatch_size \\(256\\) exceeds train_batch_size"):
        jl.algorithms.PPOConfig(train_batch_size=128, minibatch_size=256)
    with pytest.raises(ValueError, match="Malformed piecewise schedule"):
        jl.algorithms.PPOConfig(lr=[[10, 1e-3]])
    with pytest.raises(ValueError, match=r"PPOConfig.head_hidden_sizes must be a sequence of posi"):
        jl.algorithms.PPOConfig(head_hidden_sizes=64)
    with pytest.raises(ValueError, match=r"PPOConfig.activation must be one of \['elu'.*'relux'"):
        jl.algorithms.PPOConfig(activation="relux")
    with pytest.raises(ValueError, match=r"PPOConfig.head_activation must be one of"):
        jl.algorithms.PPOConfig(head_activation="Relu")
    for bad in ("mini", 1, None):
        with pytest.raises(ValueError, match="normalize_advantages must be True, False, 'batch'"):
            jl.algorithms.PPOConfig(normalize_advantages=bad)
    with pytest.raises(ValueError, match="Unknown algorithm 'a2c'; built-in algorithms"):
        jl.algorithms.build("a2c", CARTPOLE.observation_space, CARTPOLE.action_space)
    with pytest.raises(TypeError, match="supports action spaces"):
        jl.algorithms.ppo(CARTPOLE.observation_space, gym.spaces.Text(5))


def test_box_actions_are_clipped_for_the_env_but_trained_raw():
    env = gym.make("Pendulum-v1")
    algorithm = jl.algorithms.build(
        "ppo", env.observation_space, env.action_space, {"hidden_sizes": (8,), "log_std_init": 2.0}
    )
    state = algorithm.learner.init(jax.random.key(0))
    obs = jnp.zeros((64, 3))
    actions, extras = algorithm.explore(state.modules["default_policy"], obs, jax.random.key(1))
    assert float(jnp.abs(actions).max()) <= 2.0
    assert float(jnp.abs(extras["actions"]).max()) > 2.0  # std e^2: raw samples leave the box
    deterministic, _ = algorithm.exploit(state.modules["default_policy"], obs, jax.random.key(1))
    np.testing.assert_array_equal(
        deterministic, algorithm.exploit(state.modules["default_policy"], obs, jax.random.key(2))[0]
    )
