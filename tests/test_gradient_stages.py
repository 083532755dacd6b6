"""RLlib's three stages: compute_gradients, postprocess_gradients, apply_gradients.

compute -> postprocess -> apply on a batch must take the step ``update`` takes with one
epoch of one unshuffled minibatch; gradients of half batches averaged must give the
full-batch step (the losses here are means over rows); nothing compiles twice.
"""

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import (
    ActorCritic,
    actor_critic_loss,
    assert_trees_close,
    maybe_jit,
    mse_loss,
    pendulum_replay_batch,
    regression_batch,
    tree_equal,
)

import jaxlearner as jl

PENDULUM = gym.make("Pendulum-v1")


def stages(learner, state, batch, env_steps):
    """The three stages, as a user of the Learner's methods calls them."""
    grads, metrics = learner.compute_gradients(state, batch)
    grads = learner.postprocess_gradients(state, grads)
    return learner.apply_gradients(state, grads, metrics=metrics, env_steps=env_steps), metrics


def assert_same_step(stepped, updated):
    """Counters, key and extras exactly; params and optimizer states to float rounding."""
    assert tree_equal(
        (stepped.key, stepped.updates, stepped.grad_steps, stepped.skipped_steps),
        (updated.key, updated.updates, updated.grad_steps, updated.skipped_steps),
    )
    for m, module in updated.modules.items():
        mine = stepped.modules[m]
        assert tree_equal((mine.grad_steps, mine.env_steps), (module.grad_steps, module.env_steps))
        assert_trees_close(mine.params, module.params, rtol=1e-6, atol=1e-7)
        assert_trees_close(mine.opt_states, module.opt_states, rtol=1e-6, atol=1e-7)
        assert_trees_close(mine.extra, module.extra, rtol=1e-6, atol=1e-7)
        assert_trees_close(mine.hyperparams, module.hyperparams)


def count_kl_like(module, metrics):
    """An after-update additional update that reads the step's metrics."""
    extra = {**module.extra, "mse_sum": module.extra["mse_sum"] + metrics["mse"]}
    return module.replace(extra=extra)


def test_compute_postprocess_apply_equals_one_update(jit):
    batch = regression_batch()
    spec = jl.ModuleSpec(
        nn.Dense(1),
        mse_loss,
        jl.Optimizer(optax.adam, learning_rate=[[0, 1e-2], [64, 1e-3]], grad_clip=0.5),
        hyperparams={"coeff": [[0, 1.0], [128, 0.0]]},
        additional_updates=[
            jl.AdditionalUpdate(count_kl_like, init_extra=lambda params: {"mse_sum": 0.0})
        ],
    )
    learner = jl.Learner({"policy": spec}, shuffle=False, sample_batch=batch, jit=jit)
    state = learner.init(jax.random.key(0))
    stepped, updated = state, state
    for seed in range(3):  # the schedules move on: 64 env steps per update
        batch = regression_batch(seed=seed)
        stepped, metrics = stages(learner, stepped, batch, env_steps=64)
        updated, update_metrics = learner.update(updated, batch)
        assert_same_step(stepped, updated)
        for name, value in metrics["policy"].items():
            np.testing.assert_allclose(value, update_metrics["policy"][name], rtol=1e-6)
    assert int(stepped.updates) == int(stepped.grad_steps) == 3
    assert int(stepped.modules["policy"].env_steps) == 3 * 64
    # The clipped step: adam moved each param by about the rate, so the clip held.
    assert float(metrics["policy"]["grad_norm/default"]) > 0.5
    assert "learning_rate/default" in update_metrics["policy"]


def test_mean_of_two_half_batch_gradients_is_the_full_batch_sgd_step(jit):
    # The mse is a mean over rows, so the gradient of 64 rows is the mean of the
    # gradients of rows 0..31 and 32..63; SGD then takes the same step.
    batch = regression_batch()
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.05))
    learner = jl.Learner({"policy": spec}, shuffle=False, sample_batch=batch, jit=jit)
    state = learner.init(jax.random.key(0))
    halves = [jax.tree.map(lambda x, s=s: x[s : s + 32], batch) for s in (0, 32)]
    grads = [learner.compute_gradients(state, half)[0] for half in halves]
    mean = jax.tree.map(lambda a, b: (a + b) / 2, *grads)
    accumulated = learner.apply_gradients(state, mean, env_steps=64)
    updated, _ = learner.update(state, batch)
    assert_trees_close(accumulated.modules, updated.modules, rtol=1e-5, atol=1e-6)
    full, _ = learner.compute_gradients(state, batch)
    assert_trees_close(mean, full, rtol=1e-5, atol=1e-6)


def test_sac_actor_critic_and_temperature_take_the_update_step(jit):
    config = {"hidden_sizes": (8,), "num_steps_sampled_before_learning_starts": 0}
    config["grad_clip"] = 0.05  # small enough that every optimizer clips
    learner = jl.algorithms.build("sac", PENDULUM.observation_space, PENDULUM.action_space, config)
    learner = learner.learner.replace(jit=jit)
    state = learner.init(jax.random.key(0))
    stepped, updated = state, state
    for seed in range(2):
        stepped, metrics = stages(learner, stepped, pendulum_replay_batch(seed=seed), env_steps=16)
        updated, _ = learner.update(updated, pendulum_replay_batch(seed=seed))
        assert_same_step(stepped, updated)  # the polyak step on the target critics included
    # Each optimizer clipped its own leaves to global norm 0.05; its pre-clip norm is larger.
    grads, metrics = learner.compute_gradients(state, pendulum_replay_batch())
    clipped = learner.postprocess_gradients(state, grads)["default_policy"]["params"]
    for name in ("actor", "critic", "temperature"):
        assert float(metrics["default_policy"][f"grad_norm/{name}"]) > 0.05
        np.testing.assert_allclose(optax.tree.norm(clipped[name]), 0.05, rtol=1e-5)


