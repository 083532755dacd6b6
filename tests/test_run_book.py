"""RunBook, the bookkeeping the three trainers hold: record, stop request, run, save, restore."""

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
from jaxlearner.training.offline.datasets import record_episodes
from jaxlearner.training.run_book import RunBook, check_eval_episodes
from jaxlearner.training.trainer import TrainerCounters


@dataclasses.dataclass
class Counters:
    iteration: int = 0
    env_steps: int = 0
    time_total_s: float = 0.0
    per_policy: dict[str, int] = dataclasses.field(default_factory=dict)


class BookTrainer:
    """A trainer as the three are written: 100 env steps per iteration, the rest in its book."""

    def __init__(self, writers=()):
        self.book = RunBook(Counters(), owner="BookTrainer", writers=writers, progress=False)
        self.evaluations = 0

    counters = property(lambda self: self.book.counters)
    history = property(lambda self: self.book.history)
    stop_requested = property(lambda self: self.book.stop_requested)

    def step(self):
        counters = self.counters
        counters.iteration, counters.env_steps = counters.iteration + 1, counters.env_steps + 100
        stats = {"iteration": float(counters.iteration), "env_steps": float(counters.env_steps)}
        self.book.record(stats)
        return stats

    def eval(self):
        self.evaluations += 1
        results = {"return_mean": 1.0}
        self.book.write_evaluation(results)  # as the trainers' eval does, scheduled or not
        return results


def learner_and_state():
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))
    learner = jl.Learner({"default_policy": spec}, sample_batch=regression_batch())
    return learner, learner.init(jax.random.key(0))


def test_record_keeps_the_stats_and_writes_them_at_the_iteration():
    writer = ListWriter()
    book = RunBook(TrainerCounters(), owner="Trainer", writers=[writer])
    book.counters.iteration = 3
    stats = {"iteration": 3.0, "loss": 0.5}
    book.record(stats)
    assert book.history == [stats] and book.history[0] is stats  # run joins evaluations to it
    assert writer.rows == [(3, {"iteration": 3.0, "loss": 0.5})]


def test_run_clears_a_stop_request_and_honours_one_made_during_the_run():
    writer = ListWriter()
    trainer = BookTrainer(writers=[writer])
    trainer.book.request_stop()
    assert trainer.stop_requested

    def stop_at_two(stats):
        if stats["iteration"] == 2:
            trainer.book.request_stop()

    ran = trainer.book.run(
        trainer, jl.MaxEnvSteps(10_000), steps_per_eval=200, on_iteration=stop_at_two
    )
    assert [s["iteration"] for s in ran] == [1.0, 2.0] and trainer.stop_requested
    assert ran[1]["eval/return_mean"] == 1.0 and trainer.evaluations == 1  # at 200 env steps
    assert trainer.history == ran
    # The book's writers get each iteration's stats and the evaluation.
    assert [step for step, _ in writer.rows] == [1, 2, 2]
    more = trainer.book.run(trainer, max_iterations=1)
    assert [s["iteration"] for s in more] == [3.0] and not trainer.stop_requested

    # With no stop condition it runs until a stop request (rl8 runs until killed).
    def stop_at_five(stats):
        if stats["iteration"] == 5:
            trainer.book.request_stop()

    endless = trainer.book.run(trainer, on_iteration=stop_at_five)
    assert [s["iteration"] for s in endless] == [4.0, 5.0]


def test_a_direct_evaluation_is_written_too():
    writer = ListWriter()
    trainer = BookTrainer(writers=[writer])
    trainer.step()
    trainer.eval()
    assert writer.rows[-1] == (1, {"eval/return_mean": 1.0, "env_steps": 100.0, "iteration": 1.0})


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_a_run_without_stop_conditions_ends_on_a_signal_and_restores_the_handlers(signal_name):
    import os
    import signal

    number = getattr(signal, signal_name)
    before = signal.getsignal(number)
    trainer = BookTrainer()

    def signal_at_three(stats):
        if stats["iteration"] == 3:
            os.kill(os.getpid(), number)
        assert stats["iteration"] < 10, "the signal did not stop the run"

    ran = trainer.book.run(trainer, on_iteration=signal_at_three)
    assert [s["iteration"] for s in ran] == [1.0, 2.0, 3.0] and trainer.stop_requested
    assert signal.getsignal(number) is before


