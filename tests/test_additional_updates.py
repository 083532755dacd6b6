"""Non-gradient updates: hand-derived values, with and without jit, and inside the learner."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import assert_trees_close, maybe_jit, mse_loss, regression_batch, tree_equal

import jaxlearner as jl


def module_state(params, extra, hyperparams, grad_steps=0, env_steps=0):
    return jl.ModuleState(
        params=params,
        opt_states={},
        extra=extra,
        hyperparams=hyperparams,
        grad_steps=jnp.asarray(grad_steps, jnp.int32),
        env_steps=jnp.asarray(env_steps, jnp.int32),
    )


def test_polyak_update_values(jit):
    update = jl.polyak_update(tau=0.1)
    state = module_state(
        {"w": jnp.asarray([1.0, 2.0])},
        {"target_params": {"w": jnp.asarray([0.0, 0.0])}},
        {"tau": jnp.asarray(0.1)},
    )
    new = maybe_jit(update.fn, jit)(state, {})
    # 0.1 * params + 0.9 * target = [0.1, 0.2].
    np.testing.assert_allclose(new.extra["target_params"]["w"], [0.1, 0.2], rtol=1e-6)
    assert update.after == "grad_step"
    init = update.init_extra({"w": jnp.asarray([1.0, 2.0])})
    np.testing.assert_array_equal(init["target_params"]["w"], [1.0, 2.0])


@pytest.mark.parametrize(("env_steps", "copied"), [(99, False), (100, True), (250, True)])
def test_periodic_copy_values(jit, env_steps, copied):
    update = jl.periodic_copy(100)
    state = module_state(
        {"w": jnp.asarray([1.0])},
        {
            "target_params": {"w": jnp.asarray([0.0])},
            "target_params_last_update": jnp.asarray(0, jnp.int32),
        },
        {},
        env_steps=env_steps,
    )
    new = maybe_jit(update.fn, jit)(state, {})
    assert float(new.extra["target_params"]["w"][0]) == (1.0 if copied else 0.0)
    assert int(new.extra["target_params_last_update"]) == (env_steps if copied else 0)


@pytest.mark.parametrize(
    ("kl", "factor"),
    [(0.05, 1.5), (0.021, 1.5), (0.02, 1.0), (0.01, 1.0), (0.005, 1.0), (0.004, 0.5)],
)
def test_adaptive_kl_coeff_values(jit, kl, factor):
    # RLlib: kl > 2 * target -> x1.5; kl < 0.5 * target -> x0.5; target 0.01.
    update = jl.adaptive_kl_coeff(kl_coeff=0.2, kl_target=0.01)
    state = module_state({}, {"kl_coeff": jnp.asarray(0.2)}, {"kl_target": jnp.asarray(0.01)})
    new = maybe_jit(update.fn, jit)(state, {"mean_kl": jnp.asarray(kl)})
    assert float(new.extra["kl_coeff"]) == pytest.approx(0.2 * factor)


def test_additional_update_validation():
    with pytest.raises(ValueError, match="tau must lie in"):
        jl.polyak_update(tau=1.5)
    with pytest.raises(ValueError, match="period must be a positive int"):
        jl.periodic_copy(0)
    with pytest.raises(ValueError, match="counter must be one of"):
        jl.periodic_copy(10, counter="updates")
    with pytest.raises(ValueError, match="after must be one of"):
        jl.AdditionalUpdate(lambda m, x: m, after="epoch")
    with pytest.raises(TypeError, match="must be a jl.AdditionalUpdate or a callable"):
        jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1), additional_updates=[3])


def test_polyak_and_periodic_updates_inside_the_learner():
    spec = jl.ModuleSpec(
        nn.Dense(1),
        mse_loss,
        optax.sgd(0.05),
        additional_updates=[
            jl.polyak_update(tau=0.5, target="polyak"),
            jl.periodic_copy(128, counter="env_steps", target="hard"),
        ],
    )
    learner = jl.Learner({"m": spec}, minibatch_size=32, shuffle=False)
    batch = regression_batch()
    state = learner.init(jax.random.key(0), batch)
    initial = state.modules["m"].params
    assert tree_equal(state.modules["m"].extra["polyak"], initial)
    assert float(state.modules["m"].hyperparams["tau"]) == 0.5

    state1, _ = learner.update(state, batch)
    # Two gradient steps p1, p2 with a polyak step after each: t = 0.25 p0 + 0.25 p1 + 0.5 p2.
    p1 = jax.tree.map(
        lambda p, g: p - 0.05 * g,
        initial,
        jax.grad(lambda p: mse_loss(p, jax.tree.map(lambda x: x[:32], batch), _ctx())[0])(initial),
    )
    p2 = state1.modules["m"].params
    expected = jax.tree.map(lambda a, b, c: 0.25 * a + 0.25 * b + 0.5 * c, initial, p1, p2)
    assert_trees_close(state1.modules["m"].extra["polyak"], expected)
    # 64 env steps < 128: the hard target has not been copied yet.
    assert tree_equal(state1.modules["m"].extra["hard"], initial)
    state2, metrics = learner.update(state1, batch)
    assert tree_equal(state2.modules["m"].extra["hard"], state2.modules["m"].params)
    assert int(metrics["m"]["extra/hard_last_update"]) == 128


def _ctx():
    return jl.LossContext("m", nn.Dense(1).apply, jax.random.key(0), {}, {}, {})


def test_adaptive_kl_inside_the_learner_reads_the_updates_mean_kl():
    def loss(params, batch, ctx):
        mse, _ = mse_loss(params, batch, ctx)
        return mse + ctx.extra["kl_coeff"] * 0.0, {"mean_kl": jnp.asarray(1.0)}

    spec = jl.ModuleSpec(
        nn.Dense(1), loss, optax.sgd(0.01), additional_updates=[jl.adaptive_kl_coeff(0.2, 0.01)]
    )
    learner = jl.Learner({"m": spec}, minibatch_size=16, num_epochs=2)
    state = learner.init(jax.random.key(0), regression_batch())
    for expected in (0.3, 0.45):
        state, metrics = learner.update(state, regression_batch())
        # Once per update (not per step): 0.2 -> 0.3 -> 0.45.
        assert float(metrics["m"]["extra/kl_coeff"]) == pytest.approx(expected)


def test_missing_metric_for_adaptive_kl_is_named():
    spec = jl.ModuleSpec(
        nn.Dense(1), mse_loss, optax.sgd(0.01), additional_updates=[jl.adaptive_kl_coeff()]
    )
    learner = jl.Learner({"m": spec})
    state = learner.init(jax.random.key(0), regression_batch())
    with pytest.raises(KeyError, match=r"reads metrics\['mean_kl'\], which the loss does not"):
        learner.update(state, regression_batch())


def test_custom_module_and_learner_level_updates():
    def count_updates(module, metrics):
        return module.replace(extra={**module.extra, "seen": module.extra["seen"] + 1})

    def count_steps(module, metrics):
        return module.replace(extra={**module.extra, "steps": module.extra["steps"] + 1})

    def zero_key_counter(state, metrics):
        return state.replace(skipped_steps=state.skipped_steps + 100)

    spec = jl.ModuleSpec(
        nn.Dense(1),
        mse_loss,
        optax.sgd(0.01),
        init_extra=lambda params: {"seen": 0, "steps": 0},
        additional_updates=[count_updates, jl.AdditionalUpdate(count_steps, after="grad_step")],
    )
    learner = jl.Learner({"m": spec}, minibatch_size=16, additional_updates=[zero_key_counter])
    state = learner.init(jax.random.key(0), regression_batch())
    state, _ = learner.update(state, regression_batch())
    assert int(state.modules["m"].extra["seen"]) == 1
    assert int(state.modules["m"].extra["steps"]) == 4
    assert int(state.skipped_steps) == 100


def test_spec_hyperparams_override_an_update_default():
    spec = jl.ModuleSpec(
        nn.Dense(1),
        mse_loss,
        optax.sgd(0.01),
        additional_updates=[jl.polyak_update(tau=0.005)],
        hyperparams={"tau": [[0, 1.0], [100, 0.0]]},
    )
    learner = jl.Learner({"m": spec})
    state = learner.init(jax.random.key(0), regression_batch())
    assert float(state.modules["m"].hyperparams["tau"]) == 1.0
    state, _ = learner.update(state, regression_batch())
    # tau was 1.0 at the step: the target equals the new params.
    assert tree_equal(state.modules["m"].extra["target_params"], state.modules["m"].params)
