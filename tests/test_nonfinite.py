"""Non-finite values are never silent: the update reports them, trainers and the CLI stop.

A NaN advantage poisons a PPO update; the update still applies it (RLlib's
semantics) but says so in ``nonfinite``; a trainer stops with one
:class:`~jaxlearner.NonFiniteError` naming the iteration, the module and the
metric, before the iteration's save; ``skip_nonfinite=True`` skips and counts.
"""

import math
import os
import pathlib
import subprocess
import sys

import gymnasium as gym
import jax
import jax.numpy as jnp
import nan_env
import numpy as np
import pytest

import jaxlearner as jl
from jaxlearner.core.gradients import all_finite
from jaxlearner.core.metrics import last_update_metrics
from jaxlearner.training.driver import check_finite

CARTPOLE = gym.make("CartPole-v1")
SMALL = {"train_batch_size": 256, "minibatch_size": 64, "num_epochs": 2, "hidden_sizes": (16,)}
TESTS = pathlib.Path(__file__).parent


def ppo_learner(**changes):
    learner = jl.algorithms.ppo(CARTPOLE.observation_space, CARTPOLE.action_space, SMALL)
    return learner.replace(**changes) if changes else learner


def ppo_batch(nan_advantage=False, rows=256, seed=0):
    """A PPO batch of random rows (uniform logits); one NaN advantage if asked."""
    rng = np.random.default_rng(seed)
    batch = {
        "obs": rng.normal(size=(rows, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, size=rows).astype(np.int32),
        "advantages": rng.normal(size=rows).astype(np.float32),
        "dist_inputs": np.zeros((rows, 2), np.float32),
        "logp": np.full(rows, math.log(0.5), np.float32),
        "mask": np.ones(rows, np.float32),
        "value_targets": rng.normal(size=rows).astype(np.float32),
    }
    if nan_advantage:
        batch["advantages"][17] = np.nan
    return {"default_policy": batch}


@pytest.mark.parametrize("jit", [True, False])
def test_one_nan_advantage_is_reported_and_applied(jit):
    learner = ppo_learner(jit=jit)
    state = learner.init(jax.random.key(0))
    clean_state, clean = learner.update(state, ppo_batch())
    assert int(clean["default_policy"]["nonfinite"]) == 0
    assert int(clean["__all__"]["nonfinite"]) == 0
    poisoned_state, poisoned = learner.update(state, ppo_batch(nan_advantage=True))
    assert int(poisoned["default_policy"]["nonfinite"]) == 1
    assert int(poisoned["__all__"]["nonfinite"]) == 1
    # RLlib's semantics: the update is applied, NaN and all.
    params = jax.tree.leaves(poisoned_state.modules["default_policy"].params)
    assert not all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in params)


def test_skip_nonfinite_skips_counts_and_reports_nothing_left():
    learner = ppo_learner(skip_nonfinite=True)
    state = learner.init(jax.random.key(0))
    new_state, metrics = learner.update(state, ppo_batch(nan_advantage=True))
    # The NaN row lands in one minibatch of each of the two epochs: 2 of 8 steps skipped.
    assert int(metrics["__all__"]["num_skipped_steps"]) == 2
    assert int(metrics["default_policy"]["nonfinite"]) == 0
    params = jax.tree.leaves(new_state.modules["default_policy"].params)
    assert all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in params)


def test_params_gone_infinite_are_reported_even_when_steps_are_skipped():
    learner = ppo_learner(skip_nonfinite=True)
    state = learner.init(jax.random.key(0))
    module = state.modules["default_policy"]
    broken = jax.tree.map(lambda x: x.at[(0,) * x.ndim].set(jnp.inf), module.params)
    state = state.replace(modules={"default_policy": module.replace(params=broken)})
    _, metrics = learner.update(state, ppo_batch())
    assert int(metrics["default_policy"]["nonfinite"]) == 1


def _poisoned(tree, path, value):
    """``tree`` with ``value`` written at the first element of the leaf at ``path``."""
    leaf = tree[path]
    return {**tree, path: leaf.ravel().at[0].set(value).reshape(leaf.shape)}


@pytest.mark.parametrize("jit", [True, False])
def test_all_finite_checks_every_floating_leaf_of_every_dtype(jit):
    check = jax.jit(all_finite) if jit else all_finite
    tree = {
        "w": jnp.ones((3, 4), jnp.float32),
        "b": jnp.zeros((4,), jnp.bfloat16),
        "s": jnp.asarray(2.0, jnp.float32),
        "count": jnp.asarray(7, jnp.int32),
    }
    assert bool(check(tree))
    assert bool(check({})) and bool(check((tree["count"], None)))
    for path in ("w", "b", "s"):
        for bad in (jnp.nan, jnp.inf, -jnp.inf):
            assert not bool(check(_poisoned(tree, path, bad))), (path, bad)
    # A NaN in the last leaf of a second dtype is found as in the first.
    assert not bool(check({**tree, "c": jnp.asarray([1.0, jnp.nan], jnp.float16)}))


