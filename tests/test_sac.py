"""SAC: the losses against hand-computed values, target critics, act functions, recipe."""

import math
import time
from types import SimpleNamespace

import chex
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import maybe_jit, pendulum_replay_batch, tree_equal

import jaxlearner as jl
from jaxlearner.algorithms.networks.acting import uniform_actions
from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec
from jaxlearner.algorithms.networks.models import sac_networks
from jaxlearner.algorithms.replay import prioritized_replay, replay_buffer
from jaxlearner.algorithms.sac import sac_loss, sac_td_errors, target_entropy_for
from jaxlearner.training.env_runner import EnvRunner

PENDULUM = gym.make("Pendulum-v1")
CARTPOLE = gym.make("CartPole-v1")
SMALL = {"hidden_sizes": (8,), "num_steps_sampled_before_learning_starts": 0}
TERMS = ("actor", "critic", "temperature")


def table_apply(params, *args, method=None):
    """A tabular stand-in for SACNetworks: observations are state indices.

    ``policy``: ``[mean, log_std]`` rows of the actor's tables (Box) or logits rows
    (Discrete); ``q_values``: ``w_c * a + b_c[s]`` per critic ``c`` (Box) or rows of a
    ``[C, S, n]`` table (Discrete); ``log_alpha``: the temperature's param.
    """
    p = params["params"]
    if method == "log_alpha":
        return p["temperature"]["log_alpha"]
    if method == "policy":
        (obs,) = args
        if "logits" in p["actor"]:
            return p["actor"]["logits"][obs]
        return jnp.stack([p["actor"]["mean"][obs], p["actor"]["log_std"][obs]], axis=-1)
    if method == "q_values":
        if "q" in p["critic"]:
            (obs,) = args
            return p["critic"]["q"][:, obs]
        obs, action = args
        return p["critic"]["w"][:, None] * action[None, :, 0] + p["critic"]["b"][:, obs]
    raise ValueError(method)


def context(params, target_critic, target_entropy):
    return jl.LossContext(
        module_id="sac",
        apply=table_apply,
        key=jax.random.key(7),
        extra={"target_critic": target_critic},
        hyperparams={"target_entropy": jnp.float32(target_entropy)},
        counters={},
    )


def huber(x):
    return np.where(np.abs(x) < 1, 0.5 * x**2, np.abs(x) - 0.5)


BOX = DistributionSpec("tanh_gaussian", (1,), low=(-2.0,), high=(2.0,))
BOX_PARAMS = {
    "params": {
        "actor": {
            "mean": jnp.asarray([0.1, -0.3, 0.5]),
            "log_std": jnp.asarray([-1.0, -0.5, 0.0]),
        },
        "critic": {
            "w": jnp.asarray([1.0, -0.5]),
            "b": jnp.asarray([[0.2, 0.4, -0.1], [0.0, 0.3, 0.1]]),
        },
        "temperature": {"log_alpha": jnp.log(jnp.float32(0.5))},
    }
}
BOX_TARGET = {"w": jnp.asarray([0.8, -0.2]), "b": jnp.asarray([[0.0, 1.0, 2.0], [0.5, 0.5, 0.5]])}
BOX_BATCH = {
    "obs": np.asarray([0, 1, 2, 0], np.int32),
    "actions": np.asarray([[0.5], [-1.0], [1.5], [0.0]], np.float32),
    "rewards": np.asarray([1.0, -1.0, 0.5, 9.0], np.float32),
    "next_obs": np.asarray([1, 2, 0, 0], np.int32),
    "discounts": np.asarray([0.9, 0.9, 0.0, 0.9], np.float32),
    "mask": np.asarray([1.0, 1.0, 1.0, 0.0], np.float32),
}


def squashed_sample(mean, log_std, z):
    """A reference tanh-Gaussian on [-2, 2]: ``a = 2 tanh(u)``, ``u = mean + std z``;
    ``log p(a) = log N(u) - log|da/du| = -z^2/2 - log_std - log(2 pi)/2 - log(2 (1 - tanh^2 u))``.
    """
    u = mean + np.exp(log_std) * z
    log_density = -0.5 * z**2 - log_std - 0.5 * np.log(2 * np.pi)
    return 2 * np.tanh(u), log_density - np.log(2 * (1 - np.tanh(u) ** 2))


