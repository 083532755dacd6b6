"""A learner placed on a mesh: data-parallel updates equal the single-device update; hosts."""

import socket
import subprocess
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from group_problem import UPDATES, global_batch, make_learner
from helpers import (
    assert_trees_close,
    environ_without_compilation_cache,
    mse_loss,
    regression_batch,
    tree_equal,
)
from jax.sharding import Mesh

import jaxlearner as jl


def single_device_run(learner, batch):
    state = learner.init(jax.random.key(0), batch)
    for _ in range(UPDATES):
        state, metrics = learner.update(state, batch)
    return state, metrics


def one_module_learner():
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, jl.Optimizer(optax.adam, learning_rate=1e-2))
    return jl.Learner({"policy": spec}, minibatch_size=16, num_epochs=2)


@pytest.fixture(scope="module")
def references():
    one = one_module_learner()
    two = make_learner()
    return {
        "one": (one, regression_batch(), single_device_run(one, regression_batch())),
        "two": (two, global_batch(), single_device_run(two, global_batch())),
    }


@pytest.mark.parametrize("problem", ["one", "two"])
@pytest.mark.parametrize("devices", [8, 4, 2, 1])
def test_placed_update_equals_single_device_update(references, problem, devices):
    learner, batch, (expected, expected_metrics) = references[problem]
    placed = learner.on(devices)
    assert type(placed) is jl.Learner and placed.placement.num_devices == devices
    state = placed.init(jax.random.key(0), batch)
    sharding = placed.placement.state_sharding
    assert state.modules[learner.module_ids[0]].grad_steps.sharding == sharding
    for _ in range(UPDATES):
        state, metrics = placed.update(state, batch)
    local = placed.placement.get(state)
    # Shuffling is on: the same permutation is drawn on any number of devices.
    assert_trees_close(local.modules, expected.modules, rtol=1e-5, atol=1e-6)
    assert_trees_close(metrics, expected_metrics, rtol=1e-5, atol=1e-6)
    assert tree_equal(local.key, expected.key)


def test_gradient_is_not_multiplied_by_the_device_count():
    # One SGD step of a linear model from zero weights on y = x . w*: the step is
    # -lr * grad with grad = -2/B * X^T y, the mean over the global minibatch. A gradient
    # summed over 8 devices without averaging would move 8 times as far.
    batch = regression_batch(size=64)
    spec = jl.ModuleSpec(
        nn.Dense(1, use_bias=False, kernel_init=nn.initializers.zeros), mse_loss, optax.sgd(0.01)
    )
    learner = jl.Learner({"m": spec}, shuffle=False, devices="all")
    state = learner.init(jax.random.key(0), batch)
    state, _ = learner.update(state, batch)
    expected = 0.01 * 2.0 / 64 * batch["x"].T @ batch["y"]
    params = learner.placement.get(state).modules["m"].params
    kernel = np.asarray(params["params"]["kernel"])[:, 0]
    np.testing.assert_allclose(kernel, expected, rtol=1e-5)


def test_bad_batch_size_names_sizes_that_work():
    placed = one_module_learner().on("all")
    state = placed.init(jax.random.key(0), regression_batch())
    with pytest.raises(ValueError) as raised:
        placed.update(state, regression_batch(size=60))
    message = str(raised.value)
    assert "global batch of 60 rows with minibatch_size=16 does not split evenly" in message
    assert "over the 8 devices" in message and "[56, 64]" in message
    odd = one_module_learner().replace(minibatch_size=12)
    state = odd.init(jax.random.key(0), regression_batch())
    with pytest.raises(ValueError, match=r"minibatch sizes that split: \[8, 16\]"):
        odd.on("all").update(odd.on("all").placement.put(state), regression_batch())


