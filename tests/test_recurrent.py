"""Recurrent PPO (use_lstm): models and carries, sequences, the runner's state, checkpoints,
and learning a partially observed CartPole that feed-forward PPO does not learn."""

import time

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    MaskedJaxCartPole,
    assert_same_stats,
    assert_trees_close,
    interrupted_and_resumed,
    masked_cartpole,
    maybe_jit,
    tree_equal,
)

import jaxlearner as jl
from jaxlearner import anakin
from jaxlearner.algorithms.algorithm import RecurrentAct
from jaxlearner.algorithms.networks.recurrent import initial_carry, recurrent_actor_critic, unroll
from jaxlearner.algorithms.trajectories.sequences import (
    chunk_sequences,
    chunk_starts,
    num_sequences,
)
from jaxlearner.anakin import rollouts
from jaxlearner.training.env_runner import EnvRunner

BOX = gym.spaces.Box(-1.0, 1.0, (3,))
TWO = gym.spaces.Discrete(2)
MASKED = masked_cartpole()
SMALL = {
    "use_lstm": True,
    "lstm_cell_size": 8,
    "max_seq_len": 4,
    "hidden_sizes": (8,),
    "train_batch_size": 40,
    "minibatch_size": 16,
    "num_epochs": 2,
}


def small_ppo(**overrides):
    config = {**SMALL, **overrides}
    return jl.algorithms.build("ppo", MASKED.observation_space, MASKED.action_space, config)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("share", [True, False])
def test_model_steps_and_carry_shapes(cell, share):
    model = recurrent_actor_critic(BOX, TWO, (16,), cell=cell, cell_size=8, share_encoder=share)
    carry = initial_carry(model, 5)
    towers = ["encoder"] if share else ["actor", "critic"]
    state = ["c", "h"] if cell == "lstm" else ["h"]
    assert jax.tree.map(jnp.shape, carry) == {t: dict.fromkeys(state, (5, 8)) for t in towers}
    obs, first = jnp.ones((5, 3)), jnp.ones(5, bool)
    params = model.init(jax.random.key(0), carry, obs, first)
    new_carry, (dist_inputs, value) = model.apply(params, carry, obs, first)
    assert jax.tree.structure(new_carry) == jax.tree.structure(carry)
    assert dist_inputs.shape == (5, 2) and value.shape == (5,)
    # The state moved: a second step from it differs from one from zeros.
    again = model.apply(params, new_carry, obs, jnp.zeros(5, bool))[1][1]
    assert not np.allclose(again, value)


def test_head_hidden_sizes_put_layers_between_the_cell_and_each_head():
    # The cell's outputs lie in [-1, 1]: hidden head layers let the value reach the returns.
    algorithm = small_ppo(head_hidden_sizes=(6,), head_activation="tanh")
    state = algorithm.learner.init(jax.random.key(0))
    params = jax.tree.map(jnp.shape, state.modules["default_policy"].params["params"])
    assert params["actor"]["hidden"]["dense_0"]["kernel"] == (8, 6)  # cell_size 8 -> 6
    assert params["critic"]["head"]["value"]["kernel"] == (6, 1)
    assert algorithm.learner.specs["default_policy"].model.critic.hidden.activation == "tanh"


def test_is_first_zeroes_the_carry_where_an_episode_starts():
    model = recurrent_actor_critic(BOX, TWO, (16,), cell_size=8, share_encoder=True)
    zeros = initial_carry(model, 2)
    params = model.init(jax.random.key(0), zeros, jnp.ones((2, 3)), jnp.ones(2, bool))
    stale = jax.tree.map(lambda x: x + 0.7, zeros)
    obs, first = jnp.ones((2, 3)), jnp.array([True, False])
    carry, (_, value) = model.apply(params, stale, obs, first)
    fresh_carry, (_, fresh) = model.apply(params, zeros, obs, jnp.ones(2, bool))
    stale_carry, (_, kept) = model.apply(params, stale, obs, jnp.zeros(2, bool))
    # Environment 0 starts an episode: as from zeros; environment 1 keeps its state.
    np.testing.assert_allclose(value, [fresh[0], kept[1]], rtol=1e-6)
    leaves = map(jax.tree.leaves, (carry, fresh_carry, stale_carry))
    for got, a, b in zip(*leaves, strict=True):
        np.testing.assert_allclose(got, jnp.stack([a[0], b[1]]), rtol=1e-6)


