"""Weights & Biases: metrics keyed by env steps and the config, offline with no account."""

import pathlib
import sys
import time
import types

import gymnasium as gym
import pytest

import jaxlearner as jl
from jaxlearner.training.outputs.wandb_writer import WandbWriter


class FakeRun:
    def __init__(self, **kwargs):
        self.init = kwargs
        self.logged, self.finished = [], False
        self.config = types.SimpleNamespace(
            update=lambda values, **_: self.init["config"].update(values)
        )

    def log(self, data, step):
        self.logged.append((step, dict(data)))

    def finish(self):
        self.finished = True


@pytest.fixture()
def fake_wandb(monkeypatch):
    module = types.ModuleType("wandb")
    module.runs = []

    def init(**kwargs):
        module.runs.append(FakeRun(**kwargs))
        return module.runs[-1]

    module.init = init
    module.Video = lambda path: ("video", path)
    monkeypatch.setitem(sys.modules, "wandb", module)
    return module


def test_metrics_are_logged_at_env_steps_with_the_config(fake_wandb):
    writer = WandbWriter("proj", name="run1", config={"lr": 1e-3}, mode="offline", dir="/tmp/x")
    (run,) = fake_wandb.runs
    assert run.init["project"] == "proj" and run.init["config"] == {"lr": 1e-3}
    assert run.init["mode"] == "offline" and run.init["dir"] == "/tmp/x"
    writer.write(1, {"env_steps": 256.0, "episode_return_mean": float("nan"), "loss": 0.5})
    writer.write(1, {"env_steps": 256.0, "eval/return_mean": 20.0})  # the iteration's evaluation
    writer.write(2, {"loss": 0.25})  # no env_steps: the iteration, never a step back
    writer.log_config({"num_envs": 4})
    writer.log_video("episode.mp4")
    writer.close()
    assert run.logged == [
        (256, {"env_steps": 256.0, "loss": 0.5}),  # NaN left out
        (256, {"env_steps": 256.0, "eval/return_mean": 20.0}),
        (256, {"loss": 0.25}),
        (256, {"eval/video": ("video", "episode.mp4")}),
    ]
    assert run.init["config"] == {"lr": 1e-3, "num_envs": 4} and run.finished


def test_bad_mode_and_missing_wandb_are_one_clear_error(fake_wandb, monkeypatch):
    with pytest.raises(
        ValueError, match=r"mode must be one of \['online', 'offline', 'disabled'\]"
    ):
        WandbWriter(mode="cloud")
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r"pip install 'jaxlearner\[wandb\]'"):
        WandbWriter()


def test_an_offline_trainer_run_holds_the_metrics_and_config(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    env = gym.make("CartPole-v1")
    config = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1, "hidden_sizes": (8,)}
    learner = jl.algorithms.ppo(env.observation_space, env.action_space, config)
    writer = WandbWriter(
        "jaxlearner-test", config={**config, "marker_lr": 0.00123}, mode="offline", dir=tmp_path
    )
    trainer = jl.Trainer(learner, "CartPole-v1", num_envs=2, writers=[writer], progress=False)
    trainer.run([jl.MaxIterations(2)], steps_per_eval=64)
    trainer.close()
    keys = (b"episode_return_mean", b"eval/return_mean", b"default_policy/total_loss", b"marker_lr")
    deadline = time.monotonic() + 30.0  # W&B's service may still be writing the log under load
    while True:
        files = sorted(pathlib.Path(tmp_path).glob("wandb/offline-run-*/run-*.wandb"))
        data = b"".join(f.read_bytes() for f in files)  # the record log, as written
        missing = [key for key in keys if key not in data]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(files) == 1 and not missing, (files, missing, len(data))
