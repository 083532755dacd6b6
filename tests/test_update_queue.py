"""UpdateQueue: RLlib's LearnerGroup(max_queue_len=...) and update(..., async_update=True)."""

import flax.linen as nn
import jax
import numpy as np
import optax
import pytest
from helpers import mse_loss, regression_batch, tree_equal

import jaxlearner as jl
from jaxlearner.core import update_queue


def make_learner():
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.05))
    return jl.Learner({"policy": spec}, minibatch_size=16)


def batches(count):
    return [regression_batch(size=16, seed=seed) for seed in range(count)]


def sequential(learner, state, trained):
    results = []
    for batch in trained:
        state, metrics = learner.update(state, batch)
        results.append(jax.device_get(metrics))
    return state, results


def test_bounded_queue_drops_the_oldest_waiting_batch_and_returns_results_in_order(monkeypatch):
    # Updates finish only when the test says so: each True the readiness check gives
    # lets the oldest dispatched update count as finished.
    finishes = []
    monkeypatch.setattr(
        update_queue, "metrics_ready", lambda metrics: bool(finishes and finishes.pop())
    )
    learner = make_learner()
    data = batches(6)
    start = learner.init(jax.random.key(0), data[0])
    queue = jl.UpdateQueue(learner, start, max_queue_len=2, max_requests_in_flight=1)
    for batch in data[:4]:
        assert queue.async_update(batch) == []
        assert queue.num_in_flight == 1 and queue.num_waiting <= 2
    # data[0] runs; data[1] was dropped when data[3] came to a full waiting queue.
    assert queue.num_dropped == 1 and queue.num_waiting == 2
    finishes.append(True)
    first = queue.async_update(data[4])  # data[0] done: data[2] runs, data[3:5] wait
    assert len(first) == 1 and (queue.num_in_flight, queue.num_waiting) == (1, 2)
    rest = queue.wait()
    trained = [data[0], data[2], data[3], data[4]]
    expected_state, expected = sequential(learner, start, trained)
    assert len(rest) == 3 and queue.num_in_flight == queue.num_waiting == 0
    for got, want in zip(first + rest, expected, strict=True):
        np.testing.assert_allclose(got["policy"]["mse"], want["policy"]["mse"], rtol=1e-6)
    assert tree_equal(queue.state.modules, expected_state.modules)


def test_without_a_full_queue_every_batch_is_trained_in_order():
    learner = make_learner().on(2)
    data = batches(5)
    start = learner.init(jax.random.key(1), data[0])
    queue = jl.UpdateQueue(learner, start, max_queue_len=8)
    returned = []
    for batch in data:
        returned += queue.async_update(batch)
        assert queue.num_in_flight <= 3
    returned += queue.wait()
    _, expected = sequential(learner, start, data)
    assert queue.num_dropped == 0 and len(returned) == 5
    losses = [r["policy"]["mse"] for r in returned]
    np.testing.assert_allclose(losses, [e["policy"]["mse"] for e in expected], rtol=1e-6)


@pytest.mark.parametrize("field", ["max_queue_len", "max_requests_in_flight"])
@pytest.mark.parametrize("value", [0, -1, 2.0, True])
def test_a_queue_length_below_one_is_refused_before_anything_compiles(field, value):
    learner = make_learner()
    with pytest.raises(ValueError, match=rf"{field} must be an int >= 1.*got {value!r}"):
        jl.UpdateQueue(learner, None, **{field: value})


def test_a_queue_needs_a_learner():
    with pytest.raises(TypeError, match="needs a jl.Learner; got dict"):
        jl.UpdateQueue({"policy": None}, None)
