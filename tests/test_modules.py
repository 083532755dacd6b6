"""modules_to_train, add_module, remove_module, and finding each model's example input."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import mse_loss, regression_batch, tree_equal

import jaxlearner as jl
from jaxlearner.core.module_selection import ModuleSelection, freeze_rule, takes_batch, with_module


def spec(rate=0.05, loss=mse_loss, **kwargs):
    return jl.ModuleSpec(nn.Dense(1), loss, optax.adam(rate), **kwargs)


def two_module_learner(**kwargs):
    return jl.Learner({"main": spec(), "other": spec(0.1)}, minibatch_size=16, **kwargs)


def batches():
    return {"main": regression_batch(), "other": regression_batch(seed=2)}


@pytest.mark.parametrize("rule", [{"main"}, ("main",), lambda m: m == "main"])
def test_untrained_modules_stay_bit_identical(rule):
    learner = two_module_learner(modules_to_train=rule)
    state = learner.init(jax.random.key(0), batches())
    new_state, metrics = learner.update(state, batches())
    assert learner.modules_to_train == frozenset({"main"})
    assert tree_equal(new_state.modules["other"], state.modules["other"])
    assert not tree_equal(new_state.modules["main"].params, state.modules["main"].params)
    assert "other" not in metrics


def test_modules_to_train_validation():
    with pytest.raises(
        ValueError, match=r"unknown module\(s\) \['nope'\]; modules: \['main', 'other'\]"
    ):
        two_module_learner(modules_to_train={"nope"})
    with pytest.raises(TypeError, match="did you mean {'main'}"):
        two_module_learner(modules_to_train="main")
    learner = two_module_learner(modules_to_train={"main"})
    state = learner.init(jax.random.key(0), batches())
    with pytest.raises(ValueError, match=r"None of the batch's modules \['other'\] is trained"):
        learner.update(state, {"other": regression_batch()})


def test_batch_with_a_subset_of_modules_trains_only_those():
    learner = two_module_learner()
    state = learner.init(jax.random.key(0), batches())
    new_state, metrics = learner.update(state, {"main": regression_batch()})
    assert tree_equal(new_state.modules["other"], state.modules["other"])
    assert set(metrics) == {"main", "__all__"}


def test_modules_with_different_batch_sizes_cycle_the_smaller():
    learner = two_module_learner(shuffle=False)
    state = learner.init(jax.random.key(0), batches())
    new_state, _ = learner.update(
        state, {"main": regression_batch(size=64), "other": regression_batch(size=32)}
    )
    # main has 4 minibatches of 16, other 2: both take the learner's 4 steps.
    assert int(new_state.modules["main"].grad_steps) == 4
    assert int(new_state.modules["other"].grad_steps) == 4
    assert int(new_state.modules["other"].env_steps) == 32


def test_add_module_carries_the_others_over_and_compiles_once():
    traces = []

    def counted(params, batch, ctx):
        traces.append(ctx.module_id)
        return mse_loss(params, batch, ctx)

    learner = jl.Learner({"main": spec(loss=counted)}, minibatch_size=16)
    state = learner.init(jax.random.key(0), regression_batch())
    state, _ = learner.update(state, regression_batch())
    traces.clear()

    snapshot_params = state.modules["main"].params
    new_learner, new_state = learner.add_module(
        state,
        "snapshot",
        spec(loss=counted),
        regression_batch(),
        params=snapshot_params,
        train=False,
    )
    assert new_learner.module_ids == ("main", "snapshot")
    assert new_learner.modules_to_train == frozenset({"main"})
    assert tree_equal(new_state.modules["main"], state.modules["main"])
    assert tree_equal(new_state.modules["snapshot"].params, snapshot_params)
    assert int(new_state.modules["snapshot"].grad_steps) == 0
    # The old learner still works on the old state; the new one refuses it.
    learner.update(state, regression_batch())
    with pytest.raises(ValueError, match="use the learner and state they return together"):
        new_learner.update(state, regression_batch())

    traces.clear()
    both = {"main": regression_batch(), "snapshot": regression_batch()}
    for _ in range(3):
        new_state, metrics = new_learner.update(new_state, both)
    assert traces == ["main"]  # one trace for the new structure, then cached
    assert tree_equal(new_state.modules["snapshot"].params, snapshot_params)
    assert set(metrics) == {"main", "__all__"}


def test_add_module_fresh_and_trained_by_default():
    learner = jl.Learner({"main": spec()}, minibatch_size=16)
    state = learner.init(jax.random.key(0), regression_batch())
    learner2, state2 = learner.add_module(state, "new", spec(), regression_batch(features=5))
    assert learner2.modules_to_train == frozenset({"main", "new"})
    assert state2.modules["new"].params["params"]["kernel"].shape == (5, 1)
    assert not tree_equal(state2.key, state.key)  # the init key was split off the state's key
    state3, metrics = learner2.update(
        state2, {"main": regression_batch(), "new": regression_batch(features=5)}
    )
    assert set(metrics) == {"main", "new", "__all__"}
    with pytest.raises(ValueError, match="Module 'new' exists already"):
        learner2.add_module(state3, "new", spec(), regression_batch())


def test_remove_module_carries_the_others_over():
    learner = two_module_learner()
    state = learner.init(jax.random.key(0), batches())
    state, _ = learner.update(state, batches())
    smaller, smaller_state = learner.remove_module(state, "other")
    assert smaller.module_ids == ("main",)
    assert tree_equal(smaller_state.modules["main"], state.modules["main"])
    smaller.update(smaller_state, regression_batch())
    with pytest.raises(KeyError, match="No module 'nope'"):
        learner.remove_module(state, "nope")
    with pytest.raises(ValueError, match="it is the learner's only module"):
        smaller.remove_module(smaller_state, "main")


def test_replace_changes_options():
    learner = two_module_learner()
    state = learner.init(jax.random.key(0), batches())
    frozen = learner.replace(modules_to_train={"other"}, num_epochs=2)
    new_state, _ = frozen.update(state, batches())
    assert tree_equal(new_state.modules["main"], state.modules["main"])
    assert int(new_state.modules["other"].grad_steps) == 8
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['epochs'\]"):
        learner.replace(epochs=3)


class TwoInputs(nn.Module):
    @nn.compact
    def __call__(self, obs, action):
        return nn.Dense(1)(jnp.concatenate([obs, jax.nn.one_hot(action, 3)], -1))[:, 0]


def test_example_input_is_found_from_the_loss():
    def loss(params, batch, ctx):
        q = ctx.apply(params, batch["obs"], batch["action"])
        return jnp.mean((q - batch["target"]) ** 2), {}

    batch = {
        "obs": np.ones((8, 4), np.float32),
        "action": np.zeros(8, np.int32),
        "target": np.zeros(8, np.float32),
    }
    learner = jl.Learner({"q": jl.ModuleSpec(TwoInputs(), loss, optax.sgd(0.1))})
    state = learner.init(jax.random.key(0), batch)
    assert state.modules["q"].params["params"]["Dense_0"]["kernel"].shape == (7, 1)


def test_init_input_overrides_discovery():
    def loss(params, batch, ctx):
        scale = params["params"]["bias"]  # params used before ctx.apply
        return jnp.mean((ctx.apply(params, batch["x"])[:, 0] * scale - batch["y"]) ** 2), {}

    with pytest.raises(ValueError, match="used its params before its first ctx.apply call"):
        jl.Learner({"m": jl.ModuleSpec(nn.Dense(1), loss, optax.sgd(0.1))}).init(
            jax.random.key(0), regression_batch()
        )
    learner = jl.Learner(
        {"m": jl.ModuleSpec(nn.Dense(1), loss, optax.sgd(0.1), init_input=lambda b: b["x"])}
    )
    state = learner.init(jax.random.key(0), regression_batch())
    learner.update(state, regression_batch())


def test_loss_without_apply_needs_init_input():
    def loss(params, batch, ctx):
        return jnp.mean(batch["y"]), {}

    with pytest.raises(ValueError, match="never called ctx.apply"):
        jl.Learner({"m": jl.ModuleSpec(nn.Dense(1), loss, optax.sgd(0.1))}).init(
            jax.random.key(0), regression_batch()
        )


def test_learner_and_spec_validation():
    with pytest.raises(TypeError, match="non-empty mapping"):
        jl.Learner({})
    with pytest.raises(TypeError, match="expected a jl.ModuleSpec"):
        jl.Learner({"m": nn.Dense(1)})
    with pytest.raises(ValueError, match="has no loss, and the learner has no joint loss"):
        jl.Learner({"m": jl.ModuleSpec(nn.Dense(1), optimizer=optax.sgd(0.1))})
    with pytest.raises(ValueError, match="minibatch_size must be a positive int or None; got 0"):
        jl.Learner({"m": spec()}, minibatch_size=0)
    with pytest.raises(ValueError, match="num_epochs must be a positive int; got 1.5"):
        jl.Learner({"m": spec()}, num_epochs=1.5)
    with pytest.raises(ValueError, match="Module 'm' has no optimizer: give ModuleSpec"):
        jl.Learner({"m": jl.ModuleSpec(nn.Dense(1), mse_loss)})
    with pytest.raises(ValueError, match="got both"):
        jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(1.0), optimizers={"a": optax.sgd(1.0)})
    with pytest.raises(TypeError, match="must have init"):
        jl.ModuleSpec(lambda x: x, mse_loss, optax.sgd(1.0))
    with pytest.raises(ValueError, match=r"metric_reductions\['kl'\] is 'median'; valid"):
        spec(metric_reductions={"kl": "median"})
    with pytest.raises(
        TypeError, match="must be a jl.Optimizer or an optax.GradientTransformation"
    ):
        jl.ModuleSpec(nn.Dense(1), mse_loss, optimizers={"a": "adam"})
    with pytest.raises(TypeError, match="Expected a PRNG key"):
        jl.Learner({"m": spec()}).init(0, regression_batch())
    with pytest.raises(TypeError, match=r"from learner.init\); got NoneType"):
        jl.Learner({"m": spec()}).update(None, regression_batch())


def test_should_module_be_updated_decides_before_each_update_and_each_set_compiles_once():
    traces = []

    def counted(params, batch, ctx):
        traces.append(ctx.module_id)
        return mse_loss(params, batch, ctx)

    def should_module_be_updated(module_id, batch):  # RLlib's signature, on host values
        return module_id == "main" or bool(batch[module_id]["y"].mean() > 0)

    learner = jl.Learner(
        {"main": spec(loss=counted), "other": spec(loss=counted)},
        minibatch_size=16,
        modules_to_train=should_module_be_updated,
    )
    positive = regression_batch(seed=2)
    positive["y"] = np.abs(positive["y"])
    both = {"main": regression_batch(), "other": positive}
    frozen_other = {"main": regression_batch(), "other": {**positive, "y": -positive["y"]}}
    state = learner.init(jax.random.key(0), both)
    assert learner.modules_to_train == frozenset({"main", "other"})  # each may be chosen
    traces.clear()
    sets = []
    for batch in (frozen_other, both, frozen_other, both, frozen_other):
        new_state, metrics = learner.update(state, batch)
        sets.append(set(metrics) - {"__all__"})
        if "other" not in metrics:
            assert tree_equal(new_state.modules["other"], state.modules["other"])
        state = new_state
    assert sets == [{"main"}, {"main", "other"}] * 2 + [{"main"}]
    # Two sets, each traced once: {main}, then {main, other}; the alternation reuses both.
    assert sorted(traces) == ["main", "main", "other"]


def test_a_batch_predicate_sees_host_values_and_device_shapes_only():
    seen = {}

    def should_module_be_updated(module_id, batch):
        seen[module_id] = batch[module_id]["x"]
        return True

    selection = ModuleSelection(freeze_rule(should_module_be_updated), ("main", "other"))
    host = regression_batch(size=8)
    chosen = selection.select({"main": host, "other": jax.tree.map(jnp.asarray, host)})
    assert chosen == frozenset({"main", "other"}) and selection.per_batch
    assert seen["main"] is host["x"]  # numpy: the values themselves
    # On the device: shape and dtype only, so deciding never waits for the device.
    assert seen["other"] == jax.ShapeDtypeStruct((8, 3), jnp.float32)
    fixed = ModuleSelection(freeze_rule(lambda m: m == "main"), ("main", "other"))
    assert fixed.select(None) == frozenset({"main"})  # a fixed set never looks at the batch


@pytest.mark.parametrize(
    ("rule", "error", "match"),
    [
        (lambda m, batch: 1 / 0, ValueError, r"raised ZeroDivisionError for module 'main'"),
        (lambda m, batch: 1, TypeError, r"returned int 1 for module 'main'; expected True or"),
        (lambda m, batch: jnp.asarray(True), TypeError, "would wait for the device"),
        (lambda m, batch: False, ValueError, "the modules_to_train predicate .* chose none"),
    ],
)
def test_a_bad_batch_predicate_is_named_before_compiling(rule, error, match):
    traces = []

    def counted(params, batch, ctx):
        traces.append(ctx.module_id)
        return mse_loss(params, batch, ctx)

    learner = jl.Learner({"main": spec(loss=counted)}, minibatch_size=16, modules_to_train=rule)
    state = learner.init(jax.random.key(0), regression_batch())
    traces.clear()
    with pytest.raises(error, match=match):
        learner.update(state, regression_batch())
    assert traces == []  # refused before anything was traced


def test_a_bad_module_predicate_is_named_when_the_learner_is_built():
    with pytest.raises(ValueError, match=r"predicate\(module_id\) raised KeyError for module"):
        two_module_learner(modules_to_train=lambda m: {}[m])
    with pytest.raises(TypeError, match=r"returned str 'yes' for module 'main'"):
        two_module_learner(modules_to_train=lambda m: "yes")
    with pytest.raises(TypeError, match=r"takes \(module_id\) or \(module_id, batch\)"):
        two_module_learner(modules_to_train=lambda m, batch, extra: True)


def test_adding_a_module_keeps_a_batch_predicates_form():
    rule = with_module(lambda m, batch: m in batch, "snapshot", False, ("main",))
    assert takes_batch(rule)
    assert rule("main", {"main": {}}) and not rule("snapshot", {"snapshot": {}})
