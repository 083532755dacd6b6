"""Env runners on Ray actors (``num_env_runners > 0``): the same batches as the local runner,
restarts on failure, asynchronous APPO, checkpoints, and no process left behind.

One local Ray instance sized for two cores serves the module (``--dist loadfile`` keeps the
module on one test process); the first test starts and stops the Trainer's own instead.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import gymnasium as gym
import jax
import numpy as np
import psutil
import pytest
from helpers import doc_block

import jaxlearner as jl
import jaxlearner.training
from jaxlearner.training.env_runner import EnvRunner
from jaxlearner.training.env_runners import (
    RESTART_SEED_STRIDE,
    concatenate_rollouts,
    runner_key,
    runner_seed,
)

ray = pytest.importorskip("ray")
from ray import cloudpickle  # noqa: E402

from jaxlearner.training.ray_runners import init_ray  # noqa: E402

CARTPOLE = gym.make("CartPole-v1")
PPO_SMALL = {"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 2, "hidden_sizes": (16,)}
HALF_A_CORE = jl.EnvRunnersConfig(cpus_per_env_runner=0.5)

# The tests' environment factories go to the actors by value (the workers cannot import
# this test module by name).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def ppo(**config):
    return jl.algorithms.ppo(
        CARTPOLE.observation_space, CARTPOLE.action_space, {**PPO_SMALL, **config}
    )


def ray_processes():
    """This process's descendants that belong to Ray (its daemons and workers)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            line, name = " ".join(child.cmdline()), child.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if "/ray/" in line or "ray::" in line or name in ("raylet", "gcs_server"):
            found.append(child)
    return found