def test_unroll_equals_stepping_by_hand(jit):
    model = recurrent_actor_critic(BOX, TWO, (16,), cell="gru", cell_size=8)
    carry = initial_carry(model, 3)
    params = model.init(jax.random.key(0), carry, jnp.ones((3, 3)), jnp.ones(3, bool))
    obs = jax.random.normal(jax.random.key(1), (3, 5, 3))
    first = jnp.zeros((3, 5), bool).at[1, 2].set(True)
    run = maybe_jit(lambda c, o, f: unroll(model.apply, params, c, o, f), jit)
    last, (dist_inputs, values) = run(carry, obs, first)
    assert dist_inputs.shape == (3, 5, 2) and values.shape == (3, 5)
    expected = []
    for t in range(5):
        carry, (_, value) = model.apply(params, carry, obs[:, t], first[:, t])
        expected.append(value)
    np.testing.assert_allclose(values, jnp.stack(expected, 1), rtol=1e-5, atol=1e-6)
    leaves = map(jax.tree.leaves, (last, carry))
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(*leaves, strict=True))
    with pytest.raises(ValueError, match=r"is_first \[B, L\] of the same B and L"):
        unroll(model.apply, params, carry, obs, first[:, :4])


def test_chunk_sequences_by_hand(jit):
    # T=5 steps of N=2 envs, x[t, n] = 10 * n + t; L=2 gives K=3 chunks per env, the last
    # padded: env 0 -> [0 1] [2 3] [4 pad], env 1 -> [10 11] [12 13] [14 pad].
    x = 10 * jnp.arange(2)[None, :] + jnp.arange(5)[:, None]
    obs = jnp.stack([x, -x], -1).astype(jnp.float32)  # [5, 2, 2]
    chunk = maybe_jit(lambda tree: chunk_sequences(tree, 2), jit)
    (got_x, got_obs), mask = chunk((x, obs))
    assert got_x.tolist() == [[0, 1], [2, 3], [4, 0], [10, 11], [12, 13], [14, 0]]
    assert got_obs.shape == (6, 2, 2) and got_obs[5].tolist() == [[14, -14], [0, 0]]
    assert mask.tolist() == [[1, 1], [1, 1], [1, 0]] * 2
    starts = maybe_jit(lambda tree: chunk_starts(tree, 2), jit)(x)
    assert starts.tolist() == [0, 2, 4, 10, 12, 14]
    assert num_sequences(5, 2, 2) == 6
    # L >= T: one padded sequence per environment.
    (whole, _), mask = chunk_sequences((x, obs), 8)
    assert whole.shape == (2, 8) and mask.sum(1).tolist() == [5, 5]


def test_chunk_sequences_refuses_mismatched_sequences():
    with pytest.raises(ValueError, match=r"disagree on their \[T, N\]"):
        chunk_sequences({"obs": jnp.zeros((6, 2, 3)), "rewards": jnp.zeros((5, 2))}, 2)
    with pytest.raises(ValueError, match=r"time-major \[T, N, \.\.\.\]"):
        chunk_sequences({"rewards": jnp.zeros(5)}, 2)
    with pytest.raises(ValueError, match="max_seq_len must be a positive int; got 0"):
        chunk_starts(jnp.zeros((5, 2)), 0)


def test_config_is_validated_before_anything_is_built():
    build = lambda **c: jl.algorithms.ppo(MASKED.observation_space, MASKED.action_space, c)
    with pytest.raises(ValueError, match=r"multiple of max_seq_len \(20\)"):
        build(use_lstm=True, minibatch_size=30, train_batch_size=600)
    with pytest.raises(ValueError, match=r"recurrent_cell must be one of \['lstm', 'gru'\]"):
        build(use_lstm=True, recurrent_cell="rnn")
    with pytest.raises(ValueError, match="lstm_cell_size must be a positive int"):
        build(use_lstm=True, lstm_cell_size=0)
    with pytest.raises(TypeError, match="use_lstm must be a bool"):
        build(use_lstm="yes")