def test_save_and_restore_counters_history_and_the_trainers_own_state(tmp_path):
    learner, state = learner_and_state()
    book = RunBook(Counters(), owner="BookTrainer", counters_key="book_trainer")
    book.counters.iteration, book.counters.per_policy = 2, {"a": 5}
    book.record({"iteration": 1.0, "eval/return_mean": float("nan")})
    book.record({"iteration": 2.0})
    key = jax.random.key_data(jax.random.key(4))
    with jl.CheckpointManager(tmp_path, async_save=False) as checkpoint:
        step = book.save(checkpoint, state, learner, {"seed": 3}, {"key": key})
        assert step == 2 and checkpoint.metadata(2)["metrics"] == {"iteration": 2.0}
        extra, arrays = checkpoint.restore_extra(2)
        # Counters under their key first, then the history (no NaN in JSON), then the trainer's.
        assert list(extra) == ["book_trainer", "history", "seed"]
        assert extra["book_trainer"] == {
            "iteration": 2,
            "env_steps": 0,
            "time_total_s": 0.0,
            "per_policy": {"a": 5},
        }
        assert extra["history"] == {"keys": ["iteration", "eval/return_mean"], "length": 2}
        np.testing.assert_array_equal(arrays["history"]["present"], [[1, 1], [1, 0]])
        np.testing.assert_array_equal(arrays["key"], key)

        fresh = RunBook(Counters(), owner="BookTrainer", counters_key="book_trainer")
        restored = fresh.restore(checkpoint, learner)
    assert fresh.counters == book.counters and isinstance(fresh.counters, Counters)
    assert np.isnan(fresh.history[0].pop("eval/return_mean"))
    assert fresh.history == [{"iteration": 1.0}, {"iteration": 2.0}]
    assert restored.extra["seed"] == 3
    assert sorted(restored.arrays) == ["key"]  # the trainer's own arrays, as it saved them
    np.testing.assert_array_equal(restored.arrays["key"], key)
    assert jax.tree.structure(restored.state) == jax.tree.structure(state)


def test_a_history_whose_arrays_do_not_match_its_length_is_a_damaged_step():
    from jaxlearner.training.run_book import _saved_history

    saved = {"keys": ["iteration"], "length": 3}
    columns = {"values": np.zeros((2, 1)), "present": np.ones((2, 1), bool)}
    with pytest.raises(jl.CheckpointCorruptedError, match=r"3 iterations of 1 stats.*\(2, 1\)"):
        _saved_history(saved, columns)
    with pytest.raises(jl.CheckpointCorruptedError, match="its arrays hold none"):
        _saved_history(saved, None)
    assert _saved_history({"keys": [], "length": 0}, None) == []
    assert math.isnan(_saved_history([{"iteration": "nan"}], None)[0]["iteration"])  # old list


def test_restore_refuses_a_step_without_the_books_counters_or_one_check_refuses(tmp_path):
    learner, state = learner_and_state()
    with jl.CheckpointManager(tmp_path, async_save=False) as checkpoint:
        checkpoint.save(1, state, learner)  # a learner state only
        book = RunBook(Counters(), owner="BookTrainer", counters_key="book_trainer")
        message = r"no trainer state \(its extra data has no 'book_trainer'\).*to the BookTrainer"
        with pytest.raises(ValueError, match=message):
            book.restore(checkpoint, learner)
        book.counters.iteration = 2
        book.save(checkpoint, state, learner, {"rows": 10}, {"key": np.zeros(2, np.uint32)})

        def other_rows(extra):
            raise ValueError(f"saved with {extra['rows']} rows")

        fresh = RunBook(Counters(), owner="BookTrainer", counters_key="book_trainer")
        with pytest.raises(ValueError, match="saved with 10 rows"):
            fresh.restore(checkpoint, learner, check=other_rows)
    assert fresh.counters == Counters() and fresh.history == []  # nothing changed


def test_close_closes_the_writers_and_counters_must_be_a_dataclass():
    closed = []

    class Closing(ListWriter):
        def close(self):
            closed.append(self)

    writers = [Closing(), Closing()]
    RunBook(Counters(), owner="Trainer", writers=writers).close()
    assert closed == writers
    with pytest.raises(TypeError, match="counters must be a dataclass instance; got dict"):
        RunBook({"iteration": 0}, owner="Trainer")
    with pytest.raises(TypeError, match="got type"):
        RunBook(Counters, owner="Trainer")


def test_a_trainers_counters_and_history_can_still_be_replaced():
    """Before the trainers held a book these were plain attributes; assigning them still works."""
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
    assert stats["iteration"] == 6.0 and stats["env_steps"] == trainer.rows_per_iteration
    assert trainer.history == [stats] and trainer.counters.iteration == 6


@pytest.mark.parametrize("bad", [0, -3, True, 2.0, "4", None])
def test_check_eval_episodes_refuses_what_is_no_positive_count(bad):
    with pytest.raises(ValueError, match=r"eval_episodes must be a positive int; got"):
        check_eval_episodes(bad)
    check_eval_episodes(3)
