"""Driver, what every trainer is: step, record, stop request, run, eval, save, restore, close."""

import dataclasses
import math

import flax.linen as nn
import gymnasium as gym
import jax
import numpy as np
import optax
import pytest
from helpers import ListWriter, mse_loss, regression_batch

import jaxlearner as jl
from jaxlearner.training.driver import Driver, Iteration, Saved, check_eval_episodes
from jaxlearner.training.offline.datasets import record_episodes
from jaxlearner.training.trainer_counters import TrainerCounters


@dataclasses.dataclass
class Counters:
    iteration: int = 0
    env_steps: int = 0
    time_total_s: float = 0.0
    per_policy: dict[str, int] = dataclasses.field(default_factory=dict)


class CountingEngine:
    """An engine of 100 env steps per iteration; its state is an int, its own state a seed."""

    owner, counters_key, env_steps_per_iteration = "CountingEngine", "counting_engine", 100

    def __init__(self, learner=None, refuse=None):
        self.learner, self.evaluations, self.seed, self.closed = learner, 0, 3, False
        self._refuse = refuse

    def iterate(self, state, counters, bonus=0):
        counters.per_policy["a"] = counters.per_policy.get("a", 0) + 1
        return state + 1 + bonus, Iteration(100, {"episodes": 1.0}, {"loss": 0.5})

    def evaluate(self, state, counters):
        self.evaluations += 1
        return {"return_mean": 1.0}

    def run_options(self, bonus=None):
        return ({} if bonus is None else {"bonus": bonus}), {}

    def saved(self, state):
        learner_state = self.learner.init(jax.random.key(0))
        return Saved(learner_state, {"seed": self.seed}, {"key": np.arange(2, dtype=np.uint32)})

    def restored(self, state, run):
        if self._refuse is not None:
            raise ValueError(self._refuse(run.extra))
        self.seed, self.arrays = run.extra["seed"], run.arrays
        return 0

    def close(self):
        self.closed = True


def driver(writers=(), **engine):
    return Driver(CountingEngine(**engine), 0, Counters(), writers=writers, progress=False)


def learner_and_state():
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))
    learner = jl.Learner({"default_policy": spec}, sample_batch=regression_batch())
    return learner, learner.init(jax.random.key(0))


def test_step_counts_the_iteration_and_records_the_engines_row():
    writer = ListWriter()
    trainer = driver(writers=[writer])
    stats = trainer.step()
    assert trainer.state == 1 and trainer.counters.iteration == 1
    assert trainer.counters.env_steps == 100 and trainer.counters.per_policy == {"a": 1}
    # The timing stats around the engine's counts, then the engine's stats.
    assert list(stats) == [
        "iteration",
        "env_steps",
        "episodes",
        "env_steps_per_s",
        "time_this_iter_s",
        "time_compile_s",
        "time_total_s",
        "loss",
    ]
    assert trainer.history == [stats] and trainer.history[0] is stats  # run joins evaluations
    assert writer.rows == [(1, stats)]
    assert trainer.step(bonus=5)["iteration"] == 2.0 and trainer.state == 7  # engine options


def test_run_clears_a_stop_request_and_honours_one_made_during_the_run():
    writer = ListWriter()
    trainer = driver(writers=[writer])
    trainer.request_stop()
    assert trainer.stop_requested

    def stop_at_two(stats):
        if stats["iteration"] == 2:
            trainer.request_stop()

    ran = trainer.run(jl.MaxEnvSteps(10_000), steps_per_eval=200, on_iteration=stop_at_two)
    assert [s["iteration"] for s in ran] == [1.0, 2.0] and trainer.stop_requested
    assert ran[1]["eval/return_mean"] == 1.0 and trainer.engine.evaluations == 1  # at 200 steps
    assert trainer.history == ran
    # The writers get each iteration's stats and the evaluation.
    assert [step for step, _ in writer.rows] == [1, 2, 2]
    more = trainer.run(max_iterations=1, bonus=10)  # the engine's own option, every step
    assert [s["iteration"] for s in more] == [3.0] and not trainer.stop_requested
    assert trainer.state == 13

    # With no stop condition it runs until a stop request (rl8 runs until killed).
    def stop_at_five(stats):
        if stats["iteration"] == 5:
            trainer.request_stop()

    endless = trainer.run(on_iteration=stop_at_five)
    assert [s["iteration"] for s in endless] == [4.0, 5.0]
    with pytest.raises(TypeError, match="unexpected keyword argument 'gravity'"):
        trainer.run(max_iterations=1, gravity=9.0)


def test_a_direct_evaluation_is_written_too():
    writer = ListWriter()
    trainer = driver(writers=[writer])
    trainer.step()
    trainer.eval()
    assert writer.rows[-1] == (1, {"eval/return_mean": 1.0, "env_steps": 100.0, "iteration": 1.0})


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_a_run_without_stop_conditions_ends_on_a_signal_and_restores_the_handlers(signal_name):
    import os
    import signal

    number = getattr(signal, signal_name)
    before = signal.getsignal(number)
    trainer = driver()

    def signal_at_three(stats):
        if stats["iteration"] == 3:
            os.kill(os.getpid(), number)
        assert stats["iteration"] < 10, "the signal did not stop the run"

    ran = trainer.run(on_iteration=signal_at_three)
    assert [s["iteration"] for s in ran] == [1.0, 2.0, 3.0] and trainer.stop_requested
    assert signal.getsignal(number) is before