def test_learner_refuses_mismatched_sequence_lengths_before_compiling():
    algorithm = small_ppo()
    learner = algorithm.learner
    state = learner.init(jax.random.key(0))
    layout = learner.batch_layout["default_policy"]
    assert layout["obs"].shape == (4, 2) and layout["is_first"].shape == (4,)
    assert layout["state_in"]["actor"]["h"].shape == (8,)
    batch = jax.tree.map(lambda s: np.zeros((4, *s.shape), s.dtype), layout)
    batch["obs"] = np.zeros((4, 5, 2), np.float32)  # 5 steps where the rest have 4
    with pytest.raises(ValueError, match=r"batch key \['obs'\]: expected shape \[B, 4, 2\]"):
        learner.update(state, batch)


def rollout_and_batch(algorithm, num_steps=30, seed=0):
    """A rollout of 2 masked CartPoles collected with the recurrent explore, and its batch."""
    runner = EnvRunner(masked_cartpole, num_envs=2, seed=seed)
    state = algorithm.learner.init(jax.random.key(seed))
    module = state.modules["default_policy"]
    rollout = runner.sample(algorithm.explore, module, num_steps, jax.random.key(1))
    runner.close()
    return state, module, rollout


def test_postprocess_sequences_replay_the_rollout(jit):
    algorithm = small_ppo()
    state, module, rollout = rollout_and_batch(algorithm, num_steps=30)
    experience = rollout.experience()
    batch = maybe_jit(algorithm.postprocess, jit)(module, experience)
    # 30 steps of 2 envs in sequences of 4: 8 per env, the last with 2 real steps.
    assert batch["obs"].shape == (16, 4, 2) and batch["mask"].shape == (16, 4)
    assert batch["mask"].sum(1).tolist() == ([4] * 7 + [2]) * 2
    np.testing.assert_array_equal(batch["obs"][9, :4], experience["obs"][4:8, 1])
    # Sequence n * 8 + k starts at step 4 * k of env n, from the state stored there.
    starts = lambda x: x[::4].swapaxes(0, 1).reshape(16, -1)
    assert tree_equal(batch["state_in"], jax.tree.map(starts, experience["state_in"]))
    # Episodes started inside sequences (the loss resets the state there).
    assert rollout.episode_returns and bool(batch["is_first"][:, 1:].any())
    # Unrolling the stored sequences from their stored states reproduces what the policy saw
    # when it acted, episode resets included: the loss starts at ratio 1, KL 0.
    model = algorithm.learner.specs["default_policy"].model
    _, (dist_inputs, _) = unroll(
        model.apply, module.params, batch["state_in"], batch["obs"], batch["is_first"]
    )
    real = batch["mask"] > 0
    np.testing.assert_allclose(dist_inputs[real], batch["dist_inputs"][real], atol=1e-5)
    if jit:  # the (jitted) update starts from ratio 1: its first minibatch's KL is 0
        _, metrics = algorithm.learner.update(state, {"default_policy": batch})
        assert 0 <= float(metrics["default_policy"]["mean_kl"]) < 1e-2


@pytest.mark.parametrize("mode", ["same_step", "next_step"])
def test_runner_carries_the_state_across_samples_and_resets_it_at_episode_starts(mode):
    # A recurrent policy whose carry counts the steps of the current episode.
    def act(params, carry, obs, is_first, key):
        del params
        count = jnp.where(is_first, 0, carry["count"]) + 1
        actions = jax.random.randint(key, (obs.shape[0],), 0, 2)
        return actions, {"count": count, "is_first": is_first}, {"count": count}

    policy = RecurrentAct(act, lambda n: {"count": jnp.zeros(n, jnp.int32)})
    autoreset = getattr(gym.vector.AutoresetMode, mode.upper())
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3, autoreset_mode=autoreset)
    runner = EnvRunner(envs, seed=0)
    rollouts = [runner.sample(policy, None, 40, jax.random.key(i)) for i in range(2)]
    counts = np.concatenate([np.asarray(r.extras["count"]) for r in rollouts])
    valid = np.concatenate([r.valid for r in rollouts])
    done = np.concatenate([r.terminated | r.truncated for r in rollouts])
    # The count expected, from the episode boundaries alone (across the two samples).
    expected = np.zeros_like(counts)
    since_start = np.zeros(3, int)
    for t in range(len(counts)):
        since_start = np.where(valid[t], since_start + 1, 0)  # a reset-only step starts anew
        expected[t] = since_start
        since_start = np.where(done[t], 0, since_start)
    valid_counts = np.where(valid, counts, 0)
    assert done.any() and np.array_equal(valid_counts, expected)
    # A fresh reset (as evaluate does) starts every environment's state afresh.
    runner.reset(1)
    again = runner.sample(policy, None, 1, jax.random.key(5))
    assert np.asarray(again.extras["count"]).tolist() == [[1, 1, 1]]
    runner.close()


