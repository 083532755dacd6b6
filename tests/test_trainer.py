"""Trainer: step / eval / run, stop conditions, writers, devices, exact resume, PPO learning."""

import importlib
import time

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import TIMING, assert_same_stats, interrupted_and_resumed, tree_equal

import jaxlearner as jl
from jaxlearner.algorithms.replay.off_policy import (
    make_replay_updates,
    replay_add,
    replay_init_for,
)
from jaxlearner.algorithms.replay.update_rate import updates_due
from jaxlearner.training.env_runner import EnvRunner
from jaxlearner.training.feeds import make_feed
from jaxlearner.training.outputs.loggers import JSONLinesWriter, read_json_lines

CARTPOLE = gym.make("CartPole-v1")
SMALL = {"train_batch_size": 256, "minibatch_size": 64, "num_epochs": 2, "hidden_sizes": (16,)}


def small_trainer(seed=7, **kwargs):
    learner = jl.algorithms.ppo(CARTPOLE.observation_space, CARTPOLE.action_space, SMALL)
    return jl.Trainer(learner, "CartPole-v1", num_envs=4, seed=seed, **kwargs)


def test_step_returns_flat_stats_with_lifetime_counters():
    trainer = small_trainer()
    first = trainer.step()
    second = trainer.step()
    assert second["iteration"] == 2 and second["env_steps"] == 512
    assert first["env_steps"] == 256  # 256 = 4 envs x 64 steps per iteration
    for key in (
        "episodes",
        "num_episodes",
        "episode_return_mean",
        "episode_len_mean",
        "default_policy/total_loss",
        "default_policy/learning_rate/default",
        "__all__/num_grad_steps",
        *TIMING,
    ):
        assert key in second, key
    assert all(isinstance(v, float) for v in second.values())
    assert second["default_policy/num_env_steps_trained_lifetime"] == 512
    assert second["default_policy/num_env_steps_trained"] == 256
    assert trainer.history == [first, second]


def test_eval_reports_returns_and_passes_env_config():
    trainer = jl.Trainer(
        jl.algorithms.ppo(
            gym.make("Pendulum-v1").observation_space, gym.make("Pendulum-v1").action_space, SMALL
        ),
        "Pendulum-v1",
        num_envs=2,
        eval_episodes=3,
    )
    results = trainer.eval(env_config={"max_episode_steps": 20})
    assert set(results) == {"return_mean", "return_min", "return_max", "length_mean", "episodes"}
    assert results["length_mean"] == 20 and results["episodes"] == 3
    assert results["return_min"] <= results["return_mean"] <= results["return_max"] < 0
    stochastic = trainer.eval(env_config={"max_episode_steps": 20}, deterministic=False)
    assert stochastic["episodes"] == 3


def test_run_stops_on_its_conditions_and_evaluates():
    trainer = small_trainer()
    ran = trainer.run([jl.MaxIterations(3)], steps_per_eval=500)
    assert [s["iteration"] for s in ran] == [1.0, 2.0, 3.0]
    assert "eval/return_mean" in ran[1] and "eval/return_mean" not in ran[0]  # 512 >= 500
    more = trainer.run(jl.MaxEnvSteps(1280))
    assert more[-1]["env_steps"] == 1280 and len(more) == 2
    # A reward bound any return reaches stops after the first evaluation.
    bounded = small_trainer().run([jl.RewardBound(1.0)], steps_per_eval=256, max_iterations=10)
    assert len(bounded) == 1
    # No stop condition: until request_stop (rl8's trainer runs until killed).
    endless = trainer.run([], on_iteration=lambda stats: trainer.request_stop())
    assert len(endless) == 1 and trainer.stop_requested


def test_writers_get_every_iteration(tmp_path):
    writer = JSONLinesWriter(tmp_path / "metrics.jsonl")
    trainer = small_trainer(writers=[writer])
    trainer.run([jl.MaxIterations(2)], steps_per_eval=512)
    trainer.close()
    records = read_json_lines(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records if "episode_return_mean" in r] == [1, 2]
    assert [r["step"] for r in records if "eval/return_mean" in r] == [2]  # written once


