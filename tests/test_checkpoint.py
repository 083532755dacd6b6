"""Checkpoints: exact round trips and resumes, mismatches, corruption, retention, crashes."""

import ast
import gc
import hashlib
import json
import math
import os
import pathlib
import pickle
import shutil
import signal
import subprocess
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from checkpoint_child import make_learner as make_crash_learner
from checkpoint_child import state_after
from helpers import (
    ActorCritic,
    actor_critic_loss,
    assert_trees_close,
    environ_without_compilation_cache,
    mse_loss,
    regression_batch,
)

import jaxlearner as jl
from jaxlearner.checkpoint.manager import CheckpointCorruptedError, CheckpointManager
from jaxlearner.checkpoint.rebuild import restore
from jaxlearner.checkpoint.step_contents import resolve_directory as _resolve_directory
from jaxlearner.core.registry import learner_from_recipe, register_recipe, registered_recipes

TMP_SUFFIX = ".orbax-checkpoint-tmp"


def make_learner(dense=None, dense_optimizer=None, **options):
    """Two modules: an actor-critic with two named optimizers, a scheduled learning rate and
    coefficient, a target network and extra state (one weakly typed scalar); and a bfloat16
    regression module."""
    actor_critic = jl.ModuleSpec(
        ActorCritic(),
        actor_critic_loss,
        optimizers={
            "actor": jl.Optimizer(
                optax.adam, learning_rate=[[0, 1e-2], [200, 1e-3]], grad_clip=1.0
            ),
            "critic": optax.sgd(0.1, momentum=0.9),
        },
        hyperparams={"entropy_coeff": [[0, 0.01], [200, 0.0]]},
        additional_updates=[jl.polyak_update(tau=0.1)],
        init_extra=lambda params: {"noise_scale": 1.0, "visits": jnp.zeros((3,), jnp.int32)},
    )
    regression = jl.ModuleSpec(
        dense or nn.Dense(1, param_dtype=jnp.bfloat16),
        mse_loss,
        dense_optimizer or optax.adam(1e-2),
    )
    options = {"minibatch_size": 16, "num_epochs": 2, "sample_batch": batches(0), **options}
    return jl.Learner({"ac": actor_critic, "dense": regression}, **options)


def batches(seed):
    return {"ac": regression_batch(seed=seed), "dense": regression_batch(seed=seed + 100)}


def train(learner, updates, key=None):
    state = learner.init(key if key is not None else jax.random.key(0), batches(0))
    metrics = None
    for i in range(1, updates + 1):
        state, metrics = learner.update(state, batches(i))
    return state, metrics


def _host(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(x))
    return np.asarray(x)


