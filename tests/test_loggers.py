"""Metric writers and the progress bar."""

import io
import math
import sys
import types

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxlearner as jl
from jaxlearner.errors import SmallDatasetWarning
from jaxlearner.training.outputs.loggers import (
    COMPILING,
    ConsoleWriter,
    JSONLinesWriter,
    MLflowWriter,
    ProgressBar,
    TensorBoardWriter,
    Writer,
    describe_stop,
    flatten_metrics,
    read_json_lines,
)
from jaxlearner.training.outputs.run_config import flatten_config


def test_flatten_metrics_nests_and_converts():
    metrics = {
        "policy": {"total_loss": jnp.asarray(1.5), "lr": np.float32(0.25)},
        "env_steps": 10,
        "note": "text",
    }
    assert flatten_metrics(metrics) == {
        "policy/total_loss": 1.5,
        "policy/lr": 0.25,
        "env_steps": 10.0,
    }


def test_console_writer_prints_chosen_keys():
    stream = io.StringIO()
    writer = ConsoleWriter(keys=("env_steps", "eval/return_mean"), every=2, stream=stream)
    writer.write(1, {"env_steps": 100.0})
    writer.write(2, {"env_steps": 200.0, "eval/return_mean": 12.3456, "other": 1.0})
    assert stream.getvalue() == "iter 2 | env_steps 200 | eval/return_mean 12.35\n"
    assert isinstance(writer, Writer)
    with pytest.raises(ValueError, match="every must be a positive int"):
        ConsoleWriter(every=0)


def test_json_lines_round_trip(tmp_path):
    writer = JSONLinesWriter(tmp_path / "run" / "metrics.jsonl")
    writer.write(1, {"a": 1.0, "b": math.nan})
    writer.write(2, {"a": 2.5})
    writer.close()
    assert read_json_lines(tmp_path / "run" / "metrics.jsonl") == [
        {"step": 1, "a": 1.0, "b": None},
        {"step": 2, "a": 2.5},
    ]


def test_tensorboard_writer_writes_event_files(tmp_path):
    pytest.importorskip("tensorboardX")
    writer = TensorBoardWriter(tmp_path / "tb")
    writer.write(1, {"policy/total_loss": 0.5})
    writer.close()
    events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