def test_two_named_optimizers_clip_their_own_params_only():
    # actor clips by value at 0.01, critic does not clip: its gradient comes back as it was.
    batch = regression_batch()
    spec = jl.ModuleSpec(
        ActorCritic(),
        actor_critic_loss,
        optimizers={
            "actor": jl.Optimizer(optax.sgd(0.1), grad_clip=0.01, grad_clip_by="value"),
            "critic": optax.sgd(0.1),
        },
    )
    learner = jl.Learner({"ac": spec}, sample_batch=batch)
    state = learner.init(jax.random.key(0))
    grads, _ = learner.compute_gradients(state, batch)
    clipped = learner.postprocess_gradients(state, grads)["ac"]["params"]
    raw = grads["ac"]["params"]
    assert tree_equal(clipped["critic"], raw["critic"])
    assert_trees_close(
        clipped["actor"], jax.tree.map(lambda g: jnp.clip(g, -0.01, 0.01), raw["actor"])
    )
    assert float(jnp.abs(raw["actor"]["kernel"]).max()) > 0.01


def test_modules_to_train_get_gradients_and_the_others_stay_bit_identical(jit):
    a, b = regression_batch(), regression_batch(seed=4)
    learner = jl.Learner(
        {
            "a": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.adam(1e-2)),
            "b": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1)),
        },
        modules_to_train={"a"},
        shuffle=False,
        sample_batch={"a": a, "b": b},
        jit=jit,
    )
    state = learner.init(jax.random.key(0))
    grads, metrics = learner.compute_gradients(state, {"a": a, "b": b})
    assert set(grads) == {"a"} and set(metrics) == {"a", "__all__"}
    stepped = learner.apply_gradients(state, grads, metrics=metrics, env_steps=64)
    updated, _ = learner.update(state, {"a": a, "b": b})
    assert_same_step(stepped, updated)
    assert tree_equal(stepped.modules["b"], state.modules["b"])
    with pytest.raises(ValueError, match=r"module 'b', which is not trained; modules_to_train"):
        learner.apply_gradients(state, {"b": grads["a"]})


def test_the_pure_stages_under_jit_and_eager(jit):
    # learner.gradient_stages are plain functions of (state, batch): jit them or not.
    batch = regression_batch()
    optimizer = jl.Optimizer(optax.sgd, learning_rate=0.1, grad_clip=1.0)
    learner = jl.Learner({"policy": jl.ModuleSpec(nn.Dense(1), mse_loss, optimizer)}, shuffle=False)
    state = learner.init(jax.random.key(0), batch)
    pure = learner.gradient_stages

    def step(state, batch):
        grads, metrics = pure.compute(state, {"policy": batch})
        return pure.apply(state, pure.postprocess(state, grads), metrics, {"policy": 64})

    stepped = maybe_jit(step, jit)(state, batch)
    updated, _ = learner.update(state, batch)
    assert_same_step(stepped, updated)


def test_calling_the_stages_again_compiles_nothing():
    traces = []

    def loss(params, batch, ctx):
        traces.append("loss")
        return actor_critic_loss(params, batch, ctx)

    def labels(params):  # each leaf's optimizer: the submodule's name, params/NAME/...
        traces.append("labels")
        return jax.tree_util.tree_map_with_path(lambda path, _: path[1].key, params)

    clipped = jl.Optimizer(optax.adam, learning_rate=1e-2, grad_clip=0.1)
    spec = jl.ModuleSpec(
        ActorCritic(), loss, optimizers={"actor": clipped, "critic": clipped}, param_labels=labels
    )
    learner = jl.Learner({"ac": spec}, sample_batch=regression_batch())
    state = learner.init(jax.random.key(0))
    state, _ = stages(learner, state, regression_batch(seed=1), env_steps=64)
    seen = len(traces)
    for seed in range(2, 5):  # same shapes: the loss and labels are not traced again
        state, _ = stages(learner, state, regression_batch(seed=seed), env_steps=64)
    assert len(traces) == seen
    assert int(state.updates) == 4


def test_on_all_devices_the_stages_take_the_single_device_step():
    # learner.on("all"): the state replicated over the 8 fake devices, the batch split.
    batch = regression_batch()
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, jl.Optimizer(optax.adam, learning_rate=1e-2))
    learner = jl.Learner({"policy": spec}, shuffle=False, sample_batch=batch)
    placed = learner.on("all")
    state = learner.init(jax.random.key(0))
    stepped, _ = stages(placed, placed.placement.put(state), batch, env_steps=64)
    single, _ = stages(learner, state, batch, env_steps=64)
    assert_same_step(placed.placement.get(stepped), single)
    assert jl.make_gradient_stages(learner.specs, learner.config).compute is not None