def test_checkpoint_round_trip_of_an_lstm_learner(tmp_path):
    algorithm = small_ppo()
    state, module, rollout = rollout_and_batch(algorithm)
    batch = {"default_policy": algorithm.postprocess(module, rollout.experience())}
    state, _ = algorithm.learner.update(state, batch)
    with jl.CheckpointManager(tmp_path) as checkpoint:
        checkpoint.save(1, state, algorithm.learner)
        checkpoint.wait_until_finished()
    learner, restored = jl.restore(tmp_path)
    assert learner.recipe["config"]["use_lstm"] and tree_equal(restored, state)
    again = jl.algorithms.algorithm_for(learner)
    assert isinstance(again.explore, RecurrentAct) and again.config == algorithm.config
    # Both go on identically.
    (after, _), (restored_after, _) = (
        a.learner.update(s, batch) for a, s in ((algorithm, state), (again, restored))
    )
    assert tree_equal(after.modules, restored_after.modules)


def test_sequences_train_data_parallel_as_on_one_device():
    # Rows are sequences: on 8 devices each holds whole sequences of a minibatch of 8.
    algorithm = small_ppo(minibatch_size=32)
    state, module, rollout = rollout_and_batch(algorithm)
    batch = {"default_policy": algorithm.postprocess(module, rollout.experience())}
    one, _ = algorithm.learner.update(state, batch)
    parallel = algorithm.learner.on("all")
    assert parallel.placement.mesh.devices.size == 8
    many, _ = parallel.update(parallel.placement.put(state), batch)
    assert_trees_close(jax.device_get(many.modules), jax.device_get(one.modules), atol=1e-5)


def test_trainer_resumes_an_lstm_run_exactly_with_its_recurrent_state(tmp_path):
    algorithm = small_ppo()  # one algorithm: the three trainers share its compiled functions

    def make(seed=0):
        return jl.Trainer(algorithm, masked_cartpole, num_envs=2, seed=seed, progress=False)

    straight = make()
    expected = [straight.step() for _ in range(4)]
    interrupted, resumed = interrupted_and_resumed(make, tmp_path, steps=2)
    assert interrupted.engine.runner.get_state()["carry"] is not None
    assert_same_stats(expected[2:], [resumed.step() for _ in range(2)])
    assert tree_equal(resumed.state.modules, straight.state.modules)


def test_no_recompilation_after_the_first_iteration():
    trainer = jl.Trainer(small_ppo(), masked_cartpole, num_envs=2, seed=0, progress=False)
    trainer.step()
    compiles = []
    listen = lambda event, *args, **kwargs: compiles.append(event) if "compile" in event else None
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        for _ in range(3):
            trainer.step()
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiles == []


def test_anakin_carries_the_recurrent_state_through_rollouts_and_iterations():
    algorithm = small_ppo()
    env = MaskedJaxCartPole()
    config = anakin.AnakinConfig(num_envs=2, num_iterations=2, eval_envs=2)
    functions = anakin.make_anakin(algorithm, env, config)
    state = jax.jit(functions.init)(jax.random.key(0))
    assert state.memory.is_first.tolist() == [True, True]
    state, metrics = jax.jit(functions.run)(state)
    assert metrics["default_policy/total_loss"].shape == (2,)
    assert np.isfinite(metrics["eval/return_mean"]).all()
    # The memory came out of the last rollout: a state that has moved, episode starts marked.
    assert float(jnp.abs(state.memory.carry["actor"]["h"]).sum()) > 0
    # A rollout's sequences replay what the policy saw when it acted, resets included.
    module = state.learner.modules["default_policy"]
    rollout = rollouts.make_recurrent_rollout(algorithm, env, num_envs=2, num_steps=60)
    _, _, memory, experience, episodes = jax.jit(rollout)(
        module, state.env_states, state.obs, state.memory, jax.random.key(3)
    )
    assert int(episodes["num_episodes"]) > 0  # episode starts inside the sequences
    batch = jax.jit(algorithm.postprocess)(module, experience)
    model = algorithm.learner.specs["default_policy"].model
    _, (dist_inputs, _) = unroll(
        model.apply, module.params, batch["state_in"], batch["obs"], batch["is_first"]
    )
    real = batch["mask"] > 0
    np.testing.assert_allclose(dist_inputs[real], batch["dist_inputs"][real], atol=1e-5)
    with pytest.raises(TypeError, match="is recurrent; its rollout carries a Memory"):
        rollouts.make_rollout(algorithm, env, 2, 10)


