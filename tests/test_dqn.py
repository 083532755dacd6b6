"""DQN: the loss against hand-computed values, transitions, exploration, target updates, recipe."""

import time

import chex
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    DQN_CARTPOLE,
    assert_same_stats,
    interrupted_and_resumed,
    maybe_jit,
    tree_equal,
)

import jaxlearner as jl
from jaxlearner.algorithms.dqn import dqn_loss, dqn_td_error
from jaxlearner.algorithms.replay import off_policy, prioritized_replay, replay_buffer
from jaxlearner.training.env_runner import EnvRunner

CARTPOLE = gym.make("CartPole-v1")
SMALL = {"hidden_sizes": (8,), "num_steps_sampled_before_learning_starts": 0}

# A tabular "network": observations are state indices, Q-values rows of a table.
ONLINE = np.asarray([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]], np.float32)
TARGET = np.asarray([[0.0, 0.0], [4.0, 2.0], [1.0, 5.0]], np.float32)
BATCH = {
    "obs": np.asarray([0, 1, 2, 0], np.int32),
    "actions": np.asarray([1, 0, 1, 0], np.int32),
    "rewards": np.asarray([1.0, 0.0, -0.5, 100.0], np.float32),
    "next_obs": np.asarray([1, 2, 0, 0], np.int32),
    "discounts": np.asarray([0.9, 0.5, 0.0, 0.9], np.float32),
    "mask": np.asarray([1.0, 1.0, 1.0, 0.0], np.float32),
}


def table_context():
    return jl.LossContext(
        module_id="q",
        apply=lambda params, obs: params["q"][obs],
        key=jax.random.key(0),
        extra={"target_params": {"q": jnp.asarray(TARGET)}},
        hyperparams={},
        counters={},
    )


# Row 0: Q(s0, 1) = 2. Double-Q picks argmax_a Q(s1, a) = 0 (0.5 > -1), evaluated by the
#   target: 4 -> y = 1 + 0.9 * 4 = 4.6, TD error -2.6. (max_a Q_target(s1, a) = 4 too.)
# Row 1: Q(s1, 0) = 0.5. Double-Q: argmax_a Q(s2, a) = 0 -> Q_target(s2, 0) = 1 -> y = 0.5,
#   TD error 0. Without double-Q: max_a Q_target(s2, a) = 5 -> y = 2.5, TD error -2.
# Row 2: terminal (discount 0): y = -0.5, Q(s2, 1) = 0, TD error 0.5.
# Row 3 is masked out (mask 0) and must not count.
# Huber (delta 1): |x| >= 1 -> |x| - 0.5, else 0.5 x^2; mse: x^2. Means over the 3 rows.
@pytest.mark.parametrize(
    "double_q, kind, expected, td_errors",
    [
        (True, "huber", (2.1 + 0.0 + 0.125) / 3, [-2.6, 0.0, 0.5]),
        (True, "mse", (6.76 + 0.0 + 0.25) / 3, [-2.6, 0.0, 0.5]),
        (False, "huber", (2.1 + 1.5 + 0.125) / 3, [-2.6, -2.0, 0.5]),
        (False, "mse", (6.76 + 4.0 + 0.25) / 3, [-2.6, -2.0, 0.5]),
    ],
)
def test_dqn_loss_matches_hand_computed_values(jit, double_q, kind, expected, td_errors):
    loss = dqn_loss(double_q=double_q, td_error_loss_fn=kind)
    ctx = table_context()
    params = {"q": jnp.asarray(ONLINE)}
    value, metrics = maybe_jit(lambda p, b: loss(p, b, ctx), jit)(params, BATCH)
    np.testing.assert_allclose(value, expected, rtol=1e-6)
    np.testing.assert_allclose(metrics["qf_mean"], (2.0 + 0.5 + 0.0) / 3, rtol=1e-6)
    np.testing.assert_allclose(metrics["qf_max"], 2.0)
    np.testing.assert_allclose(metrics["qf_min"], 0.0)
    np.testing.assert_allclose(metrics["td_error_mean"], np.abs(td_errors).mean(), rtol=1e-6)
    targets = np.asarray([2.0, 0.5, 0.0]) - np.asarray(td_errors)
    np.testing.assert_allclose(metrics["target_mean"], targets.mean(), rtol=1e-6, atol=1e-7)


