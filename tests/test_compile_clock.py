"""Compilation time apart from speed: env_steps_per_s leaves out what JAX spent compiling."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import pytest

import jaxlearner as jl
from jaxlearner.training.compile_clock import Stopwatch, union_seconds


@pytest.mark.parametrize(
    ("spans", "window", "expected"),
    [
        ([], (0.0, 10.0), 0.0),
        ([(1.0, 2.0), (3.0, 5.0)], (0.0, 10.0), 3.0),
        ([(1.0, 6.0), (2.0, 3.0)], (0.0, 10.0), 5.0),  # an inner trace nested in an outer one
        ([(1.0, 4.0), (3.0, 6.0)], (0.0, 10.0), 5.0),  # overlapping
        ([(0.0, 4.0), (8.0, 12.0)], (2.0, 10.0), 4.0),  # clipped to the window
        ([(11.0, 12.0)], (2.0, 10.0), 0.0),
    ],
)
def test_union_seconds(spans, window, expected):
    assert union_seconds(spans, *window) == pytest.approx(expected)


def test_a_stopwatch_sees_compilation_and_no_more():
    function = jax.jit(lambda x: jnp.sin(x) * 2.0)
    watch = Stopwatch()
    function(1.0).block_until_ready()
    seconds, compiling = watch.read()
    assert 0.0 < compiling <= seconds
    watch = Stopwatch()
    function(2.0).block_until_ready()  # compiled already
    assert watch.read()[1] == 0.0


def test_a_trainer_reports_compilation_apart_from_env_steps_per_second():
    env = gym.make("CartPole-v1")
    config = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1, "hidden_sizes": (8,)}
    learner = jl.algorithms.ppo(env.observation_space, env.action_space, config)
    trainer = jl.Trainer(learner, "CartPole-v1", num_envs=2, progress=False)
    first, second = trainer.step(), trainer.step()
    assert first["time_compile_s"] > 0.5 * first["time_this_iter_s"]  # mostly compiling
    assert second["time_compile_s"] == 0.0
    for stats in (first, second):
        running = stats["time_this_iter_s"] - stats["time_compile_s"]
        assert stats["env_steps_per_s"] == pytest.approx(64 / running)
    # The compiling iteration no longer reads as a slow one.
    assert first["env_steps_per_s"] > 64 / first["time_this_iter_s"] * 2