def test_continuous_sac_loss_matches_a_reference(jit):
    loss = sac_loss(BOX, "huber")
    ctx = context(BOX_PARAMS, BOX_TARGET, target_entropy=-1.0)
    terms, metrics = maybe_jit(lambda p, b: loss(p, b, ctx), jit)(BOX_PARAMS, BOX_BATCH)

    # The loss draws a' (at s') with the first half of ctx.key and a~ (at s) with the second.
    next_key, current_key = jax.random.split(ctx.key)
    z_next = np.asarray(jax.random.normal(next_key, (4, 1)))[:, 0]
    z_now = np.asarray(jax.random.normal(current_key, (4, 1)))[:, 0]
    mean, log_std = (np.asarray(BOX_PARAMS["params"]["actor"][k]) for k in ("mean", "log_std"))
    w, b = (
        np.asarray(BOX_PARAMS["params"]["critic"]["w"]),
        np.asarray(BOX_PARAMS["params"]["critic"]["b"]),
    )
    w_target, b_target = np.asarray(BOX_TARGET["w"]), np.asarray(BOX_TARGET["b"])
    obs, next_obs, actions = BOX_BATCH["obs"], BOX_BATCH["next_obs"], BOX_BATCH["actions"][:, 0]
    mask = BOX_BATCH["mask"]
    alpha = 0.5
    # Critic: y = r + discount * (min_c Q_target_c(s', a') - alpha log p(a')), Huber per critic.
    next_actions, next_logp = squashed_sample(mean[next_obs], log_std[next_obs], z_next)
    next_q = np.min(w_target[:, None] * next_actions + b_target[:, next_obs], axis=0)
    y = BOX_BATCH["rewards"] + BOX_BATCH["discounts"] * (next_q - alpha * next_logp)
    q = w[:, None] * actions + b[:, obs]  # [2, B]
    critic = sum(np.sum(mask * huber(q[c] - y)) / 3 for c in range(2))
    # Actor: alpha log p(a~) - min_c Q_c(s, a~). Temperature: -log_alpha (log p(a~) + H_target).
    new_actions, logp = squashed_sample(mean[obs], log_std[obs], z_now)
    q_new = np.min(w[:, None] * new_actions + b[:, obs], axis=0)
    actor = np.sum(mask * (alpha * logp - q_new)) / 3
    temperature = -np.log(alpha) * np.sum(mask * (logp - 1.0)) / 3

    np.testing.assert_allclose(terms["critic"], critic, rtol=1e-5)
    np.testing.assert_allclose(terms["actor"], actor, rtol=1e-5)
    np.testing.assert_allclose(terms["temperature"], temperature, rtol=1e-5)
    np.testing.assert_allclose(metrics["alpha_value"], 0.5, rtol=1e-6)
    np.testing.assert_allclose(metrics["logps"], np.sum(mask * logp) / 3, rtol=1e-5)
    np.testing.assert_allclose(metrics["qf_mean"], np.sum(mask * q[0]) / 3, rtol=1e-5)
    np.testing.assert_allclose(metrics["target_mean"], np.sum(mask * y) / 3, rtol=1e-5)


@pytest.mark.parametrize("discrete", [False, True], ids=["box", "discrete"])
def test_each_term_depends_only_on_its_own_optimizer_params(discrete):
    # Stop-gradients make each term a function of its own params only, so the summed loss
    # has the same gradients as the per-optimizer terms.
    spec, params, target, batch = (
        (DISCRETE, DISCRETE_PARAMS, DISCRETE_TARGET, DISCRETE_BATCH)
        if discrete
        else (BOX, BOX_PARAMS, BOX_TARGET, BOX_BATCH)
    )
    loss = sac_loss(spec)
    ctx = context(params, target, target_entropy=0.5)
    for term in TERMS:
        grads = jax.grad(lambda p, term=term: loss(p, batch, ctx)[0][term])(params)["params"]
        for owner in TERMS:
            norm = float(jax.tree.reduce(lambda a, x: a + jnp.sum(jnp.abs(x)), grads[owner], 0.0))
            assert (norm > 0) == (owner == term), (term, owner, norm)


