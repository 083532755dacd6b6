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


def _kl_learner():
    outside = jl.adaptive_kl_coeff(0.2, 0.01, metric="sampled_kl", after="additional_update")
    specs = {
        "policy": jl.ModuleSpec(
            nn.Dense(1), mse_loss, optax.sgd(0.01), additional_updates=[outside]
        ),
        "critic": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.01)),
    }
    learner = jl.Learner(specs)
    return learner, learner.init(jax.random.key(0), {m: regression_batch() for m in specs})


def test_additional_update_runs_on_a_kl_sampled_outside_the_learner():
    learner, state = _kl_learner()
    # RLlib: learner_group.additional_update(module_ids_to_update=["policy"], sampled_kl_values=...)
    high = learner.additional_update(state, module_ids=["policy"], sampled_kl=0.05)
    low = learner.additional_update(high, sampled_kl=np.float32(0.001))  # every module with one
    # 0.05 > 2 * 0.01 multiplies by 1.5; 0.001 < 0.5 * 0.01 halves: 0.2 -> 0.3 -> 0.15.
    assert float(high.modules["policy"].extra["kl_coeff"]) == pytest.approx(0.3)
    assert float(low.modules["policy"].extra["kl_coeff"]) == pytest.approx(0.15)
    assert float(state.modules["policy"].extra["kl_coeff"]) == pytest.approx(0.2)  # pure
    assert tree_equal(high.modules["critic"], state.modules["critic"])

    @jax.jit
    def adapt(state, kl):  # jittable, with a traced value
        return learner.additional_update(state, module_ids=["policy"], sampled_kl=kl)

    assert tree_equal(adapt(state, 0.05), high)
    eager = learner.replace(jit=False).additional_update(state, sampled_kl=0.05)
    assert tree_equal(eager, high)
    # It is not one of the update's own: an update leaves the coefficient as it was.
    _, metrics = learner.update(high, {"policy": regression_batch()})
    assert float(metrics["policy"]["extra/kl_coeff"]) == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (dict(module_ids=["nope"], sampled_kl=0.1), KeyError, r"unknown module id 'nope'"),
        (dict(module_ids="policy", sampled_kl=0.1), TypeError, r"did you mean \['policy'\]"),
        (dict(module_ids=["critic"]), ValueError, r"'critic' has no after='additional_update'"),
        (dict(sampled_kl=0.1, timestep=5), TypeError, r"\['timestep'\] that no additional upd"),
        (dict(module_ids=["policy"]), TypeError, r"takes \['sampled_kl'\]; missing"),
        (dict(sampled_kl="high"), TypeError, r"value 'sampled_kl' holds str 'high'"),
    ],
)
def test_additional_update_refuses_bad_input_before_compiling(call, error, match):
    traces = []

    def set_kl(module, values):
        traces.append(values)
        return module.replace(extra={**module.extra, "kl": values["sampled_kl"]})

    outside = jl.AdditionalUpdate(
        set_kl, "additional_update", lambda params: {"kl": 0.0}, takes=("sampled_kl",)
    )
    policy = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1), additional_updates=[outside])
    critic = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))
    learner = jl.Learner({"policy": policy, "critic": critic})
    state = learner.init(jax.random.key(0), {m: regression_batch() for m in learner.module_ids})
    with pytest.raises(error, match=match):
        learner.additional_update(state, **call)
    assert traces == []  # refused before anything was traced


def test_additional_update_declarations_are_checked():
    with pytest.raises(ValueError, match="only learner.additional_update passes"):
        jl.AdditionalUpdate(lambda m, v: m, after="update", takes=("kl",))
    with pytest.raises(TypeError, match=r"did you mean \('kl',\)"):
        jl.AdditionalUpdate(lambda m, v: m, after="additional_update", takes="kl")
    plain = jl.Learner({"m": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.01))})
    state = plain.init(jax.random.key(0), regression_batch())
    with pytest.raises(ValueError, match="no module has an additional update to run"):
        plain.additional_update(state, kl=0.1)


def test_update_start_runs_before_the_gradient_steps_and_the_loss_sees_it():
    def loss(params, batch, ctx):
        mse, _ = mse_loss(params, batch, ctx)
        return mse, {"scale_seen": ctx.extra["scale"]}

    def before_gradient_based_update(module, values):
        extra = {"scale": module.extra["scale"] * 2.0, "env_steps_seen": values["env_steps"]}
        return module.replace(extra={**module.extra, **extra})

    spec = jl.ModuleSpec(
        nn.Dense(1),
        loss,
        optax.sgd(0.01),
        init_extra=lambda params: {"scale": jnp.float32(1.0), "env_steps_seen": jnp.int32(0)},
        additional_updates=[
            jl.AdditionalUpdate(before_gradient_based_update, after="update_start")
        ],
    )
    learner = jl.Learner({"m": spec}, minibatch_size=16)
    state = learner.init(jax.random.key(0), regression_batch())
    state, metrics = learner.update(state, regression_batch(), env_steps=100)
    # Once per update, before its 4 steps: every step's loss saw 2.0, not 1.0 or 16.0.
    assert float(metrics["m"]["scale_seen"]) == 2.0
    assert int(state.modules["m"].extra["env_steps_seen"]) == 100
    # compute_gradients is the first step of an update without this stage: it sees 2.0 again.
    _, step_metrics = learner.compute_gradients(state, regression_batch())
    assert float(step_metrics["m"]["scale_seen"]) == 2.0
