"""The jaxlearner command: train on a tiny budget, eval, plot, and bad input."""

import json
import subprocess
import sys

import pytest

from jaxlearner.training.cli import main
from jaxlearner.training.loggers import read_json_lines

TINY = [
    "--max-steps",
    "2048",
    "--eval-every",
    "1024",
    "--num-envs",
    "4",
    "--no-progress",
    "--checkpoint-every",
    "1",
    "--config",
    "train_batch_size=1024",
    "minibatch_size=256",
    "num_epochs=1",
    "hidden_sizes=[16]",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "tiny"
    assert main(["train", "ppo", "--out", str(out), *TINY]) == 0
    return out


def test_train_writes_logs_checkpoints_and_run_info(run, capsys):
    info = json.loads((run / "run.json").read_text())
    assert info["algorithm"] == "ppo" and info["env"] == "CartPole-v1"
    assert info["config"]["hidden_sizes"] == [16]
    records = read_json_lines(run / "metrics.jsonl")
    assert [r["env_steps"] for r in records if "episode_return_mean" in r] == [1024, 2048]
    assert any("eval/return_mean" in r for r in records)
    steps = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert steps[-1] == 2


def test_eval_restores_the_checkpoint(run, capsys):
    assert main(["eval", str(run), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    assert "ppo on CartPole-v1, checkpoint step 2: return" in out and "over 3 episodes" in out
    assert main(["eval", str(run), "--episodes", "2", "--best"]) == 0


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_eval_writes_a_video_of_one_episode(run, tmp_path, capsys, suffix):
    target = tmp_path / f"episode{suffix}"
    assert main(["eval", str(run), "--episodes", "1", "--video", str(target)]) == 0
    out = capsys.readouterr().out
    assert f"frames): {target}" in out and target.stat().st_size > 1000
    frames = int(out.split("video of one episode (return ")[1].split(", ")[1].split()[0])
    assert frames >= 8  # CartPole cannot end sooner


def test_eval_plays_one_episode_in_a_window(run, capsys, monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # a window without a display
    assert main(["eval", str(run), "--episodes", "1", "--render", "human"]) == 0
    assert "played one episode in a window: return" in capsys.readouterr().out


def test_plot_writes_a_png(run, tmp_path, capsys):
    target = tmp_path / "curve.png"
    assert main(["plot", str(run), str(run), "--out", str(target)]) == 0
    assert capsys.readouterr().out.strip() == str(target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and target.stat().st_size > 10_000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "a2c"], "unknown algorithm 'a2c'; choose one of"),
        (["train", "ppo", "--config", "bogus=1"], "Unknown PPOConfig field 'bogus'; valid names"),
        (["train", "ppo", "--config", "lr"], "Config overrides look like key=value"),
        (["train", "ppo", "--max-steps", "0"], "expected a positive integer, got '0'"),
        (["train", "ppo", "--devices", "many"], "--devices takes 'all' or a number"),
        (["train", "ppo", "--env", "NoSuchEnv-v0"], "NoSuchEnv"),
        (["eval", "/nonexistent/run"], "is not a run folder of 'jaxlearner train'"),
        (["eval", "RUN", "--video", "out.avi"], "A video is written as one of ['.gif', '.mp4']"),
        (["eval", "RUN", "--video", "/no/such/dir/a.gif"], "The video's folder '/no/such/dir'"),
        (["eval", "RUN", "--render", "rgb_array"], "--render rgb_array records frames: give"),
        (["eval", "RUN", "--render", "human", "--video", "a.gif"], "drop --render human"),
        (["eval", "RUN", "--render", "ascii"], "argument --render: invalid choice: 'ascii'"),
        (["plot"], "the following arguments are required: runs"),
        ([], "the following arguments are required: command"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, message, capsys, tmp_path, run):
    argv = [str(run) if a == "RUN" else a for a in argv]
    with pytest.raises(SystemExit) as exited:
        main([*argv, *(["--out", str(tmp_path / "x")] if argv[:1] == ["train"] else [])])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_help_runs_as_a_module():
    result = subprocess.run(
        [sys.executable, "-m", "jaxlearner.training.cli", "train", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and "--stop-reward" in result.stdout
