"""BC and MARWIL: losses against hand-computed values, rows, batches drawn, configs, recipes."""

import dataclasses
import math

import chex
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_trees_close, maybe_jit

import jaxlearner as jl
from jaxlearner.algorithms.bc import bc_loss
from jaxlearner.algorithms.marwil import AVERAGE, marwil_loss
from jaxlearner.algorithms.networks.heads import distribution_for
from jaxlearner.algorithms.offline import epoch_indices, make_offline_updates, returns_to_go

CARTPOLE = gym.make("CartPole-v1")
CATEGORICAL = distribution_for(gym.spaces.Discrete(2))
LN3 = math.log(3.0)

# A linear "network" over one-hot observations: logits are rows of w, values entries of v.
W = np.asarray([[0.0, LN3], [LN3, 0.0]], np.float32)
V = np.asarray([1.0, 2.0], np.float32)
E0, E1 = [1.0, 0.0], [0.0, 1.0]
BATCH = {
    "obs": np.asarray([E0, E1], np.float32),
    "actions": np.asarray([1, 1], np.int32),
    "returns": np.asarray([3.0, 2.0], np.float32),
    "bootstrap_obs": np.asarray([E0, E1], np.float32),
    "bootstrap_discounts": np.asarray([0.0, 0.5], np.float32),
}


def context(hyperparams=None, average=100.0):
    return jl.LossContext(
        module_id="default_policy",
        apply=lambda params, obs: (obs @ params["w"], obs @ params["v"]),
        key=jax.random.key(0),
        extra={AVERAGE: jnp.float32(average)},
        hyperparams={
            "beta": jnp.float32(1.0),
            "vf_coeff": jnp.float32(1.0),
            "moving_average_sqd_adv_norm_update_rate": jnp.float32(0.5),
            **(hyperparams or {}),
        },
        counters={},
    )


# Row 0: logits [0, ln 3] -> pi(1) = 3/4; row 1: logits [ln 3, 0] -> pi(1) = 1/4.
# BC: -(ln(3/4) + ln(1/4)) / 2.
@pytest.mark.parametrize("jit", [False, True])
def test_bc_loss_is_the_negative_mean_log_likelihood(jit):
    ctx = jl.LossContext("default_policy", lambda params, obs: obs @ params["w"], None, {}, {}, {})
    loss = maybe_jit(lambda params, batch: bc_loss(CATEGORICAL)(params, batch, ctx), jit)
    total, metrics = loss({"w": W}, {k: BATCH[k] for k in ("obs", "actions")})
    expected = -(math.log(0.75) + math.log(0.25)) / 2
    np.testing.assert_allclose(float(total), expected, rtol=1e-6)
    np.testing.assert_allclose(float(metrics["policy_loss"]), expected, rtol=1e-6)
    entropy = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))  # both rows alike
    np.testing.assert_allclose(float(metrics["entropy"]), entropy, rtol=1e-6)


