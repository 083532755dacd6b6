"""Schedules: values derived by hand, with and without jit, and validation."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import CompileCounter, maybe_jit

import jaxlearner as jl
from jaxlearner.core.schedules import as_schedule, current_value, initial_value, interpolate


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (0, 1.0),  # the first point
        (50, 0.55),  # halfway from 1.0 to 0.1: 1.0 + 0.5 * (0.1 - 1.0)
        (100, 0.1),  # the second point
        (150, 0.05),  # halfway from 0.1 to 0.0
        (200, 0.0),  # the last point
        (10_000, 0.0),  # the last value holds after the last point
    ],
)
def test_piecewise_schedule_interpolates_linearly(jit, count, expected):
    schedule = jl.piecewise_schedule([[0, 1.0], [100, 0.1], [200, 0.0]])
    value = maybe_jit(schedule, jit)(jnp.asarray(count, jnp.int32))
    np.testing.assert_allclose(float(value), expected, rtol=1e-6, atol=1e-7)
    assert schedule.counter == "env_steps"


@pytest.mark.parametrize(
    "points",
    [
        [[0, 0.5]],
        [[0, 1e-3], [409_600, 0.0]],
        [[0, 1.0], [100, 0.1], [200, 0.0]],
        [[0, 2.5], [3, -1.0], [7, 3e-4], [1_000_000, 7.0], [2**31 - 1, 0.0]],
    ],
)
def test_interpolation_equals_jnp_interp_bit_for_bit(jit, points):
    xp, fp = (np.asarray(column, np.float32) for column in zip(*points, strict=True))
    rng = np.random.default_rng(0)
    counts = [xp, xp - 1, xp + 1, xp - 0.5, rng.uniform(-10, xp[-1] * 1.2 + 10, 500), [-1e9, 1e12]]
    x = jnp.asarray(np.concatenate(counts), jnp.float32)
    expected = np.asarray(maybe_jit(lambda x: jnp.interp(x, xp, fp), jit)(x))
    got = np.asarray(maybe_jit(lambda x: interpolate(x, xp, fp), jit)(x))
    assert got.dtype == np.float32 and got.tobytes() == expected.tobytes()


def test_a_piecewise_schedule_compiles_to_no_loop():
    # jnp.interp's binary search is a while loop in every update step that reads a schedule.
    schedule = jl.piecewise_schedule([[0, 1.0], [100, 0.1], [200, 0.0]])
    program = jax.jit(schedule).lower(jnp.asarray(5, jnp.int32)).as_text()
    assert "while" not in program
    assert (
        "while"
        in jax.jit(lambda c: jnp.interp(c, jnp.arange(3.0), jnp.ones(3)))
        .lower(jnp.float32(5))
        .as_text()
    )  # the check can fail: jnp.interp's program has one


@pytest.mark.parametrize(
    ("points", "message"),
    [
        ([], "Malformed piecewise schedule"),
        ("0.1", "Malformed piecewise schedule"),
        ([[0, 1.0], [10]], "point 1 is [10], not a pair of numbers"),
        ([[5, 1.0], [10, 0.5]], "first point must be at count 0, got 5"),
        ([[0, 1.0], [10, 0.5], [10, 0.1]], "must strictly increase, but point 2 has count 10"),
        ([[0, 1.0], [-1, 0.5]], "counts must be non-negative integers"),
        ([[0, 1.0], [10.5, 0.5]], "counts must be non-negative integers"),
        ([[0, float("nan")]], "non-finite value"),
        ([[0, "a"]], "not a pair of numbers"),
    ],
)
def test_malformed_piecewise_schedule_raises(points, message):
    with pytest.raises(ValueError) as error:
        jl.piecewise_schedule(points)
    assert message in str(error.value)


def test_as_schedule_accepts_each_form():
    assert as_schedule(0.1, "lr") is None
    optax_schedule = optax.linear_schedule(1.0, 0.0, 10)
    wrapped = as_schedule(optax_schedule, "lr")
    assert wrapped.counter == "grad_steps"
    np.testing.assert_allclose(float(wrapped(jnp.asarray(5))), 0.5)
    listed = as_schedule([[0, 2.0], [10, 0.0]], "lr")
    assert listed.counter == "env_steps"
    np.testing.assert_allclose(float(listed(jnp.asarray(5))), 1.0)
    explicit = jl.Schedule(optax_schedule, counter="env_steps")
    assert as_schedule(explicit, "lr") is explicit


def test_as_schedule_names_the_hyperparameter_in_errors():
    with pytest.raises(ValueError, match="Hyperparameter 'entropy_coeff': Malformed"):
        as_schedule([[1, 0.1]], "entropy_coeff")
    with pytest.raises(TypeError, match="Hyperparameter 'lr' must be a number"):
        as_schedule({"a": 1}, "lr")
    with pytest.raises(ValueError, match="must be finite"):
        as_schedule(float("inf"), "lr")
    with pytest.raises(ValueError, match="Schedule.counter must be one of"):
        jl.Schedule(lambda c: c, counter="epochs")


def test_constant_is_read_from_the_state_and_schedules_from_the_counter(jit):
    counters = {"grad_steps": jnp.asarray(3), "env_steps": jnp.asarray(40)}
    read = maybe_jit(lambda stored, c: current_value(0.5, stored, c, "x"), jit)
    # A constant comes back as stored in the state (a sweep may have changed it).
    assert float(read(jnp.asarray(0.25), counters)) == 0.25
    scheduled = maybe_jit(
        lambda stored, c: current_value([[0, 1.0], [80, 0.0]], stored, c, "x"), jit
    )
    # env_steps 40 is halfway between 1.0 and 0.0.
    assert float(scheduled(jnp.asarray(0.25), counters)) == pytest.approx(0.5)
    assert float(initial_value([[0, 1.0], [80, 0.0]], "x")) == 1.0


@dataclasses.dataclass  # eq without frozen: no __hash__, so not a static jit argument
class Unhashable:
    start: float

    def __call__(self, count):
        return self.start / (1 + count)


INITIAL_VALUES = [
    0.25,
    3,
    [[0, 1e-3]],
    [[0, 0.1], [100, 0.0]],
    [[0, -0.0], [10, 2.5]],  # interpolate's -0.0 + 0.0 * 2.5 is +0.0
    [[0, -0.0], [10, -2.5]],  # and -0.0 + -0.0 stays -0.0
    [[0, -0.0]],
    [[0, 1 / 3], [7, 1e-5], [9, 0.3]],
    optax.linear_schedule(3e-4, 0.0, 1000),
    optax.cosine_decay_schedule(0.7, 50),
    optax.exponential_decay(1 / 3, 10, 0.5),
    jl.Schedule(lambda count: 0.1 + count, counter="env_steps"),
    jl.piecewise_schedule([[0, 2 / 3], [5, 0.0]]),
    Unhashable(0.3),
]


@pytest.mark.parametrize("value", INITIAL_VALUES, ids=lambda value: type(value).__name__)
def test_initial_value_is_the_schedule_at_count_zero_and_concrete_in_a_trace(value):
    schedule = as_schedule(value, "x")
    by_hand = np.float32(value) if schedule is None else schedule(jnp.zeros((), jnp.int32))
    assert np.asarray(initial_value(value, "x")).dtype == np.float32
    assert np.asarray(initial_value(value, "x")).tobytes() == np.asarray(by_hand).tobytes()
    # Inside a trace it is still a number (the optimizers' initial hyperparameters are floats).
    seen = []
    jax.jit(lambda: seen.append(float(initial_value(value, "x"))))()
    assert np.float32(seen[0]).tobytes() == np.asarray(by_hand).tobytes()


def test_initial_value_compiles_nothing_for_a_list_and_once_per_schedule_function():
    decay = optax.linear_schedule(0.5, 0.1, 321)  # a schedule no other test evaluates
    with CompileCounter() as compiles:
        initial_value([[0, 0.5], [123, 0.25]], "x")
        initial_value(0.5, "x")
    assert compiles.count == 0
    with CompileCounter() as compiles:
        for _ in range(3):
            initial_value(decay, "x")
            jax.jit(lambda: initial_value(decay, "x"))()
    assert compiles.count == 4  # the schedule at count 0 once, then each empty jit