DISCRETE = DistributionSpec("categorical", (2,))
DISCRETE_PARAMS = {
    "params": {
        # Policy probabilities: s0 [1/2, 1/2], s1 [1/4, 3/4], s2 [1/2, 1/2].
        "actor": {"logits": jnp.log(jnp.asarray([[0.5, 0.5], [0.25, 0.75], [0.5, 0.5]]))},
        # q[c, s, a]
        "critic": {
            "q": jnp.asarray(
                [[[1.0, 2.0], [0.0, 4.0], [2.0, 2.0]], [[3.0, 1.0], [2.0, 2.0], [1.0, 3.0]]]
            )
        },
        "temperature": {"log_alpha": jnp.log(jnp.float32(0.5))},
    }
}
DISCRETE_TARGET = {
    "q": jnp.asarray([[[0.0, 0.0], [2.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, 4.0], [3.0, 0.0]]])
}
DISCRETE_BATCH = {
    "obs": np.asarray([0, 1, 2], np.int32),
    "actions": np.asarray([1, 0, 1], np.int32),
    "rewards": np.asarray([1.0, 0.0, 50.0], np.float32),
    "next_obs": np.asarray([1, 2, 0], np.int32),
    "discounts": np.asarray([0.5, 0.0, 0.9], np.float32),
    "mask": np.asarray([1.0, 1.0, 0.0], np.float32),
}


def test_discrete_sac_loss_matches_hand_computed_values(jit):
    # alpha = 0.5, target entropy 0.5; row 2 is masked out.
    # Row 0 (s0, a = 1, r = 1, s' = s1, discount 0.5): min_c Q_target(s1, .) = [1, 0];
    #   V(s1) = 1/4 (1 - 0.5 log 1/4) + 3/4 (0 - 0.5 log 3/4); y0 = 1 + 0.5 V(s1).
    #   Q_c(s0, 1) = [2, 1]; both TD errors are below 1 in size: Huber 0.5 x^2.
    # Row 1 (s1, a = 0, r = 0, discount 0): y1 = 0; Q_c(s1, 0) = [0, 2]: Huber [0, 1.5].
    v_s1 = 0.25 * (1 - 0.5 * np.log(0.25)) + 0.75 * (0 - 0.5 * np.log(0.75))
    y0 = 1 + 0.5 * v_s1
    critic = (0.5 * (2 - y0) ** 2 + 0.0) / 2 + (0.5 * (1 - y0) ** 2 + 1.5) / 2
    # Actor: sum_a pi(a|s) (alpha log pi(a|s) - min_c Q_c(s, a)).
    #   s0: min_c Q = [1, 1] -> 0.5 log 1/2 - 1.  s1: min_c Q = [0, 2] ->
    #   1/4 (0.5 log 1/4) + 3/4 (0.5 log 3/4 - 2).
    actor0 = 0.5 * np.log(0.5) - 1
    actor1 = 0.25 * 0.5 * np.log(0.25) + 0.75 * (0.5 * np.log(0.75) - 2)
    # Temperature: -log(alpha) * mean(sum_a pi log pi + target entropy).
    logps = np.asarray([np.log(0.5), 0.25 * np.log(0.25) + 0.75 * np.log(0.75)])
    temperature = -np.log(0.5) * np.mean(logps + 0.5)

    loss = sac_loss(DISCRETE, "huber")
    ctx = context(DISCRETE_PARAMS, DISCRETE_TARGET, target_entropy=0.5)
    terms, metrics = maybe_jit(lambda p, b: loss(p, b, ctx), jit)(DISCRETE_PARAMS, DISCRETE_BATCH)
    np.testing.assert_allclose(terms["critic"], critic, rtol=1e-5)
    np.testing.assert_allclose(terms["actor"], (actor0 + actor1) / 2, rtol=1e-5)
    np.testing.assert_allclose(terms["temperature"], temperature, rtol=1e-5)
    np.testing.assert_allclose(metrics["logps"], logps.mean(), rtol=1e-5)
    np.testing.assert_allclose(metrics["qf_mean"], (2.0 + 0.0) / 2, rtol=1e-6)
    np.testing.assert_allclose(metrics["qf_max"], 2.0)
    np.testing.assert_allclose(metrics["td_error_mean"], (abs(2 - y0) + abs(1 - y0) + 2) / 4)
    mse, _ = sac_loss(DISCRETE, "mse")(DISCRETE_PARAMS, DISCRETE_BATCH, ctx)
    np.testing.assert_allclose(
        mse["critic"], ((2 - y0) ** 2 / 2) + ((1 - y0) ** 2 + 4.0) / 2, rtol=1e-5
    )


