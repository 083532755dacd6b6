"""The jaxlearner command: train on a tiny budget, eval, plot, and bad input."""

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import gymnasium as gym
import pytest

import jaxlearner as jl
from jaxlearner import algorithms
from jaxlearner.cli import DEFAULTS, main
from jaxlearner.cli import NO_CACHE_VARIABLE as NO_CACHE
from jaxlearner.training.outputs.loggers import read_json_lines

TINY = [
    "--max-steps",
    "2048",
    "--eval-every",
    "1024",
    "--num-envs",
    "4",
    "--no-progress",
    "--checkpoint-every-steps",
    "1024",
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


def test_a_tensorboard_run_logs_by_env_steps_and_names_its_folder(tmp_path, capsys):
    out = tmp_path / "tb"
    assert main(["train", "ppo", "--out", str(out), "--tensorboard", *TINY]) == 0
    assert f"tensorboard: tensorboard --logdir {out / 'tensorboard'}" in capsys.readouterr().out
    assert any((out / "tensorboard").iterdir())


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


def test_eval_video_prints_no_audio_or_display_noise(run, tmp_path):
    # pygame's SDL opened a sound device and a display for off-screen frames: on a machine
    # with neither, screens of "ALSA lib ... cannot find card '0'" and "XDG_RUNTIME_DIR is
    # invalid" on stderr. The command sets SDL's dummy drivers where the user set none.
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SDL_")}
    target = tmp_path / "quiet.gif"
    command = ["eval", str(run), "--episodes", "1", "--video", str(target)]
    done = subprocess.run(
        [sys.executable, "-m", "jaxlearner_cli", *command],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    assert done.returncode == 0 and target.stat().st_size > 1000, done.stderr
    assert done.stderr == ""


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
        (["train", "ppo", "--devices", "9"], "--devices 9: devices=9 but 8 device(s)"),
        (["train", "ppo", "--num-envs", "3"], "--num-envs 3: PPO's train_batch_size 256 does"),
        # PPO in capitals, and after --config: both name the algorithm.
        (["train", "--config", "lr=1e-3", "PPO", "--num-envs", "3"], "--num-envs 3: PPO's"),
        (["train", "ppo", "--config", "hidden_sizes=64"], "hidden_sizes takes a list like"),
        (["train", "ppo", "--checkpoint-every", "2"], "--checkpoint-every-steps N (env steps)"),
        (["train", "ppo", "--resume", "RUN"], "with the settings in its run.json; drop"),
        (["train", "ppo", "--eval-episodes", "0"], "expected a positive integer, got '0'"),
        (["train", "--resume", "RUN", "--eval-episodes", "3"], "drop ['--eval-episodes']"),
        (["train", "--resume", "/no/run"], "is not a run folder of 'jaxlearner train'"),
        (["train"], "give an algorithm (appo, bc, dqn, marwil, ppo, pqn, sac"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, message, capsys, tmp_path, run):
    argv = [str(run) if a == "RUN" else a for a in argv]
    out = tmp_path / "x"
    with pytest.raises(SystemExit) as exited:
        main(
            [
                *argv,
                *(["--out", str(out)] if argv[:1] == ["train"] and "--resume" not in argv else []),
            ]
        )
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not out.exists()  # checked before anything is written


def test_missing_extras_are_one_line_before_any_work(capsys, tmp_path, monkeypatch, run):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "imageio", None)
    out = tmp_path / "x"
    with pytest.raises(SystemExit) as exited:
        main(["train", "ppo", "--tensorboard", "--out", str(out)])
    assert exited.value.code == 2 and not out.exists()
    assert "pip install 'jaxlearner[tensorboard]'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["eval", str(run), "--video", str(tmp_path / "a.mp4")])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "pip install 'jaxlearner[video]'" in err, err


def test_a_missing_renderer_is_one_line_before_the_evaluation(capsys, tmp_path, monkeypatch, run):
    monkeypatch.setitem(sys.modules, "pygame", None)  # as if the video extra were missing
    for extra in (["--video", str(tmp_path / "a.gif")], ["--render", "human"]):
        with pytest.raises(SystemExit) as exited:
            main(["eval", str(run), "--episodes", "1", *extra])
        captured = capsys.readouterr()
        assert exited.value.code == 2 and "pip install 'jaxlearner[video]'" in captured.err
        assert "checkpoint step" not in captured.out  # nothing was evaluated first


def test_bare_command_prints_the_usage(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: jaxlearner") and "train" in err and "eval" in err
    bare = subprocess.run([sys.executable, "-m", "jaxlearner"], capture_output=True, text=True)
    assert bare.returncode == 2 and bare.stderr.startswith("usage: jaxlearner")


@pytest.mark.parametrize(
    ("options", "steps"),
    [
        # Every 2048 env steps (2 iterations of 1024), and at the end; no evaluation before.
        (["--checkpoint-every-steps", "2048", "--eval-every", "100000"], [2, 4, 5]),
        # The first evaluation (iteration 3) is a new best; then the end.
        (["--checkpoint-every-steps", "100000", "--eval-every", "3072"], [3, 5]),
    ],
)
def test_checkpoints_land_where_the_options_say(options, steps, tmp_path, capsys):
    tiny = [*TINY[TINY.index("--num-envs") :]]
    tiny.remove("--checkpoint-every-steps")
    tiny.remove("1024")
    out = tmp_path / "run"
    assert main(["train", "ppo", "--out", str(out), "--max-steps", "5120", *options, *tiny]) == 0
    saved = sorted(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit())
    assert saved == steps
    # The closing evaluation lands in metrics.jsonl and in the last checkpoint's metrics.
    evaluations = [r for r in read_json_lines(out / "metrics.jsonl") if "eval/return_mean" in r]
    assert evaluations[-1]["iteration"] == 5 and evaluations[-1]["env_steps"] == 5120
    with jl.CheckpointManager(out / "checkpoints") as checkpoints:
        metrics = checkpoints.metadata(5)["metrics"]
    assert metrics["eval/return_mean"] == evaluations[-1]["eval/return_mean"]


def _cli(*argv, **kwargs):
    return subprocess.Popen(
        [sys.executable, "-m", "jaxlearner.training.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _train_records(run):
    return [r for r in read_json_lines(run / "metrics.jsonl") if "episode_return_mean" in r]


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_a_checkpoint_and_resume_continues(signal_number, tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ)
    budget = ["--max-steps", "16384", "--eval-every", "4096", "--stop-reward", "1000"]
    tiny = [a for a in TINY[TINY.index("--num-envs") :] if a not in ("--checkpoint-every-steps",)]
    tiny.remove("1024")
    child = _cli("train", "ppo", "--out", str(out), *budget, *tiny, env=env)
    deadline = time.monotonic() + 120
    while not ((out / "metrics.jsonl").is_file() and _train_records(out)):
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.05)
    child.send_signal(signal_number)
    stdout, stderr = child.communicate(timeout=120)
    assert child.returncode == 128 + signal_number, stderr
    assert "Traceback" not in stderr, stderr
    assert f"continue with: jaxlearner train --resume {out}" in stdout
    stopped = _train_records(out)
    assert 1 <= len(stopped) < 16
    saved = sorted(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit())
    assert saved[-1] == stopped[-1]["iteration"]
    if signal_number == signal.SIGTERM:
        return
    resumed = _cli("train", "--resume", str(out), "--no-progress", env=env)
    stdout, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    assert f"\nFrom env step {int(stopped[-1]['env_steps']):,}, stops at " in stdout
    records = _train_records(out)
    assert [r["iteration"] for r in records] == list(range(1, 17))
    assert [r["env_steps"] for r in records] == [1024 * i for i in range(1, 17)]
    again = _cli("train", "--resume", str(out), env=env)
    stdout, stderr = again.communicate(timeout=120)
    assert again.returncode == 0 and "is complete: its stop conditions hold" in stdout, stderr
    assert len(_train_records(out)) == 16


def test_the_compilation_cache_fills_the_folder_given(run, tmp_path):
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "JAXLEARNER_NO_COMPILATION_CACHE"}
    child = _cli("eval", str(run), "--episodes", "2", "--compilation-cache", str(cache), env=env)
    assert child.wait(timeout=120) == 0, child.communicate()
    assert any(cache.iterdir())
    off = tmp_path / "off"
    env[NO_CACHE] = "1"
    child = _cli("eval", str(run), "--episodes", "2", "--compilation-cache", str(off), env=env)
    assert child.wait(timeout=120) == 0, child.communicate()
    assert not off.exists()
    # Off means off, also where JAX's own variable would turn its cache on.
    env["JAX_COMPILATION_CACHE_DIR"] = str(off)
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # JAX would keep every program
    child = _cli("eval", str(run), "--episodes", "2", "--no-compilation-cache", env=env)
    assert child.wait(timeout=120) == 0, child.communicate()
    assert not off.exists() or not any(off.iterdir())


def test_the_default_cache_is_jaxs_own_variable_else_under_xdg_cache_home(run, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != NO_CACHE}
    folders = {"JAX_COMPILATION_CACHE_DIR": tmp_path / "jax", "XDG_CACHE_HOME": tmp_path / "xdg"}
    for variable, expected in [
        ("JAX_COMPILATION_CACHE_DIR", folders["JAX_COMPILATION_CACHE_DIR"]),
        ("XDG_CACHE_HOME", folders["XDG_CACHE_HOME"] / "jaxlearner" / "jax"),
    ]:
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        env[variable] = str(folders[variable])
        child = _cli("eval", str(run), "--episodes", "2", env=env)
        assert child.wait(timeout=120) == 0, child.communicate()
        assert any(expected.iterdir()), variable


def test_help_runs_as_a_module():
    result = subprocess.run(
        [sys.executable, "-m", "jaxlearner.training.cli", "train", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and "--stop-reward" in result.stdout
    for line in [
        "  ppo: CartPole-v1, stops at two evaluations in a row >= 475 or 100000 env steps;",
        "    hidden_sizes: tuple[int, ...] = [256,256]; on CartPole-v1: [64,64]",
        "    lr: ScheduleLike = 0.0005; on CartPole-v1: 0.0023",  # dqn
        "  sac: Pendulum-v1, stops at two evaluations in a row >= -250 or 30000 env steps;",
        "presets: on an environment with a preset ('jaxlearner presets' lists them: RL Zoo's",
    ]:
        assert line in result.stdout.splitlines(), line


def test_another_env_stops_at_gymnasiums_reward_threshold(tmp_path, capsys):
    out = tmp_path / "acrobot"
    options = ["--max-steps", "1024", "--eval-every", "100000", "--num-envs", "4"]
    options += ["--preset", "none"]  # Acrobot-v1's preset normalizes; this test needs none
    config = ["--config", "train_batch_size=1024", "num_epochs=1", "hidden_sizes=[8]"]
    assert main(["train", "ppo", "--env", "Acrobot-v1", "--out", str(out), *options, *config]) == 0
    assert json.loads((out / "run.json").read_text())["stop_reward"] == -100.0


def test_stop_reward_none_trains_the_whole_budget_and_resumes_so(tmp_path, capsys):
    options = ["--max-steps", "1024", "--eval-every", "256", "--num-envs", "4", "--preset", "none"]
    options += ["--config", "train_batch_size=256", "num_epochs=1", "hidden_sizes=[8]"]
    ends = {}
    for stop in ("0", "none"):  # every CartPole return is >= 0: that run stops at 512 steps
        out = tmp_path / f"stop-{stop}"
        assert main(["train", "ppo", "--out", str(out), *options, "--stop-reward", stop]) == 0
        ends[stop] = max(r["env_steps"] for r in read_json_lines(out / "metrics.jsonl"))
    assert ends == {"0": 512, "none": 1024}
    assert json.loads((out / "run.json").read_text())["stop_reward"] is None
    capsys.readouterr()
    assert main(["train", "--resume", str(out)]) == 0  # the budget is spent: nothing to do
    assert "nothing to resume" in capsys.readouterr().out


def test_an_off_policy_run_writes_a_row_per_thousand_env_steps(tmp_path, capsys):
    """DQN's rollouts of 4 env steps are recorded a row per 1,000 env steps at most, not a row
    per rollout: here per 500, as evaluations every 1,500 and the budget stay exact."""
    options = ["--max-steps", "3000", "--eval-every", "1500", "--num-envs", "1", "--preset"]
    options += ["none", "--stop-reward", "none", "--no-progress", "--config", "hidden_sizes=[8]"]
    options += ["num_steps_sampled_before_learning_starts=500", "train_batch_size=32"]
    out = tmp_path / "dqn"
    assert main(["train", "dqn", "--out", str(out), *options]) == 0
    rows = [row for row in read_json_lines(out / "metrics.jsonl") if "env_steps_per_s" in row]
    per_rollout = 4  # DQN's rollout_fragment_length with one env
    ends = list(range(500, 3001, 500))
    assert [row["env_steps"] for row in rows] == ends
    assert [row["iteration"] for row in rows] == [n // per_rollout for n in ends]
    evaluated = [row["env_steps"] for row in read_json_lines(out / "metrics.jsonl")
                 if "eval/return_mean" in row]  # fmt: skip
    assert evaluated == [1500, 3000]
    assert "default_policy/qf_mean" in rows[-1]


def test_eval_episodes_sets_each_evaluation_and_the_resumed_run_keeps_it(tmp_path, capsys):
    from jaxlearner import cli
    from jaxlearner.cli.run_settings import run_settings

    out = tmp_path / "three"
    options = ["--max-steps", "1024", "--eval-every", "512", "--num-envs", "4", "--preset", "none"]
    options += ["--config", "train_batch_size=256", "num_epochs=1", "hidden_sizes=[8]"]
    argv = ["train", "ppo", "--out", str(out), *options, "--eval-episodes", "3"]
    assert main([*argv, "--stop-reward", "none"]) == 0
    evaluations = [r for r in read_json_lines(out / "metrics.jsonl") if "eval/episodes" in r]
    assert [(r["env_steps"], r["eval/episodes"]) for r in evaluations] == [(512, 3), (1024, 3)]
    info = json.loads((out / "run.json").read_text())
    assert info["eval_episodes"] == 3
    assert run_settings(cli.parse(["train", "--resume", str(out)])).eval_episodes == 3
    # A run folder written before the option: its evaluations were the default's 10.
    del info["eval_episodes"]
    (out / "run.json").write_text(json.dumps(info))
    assert run_settings(cli.parse(["train", "--resume", str(out)])).eval_episodes == 10
    # A damaged value is one line before anything runs.
    for key, value in [("eval_episodes", 0), ("eval_every", "512"), ("checkpoint_every_steps", -1)]:
        (out / "run.json").write_text(json.dumps({**info, key: value}))
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            main(["train", "--resume", str(out)])
        assert exited.value.code == 2
        assert f"is damaged: {key!r} is {value!r}" in capsys.readouterr().err


def _shell(*argv, timeout=240):
    """The command as a user types it (``python -m jaxlearner ...``)."""
    return subprocess.run(
        [sys.executable, "-m", "jaxlearner", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "ppo", "--num-envs", "3"], "--num-envs 3: PPO's train_batch_size 256 does"),
        (["train", "ppo", "--config", "hidden_sizes=64"], "hidden_sizes takes a list like"),
        (["train", "--config", "lr=1e-3", "PPO", "--num-envs", "3"], "--num-envs 3: PPO's"),
    ],
)
def test_bad_input_from_the_shell_is_one_line_and_writes_nothing(argv, message, tmp_path):
    out = tmp_path / "x"
    result = _shell(*argv, "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert not out.exists()


def test_checkpoint_cadence_from_the_shell(tmp_path):
    tiny = [*TINY[TINY.index("--num-envs") :]]
    tiny.remove("--checkpoint-every-steps")
    tiny.remove("1024")
    out = tmp_path / "run"
    cadence = ["--checkpoint-every-steps", "2048", "--eval-every", "100000"]
    result = _shell("train", "ppo", "--out", str(out), "--max-steps", "5120", *cadence, *tiny)
    assert result.returncode == 0, result.stderr[-2000:]
    saved = sorted(int(p.name) for p in (out / "checkpoints").iterdir() if p.name.isdigit())
    assert saved == [2, 4, 5]  # every 2048 env steps (2 iterations of 1024), and at the end


def test_help_from_the_shell_lists_each_algorithm():
    result = _shell("train", "--help", timeout=120)
    assert result.returncode == 0
    for line in (
        "dqn: CartPole-v1, stops at two evaluations in a row >= 400 or 100000 env steps",
        "train_batch_size: int = 32; on CartPole-v1: 64",
    ):
        assert line in result.stdout, result.stdout
    assert "ppo: CartPole-v1" in result.stdout and "sac: Pendulum-v1" in result.stdout


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_each_default_config_builds_its_algorithm(name):
    defaults = DEFAULTS[name]
    env = gym.make(defaults.env)
    algorithm = algorithms.build(name, env.observation_space, env.action_space, defaults.config)
    for field, value in defaults.config.items():
        # Lists of pairs are frozen into tuples; everything given arrives as given.
        assert getattr(algorithm.config, field) == value, field
    if defaults.offline:  # no rollouts: an iteration trains on dataset rows
        assert 0 < algorithm.train_batch_size <= defaults.eval_every <= defaults.max_steps
        return
    steps = algorithm.rollout_steps(defaults.num_envs) * defaults.num_envs
    assert 0 < steps <= defaults.eval_every <= defaults.max_steps


def test_resume_keeps_the_config_the_run_was_trained_with(run, monkeypatch):
    # The presets may change between a run and its resumption; the resumed run takes its
    # whole config from the checkpoint, not from today's table.
    from jaxlearner import cli
    from jaxlearner.cli import run_settings as settings_module
    from jaxlearner.cli.run_settings import build, run_settings

    trained = build(run_settings(cli.parse(["train", "--resume", str(run)])))
    row = DEFAULTS["ppo"].preset
    changed = dataclasses.replace(row, config={**row.config, "gamma": 0.5, "lambda_": 0.5})
    monkeypatch.setattr(settings_module, "preset_rows", lambda *args, **kwargs: (changed,))
    assert run_settings(cli.parse(["train", "ppo"])).config["gamma"] == 0.5  # the patch works
    options = cli.parse(["train", "--resume", str(run)])
    resumed = build(run_settings(options))
    assert resumed.config == trained.config and resumed.config.gamma != 0.5


def test_the_run_records_its_preset_and_resolved_config(run):
    info = json.loads((run / "run.json").read_text())
    assert info["preset"] == "ppo/CartPole-v1 (rl_zoo3)"
    # The preset's fields, the overrides over them, and every other field of the config.
    assert info["config"]["gamma"] == 0.98 and info["config"]["hidden_sizes"] == [16]
    assert info["config"]["ortho_init"] is True and info["config"]["kl_target"] == 0.01
