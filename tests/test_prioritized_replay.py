"""Prioritized replay: trees against NumPy, sampling frequencies, hand-derived weights, updates,
wrap-around, with and without jit, one trace."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import maybe_jit
from scipy import stats

from jaxlearner.algorithms.replay.prioritized_replay import (
    _find_prefix,
    add,
    can_sample,
    prioritized_replay_init,
    sample,
    update_priorities,
)


def example():
    return {"obs": np.zeros(2, np.float32), "action": np.int32(0)}


def transitions(start, count):
    """Transitions numbered ``start .. start + count - 1``: obs ``[i, -i]``, action ``i``."""
    ids = np.arange(start, start + count)
    return {"obs": np.stack([ids, -ids], -1).astype(np.float32), "action": ids.astype(np.int32)}


def leaves(buffer):
    """The leaf values ``p_i^alpha`` of the buffer's rows."""
    first = buffer.sum_tree.shape[0] // 2
    return np.asarray(buffer.sum_tree[first : first + buffer.capacity])


def assert_consistent_trees(buffer):
    """Every inner node is the sum (min) of its children."""
    sum_tree, min_tree = np.asarray(buffer.sum_tree), np.asarray(buffer.min_tree)
    inner = np.arange(1, sum_tree.shape[0] // 2)
    np.testing.assert_allclose(
        sum_tree[inner], sum_tree[2 * inner] + sum_tree[2 * inner + 1], rtol=1e-6
    )
    np.testing.assert_array_equal(
        min_tree[inner], np.minimum(min_tree[2 * inner], min_tree[2 * inner + 1])
    )


def frequencies(buffer, draws, batch_size=64, beta=0.4, seed=0):
    """Empirical row frequencies over ``draws`` vmapped batches."""
    keys = jax.random.split(jax.random.key(seed), draws)
    indices = jax.jit(jax.vmap(lambda k: sample(buffer, k, batch_size, beta).indices))(keys)
    return np.bincount(np.asarray(indices).ravel(), minlength=buffer.capacity)


def test_init_shapes():
    buffer = prioritized_replay_init(example(), capacity=5, alpha=0.5, eps=0.01)
    assert buffer.capacity == 5 and int(buffer.size) == 0
    assert buffer.replay.storage["obs"].shape == (5, 2)
    # 5 rows round up to 8 leaves: a flat tree of 16 nodes, node 0 unused.
    assert buffer.sum_tree.shape == buffer.min_tree.shape == (16,)
    assert not np.any(buffer.sum_tree) and np.all(np.isinf(buffer.min_tree))
    assert float(buffer.max_priority) == 1.0
    np.testing.assert_allclose([buffer.alpha, buffer.eps], [0.5, 0.01], rtol=1e-6)
    for capacity, nodes in [(1, 2), (2, 4), (8, 16), (9, 32)]:
        assert prioritized_replay_init(example(), capacity).sum_tree.shape == (nodes,)


def test_trees_match_numpy_on_random_priorities(jit):
    capacity, alpha, eps = 37, 0.6, 1e-3
    rng = np.random.default_rng(0)
    buffer = prioritized_replay_init(example(), capacity, alpha=alpha, eps=eps)
    priorities = rng.uniform(0, 3, capacity).astype(np.float32)
    buffer = maybe_jit(add, jit)(buffer, transitions(0, capacity), priorities)
    # Updates with repeated rows and signed values: a sequential loop is the reference.
    indices = rng.integers(0, capacity, 50).astype(np.int32)
    updates = rng.normal(0, 2, 50).astype(np.float32)
    buffer = maybe_jit(update_priorities, jit)(buffer, indices, updates)
    expected = priorities.astype(np.float64)
    for index, value in zip(indices, updates, strict=True):
        expected[index] = value
    expected = (np.abs(expected) + eps) ** alpha
    np.testing.assert_allclose(leaves(buffer), expected, rtol=1e-5)
    np.testing.assert_allclose(buffer.sum_tree[1], expected.sum(), rtol=1e-5)
    np.testing.assert_allclose(buffer.min_tree[1], expected.min(), rtol=1e-5)
    assert_consistent_trees(buffer)
    # Leaves past the capacity (37 .. 63) stay empty.
    assert not np.any(buffer.sum_tree[64 + capacity :])


def test_prefix_search_matches_numpy(jit):
    # Integer priorities (some zero) and quarter-integer targets: every float32 sum and
    # difference is exact, so the tree must agree with NumPy's searchsorted exactly.
    capacity = 37
    priorities = np.random.default_rng(1).integers(0, 6, capacity).astype(np.float32)
    priorities[[0, 5, 36]] = 0.0
    buffer = prioritized_replay_init(example(), capacity, alpha=1.0, eps=0.0)
    buffer = add(buffer, transitions(0, capacity), priorities)
    total = int(priorities.sum())
    targets = (np.arange(4 * total, dtype=np.float32) + 0.5) / 4
    rows = maybe_jit(_find_prefix, jit)(buffer.sum_tree, targets)
    # The first row whose cumulative priority exceeds the target.
    np.testing.assert_array_equal(rows, np.searchsorted(np.cumsum(priorities), targets, "right"))
    assert np.all(priorities[np.asarray(rows)] > 0)
    # A target at or past the total (float rounding) still lands on the last positive row.
    past = maybe_jit(_find_prefix, jit)(buffer.sum_tree, np.float32([total, total + 1]))
    np.testing.assert_array_equal(past, [35, 35])


def test_sampling_frequencies_follow_the_priorities(jit):
    # alpha = 0.5: priorities [1, 4, 9, 16, 0.25, 2.25] give leaves [1, 2, 3, 4, 0.5, 1.5],
    # total 12, so P = [1, 2, 3, 4, 0.5, 1.5] / 12.
    buffer = prioritized_replay_init(example(), capacity=6, alpha=0.5, eps=0.0)
    priorities = np.float32([1, 4, 9, 16, 0.25, 2.25])
    buffer = maybe_jit(add, jit)(buffer, transitions(0, 6), priorities)
    probabilities = np.asarray([1, 2, 3, 4, 0.5, 1.5]) / 12
    counts = frequencies(buffer, draws=400)  # 25,600 draws
    # Stratified draws vary less than independent ones, so the multinomial chi-square test
    # is conservative; with a fixed seed the result is deterministic.
    assert stats.chisquare(counts, counts.sum() * probabilities).pvalue > 0.01
    np.testing.assert_allclose(counts / counts.sum(), probabilities, atol=0.005)


def test_importance_weights_hand_derived(jit):
    # alpha = 0.5, eps = 0: priorities [1, 4, 9, 16] give leaves [1, 2, 3, 4], total 10,
    # N = 4, P = [0.1, 0.2, 0.3, 0.4].
    # beta = 1: w = (N P)^-1 = [2.5, 1.25, 5/6, 0.625], over its max 2.5: [1, 1/2, 1/3, 1/4].
    # beta = 0.5: the square roots, [1, 1/sqrt(2), 1/sqrt(3), 1/2].
    # Ten segments of width 1 over [0, 10) with cumulative sums [1, 3, 6, 10] draw rows
    # [0, 1, 1, 2, 2, 2, 3, 3, 3, 3], whatever the key.
    buffer = prioritized_replay_init(example(), capacity=8, alpha=0.5, eps=0.0)
    buffer = add(buffer, transitions(10, 4), np.float32([1, 4, 9, 16]))
    rows = [0, 1, 1, 2, 2, 2, 3, 3, 3, 3]
    for beta, expected in [(1.0, [1, 1 / 2, 1 / 3, 1 / 4]), (0.5, [1, 2**-0.5, 3**-0.5, 0.5])]:
        batch, indices, weights = maybe_jit(lambda b, k, beta: sample(b, k, 10, beta), jit)(
            buffer, jax.random.key(3), beta
        )
        np.testing.assert_array_equal(indices, rows)
        np.testing.assert_allclose(weights, np.asarray(expected)[rows], rtol=1e-6)
        np.testing.assert_array_equal(batch["action"], np.asarray(rows) + 10)
        np.testing.assert_array_equal(batch["obs"][:, 1], -(np.asarray(rows) + 10))
    _, _, weights = sample(buffer, jax.random.key(3), 10, beta=0.0)
    np.testing.assert_array_equal(weights, np.ones(10))


def test_update_priorities_changes_the_frequencies(jit):
    buffer = prioritized_replay_init(example(), capacity=10, alpha=1.0, eps=0.0)
    buffer = add(buffer, transitions(0, 10))  # every row at the max priority 1: uniform
    before = frequencies(buffer, draws=200)
    np.testing.assert_allclose(before / before.sum(), np.full(10, 0.1), atol=0.005)
    buffer = maybe_jit(update_priorities, jit)(buffer, np.int32([3]), np.float32([10.0]))
    # Row 3 now holds 10 of a total 19.
    after = frequencies(buffer, draws=200)
    expected = np.full(10, 1 / 19)
    expected[3] = 10 / 19
    np.testing.assert_allclose(after / after.sum(), expected, atol=0.005)
    assert float(buffer.max_priority) == 10.0


def test_duplicate_indices_take_the_last_priority(jit):
    buffer = prioritized_replay_init(example(), capacity=4, alpha=0.5, eps=0.0)
    buffer = add(buffer, transitions(0, 3))
    # Row 2 is named three times: its last priority, 16, wins on every backend and ordering.
    indices = np.int32([2, 0, 2, 1, 2])
    priorities = np.float32([25, 4, 9, 1, 16])
    buffer = maybe_jit(update_priorities, jit)(buffer, indices, priorities)
    np.testing.assert_allclose(leaves(buffer), [2, 1, 4, 0])  # sqrt of [4, 1, 16] and empty
    assert float(buffer.max_priority) == 16.0  # the largest written; 25 was overwritten
    # A new row gets the max priority: leaf sqrt(16) = 4.
    buffer = add(buffer, transitions(3, 1))
    np.testing.assert_allclose(leaves(buffer), [2, 1, 4, 4])
    assert_consistent_trees(buffer)


def test_eps_and_signed_priorities():
    buffer = prioritized_replay_init(example(), capacity=4, alpha=1.0, eps=0.5)
    buffer = add(buffer, transitions(0, 2), np.float32([0.0, -2.0]))
    # |p| + eps: [0.5, 2.5]; max priority 2.5.
    np.testing.assert_allclose(leaves(buffer)[:2], [0.5, 2.5])
    assert float(buffer.max_priority) == 2.5


def test_add_wraps_around(jit):
    add_fn = maybe_jit(add, jit)
    buffer = prioritized_replay_init(example(), capacity=5, alpha=1.0, eps=0.0)
    buffer = add_fn(buffer, transitions(0, 3), np.float32([1, 2, 3]))
    # Transitions 3, 4 go to rows 3, 4; 5, 6 wrap to rows 0, 1, replacing their priorities.
    buffer = add_fn(buffer, transitions(3, 4), np.float32([4, 5, 6, 7]))
    np.testing.assert_array_equal(buffer.replay.storage["action"], [5, 6, 2, 3, 4])
    np.testing.assert_allclose(leaves(buffer), [6, 7, 3, 4, 5])
    assert (int(buffer.replay.position), int(buffer.size)) == (2, 5)
    # Two more at the max priority 7 overwrite rows 2, 3.
    buffer = maybe_jit(lambda b, t: add(b, t), jit)(buffer, transitions(7, 2))
    np.testing.assert_allclose(leaves(buffer), [6, 7, 7, 7, 5])
    assert float(buffer.sum_tree[1]) == 32.0
    assert_consistent_trees(buffer)
    batch, indices, _ = sample(buffer, jax.random.key(0), 64, beta=0.4)
    np.testing.assert_array_equal(batch["action"], buffer.replay.storage["action"][indices])


def test_updates_to_empty_rows_are_ignored():
    buffer = prioritized_replay_init(example(), capacity=8, alpha=1.0, eps=0.0)
    buffer = add(buffer, transitions(0, 3))
    # Under jit the indices are traced: row 5 is empty and its update is dropped.
    buffer = jax.jit(update_priorities)(buffer, np.int32([5, 1]), np.float32([9.0, 2.0]))
    np.testing.assert_allclose(leaves(buffer), [1, 2, 1, 0, 0, 0, 0, 0])
    assert float(buffer.max_priority) == 2.0
    assert np.all(frequencies(buffer, draws=20)[3:] == 0)
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 8\); got -1 .. 1"):
        update_priorities(buffer, np.int32([-1, 1]), np.float32([1.0, 1.0]))
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 8\); got 8 .. 8"):
        update_priorities(buffer, np.int32([8]), np.float32([1.0]))
    assert update_priorities(buffer, np.int32([]), np.float32([])) is buffer