# Masked CartPole: RL Zoo's RecurrentPPO settings for CartPoleNoVel-v1 (lr and clip annealed to
# 0, gamma 0.98, lambda 0.8, no entropy bonus, LSTM 64 after a 64-unit ReLU layer, grad norm 0.5)
# with 32 envs and 1024-step batches; plus a hidden layer in each head (without it the value head
# after the LSTM fits returns of ~50 too slowly and the policy stalls near 200-300) and no value
# loss clipping (RLlib's default of 10 zeroes the value gradient at such returns). Measured here
# with this test's code: seeds 0-4 all solved, at 102k-164k env steps (22-40 s), and scored 475
# (seed 0), 500, 500, 500, 500 on the 20 fresh episodes; feed-forward PPO stays near 45.
SOLVE_STEPS = 200_000
MASKED_CARTPOLE = {
    "lr": [[0, 1e-3], [SOLVE_STEPS, 0.0]],
    "clip_param": [[0, 0.2], [SOLVE_STEPS, 0.0]],
    "train_batch_size": 1024,
    "minibatch_size": 256,
    "num_epochs": 8,
    "gamma": 0.98,
    "lambda_": 0.8,
    "entropy_coeff": 0.0,
    "use_kl_loss": False,
    "vf_clip_param": 1e4,
    "grad_clip": 0.5,
    "hidden_sizes": (64,),
    "activation": "relu",
    "head_hidden_sizes": (64,),
    "lstm_cell_size": 64,
    "max_seq_len": 32,
}


def train_masked_cartpole(stop, use_lstm, seed=0):
    config = {**MASKED_CARTPOLE, "use_lstm": use_lstm}
    learner = jl.algorithms.ppo(MASKED.observation_space, MASKED.action_space, config)
    trainer = jl.Trainer(learner, masked_cartpole, num_envs=32, seed=seed, progress=False)
    start = time.perf_counter()
    history = trainer.run(stop, steps_per_eval=SOLVE_STEPS // 10)
    evals = [stats["eval/return_mean"] for stats in history if "eval/return_mean" in stats]
    fresh = trainer.eval(episodes=20)["return_mean"]  # the policy it stopped with, new episodes
    trainer.close()
    return trainer.counters.env_steps, evals, fresh, time.perf_counter() - start


@pytest.mark.slow
def test_lstm_ppo_solves_masked_cartpole_where_feed_forward_ppo_does_not():
    # Without its velocities CartPole is partially observed: the policy must remember. Solved:
    # two evaluations of 10 episodes in a row >= 475 (RL Zoo's bound), then 20 more episodes.
    solved = jl.RewardBound(475.0, times=2)
    steps, lstm_evals, lstm_fresh, lstm_seconds = train_masked_cartpole(
        [solved, jl.MaxEnvSteps(SOLVE_STEPS)], use_lstm=True
    )
    # Feed-forward PPO, same settings, as many env steps as the LSTM took.
    ff_steps, ff_evals, ff_fresh, ff_seconds = train_masked_cartpole(
        [jl.MaxEnvSteps(steps)], use_lstm=False
    )
    print(
        f"masked CartPole: LSTM PPO evals {lstm_evals} in {steps} env steps ({lstm_seconds:.0f} s),"
        f" then {lstm_fresh}; feed-forward PPO evals {ff_evals} in {ff_steps} ({ff_seconds:.0f} s),"
        f" then {ff_fresh}"
    )
    assert solved([{"eval/return_mean": r} for r in lstm_evals]), lstm_evals
    assert lstm_fresh >= 450.0  # not a lucky pair of evaluations
    assert ff_steps == steps and len(ff_evals) == len(lstm_evals)
    assert max(ff_evals) < 100.0 and ff_fresh < 100.0
