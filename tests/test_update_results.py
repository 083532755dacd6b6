"""Results as RLlib gives them: this update's steps trained, and the learner's ``reduce_fn``."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import mse_loss, regression_batch

import jaxlearner as jl


def spec(**options):
    return jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.01), **options)


def test_this_updates_steps_trained_beside_the_lifetime_totals():
    # Two trained policies and a frozen one, as RLlib's policies_to_train.
    batch = {
        "a": regression_batch(size=64),
        "b": regression_batch(size=32, seed=1),
        "c": regression_batch(size=16, seed=2),
    }
    learner = jl.Learner(
        {"a": spec(), "b": spec(), "c": spec()}, minibatch_size=16, modules_to_train={"a", "b"}
    )
    state = learner.init(jax.random.key(0), batch)
    state, _ = learner.update(state, batch, env_steps=40)
    state, metrics = learner.update(state, batch, env_steps={"a": 10, "b": 20, "c": 30})
    counts = {
        owner: {name: int(value) for name, value in values.items() if "steps_trained" in name}
        for owner, values in metrics.items()
    }
    # Agent steps are each batch's rows; "__all__" sums the trained modules, "c" counts none.
    assert counts == {
        "a": {
            "num_env_steps_trained": 10,
            "num_agent_steps_trained": 64,
            "num_env_steps_trained_lifetime": 50,
        },
        "b": {
            "num_env_steps_trained": 20,
            "num_agent_steps_trained": 32,
            "num_env_steps_trained_lifetime": 60,
        },
        "__all__": {
            "num_env_steps_trained": 30,
            "num_agent_steps_trained": 96,
            "num_env_steps_trained_lifetime": 110,
        },
    }


def test_reduce_fn_a_name_none_or_a_function():
    batch = regression_batch(size=32)

    def metrics_with(reduce_fn):
        learner = jl.Learner({"m": spec()}, minibatch_size=16, num_epochs=2, reduce_fn=reduce_fn)
        return learner.update(learner.init(jax.random.key(0), batch), batch)[1]

    stacked = metrics_with(None)
    # None: 2 epochs x 2 minibatches = 4 steps of values; the per-update values stay scalars.
    assert stacked["m"]["mse"].shape == stacked["__all__"]["total_loss"].shape == (4,)
    assert stacked["m"]["num_grad_steps"].shape == ()
    mse = np.asarray(stacked["m"]["mse"])
    assert len(set(mse.tolist())) == 4
    np.testing.assert_allclose(metrics_with("max")["m"]["mse"], mse.max(), rtol=1e-6)
    first = metrics_with(lambda steps: jax.tree.map(lambda x: x[0], steps))
    np.testing.assert_allclose(first["m"]["mse"], mse[0], rtol=1e-6)
    assert int(first["m"]["num_grad_steps"]) == 4


def test_additional_updates_see_the_declared_reductions_whatever_reduce_fn():
    def remember(module, metrics):
        return module.replace(extra={**module.extra, "mse": metrics["mse"]})

    def learner_level(state, metrics):
        assert metrics["m"]["mse"].shape == ()
        return state

    module = spec(init_extra=lambda params: {"mse": jnp.zeros(())}, additional_updates=[remember])
    learner = jl.Learner(
        {"m": module}, minibatch_size=16, reduce_fn=None, additional_updates=[learner_level]
    )
    batch = regression_batch()
    state, metrics = learner.update(learner.init(jax.random.key(0), batch), batch)
    assert metrics["m"]["mse"].shape == (4,)
    np.testing.assert_allclose(
        state.modules["m"].extra["mse"], np.mean(metrics["m"]["mse"]), rtol=1e-6
    )


@pytest.mark.parametrize(
    ("reduce_fn", "error", "message"),
    [
        ("avg", ValueError, r"reduce_fn 'avg' is not a known reduction; use one of \['default'"),
        (3, TypeError, r"reduce_fn must be one of \[.*\], None .* or a callable .*; got int 3"),
    ],
)
def test_a_reduce_fn_that_is_no_known_name_or_callable_is_refused(reduce_fn, error, message):
    with pytest.raises(error, match=message):
        jl.Learner({"m": spec()}, reduce_fn=reduce_fn)


def test_a_reduce_fn_that_returns_no_mapping_is_refused_before_compiling():
    learner = jl.Learner({"m": spec()}, reduce_fn=lambda steps: [steps])
    batch = regression_batch()
    with pytest.raises(TypeError, match=r"reduce_fn must return \{owner: \{name: value\}\}"):
        learner.update(learner.init(jax.random.key(0), batch), batch)
