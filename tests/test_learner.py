"""The Learner's update against hand-written optax loops, schedules, clipping, retracing."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import (
    ActorCritic,
    actor_critic_loss,
    assert_trees_close,
    mse_loss,
    regression_batch,
    tree_equal,
)

import jaxlearner as jl

MINIBATCH, EPOCHS, UPDATES = 16, 2, 3


def reference_loop(params, batch, transform, loss_of_params, updates=UPDATES):
    """The same math as a plain optax loop: in-order minibatches, no shuffling."""
    opt_state = transform.init(params)
    size = batch["x"].shape[0]
    for _ in range(updates):
        for _ in range(EPOCHS):
            for start in range(0, size - MINIBATCH + 1, MINIBATCH):
                minibatch = jax.tree.map(lambda x, s=start: x[s : s + MINIBATCH], batch)
                grads = jax.grad(loss_of_params)(params, minibatch)
                step, opt_state = transform.update(grads, opt_state, params)
                params = optax.apply_updates(params, step)
    return params, opt_state


def dense_mse(params, batch):
    prediction = nn.Dense(1).apply(params, batch["x"])[:, 0]
    return jnp.mean((prediction - batch["y"]) ** 2)


def make_learner(optimizer, jit=True, **kwargs):
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optimizer)
    options = dict(minibatch_size=MINIBATCH, num_epochs=EPOCHS, shuffle=False, jit=jit)
    return jl.Learner({"policy": spec}, **{**options, **kwargs})


def run(learner, batch, updates=UPDATES, key=0):
    state = learner.init(jax.random.key(key), batch)
    initial = state
    for _ in range(updates):
        state, metrics = learner.update(state, batch)
    return initial, state, metrics


def test_update_equals_hand_written_optax_loop(jit):
    batch = regression_batch()
    transform = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-2))
    learner = make_learner(jl.Optimizer(optax.adam(1e-2), grad_clip=1.0), jit=jit)
    initial, state, _ = run(learner, batch)
    params, opt_state = reference_loop(
        initial.modules["policy"].params, batch, transform, dense_mse
    )
    assert_trees_close(state.modules["policy"].params, params)
    # The named optimizer is one optax value, chain(clip, adam): its state is the chain's.
    assert_trees_close(state.modules["policy"].opt_states["default"], opt_state)
    # 64 rows / 16 per minibatch x 2 epochs x 3 updates.
    assert int(state.grad_steps) == int(state.modules["policy"].grad_steps) == 24
    assert int(state.modules["policy"].env_steps) == 3 * 64


def test_eager_mode_equals_jit():
    batch = regression_batch()
    optimizer = jl.Optimizer(optax.adam, learning_rate=1e-2, grad_clip=0.5)
    _, jitted, jitted_metrics = run(make_learner(optimizer, shuffle=True), batch)
    _, eager, eager_metrics = run(make_learner(optimizer, shuffle=True, jit=False), batch)
    assert_trees_close(jitted.modules, eager.modules)
    assert_trees_close(jitted_metrics, eager_metrics)


def test_eager_mode_runs_the_loss_on_concrete_arrays():
    seen = []

    def loss(params, batch, ctx):
        seen.append(isinstance(batch["x"], jax.core.Tracer))
        return mse_loss(params, batch, ctx)

    learner = jl.Learner(
        {"policy": jl.ModuleSpec(nn.Dense(1), loss, optax.sgd(0.1))},
        minibatch_size=32,
        jit=False,
    )
    state = learner.init(jax.random.key(0), regression_batch())
    seen.clear()
    learner.update(state, regression_batch())
    assert seen and not any(seen)  # a print or breakpoint in the loss shows real values


def test_input_state_is_untouched():
    batch = regression_batch()
    learner = make_learner(optax.adam(1e-2))
    state = learner.init(jax.random.key(0), batch)
    copy = jax.tree.map(np.array, state.modules)
    new_state, _ = learner.update(state, batch)
    assert tree_equal(jax.tree.map(np.array, state.modules), copy)
    assert not tree_equal(new_state.modules["policy"].params, state.modules["policy"].params)


def test_update_compiles_once_for_same_shaped_batches():
    traces = []

    def loss(params, batch, ctx):
        traces.append(1)
        return mse_loss(params, batch, ctx)

    learner = jl.Learner(
        {"policy": jl.ModuleSpec(nn.Dense(1), loss, optax.adam(1e-3))}, minibatch_size=16
    )
    state = learner.init(jax.random.key(0), regression_batch())
    traces.clear()  # init traces the loss once to find the model's input
    state, _ = learner.update(state, regression_batch(seed=1))
    assert len(traces) == 1
    for seed in range(2, 7):
        state, _ = learner.update(state, regression_batch(seed=seed), env_steps=seed * 10)
    assert len(traces) == 1
    # A new batch size is a new shape: exactly one more trace.
    learner.update(state, regression_batch(size=32))
    assert len(traces) == 2


def test_two_modules_with_different_optimizers_match_their_own_loops(jit):
    batch = regression_batch()
    other = regression_batch(seed=5)
    learner = jl.Learner(
        {
            "a": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.adam(1e-2)),
            "b": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.05, momentum=0.9)),
        },
        minibatch_size=MINIBATCH,
        num_epochs=EPOCHS,
        shuffle=False,
        jit=jit,
    )
    state = learner.init(jax.random.key(0), {"a": batch, "b": other})
    initial = state
    for _ in range(UPDATES):
        state, metrics = learner.update(state, {"a": batch, "b": other})
    params_a, _ = reference_loop(initial.modules["a"].params, batch, optax.adam(1e-2), dense_mse)
    params_b, _ = reference_loop(
        initial.modules["b"].params, other, optax.sgd(0.05, momentum=0.9), dense_mse
    )
    assert_trees_close(state.modules["a"].params, params_a)
    assert_trees_close(state.modules["b"].params, params_b)
    assert set(metrics) == {"a", "b", "__all__"}
    np.testing.assert_allclose(
        metrics["__all__"]["total_loss"],
        metrics["a"]["total_loss"] + metrics["b"]["total_loss"],
        rtol=1e-6,
    )


def test_one_module_with_two_named_optimizers(jit):
    batch = regression_batch()
    spec = jl.ModuleSpec(
        ActorCritic(),
        actor_critic_loss,
        optimizers={"actor": optax.adam(1e-2), "critic": optax.sgd(0.1)},
    )
    learner = jl.Learner(
        {"ac": spec}, minibatch_size=MINIBATCH, num_epochs=EPOCHS, shuffle=False, jit=jit
    )
    state = learner.init(jax.random.key(0), batch)
    initial = state.modules["ac"].params
    for _ in range(UPDATES):
        state, metrics = learner.update(state, batch)

    def loss_of_params(params, minibatch):
        actor, critic = ActorCritic().apply(params, minibatch["x"])
        return jnp.mean((actor - minibatch["y"]) ** 2) + jnp.mean((critic + minibatch["y"]) ** 2)

    labels = lambda params: {"params": {"actor": "actor", "critic": "critic"}}
    transform = optax.multi_transform({"actor": optax.adam(1e-2), "critic": optax.sgd(0.1)}, labels)
    params, reference_state = reference_loop(initial, batch, transform, loss_of_params)
    assert_trees_close(state.modules["ac"].params, params)
    opt_states = state.modules["ac"].opt_states
    # The two named optimizers are one optax.partition; its inner states, by name (the
    # reference's prefix labels mask whole subtrees, so compare the arrays).
    reference_states = dict(reference_state.inner_states)
    assert_trees_close(jax.tree.leaves(opt_states), jax.tree.leaves(reference_states))
    assert set(opt_states) == {"actor", "critic"}
    # The actor's Adam moments exist only for actor params (optax.masked state).
    mu = opt_states["actor"].inner_state[0].mu["params"]
    assert isinstance(mu["critic"]["kernel"], optax.MaskedNode)
    assert mu["actor"]["kernel"].shape == (3, 1)
    assert {"grad_norm/actor", "grad_norm/critic"} <= set(metrics["ac"])


def test_per_optimizer_losses_follow_their_own_gradients(jit):
    batch = regression_batch()

    def loss(params, batch, ctx):
        actor, critic = ctx.apply(params, batch["x"])
        # The actor term also depends on the critic's output; with a per-optimizer loss the
        # critic must ignore it (as SAC's critic ignores the actor loss).
        actor_loss = jnp.mean((actor - batch["y"]) ** 2) + jnp.mean(critic**2)
        critic_loss = jnp.mean((critic + batch["y"]) ** 2)
        return {"actor": actor_loss, "critic": critic_loss}, {}

    spec = jl.ModuleSpec(
        ActorCritic(), loss, optimizers={"actor": optax.sgd(0.1), "critic": optax.sgd(0.1)}
    )
    learner = jl.Learner({"ac": spec}, shuffle=False, jit=jit)
    state = learner.init(jax.random.key(0), batch)
    new_state, metrics = learner.update(state, batch)
    params = state.modules["ac"].params

    def term(name):
        def f(p):
            actor, critic = ActorCritic().apply(p, batch["x"])
            if name == "actor":
                return jnp.mean((actor - batch["y"]) ** 2) + jnp.mean(critic**2)
            return jnp.mean((critic + batch["y"]) ** 2)

        return jax.grad(f)(params)["params"][name]

    for name in ("actor", "critic"):
        expected = jax.tree.map(lambda p, g: p - 0.1 * g, params["params"][name], term(name))
        assert_trees_close(new_state.modules["ac"].params["params"][name], expected)
    assert {"loss/actor", "loss/critic", "total_loss"} <= set(metrics["ac"])


def test_per_optimizer_loss_with_wrong_names_raises():
    def loss(params, batch, ctx):
        actor, critic = ctx.apply(params, batch["x"])
        return {"actor": actor.mean(), "q": critic.mean()}, {}

    spec = jl.ModuleSpec(
        ActorCritic(), loss, optimizers={"actor": optax.sgd(0.1), "critic": optax.sgd(0.1)}
    )
    learner = jl.Learner({"ac": spec})
    state = learner.init(jax.random.key(0), regression_batch())
    with pytest.raises(ValueError, match=r"per-optimizer losses for \['actor', 'q'\]"):
        learner.update(state, regression_batch())


def test_learning_rate_schedules_in_metrics_equal_the_schedule():
    batch = regression_batch()
    env_schedule = [[0, 0.1], [256, 0.0]]
    grad_schedule = optax.linear_schedule(0.2, 0.0, transition_steps=40)
    spec = jl.ModuleSpec(
        ActorCritic(),
        actor_critic_loss,
        optimizers={
            "actor": jl.Optimizer(optax.sgd, learning_rate=env_schedule),
            "critic": jl.Optimizer(optax.adam, learning_rate=grad_schedule),
        },
        hyperparams={"entropy_coeff": jl.piecewise_schedule([[0, 1.0], [16, 0.0]], "grad_steps")},
    )
    learner = jl.Learner({"ac": spec}, minibatch_size=MINIBATCH, num_epochs=EPOCHS)
    state = learner.init(jax.random.key(0), batch)
    for update in range(3):
        state, metrics = learner.update(state, batch)
        # "last" reduction: the value used by the update's last step, 8 steps per update.
        last_step = 8 * update + 7
        env_steps = 64 * update  # env steps are counted at the end of each update
        assert float(metrics["ac"]["learning_rate/actor"]) == pytest.approx(
            0.1 * (1 - env_steps / 256), rel=1e-6
        )
        assert float(metrics["ac"]["learning_rate/critic"]) == pytest.approx(
            float(grad_schedule(last_step)), rel=1e-6, abs=1e-9
        )
        assert float(metrics["ac"]["hyperparams/entropy_coeff"]) == pytest.approx(
            max(0.0, 1 - last_step / 16), abs=1e-6
        )
    # The current values live in the state.
    assert float(state.modules["ac"].hyperparams["entropy_coeff"]) == 0.0
    critic_state = state.modules["ac"].opt_states["critic"]  # an optax.MaskedState
    assert float(critic_state.inner_state.hyperparams["learning_rate"]) == (
        pytest.approx(float(grad_schedule(23)))
    )


def test_constant_hyperparams_can_be_swept_in_the_state():
    def loss(params, batch, ctx):
        mse, metrics = mse_loss(params, batch, ctx)
        return ctx.hyperparams["scale"] * mse, metrics

    spec = jl.ModuleSpec(
        nn.Dense(1), loss, jl.Optimizer(optax.sgd, learning_rate=0.1), hyperparams={"scale": 1.0}
    )
    learner = jl.Learner({"m": spec}, shuffle=False)
    batch = regression_batch()
    state = learner.init(jax.random.key(0), batch)
    module = state.modules["m"]
    edited = module.replace(
        hyperparams={"scale": jnp.asarray(0.0)},
        opt_states={
            "default": module.opt_states["default"]._replace(
                hyperparams={
                    **module.opt_states["default"].hyperparams,
                    "learning_rate": jnp.asarray(0.5),
                }
            )
        },
    )
    state = state.replace(modules={"m": edited})
    new_state, metrics = learner.update(state, batch)
    # A zero loss scale means zero gradients: params stay, and the edited values are used.
    assert tree_equal(new_state.modules["m"].params, state.modules["m"].params)
    assert float(metrics["m"]["learning_rate/default"]) == 0.5
    assert float(metrics["m"]["hyperparams/scale"]) == 0.0


@pytest.mark.parametrize(
    ("mode", "bound"),
    [
        ("value", lambda step: float(jnp.max(jnp.abs(jnp.concatenate(step))))),
        ("norm", lambda step: max(float(jnp.linalg.norm(s)) for s in step)),
        ("global_norm", lambda step: float(jnp.linalg.norm(jnp.concatenate(step)))),
    ],
)
def test_each_clipping_mode_bounds_the_step(mode, bound):
    # With plain SGD at learning rate 1 the parameter change is minus the clipped gradient.
    batch = regression_batch()
    batch["y"] = batch["y"] * 100.0  # large errors, large gradients
    optimizer = jl.Optimizer(optax.sgd(1.0), grad_clip=0.01, grad_clip_by=mode)
    learner = jl.Learner({"m": jl.ModuleSpec(nn.Dense(1), mse_loss, optimizer)})
    state = learner.init(jax.random.key(0), batch)
    new_state, metrics = learner.update(state, batch)
    step = [
        (a - b).ravel()
        for a, b in zip(
            jax.tree.leaves(new_state.modules["m"].params),
            jax.tree.leaves(state.modules["m"].params),
            strict=True,
        )
    ]
    assert bound(step) <= 0.01 * (1 + 1e-5)
    assert float(metrics["m"]["grad_norm/default"]) > 1.0  # reported before clipping


def test_nonfinite_steps_are_skipped_and_counted():
    batch = regression_batch()
    learner = jl.Learner(
        {"m": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.adam(1e-2))},
        minibatch_size=16,
        skip_nonfinite=True,
    )
    state = learner.init(jax.random.key(0), batch)
    poisoned = {**batch, "y": batch["y"].copy()}
    poisoned["y"][:] = np.nan
    new_state, metrics = learner.update(state, poisoned)
    before, after = state.modules["m"], new_state.modules["m"]
    assert tree_equal(after.params, before.params)
    assert tree_equal(after.opt_states, before.opt_states)
    assert int(after.grad_steps) == 0
    # The env steps the batch accounts for are still counted: the environment moved on.
    assert int(after.env_steps) == 64
    assert int(metrics["__all__"]["num_skipped_steps"]) == 4
    assert int(new_state.skipped_steps) == 4
    # Finite data afterwards trains as usual.
    trained, metrics = learner.update(new_state, batch)
    assert not tree_equal(trained.modules["m"].params, state.modules["m"].params)
    assert int(metrics["__all__"]["num_skipped_steps"]) == 4
    assert bool(jnp.isfinite(metrics["m"]["total_loss"]))


def test_nonfinite_steps_are_applied_without_skipping():
    batch = regression_batch()
    batch["y"] = np.full_like(batch["y"], np.nan)
    learner = jl.Learner({"m": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.adam(1e-2))})
    state = learner.init(jax.random.key(0), batch)
    new_state, metrics = learner.update(state, batch)
    assert not bool(jnp.all(jnp.isfinite(new_state.modules["m"].params["params"]["kernel"])))
    assert int(metrics["__all__"]["num_skipped_steps"]) == 0


def test_shuffle_uses_every_row_once_per_epoch():
    def loss(params, batch, ctx):
        mse, _ = mse_loss(params, batch, ctx)
        first = batch["i"][0].astype(jnp.float32)
        return mse, {
            "row_sum": batch["i"].sum().astype(jnp.float32),
            "first_row": first,
            "max_row": batch["i"].max().astype(jnp.float32),
        }

    spec = jl.ModuleSpec(
        nn.Dense(1),
        loss,
        optax.sgd(0.01),
        metric_reductions={"row_sum": "sum", "first_row": "last", "max_row": "max"},
    )
    learner = jl.Learner({"m": spec}, minibatch_size=16, num_epochs=3)
    batch = {**regression_batch(), "i": np.arange(64, dtype=np.int32)}
    state = learner.init(jax.random.key(0), batch)
    _, metrics = learner.update(state, batch)
    # Three epochs over rows 0..63: the row ids sum to 3 * 63 * 64 / 2.
    assert float(metrics["m"]["row_sum"]) == 3 * 63 * 64 / 2
    assert float(metrics["m"]["max_row"]) == 63
    in_order = jl.Learner({"m": spec}, minibatch_size=16, num_epochs=3, shuffle=False)
    _, ordered = in_order.update(in_order.init(jax.random.key(0), batch), batch)
    assert float(ordered["m"]["first_row"]) == 48  # the last minibatch starts at row 48
    assert float(metrics["m"]["first_row"]) != 48 or float(metrics["m"]["row_sum"]) > 0


def test_remainder_rows_are_left_out_of_each_epoch():
    def loss(params, batch, ctx):
        mse, _ = mse_loss(params, batch, ctx)
        return mse, {"rows": jnp.asarray(batch["x"].shape[0], jnp.float32)}

    spec = jl.ModuleSpec(nn.Dense(1), loss, optax.sgd(0.01), metric_reductions={"rows": "sum"})
    learner = jl.Learner({"m": spec}, minibatch_size=32, num_epochs=2, drop_last=True)
    batch = regression_batch(size=100)
    state = learner.init(jax.random.key(0), batch)
    new_state, metrics = learner.update(state, batch)
    # 100 rows in minibatches of 32: 3 steps of 32 rows per epoch, 4 rows left out.
    assert float(metrics["m"]["rows"]) == 2 * 3 * 32
    assert int(new_state.grad_steps) == 6
    assert int(new_state.modules["m"].env_steps) == 100


def test_metrics_are_nested_by_module_and_stay_on_device():
    learner = make_learner(optax.adam(1e-2))
    _, state, metrics = run(learner, regression_batch(), updates=1)
    assert set(metrics) == {"policy", "__all__"}
    assert {"total_loss", "mse", "grad_norm/default", "num_grad_steps"} <= set(metrics["policy"])
    assert {"total_loss", "num_updates", "num_grad_steps", "num_skipped_steps"} <= set(
        metrics["__all__"]
    )
    assert all(isinstance(v, jax.Array) for v in jax.tree.leaves(metrics))


def test_env_steps_argument_drives_the_counter():
    learner = jl.Learner(
        {"m": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.01))}, minibatch_size=16
    )
    batch = regression_batch()
    state = learner.init(jax.random.key(0), batch)
    state, _ = learner.update(state, batch, env_steps=1000)
    state, metrics = learner.update(state, batch, env_steps={"m": 5})
    assert int(metrics["m"]["num_env_steps_trained_lifetime"]) == 1005
    assert int(metrics["m"]["num_env_steps_trained"]) == 5
    with pytest.raises(ValueError, match="env_steps for 'm' must be a non-negative int"):
        learner.update(state, batch, env_steps=-1)


def test_joint_loss_over_two_modules(jit):
    batch = {"a": regression_batch(), "b": regression_batch(seed=3)}

    def joint(params, batch, ctx):
        a = ctx["a"].apply(params["a"], batch["a"]["x"])[:, 0]
        b = ctx["b"].apply(params["b"], batch["b"]["x"])[:, 0]
        loss = jnp.mean((a + b - batch["a"]["y"]) ** 2)
        return loss, {"joint": loss}

    specs = {
        "a": jl.ModuleSpec(nn.Dense(1), optimizer=optax.sgd(0.01)),
        "b": jl.ModuleSpec(nn.Dense(1), optimizer=optax.sgd(0.02)),
    }
    learner = jl.Learner(specs, loss=joint, shuffle=False, jit=jit)
    state = learner.init(jax.random.key(0), batch)
    new_state, metrics = learner.update(state, batch)
    params = {m: state.modules[m].params for m in ("a", "b")}

    def reference(p):
        a = nn.Dense(1).apply(p["a"], batch["a"]["x"])[:, 0]
        b = nn.Dense(1).apply(p["b"], batch["b"]["x"])[:, 0]
        return jnp.mean((a + b - batch["a"]["y"]) ** 2)

    grads = jax.grad(reference)(params)
    for module, rate in (("a", 0.01), ("b", 0.02)):
        expected = jax.tree.map(lambda p, g, r=rate: p - r * g, params[module], grads[module])
        assert_trees_close(new_state.modules[module].params, expected)
    assert "joint" in metrics["__all__"]


def test_single_module_accepts_both_batch_forms():
    learner = make_learner(optax.sgd(0.01))
    batch = regression_batch()
    state = learner.init(jax.random.key(0), {"policy": batch})
    plain, _ = learner.update(state, batch)
    nested, _ = learner.update(state, {"policy": batch})
    assert tree_equal(plain.modules, nested.modules)


def test_donated_state_update_matches():
    batch = regression_batch()
    _, expected, _ = run(make_learner(optax.adam(1e-2)), batch)
    _, donated, _ = run(make_learner(optax.adam(1e-2), donate_state=True), batch)
    assert tree_equal(expected.modules, donated.modules)


def test_state_is_a_pytree_of_arrays_only():
    learner = make_learner(jl.Optimizer(optax.adam, learning_rate=[[0, 1e-3], [10, 0.0]]))
    state = learner.init(jax.random.key(0), regression_batch())
    leaves = jax.tree.leaves(state)
    assert leaves and all(isinstance(leaf, jax.Array) for leaf in leaves)
    assert jax.dtypes.issubdtype(state.key.dtype, jax.dtypes.prng_key)
    # It passes through jit and vmap like any pytree.
    doubled = jax.jit(lambda s: jax.tree.map(lambda x: x, s))(state)
    assert tree_equal(doubled.modules, state.modules)


def test_a_learner_is_a_frozen_hashable_value():
    batch = regression_batch()
    learner = make_learner(optax.adam(1e-2), sample_batch=batch)
    same = make_learner(optax.adam(1e-2), sample_batch=batch)
    assert hash(learner) == hash(learner.replace())
    assert learner == learner.replace() and {learner: 1}[learner.replace()] == 1
    assert learner != learner.replace(num_epochs=EPOCHS + 1)
    assert learner != same  # another optax.adam(...) value: another transformation
    with pytest.raises(AttributeError, match="frozen"):
        learner.num_epochs = 3
    with pytest.raises(AttributeError, match="frozen"):
        learner._layout = None
    before = (hash(learner), learner.batch_layout, learner.config, learner.placement)
    state = learner.init(jax.random.key(0), batch)
    learner.update(state, batch)
    assert (hash(learner), learner.batch_layout, learner.config, learner.placement) == before
    assert learner == learner.replace()


def test_init_leaves_a_learner_without_layout_as_it_was():
    learner = make_learner(optax.adam(1e-2))
    state = learner.init(jax.random.key(0), regression_batch())
    assert learner.batch_layout is None and learner == learner.replace()
    with pytest.raises(ValueError, match="sample_batch=batch"):
        learner.init(jax.random.key(0))
    _, updated, _ = run(learner, regression_batch())
    assert int(updated.grad_steps) == int(state.grad_steps) + 24


def test_config_is_one_typed_value():
    config = jl.LearnerConfig(minibatch_size=MINIBATCH, num_epochs=EPOCHS, shuffle=False)
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))
    by_config = jl.Learner({"policy": spec}, config=config)
    by_keywords = jl.Learner(
        {"policy": spec}, minibatch_size=MINIBATCH, num_epochs=EPOCHS, shuffle=False
    )
    assert by_config == by_keywords and by_config.config is config
    assert jl.UpdateConfig is jl.LearnerConfig
    with pytest.raises(TypeError, match="not both"):
        jl.Learner({"policy": spec}, config=config, num_epochs=2)
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['epochs'\]"):
        jl.Learner({"policy": spec}, epochs=2)
    with pytest.raises(TypeError, match=r"replace got unknown option\(s\)"):
        by_config.replace(epochs=2)
