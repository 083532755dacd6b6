"""The command line parsed into typed, frozen options; bad numbers and paths: one line, exit 2."""

import dataclasses
import json
import pathlib
import subprocess
import sys

import pytest

from jaxlearner.cli import (
    CacheOptions,
    EvalOptions,
    PlotOptions,
    RecordOptions,
    RunnerOptions,
    TrainOptions,
    main,
    parse,
)


def test_train_parses_into_typed_options():
    budget = ["--max-steps", "1024", "--out", "runs/a", "--stop-reward", "-50.5"]
    rest = ["--devices", "2", "--seed", "7", "--no-progress", "--config", "lr=1e-3", "gamma=0.9"]
    options = parse(["train", "ppo", *budget, *rest])
    assert options == TrainOptions(
        algorithm="ppo",
        max_steps=1024,
        out=pathlib.Path("runs/a"),
        stop_reward=-50.5,
        devices=2,
        seed=7,
        progress=False,
        config=("lr=1e-3", "gamma=0.9"),
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_steps = 1  # frozen: what was parsed is what runs


def test_env_runner_options_parse_into_their_own_value():
    runners = ["--env-runners", "2", "--cpus-per-env-runner", "0.5", "--ray-address", "auto"]
    options = parse(["train", "appo", *runners, "--max-env-runner-restarts", "3"])
    assert options.runners == RunnerOptions(
        env_runners=2, cpus_per_env_runner=0.5, max_env_runner_restarts=3, ray_address="auto"
    )
    assert parse(["train", "ppo"]).runners == RunnerOptions()  # in this process
    resumed = parse(["train", "--resume", "runs/a", "--env-runners", "1"])
    assert resumed.runners.env_runners == 1  # a resumed run may collect elsewhere


def test_stop_reward_none_means_no_reward_stop():
    from jaxlearner.cli.run_settings import run_settings

    options = parse(["train", "ppo", "--stop-reward", "none"])
    assert options.stop_reward == "none" and run_settings(options).stop_reward is None
    assert run_settings(parse(["train", "ppo"])).stop_reward == 475.0  # its own environment's
    with pytest.raises(ValueError, match="--stop-reward: expected a finite number, got 'all'"):
        TrainOptions(stop_reward="all")


def test_train_options_name_the_algorithm_after_config_and_all_devices():
    options = parse(["train", "--config", "lr=1e-3", "PPO", "--devices", "all"])
    assert options.algorithm == "PPO" and options.config == ("lr=1e-3",)
    assert options.devices == "all"
    resume = parse(["train", "--resume", "runs/a", "--no-compilation-cache"])
    assert resume.resume == pathlib.Path("runs/a") and resume.algorithm is None
    assert resume.cache == CacheOptions(folder=None, disabled=True)


def test_eval_record_and_plot_parse_into_their_options():
    assert parse(["eval", "runs/a"]) == EvalOptions(run=pathlib.Path("runs/a"))
    evaluated = parse(["eval", "runs/a", "--step", "3", "--video", "a.gif", "--episodes", "2"])
    assert (evaluated.step, evaluated.video, evaluated.episodes) == (3, "a.gif", 2)
    recorded = parse(["record", "runs/a", "--episodes", "4", "--out", "data/a", "--explore"])
    assert recorded == RecordOptions(
        run=pathlib.Path("runs/a"), episodes=4, out="data/a", explore=True
    )
    plotted = parse(["plot", "runs/a", "runs/b", "--out", "c.png"])
    assert plotted == PlotOptions(runs=("runs/a", "runs/b"), out="c.png")
    assert parse([]) is None  # bare `jaxlearner`: main prints the usage


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: TrainOptions(stop_reward=float("nan")), "--stop-reward: expected a finite"),
        (lambda: TrainOptions(stop_reward=float("-inf")), "--stop-reward: expected a finite"),
        (lambda: TrainOptions(max_steps=0), "--max-steps: expected a positive integer, got 0"),
        (lambda: TrainOptions(num_envs=-2), "--num-envs: expected a positive integer, got -2"),
        (lambda: TrainOptions(eval_every=1.5), "--eval-every: expected a positive integer"),
        (lambda: TrainOptions(eval_episodes=0), "--eval-episodes: expected a positive integer"),
        (lambda: TrainOptions(checkpoint_every_steps=0), "--checkpoint-every-steps: expected"),
        (lambda: TrainOptions(seed=-1), "--seed: expected an integer from 0 to 2**63-1, got -1"),
        (lambda: TrainOptions(seed=2**63), "--seed: expected an integer from 0 to 2**63-1"),
        (lambda: TrainOptions(devices=0), "--devices: expected a positive integer, got 0"),
        (lambda: EvalOptions(run=pathlib.Path("r"), episodes=0), "--episodes: expected a"),
        (lambda: EvalOptions(run=pathlib.Path("r"), best=True, step=2), "--best and --step 2"),
        (lambda: RecordOptions(run=pathlib.Path("r"), episodes=1, out="d", num_envs=0), "--num"),
        (lambda: RecordOptions(run=pathlib.Path("r"), episodes=1, out="d", seed=-3), "--seed"),
        (lambda: PlotOptions(runs=()), "expected at least one run folder"),
        (lambda: RunnerOptions(env_runners=-1), "--env-runners: expected an integer >= 0"),
        (lambda: RunnerOptions(cpus_per_env_runner=0.0), "--cpus-per-env-runner: expected a"),
        (lambda: RunnerOptions(max_env_runner_restarts=-1), "--max-env-runner-restarts"),
    ],
)
def test_an_invalid_option_value_is_a_clear_error(make, message):
    with pytest.raises(ValueError) as error:
        make()
    assert message in str(error.value)


