"""``jaxlearner train ALGO --env gymnax:NAME``: a gymnax game compiled end to end from the
command line, with the run folder, metrics, checkpoints, resume, eval and plot of a gymnasium
run, and bad input in one line."""

import json
import sys

import pytest

from jaxlearner.cli import main
from jaxlearner.training.outputs.loggers import read_json_lines

# This module's tests run convolutions, which -O0 slows more than it saves (tests/conftest.py).
pytestmark = pytest.mark.full_optimization

gymnax = pytest.importorskip("gymnax")

ENV = "gymnax:Breakout-MinAtar"
TINY = [
    "--max-steps", "2048", "--eval-every", "1024", "--checkpoint-every-steps", "512",
    "--num-envs", "4", "--no-progress", "--config", "train_batch_size=512",
    "minibatch_size=256", "num_epochs=1", "hidden_sizes=[16]",
]  # fmt: skip
TIMING = ("env_steps_per_s", "time_this_iter_s", "time_compile_s", "time_total_s")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "minatar"
    assert main(["train", "ppo", "--env", ENV, "--out", str(out), "--preset", "none", *TINY]) == 0
    return out


def test_train_writes_the_run_folder_of_a_gymnasium_run(run):
    info = json.loads((run / "run.json").read_text())
    assert info["env"] == ENV and info["algorithm"] == "ppo" and info["num_envs"] == 4
    records = read_json_lines(run / "metrics.jsonl")
    trained = [r for r in records if "default_policy/total_loss" in r]
    assert [r["env_steps"] for r in trained] == [512, 1024, 1536, 2048]  # a row per iteration
    evaluated = [r["env_steps"] for r in records if "eval/return_mean" in r]
    assert evaluated[-2:] == [1024, 2048]
    steps = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert steps[-1] == 4


def test_eval_and_plot_read_the_run(run, tmp_path, capsys):
    assert main(["eval", str(run), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    assert f"ppo on {ENV}, checkpoint step 4: return" in out and "over 3 episodes" in out
    assert main(["plot", str(run), "--out", str(tmp_path / "curve.png")]) == 0
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_a_resume_from_an_older_step_repeats_the_run_exactly(run, capsys):
    """``--resume RUN --step 2`` goes on in RUN-2 from the second iteration: the compiled
    blocks carry the whole state (environments, key), so every later row equals RUN's."""
    assert main(["train", "--resume", str(run), "--step", "2", "--no-progress"]) == 0
    assert "resuming from checkpoint step 2" in capsys.readouterr().err
    beside = run.parent / f"{run.name}-2"

    def rows(folder):
        records = read_json_lines(folder / "metrics.jsonl")
        return [{k: v for k, v in r.items() if k not in TIMING} for r in records]

    assert rows(beside) == rows(run)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["eval", "RUN", "--video", "a.gif"], f"{ENV} is a gymnax environment, which draws no"),
        (
            ["record", "RUN", "--episodes", "2", "--out", "data"],
            "bc and marwil, which train and evaluate in gym",
        ),
        (["train", "ppo", "--env", "gymnax:Breakout"], "gymnax has no environment 'Breakout';"),
        (["train", "ppo", "--env", ENV, "--devices", "2"], "a gymnax run is one compiled program"),
        (["train", "bc", "--env", ENV], "bc trains on a recorded dataset evaluated in gymnasium"),
        (["train", "appo", "--env", ENV, "--config", "policy_lag=1"], "Use policy_lag=0 here"),
        (["train", "ppo", "--env", ENV, "--num-envs", "3"], "--num-envs 3: "),
    ],
)
def test_bad_input_is_one_line_before_anything_is_written(argv, message, run, tmp_path, capsys):
    argv = [str(run) if a == "RUN" else a for a in argv]
    out = tmp_path / "x"
    with pytest.raises(SystemExit) as exited:
        main([*argv, *(["--out", str(out)] if argv[0] == "train" else [])])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and message in err and err.count("\n") == 1, err
    assert not out.exists()


def test_the_valid_names_are_listed_and_a_missing_gymnax_names_the_extra(capsys, monkeypatch):
    with pytest.raises(SystemExit):
        main(["train", "ppo", "--env", "gymnax:Breakout"])
    err = capsys.readouterr().err
    assert all(f"{name}" in err for name in gymnax.registered_envs), err
    monkeypatch.setitem(sys.modules, "gymnax", None)  # as if not installed
    with pytest.raises(SystemExit) as exited:
        main(["train", "ppo", "--env", ENV])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "jaxlearner train: error: gymnax environments need gymnax, which is not installed: "
        'pip install "jaxlearner[gymnax]"\n'
    )


@pytest.mark.slow
def test_ppo_learns_breakout_minatar_from_the_command_line(tmp_path, capsys):
    """The MinAtar preset (gymnax-blines' PPO, MinAtar's network) on Breakout-MinAtar: 20
    iterations of 64 envs x 128 steps, about a minute on 2 cores. A random policy scores
    under 1; seeds 0, 1 and 2 of this budget evaluated 6.5, 5.5 and 5.6 (training returns
    4.8, 3.7, 4.4)."""
    out = tmp_path / "breakout"
    argv = ["train", "ppo", "--env", ENV, "--out", str(out), "--max-steps", "163840"]
    argv += ["--eval-every", "81920", "--stop-reward", "none", "--no-progress"]
    assert main(argv) == 0
    info = json.loads((out / "run.json").read_text())
    assert info["preset"] == "ppo/gymnax:*-MinAtar (published)" and info["num_envs"] == 64
    records = read_json_lines(out / "metrics.jsonl")
    evaluations = [r["eval/return_mean"] for r in records if "eval/return_mean" in r]
    assert records[-1]["env_steps"] == 163840 and len(evaluations) == 2
    assert evaluations[-1] >= 3.0, evaluations
