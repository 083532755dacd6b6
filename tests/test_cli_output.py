"""What `jaxlearner train` prints, read as a user reads it: redirected, in order, exact."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from jaxlearner.cli import main

SMALL = ["--num-envs", "4", "--no-progress", "--config", "hidden_sizes=[16]"]


def _train(out, *argv, env=None, timeout=300):
    """``python -m jaxlearner_cli train ...`` with stdout redirected to a pipe."""
    environment = {**os.environ, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-m", "jaxlearner_cli", "train", *argv, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_run_short_of_its_stop_reward_says_so_in_order_with_its_true_budget(tmp_path):
    lines = _train(tmp_path / "run", "ppo", "--max-steps", "1500", "--eval-every", "512", *SMALL)
    # The budget as it will run: whole iterations of 4 envs x 32 steps (RL Zoo's n_steps).
    assert lines[1].startswith("Stops at two evaluations in a row >= 475 or at ")
    assert "(--max-steps 1,500 rounded up to whole iterations of" in lines[1]
    done = next(i for i, line in enumerate(lines) if line.startswith("Done: "))
    assert all(not line.startswith("iter ") for line in lines[done:])  # no iter line after it
    assert "did not reach the stop reward (best " in lines[done] and "< 475)" in lines[done]
    assert "s of it compiling)" in lines[done]
    # The final evaluation is recorded, and the compiling iteration is not read as slow.
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    evaluations = [row for row in rows if "eval/return_mean" in row]
    assert evaluations[-1]["env_steps"] == rows[-1]["env_steps"]
    first = next(row for row in rows if "time_compile_s" in row)
    assert first["time_compile_s"] > 0
    running = first["time_this_iter_s"] - first["time_compile_s"]
    assert first["env_steps_per_s"] == pytest.approx(first["env_steps"] / running, rel=1e-6)


def test_reaching_the_stop_reward_is_said_and_a_run_without_its_preset_gets_a_hint(tmp_path):
    lines = _train(tmp_path / "reached", "ppo", "--stop-reward", "5", "--eval-every", "128", *SMALL)
    (done,) = [line for line in lines if line.startswith("Done: ")]
    assert done.endswith("reached the stop reward 5 (two evaluations in a row).")
    lines = _train(
        tmp_path / "untuned",
        "ppo",
        "--preset",
        "none",
        "--max-steps",
        "512",
        "--config",
        "train_batch_size=256",
        "minibatch_size=128",
        "num_epochs=1",
        "hidden_sizes=[8]",
        "--num-envs",
        "4",
        "--no-progress",
    )
    (done,) = [line for line in lines if line.startswith("Done: ")]
    assert "CartPole-v1 has tuned settings: drop --preset none" in done


def test_help_states_the_stop_rule_and_the_rounding(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "stop once two evaluations in a row reach this mean return" in text
    assert "iterations are whole, so a run ends at the first multiple" in text
    assert "stops at evaluation return" not in text


def test_wandb_from_the_command_line_offline(tmp_path):
    pytest.importorskip("wandb")
    out = tmp_path / "wb"
    _train(
        out,
        "ppo",
        "--max-steps",
        "256",
        "--eval-every",
        "256",
        "--wandb",
        *SMALL,
        env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"},
    )
    (run_file,) = pathlib.Path(out).glob("wandb/wandb/offline-run-*/run-*.wandb")
    data = run_file.read_bytes()
    for key in (b"episode_return_mean", b"eval/return_mean", b"train_batch_size", b"CartPole-v1"):
        assert key in data, key
