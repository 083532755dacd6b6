"""One optimizer over several modules (RLlib's ``register_optimizer(module_id=ALL_MODULES)``).

Each test compares the learner with a hand-written optax chain over the merged params
``{module_id: params}``: one Adam state and one global-norm clip over all of them. The clip
threshold (0.1) is far below the gradients' global norm (several units), so clipping each
module on its own would give other numbers.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxlearner as jl
from jaxlearner.checkpoint.manager import CheckpointManager
from tests.helpers import assert_trees_close, mse_loss, regression_batch

MODULES = ("encoder", "pi", "vf")
ADAM = jl.Optimizer(optax.adam, learning_rate=1e-2, grad_clip=0.1, grad_clip_by="global_norm")


def reference_chain():
    return optax.chain(optax.clip_by_global_norm(0.1), optax.adam(1e-2))


def encoder_heads(params, batch, apply):
    """Both heads' loss on the shared encoder's features (the batch is the encoder's)."""
    features = nn.tanh(apply["encoder"](params["encoder"], batch["x"]))
    pi = apply["pi"](params["pi"], features)[:, 0]
    vf = apply["vf"](params["vf"], features)[:, 0]
    return jnp.mean((pi - batch["y"]) ** 2) + jnp.mean((vf + batch["y"]) ** 2)


def joint_loss(params, batch, ctx):
    loss = encoder_heads(params, batch["encoder"], {m: ctx[m].apply for m in MODULES})
    return loss, {}


def joint_learner(**options):
    specs = {
        "encoder": jl.ModuleSpec(nn.Dense(4)),
        "pi": jl.ModuleSpec(nn.Dense(1)),
        "vf": jl.ModuleSpec(nn.Dense(1)),
    }
    return jl.Learner(
        specs,
        loss=joint_loss,
        shared_optimizers={"all": jl.SharedOptimizer(ADAM, MODULES)},
        sample_batch=joint_batch(0),
        shuffle=False,
        **options,
    )


def joint_batch(seed):
    batch = regression_batch(size=16, seed=seed)
    return dict.fromkeys(MODULES, batch)


def params_of(state):
    return {m: module.params for m, module in state.modules.items()}


def test_one_adam_and_one_clip_over_three_modules_with_a_joint_loss():
    learner = joint_learner()
    state = learner.init(jax.random.key(0))
    params = params_of(state)
    chain = reference_chain()
    opt_state = chain.init(params)
    models = {m: learner.specs[m].model.apply for m in MODULES}

    @jax.jit
    def reference_step(params, opt_state, batch):
        grads = jax.grad(encoder_heads)(params, batch, models)
        updates, opt_state = chain.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, grads

    for seed in range(3):
        batch = joint_batch(seed)
        state, metrics = learner.update(state, batch)
        params, opt_state, grads = reference_step(params, opt_state, batch["encoder"])
        assert float(metrics["__all__"]["grad_norm/all"]) > 1.0  # so the clip at 0.1 acts
        np.testing.assert_allclose(
            metrics["__all__"]["grad_norm/all"], optax.tree.norm(grads), rtol=1e-5
        )
    assert_trees_close(params_of(state), params)
    assert all(int(state.modules[m].grad_steps) == 3 for m in MODULES)
    assert all(state.modules[m].opt_states == {} for m in MODULES)
    assert float(metrics["pi"]["learning_rate/all"]) == pytest.approx(1e-2)


def test_per_module_losses_share_one_optimizer_beside_a_module_with_its_own():
    specs = {
        "a": jl.ModuleSpec(nn.Dense(1), mse_loss),
        "b": jl.ModuleSpec(nn.Dense(1), mse_loss),
        "c": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1)),
    }
    batch = {m: regression_batch(size=16, seed=i) for i, m in enumerate(specs)}
    learner = jl.Learner(
        specs, shared_optimizers={"ab": (ADAM, ["a", "b"])}, sample_batch=batch, shuffle=False
    )
    state = learner.init(jax.random.key(1))
    params, c_params = {m: state.modules[m].params for m in "ab"}, state.modules["c"].params
    chain, sgd = reference_chain(), optax.sgd(0.1)
    opt_state, sgd_state = chain.init(params), sgd.init(c_params)

    def module_loss(p, m):
        return mse_loss(p, batch[m], jl.LossContext(m, specs[m].model.apply, None, {}, {}, {}))[0]

    @jax.jit
    def reference_step(params, opt_state, c_params, sgd_state):
        grads = {m: jax.grad(module_loss)(params[m], m) for m in "ab"}
        updates, opt_state = chain.update(grads, opt_state, params)
        c_updates, sgd_state = sgd.update(jax.grad(module_loss)(c_params, "c"), sgd_state)
        return (
            optax.apply_updates(params, updates),
            opt_state,
            optax.apply_updates(c_params, c_updates),
            sgd_state,
        )

    for _ in range(2):
        state, _ = learner.update(state, batch)
        params, opt_state, c_params, sgd_state = reference_step(
            params, opt_state, c_params, sgd_state
        )
    assert_trees_close({m: state.modules[m].params for m in "ab"}, params)
    assert_trees_close(state.modules["c"].params, c_params)


