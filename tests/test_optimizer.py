"""Named optimizers: validation, clipping bounds, param labels."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import ActorCritic, actor_critic_loss, maybe_jit, mse_loss, regression_batch

import jaxlearner as jl
from jaxlearner.core.optimizer import clip_gradients, label_params, learning_rate

GRADS = {"a": jnp.asarray([3.0, -4.0]), "b": jnp.asarray([[12.0]])}  # norms 5 and 12; global 13


def test_clip_by_value_bounds_each_element(jit):
    optimizer = jl.Optimizer(optax.sgd(1.0), grad_clip=2.5, grad_clip_by="value")
    clipped = maybe_jit(lambda g: clip_gradients(g, optimizer), jit)(GRADS)
    np.testing.assert_allclose(clipped["a"], [2.5, -2.5])
    np.testing.assert_allclose(clipped["b"], [[2.5]])


def test_clip_by_norm_bounds_each_array(jit):
    optimizer = jl.Optimizer(optax.sgd(1.0), grad_clip=6.0, grad_clip_by="norm")
    clipped = maybe_jit(lambda g: clip_gradients(g, optimizer), jit)(GRADS)
    # "a" has norm 5 <= 6 and is kept; "b" has norm 12 and is scaled by 6 / 12.
    np.testing.assert_allclose(clipped["a"], [3.0, -4.0])
    np.testing.assert_allclose(clipped["b"], [[6.0]], rtol=1e-6)


def test_clip_by_global_norm_bounds_all_together(jit):
    optimizer = jl.Optimizer(optax.sgd(1.0), grad_clip=6.5, grad_clip_by="global_norm")
    clipped = maybe_jit(lambda g: clip_gradients(g, optimizer), jit)(GRADS)
    # Global norm sqrt(9 + 16 + 144) = 13, so everything is halved.
    np.testing.assert_allclose(clipped["a"], [1.5, -2.0], rtol=1e-6)
    np.testing.assert_allclose(clipped["b"], [[6.0]], rtol=1e-6)
    assert float(optax.tree.norm(clipped)) == pytest.approx(6.5, rel=1e-6)


def test_no_clip_is_identity():
    assert clip_gradients(GRADS, jl.Optimizer(optax.sgd(1.0))) is GRADS


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            dict(transform=optax.adam(1e-3), learning_rate=1e-3),
            ValueError,
            "pass the factory instead",
        ),
        (dict(transform=optax.adam), ValueError, "is a factory and needs a learning_rate"),
        (
            dict(transform=optax.adam, learning_rate=1e-3, hyperparams={"beta": 0.9}),
            ValueError,
            "has no argument(s) ['beta']; valid names:",
        ),
        (dict(transform="adam"), TypeError, "must be an optax.GradientTransformation or a factory"),
        (
            dict(transform=optax.adam(1e-3), grad_clip_by="l2"),
            ValueError,
            "grad_clip_by must be one of ('value', 'norm', 'global_norm'); got 'l2'",
        ),
        (
            dict(transform=optax.adam(1e-3), grad_clip=-1.0),
            ValueError,
            "grad_clip must be a positive finite number",
        ),
        (
            dict(transform=optax.adam, learning_rate=[[3, 1e-3]]),
            ValueError,
            "Hyperparameter 'learning_rate': Malformed piecewise schedule",
        ),
    ],
)
def test_optimizer_validation(kwargs, error, message):
    with pytest.raises(error) as raised:
        jl.Optimizer(**kwargs)
    assert message in str(raised.value)


def test_factory_form_stores_learning_rate_in_the_state():
    optimizer = jl.Optimizer(
        optax.adam, learning_rate=[[0, 0.5], [10, 0.0]], hyperparams={"b1": 0.8}
    )
    state = optimizer.build().init({"w": jnp.zeros(2)})
    assert float(learning_rate(state)) == 0.5
    assert float(state.hyperparams["b1"]) == pytest.approx(0.8)
    assert learning_rate(optax.adam(1e-3).init({"w": jnp.zeros(2)})) is None


def test_default_labels_follow_submodule_names():
    params = {"params": {"actor": {"w": 1.0}, "critic": {"w": 2.0, "b": 3.0}}}
    labels = label_params(params, ["actor", "critic"], None, "m")
    assert labels == {"params": {"actor": {"w": "actor"}, "critic": {"w": "critic", "b": "critic"}}}


def test_unplaced_params_raise_with_their_paths():
    params = {"params": {"actor": {"w": 1.0}, "encoder": {"w": 2.0}}}
    with pytest.raises(ValueError) as raised:
        label_params(params, ["actor", "critic"], None, "m")
    assert "['encoder']['w']" in str(raised.value)
    assert "param_labels" in str(raised.value)


def test_custom_labels_are_checked():
    params = {"w": 1.0, "b": 2.0}
    labels = label_params(params, ["x", "y"], lambda p: {"w": "x", "b": "y"}, "m")
    assert labels == {"w": "x", "b": "y"}
    with pytest.raises(ValueError, match="labels \\['z'\\] that name no optimizer"):
        label_params(params, ["x", "y"], lambda p: {"w": "x", "b": "z"}, "m")


def test_labels_single_optimizer():
    assert jax.tree.leaves(label_params({"w": 1.0}, ["default"], None, "m")) == ["default"]


def test_a_plain_optax_optimizer_reports_the_learning_rate_its_state_carries():
    # Not built with jl.Optimizer: optax.inject_hyperparams keeps the rate in the state,
    # inside a chain, optax.MultiSteps or a shared optimizer; a plain adam keeps none.
    schedule = optax.linear_schedule(0.1, 0.0, transition_steps=8)
    injected = optax.chain(optax.clip(1.0), optax.inject_hyperparams(optax.sgd)(schedule))
    every_2 = optax.MultiSteps(optax.inject_hyperparams(optax.adam)(learning_rate=0.03), 2)
    specs = {
        "ac": jl.ModuleSpec(
            ActorCritic(),
            actor_critic_loss,
            optimizers={"actor": injected, "critic": optax.adam(1e-3)},
        ),
        "ms": jl.ModuleSpec(nn.Dense(1), mse_loss, every_2.gradient_transformation()),
        "a": jl.ModuleSpec(nn.Dense(1), mse_loss),
        "b": jl.ModuleSpec(nn.Dense(1), mse_loss),
    }
    shared = {"ab": (optax.inject_hyperparams(optax.sgd)(learning_rate=0.2), ("a", "b"))}
    learner = jl.Learner(specs, minibatch_size=16, shared_optimizers=shared)
    batch = dict.fromkeys(specs, regression_batch())
    _, metrics = learner.update(learner.init(jax.random.key(0), batch), batch)
    # 4 steps; the schedule's rate at the last one (count 3): 0.1 * (1 - 3 / 8).
    np.testing.assert_allclose(metrics["ac"]["learning_rate/actor"], 0.0625, rtol=1e-6)
    assert "learning_rate/critic" not in metrics["ac"]
    np.testing.assert_allclose(metrics["ms"]["learning_rate/default"], 0.03, rtol=1e-6)
    np.testing.assert_allclose(metrics["__all__"]["learning_rate/ab"], 0.2, rtol=1e-6)