def test_target_entropy_auto():
    assert target_entropy_for(PENDULUM.action_space, "auto") == -1.0
    assert target_entropy_for(gym.spaces.Box(-1, 1, (3,)), "auto") == -3.0
    assert target_entropy_for(gym.spaces.Discrete(4), "auto") == pytest.approx(0.98 * math.log(4))
    assert target_entropy_for(gym.spaces.Discrete(4), -0.3) == -0.3


def sac_algorithm(config=None, env=PENDULUM):
    return jl.algorithms.build(
        "sac", env.observation_space, env.action_space, {**SMALL, **(config or {})}
    )


def test_box_actions_stay_in_bounds_and_exploit_is_deterministic():
    algorithm = sac_algorithm()
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    obs = jax.random.normal(jax.random.key(1), (256, 3))
    actions, extras = algorithm.explore(module, obs, jax.random.key(2))
    assert actions.shape == (256, 1) and extras == {}
    # The initial pre-squash std is exp(-1.5) (log_std halfway in [-5, 2]): 2 tanh(0.22 z).
    assert float(jnp.abs(actions).max()) <= 2.0 and float(actions.std()) > 0.3
    deterministic, _ = algorithm.exploit(module, obs, jax.random.key(3))
    np.testing.assert_array_equal(
        deterministic, algorithm.exploit(module, obs, jax.random.key(4))[0]
    )


def test_discrete_sac_samples_and_exploits_the_most_likely_action():
    algorithm = sac_algorithm(env=CARTPOLE)
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    obs = jnp.zeros((1000, 4))
    actions, _ = algorithm.explore(module, obs, jax.random.key(1))
    assert set(np.unique(actions)) == {0, 1}  # near-uniform initial policy
    greedy, _ = algorithm.exploit(module, obs, jax.random.key(2))
    assert len(np.unique(greedy)) == 1


def test_uniform_actions_cover_the_box_or_the_categories(jit):
    box = DistributionSpec("tanh_gaussian", (2,), low=(0.0, -2.0), high=(1.0, 2.0))
    actions = maybe_jit(lambda key: uniform_actions(box, (20_000,), key), jit)(jax.random.key(0))
    assert actions.shape == (20_000, 2) and actions.dtype == jnp.float32
    assert float(actions[:, 0].min()) >= 0.0 and float(actions[:, 0].max()) < 1.0
    assert float(actions[:, 1].min()) >= -2.0 and float(actions[:, 1].max()) < 2.0
    # U(low, high): mean (low + high) / 2, std (high - low) / sqrt(12); 20k draws, within 3%.
    np.testing.assert_allclose(actions.mean(0), [0.5, 0.0], atol=0.03)
    np.testing.assert_allclose(actions.std(0), [1 / math.sqrt(12), 4 / math.sqrt(12)], rtol=0.03)
    unbounded = DistributionSpec("tanh_gaussian", (1,))
    assert float(jnp.abs(uniform_actions(unbounded, (500,), jax.random.key(1))).max()) <= 1.0
    three = DistributionSpec("categorical", (3,))
    picks = maybe_jit(lambda key: uniform_actions(three, (4, 3000), key), jit)(jax.random.key(2))
    assert picks.shape == (4, 3000) and picks.dtype == jnp.int32
    np.testing.assert_allclose(np.bincount(np.ravel(picks)) / picks.size, [1 / 3] * 3, atol=0.01)
    with pytest.raises(ValueError, match="'diag_gaussian'"):
        uniform_actions(DistributionSpec("diag_gaussian", (2,)), (3,), jax.random.key(0))