def test_the_three_stages_step_the_shared_optimizer_as_update_does():
    learner = joint_learner()
    state = learner.init(jax.random.key(0))
    batch = joint_batch(0)
    grads, metrics = learner.compute_gradients(state, batch)
    staged = learner.apply_gradients(
        state, learner.postprocess_gradients(state, grads), metrics=metrics
    )
    updated, _ = learner.update(state, batch)
    assert_trees_close(params_of(staged), params_of(updated))
    assert_trees_close(staged.shared_opt_states, updated.shared_opt_states)


def test_a_checkpoint_round_trip_keeps_the_shared_state(tmp_path):
    learner = joint_learner()
    state = learner.init(jax.random.key(0))
    state, metrics = learner.update(state, joint_batch(1))
    with CheckpointManager(tmp_path / "run") as ckpt:
        ckpt.save(1, state, learner, metrics=metrics)
        metadata = ckpt.metadata(1)
    restored = CheckpointManager(tmp_path / "run").restore(joint_learner())
    assert jax.tree.structure(restored) == jax.tree.structure(state)
    assert_trees_close(restored.shared_opt_states, state.shared_opt_states, rtol=0, atol=0)
    assert metadata["learner"]["shared_optimizers"]["all"]["module_ids"] == list(MODULES)
    next_restored, _ = learner.update(restored, joint_batch(2))
    next_state, _ = learner.update(state, joint_batch(2))
    assert_trees_close(params_of(next_restored), params_of(next_state), rtol=0, atol=0)


def test_all_devices_match_one_device():
    learner = joint_learner(minibatch_size=8)
    placed = learner.on("all")
    assert placed.placement.num_devices == len(jax.devices()) > 1
    state = learner.init(jax.random.key(0))
    placed_state = placed.init(jax.random.key(0))
    for seed in range(2):
        state, _ = learner.update(state, joint_batch(seed))
        placed_state, _ = placed.update(placed_state, joint_batch(seed))
    assert_trees_close(params_of(placed_state), params_of(state))
    assert_trees_close(placed_state.shared_opt_states, state.shared_opt_states)


def three_specs(own=()):
    return {
        m: jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1) if m in own else None)
        for m in ("a", "b", "c")
    }


@pytest.mark.parametrize(
    ("shared", "own", "options", "error", "match"),
    [
        ({"x": (ADAM, ["a", "b", "d"])}, (), {}, ValueError, r"names unknown module\(s\) \['d'\]"),
        (
            {"x": (ADAM, ["a", "b"]), "y": (ADAM, ["b", "c"])},
            (),
            {},
            ValueError,
            "Module 'b' is claimed by two shared optimizers, 'x' and 'y'",
        ),
        ({"x": (ADAM, [])}, (), {}, ValueError, "module_ids is empty"),
        ({"x": (ADAM, "abc")}, (), {}, TypeError, "must be a list or tuple of module ids"),
        ({"x": (ADAM, ["a", "a"])}, (), {}, ValueError, r"names \['a'\] more than once"),
        (
            {"x": (ADAM, ["a", "b", "c"])},
            ("b",),
            {},
            ValueError,
            r"\['b'\] are in shared optimizer 'x' and have optimizers of their own",
        ),
        ({"x": (ADAM, ["a", "b"])}, (), {}, ValueError, "Module 'c' has no optimizer"),
        (
            {"x": (ADAM, ["a", "b"])},
            ("c",),
            {"modules_to_train": {"a", "c"}},
            ValueError,
            r"updates \['a', 'b'\] together, but this step trains only \['a'\]",
        ),
        ({"x": ("adam", ["a"])}, (), {}, TypeError, "must be a jl.Optimizer"),
        (["a", "b"], (), {}, TypeError, "shared_optimizers must be a mapping"),
    ],
)
def test_bad_input_is_refused_before_compiling(shared, own, options, error, match):
    with pytest.raises(error, match=match):
        jl.Learner(three_specs(own), shared_optimizers=shared, **options)


def test_a_batch_with_part_of_a_shared_optimizers_modules_is_refused():
    learner = jl.Learner(three_specs(("c",)), shared_optimizers={"x": (ADAM, ["a", "b"])})
    batch = {m: regression_batch(size=8, seed=i) for i, m in enumerate("abc")}
    state = learner.init(jax.random.key(0), batch)
    with pytest.raises(ValueError, match=r"trains only \['a'\]"):
        learner.update(state, {"a": batch["a"], "c": batch["c"]})
