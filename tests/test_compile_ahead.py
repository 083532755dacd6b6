"""Compiling ahead: ``learner.compile_update`` from shapes, the rollout's shapes before any
step, and the Trainer's first update compiled on a thread (issue 24's cold start)."""

import logging
import threading
import types

import gymnasium as gym
import jax
import numpy as np
import pytest
from helpers import CompileCounter, assert_same_stats, tree_equal

import jaxlearner as jl
from jaxlearner.algorithms.replay.update_rate import first_updates, updates_due
from jaxlearner.training import compile_ahead, feeds
from jaxlearner.training.env_runner import EnvRunner
from jaxlearner.training.rollout import experience_shapes

CARTPOLE = gym.make("CartPole-v1")
PENDULUM = gym.make("Pendulum-v1")
SMALL = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 2, "hidden_sizes": (8,)}


def shapes_of(tree):
    """Each leaf's shape, dtype and weak type, as JAX sees an argument."""
    return jax.tree.map(
        lambda x: (x.shape, x.dtype, x.weak_type), jax.eval_shape(lambda t: t, tree)
    )


@pytest.mark.parametrize(
    "env_id, config",
    [
        ("CartPole-v1", {}),
        ("Pendulum-v1", {"norm_obs": True, "norm_reward": True, "num_envs_per_env_runner": 3}),
        ("CartPole-v1", {"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 4}),
    ],
    ids=["discrete", "box-normalized", "recurrent"],
)
def test_experience_shapes_are_those_of_a_sampled_rollout(env_id, config):
    env = gym.make(env_id)
    algorithm = jl.algorithms.build(
        "ppo", env.observation_space, env.action_space, {**SMALL, **config}
    )
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    runner = EnvRunner(env_id, num_envs=3, seed=1)
    shapes = experience_shapes(algorithm.explore, module, runner.observations, 5)
    rollout = runner.sample(algorithm.explore, module, 5, jax.random.key(2))
    assert shapes_of(shapes) == shapes_of(rollout.experience())
    # From the module's shapes alone, as the Trainer's thread has them.
    module_shapes = jax.eval_shape(lambda m: m, module)
    again = experience_shapes(algorithm.explore, module_shapes, runner.observations, 5)
    assert shapes_of(again) == shapes_of(shapes)


@pytest.mark.parametrize("devices", [None, "all"])
def test_an_update_compiled_from_shapes_is_the_one_update_runs(devices):
    learner = jl.algorithms.ppo(CARTPOLE.observation_space, CARTPOLE.action_space, SMALL)
    learner = learner.on(devices)
    rng = np.random.default_rng(0)

    def column(spec):  # 64 rows of the layout's trailing shape and dtype
        shape = (64, *spec.shape)
        if spec.dtype == np.bool_:
            return np.ones(shape, bool)
        if np.issubdtype(spec.dtype, np.integer):
            return rng.integers(0, 2, shape).astype(spec.dtype)
        return rng.normal(size=shape).astype(spec.dtype)

    batch = jax.tree.map(column, learner.batch_layout["default_policy"])
    state_shapes = jax.eval_shape(learner.init, jax.random.key(0))
    batch_shapes = jax.eval_shape(lambda b: b, batch)
    with CompileCounter() as ahead:
        compiled = learner.compile_update(state_shapes, batch_shapes, env_steps=64)
    assert len(ahead.of("update")) == 1 and isinstance(compiled, jax.stages.Compiled)
    state = learner.init(jax.random.key(0))
    with CompileCounter() as running:
        for _ in range(2):
            state, metrics = learner.update(state, batch, env_steps=64)
        jax.block_until_ready(metrics)
    assert running.of("update") == []
    # The same program as compiling on first use: the same state, bit for bit.
    fresh = jl.algorithms.ppo(CARTPOLE.observation_space, CARTPOLE.action_space, SMALL)
    fresh_state = fresh.on(devices).init(jax.random.key(0))
    for _ in range(2):
        fresh_state, _ = fresh.on(devices).update(fresh_state, batch, env_steps=64)
    assert tree_equal(learner.placement.get(state), fresh.on(devices).placement.get(fresh_state))


def test_compile_update_checks_as_update_does_and_refuses_an_eager_learner():
    learner = jl.algorithms.ppo(CARTPOLE.observation_space, CARTPOLE.action_space, SMALL)
    state = jax.eval_shape(learner.init, jax.random.key(0))
    wrong = {"obs": jax.ShapeDtypeStruct((64, 5), np.float32)}
    with CompileCounter() as compiled:
        with pytest.raises((KeyError, ValueError)) as update_error:
            learner.update(learner.init(jax.random.key(0)), {"obs": np.zeros((64, 5), np.float32)})
        with pytest.raises(type(update_error.value)) as ahead_error:
            learner.compile_update(state, wrong)
    assert str(ahead_error.value) == str(update_error.value)
    assert compiled.of("update") == []
    eager = learner.replace(jit=False)
    with pytest.raises(ValueError, match=r"runs eagerly \(jit=False\); there is nothing"):
        eager.compile_update(state, wrong)


NORMALIZED = {"norm_obs": True, "norm_reward": True, "num_envs_per_env_runner": 2}


def small_trainer(env_id="CartPole-v1", config=None, **kwargs):
    env = gym.make(env_id)
    learner = jl.algorithms.ppo(
        env.observation_space, env.action_space, {**SMALL, **(config or {})}
    )
    return jl.Trainer(learner, env_id, num_envs=2, seed=3, progress=False, **kwargs)


@pytest.mark.parametrize(
    "env_id, config",
    [("CartPole-v1", {}), ("Pendulum-v1", NORMALIZED)],
    ids=["plain", "normalized"],
)
def test_the_trainers_first_update_is_compiled_once_on_its_thread(env_id, config):
    with CompileCounter() as compiled:
        trainer = small_trainer(env_id, config)
        stats = [trainer.step() for _ in range(3)]
        trainer.close()
    updates = compiled.of("update")
    assert updates == [("jit(update)", "jaxlearner-compile-ahead")]
    assert [name for name, thread in compiled.of("postprocess")] == ["jit(postprocess)"]
    assert stats[-1]["iteration"] == 3
    with CompileCounter() as compiled:
        trainer = small_trainer(env_id, config, compile_ahead=False)
        trainer.step()
        trainer.close()
    assert compiled.of("update") == [("jit(update)", "MainThread")]


def test_an_eager_learner_starts_no_thread(monkeypatch):
    started = []
    made = compile_ahead.CompileAhead.__init__

    def recorded(self, compile_fn):
        started.append(compile_fn)
        made(self, compile_fn)

    monkeypatch.setattr(compile_ahead.CompileAhead, "__init__", recorded)
    small_trainer().close()
    assert len(started) == 1
    eager = jl.algorithms.ppo(CARTPOLE.observation_space, CARTPOLE.action_space, SMALL)
    eager = eager.replace(jit=False)
    jl.Trainer(eager, "CartPole-v1", num_envs=2, progress=False).close()
    assert len(started) == 1


WARMUP = 64  # env steps before the first update: 8 iterations of 2 envs x 4 steps


def small_replay_trainer(algo="dqn", devices=None, **kwargs):
    env = gym.make("CartPole-v1" if algo == "dqn" else "Pendulum-v1")
    config = {"hidden_sizes": (8,), "num_steps_sampled_before_learning_starts": WARMUP}
    if algo == "sac":
        config.update(norm_obs=True, warmup_actions="uniform")
    algorithm = jl.algorithms.build(algo, env.observation_space, env.action_space, config)
    return jl.Trainer(
        algorithm, env.spec.id, num_envs=2, seed=3, progress=False, devices=devices, **kwargs
    )


@pytest.mark.parametrize(
    "algo, devices", [("dqn", None), ("sac", None), ("dqn", "all")], ids=["dqn", "sac", "dqn-8"]
)
def test_an_off_policy_trainers_first_update_is_compiled_once_on_its_thread(algo, devices):
    with CompileCounter() as compiled:
        trainer = small_replay_trainer(algo, devices)
        stats = [trainer.step() for _ in range(12)]
        trainer.close()
    assert compiled.of("add_and_update") == [("jit(add_and_update)", "jaxlearner-compile-ahead")]
    assert next(s["env_steps"] for s in stats if "__all__/num_grad_steps" in s) == WARMUP
    with CompileCounter() as compiled:
        trainer = small_replay_trainer(algo, devices, compile_ahead=False)
        [trainer.step() for _ in range(8)]
        trainer.close()
    assert compiled.of("add_and_update") == [("jit(add_and_update)", "MainThread")]


def test_the_warm_up_does_not_wait_for_the_compilation(monkeypatch):
    release, finished = threading.Event(), threading.Event()
    compile_first = feeds.ReplayFeed.compile_ahead

    def held(self, *args):
        release.wait(timeout=20)
        compile_first(self, *args)
        finished.set()

    monkeypatch.setattr(feeds.ReplayFeed, "compile_ahead", held)
    trainer = small_replay_trainer()
    warmup = [trainer.step() for _ in range(WARMUP // 8 - 1)]
    assert not finished.is_set()  # seven rollouts collected while the thread was held
    assert not any("__all__/num_grad_steps" in s for s in warmup)
    release.set()
    first = trainer.step()  # the first update waits for the thread, then runs its program
    assert finished.is_set() and first["__all__/num_grad_steps"] > 0
    trainer.close()


def test_compiling_ahead_changes_no_replay_result():
    runs = []
    for ahead in (True, False):
        trainer = small_replay_trainer("sac", compile_ahead=ahead)
        stats = [trainer.step() for _ in range(10)]
        runs.append((trainer.state, trainer.engine.buffer, stats))
        trainer.close()
    (state, buffer, stats), (other_state, other_buffer, other_stats) = runs
    assert tree_equal(state, other_state) and tree_equal(buffer, other_buffer)
    assert_same_stats(stats, other_stats)


@pytest.mark.parametrize(
    "learning_starts, updates_per_step, steps, expected",
    [(1000, 0.5, 256, 128), (0, 1.0, 1, 1), (10, 0.25, 1, 1), (5, 0.3, 4, 1), (0, 1e-9, 1, None)],
)
def test_first_updates_is_the_count_of_the_first_iteration_that_updates(
    learning_starts, updates_per_step, steps, expected
):
    algorithm = types.SimpleNamespace(
        learning_starts=learning_starts, updates_per_step=updates_per_step
    )
    assert first_updates(algorithm, steps) == expected
    before, carried = 0, 0.0  # the feed's rule, iteration by iteration
    for _ in range(10_000):
        count, carried = updates_due(algorithm, before, steps, carried)
        if count:
            break
        before += steps
    assert (count or None) == expected


def test_compiling_ahead_changes_no_result():
    runs = []
    for ahead in (True, False):
        trainer = small_trainer("Pendulum-v1", NORMALIZED, compile_ahead=ahead)
        stats = [trainer.step() for _ in range(2)]
        runs.append((trainer.state, stats))
        trainer.close()
    (state, stats), (other_state, other_stats) = runs
    assert tree_equal(state, other_state)
    assert_same_stats(stats, other_stats)


def test_a_failure_to_compile_ahead_is_logged_and_training_goes_on(monkeypatch, caplog):
    def refuse(*args, **kwargs):
        raise RuntimeError("cannot trace this policy on shapes")

    monkeypatch.setattr(jl.Learner, "compile_update", refuse)
    debug = caplog.at_level(logging.DEBUG, logger="jaxlearner.training.compile_ahead")
    with debug, CompileCounter() as compiled:
        trainer = small_trainer()
        trainer.step()
        trainer.close()
    assert "Compiling the first update ahead failed" in caplog.text
    assert "cannot trace this policy on shapes" in caplog.text
    assert compiled.of("update") == [("jit(update)", "MainThread")]