def test_save_and_restore_counters_history_and_the_engines_own_state(tmp_path):
    learner, state = learner_and_state()
    trainer = driver(learner=learner)
    trainer.counters.iteration, trainer.counters.per_policy = 2, {"a": 5}
    trainer.record({"iteration": 1.0, "eval/return_mean": float("nan")})
    trainer.record({"iteration": 2.0})
    with jl.CheckpointManager(tmp_path, async_save=False) as checkpoint:
        step = trainer.save(checkpoint)
        assert step == 2 and checkpoint.metadata(2)["metrics"] == {"iteration": 2.0}
        extra, arrays = checkpoint.restore_extra(2)
        # Counters under their key first, then the history (no NaN in JSON), then the engine's.
        assert list(extra) == ["counting_engine", "history", "seed"]
        assert extra["counting_engine"] == {
            "iteration": 2,
            "env_steps": 0,
            "time_total_s": 0.0,
            "per_policy": {"a": 5},
        }
        assert extra["history"] == {"keys": ["iteration", "eval/return_mean"], "length": 2}
        np.testing.assert_array_equal(arrays["history"]["present"], [[1, 1], [1, 0]])
        np.testing.assert_array_equal(arrays["key"], [0, 1])

        fresh = driver(learner=learner)
        fresh.engine.seed, fresh.state = 0, 9
        fresh.restore(checkpoint)
    assert fresh.counters == trainer.counters and isinstance(fresh.counters, Counters)
    assert np.isnan(fresh.history[0].pop("eval/return_mean"))
    assert fresh.history == [{"iteration": 1.0}, {"iteration": 2.0}]
    assert fresh.engine.seed == 3 and fresh.state == 0  # the state the engine went on from
    assert sorted(fresh.engine.arrays) == ["key"]  # the engine's own arrays, as it saved them


def test_a_history_whose_arrays_do_not_match_its_length_is_a_damaged_step():
    from jaxlearner.training.driver import _saved_history

    saved = {"keys": ["iteration"], "length": 3}
    columns = {"values": np.zeros((2, 1)), "present": np.ones((2, 1), bool)}
    with pytest.raises(jl.CheckpointCorruptedError, match=r"3 iterations of 1 stats.*\(2, 1\)"):
        _saved_history(saved, columns)
    with pytest.raises(jl.CheckpointCorruptedError, match="its arrays hold none"):
        _saved_history(saved, None)
    assert _saved_history({"keys": [], "length": 0}, None) == []
    assert math.isnan(_saved_history([{"iteration": "nan"}], None)[0]["iteration"])  # old list


def test_restore_refuses_a_step_without_the_counters_or_one_the_engine_refuses(tmp_path):
    learner, state = learner_and_state()
    with jl.CheckpointManager(tmp_path, async_save=False) as checkpoint:
        checkpoint.save(1, state, learner)  # a learner state only
        trainer = driver(learner=learner)
        message = r"no trainer state \(its extra data has no 'counting_engine'\).*to the Counting"
        with pytest.raises(ValueError, match=message):
            trainer.restore(checkpoint)
        trainer.counters.iteration = 2
        trainer.save(checkpoint)

        fresh = driver(learner=learner, refuse=lambda extra: f"saved with seed {extra['seed']}")
        with pytest.raises(ValueError, match="saved with seed 3"):
            fresh.restore(checkpoint)
    assert fresh.counters == Counters() and fresh.history == [] and fresh.state == 0  # unchanged


def test_close_closes_the_engine_and_the_writers_and_counters_must_be_a_dataclass():
    closed = []

    class Closing(ListWriter):
        def close(self):
            closed.append(self)

    writers = [Closing(), Closing()]
    trainer = driver(writers=writers)
    trainer.close()
    assert closed == writers and trainer.engine.closed
    with pytest.raises(TypeError, match="counters must be a dataclass instance; got dict"):
        Driver(CountingEngine(), 0, {"iteration": 0})
    with pytest.raises(TypeError, match="got type"):
        Driver(CountingEngine(), 0, Counters)


def test_a_trainers_counters_and_history_can_still_be_replaced():
    """They are plain attributes of the driver; assigning them works."""
    cartpole = gym.make("CartPole-v1")
    config = {"hidden_sizes": (4,), "train_batch_size": 8}
    algorithm = jl.algorithms.build("bc", cartpole.observation_space, cartpole.action_space, config)
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    dataset = record_episodes(algorithm.explore, module, "CartPole-v1", 2, num_envs=2, seed=1)
    trainer = jl.OfflineTrainer(algorithm, dataset, eval_episodes=1, progress=False)
    trainer.step()
    trainer.counters = TrainerCounters(iteration=5)
    trainer.history = []
    stats = trainer.step()
    assert stats["iteration"] == 6.0 and stats["env_steps"] == trainer.engine.rows_per_iteration
    assert trainer.history == [stats] and trainer.counters.iteration == 6


@pytest.mark.parametrize("bad", [0, -3, True, 2.0, "4", None])
def test_check_eval_episodes_refuses_what_is_no_positive_count(bad):
    with pytest.raises(ValueError, match=r"eval_episodes must be a positive int; got"):
        check_eval_episodes(bad)
    check_eval_episodes(3)