def test_a_direct_eval_is_written_as_runs_are(tmp_path):
    writer = JSONLinesWriter(tmp_path / "metrics.jsonl")
    trainer = small_trainer(writers=[writer])
    trainer.step()
    results = trainer.eval(episodes=2)
    trainer.close()
    (row,) = [r for r in read_json_lines(tmp_path / "metrics.jsonl") if "eval/return_mean" in r]
    assert row["step"] == 1 and row["eval/return_mean"] == results["return_mean"]
    assert row["env_steps"] == 256 and row["eval/episodes"] == 2


def test_spaces_must_match_the_learner():
    pendulum = gym.make("Pendulum-v1")
    learner = jl.algorithms.ppo(pendulum.observation_space, pendulum.action_space, SMALL)
    with pytest.raises(ValueError, match="observation_space .* differs from the one the learner"):
        jl.Trainer(learner, "CartPole-v1")
    with pytest.raises(ValueError, match="no built-in algorithm recipe"):
        import flax.linen as nn
        import optax
        from helpers import mse_loss

        jl.Trainer(
            jl.Learner({"m": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))}), "CartPole-v1"
        )


TINY = {
    "ppo": {**SMALL, "hidden_sizes": (8,)},
    "dqn": {"hidden_sizes": (8,), "num_steps_sampled_before_learning_starts": 0},
    "sac": {
        "hidden_sizes": (8,),
        "num_steps_sampled_before_learning_starts": 0,
        "replay_buffer_capacity": 1000,
        "train_batch_size": 16,
    },
}
MODEL_BUILDERS = {"ppo": "actor_critic", "dqn": "q_network", "sac": "sac_networks"}


@pytest.mark.parametrize(
    "name, env_id", [("ppo", "CartPole-v1"), ("dqn", "CartPole-v1"), ("sac", "Pendulum-v1")]
)
def test_a_trainer_of_a_learner_builds_no_second_model_or_learner(monkeypatch, name, env_id):
    env = gym.make(env_id)
    learner = getattr(jl.algorithms, name)(env.observation_space, env.action_space, TINY[name])
    module = importlib.import_module(f"jaxlearner.algorithms.{name}")

    def no_model(*args, **kwargs):
        raise AssertionError(f"{name}'s model was built again")

    monkeypatch.setattr(module, MODEL_BUILDERS[name], no_model)
    constructions = []
    learner_init = jl.Learner.__init__

    def counting_init(self, *args, **kwargs):
        constructions.append(args)
        learner_init(self, *args, **kwargs)

    monkeypatch.setattr(jl.Learner, "__init__", counting_init)
    trainer = jl.Trainer(learner, env_id, num_envs=2, progress=False)
    assert trainer.learner is learner and trainer.engine.algorithm.config.hidden_sizes == (8,)
    stats = trainer.step()  # the act and postprocess (or transitions) functions work
    assert stats["env_steps"] > 0 and constructions == []
    with pytest.raises(AssertionError, match="built again"):
        getattr(jl.algorithms, name)(env.observation_space, env.action_space, TINY[name])


def test_resume_continues_exactly(tmp_path):
    straight = small_trainer()
    expected = [straight.step() for _ in range(5)]
    interrupted = small_trainer()
    for _ in range(3):
        interrupted.step()
    interrupted.history[0]["eval/return_mean"] = float("nan")  # JSON has no NaN
    with jl.CheckpointManager(tmp_path / "ckpt") as checkpoint:
        assert interrupted.save(checkpoint) == 3
        checkpoint.wait_until_finished()
    resumed = small_trainer(seed=99)  # a different seed: everything must come from the checkpoint
    with jl.CheckpointManager(tmp_path / "ckpt") as checkpoint:
        resumed.restore(checkpoint)
    assert resumed.counters.iteration == 3 and resumed.counters.env_steps == 768
    # The history comes back too: stop conditions read it.
    assert np.isnan(resumed.history[0].pop("eval/return_mean"))
    del interrupted.history[0]["eval/return_mean"]
    assert resumed.history == interrupted.history
    assert_same_stats(expected[3:], [resumed.step() for _ in range(2)])
    assert tree_equal(resumed.state.modules, straight.state.modules)