@pytest.mark.parametrize("env", [PENDULUM, CARTPOLE], ids=["box", "discrete"])
def test_uniform_warmup_acts_uniformly_until_the_module_has_trained(jit, env):
    config = {"num_steps_sampled_before_learning_starts": 100}
    uniform = sac_algorithm({**config, "warmup_actions": "uniform"}, env=env)
    policy = sac_algorithm(config, env=env)
    module = uniform.learner.init(jax.random.key(0)).modules["default_policy"]
    obs, key = (
        jax.random.normal(jax.random.key(1), (256, *env.observation_space.shape)),
        jax.random.key(2),
    )
    explore = maybe_jit(uniform.explore, jit)
    spec = uniform.learner.specs["default_policy"].model.distribution
    warm, _ = explore(module, obs, key)
    np.testing.assert_array_equal(warm, uniform_actions(spec, (256,), jax.random.fold_in(key, 1)))
    # From the first update on (it counts every env step collected before it): the policy.
    trained = module.replace(env_steps=jnp.int32(100))
    np.testing.assert_array_equal(
        explore(trained, obs, key)[0], maybe_jit(policy.explore, jit)(trained, obs, key)[0]
    )
    np.testing.assert_array_equal(
        uniform.exploit(module, obs, key)[0], policy.exploit(module, obs, key)[0]
    )
    with pytest.raises(ValueError, match="warmup_actions must be one of"):
        sac_algorithm({"warmup_actions": "random"})


def test_a_trainer_fills_its_warmup_rows_with_uniform_actions():
    """SB3's warm-up: Pendulum's torques in [-2, 2] drawn uniformly (std 4 / sqrt(12) = 1.15),
    where the initial policy's 2 tanh(0.22 z) stay near 0 (std about 0.44)."""
    config = {"num_steps_sampled_before_learning_starts": 512, "rollout_fragment_length": 8}

    def warmup_actions(warmup):
        learner = jl.algorithms.sac(
            PENDULUM.observation_space,
            PENDULUM.action_space,
            {**SMALL, **config, "warmup_actions": warmup},
        )
        trainer = jl.Trainer(learner, "Pendulum-v1", num_envs=8, seed=0, progress=False)
        while trainer.engine.buffer is None or int(trainer.engine.buffer.size) < 512:
            trainer.step()
        return np.asarray(trainer.engine.buffer.storage["actions"][:512])

    assert 1.05 < float(warmup_actions("uniform").std()) < 1.25
    assert float(warmup_actions("policy").std()) < 0.6


def test_prioritized_replay_weights_only_the_critic_term_and_gives_td_errors(jit):
    # As above, with importance weights [2, 0.5] on the two real rows (row 2 is masked):
    # the critic term weighs each row's Huber losses; actor and temperature do not change.
    v_s1 = 0.25 * (1 - 0.5 * np.log(0.25)) + 0.75 * (0 - 0.5 * np.log(0.75))
    y0 = 1 + 0.5 * v_s1
    critic = (2 * 0.5 * (2 - y0) ** 2 + 0.5 * 0.0) / 2 + (2 * 0.5 * (1 - y0) ** 2 + 0.5 * 1.5) / 2
    loss = sac_loss(DISCRETE, "huber")
    ctx = context(DISCRETE_PARAMS, DISCRETE_TARGET, target_entropy=0.5)
    weighted = {**DISCRETE_BATCH, "weights": np.asarray([2.0, 0.5, 9.0], np.float32)}
    run = maybe_jit(lambda p, b: loss(p, b, ctx)[0], jit)
    terms, plain = run(DISCRETE_PARAMS, weighted), run(DISCRETE_PARAMS, DISCRETE_BATCH)
    np.testing.assert_allclose(terms["critic"], critic, rtol=1e-5)
    np.testing.assert_allclose(terms["actor"], plain["actor"], rtol=1e-6)
    np.testing.assert_allclose(terms["temperature"], plain["temperature"], rtol=1e-6)
    # Priorities: the mean over the critics of |Q_c(s, a) - y|: row 0 [2, 1] - y0,
    # row 1 [0, 2] - 0, row 2 (masked, the loop zeroes it) Q_c(s2, 1) = [2, 3] vs
    # y2 = 50 + 0.9 V(s0), V(s0) = sum_a 1/2 (min_c Q_target(s0, a) - 0.5 log 1/2) = 0.5 log 2 / 2.
    model = SimpleNamespace(apply=table_apply, distribution=DISCRETE)
    module = SimpleNamespace(
        params=DISCRETE_PARAMS, extra=ctx.extra, hyperparams=ctx.hyperparams, counters={}
    )
    td = maybe_jit(lambda b: sac_td_errors(model, module, b, jax.random.key(0)), jit)(weighted)
    y2 = 50 + 0.9 * (0.5 * np.log(2))
    expected = [(abs(2 - y0) + abs(1 - y0)) / 2, 1.0, (abs(2 - y2) + abs(3 - y2)) / 2]
    np.testing.assert_allclose(td, expected, rtol=1e-5)