def test_mesh_validation():
    with pytest.raises(ValueError, match="needs a 'data' axis"):
        jl.LearnerGroup(one_module_learner(), mesh=Mesh(np.asarray(jax.devices()), ("batch",)))
    with pytest.raises(ValueError, match="not both"):
        jl.LearnerGroup(
            one_module_learner(),
            devices=jax.devices(),
            mesh=Mesh(np.asarray(jax.devices()), ("data",)),
        )
    with pytest.raises(TypeError, match="needs a jl.Learner"):
        jl.LearnerGroup("learner")
    with pytest.raises(ValueError, match=f"{len(jax.devices())} device"):
        one_module_learner().on(len(jax.devices()) + 1)
    with pytest.raises(ValueError, match="'all', a positive int"):
        one_module_learner().on("gpu")


def test_learner_group_is_a_placed_learner():
    learner = one_module_learner()
    group = jl.LearnerGroup(learner, devices=jax.devices()[:2])
    assert group == learner.on(2) and group.placement.num_devices == 2
    assert jl.LearnerGroup(learner) == learner.on("all")


def test_a_mesh_with_a_replica_axis():
    learner, batch = one_module_learner(), regression_batch()
    expected, _ = single_device_run(learner, batch)
    mesh = Mesh(np.asarray(jax.devices()).reshape(4, 2), ("data", "replica"))
    placed = learner.on(mesh=mesh)
    assert placed.placement.num_devices == 4
    state = placed.init(jax.random.key(0), batch)
    for _ in range(UPDATES):
        state, _ = placed.update(state, batch)
    assert_trees_close(placed.placement.get(state).modules, expected.modules)


def test_modules_on_a_mesh():
    learner = make_learner(modules_to_train={"policy"})
    placed = learner.on(4)
    state = placed.init(jax.random.key(0), global_batch())
    state, metrics = placed.update(state, global_batch())
    assert set(metrics) == {"policy", "__all__"}
    assert tree_equal(
        placed.placement.get(state).modules["ac"],
        learner.init(jax.random.key(0), global_batch()).modules["ac"],
    )

    bigger, state = placed.add_module(
        state,
        "snapshot",
        learner.specs["policy"],
        regression_batch(),
        params=state.modules["policy"].params,
        train=False,
    )
    assert bigger.module_ids == ("policy", "ac", "snapshot")
    assert bigger.placement == placed.placement
    kernel = state.modules["snapshot"].params["params"]["kernel"]
    assert kernel.sharding == bigger.placement.state_sharding
    state, _ = bigger.update(state, {"policy": regression_batch(), "snapshot": regression_batch()})
    smaller, state = bigger.remove_module(state, "snapshot")
    state, _ = smaller.update(state, global_batch())
    retrained = smaller.replace(modules_to_train={"ac"})
    state, metrics = retrained.update(state, global_batch())
    assert set(metrics) == {"ac", "__all__"}


def test_get_returns_a_state_the_plain_learner_updates():
    learner = one_module_learner()
    placed = learner.on("all")
    state = placed.init(jax.random.key(0), regression_batch())
    local = placed.placement.get(state)
    assert len(local.modules["policy"].params["params"]["kernel"].devices()) == 1
    learner.update(local, regression_batch())


def _still_running(state, sharding):
    """``state`` as the output of a computation that keeps the devices busy a while."""

    def busy(state):
        square = jnp.full((128, 128), 0.01, jnp.float32)
        spin = jax.lax.fori_loop(0, 4000, lambda _, c: jnp.tanh(c @ c), square)[0, 0]

        def delay(x):
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
                return x
            return x + (0 * spin).astype(x.dtype)

        return jax.tree.map(delay, state)

    return jax.jit(busy, out_shardings=sharding)(state)


def _count_host_reads(monkeypatch):
    """A list that grows by one shape each time any jax.Array's value is read on the host."""
    from jax._src.array import ArrayImpl

    reads, value = [], ArrayImpl._value

    def counted(self):
        reads.append(self.shape)
        return value.fget(self)

    monkeypatch.setattr(ArrayImpl, "_value", property(counted))
    return reads