def test_restoring_a_plain_learner_checkpoint_into_a_trainer_is_refused(tmp_path):
    trainer = small_trainer()
    with jl.CheckpointManager(tmp_path) as checkpoint:
        checkpoint.save(1, trainer.state, trainer.learner)
        checkpoint.wait_until_finished()
        with pytest.raises(ValueError, match="no trainer state"):
            trainer.restore(checkpoint)


def test_training_on_all_devices():
    trainer = small_trainer(devices="all")
    assert trainer.learner.placement.num_devices == 8
    assert trainer.state.key.sharding == trainer.learner.placement.state_sharding
    stats = trainer.step()
    single = small_trainer().step()
    # Same seed and data: the group's update equals the single-device one to float tolerance.
    np.testing.assert_allclose(
        stats["default_policy/total_loss"], single["default_policy/total_loss"], rtol=1e-4
    )
    with pytest.raises(ValueError, match="devices must be None"):
        small_trainer(devices="gpus")


@pytest.mark.slow
def test_ppo_learns_cartpole():
    config = {
        "lr": 3e-4,
        "train_batch_size": 2048,
        "minibatch_size": 256,
        "num_epochs": 10,
        "hidden_sizes": (64, 64),
        "lambda_": 0.95,
        "clip_param": 0.2,
        "use_kl_loss": False,
        "grad_clip": 0.5,
    }
    learner = jl.algorithms.ppo(CARTPOLE.observation_space, CARTPOLE.action_space, config)
    trainer = jl.Trainer(learner, "CartPole-v1", num_envs=8, eval_episodes=10, seed=0)
    start = time.perf_counter()
    # Stop above the threshold, so a fresh evaluation lands over it with some margin.
    history = trainer.run([jl.RewardBound(495.0)], steps_per_eval=10_240, max_iterations=150)
    seconds = time.perf_counter() - start
    final = trainer.eval()
    print(
        f"PPO CartPole: {trainer.counters.env_steps} env steps, {seconds:.0f} s, "
        f"eval {final['return_mean']}"
    )
    assert history[-1]["eval/return_mean"] >= 495.0
    assert final["return_mean"] >= 475.0


def test_off_policy_resume_continues_exactly(tmp_path):
    env = gym.make("CartPole-v1")
    config = {
        "train_batch_size": 16,
        "hidden_sizes": (8,),
        "rollout_fragment_length": 4,
        "num_steps_sampled_before_learning_starts": 32,
        "replay_buffer_capacity": 256,
        "training_intensity": 8,
    }

    def make(seed=3):
        learner = jl.algorithms.dqn(env.observation_space, env.action_space, config)
        return jl.Trainer(learner, "CartPole-v1", num_envs=2, seed=seed, progress=False)

    straight = make()
    expected = [straight.step() for _ in range(8)]
    interrupted, resumed = interrupted_and_resumed(make, tmp_path / "ckpt", steps=5)
    assert tree_equal(resumed.engine.buffer, interrupted.engine.buffer)
    assert_same_stats(expected[5:], [resumed.step() for _ in range(3)])
    assert tree_equal(resumed.state.modules, straight.state.modules)


def test_iterations_per_step_runs_the_iterations_of_steps_of_one():
    """An off-policy run in steps of 6 iterations trains exactly as one in steps of one
    (same keys, rollouts, buffer and updates); each of its rows counts all 6, with the last
    update's metrics."""
    env = gym.make("CartPole-v1")
    config = {
        "train_batch_size": 16,
        "hidden_sizes": (8,),
        "num_steps_sampled_before_learning_starts": 16,
        "replay_buffer_capacity": 256,
    }

    def make(**kwargs):
        learner = jl.algorithms.dqn(env.observation_space, env.action_space, config)
        return jl.Trainer(learner, "CartPole-v1", num_envs=2, seed=5, progress=False, **kwargs)

    ones, sixes = make(), make(iterations_per_step=6)
    assert sixes.env_steps_per_iteration == 6 * ones.env_steps_per_iteration
    single = [ones.step() for _ in range(18)]
    rows = [sixes.step() for _ in range(3)]
    assert tree_equal(sixes.state, ones.state)
    assert tree_equal(sixes.engine.buffer, ones.engine.buffer)
    assert [row["iteration"] for row in rows] == [6, 12, 18]
    assert [row["env_steps"] for row in rows] == [row["env_steps"] for row in single[5::6]]
    assert rows[-1]["episodes"] == single[-1]["episodes"]
    assert rows[1]["num_episodes"] == sum(row["num_episodes"] for row in single[6:12])
    for name in ("default_policy/total_loss", "episode_return_mean"):
        assert rows[-1][name] == single[-1][name]
    with pytest.raises(ValueError, match="iterations_per_step must be a positive int; got 0"):
        make(iterations_per_step=0)


