"""``jl.params_for_optimizer`` (RLlib's ``filter_param_dict_for_optimizer``): the part of a
params-shaped tree one named optimizer owns.

For every way params are given to optimizers (the submodule names, ``param_labels``, a
shared optimizer over modules), the parts of the optimizers partition the tree exactly: each
leaf is in one part, as itself, and the parts keep the tree's structure with ``None``
elsewhere.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import ActorCritic, actor_critic_loss, mse_loss, regression_batch

import jaxlearner as jl


def is_none(x):
    return x is None


def assert_partition(tree, parts):
    """Each leaf of ``tree`` is kept (the same object) by exactly one of ``parts``."""
    leaves, structure = jax.tree.flatten(tree)
    kept = []
    for part in parts:
        part_leaves, part_structure = jax.tree.flatten(part, is_leaf=is_none)
        assert part_structure == structure
        assert any(leaf is not None for leaf in part_leaves)  # no part is empty
        for leaf, original in zip(part_leaves, leaves, strict=True):
            assert leaf is None or leaf is original
        kept.append([leaf is not None for leaf in part_leaves])
    assert (np.sum(kept, axis=0) == 1).all()


def by_leaf_name(params):
    """Kernels to "weights", biases to "biases": labels that follow no submodule name."""
    return jax.tree_util.tree_map_with_path(
        lambda path, _: "weights" if path[-1].key == "kernel" else "biases", params
    )


def actor_critic_learner(**spec_options):
    spec = jl.ModuleSpec(ActorCritic(), actor_critic_loss, **spec_options)
    return jl.Learner({"ac": spec}, sample_batch=regression_batch())


def test_two_optimizers_named_after_submodules_partition_the_params(jit):
    learner = actor_critic_learner(optimizers={"actor": optax.adam(1e-3), "critic": optax.sgd(0.1)})
    params = learner.init(jax.random.key(0)).modules["ac"].params

    def parts(params):
        return [jl.params_for_optimizer(learner, "ac", n, params) for n in ("actor", "critic")]

    actor, critic = parts(params)
    assert_partition(params, [actor, critic])
    assert jax.tree.leaves(actor) == jax.tree.leaves(params["params"]["actor"])
    # Traced (inside jit, as between the stages of a step of your own), the same parts.
    traced = (jax.jit(parts) if jit else parts)(params)
    assert jax.tree.structure(traced, is_leaf=is_none) == jax.tree.structure(
        [actor, critic], is_leaf=is_none
    )
    for mine, theirs in zip(jax.tree.leaves(traced), jax.tree.leaves([actor, critic]), strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_param_labels_partition_the_gradients():
    learner = actor_critic_learner(
        optimizers={"weights": optax.adam(1e-3), "biases": optax.sgd(0.1)},
        param_labels=by_leaf_name,
    )
    state = learner.init(jax.random.key(0))
    grads, _ = learner.compute_gradients(state, regression_batch())
    weights, biases = (
        jl.params_for_optimizer(learner, "ac", name, grads["ac"]) for name in ("weights", "biases")
    )
    assert_partition(grads["ac"], [weights, biases])
    assert biases["params"]["actor"]["kernel"] is None
    assert biases["params"]["actor"]["bias"] is grads["ac"]["params"]["actor"]["bias"]


def test_one_optimizer_owns_every_param():
    learner = jl.Learner({"m": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))})
    params = learner.init(jax.random.key(0), regression_batch()).modules["m"].params
    assert_partition(params, [jl.params_for_optimizer(learner, "m", "default", params)])


def test_shared_optimizers_partition_the_modules_trees():
    # Two shared optimizers over four modules: RLlib's ALL_MODULES optimizers.
    specs = {m: jl.ModuleSpec(nn.Dense(1), mse_loss) for m in ("a", "b", "c", "d")}
    shared = {
        "ab": jl.SharedOptimizer(optax.adam(1e-3), ("a", "b")),
        "cd": jl.SharedOptimizer(optax.sgd(0.1), ("c", "d")),
    }
    learner = jl.Learner(specs, shared_optimizers=shared)
    batch = dict.fromkeys(specs, regression_batch())
    state = learner.init(jax.random.key(0), batch)
    grads, _ = learner.compute_gradients(state, batch)
    ab, cd = (jl.params_for_optimizer(learner, jl.ALL_MODULES, n, grads) for n in ("ab", "cd"))
    assert_partition(grads, [ab, cd])
    assert ab["a"] is grads["a"] and ab["c"] == {"params": {"bias": None, "kernel": None}}
    # One module of a shared optimizer: all of its params are that optimizer's.
    assert_partition(grads["c"], [jl.params_for_optimizer(learner, "c", "cd", grads["c"])])


@pytest.mark.parametrize(
    ("module_id", "name", "tree", "message"),
    [
        ("pi", "actor", {}, r"no module 'pi'; the learner's modules are \['ac'\] \(or '__all__'"),
        ("ac", "default", {}, r"module 'ac' has no optimizer 'default'; .*\['actor', 'critic'\]"),
        ("__all__", "actor", {}, r"'__all__' takes a shared optimizer's name; got 'actor', and "),
    ],
    ids=["unknown-module", "unknown-optimizer", "not-shared"],
)
def test_unknown_names_are_refused_with_the_valid_ones(module_id, name, tree, message):
    learner = actor_critic_learner(optimizers={"actor": optax.adam(1e-3), "critic": optax.sgd(0.1)})
    with pytest.raises(KeyError, match=message):
        jl.params_for_optimizer(learner, module_id, name, tree)


def test_a_tree_other_than_one_per_module_is_refused_for_all_modules():
    specs = {m: jl.ModuleSpec(nn.Dense(1), mse_loss) for m in ("a", "b")}
    learner = jl.Learner(specs, shared_optimizers={"ab": (optax.sgd(0.1), ("a", "b"))})
    with pytest.raises(TypeError, match=r"tree must be \{module_id: tree\}; got Array"):
        jl.params_for_optimizer(learner, jl.ALL_MODULES, "ab", jnp.zeros(2))
    with pytest.raises(KeyError, match=r"tree holds unknown module\(s\) \['z'\]"):
        jl.params_for_optimizer(learner, jl.ALL_MODULES, "ab", {"z": jnp.zeros(2)})