def test_add_sample_and_update_compile_once():
    @jax.jit
    @chex.assert_max_traces(n=1)
    def add_fn(buffer, new, priorities):
        return add(buffer, new, priorities)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def sample_fn(buffer, key, beta):
        return sample(buffer, key, 8, beta)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def update_fn(buffer, indices, priorities):
        return update_priorities(buffer, indices, priorities)

    buffer = prioritized_replay_init(example(), capacity=6)
    for step in range(5):  # wrapping positions, growing sizes, annealed beta: the same trace
        key = jax.random.fold_in(jax.random.key(0), step)
        buffer = add_fn(buffer, transitions(4 * step, 4), np.float32([1, 2, 3, 4]) * (step + 1))
        batch, indices, weights = sample_fn(buffer, key, 0.4 + 0.15 * step)
        buffer = update_fn(buffer, indices, jnp.abs(batch["obs"][:, 0]))
        assert int(batch["action"].max()) <= 4 * step + 3 and np.all(weights <= 1)
    np.testing.assert_array_equal(buffer.replay.storage["action"], [18, 19, 14, 15, 16, 17])
    assert_consistent_trees(buffer)


def test_inside_a_scan_with_a_donated_buffer():
    def step(buffer, key):
        ids = jax.random.randint(key, (2,), 0, 100)
        new = {"obs": jnp.stack([ids, -ids], -1).astype(jnp.float32), "action": ids}
        buffer = add(buffer, new)
        batch, indices, _ = sample(buffer, key, 4, 0.5)
        return update_priorities(buffer, indices, batch["obs"][:, 0] + 1.0), None

    run = jax.jit(lambda b, keys: jax.lax.scan(step, b, keys)[0], donate_argnums=0)
    buffer = run(prioritized_replay_init(example(), 5), jax.random.split(jax.random.key(0), 7))
    assert (int(buffer.replay.position), int(buffer.size)) == (4, 5)
    assert_consistent_trees(buffer)


