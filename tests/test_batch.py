"""Batch layout, validation messages, and minibatch blocks."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import maybe_jit, mse_loss, regression_batch, tree_equal

import jaxlearner as jl
from jaxlearner.core.batch import epoch_blocks, minibatch_plan


def test_epoch_blocks_in_order_without_shuffle(jit):
    batch = {"i": jnp.arange(10)}
    blocks = maybe_jit(lambda b: epoch_blocks(b, jax.random.key(0), 3, 3, 3, False), jit)(batch)
    # 10 rows, minibatches of 3: rows 0-8 in order, row 9 left out of the epoch.
    np.testing.assert_array_equal(blocks["i"], [[0, 1, 2], [3, 4, 5], [6, 7, 8]])


def test_epoch_blocks_shuffle_is_a_permutation(jit):
    batch = {"i": jnp.arange(12), "x": jnp.arange(12.0)[:, None] * 2}
    fn = maybe_jit(lambda b, k: epoch_blocks(b, k, 4, 3, 3, True), jit)
    blocks = fn(batch, jax.random.key(1))
    assert blocks["i"].shape == (3, 4) and blocks["x"].shape == (3, 4, 1)
    assert sorted(np.asarray(blocks["i"]).ravel().tolist()) == list(range(12))
    # Rows stay together across keys of the batch.
    np.testing.assert_array_equal(blocks["x"][..., 0], 2.0 * blocks["i"])
    other = fn(batch, jax.random.key(2))
    assert not np.array_equal(blocks["i"], other["i"])


def test_epoch_blocks_cycle_when_the_learner_takes_more_steps(jit):
    batch = {"i": jnp.arange(4)}
    blocks = maybe_jit(lambda b: epoch_blocks(b, jax.random.key(0), 2, 2, 5, False), jit)(batch)
    np.testing.assert_array_equal(blocks["i"], [[0, 1], [2, 3], [0, 1], [2, 3], [0, 1]])


def test_epoch_blocks_wrap_around_so_every_row_is_used(jit):
    batch = {"i": jnp.arange(10)}
    in_order = maybe_jit(lambda b, k: epoch_blocks(b, k, 4, 3, 3, False), jit)
    shuffled = maybe_jit(lambda b, k: epoch_blocks(b, k, 4, 3, 3, True), jit)
    # ceil(10 / 4) = 3 minibatches: rows 8 and 9, then the epoch's first two rows again.
    np.testing.assert_array_equal(
        in_order(batch, jax.random.key(0))["i"], [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    )
    shuffled = np.asarray(shuffled(batch, jax.random.key(1))["i"]).ravel()
    assert set(shuffled.tolist()) == set(range(10))
    np.testing.assert_array_equal(shuffled[10:], shuffled[:2])


def test_minibatch_plan():
    # 100 rows in minibatches of 32: 4 (the last wraps around), 3 with drop_last.
    assert minibatch_plan(100, 32, "m") == (32, 4)
    assert minibatch_plan(100, 32, "m", drop_last=True) == (32, 3)
    assert minibatch_plan(96, 32, "m") == minibatch_plan(96, 32, "m", drop_last=True) == (32, 3)
    assert minibatch_plan(100, None, "m") == (100, 1)


@pytest.mark.parametrize("drop_last", [False, True])
def test_every_row_is_trained_on_unless_drop_last(drop_last):
    # The loss's gradient is nonzero only for the last two of 10 rows; no shuffling.
    def loss(params, batch, ctx):
        error = ctx.apply(params, batch["x"])[:, 0] - batch["y"]
        return jnp.mean(batch["w"] * error**2), {}

    batch = {**regression_batch(size=10), "w": np.repeat(np.float32([0, 1]), [8, 2])}
    spec = jl.ModuleSpec(nn.Dense(1), loss, optax.sgd(0.1))
    learner = jl.Learner({"m": spec}, minibatch_size=4, shuffle=False, drop_last=drop_last)
    state = learner.init(jax.random.key(0), batch)
    new_state, _ = learner.update(state, batch)
    # Rows 8 and 9 are the third minibatch's first rows, or are left out with drop_last.
    assert int(new_state.grad_steps) == (2 if drop_last else 3)
    before, after = state.modules["m"].params, new_state.modules["m"].params
    assert tree_equal(before, after) == drop_last


def test_drop_last_is_checked_when_the_learner_is_built():
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))
    with pytest.raises(TypeError, match="Learner drop_last must be a bool; got 'yes'"):
        jl.Learner({"m": spec}, minibatch_size=4, drop_last="yes")
    assert minibatch_plan(100, None, "m") == (100, 1)
    with pytest.raises(ValueError, match="the batch has 10 rows, fewer than minibatch_size=32"):
        minibatch_plan(10, 32, "m")


@pytest.fixture(scope="module")
def learner_and_state():
    learner = jl.Learner(
        {"policy": jl.ModuleSpec(_dense(), mse_loss, optax.sgd(0.1))},
        minibatch_size=16,
        sample_batch=regression_batch(),
    )
    state = learner.init(jax.random.key(0))
    return learner, state


def _dense():
    import flax.linen as nn

    return nn.Dense(1)


def test_missing_key_is_named(learner_and_state):
    learner, state = learner_and_state
    batch = regression_batch()
    del batch["y"]
    with pytest.raises(KeyError) as raised:
        learner.update(state, batch)
    message = str(raised.value)
    assert "Module 'policy'" in message and "Missing: [['y']]; unexpected: []" in message
    assert "expected keys" in message


def test_unexpected_key_is_named(learner_and_state):
    learner, state = learner_and_state
    batch = {**regression_batch(), "z": np.zeros(64, np.float32)}
    with pytest.raises(KeyError, match=r"unexpected: \[\['z'\]\]"):
        learner.update(state, batch)


def test_wrong_trailing_shape_is_named(learner_and_state):
    learner, state = learner_and_state
    batch = regression_batch(features=4)
    with pytest.raises(ValueError) as raised:
        learner.update(state, batch)
    expected = (
        "Module 'policy', batch key ['x']: expected shape [B, 3] (trailing (3,)), got (64, 4)"
    )
    assert expected in str(raised.value)


def test_wrong_dtype_is_named(learner_and_state):
    learner, state = learner_and_state
    batch = {**regression_batch(), "y": np.zeros(64, np.int32)}
    with pytest.raises(TypeError, match=r"batch key \['y'\]: expected dtype float32, got int32"):
        learner.update(state, batch)


def test_float64_is_refused(learner_and_state):
    learner, state = learner_and_state
    batch = {**regression_batch(), "x": np.zeros((64, 3), np.float64)}
    with pytest.raises(TypeError, match=r"batch key \['x'\]: got float64 data"):
        learner.update(state, batch)


def test_unknown_module_id_is_named(learner_and_state):
    learner, state = learner_and_state
    expected = r"unknown module id\(s\) \['critic'\]; the learner's modules are \['policy'\]"
    with pytest.raises(KeyError, match=expected):
        learner.update(state, {"policy": regression_batch(), "critic": regression_batch()})


def test_disagreeing_leading_sizes(learner_and_state):
    learner, state = learner_and_state
    batch = {**regression_batch(), "y": np.zeros(63, np.float32)}
    with pytest.raises(ValueError, match="disagree on the leading batch size"):
        learner.update(state, batch)


def test_too_small_batch(learner_and_state):
    learner, state = learner_and_state
    with pytest.raises(ValueError, match="the batch has 8 rows, fewer than minibatch_size=16"):
        learner.update(state, regression_batch(size=8))


def test_scalar_leaf(learner_and_state):
    learner, state = learner_and_state
    with pytest.raises(ValueError, match="got a scalar"):
        learner.update(state, {**regression_batch(), "y": np.float32(1.0)})


def test_float64_sample_batch_at_init():
    spec = jl.ModuleSpec(_dense(), mse_loss, optax.sgd(0.1))
    learner = jl.Learner({"policy": spec})
    batch = {**regression_batch(), "x": regression_batch()["x"].astype(np.float64)}
    with pytest.raises(TypeError, match="float64"):
        learner.init(jax.random.key(0), batch)
    with pytest.raises(TypeError, match="float64"):
        jl.Learner({"policy": spec}, sample_batch=batch)


def test_a_sample_that_differs_from_the_layout_is_refused_at_init(learner_and_state):
    learner, _ = learner_and_state
    with pytest.raises(KeyError, match="Missing"):
        learner.init(jax.random.key(0), {"x": regression_batch()["x"]})


def test_a_learner_without_layout_checks_each_batch_on_its_own():
    # No sample at construction: init takes one, and update checks what a batch alone
    # shows (leading sizes, float64, minibatch size); a new shape compiles anew.
    learner = jl.Learner(
        {"policy": jl.ModuleSpec(_dense(), mse_loss, optax.sgd(0.1))}, minibatch_size=16
    )
    state = learner.init(jax.random.key(0), regression_batch())
    assert learner.batch_layout is None
    state, _ = learner.update(state, regression_batch())
    with pytest.raises(ValueError, match="fewer than minibatch_size=16"):
        learner.update(state, regression_batch(size=8))
    with pytest.raises(ValueError, match="disagree on the leading batch size"):
        learner.update(state, {**regression_batch(), "y": np.zeros(3, np.float32)})


def test_int64_is_canonicalized_not_refused(learner_and_state):
    learner, state = learner_and_state
    # numpy's default int64 becomes JAX's int32 without surprise; the layout records int32.
    batch = {**regression_batch(), "i": np.arange(64)}
    learner2 = jl.Learner(
        {"policy": jl.ModuleSpec(_dense(), mse_loss, optax.sgd(0.1))},
        minibatch_size=16,
        sample_batch=batch,
    )
    state2 = learner2.init(jax.random.key(0), batch)
    assert learner2.batch_layout["policy"]["i"].dtype == jnp.int32
    learner2.update(state2, {**regression_batch(), "i": np.arange(64, dtype=np.int32)})
