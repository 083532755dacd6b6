"""Replay buffer: circular writes, uniform sampling, errors, with and without jit, one trace."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import maybe_jit

from jaxlearner.algorithms.replay.replay_buffer import add, can_sample, replay_buffer_init, sample


def example():
    return {"obs": np.zeros(2, np.float32), "action": np.int32(0), "reward": np.float32(0)}


def transitions(start, count):
    """Transitions numbered ``start .. start + count - 1``: obs ``[i, -i]``, action ``i``."""
    ids = np.arange(start, start + count)
    return {
        "obs": np.stack([ids, -ids], -1).astype(np.float32),
        "action": ids.astype(np.int32),
        "reward": (ids / 10).astype(np.float32),
    }


def test_init_shapes_and_dtypes():
    buffer = replay_buffer_init(example(), capacity=5)
    assert buffer.capacity == 5
    assert jax.tree.map(lambda x: (x.shape, x.dtype.name), buffer.storage) == {
        "obs": ((5, 2), "float32"),
        "action": ((5,), "int32"),
        "reward": ((5,), "float32"),
    }
    assert int(buffer.position) == 0 and int(buffer.size) == 0


def test_add_wraps_around(jit):
    add_fn = maybe_jit(add, jit)
    buffer = replay_buffer_init(example(), capacity=5)
    buffer = add_fn(buffer, transitions(0, 3))
    # Rows 0-2 hold transitions 0-2.
    np.testing.assert_array_equal(buffer.storage["action"], [0, 1, 2, 0, 0])
    assert (int(buffer.position), int(buffer.size)) == (3, 3)
    buffer = add_fn(buffer, transitions(3, 4))
    # Transitions 3, 4 go to rows 3, 4; 5, 6 wrap to rows 0, 1 over the oldest ones.
    np.testing.assert_array_equal(buffer.storage["action"], [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(buffer.storage["obs"][:, 1], [-5, -6, -2, -3, -4])
    assert (int(buffer.position), int(buffer.size)) == (2, 5)
    buffer = add_fn(buffer, transitions(7, 5))  # exactly the capacity: rows 2, 3, 4, 0, 1
    np.testing.assert_array_equal(buffer.storage["action"], [10, 11, 7, 8, 9])
    assert (int(buffer.position), int(buffer.size)) == (2, 5)


def test_add_returns_a_new_buffer():
    buffer = replay_buffer_init(example(), capacity=4)
    new = add(buffer, transitions(1, 2))
    assert int(buffer.size) == 0 and not np.any(buffer.storage["action"])
    assert int(new.size) == 2


def test_sample_draws_only_filled_rows(jit):
    buffer = add(replay_buffer_init(example(), capacity=100), transitions(0, 7))
    batch = maybe_jit(lambda b, k: sample(b, k, 2_000), jit)(buffer, jax.random.key(0))
    assert jax.tree.map(jnp.shape, batch) == {
        "obs": (2_000, 2),
        "action": (2_000,),
        "reward": (2_000,),
    }
    actions = np.asarray(batch["action"])
    assert set(actions) == set(range(7))  # only filled rows, all of them
    # Fields of one sampled row belong to the same transition.
    np.testing.assert_array_equal(batch["obs"][:, 0], actions)
    np.testing.assert_allclose(batch["reward"], actions / 10, rtol=1e-6)
    # Uniform: each of 7 rows ~ 2000/7 = 286 times, binomial std ~ 16; allow 5 of them.
    counts = np.bincount(actions, minlength=7)
    assert np.all(np.abs(counts - 2_000 / 7) < 80), counts


def test_sample_smaller_buffer_than_batch_repeats_rows(jit):
    buffer = add(replay_buffer_init(example(), capacity=10), transitions(4, 2))
    batch = maybe_jit(lambda b, k: sample(b, k, 16), jit)(buffer, jax.random.key(1))
    assert batch["action"].shape == (16,)
    assert set(np.asarray(batch["action"])) <= {4, 5}
    assert not bool(can_sample(buffer, 16)) and bool(can_sample(buffer, 2))


def test_sample_from_an_empty_buffer():
    empty = replay_buffer_init(example(), capacity=10)
    with pytest.raises(ValueError, match="replay buffer is empty; add transitions first"):
        sample(empty, jax.random.key(0), 4)
    # Under jit the size is traced: the documented result is the initial (zero) storage.
    batch = jax.jit(lambda b, k: sample(b, k, 4))(empty, jax.random.key(0))
    assert not any(np.any(x) for x in jax.tree.leaves(batch))
    assert not bool(jax.jit(can_sample, static_argnums=1)(empty, 1))


def test_add_and_sample_compile_once():
    @jax.jit
    @chex.assert_max_traces(n=1)
    def add_fn(buffer, new):
        return add(buffer, new)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def sample_fn(buffer, key):
        return sample(buffer, key, 8)

    buffer = replay_buffer_init(example(), capacity=6)
    for step in range(5):  # positions 0, 4, 2 (wrapped), 0, 4 and growing sizes: same trace
        buffer = add_fn(buffer, transitions(4 * step, 4))
        batch = sample_fn(buffer, jax.random.fold_in(jax.random.key(0), step))
        assert int(batch["action"].max()) <= 4 * step + 3
    np.testing.assert_array_equal(buffer.storage["action"], [18, 19, 14, 15, 16, 17])


def test_add_inside_a_scan_with_a_donated_buffer():
    def fill(buffer, ids):
        return add(buffer, transitions_like(ids)), None

    def transitions_like(ids):
        return {
            "obs": jnp.stack([ids, -ids], -1).astype(jnp.float32),
            "action": ids,
            "reward": ids / 10,
        }

    run = jax.jit(lambda b, ids: jax.lax.scan(fill, b, ids)[0], donate_argnums=0)
    buffer = run(replay_buffer_init(example(), capacity=4), jnp.arange(6, dtype=jnp.int32)[:, None])
    # Six single adds into four rows: rows hold 4, 5, 2, 3.
    np.testing.assert_array_equal(buffer.storage["action"], [4, 5, 2, 3])
    assert (int(buffer.position), int(buffer.size)) == (2, 4)


def test_validation():
    with pytest.raises(ValueError, match="capacity must be a positive int; got 0"):
        replay_buffer_init(example(), 0)
    with pytest.raises(ValueError, match="example_transition has no arrays"):
        replay_buffer_init({}, 4)
    buffer = replay_buffer_init(example(), capacity=4)
    with pytest.raises(ValueError, match="5 transitions exceed the capacity 4"):
        add(buffer, transitions(0, 5))
    with pytest.raises(ValueError, match="transitions have structure"):
        add(buffer, {"obs": np.zeros((1, 2), np.float32)})
    wrong_shape = {**transitions(0, 2), "obs": np.zeros((2, 3), np.float32)}
    with pytest.raises(ValueError, match=r"\['obs'\] has shape \(2, 3\); expected \[N, \*\(2,\)\]"):
        add(buffer, wrong_shape)
    wrong_dtype = {**transitions(0, 2), "action": np.zeros(2, np.float32)}
    with pytest.raises(
        ValueError, match=r"\['action'\] has dtype float32; the buffer stores int32"
    ):
        add(buffer, wrong_dtype)
    ragged = {**transitions(0, 2), "reward": np.zeros(3, np.float32)}
    with pytest.raises(ValueError, match=r"different numbers of transitions \[2, 3\]"):
        add(buffer, ragged)
    with pytest.raises(ValueError, match="batch_size must be a positive int; got 0"):
        sample(buffer, jax.random.key(0), 0)
