"""TD3: the loss against hand-computed values, the delayed actor and targets, acting, bad
input, the recipe, and learning Pendulum (slow)."""

import dataclasses

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import pendulum_replay_batch, tree_equal

import jaxlearner as jl
from jaxlearner.algorithms.td3 import TD3Config, delayed, td3_loss
from jaxlearner.core.registry import learner_from_recipe

PENDULUM = gym.make("Pendulum-v1")
SMALL = {"hidden_sizes": (8,), "num_steps_sampled_before_learning_starts": 0}


def table_apply(params, *args, method=None):
    """A tabular stand-in for TD3Networks: observations are state indices.

    ``policy``: ``tanh(mu[s])``; ``q_values``: ``w_c * a + b_c[s]`` per critic ``c``.
    """
    p = params["params"]
    if method == "policy":
        (obs,) = args
        return jnp.tanh(p["actor"]["mu"][obs])[:, None]
    obs, action = args
    return p["critic"]["w"][:, None] * action[None, :, 0] + p["critic"]["b"][:, obs]


PARAMS = {
    "params": {
        "actor": {"mu": jnp.asarray([0.3, -0.8, 1.5])},
        "critic": {
            "w": jnp.asarray([1.0, -0.5]),
            "b": jnp.asarray([[0.2, 0.4, -0.1], [0.0, 0.3, 0.1]]),
        },
    }
}
TARGET = {
    "params": {
        "actor": {"mu": jnp.asarray([0.1, 0.2, -0.4])},
        "critic": {"w": jnp.asarray([0.8, -0.2]), "b": jnp.asarray([[0.1] * 3, [0.5] * 3])},
    }
}
BATCH = {
    "obs": jnp.asarray([0, 1, 2, 1]),
    "actions": jnp.asarray([[0.5], [-0.25], [1.0], [0.0]]),
    "rewards": jnp.asarray([1.0, -0.5, 0.25, 2.0]),
    "next_obs": jnp.asarray([1, 2, 0, 0]),
    "discounts": jnp.asarray([0.9, 0.0, 0.9, 0.9]),
    "mask": jnp.asarray([1.0, 1.0, 1.0, 0.0]),
}


def context(key=7):
    return jl.LossContext(
        module_id="td3",
        apply=table_apply,
        key=jax.random.key(key),
        extra={"target_params": TARGET},
        hyperparams={},
        counters={},
    )


def hand_terms(target_noise_actions=None):
    """TD3's terms in numpy: ``(critic_loss, actor_loss, target)``; without smoothing noise
    unless the target policy's actions are given."""
    p, t = PARAMS["params"], TARGET["params"]
    obs, nxt = np.asarray(BATCH["obs"]), np.asarray(BATCH["next_obs"])
    mask = np.asarray(BATCH["mask"])
    next_a = np.tanh(np.asarray(t["actor"]["mu"]))[nxt]
    if target_noise_actions is not None:
        next_a = target_noise_actions
    next_q = np.asarray(t["critic"]["w"])[:, None] * next_a + np.asarray(t["critic"]["b"])[:, nxt]
    target = np.asarray(BATCH["rewards"]) + np.asarray(BATCH["discounts"]) * next_q.min(0)
    actions = np.asarray(BATCH["actions"])[:, 0]
    q = np.asarray(p["critic"]["w"])[:, None] * actions + np.asarray(p["critic"]["b"])[:, obs]
    mean = lambda x: (x * mask).sum() / mask.sum()
    critic = sum(mean((q[i] - target) ** 2) for i in range(2))
    mu = np.tanh(np.asarray(p["actor"]["mu"]))[obs]
    actor = -mean(np.asarray(p["critic"]["w"])[0] * mu + np.asarray(p["critic"]["b"])[0, obs])
    return critic, actor, target


def test_td3_loss_without_smoothing_matches_the_hand_computed_terms():
    loss = td3_loss(target_noise=0.0, target_noise_clip=0.5, td_error_loss_fn="mse")
    terms, metrics = loss(PARAMS, BATCH, context())
    critic, actor, target = hand_terms()
    np.testing.assert_allclose(terms["critic"], critic, rtol=1e-5)
    np.testing.assert_allclose(terms["actor"], actor, rtol=1e-5)
    np.testing.assert_allclose(metrics["target_mean"], target[:3].mean(), rtol=1e-5)
    assert metrics["policy_loss"] == terms["actor"] and metrics["qf_loss"] == terms["critic"]