def test_mlflow_writer_logs_metrics(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = f"file://{tmp_path / 'mlruns'}"
    writer = MLflowWriter(experiment="test", run_name="r", tracking_uri=uri)
    writer.write(3, {"policy/total_loss": 0.5, "bad": math.inf})
    writer.close()
    client = mlflow.tracking.MlflowClient(uri)
    history = client.get_metric_history(writer.run_id, "policy/total_loss")
    assert [(m.value, m.step) for m in history] == [(0.5, 3)]
    assert client.get_metric_history(writer.run_id, "bad") == []


def test_progress_bar_is_off_when_not_a_terminal():
    bar = ProgressBar(total=100)  # pytest captures stderr: not a terminal
    assert not bar.enabled
    bar.update({"env_steps": 10})
    bar.close()


def test_progress_bar_when_enabled(capsys):
    bar = ProgressBar(total=100, enabled=True)
    bar.update({"env_steps": 40, "episode_return_mean": 12.0, "env_steps_per_s": 1000.0})
    bar.close()
    err = capsys.readouterr().err
    assert "40/100" in err and "return 12" in err


class _FakeClock:
    """Seconds set by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_console_writer_throttles_by_wall_time_and_prints_first_and_last():
    stream, clock = io.StringIO(), _FakeClock()
    writer = ConsoleWriter(keys=("env_steps",), stream=stream, every_seconds=2.0, clock=clock)
    for iteration, now in enumerate([0.0, 0.5, 1.9, 2.0, 2.5, 3.0], start=1):
        clock.now = now
        writer.write(iteration, {"env_steps": 16.0 * iteration})
    assert stream.getvalue().splitlines() == ["iter 1 | env_steps 16", "iter 4 | env_steps 64"]
    writer.close()  # the last line, held back, is printed at the end
    assert stream.getvalue().splitlines()[-1] == "iter 6 | env_steps 96"
    writer.close()
    assert len(stream.getvalue().splitlines()) == 3


def test_console_writer_throttles_by_env_steps_and_always_prints_evaluations():
    stream, clock = io.StringIO(), _FakeClock()
    writer = ConsoleWriter(
        keys=("env_steps", "eval/return_mean"),
        stream=stream,
        every_seconds=None,
        every_env_steps=100,
        clock=clock,
    )
    for iteration in range(1, 14):  # 16 env steps per iteration, as off-policy runs do
        writer.write(iteration, {"env_steps": 16.0 * iteration})
    writer.write(13, {"env_steps": 208.0, "eval/return_mean": 9.0})
    writer.close()
    assert stream.getvalue().splitlines() == [
        "iter 1 | env_steps 16",
        "iter 8 | env_steps 128",  # 112 >= 100 steps after the first line
        "iter 13 | env_steps 208 | eval/return_mean 9",
    ]
    with pytest.raises(ValueError, match="every_env_steps must be a positive int"):
        ConsoleWriter(every_env_steps=0)
    with pytest.raises(ValueError, match="every_seconds must be >= 0"):
        ConsoleWriter(every_seconds=-1.0)


def test_console_lines_go_above_an_active_bar(monkeypatch):
    from tqdm.auto import tqdm

    stream = io.StringIO()
    written = []
    original = tqdm.write

    def spy(line, file=None, **kwargs):
        written.append(line)
        original(line, file=file, **kwargs)

    monkeypatch.setattr(tqdm, "write", spy)
    writer = ConsoleWriter(keys=("env_steps",), stream=stream, every_seconds=None)
    writer.write(0, {"env_steps": 0.0})  # no bar yet: a plain print
    bar = ProgressBar(total=1000, enabled=True, stream=stream)
    lines = [f"iter {i} | env_steps {100 * i}" for i in range(1, 6)]
    for i in range(1, 6):
        bar.update({"env_steps": 100.0 * i})
        writer.write(i, {"env_steps": 100.0 * i})
    bar.close()
    writer.write(6, {"env_steps": 600.0})  # the bar is gone: a plain print again
    assert written == lines
    # The terminal's rows: tqdm redraws the bar after "\r"; every console line
    # must be a row of its own, whole, never glued to the bar.
    rows = [row.strip() for row in stream.getvalue().replace("\r", "\n").split("\n")]
    for line in ["iter 0 | env_steps 0", *lines, "iter 6 | env_steps 600"]:
        assert rows.count(line) == 1, (line, rows)
    assert not any("| env_steps" in row and "step/s" in row for row in rows)


def test_progress_bar_shows_budget_stop_rule_and_compilation():
    stream = io.StringIO()
    bar = ProgressBar(
        total=300_000,
        enabled=True,
        description=describe_stop(300_000, 475.0, times=2),
        stream=stream,
    )
    first = stream.getvalue()
    assert "stops at 2 evals >= 475 in a row or 300k steps" in first
    assert COMPILING in first and "/300000" in first
    bar.set_total(400_000)
    bar.set_description("stops at 400k steps")
    bar.update({"env_steps": 2048.0, "episode_return_mean": 21.5})
    bar.close()
    rows = [row.strip() for row in stream.getvalue().replace("\r", "\n").split("\n")]
    assert "stops at 400k steps" in rows  # a line of its own above the bar
    assert "2048/400000" in rows[-2] or "2048/400000" in rows[-1]
    last = [row for row in rows if "2048/400000" in row][-1]
    assert COMPILING not in last and "return 21.5" in last
    bar.close()  # closing twice is harmless


@pytest.mark.parametrize("columns", [80, 120])
def test_the_bar_keeps_its_width_and_its_numbers_on_a_narrow_terminal(columns):
    """At 120 columns the bar was one character wide and its text cut: the stop rule stood
    before it. Now the rule is a line above, the bar 16 wide, the numbers right after it."""
    stream = io.StringIO()
    rule = describe_stop(300_000, 475.0, times=2)
    bar = ProgressBar(total=300_000, enabled=True, description=rule, stream=stream)
    metrics = {"env_steps": 150_000.0, "episode_return_mean": 212.5, "eval/return_mean": 301.0}
    bar.update({**metrics, "env_steps_per_s": 1234.0})
    bar._bar.refresh()
    bar.close()
    rows = [row.rstrip() for row in stream.getvalue().replace("\r", "\n").split("\n") if row]
    assert rows[0] == rule
    # tqdm trims a line to the terminal's width less one; what the user sees:
    shown = [row for row in rows if "150000/300000" in row][-1][: columns - 1]
    assert shown.startswith(" 50%|########")
    assert shown.split("|")[1] == "#" * 8 + " " * 8  # 16 wide, half full
    assert "return 212.5" in shown and "eval 301" in shown
    if columns >= 100:
        assert "steps/s 1234 [" in shown


def test_describe_stop():
    assert describe_stop(300_000, 475, times=2) == "stops at 2 evals >= 475 in a row or 300k steps"
    assert describe_stop(stop_reward=-150.5) == "stops at an eval >= -150.5"
    assert describe_stop(max_env_steps=1_500_000) == "stops at 1.5M steps"
    assert describe_stop(max_env_steps=500) == "stops at 500 steps"
    assert describe_stop() == ""


def _read_scalar_events(folder):
    """``[(tag, step, value)]`` from tensorboardX event files: TFRecord framing
    (8-byte length, 4-byte CRC, data, 4-byte CRC) around ``Event`` protos."""
    from tensorboardX.proto.event_pb2 import Event

    scalars = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            length = int.from_bytes(data[offset : offset + 8], "little")
            event = Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                scalars.append((value.tag, event.step, value.simple_value))
    return scalars


def test_tensorboard_writer_logs_at_env_steps(tmp_path):
    pytest.importorskip("tensorboardX")
    writer = TensorBoardWriter(tmp_path / "tb")
    writer.write(1, {"env_steps": 2048.0, "episode_return_mean": 20.0})
    writer.write(2, {"env_steps": 4096.0, "episode_return_mean": 30.0})
    writer.write(3, {"policy/total_loss": 0.5})  # no env_steps: the iteration
    writer.close()
    assert _read_scalar_events(tmp_path / "tb") == [
        ("env_steps", 2048, 2048.0),
        ("episode_return_mean", 2048, 20.0),
        ("env_steps", 4096, 4096.0),
        ("episode_return_mean", 4096, 30.0),
        ("policy/total_loss", 3, 0.5),
    ]


def test_mlflow_writer_logs_at_env_steps(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = f"file://{tmp_path / 'mlruns'}"
    writer = MLflowWriter(experiment="test", run_name="r", tracking_uri=uri)
    writer.write(1, {"env_steps": 2048.0, "episode_return_mean": 20.0})
    writer.close()
    client = mlflow.tracking.MlflowClient(uri)
    history = client.get_metric_history(writer.run_id, "episode_return_mean")
    assert [(m.value, m.step) for m in history] == [(20.0, 2048)]


class FakeMLflow(types.ModuleType):
    """The few mlflow calls MLflowWriter makes, recorded."""

    def __init__(self):
        super().__init__("mlflow")
        self.calls = []
        self.params = {}

    def set_experiment(self, name):
        self.calls.append(("set_experiment", name))

    def start_run(self, run_name=None):
        self.calls.append(("start_run", run_name))
        return types.SimpleNamespace(info=types.SimpleNamespace(run_id="fake"))

    def log_params(self, params):
        assert len(params) <= 100  # MLflow's most per call
        assert not set(params) & set(self.params)  # each param once
        self.calls.append(("log_params", len(params)))
        self.params.update(params)

    def log_metrics(self, metrics, step):
        self.calls.append(("log_metrics", step))

    def end_run(self):
        self.calls.append(("end_run",))


@pytest.fixture
def fake_mlflow(monkeypatch):
    fake = FakeMLflow()
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    return fake


def test_flatten_config_joins_keys_and_writes_values_as_json():
    params = {"config": {"lr": 3e-4, "hidden_sizes": (64, 64), "grad_clip": None}, "a": "text"}
    assert flatten_config(params) == {
        "config/lr": "0.0003",
        "config/hidden_sizes": "[64, 64]",
        "config/grad_clip": "null",
        "a": "text",
    }


def test_mlflow_writer_logs_params_in_batches_and_cuts_long_values(fake_mlflow):
    writer = MLflowWriter(experiment="e", run_name="r")
    writer.log_config({"many": {f"p{i:03d}": i for i in range(250)}, "long": "x" * 600})
    assert [call for call in fake_mlflow.calls if call[0] == "log_params"] == [
        ("log_params", 100),
        ("log_params", 100),
        ("log_params", 51),
    ]
    assert fake_mlflow.params["many/p249"] == "249"
    assert fake_mlflow.params["long"] == "x" * 497 + "..."


@pytest.mark.parametrize("kind", ["trainer", "offline"])
def test_trainers_log_the_resolved_config_as_params_once(fake_mlflow, kind):
    env = gym.make("CartPole-v1")
    writer = MLflowWriter()
    if kind == "trainer":
        learner = jl.algorithms.ppo(env.observation_space, env.action_space, {"lr": 1e-3})
        trainer = jl.Trainer(learner, "CartPole-v1", num_envs=2, writers=[writer], seed=3)
    else:
        learner = jl.algorithms.bc(env.observation_space, env.action_space, {"lr": 1e-3})
        module = learner.init(jax.random.key(0)).modules["default_policy"]
        explore = jl.algorithms.algorithm_for(learner).explore
        dataset = jl.record_episodes(explore, module, "CartPole-v1", 2, num_envs=2)
        with pytest.warns(SmallDatasetWarning):
            trainer = jl.OfflineTrainer(learner, dataset, writers=[writer], seed=3)
    trainer.close()
    params = fake_mlflow.params
    name = "ppo" if kind == "trainer" else "bc"
    assert params["algorithm"] == name and params["config/lr"] == "0.001"
    # Every field of the typed config, defaults included: the resolved config.
    assert {f"config/{k}" for k in learner.recipe["config"]} <= set(params)
    assert params["trainer/env"] == "CartPole-v1" and params["trainer/seed"] == "3"
    assert params["learner/modules_to_train"] == '["default_policy"]'
    if kind == "trainer":
        assert params["trainer/num_envs"] == "2" and params["config/train_batch_size"] == "4000"
    else:
        rows = dataset.num_steps
        assert params["trainer/train_batch_size"] == str(rows)  # what fits, not 2000
        assert params["config/train_batch_size"] == "2000"
    assert fake_mlflow.calls[-1] == ("end_run",)


def test_mlflow_writer_logs_params_to_a_real_run(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = f"file://{tmp_path / 'mlruns'}"
    writer = MLflowWriter(experiment="test", run_name="r", tracking_uri=uri)
    writer.log_config({"algorithm": "ppo", "config": {"lr": 3e-4, "hidden_sizes": [64, 64]}})
    writer.close()
    params = mlflow.tracking.MlflowClient(uri).get_run(writer.run_id).data.params
    assert params == {"algorithm": "ppo", "config/lr": "0.0003", "config/hidden_sizes": "[64, 64]"}