def test_vmap_over_buffers_with_different_alpha():
    def filled(alpha):
        buffer = prioritized_replay_init(example(), 4, alpha=alpha, eps=0.0)
        return add(buffer, transitions(0, 4), np.float32([1, 1, 1, 9]))

    buffers = jax.tree.map(lambda *x: jnp.stack(x), filled(0.0), filled(1.0))
    _, indices, weights = jax.jit(jax.vmap(lambda b, k: sample(b, k, 12, 1.0)))(
        buffers, jax.random.split(jax.random.key(0), 2)
    )
    # alpha = 0: uniform, three draws of each row, weights 1.
    np.testing.assert_array_equal(np.bincount(indices[0], minlength=4), [3, 3, 3, 3])
    np.testing.assert_array_equal(weights[0], np.ones(12))
    # alpha = 1: leaves [1, 1, 1, 9], total 12: one draw each of rows 0-2, nine of row 3,
    # whose weight is (1 / 9)^1.
    np.testing.assert_array_equal(np.bincount(indices[1], minlength=4), [1, 1, 1, 9])
    np.testing.assert_allclose(weights[1], np.where(indices[1] == 3, 1 / 9, 1.0), rtol=1e-6)


def test_sample_from_an_empty_buffer():
    empty = prioritized_replay_init(example(), capacity=4)
    with pytest.raises(ValueError, match="replay buffer is empty; add transitions first"):
        sample(empty, jax.random.key(0), 2, 0.4)
    # Under jit the size is traced: the documented result is row 0 with weight 0.
    batch, indices, weights = jax.jit(lambda b, k: sample(b, k, 2, 0.4))(empty, jax.random.key(0))
    assert not np.any(indices) and not np.any(weights) and not np.any(batch["action"])
    assert not bool(can_sample(empty, 1))
    assert bool(can_sample(add(empty, transitions(0, 2)), 2))


