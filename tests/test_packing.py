"""core/packing.py: a scan's per-step outputs stored as one array per shape and dtype."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tree_equal

from jaxlearner.core.packing import concatenate, pack, packed_scan, split_on_host, unpack


def _outputs(x):
    return {
        "loss": x,
        "norm": 2.0 * x,
        "count": jnp.int32(3) + x.astype(jnp.int32),
        "flags": jnp.stack([x > 1.0, x > 2.0]),
        "obs": jnp.full((2, 3), x),
        "next_obs": jnp.full((2, 3), -x),
        "one": (jnp.float16(x),),
    }


def test_pack_groups_leaves_by_shape_and_dtype_and_unpack_restores_them(jit):
    def roundtrip(x):
        arrays, layout = pack(_outputs(x))
        return arrays, unpack(arrays, layout)

    fn = jax.jit(roundtrip) if jit else roundtrip
    arrays, tree = fn(jnp.float32(1.5))
    # float32 scalars, int32 scalar, bool [2], float32 [2, 3] x 2, float16 scalar
    assert [(a.shape, a.dtype) for a in arrays] == [
        ((), jnp.int32),
        ((2,), jnp.bool_),
        ((2,), jnp.float32),
        ((2, 2, 3), jnp.float32),
        ((), jnp.float16),
    ]
    assert tree_equal(tree, _outputs(jnp.float32(1.5)))


def test_nested_scans_of_packed_outputs_unpack_to_the_unpacked_scans(jit):
    layouts = []

    def body(carry, x):
        arrays, layout = pack(_outputs(x))
        layouts[:] = [layout]
        return carry + x, arrays

    def outer(carry, xs):
        return jax.lax.scan(body, carry, xs)

    def packed(xs):
        carry, stacked = jax.lax.scan(outer, 0.0, xs)
        return carry, unpack(stacked, layouts[0], batch_ndim=2)

    def plain(xs):
        return jax.lax.scan(
            lambda c, row: jax.lax.scan(lambda c, x: (c + x, _outputs(x)), c, row), 0.0, xs
        )

    xs = jnp.arange(12.0).reshape(3, 4)
    run = jax.jit if jit else (lambda f: f)
    got, want = run(packed)(xs), run(plain)(xs)
    assert tree_equal(got, want)
    assert got[1]["obs"].shape == (3, 4, 2, 3)
    np.testing.assert_array_equal(got[1]["norm"], 2.0 * xs)


@pytest.mark.parametrize("unroll", [1, 2])
def test_packed_scan_is_lax_scan_bit_for_bit_storing_one_array_per_group(jit, unroll):
    body = lambda c, x: (c * 0.5 + x, _outputs(x))
    run = jax.jit if jit else (lambda f: f)
    xs = jnp.linspace(0.0, 3.0, 5)
    got = run(lambda xs: packed_scan(body, 1.0, xs, unroll=unroll))(xs)
    want = run(lambda xs: jax.lax.scan(body, 1.0, xs, unroll=unroll))(xs)
    assert tree_equal(got, want)
    assert got[1]["obs"].shape == (5, 2, 3) and got[1]["one"][0].dtype == jnp.float16
    # Without xs, as lax.scan: the body's x is None and length counts the steps.
    counted = packed_scan(lambda c, _: (c + 1, {"c": c, "n": c * 2}), jnp.int32(0), length=3)
    assert tree_equal(counted, (jnp.int32(3), {"c": jnp.arange(3), "n": 2 * jnp.arange(3)}))
    jaxpr = jax.make_jaxpr(lambda xs: packed_scan(body, 1.0, xs, unroll=unroll))(xs).jaxpr
    assert _stored_per_step(jaxpr) == [5]  # the five (shape, dtype) groups, not 7 leaves


def _stored_per_step(jaxpr):
    """The number of stacked outputs of the innermost scan in ``jaxpr``."""
    counts = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            inner = [p for p in eqn.params.values() if hasattr(p, "jaxpr")]
            if eqn.primitive.name == "scan":
                body = eqn.params["jaxpr"].jaxpr
                if not any(e.primitive.name == "scan" for e in body.eqns):
                    counts.append(len(eqn.outvars) - eqn.params["num_carry"])
            for p in inner:
                walk(p.jaxpr if hasattr(p.jaxpr, "eqns") else p.jaxpr.jaxpr)

    walk(jaxpr)
    return counts


def test_the_minibatch_step_of_an_update_stores_one_array_per_dtype():
    # On a GPU each stored array is one kernel launch per minibatch step: PPO's 15 metrics
    # were 15 launches of 85 (benchmarks/README.md, "Where the GPU time goes").
    import gymnasium as gym

    import jaxlearner as jl

    learner = jl.algorithms.ppo(
        gym.spaces.Box(-1, 1, (4,)),
        gym.spaces.Discrete(2),
        {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 2, "hidden_sizes": (8,)},
    )
    state = learner.init(jax.random.key(0))
    batch = {
        "obs": np.zeros((64, 4), np.float32),
        "actions": np.zeros(64, np.int32),
        "logp": np.zeros(64, np.float32),
        "dist_inputs": np.zeros((64, 2), np.float32),
        "advantages": np.zeros(64, np.float32),
        "value_targets": np.zeros(64, np.float32),
        "mask": np.ones(64, np.float32),
    }
    module = learner.module_ids[0]
    jaxpr = jax.make_jaxpr(learner.update_fn)(state, {module: batch}, {module: jnp.int32(64)}).jaxpr
    _, metrics = learner.update(state, batch)
    assert len(metrics[module]) > 10
    assert _stored_per_step(jaxpr) == [1]  # every metric is a float32 scalar: one array


def _metrics(x):
    return {
        "loss": x,
        "steps": jnp.int32(2**24 + 1) + x.astype(jnp.int32),  # past float32's exact integers
        "q": {"min": -x, "all": jnp.arange(3.0) * x},
        "flags": jnp.stack([x > 1.0, x > 2.0]),
        "grid": jnp.full((2, 2), x, jnp.float16),
    }


def test_concatenate_joins_one_array_per_dtype_and_split_on_host_restores_exactly(jit):
    def joined(x):
        return concatenate(_metrics(x))[0]

    fn = jax.jit(joined) if jit else joined
    arrays = fn(jnp.float32(1.5))
    # float32: loss, q/all (3), q/min -> 5; int32: steps; bool: flags (2); float16: grid (4).
    # Leaves in jax.tree.leaves order: flags, grid, loss, q/all, q/min, steps.
    assert [(a.shape, a.dtype) for a in arrays] == [
        ((2,), jnp.bool_),
        ((4,), jnp.float16),
        ((5,), jnp.float32),
        ((1,), jnp.int32),
    ]
    _, layout = concatenate(_metrics(jnp.float32(0.0)))
    tree = split_on_host(jax.device_get(arrays), layout)
    expected = jax.device_get(_metrics(jnp.float32(1.5)))
    assert jax.tree.structure(tree) == jax.tree.structure(expected)
    for got, want in zip(jax.tree.leaves(tree), jax.tree.leaves(expected), strict=True):
        assert isinstance(got, np.ndarray)
        assert got.dtype == want.dtype and got.shape == np.shape(want)
        np.testing.assert_array_equal(got, want)
    assert int(tree["steps"]) == 2**24 + 2  # exact: not cast to float32 on the way


def test_split_on_host_of_an_empty_tree_is_the_empty_tree():
    arrays, layout = concatenate({})
    assert arrays == () and split_on_host((), layout) == {}
