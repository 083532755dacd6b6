"""The command line's bad input: one line, exit 2, before the run folder exists.

Every option with a number refuses NaN and infinities (``--stop-reward nan`` once
made a run folder and then a 20-line traceback), a learning rate refuses negative
values; ``--out`` naming a file is
refused; a checkpoint whose metadata or array file is a symbolic link is refused
by ``eval`` and ``train --resume`` in one line.
"""

import shutil

import pytest
from helpers import TINY_PPO_OPTIONS, symlink_a_checkpoint_file
from helpers import refused as refused_by

from jaxlearner.cli import NO_CACHE_VARIABLE, main

TINY = ["--eval-every", "256", *TINY_PPO_OPTIONS]


@pytest.fixture(autouse=True)
def no_compilation_cache(monkeypatch):
    monkeypatch.setenv(NO_CACHE_VARIABLE, "1")


def refused(argv, capsys, *fragments):
    """Runs ``main(argv)``; asserts exit 2 and one stderr line holding each fragment."""
    return refused_by(main, argv, capsys, *fragments)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--stop-reward", "nan"], "--stop-reward: expected a finite number, got 'nan'"),
        (["--stop-reward", "inf"], "--stop-reward: expected a finite number, got 'inf'"),
        (["--stop-reward=-inf"], "--stop-reward: expected a finite number, got '-inf'"),
        (["--max-steps", "nan"], "--max-steps: expected a positive integer, got 'nan'"),
        (["--eval-every", "inf"], "--eval-every: expected a positive integer, got 'inf'"),
        (["--num-envs", "nan"], "--num-envs: expected a positive integer, got 'nan'"),
        (["--checkpoint-every-steps", "1e400"], "expected a positive integer, got '1e400'"),
        (["--seed", "nan"], "--seed: expected an integer from 0 to 2**63-1, got 'nan'"),
        (["--devices", "inf"], "--devices takes 'all' or a number; got 'inf'"),
        (["--config", "lr=NaN"], "Hyperparameter 'PPOConfig.lr' must be finite; got nan"),
        (["--config", "lr=1e400"], "Hyperparameter 'PPOConfig.lr' must be finite; got inf"),
        (["--config", "gamma=-Infinity"], "PPOConfig.gamma must be a number in [0, 1]"),
        (["--config", "kl_coeff=NaN"], "PPOConfig.kl_coeff must be >= 0 and finite; got nan"),
        (["--config", "kl_coeff=-inf"], "PPOConfig.kl_coeff must be >= 0 and finite; got '-inf'"),
        (["--config", "vf_loss_coeff=Infinity"], "PPOConfig.vf_loss_coeff must be >= 0"),
        (["--config", "grad_clip=nan"], "grad_clip must be a positive finite number"),
        (["--config", "vf_clip_param=inf"], "PPOConfig.vf_clip_param must be a positive"),
        (["--config", "entropy_coeff=[[0,NaN]]"], "point 0 has non-finite value nan"),
    ],
)
def test_a_non_finite_number_is_refused_before_the_folder(option, message, tmp_path, capsys):
    out = tmp_path / "run"
    refused(["train", "ppo", *option, "--out", str(out)], capsys, message)
    assert not out.exists()


@pytest.mark.parametrize(
    ("algorithm", "option", "message"),
    [
        ("ppo", "lr=-1e-4", "PPOConfig.lr must be >= 0"),
        ("sac", "critic_lr=[[0,1e-3],[100,-1e-4]]", "SACConfig.critic_lr must be >= 0"),
    ],
)
def test_a_negative_learning_rate_is_refused_before_the_folder(
    algorithm, option, message, tmp_path, capsys
):
    out = tmp_path / "run"
    refused(["train", algorithm, "--config", option, "--out", str(out)], capsys, message)
    assert not out.exists()


def test_out_naming_a_file_is_refused(tmp_path, capsys):
    file = tmp_path / "file"
    file.write_text("mine\n")
    refused(["train", "ppo", "--out", str(file)], capsys, "expected a folder", "is a file")
    refused(["train", "ppo", "--out", str(file / "run")], capsys, "is under the file")
    assert file.read_text() == "mine\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "R"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(NO_CACHE_VARIABLE, "1")
        assert main(["train", "ppo", "--max-steps", "512", "--out", str(out), *TINY]) == 0
    return out


@pytest.mark.parametrize("which", ["metadata", "array"])
def test_a_symlink_in_a_checkpoint_is_one_line_from_eval_and_resume(run, which, tmp_path, capsys):
    copy = tmp_path / "R"
    shutil.copytree(run, copy)
    step = copy / "checkpoints" / "2"
    target = symlink_a_checkpoint_file(step, which, tmp_path)
    metrics = (copy / "metrics.jsonl").read_bytes()
    for argv in (["eval", str(copy), "--episodes", "1"], ["train", "--resume", str(copy)]):
        refused(argv, capsys, f"{target} is a symbolic link")
    assert (copy / "metrics.jsonl").read_bytes() == metrics  # nothing written
