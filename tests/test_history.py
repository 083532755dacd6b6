"""The trainers' history: a list whose metric columns the stop conditions read in O(1) per step."""

import json
import random
import tracemalloc

import gymnasium as gym

import jaxlearner as jl
from jaxlearner.training.history import History, column, tail


class CountingDict(dict):
    """A stats dict that counts how often a key is looked up in it."""

    lookups = 0

    def __contains__(self, key):
        CountingDict.lookups += 1
        return super().__contains__(key)


def _random_history(seed, n=200):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        row = {"env_steps": float(i)}
        if rng.random() < 0.2:
            row["eval/return_mean"] = rng.uniform(-10, 10)
        rows.append(row)
    return rows


def test_column_equals_a_scan_at_every_step_with_evaluations_added_in_place():
    rows = _random_history(0)
    history = History()
    for row in rows:
        evaluation = row.pop("eval/return_mean", None)
        history.append(row)
        assert history.column("eval/return_mean") == column(list(history), "eval/return_mean")
        if evaluation is not None:  # the run loop joins an evaluation to the last entry
            row["eval/return_mean"] = evaluation
        for key in ("eval/return_mean", "env_steps", "missing"):
            assert history.column(key) == [r[key] for r in history if key in r]


def test_history_is_a_list_to_every_reader():
    rows = _random_history(1, n=5)
    history = History(rows)
    assert history == rows
    assert isinstance(history, list)
    assert history[1:3] == rows[1:3]
    assert json.loads(json.dumps(history)) == rows


def test_column_starts_over_when_the_list_is_cleared_cut_or_replaced():
    history = History([{"a": 1.0}, {"a": 2.0}, {"a": 3.0}])
    assert history.column("a") == [1.0, 2.0, 3.0]
    del history[1:]
    assert history.column("a") == [1.0]
    history.clear()
    assert history.column("a") == []
    history.extend([{"a": 7.0}, {"b": 1.0}, {"a": 8.0}])
    assert history.column("a") == [7.0, 8.0]
    history[:] = [{"a": 9.0}, {"a": 10.0}, {"a": 11.0}]
    assert history.column("a") == [9.0, 10.0, 11.0]


def test_tail_is_the_end_of_the_column_at_every_step_with_evaluations_added_in_place():
    history = History()
    for row in _random_history(2):
        evaluation = row.pop("eval/return_mean", None)
        history.append(row)
        if evaluation is not None:
            row["eval/return_mean"] = evaluation
        for key in ("eval/return_mean", "env_steps", "missing"):
            for count in (0, 1, 2, 5):
                expected = column(list(history), key)[-count:] if count else []
                assert history.tail(key, count) == expected
                assert tail(list(history), key, count) == expected


def test_the_last_value_conditions_copy_no_column_of_a_long_history():
    """MaxEnvSteps, MaxIterations, MaxWallTime, RewardBound and Plateau read the last values
    only: a copy of the whole column after every iteration was O(n^2) over a run (40 s of a
    50,000-iteration SAC run). Measured in bytes allocated, not in seconds."""
    stop = jl.AnyOf(
        jl.MaxEnvSteps(10**9),
        jl.MaxIterations(10**9),
        jl.MaxWallTime(1e9),
        jl.RewardBound(1e9, key="env_steps", times=2),
        jl.Plateau("env_steps", patience=3),
    )
    n = 100_000
    history = History(
        {"env_steps": float(i), "iteration": float(i), "time_total_s": 0.0} for i in range(n)
    )
    assert not stop(history)  # gathers the columns once
    history.append({"env_steps": float(n), "iteration": float(n), "time_total_s": 0.0})
    tracemalloc.start()
    try:
        assert not stop(history)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64_000, f"{peak} bytes for one check; a column of {n} floats is 800,000"


def test_stop_conditions_read_each_entry_a_bounded_number_of_times():
    """One lookup per entry and condition, not one per entry per step: a 5,000-step run of
    four conditions did 50 million lookups before the columns were cached."""
    stop = jl.AnyOf(
        jl.RewardBound(1e9, times=2),
        jl.MaxEnvSteps(10**9),
        jl.Plateau("env_steps"),
        jl.MaxIterations(10**9),
    )
    history, n = History(), 2000
    CountingDict.lookups = 0
    for i in range(n):
        history.append(CountingDict(env_steps=float(i), iteration=float(i)))
        assert not stop(history)
    assert CountingDict.lookups <= 2 * 4 * n


def test_stop_conditions_give_the_same_answers_on_a_history_and_a_plain_list():
    conditions = [
        jl.RewardBound(5.0, times=2),
        jl.StopsIncreasing("eval/return_mean", patience=3),
        jl.StopsDecreasing("eval/return_mean", patience=3),
        jl.Plateau("eval/return_mean", patience=3, tolerance=8.0),
        jl.MaxEnvSteps(150),
    ]
    for seed in range(5):
        history = History()
        for row in _random_history(seed):
            history.append(row)
            for condition in conditions:
                assert condition(history) == condition(list(history))


def _small_trainer():
    env = gym.make("CartPole-v1")
    config = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1, "hidden_sizes": (8,)}
    learner = jl.algorithms.ppo(env.observation_space, env.action_space, config)
    return jl.Trainer(learner, "CartPole-v1", num_envs=2, progress=False)


def test_a_trainer_keeps_a_history_and_a_restored_one_too(tmp_path):
    trainer = _small_trainer()
    trainer.run([jl.MaxIterations(2)])
    assert isinstance(trainer.history, History) and len(trainer.history) == 2
    with jl.CheckpointManager(tmp_path / "ckpt") as manager:
        trainer.save(manager)
        restored = _small_trainer()
        restored.restore(manager)
    assert isinstance(restored.history, History) and restored.history == trainer.history
    assert restored.history.column("iteration") == [1.0, 2.0]