def test_td3_target_smoothing_noise_is_clipped_and_the_actions_kept_in_bounds():
    """Noise std 10 clipped at 0.5, then the action clipped to [-1, 1]: the target policy's
    actions are tanh(mu') +- 0.5 (whichever sign the key drew), clipped."""
    loss = td3_loss(target_noise=10.0, target_noise_clip=0.5)
    terms, _ = loss(PARAMS, BATCH, context(key=3))
    base = np.tanh(np.asarray(TARGET["params"]["actor"]["mu"]))[np.asarray(BATCH["next_obs"])]
    noise = 10.0 * np.asarray(jax.random.normal(jax.random.key(3), (4, 1)))[:, 0]
    smoothed = np.clip(base + np.clip(noise, -0.5, 0.5), -1, 1)
    assert np.all(np.abs(np.clip(noise, -0.5, 0.5)) == 0.5)  # every draw clipped
    critic, _, _ = hand_terms(target_noise_actions=smoothed)
    np.testing.assert_allclose(terms["critic"], critic, rtol=1e-5)


def test_the_actor_term_is_computed_only_on_the_steps_that_update_the_actor():
    loss = td3_loss(target_noise=0.0, policy_delay=2)
    _, actor, _ = hand_terms()
    for steps, expected in ((0, 0.0), (1, actor), (2, 0.0), (3, actor)):
        ctx = dataclasses.replace(context(), counters={"grad_steps": jnp.int32(steps)})
        terms, metrics = jax.jit(lambda params, ctx=ctx: loss(params, BATCH, ctx))(PARAMS)
        np.testing.assert_allclose(terms["actor"], expected, rtol=1e-5, atol=1e-7)
        assert metrics["policy_loss"] == terms["actor"]


def test_each_td3_term_depends_only_on_its_own_params():
    loss = td3_loss(target_noise=0.2)
    for name, frozen in (("actor", "critic"), ("critic", "actor")):
        grads = jax.grad(lambda p, n=name: loss(p, BATCH, context())[0][n])(PARAMS)
        assert all(np.all(g == 0) for g in jax.tree.leaves(grads["params"][frozen]))
        assert any(np.any(g != 0) for g in jax.tree.leaves(grads["params"][name]))


def test_delayed_optimizer_steps_every_kth_update_and_keeps_its_moments_in_between():
    tx = optax.inject_hyperparams(delayed(optax.adam, 3))(learning_rate=0.1)
    reference = optax.adam(0.1)
    params = {"w": jnp.ones(2)}
    state, reference_state = tx.init(params), reference.init(params)
    for step in range(9):
        grads = {"w": jnp.asarray([1.0, -2.0]) * (step + 1)}
        updates, state = tx.update(grads, state, params)
        if step % 3 != 2:
            assert np.all(np.asarray(updates["w"]) == 0)
            continue
        expected, reference_state = reference.update(grads, reference_state, params)
        np.testing.assert_allclose(updates["w"], expected["w"], rtol=1e-6)


def _learner(config=None):
    return jl.algorithms.td3(
        PENDULUM.observation_space, PENDULUM.action_space, {**SMALL, **(config or {})}
    )


def test_the_actor_and_targets_move_every_policy_delay_gradient_steps_the_critics_every_step():
    learner = _learner({"policy_delay": 2})
    state = learner.init(jax.random.key(0))
    batch = pendulum_replay_batch(32)
    batch["actions"] = batch["actions"] / 2.0  # stored in [-1, 1]
    update = jax.jit(learner.update)
    module = lambda s: s.modules["default_policy"]
    snapshot = lambda s: jax.tree.map(
        np.array, (module(s).params, module(s).extra["target_params"])
    )
    (params, targets) = snapshot(state)
    for step in range(1, 5):
        state, _ = update(state, batch)
        new_params, new_targets = snapshot(state)
        moved = step % 2 == 0
        assert not tree_equal(new_params["params"]["critic"], params["params"]["critic"])
        assert tree_equal(new_params["params"]["actor"], params["params"]["actor"]) is not moved
        assert tree_equal(new_targets, targets) is not moved
        params, targets = new_params, new_targets


