"""Metric writers and the progress bar."""

import io
import math

import jax.numpy as jnp
import numpy as np
import pytest

from jaxlearner.training.loggers import (
    ConsoleWriter,
    JSONLinesWriter,
    MLflowWriter,
    ProgressBar,
    TensorBoardWriter,
    Writer,
    flatten_metrics,
    read_json_lines,
)


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
    assert "40/100" in err and "return=12" in err
