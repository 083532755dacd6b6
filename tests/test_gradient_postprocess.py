"""A gradient postprocess the user supplies (RLlib's ``postprocess_gradients`` and
``postprocess_gradients_for_module`` as values), run inside the compiled update.

A postprocess that zeroes a leaf's gradient must leave that leaf bit-identical (Adam turns a
zero gradient into a zero update: its moments stay zero) over epochs and minibatches, on one
device and on conftest.py's 8 fake devices; its metrics join the update's; it runs before the
built-in clipping or instead of it; what it returns is checked before anything compiles; and
a checkpoint of a learner with one cannot be restored into a learner without it.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import (
    ActorCritic,
    CompileCounter,
    actor_critic_loss,
    assert_trees_close,
    mse_loss,
    regression_batch,
    tree_equal,
)

import jaxlearner as jl
from jaxlearner.checkpoint.manager import CheckpointManager


class TwoLayers(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(1, name="out")(nn.tanh(nn.Dense(4, name="hidden")(x)))


def zero_hidden_kernel(grads, ctx):
    """Zeroes the hidden layer's kernel gradient; reports its norm before, and the counter."""
    kernel = grads["params"]["hidden"]["kernel"]
    hidden = {**grads["params"]["hidden"], "kernel": jnp.zeros_like(kernel)}
    metrics = {
        "hidden_kernel_norm": jnp.sqrt(jnp.sum(kernel**2)),
        "grad_steps_seen": ctx.counters["grad_steps"].astype(jnp.float32),
    }
    return {"params": {**grads["params"], "hidden": hidden}}, metrics


def two_layer_learner(postprocess=zero_hidden_kernel, **options):
    optimizer = jl.Optimizer(optax.adam, learning_rate=1e-2, grad_clip=0.5)
    spec = jl.ModuleSpec(TwoLayers(), mse_loss, optimizer, postprocess_gradients=postprocess)
    options = {"minibatch_size": 16, "num_epochs": 3, "sample_batch": regression_batch(), **options}
    return jl.Learner({"m": spec}, **options)


def kernel(state):
    return state.modules["m"].params["params"]["hidden"]["kernel"]


@pytest.mark.parametrize("devices", [None, 8], ids=["one-device", "8-devices"])
def test_a_postprocess_that_zeroes_a_leaf_keeps_it_bit_identical(devices, jit):
    learner = two_layer_learner(jit=jit).on(devices)
    state = learner.init(jax.random.key(0))
    updated, metrics = learner.update(state, regression_batch(seed=1))
    updated, metrics = learner.update(updated, regression_batch(seed=2))
    assert int(updated.grad_steps) == 2 * 3 * 4  # 2 updates x 3 epochs x 4 minibatches
    assert tree_equal(kernel(updated), kernel(state))
    out = updated.modules["m"].params["params"]["out"]["kernel"]
    assert not np.allclose(out, state.modules["m"].params["params"]["out"]["kernel"])
    # Its metrics join the module's, averaged over the steps: counters 12..23 seen, mean 17.5.
    assert float(metrics["m"]["hidden_kernel_norm"]) > 0
    assert float(metrics["m"]["grad_steps_seen"]) == 17.5
    # Without the postprocess the same kernel moves.
    plain = two_layer_learner(postprocess=None, jit=jit).on(devices)
    moved, _ = plain.update(plain.init(jax.random.key(0)), regression_batch(seed=1))
    assert not np.allclose(kernel(moved), kernel(state))


def test_on_8_devices_the_postprocessed_update_is_the_one_device_update():
    single = two_layer_learner(shuffle=False)
    placed = single.on("all")
    state = single.init(jax.random.key(0))
    one, one_metrics = single.update(state, regression_batch(seed=1))
    many, many_metrics = placed.update(placed.placement.put(state), regression_batch(seed=1))
    assert_trees_close(placed.placement.get(many).modules, one.modules, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        many_metrics["m"]["hidden_kernel_norm"], one_metrics["m"]["hidden_kernel_norm"], rtol=1e-5
    )


def times_100(grads, ctx):
    return jax.tree.map(lambda g: 100.0 * g, grads), {}


@pytest.mark.parametrize("replaces", [False, True], ids=["then-clip", "instead-of-clip"])
def test_the_postprocess_runs_before_the_clipping_or_instead_of_it(replaces):
    # grad_clip=1.0 by global norm: after x100 the norm is hundreds; clipped after, it is 1.
    post = jl.GradientPostprocess(times_100, replaces_clipping=replaces)
    optimizer = jl.Optimizer(optax.sgd, learning_rate=0.1, grad_clip=1.0)
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optimizer, postprocess_gradients=post)
    learner = jl.Learner({"m": spec}, sample_batch=regression_batch())
    state = learner.init(jax.random.key(0))
    grads, _ = learner.compute_gradients(state, regression_batch())
    processed = learner.postprocess_gradients(state, grads)["m"]
    norm = float(optax.tree.norm(grads["m"]))
    if replaces:
        assert_trees_close(processed, jax.tree.map(lambda g: 100.0 * g, grads["m"]))
    else:
        assert norm * 100 > 1.0
        np.testing.assert_allclose(optax.tree.norm(processed), 1.0, rtol=1e-5)