def test_validation():
    with pytest.raises(ValueError, match="capacity must be a positive int; got 0"):
        prioritized_replay_init(example(), 0)
    with pytest.raises(ValueError, match="capacity must be a positive int; got True"):
        prioritized_replay_init(example(), True)
    with pytest.raises(ValueError, match=r"alpha must lie in \[0, 1\]; got 1.5"):
        prioritized_replay_init(example(), 4, alpha=1.5)
    with pytest.raises(ValueError, match=r"alpha must be a scalar; got shape \(2,\)"):
        prioritized_replay_init(example(), 4, alpha=np.ones(2))
    with pytest.raises(ValueError, match=r"eps must lie in \[0, inf\]; got -0.1"):
        prioritized_replay_init(example(), 4, eps=-0.1)
    buffer = add(prioritized_replay_init(example(), 4), transitions(0, 2))
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="batch_size must be a positive int; got 0"):
        sample(buffer, key, 0, 0.4)
    with pytest.raises(ValueError, match="batch_size must be a positive int; got 2.0"):
        sample(buffer, key, 2.0, 0.4)
    with pytest.raises(ValueError, match=r"beta must lie in \[0, 1\]; got -0.5"):
        sample(buffer, key, 2, -0.5)
    with pytest.raises(ValueError, match="5 transitions exceed the capacity 4"):
        add(buffer, transitions(0, 5))
    with pytest.raises(ValueError, match=r"add: priorities must have shape \(2,\).*got \(3,\)"):
        add(buffer, transitions(0, 2), np.ones(3, np.float32))
    with pytest.raises(ValueError, match="add: priorities must be finite"):
        add(buffer, transitions(0, 2), np.float32([1.0, np.nan]))
    with pytest.raises(ValueError, match=r"update_priorities: priorities must have shape \(2,\)"):
        update_priorities(buffer, np.int32([0, 1]), np.ones(1, np.float32))
    with pytest.raises(ValueError, match="indices must be a 1-D integer array; got shape"):
        update_priorities(buffer, np.float32([0, 1]), np.ones(2, np.float32))
    with pytest.raises(ValueError, match="update_priorities: priorities must be finite"):
        update_priorities(buffer, np.int32([0]), np.float32([np.inf]))