def test_all_finite_is_one_reduction_per_dtype_in_the_compiled_program():
    tree = {f"w{i}": jnp.ones((i + 1, 3)) for i in range(6)}
    hlo = jax.jit(all_finite).lower(tree).as_text()
    # One is_finite per dtype (here one), not one per leaf (six).
    assert hlo.count("is_finite") == 1, hlo


def test_the_last_update_metrics_keep_any_nonfinite():
    # Three scanned updates: the last one's loss, but the largest nonfinite flag.
    stacked = {
        "m": {"loss": jnp.array([1.0, 2.0, 3.0]), "nonfinite": jnp.array([0, 1, 0])},
        "__all__": {"nonfinite": jnp.array([0, 1, 0])},
    }
    last = last_update_metrics(stacked)
    assert float(last["m"]["loss"]) == 3.0
    assert int(last["m"]["nonfinite"]) == 1 and int(last["__all__"]["nonfinite"]) == 1


@pytest.mark.parametrize(
    ("stats", "metric", "value"),
    [
        # total_loss is named first, whatever the order.
        (
            {"p/vf_loss": math.nan, "p/total_loss": math.inf, "p/nonfinite": 1.0},
            "p/total_loss",
            "inf",
        ),
        ({"p/vf_loss": math.nan, "p/total_loss": 1.0, "p/nonfinite": 1.0}, "p/vf_loss", "nan"),
        # Only the params: the metric is the module's params.
        ({"p/total_loss": 1.0, "p/nonfinite": 1.0}, "p/params", "nan"),
    ],
)
def test_check_finite_names_iteration_module_and_metric(stats, metric, value):
    with pytest.raises(jl.NonFiniteError) as raised:
        check_finite({"iteration": 4.0, "__all__/nonfinite": 1.0, **stats}, 4)
    error = raised.value
    assert (error.iteration, error.module, error.metric) == (4, "p", metric)
    assert str(error) == f"iteration 4: module 'p' went non-finite ({metric} = {value})"


def test_check_finite_passes_finite_stats_and_ignores_the_all_flag():
    check_finite({"p/total_loss": 1.0, "p/nonfinite": 0.0, "__all__/total_loss": math.nan}, 1)
    check_finite({"__all__/nonfinite": 1.0}, 1)  # a module's own flag is what names it


def test_a_trainer_gone_nan_stops_and_its_newest_checkpoint_is_finite(tmp_path):
    learner = ppo_learner()
    # Each of the 4 envs steps 64 times per iteration: rewards go NaN in iteration 3.
    trainer = jl.Trainer(learner, lambda: nan_env.make(130), num_envs=4, progress=False)
    with jl.CheckpointManager(tmp_path / "ckpt") as checkpoint:
        with pytest.raises(jl.NonFiniteError, match=r"^iteration 3: module 'default_policy'"):
            trainer.run(
                [jl.MaxEnvSteps(10_000)], on_iteration=lambda stats: trainer.save(checkpoint)
            )
        checkpoint.wait_until_finished()
        assert checkpoint.latest_step() == 2
        state = checkpoint.restore(learner)
    assert trainer.history[-1]["default_policy/nonfinite"] == 1.0  # recorded, then raised
    params = jax.tree.leaves(state.modules["default_policy"].params)
    assert all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in params)


def test_a_skipping_trainer_counts_and_trains_on():
    learner = ppo_learner(skip_nonfinite=True)
    trainer = jl.Trainer(learner, lambda: nan_env.make(130), num_envs=4, progress=False)
    history = trainer.run([jl.MaxEnvSteps(1024)])
    assert len(history) == 4
    assert history[1]["__all__/num_skipped_steps"] == 0
    assert history[-1]["__all__/num_skipped_steps"] > 0
    assert all(stats["default_policy/nonfinite"] == 0 for stats in history)


def test_the_command_line_stops_with_one_line_and_exit_1(tmp_path):
    out = tmp_path / "run"
    script = (
        "import sys; import nan_env; nan_env.register(130)\n"
        "from jaxlearner.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    argv = ["train", "ppo", "--env", nan_env.ENV_ID, "--out", str(out), "--max-steps", "4096"]
    small = ["--num-envs", "4", "--no-progress", "--eval-every", "100000"]
    small += ["--checkpoint-every-steps", "256", "--config", "train_batch_size=256"]
    small += ["minibatch_size=128", "num_epochs=1", "hidden_sizes=[8]"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-c", script, *argv, *small],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        "jaxlearner train: stopped: iteration 3: module 'default_policy' went non-finite "
        "(default_policy/total_loss = nan); the newest checkpoint, 2 in "
    ), result.stderr
    saved = sorted(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit())
    assert saved == [1, 2]  # never the NaN state