def wait_for_no_ray_process(seconds=30.0):
    deadline = time.monotonic() + seconds
    while (left := ray_processes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def test_one_runner_trains_as_the_local_runner_and_leaves_no_process_behind():
    """The Trainer starts its own Ray (none is running), and its first iteration with one
    runner equals the local runner's: same episodes, same update. ``close`` stops Ray."""
    assert not ray.is_initialized()
    local = jl.Trainer(ppo(), "CartPole-v1", num_envs=4, seed=3, progress=False)
    remote = jl.Trainer(ppo(), "CartPole-v1", num_envs=4, seed=3, progress=False,
                        num_env_runners=1, env_runners=HALF_A_CORE)  # fmt: skip
    try:
        assert ray.is_initialized()
        ours, theirs = local.step(), remote.step()
        for name in ("env_steps", "episodes", "episode_return_mean", "default_policy/total_loss"):
            assert ours[name] == pytest.approx(theirs[name], rel=1e-6), name
        assert theirs["num_env_runner_restarts"] == 0.0
        np.testing.assert_allclose(
            jax.tree.leaves(local.state.modules["default_policy"].params)[0],
            jax.tree.leaves(remote.state.modules["default_policy"].params)[0],
            rtol=1e-5,
        )
    finally:
        local.close()
        remote.close()
    assert not ray.is_initialized()
    assert wait_for_no_ray_process() == []


def test_bad_input_is_refused_before_any_actor_starts():
    with pytest.raises(ValueError, match="num_env_runners must be an int >= 0; got -1"):
        jl.Trainer(ppo(), "CartPole-v1", num_env_runners=-1)
    with pytest.raises(ValueError, match="cpus_per_env_runner must be a number > 0; got 0"):
        jl.EnvRunnersConfig(cpus_per_env_runner=0)
    with pytest.raises(ValueError, match="max_env_runner_restarts must be an int >= 0"):
        jl.EnvRunnersConfig(max_env_runner_restarts=-2)
    with pytest.raises(TypeError, match="env_runners must be a jl.EnvRunnersConfig; got dict"):
        jl.Trainer(ppo(), "CartPole-v1", num_env_runners=1, env_runners={"cpus": 1})
    synchronous_only = jl.EnvRunnersConfig(asynchronous=True)
    with pytest.raises(ValueError, match="ppo cannot learn from asynchronous.*that can: appo"):
        jl.Trainer(ppo(), "CartPole-v1", num_env_runners=1, env_runners=synchronous_only)
    lagged = jl.algorithms.appo(CARTPOLE.observation_space, CARTPOLE.action_space,
                                {"policy_lag": 1})  # fmt: skip
    with pytest.raises(ValueError, match="policy_lag=1 simulates stale params"):
        jl.Trainer(lagged, "CartPole-v1", num_env_runners=1)  # APPO's runners: asynchronous
    lock = threading.Lock()
    with pytest.raises(ValueError, match="The environment .* cannot be sent to the env runners"):
        jl.Trainer(ppo(), lambda: lock and gym.make("CartPole-v1"), num_env_runners=1)
    with pytest.raises(ValueError, match="each build their own environments"):
        jl.Trainer(ppo(), gym.make("CartPole-v1"), num_envs=1, num_env_runners=1)
    assert not ray.is_initialized()


def test_without_ray_one_line_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.delitem(sys.modules, "jaxlearner.training.ray_runners", raising=False)
    monkeypatch.delattr(jaxlearner.training, "ray_runners", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'jaxlearner\[ray\]'"):
        jl.Trainer(ppo(), "CartPole-v1", num_env_runners=1)


@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_with_env_runners_saves_a_checkpoint_and_leaves_no_process(
    signal_number, tmp_path
):
    """``jaxlearner train --env-runners 1`` on SIGTERM, or on Ctrl-C (SIGINT to the whole
    process group, as a terminal sends it, Ray's daemons and actors included): the iteration
    in flight ends, the checkpoint is saved, the actors and the Ray instance it started are
    gone."""
    out = tmp_path / "run"
    argv = ["train", "ppo", "--out", str(out), "--env-runners", "1", "--num-envs", "4",
            "--cpus-per-env-runner", "0.5", "--max-steps", "1000000", "--stop-reward", "1000",
            "--eval-every", "100000", "--no-progress", "--config", "train_batch_size=256",
            "minibatch_size=64"]  # fmt: skip
    child = subprocess.Popen(
        [sys.executable, "-m", "jaxlearner", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        metrics = out / "metrics.jsonl"
        while not (metrics.is_file() and "num_env_runner_restarts" in metrics.read_text()):
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()
            time.sleep(0.2)
        started = psutil.Process(child.pid).children(recursive=True)
        assert any("/ray/" in " ".join(p.cmdline()) for p in started)
        if signal_number == signal.SIGINT:
            os.killpg(child.pid, signal.SIGINT)
        else:
            child.send_signal(signal_number)
        stdout, stderr = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 128 + signal_number, stderr
    assert "Traceback" not in stderr, stderr
    assert f"continue with: jaxlearner train --resume {out}" in stdout
    assert any(p.name.isdigit() for p in (out / "checkpoints").iterdir())
    _, alive = psutil.wait_procs(started, timeout=30)
    assert alive == [], [p.cmdline() for p in alive]


@pytest.fixture(scope="module")
def local_ray():
    init_ray(num_cpus=2)
    yield
    ray.shutdown()
    assert wait_for_no_ray_process() == []


def test_sync_runners_sample_the_seeds_and_keys_they_derive(local_ray):
    """Runner ``r`` of ``num_envs`` environments seeds them from ``seed + r * num_envs`` and
    samples with ``runner_key(key, r)``: the batch is those local rollouts, side by side."""
    algorithm = jl.algorithms.algorithm_for(ppo())
    trainer = jl.Trainer(algorithm, "CartPole-v1", num_envs=2, seed=5, progress=False,
                         num_env_runners=2, env_runners=HALF_A_CORE)  # fmt: skip
    try:
        module = trainer.state.modules["default_policy"]
        key = jax.random.key(11)
        rollout = trainer.engine.runner.sample(algorithm.explore, module, 40, key)
        parts = []
        for index in range(2):
            local = EnvRunner("CartPole-v1", num_envs=2, seed=runner_seed(5, index, 2))
            parts.append(local.sample(algorithm.explore, module, 40, runner_key(key, index)))
            local.close()
        expected = concatenate_rollouts(parts)
        assert rollout.obs.shape == (40, 4, 4)
        for name, value in expected.experience().items():
            np.testing.assert_allclose(rollout.experience()[name], value, rtol=1e-6, err_msg=name)
        assert rollout.episode_envs == expected.episode_envs
        assert runner_seed(5, 1, 2, restarts=1) == 7 + RESTART_SEED_STRIDE
    finally:
        trainer.close()
    assert ray.is_initialized()  # the Trainer leaves a Ray it did not start running


def test_a_killed_runner_is_replaced_and_training_goes_on(local_ray, tmp_path):
    options = jl.EnvRunnersConfig(cpus_per_env_runner=0.5, max_env_runner_restarts=1)
    trainer = jl.Trainer(ppo(), "CartPole-v1", num_envs=2, seed=0, progress=False,
                         num_env_runners=2, env_runners=options)  # fmt: skip
    try:
        first = trainer.step()
        before = trainer.engine.runner.actor_pids()
        os.kill(before[1], signal.SIGKILL)
        second = trainer.step()
        after = trainer.engine.runner.actor_pids()
        assert second["num_env_runner_restarts"] == 1.0
        assert second["env_steps"] == 2 * first["env_steps"]  # a whole batch all the same
        assert after[0] == before[0] and after[1] != before[1]
        # The checkpoint keeps no runner state: a resumed run starts fresh environments.
        checkpoint = jl.CheckpointManager(tmp_path / "run")
        trainer.save(checkpoint)
        checkpoint.close()
        os.kill(after[0], signal.SIGKILL)
        with pytest.raises(RuntimeError, match="max_env_runner_restarts=1"):
            trainer.step()
    finally:
        trainer.close()
    resumed = jl.Trainer(ppo(), "CartPole-v1", num_envs=4, seed=0, progress=False)
    checkpoint = jl.CheckpointManager(tmp_path / "run")
    try:
        resumed.restore(checkpoint)
        assert resumed.counters.env_steps == second["env_steps"]
        assert resumed.step()["env_steps"] == 3 * first["env_steps"]
    finally:
        checkpoint.close()
        resumed.close()


def test_an_env_config_change_rebuilds_the_runners(local_ray):
    trainer = jl.Trainer(ppo(), "CartPole-v1", num_envs=2, seed=0, progress=False,
                         num_env_runners=1, env_runners=HALF_A_CORE)  # fmt: skip
    try:
        trainer.step()
        before = trainer.engine.runner.actor_pids()
        stats = trainer.step(env_config={"max_episode_steps": 5})
        assert trainer.engine.runner.actor_pids() != before
        lengths = trainer.counters.recent_lengths[-int(stats["num_episodes"]) :]
        assert stats["num_episodes"] >= 20 and max(lengths) <= 5
        with pytest.raises(Exception, match="no_such_option"):
            trainer.step(env_config={"no_such_option": 1})  # CartPole's own error, by Ray
        assert trainer.step(env_config={"max_episode_steps": 5})["env_steps"] == 3 * 128
    finally:
        trainer.close()


def test_the_command_line_joins_a_running_cluster_and_leaves_it_running(local_ray, tmp_path):
    """``--ray-address`` (as ``RAY_ADDRESS``) joins a cluster: the run's actors run there, and
    the cluster outlives the run."""
    address = ray.get_runtime_context().gcs_address
    out = tmp_path / "run"
    config = ["num_steps_sampled_before_learning_starts=128", "train_batch_size=32"]
    argv = ["train", "sac", "--env", "Pendulum-v1", "--out", str(out), "--env-runners", "1",
            "--cpus-per-env-runner", "0.5", "--ray-address", address, "--num-envs", "2",
            "--max-steps", "256", "--stop-reward", "none", "--eval-every", "256", "--no-progress",
            "--config", *config]  # fmt: skip
    result = subprocess.run([sys.executable, "-m", "jaxlearner", *argv], capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [row for row in rows if "num_env_runner_restarts" in row]
    assert trained[-1]["env_steps"] == 256 and "default_policy/qf_loss" in str(trained[-1])
    assert ray.is_initialized() and ray.cluster_resources()["CPU"] == 2.0  # still up


class FailsOnce(gym.Wrapper):
    """CartPole whose first runner's environment raises at its 20th step; a replacement
    (seeded ``RESTART_SEED_STRIDE`` further) does not."""

    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))
        self._steps, self._first_runner = 0, True

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._first_runner = seed < RESTART_SEED_STRIDE
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        self._steps += 1
        if self._first_runner and self._steps == 20:
            raise RuntimeError("the simulator crashed")
        return self.env.step(action)


def test_an_environment_that_raises_is_replaced_and_off_policy_runners_feed_the_buffer(
    local_ray,
):
    config = {"num_steps_sampled_before_learning_starts": 64, "train_batch_size": 32}
    dqn = jl.algorithms.dqn(CARTPOLE.observation_space, CARTPOLE.action_space, config)
    trainer = jl.Trainer(dqn, FailsOnce, num_envs=2, seed=0, progress=False,
                         num_env_runners=1, env_runners=HALF_A_CORE)  # fmt: skip
    try:
        history = [trainer.step() for _ in range(10)]
        assert history[-1]["num_env_runner_restarts"] == 1.0
        assert trainer.engine.buffer is not None
        assert any("default_policy/td_error_mean" in row for row in history)  # it updated
    finally:
        trainer.close()


def test_recurrent_policies_keep_their_state_in_each_runner(local_ray):
    learner = ppo(use_lstm=True, max_seq_len=8, lstm_cell_size=8)
    trainer = jl.Trainer(learner, "CartPole-v1", num_envs=2, seed=0, progress=False,
                         num_env_runners=2, env_runners=HALF_A_CORE)  # fmt: skip
    try:
        stats = [trainer.step() for _ in range(2)]
        assert stats[-1]["env_steps"] == 256
        assert np.isfinite(stats[-1]["default_policy/total_loss"])
    finally:
        trainer.close()


def test_the_guide_block_runs_as_written(local_ray, capsys):
    page, block = doc_block("env-runners")  # docs/guides/env_runners.md
    exec(compile(block, f"{page.name} env-runners", "exec"), {})
    assert capsys.readouterr().out.split() == ["512.0", "0.0"]


APPO_ASYNC = {
    "lr": 1e-3,
    "rollout_fragment_length": 32,
    "train_batch_size": 256,
    "minibatch_size": 128,
    "num_epochs": 8,
    "hidden_sizes": (64, 64),
    "lambda_": 0.95,
    "clip_param": 0.2,
    "vf_loss_coeff": 1.0,
}


@pytest.mark.slow
def test_asynchronous_appo_learns_cartpole(local_ray):
    learner = jl.algorithms.appo(CARTPOLE.observation_space, CARTPOLE.action_space, APPO_ASYNC)
    trainer = jl.Trainer(learner, "CartPole-v1", num_envs=4, seed=0, progress=False,
                         num_env_runners=2, env_runners=HALF_A_CORE)  # fmt: skip
    try:
        start = time.perf_counter()
        history = trainer.run([jl.RewardBound(400.0)], steps_per_eval=10_240,
                              max_iterations=600)  # fmt: skip
        lags = [row["env_runners/policy_lag"] for row in history]
        print(
            f"async APPO CartPole, 2 runners: {trainer.counters.env_steps} env steps, "
            f"{time.perf_counter() - start:.0f} s, lags {np.mean(lags):.2f}, "
            f"eval {history[-1].get('eval/return_mean')}"
        )
        assert max(lags) >= 1.0  # fragments from params the learner had moved past
        assert history[-1]["eval/return_mean"] >= 400.0
    finally:
        trainer.close()