def test_the_three_stages_with_a_postprocess_take_the_update_step(jit):
    # One epoch of one unshuffled minibatch: compute, postprocess (metrics passed through)
    # and apply give the update's state and its postprocess metrics.
    learner = two_layer_learner(minibatch_size=None, num_epochs=1, shuffle=False, jit=jit)
    state = learner.init(jax.random.key(0))
    batch = regression_batch(seed=1)
    grads, metrics = learner.compute_gradients(state, batch)
    grads, metrics = learner.postprocess_gradients(state, grads, metrics=metrics)
    stepped = learner.apply_gradients(state, grads, metrics=metrics, env_steps=64)
    updated, update_metrics = learner.update(state, batch)
    assert_trees_close(stepped.modules["m"].params, updated.modules["m"].params)
    np.testing.assert_allclose(
        metrics["m"]["hidden_kernel_norm"], update_metrics["m"]["hidden_kernel_norm"], rtol=1e-6
    )
    assert tree_equal(kernel(stepped), kernel(state))


def test_the_context_names_each_leafs_optimizer_and_the_hyperparams():
    seen = {}

    def freeze_critic(grads, ctx):
        seen.update(module_id=ctx.module_id, names=ctx.optimizer_names, labels=ctx.labels)
        critic = ctx.for_optimizer("critic", grads)
        frozen = jax.tree.map(
            lambda g, c: g if c is None else jnp.zeros_like(g),
            grads,
            critic,
            is_leaf=lambda x: x is None,
        )
        return frozen, {"coeff": ctx.hyperparams["coeff"]}

    spec = jl.ModuleSpec(
        ActorCritic(),
        actor_critic_loss,
        optimizers={"actor": optax.adam(1e-2), "critic": optax.adam(1e-2)},
        hyperparams={"coeff": [[0, 1.0], [64, 0.0]]},
        postprocess_gradients=freeze_critic,
    )
    learner = jl.Learner({"ac": spec}, minibatch_size=32, sample_batch=regression_batch())
    state = learner.init(jax.random.key(0))
    updated, metrics = learner.update(state, regression_batch(seed=1), env_steps=32)
    params, before = updated.modules["ac"].params["params"], state.modules["ac"].params["params"]
    assert tree_equal(params["critic"], before["critic"])
    assert not np.allclose(params["actor"]["kernel"], before["actor"]["kernel"])
    assert seen["module_id"] == "ac" and set(seen["names"]) == {"actor", "critic"}
    assert seen["labels"]["params"]["actor"] == {"bias": "actor", "kernel": "actor"}
    # coeff goes 1 -> 0 over 64 env steps; the update's steps see it at 0 env steps: 1.0.
    assert float(metrics["ac"]["coeff"]) == 1.0
    with pytest.raises(KeyError, match=r"Module 'ac' has no optimizer 'pi'; .*\['actor', 'cri"):
        jl.GradientContext("ac", None, seen["labels"], {}, {}).for_optimizer("pi", None)


def test_a_learner_postprocess_sees_every_module_and_reports_per_owner():
    def balance(grads, ctx):
        norms = {m: optax.tree.norm(g) for m, g in grads.items()}
        scaled = {
            "a": grads["a"],
            "b": jax.tree.map(lambda g: g * norms["a"] / norms["b"], grads["b"]),
        }
        return scaled, {"b": {"scale": norms["a"] / norms["b"]}, "__all__": {"ids": len(ctx)}}

    learner = jl.Learner(
        {m: jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1)) for m in ("a", "b")},
        postprocess_gradients=balance,
        shuffle=False,
    )
    batch = {"a": regression_batch(), "b": regression_batch(seed=5)}
    state = learner.init(jax.random.key(0), batch)
    grads, metrics = learner.compute_gradients(state, batch)
    processed, metrics = learner.postprocess_gradients(state, grads, metrics=metrics)
    np.testing.assert_allclose(
        optax.tree.norm(processed["b"]), optax.tree.norm(grads["a"]), rtol=1e-5
    )
    assert float(metrics["__all__"]["ids"]) == 2 and "scale" in metrics["b"]
    _, update_metrics = learner.update(state, batch)
    assert {"scale"} <= set(update_metrics["b"]) and "ids" in update_metrics["__all__"]