@pytest.mark.parametrize("devices", [None, "all"])
def test_update_reads_no_value_on_the_host(devices, monkeypatch):
    # float(), bool(), np.asarray(), .item() and .tolist() of a jax.Array all read its
    # value through ArrayImpl._value; an update that read one would wait for the devices.
    target = one_module_learner().on(devices)
    state = target.init(jax.random.key(0), regression_batch())
    batch = jax.device_put(regression_batch(), target.placement.batch_sharding)
    state, _ = jax.block_until_ready(target.update(state, batch))
    reads = _count_host_reads(monkeypatch)
    new_state, metrics = target.update(state, batch)
    target.update(new_state, batch)
    assert reads == []
    # The counter sees a read, so the empty list above means none happened.
    float(metrics["policy"]["total_loss"])
    assert reads == [()]


def test_update_returns_without_waiting_for_the_devices():
    # The state is the output of a long computation still running; an update that
    # read any value on the host (validation, metrics) would wait for it to finish.
    # One device only: XLA's CPU client itself holds the dispatch of a program over 8
    # fake devices until their busy inputs are nearly done (0.7 s of 0.8 s measured),
    # so there the reads are counted instead (the test above).
    target = one_module_learner()
    state = target.init(jax.random.key(0), regression_batch())
    batch = jax.device_put(regression_batch(), target.placement.batch_sharding)
    sharding = target.placement.state_sharding
    jax.block_until_ready(target.update(_still_running(state, sharding), batch))
    # Now and then the 2 cores finish the busy state before update returns; an update
    # that waited would never pass, so 6 tries must hold one where both were still running.
    waited = []
    for _ in range(6):
        busy_state = _still_running(state, sharding)
        new_state, metrics = target.update(busy_state, batch)
        running = not busy_state.modules["policy"].grad_steps.is_ready()
        waited.append(not (running and not metrics["policy"]["total_loss"].is_ready()))
        assert int(new_state.modules["policy"].grad_steps) == 64 // 16 * 2
        if not waited[-1]:
            break
    assert not all(waited), "update waited for the state's values in every try"


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_two_processes_equal_one_process_with_eight_devices(tmp_path):
    worker = Path(__file__).with_name("multihost_worker.py")
    port = _free_port()
    outputs = [tmp_path / f"process{i}.npz" for i in range(2)]
    processes = [
        subprocess.Popen(
            [sys.executable, str(worker), str(port), str(i), str(outputs[i])],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=environ_without_compilation_cache(),  # both compile the same programs at once
        )
        for i in range(2)
    ]
    logs = []
    try:
        for process in processes:
            out, _ = process.communicate(timeout=240)
            logs.append(out.decode(errors="replace"))
    finally:
        for process in processes:
            process.kill()
    for process, log in zip(processes, logs, strict=True):
        assert process.returncode == 0, log[-3000:]

    learner = make_learner(devices="all")  # one process, 8 devices
    state = learner.init(jax.random.key(0), global_batch())
    for _ in range(UPDATES):
        state, metrics = learner.update(state, global_batch())
    host = jax.device_get(learner.placement.get(state).modules)
    expected = {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_leaves_with_path(host)}
    for output in outputs:
        saved = np.load(output)
        assert set(saved.files) == {*expected, "total_loss"}
        for path, value in expected.items():
            np.testing.assert_allclose(saved[path], value, rtol=1e-5, atol=1e-6, err_msg=path)
        np.testing.assert_allclose(
            saved["total_loss"], float(metrics["__all__"]["total_loss"]), rtol=1e-5
        )


def test_distributed_initialize_validates_before_starting():
    with pytest.raises(ValueError, match="must look like 'host:port'"):
        jl.distributed.initialize("localhost", num_processes=2, process_id=0)
    with pytest.raises(ValueError, match=r"process_id must be an int in \[0, 2\); got 2"):
        jl.distributed.initialize("127.0.0.1:1234", num_processes=2, process_id=2)
    with pytest.raises(ValueError, match="cpu_collectives must be one of"):
        jl.distributed.initialize("127.0.0.1:1234", 2, 0, cpu_collectives="nccl")