def test_dqn_loss_gradient_reaches_only_the_taken_q_values(jit):
    # Huber, double-Q: dL/dQ(s, a) = clip(TD error, -1, 1) / 3 on the taken entries only:
    # row 0 -> Q(s0, 1): -1/3; row 1 -> Q(s1, 0): 0; row 2 -> Q(s2, 1): 0.5/3. The online
    # network's Q(s', .) only picks the action (argmax) and gets no gradient; the masked
    # row 3 -> Q(s0, 0) gets none either.
    loss = dqn_loss()
    ctx = table_context()
    grads = maybe_jit(jax.grad(lambda p: loss(p, BATCH, ctx)[0]), jit)({"q": jnp.asarray(ONLINE)})
    expected = np.zeros((3, 2), np.float32)
    expected[0, 1], expected[2, 1] = -1 / 3, 0.5 / 3
    np.testing.assert_allclose(grads["q"], expected, rtol=1e-6, atol=1e-8)


# Importance weights multiply each row's loss; the mean stays over the mask (3 rows).
# Huber, double-Q row losses [2.1, 0.0, 0.125] (above) with weights [0.5, 1.0, 0.2] (and
# any weight on the masked row): (0.5 * 2.1 + 0.2 * 0.125) / 3.
def test_dqn_loss_weights_each_row_by_its_importance_weight(jit):
    loss = dqn_loss()
    ctx = table_context()
    batch = {**BATCH, "weights": np.asarray([0.5, 1.0, 0.2, 7.0], np.float32)}
    value, metrics = maybe_jit(lambda p, b: loss(p, b, ctx), jit)({"q": jnp.asarray(ONLINE)}, batch)
    np.testing.assert_allclose(value, (0.5 * 2.1 + 0.2 * 0.125) / 3, rtol=1e-6)
    # The TD errors themselves (and the metrics of them) are not weighted.
    np.testing.assert_allclose(metrics["td_error_mean"], (2.6 + 0.0 + 0.5) / 3, rtol=1e-6)
    td_error, _, _ = maybe_jit(
        lambda p, b: dqn_td_error(ctx.apply, p, ctx.extra["target_params"], b), jit
    )({"q": jnp.asarray(ONLINE)}, batch)
    np.testing.assert_allclose(td_error[:3], [-2.6, 0.0, 0.5], rtol=1e-6, atol=1e-7)


def dqn_algorithm(config=None, action_space=CARTPOLE.action_space):
    return jl.algorithms.build(
        "dqn", CARTPOLE.observation_space, action_space, {**SMALL, **(config or {})}
    )


def hand_rollout():
    """T = 4 steps of N = 2 envs. Env 0: rewards 1, 2, 3, 4, terminated at t = 1.
    Env 1: rewards 10, 20, 30, 40, truncated at t = 2, and t = 3 is a reset-only step."""
    steps, envs = 4, 2
    obs = np.arange(steps * envs * 4, dtype=np.float32).reshape(steps, envs, 4)
    terminated = np.zeros((steps, envs), bool)
    truncated = np.zeros((steps, envs), bool)
    terminated[1, 0], truncated[2, 1] = True, True
    valid = np.ones((steps, envs), bool)
    valid[3, 1] = False
    return {
        "obs": obs,
        "actions": np.asarray([[0, 1], [1, 0], [1, 1], [0, 0]], np.int32),
        "rewards": np.asarray([[1, 10], [2, 20], [3, 30], [4, 40]], np.float32),
        "terminated": terminated,
        "truncated": truncated,
        "next_obs": obs + 1000.0,
        "valid": valid,
    }