def drop_bias(grads, ctx):
    return {"params": {"kernel": grads["params"]["kernel"]}}, {}


def wider_kernel(grads, ctx):
    params = grads["params"]
    return {"params": {**params, "kernel": jnp.zeros((3, 2))}}, {}


@pytest.mark.parametrize(
    ("postprocess", "error", "message"),
    [
        (
            drop_bias,
            ValueError,
            r"Module 'm', postprocess_gradients 'drop_bias': the gradients' "
            r"leaves differ from the params'\. Missing: \[\"\['params'\]\['bias'\]\"\]",
        ),
        (wider_kernel, ValueError, r"gradient \['params'\]\['kernel'\]: expected shape \(3, 1\)"),
        (lambda g, ctx: g, TypeError, r"must return a pair \(grads, metrics\); got dict"),
        (lambda g, ctx: (g, {"v": jnp.ones(3)}), ValueError, r"metric 'v' of shape \(3,\)"),
    ],
    ids=["a-leaf-missing", "another-shape", "no-pair", "metric-not-scalar"],
)
def test_a_postprocess_returning_something_else_is_refused_before_compiling(
    postprocess, error, message
):
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1), postprocess_gradients=postprocess)
    learner = jl.Learner({"m": spec}, minibatch_size=32)
    batch = regression_batch()
    state = learner.init(jax.random.key(0), batch)
    with CompileCounter() as compiled, pytest.raises(error, match=message):
        learner.update(state, batch)
    assert not compiled.of("update")


def test_a_learner_postprocess_for_other_modules_is_refused():
    learner = jl.Learner(
        {"m": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))},
        postprocess_gradients=lambda grads, ctx: ({}, {}),
    )
    batch = regression_batch()
    with pytest.raises(ValueError, match=r"must return gradients for the modules it was given"):
        learner.update(learner.init(jax.random.key(0), batch), batch)


def test_bad_postprocess_values_are_refused_when_the_learner_is_built():
    with pytest.raises(TypeError, match=r"ModuleSpec postprocess_gradients must be a function"):
        jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1), postprocess_gradients=3)
    with pytest.raises(TypeError, match=r"replaces_clipping must be a bool; got 'yes'"):
        jl.GradientPostprocess(times_100, replaces_clipping="yes")
    with pytest.raises(TypeError, match=r"Learner postprocess_gradients must be a function"):
        jl.Learner(
            {"m": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))},
            postprocess_gradients="clip",
        )
    # A shared optimizer's clipping spans its modules: one module's postprocess cannot replace it.
    post = jl.GradientPostprocess(times_100, replaces_clipping=True)
    specs = {
        "a": jl.ModuleSpec(nn.Dense(1), mse_loss, postprocess_gradients=post),
        "b": jl.ModuleSpec(nn.Dense(1), mse_loss),
    }
    shared = {"all": jl.SharedOptimizer(jl.Optimizer(optax.sgd(0.1), grad_clip=1.0), ("a", "b"))}
    with pytest.raises(ValueError, match=r"Module 'a'.* is in shared optimizer 'all'"):
        jl.Learner(specs, shared_optimizers=shared)


def test_a_checkpoint_records_the_postprocess_and_a_restore_without_it_is_refused(tmp_path):
    learner = two_layer_learner()
    state, _ = learner.update(learner.init(jax.random.key(0)), regression_batch(seed=1))
    with CheckpointManager(tmp_path / "run") as ckpt:
        ckpt.save(1, state, learner)
    ckpt = CheckpointManager(tmp_path / "run", read_only=True)
    meta = ckpt.metadata()
    assert meta["modules"]["m"]["spec"]["postprocess_gradients"] == "zero_hidden_kernel"
    assert meta["learner"]["postprocess_gradients"] is None
    assert tree_equal(ckpt.restore(learner), state)
    with pytest.raises(ValueError) as refused:
        ckpt.restore(two_layer_learner(postprocess=None))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        "Checkpoint step 1 was trained with the gradient postprocess 'zero_hidden_kernel' of "
        "module 'm', and this learner's has none"
    )
    renamed = jl.GradientPostprocess(zero_hidden_kernel, name="other")
    with pytest.raises(ValueError, match=r"and this learner's has 'other'"):
        ckpt.restore(two_layer_learner(postprocess=renamed))


def test_a_step_saved_without_a_postprocess_restores_into_a_learner_with_one(tmp_path):
    plain = two_layer_learner(postprocess=None)
    state = plain.init(jax.random.key(0))
    with CheckpointManager(tmp_path / "run") as ckpt:
        ckpt.save(0, state, plain)
    assert tree_equal(CheckpointManager(tmp_path / "run").restore(two_layer_learner()), state)