def test_trainer_with_prioritized_replay_updates_priorities():
    config = {
        **SMALL,
        "prioritized_replay": True,
        "train_batch_size": 16,
        "num_steps_sampled_before_learning_starts": 32,
        "replay_buffer_capacity": 256,
        "training_intensity": 8,
    }
    learner = jl.algorithms.sac(PENDULUM.observation_space, PENDULUM.action_space, config)
    assert "weights" in learner.batch_layout["default_policy"]
    trainer = jl.Trainer(learner, "Pendulum-v1", num_envs=2, seed=0, progress=False)
    for _ in range(8):
        stats = trainer.step()
    assert all(np.isfinite(stats[f"default_policy/loss/{t}"]) for t in TERMS)
    buffer = trainer.engine.buffer
    assert isinstance(buffer, prioritized_replay.PrioritizedReplayBuffer)
    leaves = buffer.sum_tree.shape[0] // 2
    priorities = np.asarray(buffer.sum_tree[leaves : leaves + int(buffer.size)]) ** (1 / 0.6)
    assert len(np.unique(priorities)) > 10
    assert (priorities < float(buffer.max_priority) - 1e-6).sum() > 10


def test_target_critics_take_a_polyak_step_after_every_gradient_step():
    learner = sac_algorithm({"tau": 0.1}).learner
    state = learner.init(jax.random.key(0))
    module = state.modules["default_policy"]
    assert set(module.extra) == {"target_critic"}
    assert tree_equal(module.extra["target_critic"], module.params["params"]["critic"])
    old_target = module.extra["target_critic"]
    state, metrics = learner.update(state, pendulum_replay_batch())
    module = state.modules["default_policy"]
    expected = jax.tree.map(
        lambda p, t: 0.1 * p + 0.9 * t, module.params["params"]["critic"], old_target
    )
    chex.assert_trees_all_close(module.extra["target_critic"], expected, rtol=1e-6)
    # Each optimizer stepped its own params; the temperature moved by about alpha_lr.
    metrics = metrics["default_policy"]
    assert {"loss/actor", "loss/critic", "loss/temperature", "grad_norm/actor"} <= set(metrics)
    log_alpha = float(module.params["params"]["temperature"]["log_alpha"])
    assert 0 < abs(log_alpha) <= 3.1e-4


