"""Stop conditions on hand-written histories."""

import pytest

import jaxlearner as jl


def history(key, values):
    return [{key: v, "iteration": i + 1} for i, v in enumerate(values)]


def test_reward_bound_reads_the_latest_value():
    stop = jl.RewardBound(475.0)
    assert not stop([])
    assert not stop(history("eval/return_mean", [500.0, 400.0]))  # the latest counts
    assert stop(history("eval/return_mean", [100.0, 475.0]))
    # Entries without the key (iterations with no evaluation) are skipped.
    assert stop([{"eval/return_mean": 480.0}, {"env_steps": 10}])
    assert jl.RewardBound(-200.0, key="episode_return_mean")(
        history("episode_return_mean", [-150.0])
    )
    twice = jl.RewardBound(475.0, times=2)
    assert not twice(history("eval/return_mean", [480.0]))
    assert not twice(history("eval/return_mean", [470.0, 480.0]))
    assert twice(history("eval/return_mean", [100.0, 476.0, 480.0]))


def test_counters_and_wall_time():
    assert jl.MaxEnvSteps(1000)([{"env_steps": 1000}])
    assert not jl.MaxEnvSteps(1000)([{"env_steps": 999}])
    assert jl.MaxIterations(3)(history("x", [1, 2, 3]))
    assert not jl.MaxIterations(4)(history("x", [1, 2, 3]))
    assert jl.MaxWallTime(60)([{"time_total_s": 61.0}])
    assert not jl.MaxWallTime(60)([])


def test_plateau():
    stop = jl.Plateau("loss", patience=3, tolerance=0.1)
    assert not stop(history("loss", [1.0, 1.05]))  # too few records
    assert stop(history("loss", [5.0, 1.0, 1.05, 1.02]))
    assert not stop(history("loss", [1.0, 1.05, 1.2]))


def test_stops_increasing_and_decreasing():
    up = jl.StopsIncreasing("r", patience=2)
    assert not up(history("r", [1, 2, 3, 4]))
    assert up(history("r", [1, 5, 4, 5]))  # 5 was not beaten in the last two
    assert not jl.StopsIncreasing("r", patience=2, min_delta=0.5)(history("r", [1, 5, 5.6, 2]))
    down = jl.StopsDecreasing("loss", patience=2)
    assert not down(history("loss", [4, 3, 2, 1]))
    assert down(history("loss", [4, 1, 2, 1]))


def test_all_of_and_any_of_compose():
    bound, steps = jl.RewardBound(10.0), jl.MaxEnvSteps(100)
    entry = [{"eval/return_mean": 11.0, "env_steps": 50}]
    assert jl.AnyOf(bound, steps)(entry)
    assert not jl.AllOf(bound, steps)(entry)
    assert jl.AllOf(bound, jl.AnyOf(steps, jl.MaxIterations(1)))([{**entry[0], "iteration": 1}])
    assert repr(jl.AnyOf(steps)) == "AnyOf(MaxEnvSteps(steps=100, key='env_steps'))"


def test_any_and_all_are_aliases_of_any_of_and_all_of():
    assert jl.Any is jl.AnyOf
    assert jl.All is jl.AllOf
    assert {"Any", "All", "AnyOf", "AllOf"} <= set(jl.__all__)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: jl.MaxEnvSteps(0), "MaxEnvSteps.steps must be a positive int"),
        (lambda: jl.MaxWallTime(-1.0), "MaxWallTime.seconds must be a positive number"),
        (lambda: jl.Plateau("x", patience=1), "Plateau.patience must be at least 2"),
        (lambda: jl.RewardBound(float("nan")), "must be a finite number"),
        (lambda: jl.RewardBound(1.0, key=""), "key must be a metric name"),
        (lambda: jl.AnyOf(), "AnyOf needs at least one condition"),
        (lambda: jl.AllOf(3), "not a stop condition"),
    ],
)
def test_validation(build, message):
    with pytest.raises((ValueError, TypeError), match=message):
        build()