def assert_identical(restored, saved):
    """Same tree (optax named tuples and empty states included), dtypes, weak types, typed-key
    implementations and bits."""
    assert jax.tree.structure(restored) == jax.tree.structure(saved)
    pairs = zip(jax.tree_util.tree_leaves_with_path(restored), jax.tree.leaves(saved), strict=True)
    for (path, new), old in pairs:
        where = jax.tree_util.keystr(path)
        assert new.dtype == old.dtype, where
        if jax.dtypes.issubdtype(old.dtype, jax.dtypes.prng_key):
            assert jax.random.key_impl(new) == jax.random.key_impl(old), where
        else:
            assert new.weak_type == old.weak_type, where
        np.testing.assert_array_equal(_host(new), _host(old), err_msg=where)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A directory holding step 3 of ``make_learner`` (three updates), and that state."""
    directory = tmp_path_factory.mktemp("saved") / "run"
    learner = make_learner()
    state, metrics = train(learner, 3)
    with CheckpointManager(directory) as ckpt:
        ckpt.save(3, state, learner, metrics=metrics)
    return directory, state


def test_round_trip_is_bit_identical(saved):
    directory, state = saved
    learner = make_learner()
    restored = CheckpointManager(directory).restore(learner)
    assert_identical(restored, state)
    # The parts that most often come back wrong, checked by name.
    ac = restored.modules["ac"]
    assert set(ac.opt_states) == {"actor", "critic"}
    # The actor is optax.chain(clip, inject_hyperparams(adam)), masked by the partition.
    actor = ac.opt_states["actor"].inner_state
    assert isinstance(actor[1], optax.InjectStatefulHyperparamsState)
    assert ac.extra["noise_scale"].dtype == jnp.float32 and ac.extra["visits"].dtype == jnp.int32
    assert restored.modules["dense"].params["params"]["kernel"].dtype == jnp.bfloat16
    assert int(restored.updates) == 3 and int(ac.grad_steps) == 3 * 2 * 4
    # Restoring leaves the learner (a frozen value) as it was.
    assert learner == make_learner().replace(modules=learner.specs)


def test_restore_leaves_the_learner_as_it_was(saved):
    directory, state = saved
    ckpt = CheckpointManager(directory, read_only=True)
    fresh = make_learner(sample_batch=None)
    assert_identical(ckpt.restore(fresh), state)
    assert fresh.batch_layout is None  # its abstract state came from the saved layout
    assert ckpt.batch_layout() == make_learner().batch_layout
    knowing = make_learner(sample_batch=None, batch_layout=ckpt.batch_layout())
    before = knowing.replace()
    ckpt.restore(knowing)
    assert knowing == before


class TwoLayers(nn.Module):
    @nn.compact
    def __call__(self, x):
        hidden = nn.relu(nn.Dense(4)(x))  # Dense_0
        return nn.Dense(1)(hidden)  # Dense_1


@pytest.mark.filterwarnings("ignore:Sharding info not provided when restoring")
def test_plain_orbax_reads_the_state_as_a_nested_tree(tmp_path):
    # No jaxlearner on the reading side: orbax alone restores the step's state folder into
    # nested dicts named after modules, layers and parameters.
    model = TwoLayers()
    spec = jl.ModuleSpec(model, mse_loss, optax.adam(1e-2))
    learner = jl.Learner(
        {"default_policy": spec}, minibatch_size=16, sample_batch=regression_batch()
    )
    state = learner.init(jax.random.key(0), regression_batch())
    state, _ = learner.update(state, regression_batch(seed=1))
    with CheckpointManager(tmp_path, async_save=False) as ckpt:
        ckpt.save(1, state, learner)
    for checkpointer in (ocp.StandardCheckpointer(), ocp.PyTreeCheckpointer()):
        restored = checkpointer.restore(tmp_path / "1" / "state")
        module = restored["modules"]["default_policy"]
        kernel = module["params"]["params"]["Dense_0"]["kernel"]
        assert kernel.shape == (3, 4)
        x = regression_batch(seed=2)["x"]
        expected = model.apply(state.modules["default_policy"].params, x)
        np.testing.assert_array_equal(model.apply(module["params"], x), expected)
        # Optimizer states by field name, counters and the key as its key data.
        assert int(module["opt_states"]["default"][0]["count"]) == 4
        assert int(restored["updates"]) == 1 and restored["key"].dtype == np.uint32
        assert module["extra"] == {} and module["hyperparams"] == {}


def test_round_trip_keeps_the_key_implementation(tmp_path):
    learner = jl.Learner(
        {"policy": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.adam(1e-2))},
        minibatch_size=16,
        sample_batch=regression_batch(),
    )
    state = learner.init(jax.random.key(7, impl="rbg"), regression_batch())
    state, _ = learner.update(state, regression_batch(seed=1))
    ckpt = CheckpointManager(tmp_path, async_save=False)
    ckpt.save(1, state, learner)
    restored = ckpt.restore(learner)
    assert jax.random.key_impl(restored.key) == "rbg"
    assert_identical(restored, state)


def test_resume_is_bit_exact(tmp_path):
    # N updates, save, restore into a freshly built learner, M more == N + M straight.
    learner = make_learner()
    state, _ = train(learner, 3)
    ckpt = CheckpointManager(tmp_path)
    ckpt.save(3, state, learner)
    ckpt.wait_until_finished()
    resumed = make_learner(sample_batch=None, batch_layout=ckpt.batch_layout())
    restored = ckpt.restore(resumed)
    for i in (4, 5):
        state, straight_metrics = learner.update(state, batches(i))
        restored, resumed_metrics = resumed.update(restored, batches(i))
    assert_identical(restored, state)
    assert_identical(resumed_metrics, straight_metrics)


def test_restored_state_reuses_the_compiled_update(tmp_path):
    traces = []

    def loss(params, batch, ctx):
        traces.append(1)
        return mse_loss(params, batch, ctx)

    spec = jl.ModuleSpec(
        nn.Dense(1), loss, optax.adam(1e-2), init_extra=lambda params: {"scale": 0.5}
    )
    learner = jl.Learner({"policy": spec}, minibatch_size=16, sample_batch=regression_batch())
    state = learner.init(jax.random.key(0), regression_batch())
    state, _ = learner.update(state, regression_batch())
    ckpt = CheckpointManager(tmp_path, async_save=False)
    ckpt.save(1, state, learner)
    restored = ckpt.restore(learner)
    traces.clear()
    learner.update(restored, regression_batch(seed=2))
    # Same avals (dtypes, weak types) and placement: no new trace, no recompilation.
    assert traces == []


def test_metadata_describes_the_step(saved):
    directory, state = saved
    meta = CheckpointManager(directory, read_only=True).metadata()
    assert meta["format"] == "jaxlearner.checkpoint.manager" and meta["step"] == 3
    assert {"jaxlearner", "jax", "flax", "optax", "orbax-checkpoint"} <= set(meta["versions"])
    assert meta["versions"]["jax"] == jax.__version__
    ac = meta["modules"]["ac"]
    assert ac["spec"]["optimizers"]["actor"]["learning_rate"] == [[0, 0.01], [200, 0.001]]
    assert ac["spec"]["hyperparams"]["entropy_coeff"] == [[0, 0.01], [200, 0.0]]
    assert ac["batch_layout"] == {
        "dict": {"x": {"shape": [3], "dtype": "float32"}, "y": {"shape": [], "dtype": "float32"}}
    }
    assert ac["counters"] == {"grad_steps": 24, "env_steps": 3 * 64}
    assert meta["counters"] == {"updates": 3, "grad_steps": 24, "skipped_steps": 0}
    assert meta["devices"]["device_count"] == 8
    assert meta["devices"]["state_sharding"]["num_devices"] == 1
    assert meta["learner"]["minibatch_size"] == 16 and meta["recipe"] is None
    # The learner's nested metrics, flattened with "/".
    assert math.isfinite(meta["metrics"]["ac/total_loss"])
    assert meta["key_impl"] == "threefry2x32"
    # One digest per leaf, by its path in the tree orbax saved (the key as its key data).
    digests = meta["digests"]
    assert len(digests) == len(jax.tree.leaves(state))
    assert all(len(sha) == 64 for sha in digests.values())
    key_data = np.asarray(jax.random.key_data(state.key))
    assert digests["key"] == hashlib.sha256(key_data.tobytes()).hexdigest()
    assert "modules/dense/params/params/kernel" in digests


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            dict(dense=nn.Dense(2, param_dtype=jnp.bfloat16)),
            r"at modules/dense/params/params/bias: saved bfloat16\[1\], expected bfloat16\[2\]",
        ),
        (
            dict(dense=nn.Dense(1)),
            r"at modules/dense/params/params/bias: saved bfloat16\[1\], expected float32\[1\]",
        ),
        (
            dict(dense_optimizer=optax.sgd(0.1, momentum=0.9)),
            r"at modules/dense/opt_states/default/0/trace/params/bias: saved no such leaf, "
            r"expected bfloat16\[1\]",
        ),
    ],
    ids=["shape", "dtype", "optimizer"],
)
def test_structure_mismatch_names_the_first_differing_leaf(saved, change, message):
    directory, _ = saved
    learner = make_learner(**change)
    before = learner.replace()
    with pytest.raises(ValueError, match=message):
        CheckpointManager(directory).restore(learner)
    assert learner == before  # a failed restore leaves the learner as it was


def test_old_format_is_refused_naming_both_versions(saved, tmp_path):
    # A step as jaxlearner 0.1.0 described it: format 1, its state a flat "00000", ... tree.
    copy = copy_run(saved[0], tmp_path)
    metadata_file = copy / "3" / "jaxlearner" / "metadata"
    metadata = json.loads(metadata_file.read_text())
    metadata["format_version"] = 1
    metadata["versions"]["jaxlearner"] = "0.1.0"
    metadata_file.write_text(json.dumps(metadata))
    message = (
        r"Step 3 in .* uses checkpoint format 1 \(saved by jaxlearner 0\.1\.0\); this jaxlearner "
        r"reads format 2 only \(the state as its nested tree\)\. Read it with the jaxlearner "
        r"release that saved it \(0\.1\.0\)\."
    )
    with pytest.raises(ValueError, match=message):
        CheckpointManager(copy).restore(make_learner())
    with pytest.raises(ValueError, match=message):
        restore(copy)


def test_module_mismatch_names_the_modules(saved):
    directory, _ = saved
    ckpt = CheckpointManager(directory)
    only_ac = actor_critic_learner()
    with pytest.raises(ValueError, match="module 'dense' is in the checkpoint but not in the"):
        ckpt.restore(only_ac)
    extra = jl.Learner({**make_learner().specs, "new": make_learner().specs["dense"]})
    with pytest.raises(ValueError, match="module 'new' is in the learner but not in the"):
        ckpt.restore(extra)


def copy_run(directory, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    return copy


def flip_bytes(path, count=64):
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    for i in range(middle, min(middle + count, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def table_run(tmp_path_factory):
    """A step whose state has one large leaf, extra['table'], alone in the largest data file."""
    directory = tmp_path_factory.mktemp("table") / "run"
    learner = table_learner()
    state = learner.init(jax.random.key(0), regression_batch())
    with CheckpointManager(directory, async_save=False) as ckpt:
        ckpt.save(1, state, learner)
    return directory, state


def table_learner():
    table = np.random.default_rng(0).random(65536, dtype=np.float32)
    spec = jl.ModuleSpec(
        nn.Dense(1), mse_loss, optax.adam(1e-2), init_extra=lambda params: {"table": table}
    )
    return jl.Learner({"policy": spec}, minibatch_size=16, sample_batch=regression_batch())


def largest_file(directory):
    files = [p for p in (directory / "1" / "state").rglob("*") if p.is_file()]
    return max(files, key=lambda p: p.stat().st_size)


# When one array of a restore (or of orbax's metadata read) fails, orbax leaves the reads of
# the others pending on an event loop it then closes; they complain when they finish or are
# collected. Let them finish and collect them inside the tests that cause them, where their
# (harmless) complaints are expected.
ORBAX_FAILED_READ = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning",
    "ignore:coroutine .* was never awaited:RuntimeWarning",
)


@pytest.fixture
def collect_orbax_leftovers():
    yield
    time.sleep(0.5)  # tensorstore finishes the abandoned reads on its own threads
    gc.collect()


def test_corrupted_bytes_are_caught_by_the_digest(table_run, tmp_path):
    directory, state = table_run
    copy = copy_run(directory, tmp_path)
    flip_bytes(largest_file(copy))
    with pytest.raises(
        CheckpointCorruptedError, match=r"leaf modules/policy/extra/table has sha256"
    ):
        CheckpointManager(copy).restore(table_learner())
    # With verification off the same bytes restore silently, wrong: the digest is what caught it.
    restored = CheckpointManager(copy, verify=False).restore(table_learner())
    table = np.asarray(restored.modules["policy"].extra["table"])
    assert not np.array_equal(table, np.asarray(state.modules["policy"].extra["table"]))


@ORBAX_FAILED_READ
def test_unreadable_file_names_the_leaf(table_run, tmp_path, collect_orbax_leftovers):
    directory, _ = table_run
    copy = copy_run(directory, tmp_path)
    data = largest_file(copy)
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # a truncated chunk file
    with pytest.raises(
        CheckpointCorruptedError,
        match=r"damaged: leaf modules/policy/extra/table cannot be read",
    ):
        CheckpointManager(copy).restore(table_learner())


@ORBAX_FAILED_READ
def test_damaged_index_is_reported_before_reading(table_run, tmp_path, collect_orbax_leftovers):
    directory, _ = table_run
    copy = copy_run(directory, tmp_path)
    index = copy / "1" / "state" / "manifest.ocdbt"  # tensorstore's index of every array
    flip_bytes(index, count=16)
    # Orbax's own description of the tree (read for the structure check) goes through the
    # index too, so the damage shows there, for the whole state rather than one leaf.
    with pytest.raises(
        CheckpointCorruptedError,
        match=r"damaged: orbax's description of its state cannot be read: .*manifest\.ocdbt",
    ):
        CheckpointManager(copy).restore(table_learner())


def kept_by_rule(values, max_to_keep, keep_best, mode):
    """The steps 1..len(values) a keep-latest-N plus keep-best-K rule must hold; NaN is worst."""
    steps = list(range(1, len(values) + 1))
    sign = 1 if mode == "max" else -1
    score = {
        s: -math.inf if math.isnan(v) else sign * v for s, v in zip(steps, values, strict=True)
    }
    best = sorted(steps, key=lambda s: score[s])[-keep_best:] if keep_best else []
    return sorted(set(steps[-max_to_keep:]) | set(best))


@pytest.mark.parametrize(("max_to_keep", "keep_best"), [(2, 1), (1, 1), (1, 2)])
@pytest.mark.parametrize("mode", ["max", "min"])
def test_retention_keeps_the_latest_and_the_best(tmp_path, max_to_keep, keep_best, mode):
    learner = jl.Learner(
        {"policy": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))},
        minibatch_size=16,
        sample_batch=regression_batch(),
    )
    state = learner.init(jax.random.key(0), regression_batch())
    sign = 1 if mode == "max" else -1
    # Each new step is worse than the best so far, so a pure best-K rule would delete it.
    values = [sign * v for v in (1.0, 9.0, math.nan, 3.0, 0.0, -5.0)]
    options = dict(max_to_keep=max_to_keep, keep_best=keep_best, best_mode=mode)
    ckpt = CheckpointManager(tmp_path, best_metric="eval/return_mean", **options)
    for step, value in enumerate(values, start=1):
        ckpt.save(step, state, learner, metrics={"eval": {"return_mean": value}})
        ckpt.wait_until_finished()
        expected = kept_by_rule(values[:step], max_to_keep, keep_best, mode)
        assert list(ckpt.all_steps()) == expected
        on_disk = sorted(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit())
        assert on_disk == expected
        assert step in on_disk
        if step == 3:  # NaN is stored as a JSON string, and ranks worst
            assert ckpt.metadata(3)["metrics"]["eval/return_mean"] == "nan"
    assert ckpt.best_step() == 2
    reader = CheckpointManager(tmp_path, read_only=True, best_metric="eval/return_mean")
    assert reader.best_step() == (2 if mode == "max" else 6)  # ranked by this reader's mode
    # A new manager ranks the steps it finds by the metrics saved with them (once the first,
    # the directory's one writer, is closed).
    ckpt.close()
    again = CheckpointManager(tmp_path, best_metric="eval/return_mean", **options)
    again.save(7, state, learner, metrics={"eval/return_mean": sign * 4.0})
    again.wait_until_finished()
    assert list(again.all_steps()) == kept_by_rule(
        [*values, sign * 4.0], max_to_keep, keep_best, mode
    )


def test_save_validation(tmp_path):
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))
    learner = jl.Learner({"policy": spec}, minibatch_size=16, sample_batch=regression_batch())
    state = learner.init(jax.random.key(0), regression_batch())
    ckpt = CheckpointManager(tmp_path, best_metric="eval/return_mean", async_save=False)
    with pytest.raises(KeyError, match=r"best_metric='eval/return_mean'.*got metric keys \['x'\]"):
        ckpt.save(1, state, learner, metrics={"x": 1.0})
    with pytest.raises(ValueError, match="Metric 'eval/return_mean' must be a real scalar"):
        ckpt.save(1, state, learner, metrics={"eval/return_mean": np.ones(3)})
    ckpt.save(5, state, learner, metrics={"eval/return_mean": 1.0})
    with pytest.raises(ValueError, match="steps must increase and the latest saved step is 5"):
        ckpt.save(5, state, learner, metrics={"eval/return_mean": 1.0})
    other = jl.Learner({"other": jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))})
    with pytest.raises(ValueError, match="state holds modules"):
        ckpt.save(6, state, other)
    without_layout = jl.Learner({"policy": spec}, minibatch_size=16)
    with pytest.raises(ValueError, match=r"sample_batch=batch"):
        ckpt.save(6, state, without_layout)
    with pytest.raises(ValueError, match="read-only"):
        CheckpointManager(tmp_path, read_only=True).save(6, state, learner)
    with pytest.raises(FileNotFoundError, match=r"No checkpoint step 4 .* steps: \[5\]"):
        ckpt.restore(learner, step=4)
    with pytest.raises(FileNotFoundError, match="No complete checkpoint step"):
        CheckpointManager(tmp_path / "empty").restore(learner)
    with pytest.raises(ValueError, match="best_step needs a metric to rank steps by"):
        CheckpointManager(tmp_path, read_only=True).best_step()


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (dict(max_to_keep=0), ValueError, "max_to_keep must be a positive int or None"),
        (dict(keep_best=1), ValueError, "keep_best=1 needs best_metric"),
        (dict(best_metric="eval//x"), ValueError, "best_metric must be a '/'-separated"),
        (dict(best_metric="x", best_mode="up"), ValueError, "best_mode must be 'max' or 'min'"),
        (dict(verify="yes"), TypeError, "verify must be a bool"),
        (dict(keep_last=2), TypeError, r"unknown option\(s\) \['keep_last'\]"),
    ],
)
def test_option_validation(tmp_path, options, error, message):
    with pytest.raises(error, match=message):
        CheckpointManager(tmp_path, **options)


def place(learner, devices):
    """The learner itself on one device, or placed on a mesh of the first ``devices`` devices."""
    return learner if devices == 1 else learner.on(devices)


def actor_critic_learner(**options):
    spec = make_learner().specs["ac"]
    options = {"sample_batch": batches(0)["ac"], **options}
    return jl.Learner({"ac": spec}, minibatch_size=16, num_epochs=2, **options)


@pytest.mark.parametrize(("saved_on", "restored_on"), [(8, 1), (8, 4), (1, 8)])
def test_restore_onto_another_device_count(tmp_path, saved_on, restored_on):
    source = place(actor_critic_learner(), saved_on)
    state = source.init(jax.random.key(0), batches(0)["ac"])
    state, _ = source.update(state, batches(1)["ac"])
    ckpt = CheckpointManager(tmp_path)
    ckpt.save(1, state, source)
    ckpt.wait_until_finished()
    target = place(
        actor_critic_learner(sample_batch=None, batch_layout=ckpt.batch_layout()), restored_on
    )
    restored = ckpt.restore(target)
    for leaf in jax.tree.leaves(restored):
        if restored_on == 1:
            assert leaf.sharding.device_set == {jax.devices()[0]}
        else:
            assert leaf.sharding.is_equivalent_to(target.placement.state_sharding, leaf.ndim)
    assert_identical(restored, state)
    # Training goes on from the restored state as it does from the saved one.
    expected, _ = source.update(state, batches(2)["ac"])
    resumed, _ = target.update(restored, batches(2)["ac"])
    assert_trees_close(jax.device_get(resumed.modules), jax.device_get(expected.modules))
    sharding = ckpt.metadata()["devices"]["state_sharding"]
    assert sharding["num_devices"] == saved_on
    if saved_on > 1:
        assert sharding["mesh"] == {"axis_names": ["data"], "shape": [saved_on]}
        assert sharding["spec"] == []  # PartitionSpec(): replicated


def test_add_and_remove_module_round_trip(tmp_path):
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.adam(1e-2))
    learner = jl.Learner({"main": spec}, minibatch_size=16, sample_batch=regression_batch())
    state = learner.init(jax.random.key(0), regression_batch())
    state, _ = learner.update(state, regression_batch(seed=1))
    learner, state = learner.add_module(
        state,
        "snapshot",
        spec,
        regression_batch(),
        params=state.modules["main"].params,
        train=False,
    )
    state, _ = learner.update(state, {"main": regression_batch(seed=2)})
    ckpt = CheckpointManager(tmp_path)
    ckpt.save(1, state, learner)
    smaller, state2 = learner.remove_module(state, "snapshot")
    ckpt.save(2, state2, smaller)
    ckpt.wait_until_finished()

    def fresh(*module_ids):
        return jl.Learner(
            dict.fromkeys(module_ids, spec),
            minibatch_size=16,
            modules_to_train={"main"},
            sample_batch=dict.fromkeys(module_ids, regression_batch()),
        )

    assert_identical(ckpt.restore(fresh("main", "snapshot"), step=1), state)
    assert_identical(ckpt.restore(fresh("main"), step=2), state2)
    with pytest.raises(ValueError, match="module 'snapshot' is in the learner but not in the"):
        ckpt.restore(fresh("main", "snapshot"), step=2)


def build_toy(recipe):
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.adam(recipe["learning_rate"]))
    return jl.Learner(
        {"policy": spec},
        minibatch_size=recipe["minibatch_size"],
        recipe=recipe,
        sample_batch=regression_batch(),
    )


@pytest.fixture
def toy_recipe():
    register_recipe("toy_regression", build_toy, replace=True)
    return {"algorithm": "toy_regression", "learning_rate": 0.01, "minibatch_size": 16}


def test_restore_rebuilds_a_learner_from_its_recipe(tmp_path, toy_recipe, caplog):
    learner = learner_from_recipe(toy_recipe)
    state = learner.init(jax.random.key(0), regression_batch())
    state, _ = learner.update(state, regression_batch(seed=1))
    with CheckpointManager(tmp_path) as ckpt:
        ckpt.save(1, state, learner)
    assert ckpt.metadata()["recipe"] == toy_recipe
    with caplog.at_level("WARNING"):
        rebuilt, restored = restore(tmp_path)
    # Reading is what was asked for: orbax's read-only warnings are not passed on.
    assert not [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert rebuilt.recipe == toy_recipe and rebuilt is not learner
    assert_identical(restored, state)
    expected, _ = learner.update(state, regression_batch(seed=2))
    resumed, _ = rebuilt.update(restored, regression_batch(seed=2))
    assert_identical(resumed, expected)


def build_toy_pair(recipe):
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.adam(recipe["learning_rate"]))
    batch = regression_batch()
    return jl.Learner(
        {"policy": spec, "frozen": spec},
        recipe=recipe,
        sample_batch={"policy": batch, "frozen": batch},
    )


def test_restore_brings_back_the_learner_settings_not_in_the_recipe(tmp_path):
    register_recipe("toy_pair", build_toy_pair, replace=True)
    built = learner_from_recipe({"algorithm": "toy_pair", "learning_rate": 0.01})
    settings = {
        "modules_to_train": {"policy"},
        "minibatch_size": 16,
        "num_epochs": 2,
        "shuffle": False,
        "drop_last": True,
        "skip_nonfinite": True,
    }
    learner = built.replace(**settings)
    batch = {"policy": regression_batch(seed=1), "frozen": regression_batch(seed=1)}
    state = learner.init(jax.random.key(0))
    with CheckpointManager(tmp_path, async_save=False) as ckpt:
        ckpt.save(1, state, learner)
    rebuilt, restored = restore(tmp_path)
    assert rebuilt.modules_to_train == frozenset({"policy"})
    for name in ("minibatch_size", "num_epochs", "shuffle", "drop_last", "skip_nonfinite"):
        assert getattr(rebuilt.config, name) == settings[name], name
    expected, _ = learner.update(state, batch)
    resumed, _ = rebuilt.update(restored, batch)
    assert_identical(resumed, expected)  # "frozen" stays as it was in both
    # A step saved before the settings were recorded keeps the builder's.
    path = tmp_path / "1" / "jaxlearner" / "metadata"
    metadata = json.loads(path.read_text())
    del metadata["learner"]
    path.write_text(json.dumps(metadata))
    older, _ = restore(tmp_path)
    assert older.modules_to_train == built.modules_to_train == frozenset({"policy", "frozen"})
    assert older.config == built.config


def test_restore_without_a_usable_recipe(tmp_path, toy_recipe):
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))
    batch = regression_batch()
    for name, recipe in [("plain", None), ("unknown", {"algorithm": "never_registered"})]:
        learner = jl.Learner({"policy": spec}, recipe=recipe, sample_batch=batch)
        with CheckpointManager(tmp_path / name) as ckpt:
            ckpt.save(1, learner.init(jax.random.key(0), batch), learner)
    with pytest.raises(ValueError, match="saved from a learner without a recipe"):
        restore(tmp_path / "plain")
    with pytest.raises(KeyError, match=r"'never_registered'; registered: \[.*'toy_regression'"):
        restore(tmp_path / "unknown")
    missing = tmp_path / "missing"
    with pytest.raises(FileNotFoundError):
        restore(missing)
    assert not missing.exists()  # restoring never creates anything
    learner = jl.Learner(
        {"policy": spec}, recipe={"algorithm": "toy", "fn": print}, sample_batch=batch
    )
    with pytest.raises(TypeError, match="recipe is not JSON-serialisable"):
        CheckpointManager(tmp_path / "bad").save(1, learner.init(jax.random.key(0), batch), learner)


def test_registry_validation(toy_recipe):
    assert "toy_regression" in registered_recipes()
    with pytest.raises(ValueError, match="registered already under 'toy_regression'"):
        register_recipe("toy_regression", build_toy)
    with pytest.raises(TypeError, match="builder must be callable"):
        register_recipe("broken", "not a function")
    with pytest.raises(TypeError, match="needs a non-empty string 'algorithm'"):
        learner_from_recipe({"learning_rate": 0.1})
    register_recipe("returns_none", lambda recipe: None, replace=True)
    with pytest.raises(TypeError, match="returned NoneType; it must return a jl.Learner"):
        learner_from_recipe({"algorithm": "returns_none"})


def test_built_in_algorithms_and_user_recipes_share_one_registry(toy_recipe):
    import gymnasium as gym

    from jaxlearner.algorithms.builtin import AlgorithmRecipe, algorithm_names, algorithm_recipe

    assert {"ppo", "dqn", "sac", "toy_regression"} <= set(registered_recipes())
    assert set(algorithm_names()) >= {"ppo", "dqn", "sac"}
    assert "toy_regression" not in algorithm_names()  # a plain builder makes learners only
    ppo = algorithm_recipe("ppo")
    assert isinstance(ppo, AlgorithmRecipe) and ppo.config_type is jl.algorithms.PPOConfig
    learner = jl.algorithms.ppo(gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(2))
    assert learner_from_recipe(learner.recipe).recipe == learner.recipe  # rebuilt by the entry
    with pytest.raises(ValueError, match="'toy_regression' .*makes learners only"):
        algorithm_recipe("toy_regression")
    with pytest.raises(ValueError, match="Unknown algorithm 'a2c'; built-in algorithms"):
        algorithm_recipe("a2c")


def test_directories_local_and_remote(tmp_path, monkeypatch):
    assert _resolve_directory("gs://bucket/run/checkpoints") == "gs://bucket/run/checkpoints"
    monkeypatch.chdir(tmp_path)
    assert CheckpointManager("runs/a").directory == str(tmp_path / "runs" / "a")
    assert CheckpointManager(pathlib.Path("runs/b")).directory == str(tmp_path / "runs" / "b")


def _imported_modules(path):
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_pickle_on_the_checkpoint_path(saved, tmp_path, monkeypatch):
    forbidden = {"pickle", "_pickle", "cloudpickle", "dill"}
    package = pathlib.Path(jl.__file__).parent
    sources = sorted(package.rglob("*.py"))
    for path in sources:
        assert not _imported_modules(path) & forbidden, path
    importing_orbax = {
        str(p.relative_to(package)) for p in sources if "orbax" in _imported_modules(p)
    }
    assert importing_orbax == {"checkpoint/manager.py"}

    def refuse(*args, **kwargs):
        raise AssertionError("pickle was used on the checkpoint path")

    for name in ("dump", "dumps", "load", "loads", "Pickler", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    directory, state = saved
    learner = make_learner(
        sample_batch=None, batch_layout=CheckpointManager(directory).batch_layout()
    )
    restored = CheckpointManager(directory).restore(learner)
    with CheckpointManager(tmp_path / "run") as ckpt:
        ckpt.save(4, restored, learner, metrics={"eval/return_mean": 1.0})
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert files
    for path in files:
        content = path.read_bytes()
        assert not (content[:1] == b"\x80" and content[1:2] in b"\x02\x03\x04\x05"), path
        assert path.suffix not in {".pkl", ".pickle"}, path
        tensorstore_data = path.parent.name == "d" or path.name == "manifest.ocdbt"
        if not tensorstore_data and path.name != "commit_success.txt":
            json.loads(content)  # everything else is JSON


def arrays_being_written(path):
    """Whether ``path`` is a temporary save folder with tensorstore data in it already."""
    if TMP_SUFFIX not in path.name:
        return False
    try:
        return any(p.parent.name == "d" for p in path.rglob("*"))
    except FileNotFoundError:  # the save completed and renamed it meanwhile
        return False


@pytest.mark.slow
def test_crash_mid_save_leaves_the_latest_complete_step(tmp_path):
    # A child process saves every update; it is killed with SIGKILL while a save is being
    # written (its arrays partly on disk, in orbax's temporary folder). A fresh manager then
    # restores the latest complete step bit-exactly and ignores the partial one.
    child = pathlib.Path(__file__).with_name("checkpoint_child.py")
    directory = tmp_path / "run"
    directory.mkdir()
    log = tmp_path / "child.log"
    partial = []
    for _ in range(5):  # a kill may land just after a save completed: then try again
        with log.open("ab") as stderr:
            process = subprocess.Popen(
                [sys.executable, str(child), str(directory)],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=environ_without_compilation_cache(),  # killed mid-save, maybe mid-write
            )
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and process.poll() is None:
                names = os.listdir(directory)
                complete = [n for n in names if n.isdigit()]
                if len(complete) >= 2 and any(arrays_being_written(directory / n) for n in names):
                    break
                time.sleep(0.0005)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
        partial = [n for n in os.listdir(directory) if TMP_SUFFIX in n]
        if partial:
            break
    assert partial, f"no save was interrupted mid-write in 5 tries; child log:\n{log.read_text()}"
    partial_step = int(partial[0].split(".")[0])

    learner = make_crash_learner()
    ckpt = CheckpointManager(directory, max_to_keep=3)
    latest = ckpt.latest_step()
    assert latest == partial_step - 1 and partial_step not in ckpt.all_steps()
    restored = ckpt.restore(learner)
    assert_identical(restored, state_after(make_crash_learner(), latest))
    # Saving goes on, the interrupted step included.
    state, _ = learner.update(
        restored, {"x": np.ones((64, 3), np.float32), "y": np.ones(64, np.float32)}
    )
    ckpt.save(partial_step, state, learner)
    ckpt.wait_until_finished()
    assert ckpt.latest_step() == partial_step
    assert not [n for n in os.listdir(directory) if TMP_SUFFIX in n]  # the partial one is gone
    assert_identical(ckpt.restore(make_crash_learner()), state)


def test_trainer_history_round_trips_through_arrays_with_non_finite_values():
    from jaxlearner.training.history import from_columns, to_columns

    history = [
        {"iteration": 1.0, "episode_return_mean": float("nan")},
        {"iteration": 2.0, "eval/return_mean": 500.0, "grad_norm": float("inf")},
        {"iteration": 3.0, "env_steps": 2.0**53 + 2},  # float64 keeps every bit
    ]
    keys, values, present = to_columns(history)
    assert keys == [
        "iteration",
        "episode_return_mean",
        "eval/return_mean",
        "grad_norm",
        "env_steps",
    ]
    restored = from_columns(keys, values, present)
    assert math.isnan(restored[0].pop("episode_return_mean"))
    assert restored == [{"iteration": 1.0}, *history[1:]]
    assert from_columns([], np.zeros((0, 0)), np.zeros((0, 0), bool)) == to_columns([])[0]


def test_a_history_saved_as_json_reads_back_with_non_finite_values():
    from jaxlearner.checkpoint.metadata import history_from_json

    # The layout trainer checkpoints had before the history became arrays.
    saved = [
        {"iteration": 1.0, "episode_return_mean": "nan"},
        {"iteration": 2.0, "eval/return_mean": 500.0, "grad_norm": "inf"},
    ]
    restored = history_from_json(json.loads(json.dumps(saved, allow_nan=False)))
    assert math.isnan(restored[0]["episode_return_mean"]) and restored[0]["iteration"] == 1.0
    assert restored[1] == {"iteration": 2.0, "eval/return_mean": 500.0, "grad_norm": math.inf}