@pytest.fixture()
def fake_run(tmp_path):
    """A folder with a run.json: enough for the checks that come before any checkpoint."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"algorithm": "ppo", "env": "CartPole-v1"}))
    return run


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stop-reward", "nan"], "argument --stop-reward: expected a finite number, got 'nan'"),
        (["--stop-reward", "inf"], "argument --stop-reward: expected a finite number, got 'inf'"),
        (["--stop-reward=-inf"], "argument --stop-reward: expected a finite number, got '-inf'"),
        (["--stop-reward", "high"], "expected a number, got 'high' (or 'none': no reward stop)"),
        (["--seed", "-1"], "argument --seed: expected an integer from 0 to 2**63-1, got '-1'"),
        (["--seed", str(2**63)], "argument --seed: expected an integer from 0 to 2**63-1"),
        (["--eval-every", "0"], "argument --eval-every: expected a positive integer, got '0'"),
        (["--num-envs", "-4"], "argument --num-envs: expected a positive integer, got '-4'"),
        (["--checkpoint-every-steps", "0"], "argument --checkpoint-every-steps: expected a"),
        (["--devices", "0"], "--devices takes 'all' or a positive number; got '0'"),
        (["--env-runners", "-1"], "argument --env-runners: expected an integer >= 0, got '-1'"),
        (["--cpus-per-env-runner", "0"], "--cpus-per-env-runner: expected a number > 0, got '0'"),
        (["--env", "gymnax:CartPole-v1", "--env-runners", "1"], "--env-runners: gymnax:Cart"),
    ],
)
def test_bad_numbers_are_one_line_before_the_run_folder(argv, message, tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exited:
        main(["train", "ppo", "--out", str(out), *argv])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("jaxlearner train: error: ") and message in err, err
    assert not out.exists()


@pytest.mark.parametrize("under", [False, True])
def test_out_naming_a_file_is_one_line_and_makes_nothing(under, tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    out = blocker / "run" if under else blocker
    with pytest.raises(SystemExit) as exited:
        main(["train", "ppo", "--out", str(out), "--max-steps", "1024"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1, err
    assert f"jaxlearner train: error: --out {out}: expected a folder, but {out} is" in err
    assert blocker.read_text() == "not a folder" and sorted(tmp_path.iterdir()) == [blocker]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["eval", "RUN", "--seed", "-1"], "argument --seed: expected an integer from 0"),
        (["eval", "RUN", "--episodes", "0"], "argument --episodes: expected a positive integer"),
        (["record", "RUN", "--episodes", "1", "--out", "D", "--num-envs", "0"], "--num-envs"),
        (["record", "RUN", "--episodes", "1", "--out", "FILE"], "--out FILE: expected a folder"),
        (["plot", "RUN", "--out", "/no/such/folder/a.png"], "no folder /no/such/folder"),
    ],
)
def test_bad_input_to_the_run_commands_is_one_line(argv, message, fake_run, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    names = {"RUN": str(fake_run), "D": str(tmp_path / "data"), "FILE": str(blocker)}
    with pytest.raises(SystemExit) as exited:
        main([names.get(a, a) for a in argv])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1, err
    assert message.replace("FILE", str(blocker)) in err, err
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stop-reward", "nan"], "argument --stop-reward: expected a finite number, got 'nan'"),
        (["--out", "FILE"], "--out FILE: expected a folder, but FILE is a file"),
    ],
)
def test_bad_input_from_the_shell_is_one_line_without_a_traceback(argv, message, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    argv = [str(blocker) if a == "FILE" else a for a in argv]
    out = [] if "--out" in argv else ["--out", str(tmp_path / "run")]
    result = subprocess.run(
        [sys.executable, "-m", "jaxlearner", "train", "ppo", "--max-steps", "1024", *out, *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert message.replace("FILE", str(blocker)) in result.stderr, result.stderr
    assert sorted(tmp_path.iterdir()) == [blocker]
