"""jl.custom_algorithm: your own ModuleSpec, loss, act and postprocess in jl.Trainer."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_same_stats, interrupted_and_resumed, tree_equal

import jaxlearner as jl


def reinforce_loss(params, batch, ctx):
    log_probs = jax.nn.log_softmax(ctx.apply(params, batch["obs"]))
    taken = jnp.take_along_axis(log_probs, batch["actions"][:, None], -1)[:, 0]
    return -(taken * batch["returns"]).mean(), {}


def tiny_learner():
    spec = jl.ModuleSpec(nn.Dense(2), reinforce_loss, optax.sgd(0.01))
    sample = {
        "obs": np.zeros((8, 4), np.float32),
        "actions": np.zeros(8, np.int32),
        "returns": np.zeros(8, np.float32),
    }
    return jl.Learner({"pg": spec}, minibatch_size=32, sample_batch=sample)


def sample(module, obs, key):
    return jax.random.categorical(key, nn.Dense(2).apply(module.params, obs)), {}


def greedy(module, obs, key):
    return jnp.argmax(nn.Dense(2).apply(module.params, obs), -1), {}


def rewards_as_returns(module, experience):
    rows = lambda x: x.reshape(-1, *x.shape[2:])
    return {
        "obs": rows(experience["obs"]),
        "actions": rows(experience["actions"]),
        "returns": rows(experience["rewards"]),
    }


def make_trainer(seed=3):
    algorithm = jl.custom_algorithm(
        tiny_learner(),
        explore=sample,
        exploit=greedy,
        postprocess=rewards_as_returns,
        rollout_steps=16,
    )
    return jl.Trainer(algorithm, "CartPole-v1", num_envs=2, seed=seed, eval_episodes=1)


def test_a_custom_learner_trains_saves_and_resumes_in_the_trainer(tmp_path):
    straight = make_trainer()
    expected = [straight.step() for _ in range(3)]
    assert [s["iteration"] for s in expected] == [1, 2, 3] and "pg/total_loss" in expected[0]
    assert straight.eval()["episodes"] == 1
    interrupted, resumed = interrupted_and_resumed(make_trainer, tmp_path / "ckpt", steps=2)
    assert resumed.counters.iteration == 2 and resumed.counters.env_steps == 64
    assert tree_equal(resumed.state.modules, interrupted.state.modules)
    assert_same_stats(expected[2:], [resumed.step()])
    assert tree_equal(resumed.state.modules, straight.state.modules)
    for trainer in (straight, interrupted, resumed):
        trainer.close()


BAD = [
    ({"explore": None}, TypeError, r"explore must be a function explore\(module_state, obs, key"),
    ({"explore": lambda module, obs: obs}, TypeError, "explore must take 3 positional"),
    ({"exploit": lambda m, o, k, extra: o}, TypeError, "exploit must take 3 positional"),
    ({"postprocess": lambda experience: experience}, TypeError, "postprocess must take 2"),
    ({"rollout_steps": 0}, ValueError, "rollout_steps must be an int >= 1.*got 0"),
    ({"module_id": "policy"}, ValueError, r"'policy' is not one of the learner's modules \['pg'\]"),
]


@pytest.mark.parametrize(("change", "error", "message"), BAD)
def test_bad_functions_are_refused_before_anything_compiles(change, error, message):
    arguments = {"explore": sample, "postprocess": rewards_as_returns, "rollout_steps": 8}
    with pytest.raises(error, match=message):
        jl.custom_algorithm(tiny_learner(), **{**arguments, **change})


def test_an_act_function_of_the_wrong_result_is_named_when_traced():
    algorithm = jl.custom_algorithm(
        tiny_learner(),
        explore=lambda m, obs, key: obs[:, 0],
        postprocess=rewards_as_returns,
        rollout_steps=8,
    )
    with pytest.raises(TypeError, match=r"explore must return \(actions \[N, ...\], extras"):
        jl.Trainer(algorithm, "CartPole-v1", num_envs=2).step()


def test_a_learner_is_needed():
    with pytest.raises(TypeError, match="needs a jl.Learner; got str"):
        jl.custom_algorithm("ppo", explore=sample, postprocess=rewards_as_returns, rollout_steps=8)