def test_config_validation_and_recipe_round_trip():
    config = {"actor_lr": 1e-3, "critic_lr": [[0, 1e-3], [1000, 1e-4]], "training_intensity": 512}
    learner = jl.algorithms.sac(PENDULUM.observation_space, PENDULUM.action_space, config)
    assert learner.recipe["algorithm"] == "sac"
    assert learner.specs["default_policy"].named_optimizers.keys() == set(TERMS)
    algorithm = jl.algorithms.algorithm_for(learner)
    assert algorithm.learner is learner and algorithm.config == jl.algorithms.SACConfig(**config)
    assert algorithm.updates_per_step == 2.0 and algorithm.train_batch_size == 256
    assert algorithm.replay_capacity == 1_000_000 and algorithm.learning_starts == 1500
    discrete = jl.algorithms.algorithm_for(
        jl.algorithms.sac(CARTPOLE.observation_space, CARTPOLE.action_space, {"twin_q": False})
    )
    assert discrete.config.twin_q is False and discrete.name == "sac"

    with pytest.raises(ValueError, match=r"Unknown SACConfig field\(s\) \['lr'\]; valid names"):
        jl.algorithms.sac(PENDULUM.observation_space, PENDULUM.action_space, {"lr": 1e-3})
    for bad, message in [
        ({"tau": 1.5}, r"SACConfig.tau must lie in \(0, 1\]"),
        ({"initial_alpha": 0.0}, "SACConfig.initial_alpha must be a positive number"),
        ({"target_entropy": "high"}, "target_entropy must be 'auto' or a finite number"),
        ({"train_batch_size": 0}, "train_batch_size must be a positive int"),
        ({"td_error_loss_fn": "l1"}, "td_error_loss_fn must be one of"),
        ({"actor_lr": [[1, 1e-3]]}, "Malformed piecewise schedule"),
        ({"prioritized_replay": "yes"}, "SACConfig.prioritized_replay must be True or False"),
        (
            {"prioritized_replay_alpha": -1},
            r"prioritized_replay_alpha must be a number in \[0, 1\]",
        ),
        ({"prioritized_replay_eps": float("nan")}, "prioritized_replay_eps must be a number >= 0"),
        ({"log_std_bound": "sigmoid"}, r"log_std_bound must be one of \('tanh', 'clip'\)"),
        ({"log_std_range": (2, -20)}, r"log_std_range must be \(min, max\).*got \(2, -20\)"),
        ({"log_std_range": (-5,)}, r"log_std_range must be \(min, max\)"),
    ]:
        with pytest.raises(ValueError, match=message):
            jl.algorithms.SACConfig(**bad)
    with pytest.raises(TypeError, match="SACConfig.ortho_init must be True or False; got 1"):
        jl.algorithms.SACConfig(ortho_init=1)
    with pytest.raises(TypeError, match="supports Box and Discrete action spaces"):
        jl.algorithms.sac(PENDULUM.observation_space, gym.spaces.MultiDiscrete([2, 3]))


def _policy_log_std(config, scale=1.0):
    """The actor's log-std on 64 random observations, its head's kernel times ``scale``."""
    learner = jl.algorithms.sac(PENDULUM.observation_space, PENDULUM.action_space, config)
    params = learner.init(jax.random.key(0)).modules["default_policy"].params
    head = params["params"]["actor"]["head"]["mean_log_std"]
    head = {**head, "kernel": head["kernel"] * scale}
    actor = {**params["params"]["actor"], "head": {**params["params"]["actor"]["head"]}}
    actor["head"]["mean_log_std"] = head
    params = {"params": {**params["params"], "actor": actor}}
    obs = jax.random.normal(jax.random.key(1), (64, 3))
    model = learner.specs["default_policy"].model
    return params, model.apply(params, obs, method="policy")[:, 1:]


def test_log_std_is_squashed_or_clipped_into_its_range():
    """SB3's bound clips the raw output to (-20, 2); the default squashes it smoothly into
    (-5, 2). The head's bias starts at zero, so scaling its kernel scales the raw output."""
    sb3 = {"log_std_range": [-20, 2], "log_std_bound": "clip"}
    _, raw = _policy_log_std(sb3)
    assert float(raw.min()) > -20.0 and float(raw.max()) < 2.0  # inside: clipping keeps it
    for scale, bound in ((1e4, 2.0), (-1e4, -20.0)):
        _, clipped = _policy_log_std(sb3, scale=scale)
        np.testing.assert_allclose(clipped, np.clip(scale * np.asarray(raw), -20, 2), rtol=1e-4)
        assert bound in np.asarray(clipped)  # the bound is reached
    for scale in (1.0, 1e4, -1e4):
        _, squashed = _policy_log_std({}, scale=scale)
        expected = -1.5 + 3.5 * np.tanh(scale * np.asarray(raw))
        np.testing.assert_allclose(squashed, expected, rtol=1e-4, atol=1e-5)
    assert jl.algorithms.SACConfig(**sb3).log_std_range == (-20.0, 2.0)
    with pytest.raises(ValueError, match=r"sac_networks.log_std_range must be \(min, max\)"):
        sac_networks(PENDULUM.observation_space, PENDULUM.action_space, log_std_range=(2, 2))


