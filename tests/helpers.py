"""Small models, losses and batches shared by the tests."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import threading

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def maybe_jit(fn, use_jit):
    """``jax.jit(fn)``, or ``fn`` run with jit disabled."""
    if use_jit:
        return jax.jit(fn)

    def eager(*args, **kwargs):
        with jax.disable_jit():
            return fn(*args, **kwargs)

    return eager


_COUNTING: list[CompileCounter] = []


def int32_constants(stablehlo: str) -> set[str]:
    """The int32 scalar constants of a lowered program's text (a loop's trip count among them)."""
    return set(re.findall(r"dense<(\d+)> : tensor<i32>", stablehlo))


def _count_compilation(event, duration, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
        seen = (kwargs.get("fun_name", ""), threading.current_thread().name)
        for counter in list(_COUNTING):
            counter.events.append(seen)


class CompileCounter:
    """XLA compilations while in use: ``events`` holds ``(function name, thread name)`` of
    each (JAX's ``backend_compile_duration`` event), ``count`` their number. One listener is
    registered for the process (jax 0.7, the floors, cannot unregister one)."""

    _listening = False

    def __enter__(self):
        if not CompileCounter._listening:
            jax.monitoring.register_event_duration_secs_listener(_count_compilation)
            CompileCounter._listening = True
        self.events = []
        _COUNTING.append(self)
        return self

    def __exit__(self, *exc):
        _COUNTING.remove(self)

    @property
    def count(self):
        return len(self.events)

    def of(self, name):
        """The events of functions called ``name`` (``jit(name)`` in JAX's words)."""
        return [event for event in self.events if event[0] == f"jit({name})"]


def environ_without_compilation_cache():
    """``os.environ`` for a child process kept out of the tests' compilation cache (JAX's
    variable removed, the command line's off switch set): one killed mid-run could leave an
    entry half written, and two started together could read each other's half written."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["JAXLEARNER_NO_COMPILATION_CACHE"] = "1"
    return env


def regression_batch(size=64, features=3, seed=0):
    """``{"x": [size, features], "y": [size]}`` float32 with a linear target."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(size, features)).astype(np.float32)
    y = (x @ np.arange(1, features + 1, dtype=np.float32) + 0.5).astype(np.float32)
    return {"x": x, "y": y}


def mse_loss(params, batch, ctx):
    """Mean squared error of a one-output model."""
    prediction = ctx.apply(params, batch["x"])[:, 0]
    mse = jnp.mean((prediction - batch["y"]) ** 2)
    return mse, {"mse": mse}


class ActorCritic(nn.Module):
    """Two submodules named after two optimizers."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(1, name="actor")(x)[:, 0], nn.Dense(1, name="critic")(x)[:, 0]


def actor_critic_loss(params, batch, ctx):
    """One scalar loss over both heads."""
    actor, critic = ctx.apply(params, batch["x"])
    actor_loss = jnp.mean((actor - batch["y"]) ** 2)
    critic_loss = jnp.mean((critic + batch["y"]) ** 2)
    return actor_loss + critic_loss, {"actor_loss": actor_loss, "critic_loss": critic_loss}


def _host(x):
    if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(x))
    return np.asarray(x)


def tree_equal(a, b):
    """Bit-identical pytrees (same structure, dtypes and values; typed keys included)."""
    if jax.tree.structure(a) != jax.tree.structure(b):
        return False
    return all(
        x.dtype == y.dtype and np.array_equal(_host(x), _host(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
    """Same structure and values to float tolerance."""
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


# DQN settings that learn CartPole-v1 in CI, with the Trainer (test_dqn) and in one compiled
# anakin run (test_anakin).
DQN_CARTPOLE = {
    "lr": 2.3e-3,
    "train_batch_size": 64,
    "training_intensity": 32,
    "n_step": 10,
    "rollout_fragment_length": 8,
    "epsilon": [[0, 1.0], [8000, 0.04]],
    "target_network_update_freq": 256,
    "replay_buffer_capacity": 100_000,
}


TIMING = ("env_steps_per_s", "time_this_iter_s", "time_compile_s", "time_total_s")
"""Trainer stats that measure wall time, so differ between two equal runs."""

VARYING = (*TIMING, "memory/host_rss_bytes", "memory/device_bytes_in_use")
"""Trainer stats that differ between two equal runs: wall time and the process's memory."""


def assert_same_stats(expected, got):
    """Two runs' per-iteration stats are equal, wall-time stats aside."""
    assert len(expected) == len(got)
    for want, have in zip(expected, got, strict=True):
        assert {k: v for k, v in want.items() if k not in VARYING} == {
            k: v for k, v in have.items() if k not in VARYING
        }


def interrupted_and_resumed(make, directory, steps, seed=11):
    """``make()`` trained ``steps`` iterations and saved in ``directory``, and a trainer
    ``make(seed=seed)`` (another seed: everything must come from the checkpoint) restored
    from it. Returns ``(interrupted, resumed)``."""
    import jaxlearner as jl

    interrupted = make()
    for _ in range(steps):
        interrupted.step()
    with jl.CheckpointManager(directory) as checkpoint:
        interrupted.save(checkpoint)
        checkpoint.wait_until_finished()
    resumed = make(seed=seed)
    with jl.CheckpointManager(directory) as checkpoint:
        resumed.restore(checkpoint)
    return interrupted, resumed


def masked_cartpole():
    """CartPole-v1 with its velocities hidden: observations ``[x, theta]`` only.

    A partially observed task: a policy must infer the velocities from the
    observations it has seen, which a recurrent policy can and a feed-forward
    one cannot.
    """
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    space = gym.spaces.Box(env.observation_space.low[[0, 2]], env.observation_space.high[[0, 2]])
    return gym.wrappers.TransformObservation(env, lambda obs: obs[[0, 2]], space)


class MaskedJaxCartPole:
    """The pure-JAX CartPole-v1 of ``jaxlearner.anakin.envs`` with its velocities hidden, as
    :func:`masked_cartpole`: observations ``[x, theta]``."""

    def __init__(self):
        from jaxlearner.anakin import envs

        self._env = envs.make("CartPole-v1")

    @property
    def observation_space(self):
        space = self._env.observation_space
        return type(space)(space.low[[0, 2]], space.high[[0, 2]])

    @property
    def action_space(self):
        return self._env.action_space

    @property
    def max_episode_steps(self):
        return self._env.max_episode_steps

    def reset(self, key):
        state, obs = self._env.reset(key)
        return state, obs[jnp.array([0, 2])]

    def step(self, state, action, key):
        state, obs, reward, terminated, truncated, info = self._env.step(state, action, key)
        keep = jnp.array([0, 2])
        return (
            state,
            obs[keep],
            reward,
            terminated,
            truncated,
            {
                **info,
                "final_obs": info["final_obs"][keep],
            },
        )


class ListWriter:
    """A metrics writer that keeps every ``(step, metrics)`` it is given, in ``rows``."""

    def __init__(self):
        self.rows = []

    def write(self, step, metrics):
        self.rows.append((step, dict(metrics)))

    def close(self):
        pass


def symlink_a_checkpoint_file(step, which, tmp_path):
    """Replaces one file of a checkpoint step (its ``"metadata"``, or its largest array file)
    by a symbolic link to a copy with the same bytes elsewhere: only the link is wrong.
    Returns the replaced file's path."""
    if which == "metadata":
        target = step / "jaxlearner" / "metadata"
    else:
        target = max((p for p in (step / "state").rglob("*") if p.is_file()), key=os.path.getsize)
    elsewhere = tmp_path / "elsewhere"
    shutil.copyfile(target, elsewhere)
    target.unlink()
    target.symlink_to(elsewhere)
    return target


TINY_PPO_OPTIONS = (
    "--num-envs",
    "4",
    "--no-progress",
    "--config",
    "train_batch_size=256",
    "minibatch_size=128",
    "num_epochs=1",
    "hidden_sizes=[8]",
)
"""``jaxlearner train ppo`` options for a tiny, fast CartPole run (``--config`` last, so the
caller's budget and cadence options go before it, and ``--out`` may follow)."""


def pendulum_replay_batch(size=16, seed=0):
    """Replay rows for Pendulum-v1's spaces (obs 3, action 1) in SAC's batch layout."""
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.normal(size=(size, 3)).astype(np.float32),
        "actions": rng.uniform(-2, 2, (size, 1)).astype(np.float32),
        "rewards": rng.normal(size=size).astype(np.float32),
        "next_obs": rng.normal(size=(size, 3)).astype(np.float32),
        "discounts": np.full(size, 0.99, np.float32),
        "mask": np.ones(size, np.float32),
    }


def refused(main, argv, capsys, *fragments):
    """Runs ``main(argv)`` (the command line's); asserts exit 2 and one stderr line, without
    a traceback, holding each fragment; returns that line."""
    import pytest

    with pytest.raises(SystemExit) as exited:
        main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    return err


ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC_PAGES = (
    ROOT / "README.md",
    *sorted(page for page in (ROOT / "docs").rglob("*.md") if "_build" not in page.parts),
)
"""The README and the documentation's Markdown pages, whose python blocks the tests run."""
MARKED_BLOCK = re.compile(
    r"<!-- (?P<marker>[\w-]+):(?P<note>[^\n]*?)-->\s*```python\n(?P<code>.*?)```", re.S
)


def doc_block(marker):
    """The python block after ``<!-- MARKER: ... -->`` in the README or a docs page."""
    found = [
        (page, match["code"])
        for page in DOC_PAGES
        for match in MARKED_BLOCK.finditer(page.read_text())
        if match["marker"] == marker
    ]
    assert len(found) == 1, f"{len(found)} python blocks after the '{marker}' marker, not 1"
    return found[0]


def users_environment():
    """The environment a user's command or notebook runs in: this one without the XLA flags
    conftest.py sets for the commands the tests start (8 fake devices, XLA's older CPU
    emitters, -O0), which change a run's roundings and so its figures."""
    return {name: value for name, value in os.environ.items() if name != "XLA_FLAGS"}
