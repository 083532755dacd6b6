"""What `jaxlearner train` prints, read as a user reads it: redirected, in order, exact."""

import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from jaxlearner.cli import main
from jaxlearner.cli.run_settings import RunSettings
from jaxlearner.cli.summary import verdict

SMALL = ["--num-envs", "4", "--no-progress", "--config", "hidden_sizes=[16]"]
COMMAND = [sys.executable, "-m", "jaxlearner_cli", "train"]


def _train(out, *argv, env=None, timeout=300):
    """``python -m jaxlearner_cli train ...`` with stdout redirected to a pipe."""
    environment = {**os.environ, **(env or {})}
    done = subprocess.run(
        [*COMMAND, *argv, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _done_times(line):
    """The closing line's seconds: ``(command, training and evaluating, compiling)``."""
    match = re.match(
        r"Done: [\d,]+ env steps in ([\d.]+) s \(([\d.]+) s training and evaluating, "
        r"([\d.]+) s of that compiling\); ",
        line,
    )
    assert match, line
    return tuple(float(value) for value in match.groups())


def test_a_run_short_of_its_stop_reward_says_so_in_order_with_its_true_budget(tmp_path):
    lines = _train(tmp_path / "run", "ppo", "--max-steps", "1500", "--eval-every", "512", *SMALL)
    # Said before anything compiles (the order is test_the_first_line_comes_before_compiling's).
    assert lines[0].startswith("Training ppo on CartPole-v1 with 4 envs")
    assert lines[0].endswith("; compiling the update...")
    # The budget as it will run: whole iterations of 4 envs x 32 steps (RL Zoo's n_steps).
    assert lines[1].startswith("Stops at two evaluations in a row >= 475 or at ")
    assert "(--max-steps 1,500 rounded up to whole iterations of" in lines[1]
    done = next(i for i, line in enumerate(lines) if line.startswith("Done: "))
    assert all(not line.startswith("iter ") for line in lines[done:])  # no iter line after it
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    evaluations = [row for row in rows if "eval/return_mean" in row]
    best = max(row["eval/return_mean"] for row in evaluations)
    # The rule that held and the one that did not, the best evaluation beside it, no "<".
    assert (
        "; stopped at --max-steps; two evaluations in a row at >= 475: not reached; "
        f"best single evaluation {best:.1f}; " in lines[done]
    )
    command, training, compiling = _done_times(lines[done])
    assert command >= training >= compiling > 0  # the whole command holds its training
    # The final evaluation is recorded, and the compiling iteration is not read as slow.
    assert evaluations[-1]["env_steps"] == rows[-1]["env_steps"]
    first = next(row for row in rows if "time_compile_s" in row)
    assert first["time_compile_s"] > 0
    running = first["time_this_iter_s"] - first["time_compile_s"]
    assert first["env_steps_per_s"] == pytest.approx(first["env_steps"] / running, rel=1e-6)


def test_the_first_line_comes_before_compiling(tmp_path):
    # JAX logs each compilation on stderr; merged with stdout, in the order they happened.
    out = str(tmp_path / "run")
    done = subprocess.run(
        [*COMMAND, "ppo", "--max-steps", "256", *SMALL, "--no-compilation-cache", "--out", out],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_LOG_COMPILES": "1", "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    compiles = [i for i, line in enumerate(lines) if "Compiling " in line]
    opening = next(i for i, line in enumerate(lines) if line.startswith("Training ppo on "))
    assert compiles and opening < compiles[0], lines[: compiles[0] + 1]
    assert lines[opening].endswith("compiling the update...")


@pytest.mark.parametrize(
    ("stop_reward", "evaluations", "said"),
    [
        # The two lines: "best -81.9 < -100" and "best 500.0 < 475".
        (-100.0, [-150.0, -81.9, -120.0], "two evaluations in a row at >= -100: not reached"),
        (475.0, [500.0, 80.0], "two evaluations in a row at >= 475: not reached"),
    ],
)
def test_the_verdict_never_contradicts_its_numbers(stop_reward, evaluations, said):
    settings = RunSettings("ppo", "CartPole-v1", {}, 8, 0, stop_reward, 1000, 100, 100, None)
    settings = dataclasses.replace(settings, preset="ppo/CartPole-v1 (rl_zoo3)")
    history = [
        {"env_steps": 100.0 * (i + 1), "eval/return_mean": v} for i, v in enumerate(evaluations)
    ]
    best = f"best single evaluation {max(evaluations):.1f}"
    text = verdict(settings, history)
    assert text.startswith(f"stopped at --max-steps; {said}; {best}; ")
    assert "<" not in text
    reached = verdict(
        settings, [*history, {"eval/return_mean": 500.0}, {"eval/return_mean": 500.0}]
    )
    assert reached == f"two evaluations in a row at >= {stop_reward:g}: reached."
    none = verdict(dataclasses.replace(settings, stop_reward=None), history)
    assert none == f"stopped at --max-steps; no stop reward was set; {best}."


def test_reaching_the_stop_reward_is_said_and_a_run_without_its_preset_gets_a_hint(tmp_path):
    lines = _train(tmp_path / "reached", "ppo", "--stop-reward", "5", "--eval-every", "128", *SMALL)
    (done,) = [line for line in lines if line.startswith("Done: ")]
    assert done.endswith("; two evaluations in a row at >= 5: reached.")
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