# Two programs compiled apart (the feed's and the by-hand one) round alike at XLA's default;
# at the other tests' -O0 the critic's gradient norm came out 1, then (with the gradient
# postprocess stage in the update) 2 ulp apart: 0.6703436 vs 0.67034346.
@pytest.mark.full_optimization
def test_a_replay_feed_reports_its_update_metrics_exactly_on_the_host():
    """The feed fetches the metrics as one array per dtype (core/packing.py): names, dtypes
    and values are those of the replay updates run by hand on the same inputs. Integers are
    compared exactly and floats to the last place: the two are separate programs, and at the
    tests' -O0 (tests/conftest.py) XLA may round a reduction of one differently (the critic's
    gradient norm, one ulp, once the nonfinite check read all params at once); at XLA's default
    they are bit-equal."""
    env = gym.make("Pendulum-v1")
    config = {
        "train_batch_size": 8,
        "hidden_sizes": (8,),
        "rollout_fragment_length": 4,
        "num_steps_sampled_before_learning_starts": 0,
        "training_intensity": 2,
    }
    algorithm = jl.algorithms.algorithm_for(
        jl.algorithms.sac(env.observation_space, env.action_space, config)
    )
    learner = algorithm.learner
    state = learner.init(jax.random.key(0))
    module = state.modules[algorithm.module_id]
    rollout = EnvRunner("Pendulum-v1", num_envs=2, seed=0).sample(
        algorithm.explore, module, 4, jax.random.key(1)
    )
    experience, key = rollout.experience(), jax.random.key(2)
    count, _ = updates_due(algorithm, 0, rollout.env_steps, 0.0)
    buffer = replay_init_for(algorithm, experience)

    @jax.jit
    def by_hand(state, buffer):
        buffer = replay_add(buffer, algorithm.transitions(experience))
        keys = jax.random.split(key, count)
        return make_replay_updates(algorithm)(state, buffer, keys, np.int32(rollout.env_steps))

    _, _, expected = by_hand(jax.tree.map(jnp.copy, state), buffer)
    _, got = make_feed(algorithm).learn(state, module, experience, rollout.env_steps, 0, key)
    assert count == 2  # training_intensity 2 / batch 8 = 0.25 updates per env step, x 8 steps
    assert jax.tree.structure(got) == jax.tree.structure(expected)
    for mine, theirs in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        assert isinstance(mine, np.ndarray) and mine.dtype == theirs.dtype
        if np.issubdtype(mine.dtype, np.floating):
            np.testing.assert_array_max_ulp(mine, np.asarray(theirs), maxulp=1)
        else:
            np.testing.assert_array_equal(mine, np.asarray(theirs))


def test_request_stop_ends_run_after_the_iteration_in_flight():
    trainer = small_trainer()
    stop_at_two = lambda stats: trainer.request_stop() if stats["iteration"] == 2 else None
    ran = trainer.run(jl.MaxEnvSteps(10_000), on_iteration=stop_at_two)
    assert [s["iteration"] for s in ran] == [1, 2] and trainer.stop_requested
    again = trainer.run(jl.MaxEnvSteps(10_000), max_iterations=1)  # a new run starts afresh
    assert [s["iteration"] for s in again] == [3] and not trainer.stop_requested


def test_the_progress_bar_shows_the_run_budget_and_stop_rule(capsys):
    trainer = small_trainer(progress=True)
    trainer.run([jl.RewardBound(475.0, times=2), jl.MaxEnvSteps(512)])
    shown = capsys.readouterr().err
    assert "stops at 2 evals >= 475 in a row or 512 steps" in shown
    assert "512/512" in shown