def test_transitions_one_step(jit):
    algorithm = dqn_algorithm({"gamma": 0.5})
    experience = hand_rollout()
    rows = maybe_jit(algorithm.transitions, jit)(experience)
    assert {k: v.shape for k, v in rows.items()} == {
        "obs": (8, 4),
        "actions": (8,),
        "rewards": (8,),
        "next_obs": (8, 4),
        "discounts": (8,),
        "mask": (8,),
    }
    assert rows["actions"].dtype == jnp.int32
    # Time-major rows: row t * 2 + n is step t of env n.
    np.testing.assert_array_equal(rows["obs"][3], experience["obs"][1, 1])
    np.testing.assert_array_equal(rows["next_obs"], experience["next_obs"].reshape(8, 4))
    np.testing.assert_array_equal(rows["rewards"], [1, 10, 2, 20, 3, 30, 4, 40])
    # gamma, except 0 at env 0's termination (row 2); the truncation (row 5) bootstraps.
    np.testing.assert_allclose(rows["discounts"], [0.5, 0.5, 0.0, 0.5, 0.5, 0.5, 0.5, 0.5])
    np.testing.assert_array_equal(rows["mask"], [1, 1, 1, 1, 1, 1, 1, 0])


def test_transitions_n_step_windows_stop_at_episode_and_rollout_ends(jit):
    algorithm = dqn_algorithm({"gamma": 0.5, "n_step": 3})
    experience = hand_rollout()
    rows = maybe_jit(algorithm.transitions, jit)(experience)
    # Env 0 (terminated at t = 1): t = 0 covers t = 0, 1 -> 1 + 0.5 * 2 = 2, no bootstrap;
    #   t = 1 -> 2, no bootstrap; t = 2 covers 2, 3 (cut by the rollout's end) -> 3 + 0.5 * 4
    #   = 5, bootstraps with 0.5^2 on next_obs[3]; t = 3 -> 4, with 0.5 on next_obs[3].
    # Env 1 (truncated at t = 2): t = 0 covers 0..2 -> 10 + 10 + 7.5 = 27.5, bootstraps with
    #   0.5^3 on next_obs[2] (the final observation); t = 1 -> 20 + 15 = 35 with 0.25 on
    #   next_obs[2]; t = 2 -> 30 with 0.5; t = 3 (reset-only, masked) -> 40 with 0.5.
    np.testing.assert_allclose(rows["rewards"], [2, 27.5, 2, 35, 5, 30, 4, 40])
    np.testing.assert_allclose(rows["discounts"], [0, 0.125, 0, 0.25, 0.25, 0.5, 0.5, 0.5])
    bootstrap = [(1, 0), (2, 1), (1, 0), (2, 1), (3, 0), (2, 1), (3, 0), (3, 1)]
    expected_next = np.stack([experience["next_obs"][t, n] for t, n in bootstrap])
    np.testing.assert_array_equal(rows["next_obs"], expected_next)
    np.testing.assert_array_equal(rows["mask"], [1, 1, 1, 1, 1, 1, 1, 0])


def test_explore_follows_the_epsilon_schedule_and_exploit_is_greedy():
    algorithm = dqn_algorithm({"epsilon": [[0, 1.0], [1000, 0.0]]})
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    obs = jax.random.normal(jax.random.key(1), (4000, 4))
    greedy, extras = algorithm.exploit(module, obs, jax.random.key(2))
    assert extras == {} and greedy.dtype == jnp.int32
    np.testing.assert_array_equal(greedy, algorithm.exploit(module, obs, jax.random.key(3))[0])

    def differs(env_steps):
        # Epsilon comes from the schedule at module.env_steps: a random action differs from
        # the greedy one half of the time with two actions.
        at = module.replace(env_steps=jnp.asarray(env_steps, jnp.int32))
        actions, _ = algorithm.explore(at, obs, jax.random.key(4))
        return float((actions != greedy).mean())

    assert differs(0) == pytest.approx(0.5, abs=0.03)  # epsilon 1
    assert differs(500) == pytest.approx(0.25, abs=0.03)  # epsilon 0.5
    assert differs(1000) == 0.0  # epsilon 0: greedy