# Targets: row 0: 3 + 0 = 3, V = 1 -> A = 2; row 1: 2 + 0.5 * V(e1) = 3, V = 2 -> A = 1.
# mean(A^2) = 2.5 -> vf_loss = 1.25. Average: 100 + 0.5 * (2.5 - 100) = 51.25.
# Weights exp(beta * A / sqrt(51.25)); policy loss -mean(w * log pi(a | s)).
@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("beta", [1.0, 0.0])
def test_marwil_loss_matches_hand_computed_values(jit, beta):
    ctx = context({"beta": jnp.float32(beta)})
    loss = maybe_jit(lambda params, batch: marwil_loss(CATEGORICAL)(params, batch, ctx), jit)
    total, metrics = loss({"w": W, "v": V}, BATCH)
    weights = np.exp(beta * np.asarray([2.0, 1.0]) / math.sqrt(51.25))
    policy = -(weights[0] * math.log(0.75) + weights[1] * math.log(0.25)) / 2
    np.testing.assert_allclose(float(metrics["policy_loss"]), policy, rtol=1e-6)
    np.testing.assert_allclose(float(metrics["vf_loss"]), 1.25, rtol=1e-6)
    np.testing.assert_allclose(float(total), policy + 1.25, rtol=1e-6)
    np.testing.assert_allclose(float(metrics[AVERAGE]), 51.25, rtol=1e-6)
    np.testing.assert_allclose(float(metrics["mean_weights"]), weights.mean(), rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_marwil_value_gradient_holds_weights_and_bootstrap_values_constant(jit):
    # d/dv 0.5 * mean(A^2) with A = target - V(obs), target and weights constant:
    # dv0 = -A0 / 2 = -1, dv1 = -A1 / 2 = -0.5 (through the bootstrap it would be -0.25).
    ctx = context()
    grad = maybe_jit(jax.grad(lambda params: marwil_loss(CATEGORICAL)(params, BATCH, ctx)[0]), jit)(
        {"w": W, "v": V}
    )
    np.testing.assert_allclose(np.asarray(grad["v"]), [-1.0, -0.5], rtol=1e-6)


def test_returns_to_go_by_hand():
    # Episode 1 terminates after 3 steps; episode 2 is truncated after 2. gamma = 0.5.
    rewards = np.ones(5, np.float32)
    terminated = np.asarray([0, 0, 1, 0, 0], bool)
    ends = np.asarray([0, 0, 1, 0, 1], bool)
    next_obs = np.arange(5, dtype=np.float32)[:, None]
    for jit in (False, True):
        out = maybe_jit(returns_to_go, jit)(rewards, terminated, ends, next_obs, 0.5)
        np.testing.assert_allclose(out.returns, [1.75, 1.5, 1.0, 1.5, 1.0])
        np.testing.assert_allclose(out.bootstrap_discounts, [0, 0, 0, 0.25, 0.5])
        np.testing.assert_array_equal(out.bootstrap_obs[:, 0], [2, 2, 2, 4, 4])


def test_epoch_indices_visit_every_row_once_per_pass():
    for indices in (epoch_indices, jax.jit(epoch_indices, static_argnums=(1, 2, 3))):
        once = np.asarray(indices(jax.random.key(0), 12, 4, 3))
        assert once.shape == (3, 4) and sorted(once.ravel()) == list(range(12))
        twice = np.asarray(indices(jax.random.key(1), 10, 4, 5))  # two passes, 20 rows
        assert sorted(twice.ravel()) == sorted(list(range(10)) * 2)
        assert sorted(twice.ravel()[:10]) == list(range(10))


def small(name, **config):
    return jl.algorithms.build(
        name,
        CARTPOLE.observation_space,
        CARTPOLE.action_space,
        {"hidden_sizes": (8,), "train_batch_size": 4, **config},
    )


@pytest.mark.parametrize("heads", [(), (8,)])
def test_marwil_with_beta_zero_and_no_value_loss_is_bc(heads):
    # With hidden head layers too: a MARWIL actor's params are still a BC model's params.
    marwil = small("marwil", beta=0.0, vf_coeff=0.0, head_hidden_sizes=heads)
    bc = small("bc", head_hidden_sizes=heads)
    state = marwil.learner.init(jax.random.key(0))
    params = state.modules["default_policy"].params
    actor = {"params": params["params"]["actor"]}
    rng = np.random.default_rng(0)
    batch = {
        "obs": rng.normal(size=(6, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, 6).astype(np.int32),
        "returns": rng.normal(size=6).astype(np.float32),
        "bootstrap_obs": rng.normal(size=(6, 4)).astype(np.float32),
        "bootstrap_discounts": np.zeros(6, np.float32),
    }
    module = state.modules["default_policy"]

    def ctx(model):
        return jl.LossContext(
            "default_policy", model.apply, None, module.extra, module.hyperparams, {}
        )

    marwil_spec = marwil.learner.specs["default_policy"]
    bc_spec = bc.learner.specs["default_policy"]
    marwil_of = jax.jit(lambda p: marwil_spec.loss(p, batch, ctx(marwil_spec.model)))
    bc_of = jax.jit(lambda p: bc_spec.loss(p, batch, ctx(bc_spec.model)))
    bc_total, _ = bc_of(actor)
    marwil_total, metrics = marwil_of(params)
    np.testing.assert_allclose(float(marwil_total), float(bc_total), rtol=1e-6)
    np.testing.assert_allclose(float(metrics["policy_loss"]), float(bc_total), rtol=1e-6)
    marwil_grad = jax.jit(jax.grad(lambda p: marwil_of(p)[0]))(params)
    bc_grad = jax.jit(jax.grad(lambda p: bc_of(p)[0]))(actor)
    assert_trees_close(marwil_grad["params"]["actor"], bc_grad["params"], rtol=1e-5)


def rows_of(algorithm, num_rows=24, seed=0):
    rng = np.random.default_rng(seed)
    ends = np.zeros(num_rows, bool)
    ends[[7, 15, num_rows - 1]] = True
    episodes = {
        "obs": rng.normal(size=(num_rows, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, num_rows),
        "rewards": np.ones(num_rows, np.float32),
        "terminated": ends.copy(),
        "truncated": np.zeros(num_rows, bool),
        "next_obs": rng.normal(size=(num_rows, 4)).astype(np.float32),
        "episode_ends": ends,
    }
    return jax.jit(algorithm.rows)(episodes)


@pytest.mark.parametrize("name", ["bc", "marwil"])
def test_offline_updates_compile_once_and_count_rows(name):
    extra = {"moving_average_sqd_adv_norm_update_rate": 0.5} if name == "marwil" else {}
    algorithm = small(name, dataset_num_iters_per_learner=3, **extra)
    rows = rows_of(algorithm)
    learner = algorithm.learner
    state = learner.init(jax.random.key(0))
    chex.clear_trace_counter()
    updates = jax.jit(chex.assert_max_traces(make_offline_updates(algorithm, 24), n=1))
    for key in jax.random.split(jax.random.key(1), 3):
        state, metrics = updates(state, rows, key)
        assert np.isfinite(float(metrics["default_policy"]["total_loss"]))
    module = state.modules["default_policy"]
    assert int(module.grad_steps) == 9 and int(module.env_steps) == 9 * 4
    if name == "marwil":  # nine halvings of the distance from 100 to mean(A^2) (~20 here)
        assert 0.0 < float(module.extra[AVERAGE]) < 50.0


def test_one_pass_is_the_default_iteration():
    algorithm = small("bc")
    assert algorithm.updates_per_iteration is None
    from jaxlearner.algorithms.offline import updates_per_iteration

    assert updates_per_iteration(algorithm, 10) == 2
    with pytest.raises(ValueError, match="holds 3 rows, fewer than bc's train_batch_size"):
        updates_per_iteration(algorithm, 3)


def test_fit_batch_makes_a_small_dataset_one_batch():
    from jaxlearner.algorithms.offline import fit_batch, updates_per_iteration

    algorithm = small("bc")  # train_batch_size 4
    assert fit_batch(algorithm, 4) is algorithm and fit_batch(algorithm, 10) is algorithm
    fitted = fit_batch(algorithm, 3)
    assert fitted.train_batch_size == 3 and updates_per_iteration(fitted, 3) == 1
    assert fitted.learner is algorithm.learner and fitted.config == algorithm.config
    with pytest.raises(ValueError, match="at least one row; got 0"):
        fit_batch(algorithm, 0)


def test_configs_recipes_and_kinds():
    kinds = (("bc", jl.algorithms.BCConfig), ("marwil", jl.algorithms.MARWILConfig))
    for name, config_type in kinds:
        algorithm = small(name)
        assert isinstance(algorithm, jl.algorithms.OfflineAlgorithm)
        assert not isinstance(algorithm, jl.algorithms.Algorithm)
        assert algorithm.learner.recipe["algorithm"] == name
        again = jl.algorithms.algorithm_for(jl.learner_from_recipe(algorithm.learner.recipe))
        assert again.config == algorithm.config and isinstance(again.config, config_type)
        module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
        actions, _ = algorithm.exploit(module, np.zeros((3, 4), np.float32), jax.random.key(1))
        assert actions.shape == (3,) and actions.dtype == jnp.int32
    default = jl.algorithms.MARWILConfig()
    assert (default.beta, default.vf_coeff, default.lr) == (1.0, 1.0, 1e-4)
    assert default.moving_average_sqd_adv_norm_start == 100.0
    assert default.moving_average_sqd_adv_norm_update_rate == 1e-8
    for cls, bad, message in [
        (jl.algorithms.BCConfig, {"train_batch_size": 0}, "BCConfig.train_batch_size must be"),
        (jl.algorithms.BCConfig, {"grad_clip_by": "max"}, "BCConfig.grad_clip_by must be one of"),
        (jl.algorithms.MARWILConfig, {"gamma": 2.0}, "MARWILConfig.gamma must be"),
        (jl.algorithms.MARWILConfig, {"vf_coeff": -1.0}, "MARWILConfig.vf_coeff must be >= 0"),
        (
            jl.algorithms.MARWILConfig,
            {"dataset_num_iters_per_learner": 0},
            "dataset_num_iters_per_learner must be",
        ),
    ]:
        with pytest.raises(ValueError, match=message):
            cls(**bad)
    with pytest.raises(ValueError, match=r"Unknown BCConfig field\(s\) \['beta'\]"):
        small("bc", beta=1.0)
    bc = small("bc")
    for field, value in (("train_batch_size", 0), ("updates_per_iteration", True)):
        with pytest.raises(ValueError, match=f"'bc': {field} must be a positive int"):
            dataclasses.replace(bc, **{field: value})


def test_the_online_trainer_refuses_offline_algorithms():
    with pytest.raises(TypeError, match=r"bc trains on a recorded dataset.*jl.OfflineTrainer"):
        jl.Trainer(small("bc").learner, "CartPole-v1", num_envs=1)


def test_box_actions_train_as_float32():
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    algorithm = jl.algorithms.build(
        "marwil", CARTPOLE.observation_space, box, {"hidden_sizes": (8,), "train_batch_size": 4}
    )
    rows = jax.jit(algorithm.rows)(
        {
            "obs": np.zeros((4, 4), np.float32),
            "actions": np.full((4, 2), 0.5, np.float64),
            "rewards": np.ones(4, np.float32),
            "terminated": np.asarray([0, 0, 0, 1], bool),
            "truncated": np.zeros(4, bool),
            "next_obs": np.zeros((4, 4), np.float32),
            "episode_ends": np.asarray([0, 0, 0, 1], bool),
        }
    )
    assert rows["actions"].dtype == jnp.float32 and rows["actions"].shape == (4, 2)
    state = algorithm.learner.init(jax.random.key(0))
    state, metrics = algorithm.learner.update(state, rows)
    assert np.isfinite(float(metrics["default_policy"]["total_loss"]))