@pytest.mark.parametrize("discrete", [False, True], ids=["box", "discrete"])
def test_ortho_init_false_gives_pytorch_default_layers_everywhere(discrete):
    """PyTorch's nn.Linear: weights and biases in +-1/sqrt(fan_in), biases not zero; the
    orthogonal default keeps biases at zero. Same param names either way."""
    env = CARTPOLE if discrete else PENDULUM

    def layers(ortho):
        learner = jl.algorithms.sac(env.observation_space, env.action_space, {"ortho_init": ortho})
        params = learner.init(jax.random.key(0)).modules["default_policy"].params["params"]
        return {
            path: leaf
            for path, leaf in jax.tree_util.tree_leaves_with_path(params)
            if jax.tree_util.keystr(path).endswith(("['kernel']", "['bias']"))
        }

    torch_like, orthogonal = layers(False), layers(True)
    assert torch_like.keys() == orthogonal.keys() and len(torch_like) >= 10
    for path, leaf in torch_like.items():
        name = jax.tree_util.keystr(path)
        kernel = torch_like[path] if name.endswith("['kernel']") else None
        if kernel is not None:
            fan_in = kernel.shape[-2]
            assert float(jnp.abs(kernel).max()) <= 1 / math.sqrt(fan_in) + 1e-6, name
        else:
            assert float(jnp.abs(leaf).max()) > 0, name
    for path, leaf in orthogonal.items():
        if jax.tree_util.keystr(path).endswith("['bias']"):
            assert float(jnp.abs(leaf).max()) == 0.0


def test_updates_on_replay_batches_from_an_env_runner_compile_once():
    algorithm = sac_algorithm({"train_batch_size": 32})
    learner, module_id = algorithm.learner, algorithm.module_id
    state = learner.init(jax.random.key(0))
    runner = EnvRunner("Pendulum-v1", num_envs=2, seed=0)
    rollout = runner.sample(algorithm.explore, state.modules[module_id], 16, jax.random.key(1))
    experience = rollout.experience()
    rows = jax.jit(algorithm.transitions)(experience)
    assert rows["actions"].shape == (32, 1) and rows["actions"].dtype == jnp.float32
    np.testing.assert_allclose(rows["discounts"], 0.99)  # Pendulum only truncates
    buffer = replay_buffer.replay_buffer_init(jax.tree.map(lambda x: x[0], rows), 64)
    buffer = replay_buffer.add(buffer, rows)

    chex.clear_trace_counter()  # counters are keyed by function id, which may be reused

    @jax.jit
    @chex.assert_max_traces(n=1)
    def replay_update(state, buffer, key, env_steps):
        batch = replay_buffer.sample(buffer, key, algorithm.train_batch_size)
        return learner.update_fn(state, {module_id: batch}, {module_id: env_steps})

    for key in jax.random.split(jax.random.key(2), 3):
        state, metrics = replay_update(state, buffer, key, np.int32(1))
        assert all(np.isfinite(float(metrics[module_id][f"loss/{t}"])) for t in TERMS)
    module = state.modules[module_id]
    assert int(module.grad_steps) == 3 and int(module.env_steps) == 3
    assert not tree_equal(module.extra["target_critic"], module.params["params"]["critic"])


@pytest.mark.slow
def test_sac_learns_pendulum():
    config = {
        "actor_lr": 1e-3,
        "critic_lr": 1e-3,
        "alpha_lr": 1e-3,
        "num_steps_sampled_before_learning_starts": 1000,
        "hidden_sizes": [64, 64],
        "train_batch_size": 128,
    }
    env = gym.make("Pendulum-v1")
    learner = jl.algorithms.sac(env.observation_space, env.action_space, config)
    trainer = jl.Trainer(learner, "Pendulum-v1", num_envs=4, seed=0, progress=False)
    start = time.perf_counter()
    history = trainer.run([jl.RewardBound(-200.0), jl.MaxEnvSteps(20_000)], steps_per_eval=1000)
    final = trainer.eval()
    print(
        f"SAC Pendulum: {trainer.counters.env_steps} env steps, "
        f"{time.perf_counter() - start:.0f} s, eval {final['return_mean']}"
    )
    assert history[-1]["eval/return_mean"] >= -200.0
    assert final["return_mean"] >= -250.0