def test_td3_acts_in_the_box_uniformly_before_learning_starts_and_trains_on_the_unit_action():
    space = gym.spaces.Box(np.float32([0.0, -3.0]), np.float32([1.0, 3.0]), dtype=np.float32)
    obs_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    td3 = jl.algorithms.build(
        "td3", obs_space, space, {**SMALL, "num_steps_sampled_before_learning_starts": 10}
    )
    module = td3.learner.init(jax.random.key(0)).modules["default_policy"]
    obs = jnp.zeros((512, 3))
    env_actions, extras = td3.explore(module, obs, jax.random.key(1))
    unit = np.asarray(extras["actions"])
    np.testing.assert_allclose(
        env_actions, np.asarray(space.low) + (unit + 1) / 2 * (space.high - space.low), rtol=1e-6
    )
    # Warm-up: uniform in [-1, 1] per dimension, so its mean is near 0 and its spread wide.
    assert np.all(np.abs(unit) <= 1) and np.all(unit.std(0) > 0.5)
    first, _ = td3.exploit(module, obs, jax.random.key(1))
    second, _ = td3.exploit(module, obs, jax.random.key(2))
    assert tree_equal(first, second)
    assert np.all((np.asarray(first) >= space.low) & (np.asarray(first) <= space.high))
    trained = module.replace(env_steps=jnp.int32(10))
    noisy, extras = td3.explore(trained, obs, jax.random.key(1))
    mu, _ = td3.exploit(trained, obs, jax.random.key(1))
    spread = np.asarray(extras["actions"]) - (
        2 * (np.asarray(mu) - space.low) / (space.high - space.low) - 1
    )
    assert 0.05 < spread.std() < 0.15  # exploration_noise 0.1, no longer uniform


@pytest.mark.parametrize(
    "config, message",
    [
        ({"policy_delay": 0}, "TD3Config.policy_delay must be a positive int"),
        ({"target_noise": -0.1}, "TD3Config.target_noise must be >= 0"),
        ({"warmup_actions": "random"}, "TD3Config.warmup_actions must be one of"),
        ({"tau": 2.0}, "TD3Config.tau must lie in (0, 1]"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_bad_td3_config_is_one_line_naming_the_field(config, message):
    with pytest.raises(ValueError, match=None) as error:
        TD3Config(**config) if "bogus" not in config else _learner(config)
    text = str(error.value)
    assert message in text and "\n" not in text


def test_td3_refuses_discrete_and_unbounded_action_spaces_before_building():
    for space in (gym.spaces.Discrete(3), gym.spaces.Box(-np.inf, np.inf, (2,))):
        with pytest.raises(TypeError, match="TD3") as error:
            jl.algorithms.td3(PENDULUM.observation_space, space)
        assert "\n" not in str(error.value)


def test_td3_recipe_rebuilds_the_learner_and_its_algorithm():
    learner = _learner({"policy_delay": 3})
    assert learner.recipe["algorithm"] == "td3"
    rebuilt = learner_from_recipe(learner.recipe)
    assert rebuilt.recipe == learner.recipe
    algorithm = jl.algorithms.algorithm_for(rebuilt)
    assert algorithm.name == "td3" and algorithm.config.policy_delay == 3
    assert "td3" in jl.algorithms.algorithm_names()


@pytest.mark.slow
def test_td3_learns_pendulum():
    config = {
        "num_steps_sampled_before_learning_starts": 1000,
        "hidden_sizes": [64, 64],
        "gamma": 0.98,
        "train_batch_size": 128,
    }
    learner = jl.algorithms.td3(PENDULUM.observation_space, PENDULUM.action_space, config)
    trainer = jl.Trainer(learner, "Pendulum-v1", num_envs=4, seed=0, progress=False)
    history = trainer.run([jl.RewardBound(-200.0), jl.MaxEnvSteps(12_000)], steps_per_eval=1000)
    final = trainer.eval()
    assert history[-1]["eval/return_mean"] >= -200.0
    assert final["return_mean"] >= -300.0
