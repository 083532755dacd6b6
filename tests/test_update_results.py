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
    state, first = learner.update(state, batch, env_steps=40)
    # One count for the batch and every module: the batch's env steps are 40, not 2 x 40.
    assert int(first["__all__"]["num_env_steps_trained"]) == 40
    state, metrics = learner.update(state, batch, env_steps={"a": 10, "b": 20, "c": 30})
    counts = {
        owner: {name: int(value) for name, value in values.items() if "steps_trained" in name}
        for owner, values in metrics.items()
    }
    # Agent steps are each batch's rows, summed under "__all__"; "c" counts none. The batch's
    # env steps, not given, are the largest trained module's (20); the lifetime under
    # "__all__" sums the modules' counters.
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
            "num_env_steps_trained": 20,
            "num_agent_steps_trained": 96,
            "num_env_steps_trained_lifetime": 110,
        },
    }


def test_two_modules_given_100_env_steps_report_the_batchs_100():
    # RLlib's compile_results: "__all__" counts the batch's env steps once, the modules their
    # own; a multi-agent batch of 100 env steps whose policies saw 60 and 40 says so.
    batch = {"a": regression_batch(size=64), "b": regression_batch(size=32, seed=1)}
    learner = jl.Learner({"a": spec(), "b": spec()}, minibatch_size=16)
    state = learner.init(jax.random.key(0), batch)
    state, metrics = learner.update(state, batch, env_steps=100)
    assert int(metrics["__all__"]["num_env_steps_trained"]) == 100
    assert int(metrics["a"]["num_env_steps_trained"]) == int(metrics["b"]["num_env_steps_trained"])
    assert int(metrics["__all__"]["num_agent_steps_trained"]) == 96
    state, metrics = learner.update(state, batch, env_steps={"a": 60, "b": 40, jl.ALL_MODULES: 100})
    assert int(metrics["__all__"]["num_env_steps_trained"]) == 100
    assert [int(metrics[m]["num_env_steps_trained"]) for m in "ab"] == [60, 40]
    assert [int(state.modules[m].env_steps) for m in "ab"] == [160, 140]
    # Without env_steps: each module's rows, and the batch's the largest of them.
    _, metrics = learner.update(state, batch)
    assert int(metrics["__all__"]["num_env_steps_trained"]) == 64
    with pytest.raises(ValueError, match=r"env_steps for '__all__' must be a non-negative int"):
        learner.update(state, batch, env_steps={"a": 1, "b": 1, jl.ALL_MODULES: -1})


def test_a_single_module_learner_counts_as_before():
    batch = regression_batch(size=64)
    learner = jl.Learner({"m": spec()}, minibatch_size=16)
    state = learner.init(jax.random.key(0), batch)
    _, metrics = learner.update(state, batch, env_steps=7)
    assert int(metrics["__all__"]["num_env_steps_trained"]) == 7
    update = jax.jit(learner.update_fn)  # the pure update, as anakin and the replay loop call it
    _, metrics = update(state, {"m": batch}, {"m": jnp.int32(9)})
    assert int(metrics["__all__"]["num_env_steps_trained"]) == 9


def histogram_results(batch, metrics):
    """Metrics that are no loss's scalars: a histogram of the batch's targets, a ratio."""
    counts, _ = jnp.histogram(batch["m"]["y"], bins=4, range=(-10.0, 10.0))
    per_row = metrics["m"]["mse"] / metrics["m"]["num_agent_steps_trained"]
    return {"m": {"y_histogram": counts, "mse_per_row": per_row}, "batch": {"rows": 64}}


@pytest.mark.parametrize("reduce_fn", ["default", None])
def test_a_results_fn_sees_the_batch_and_the_metrics(reduce_fn, jit):
    batch = regression_batch(size=64)
    learner = jl.Learner(
        {"m": spec()}, minibatch_size=16, results_fn=histogram_results, reduce_fn=reduce_fn, jit=jit
    )
    state = learner.init(jax.random.key(0), batch)
    _, metrics = learner.update(state, batch)
    expected, _ = np.histogram(batch["y"], bins=4, range=(-10.0, 10.0))
    np.testing.assert_array_equal(metrics["m"]["y_histogram"], expected)
    np.testing.assert_allclose(metrics["m"]["mse_per_row"], metrics["m"]["mse"] / 64, rtol=1e-6)
    assert int(metrics["batch"]["rows"]) == 64
    assert "total_loss" in metrics["m"]  # the update's own metrics are all there


@pytest.mark.parametrize(
    ("results_fn", "error", "message"),
    [
        (lambda batch, metrics: [1.0], TypeError, r"results_fn must return \{owner: \{name: arr"),
        (lambda batch, metrics: {"m": 1.0}, TypeError, r"got 'm': float"),
        (lambda batch, metrics: {"m": {"s": "no"}}, TypeError, r"returned m/s of type str"),
    ],
    ids=["no-mapping", "no-mapping-inside", "not-an-array"],
)
def test_a_results_fn_returning_something_else_is_refused_before_compiling(
    results_fn, error, message
):
    learner = jl.Learner({"m": spec()}, results_fn=results_fn)
    batch = regression_batch()
    with pytest.raises(error, match=message):
        learner.update(learner.init(jax.random.key(0), batch), batch)
    with pytest.raises(TypeError, match=r"Learner results_fn must be callable or None; got 3"):
        jl.Learner({"m": spec()}, results_fn=3)


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