def test_constant_epsilon_is_read_from_the_state():
    algorithm = dqn_algorithm({"epsilon": 0.0})
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    obs = jax.random.normal(jax.random.key(1), (2000, 4))
    greedy, _ = algorithm.exploit(module, obs, jax.random.key(2))
    edited = module.replace(hyperparams={**module.hyperparams, "epsilon": jnp.float32(1.0)})
    np.testing.assert_array_equal(algorithm.explore(module, obs, jax.random.key(3))[0], greedy)
    random, _ = algorithm.explore(edited, obs, jax.random.key(3))
    assert float((random != greedy).mean()) == pytest.approx(0.5, abs=0.04)


def test_discrete_start_offsets_env_actions_but_trains_on_indices():
    algorithm = dqn_algorithm(action_space=gym.spaces.Discrete(3, start=-1))
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    actions, extras = algorithm.explore(module, jnp.zeros((500, 4)), jax.random.key(1))
    assert set(np.unique(actions)) == {-1, 0, 1}
    np.testing.assert_array_equal(extras["actions"], actions + 1)
    greedy, extras = algorithm.exploit(module, jnp.zeros((2, 4)), jax.random.key(1))
    np.testing.assert_array_equal(greedy, extras["actions"] - 1)


def replay_batch(size=32, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.normal(size=(size, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, size).astype(np.int32),
        "rewards": np.ones(size, np.float32),
        "next_obs": rng.normal(size=(size, 4)).astype(np.float32),
        "discounts": np.full(size, 0.99, np.float32),
        "mask": np.ones(size, np.float32),
    }


def test_target_network_is_copied_every_target_network_update_freq_env_steps():
    learner = dqn_algorithm({"target_network_update_freq": 10}).learner
    state = learner.init(jax.random.key(0))
    initial = state.modules["default_policy"].params
    batch = replay_batch()
    for env_steps, copied in [(4, False), (4, False), (4, True), (4, False), (6, True)]:
        state, _ = learner.update(state, batch, env_steps=env_steps)
        module = state.modules["default_policy"]
        if copied:
            assert tree_equal(module.extra["target_params"], module.params)
            initial = module.params
        else:
            assert tree_equal(module.extra["target_params"], initial)
            assert not tree_equal(module.extra["target_params"], module.params)
    # Copies at 12 and 22 env steps (the counter since the last copy reached 10).
    assert int(state.modules["default_policy"].extra["target_params_last_update"]) == 22


def test_tau_below_one_takes_a_polyak_step_at_each_target_update():
    learner = dqn_algorithm({"target_network_update_freq": 5, "tau": 0.25}).learner
    state = learner.init(jax.random.key(0))
    old_target = state.modules["default_policy"].extra["target_params"]
    state, _ = learner.update(state, replay_batch(), env_steps=3)  # not due
    assert tree_equal(state.modules["default_policy"].extra["target_params"], old_target)
    state, _ = learner.update(state, replay_batch(seed=1), env_steps=3)  # due at 6
    module = state.modules["default_policy"]
    expected = jax.tree.map(lambda p, t: 0.25 * p + 0.75 * t, module.params, old_target)
    chex.assert_trees_all_close(module.extra["target_params"], expected, rtol=1e-6)
    assert float(module.hyperparams["tau"]) == 0.25


def test_config_validation_and_recipe_round_trip():
    config = {
        "lr": 1e-3,
        "epsilon": [[0, 1.0], [500, 0.1]],
        "training_intensity": 64,
        "train_batch_size": 16,
        "n_step": 3,
    }
    learner = jl.algorithms.dqn(CARTPOLE.observation_space, CARTPOLE.action_space, config)
    assert learner.recipe["algorithm"] == "dqn" and learner.module_ids == ("default_policy",)
    algorithm = jl.algorithms.algorithm_for(learner)
    assert algorithm.learner is learner and algorithm.name == "dqn"
    assert algorithm.config == jl.algorithms.DQNConfig(**config)
    assert algorithm.config.epsilon == ((0, 1.0), (500, 0.1))
    assert isinstance(algorithm, jl.algorithms.OffPolicyAlgorithm)
    assert algorithm.updates_per_step == 4.0
    assert algorithm.replay_capacity == 50_000 and algorithm.train_batch_size == 16
    assert algorithm.learning_starts == 1000 and algorithm.rollout_steps(8) == 4
    default = jl.algorithms.build("dqn", CARTPOLE.observation_space, CARTPOLE.action_space)
    assert default.updates_per_step == 1.0 and default.config.grad_clip == 40.0
    deep = jl.algorithms.dqn(
        CARTPOLE.observation_space, CARTPOLE.action_space, {"head_hidden_sizes": [32]}
    )
    params = deep.init(jax.random.key(0)).modules["default_policy"].params["params"]
    assert params["advantage_hidden"]["dense_0"]["kernel"].shape == (256, 32)
    assert jl.algorithms.algorithm_for(deep).config.head_hidden_sizes == (32,)

    with pytest.raises(ValueError, match=r"Unknown DQNConfig field\(s\) \['buffer_size'\]; valid"):
        jl.algorithms.dqn(CARTPOLE.observation_space, CARTPOLE.action_space, {"buffer_size": 1})
    for bad, message in [
        ({"gamma": 1.5}, "DQNConfig.gamma must be a number in"),
        ({"tau": 0.0}, r"DQNConfig.tau must lie in \(0, 1\]"),
        ({"n_step": 0}, "DQNConfig.n_step must be a positive int"),
        ({"td_error_loss_fn": "l1"}, "td_error_loss_fn must be one of \\('huber', 'mse'\\)"),
        ({"training_intensity": -1}, "training_intensity must be a positive number or None"),
        ({"num_steps_sampled_before_learning_starts": -1}, "must be a non-negative int"),
        ({"replay_buffer_capacity": 16}, r"replay_buffer_capacity \(16\) is smaller"),
        ({"epsilon": [[5, 1.0]]}, "Malformed piecewise schedule"),
        ({"grad_clip_by": "max"}, "grad_clip_by must be one of"),
        ({"prioritized_replay": 1}, "prioritized_replay must be True or False; got 1"),
        (
            {"prioritized_replay_alpha": 1.5},
            r"prioritized_replay_alpha must be a number in \[0, 1\]",
        ),
        (
            {"prioritized_replay_beta": -0.1},
            r"prioritized_replay_beta must be a number in \[0, 1\]",
        ),
        ({"prioritized_replay_eps": -1e-6}, "prioritized_replay_eps must be a number >= 0"),
        ({"prioritized_replay_beta": "0.4"}, "prioritized_replay_beta must be a number in"),
    ]:
        with pytest.raises(ValueError, match=message):
            jl.algorithms.DQNConfig(**bad)
    with pytest.raises(TypeError, match="Discrete action spaces only"):
        jl.algorithms.dqn(CARTPOLE.observation_space, gym.spaces.Box(-1, 1, (2,)))


def test_updates_on_replay_batches_from_an_env_runner_compile_once():
    algorithm = dqn_algorithm({"train_batch_size": 16, "target_network_update_freq": 8})
    learner, module_id = algorithm.learner, algorithm.module_id
    state = learner.init(jax.random.key(0))
    runner = EnvRunner("CartPole-v1", num_envs=2, seed=0)
    rollout = runner.sample(algorithm.explore, state.modules[module_id], 16, jax.random.key(1))
    experience = rollout.experience()
    rows = jax.jit(algorithm.transitions)(experience)
    buffer = replay_buffer.replay_buffer_init(jax.tree.map(lambda x: x[0], rows), 64)
    buffer = replay_buffer.add(buffer, rows)

    chex.clear_trace_counter()  # counters are keyed by function id, which may be reused

    @jax.jit
    @chex.assert_max_traces(n=1)
    def replay_update(state, buffer, key, env_steps):
        batch = replay_buffer.sample(buffer, key, algorithm.train_batch_size)
        return learner.update_fn(state, {module_id: batch}, {module_id: env_steps})

    for i, key in enumerate(jax.random.split(jax.random.key(2), 3)):
        state, metrics = replay_update(state, buffer, key, np.int32(32 if i == 0 else 0))
        assert np.isfinite(float(metrics[module_id]["total_loss"]))
    module = state.modules[module_id]
    assert int(module.grad_steps) == 3 and int(module.env_steps) == 32
    assert not tree_equal(module.extra["target_params"], module.params)
    assert int(module.extra["target_params_last_update"]) == 32
    # The same rows through learner.update (validated, jitted once).
    state, metrics = learner.update(state, replay_buffer.sample(buffer, jax.random.key(3), 16))
    assert int(metrics["__all__"]["num_grad_steps"]) == 4


PRIORITIZED = {
    "prioritized_replay": True,
    "train_batch_size": 16,
    "hidden_sizes": (8,),
    "rollout_fragment_length": 4,
    "num_steps_sampled_before_learning_starts": 32,
    "replay_buffer_capacity": 256,
    "training_intensity": 8,
}


def prioritized_trainer(seed=3, config=None):
    learner = jl.algorithms.dqn(
        CARTPOLE.observation_space, CARTPOLE.action_space, {**PRIORITIZED, **(config or {})}
    )
    return jl.Trainer(learner, "CartPole-v1", num_envs=2, seed=seed, progress=False)


def test_prioritized_replay_is_off_by_default_and_chosen_in_one_place():
    uniform = dqn_algorithm()
    assert uniform.prioritized_replay is None
    assert "weights" not in uniform.learner.batch_layout["default_policy"]
    example = {"x": jnp.zeros(())}
    assert isinstance(off_policy.replay_init(uniform, example), replay_buffer.ReplayBuffer)
    algorithm = dqn_algorithm({"prioritized_replay": True, "prioritized_replay_alpha": 0.5})
    options = algorithm.prioritized_replay
    assert (options.alpha, options.beta, options.eps) == (0.5, 0.4, 1e-6)
    assert "weights" in algorithm.learner.batch_layout["default_policy"]
    buffer = off_policy.replay_init(algorithm, example)
    assert isinstance(buffer, prioritized_replay.PrioritizedReplayBuffer)
    assert float(buffer.alpha) == 0.5
    # The recipe carries the option, so a restored learner rebuilds the same algorithm.
    again = jl.algorithms.from_recipe(algorithm.learner.recipe)
    assert again.prioritized_replay is not None and again.config == algorithm.config


def test_prioritized_replay_updates_priorities_and_weights_the_loss():
    algorithm = dqn_algorithm({**PRIORITIZED, "target_network_update_freq": 8})
    learner, module_id = algorithm.learner, algorithm.module_id
    state = learner.init(jax.random.key(0))
    runner = EnvRunner("CartPole-v1", num_envs=2, seed=0)
    rollout = runner.sample(algorithm.explore, state.modules[module_id], 32, jax.random.key(1))
    rows = jax.jit(algorithm.transitions)(rollout.experience())
    buffer = off_policy.replay_init(algorithm, jax.tree.map(lambda x: x[0], rows))
    buffer = jax.jit(off_policy.replay_add)(buffer, rows)
    leaves = buffer.sum_tree.shape[0] // 2
    # New rows all get the max priority, 1 (and 1^alpha = 1), before any update.
    np.testing.assert_allclose(buffer.sum_tree[leaves : leaves + 64], 1.0)
    # Unequal priorities, so the importance weights differ from row to row.
    buffer = prioritized_replay.update_priorities(
        buffer, jnp.arange(64), jnp.linspace(0.1, 3.0, 64)
    )

    # The loss the update takes equals the hand-weighted TD loss of the sampled batch,
    # and the sampled rows' priorities become |TD error| + eps under the same params.
    key = jax.random.key(2)
    sampled, indices, weights = prioritized_replay.sample(buffer, key, 16, 0.4)
    module = state.modules[module_id]
    model = learner.specs[module_id].model
    td_error, _, _ = dqn_td_error(
        model.apply, module.params, module.extra["target_params"], sampled
    )
    huber = np.where(np.abs(td_error) < 1, 0.5 * td_error**2, np.abs(td_error) - 0.5)
    mask = np.asarray(sampled["mask"])
    expected_loss = (np.asarray(weights) * huber * mask).sum() / max(mask.sum(), 1.0)

    replay_updates = jax.jit(off_policy.make_replay_updates(algorithm))
    new_state, new_buffer, metrics = replay_updates(state, buffer, key[None], np.int32(64))
    np.testing.assert_allclose(metrics[module_id]["total_loss"], expected_loss, rtol=1e-5)
    last = {int(i): k for k, i in enumerate(np.asarray(indices))}  # duplicates: the last wins
    for row, k in last.items():
        priority = abs(float(td_error[k])) * mask[k] + 1e-6
        np.testing.assert_allclose(new_buffer.sum_tree[leaves + row], priority**0.6, rtol=1e-4)
    assert int(new_state.modules[module_id].grad_steps) == 1
    # Uniform weights would have given another loss: the weights are applied.
    assert not np.allclose(weights, 1.0)


def test_trainer_with_prioritized_replay_runs_and_priorities_spread():
    trainer = prioritized_trainer()
    for _ in range(8):
        stats = trainer.step()
    assert np.isfinite(stats["default_policy/total_loss"])
    buffer = trainer.engine.buffer
    assert isinstance(buffer, prioritized_replay.PrioritizedReplayBuffer)
    size, leaves = int(buffer.size), buffer.sum_tree.shape[0] // 2
    priorities = np.asarray(buffer.sum_tree[leaves : leaves + size]) ** (1 / 0.6)
    # Updated rows hold their TD errors, no longer all the max priority.
    assert len(np.unique(priorities)) > 10
    assert (priorities < float(buffer.max_priority) - 1e-6).sum() > 10


def test_trainer_checkpoint_round_trips_the_prioritized_buffer(tmp_path):
    straight = prioritized_trainer()
    expected = [straight.step() for _ in range(8)]
    interrupted, resumed = interrupted_and_resumed(prioritized_trainer, tmp_path / "ckpt", 5)
    assert isinstance(resumed.engine.buffer, prioritized_replay.PrioritizedReplayBuffer)
    assert tree_equal(resumed.engine.buffer, interrupted.engine.buffer)
    assert_same_stats(expected[5:], [resumed.step() for _ in range(3)])
    assert tree_equal(resumed.engine.buffer, straight.engine.buffer)
    # A uniform trainer refuses the prioritized buffer, saying why.
    uniform = prioritized_trainer(config={"prioritized_replay": False})
    with (
        jl.CheckpointManager(tmp_path / "ckpt") as checkpoint,
        pytest.raises(ValueError, match="saved replay buffer is prioritized"),
    ):
        uniform.restore(checkpoint)


@pytest.mark.slow
@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_dqn_learns_cartpole(prioritized):
    env = gym.make("CartPole-v1")
    config = {**DQN_CARTPOLE, "prioritized_replay": prioritized}
    learner = jl.algorithms.dqn(env.observation_space, env.action_space, config)
    trainer = jl.Trainer(learner, "CartPole-v1", num_envs=8, seed=0, progress=False)
    start = time.perf_counter()
    history = trainer.run([jl.RewardBound(450.0), jl.MaxEnvSteps(60_000)], steps_per_eval=2560)
    final = trainer.eval()
    print(
        f"DQN CartPole ({'prioritized' if prioritized else 'uniform'} replay): "
        f"{trainer.counters.env_steps} env steps, {time.perf_counter() - start:.0f} s, "
        f"eval {final['return_mean']}"
    )
    assert history[-1]["eval/return_mean"] >= 450.0
    assert final["return_mean"] >= 400.0
    # Every sampled env step reached the learner's counters (epsilon, target updates).
    assert (
        history[-1]["default_policy/num_env_steps_trained_lifetime"] == trainer.counters.env_steps
    )
