"""The command line's presets: ``jaxlearner presets``, ``--preset`` and a missing MuJoCo."""

import sys

import gymnasium
import pytest

from jaxlearner import algorithms
from jaxlearner.cli import main, parse
from jaxlearner.cli.run_settings import build, run_settings


def _settings(*argv):
    return run_settings(parse(["train", *argv]))


def test_presets_lists_every_row_and_marks_the_one_train_uses(capsys):
    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = algorithms.algorithm_names()
    rows = [line for line in lines if line[:2] in ("* ", "  ") and line[2:].split()[:1] in (
        [name] for name in names)]  # fmt: skip
    assert len(rows) == len(algorithms.presets.PRESETS)
    cartpole = [(line[0], line[2:].split()) for line in rows if "dqn       CartPole-v1" in line]
    assert cartpole[0][0] == "*" and cartpole[0][1][2] == "jaxlearner"  # the one train uses
    assert cartpole[1][0] == " " and cartpole[1][1][:4] == ["dqn", "CartPole-v1", "rl_zoo3", "1"]
    assert any(line.startswith("* ppo       HalfCheetah-v5") for line in lines)
    assert "rl_zoo3/hyperparams/ppo.yml: HalfCheetah-v4" in "\n".join(lines)


def test_presets_of_one_algorithm_show_their_configs(capsys):
    assert main(["presets", "SAC"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sac: 12 presets\n")
    assert 'td_error_loss_fn="mse"' in out and "notes: use_sde=True left out" in out
    assert "ppo" not in out.split("\n*")[0]


def test_presets_of_an_unknown_algorithm_is_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["presets", "a2c"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert "No presets for algorithm 'a2c'; algorithms with presets: ['appo'," in err


def test_a_run_starts_from_the_environments_preset():
    settings = _settings("sac", "--env", "Hopper-v5")
    row = algorithms.presets.preset_row("sac", "Hopper-v5")
    assert settings.preset == "sac/Hopper-v5 (rl_zoo3)"
    # The running returns of norm_reward are one per env: the run's num_envs, always.
    assert settings.config == {**row.config, "num_envs_per_env_runner": settings.num_envs}
    assert (settings.num_envs, settings.max_steps, settings.eval_every) == (1, 1_000_000, 25_000)
    assert build(settings).config.num_steps_sampled_before_learning_starts == 10_000


def test_reward_normalization_counts_every_env_of_one_batch():
    # RL Zoo's Acrobot row: norm_reward over 16 envs. Synchronous Ray runners hand in all
    # their envs as one batch, so the running returns are one per env of all runners;
    # asynchronous ones (APPO's) hand in one runner's fragment at a time.
    assert _settings("ppo", "--env", "Acrobot-v1").config["num_envs_per_env_runner"] == 16
    runners = _settings("ppo", "--env", "Acrobot-v1", "--env-runners", "2", "--num-envs", "4")
    assert runners.config["num_envs_per_env_runner"] == 8
    appo = _settings("appo", "--env", "CartPole-v1", "--env-runners", "2", "--num-envs", "4")
    assert appo.config["num_envs_per_env_runner"] == 4
    chosen = ["--env-runners", "2", "--config", "num_envs_per_env_runner=3"]
    assert _settings("ppo", "--env", "Acrobot-v1", *chosen).config["num_envs_per_env_runner"] == 3


def test_options_and_overrides_beat_the_row():
    settings = _settings(
        "sac", "--env", "Hopper-v5", "--config", "critic_lr=1e-3", "hidden_sizes=[32]",
        "--num-envs", "2", "--max-steps", "5000", "--eval-every", "1000",
    )  # fmt: skip
    config = build(settings).config
    assert (config.critic_lr, config.hidden_sizes, config.actor_lr) == (1e-3, (32,), 3e-4)
    assert config.td_error_loss_fn == "mse"  # the row's, kept
    assert (settings.num_envs, settings.max_steps, settings.eval_every) == (2, 5000, 1000)


def test_preset_none_gives_the_librarys_defaults():
    settings = _settings("ppo", "--preset", "none", "--config", "lr=1e-3")
    # The one field a run always sets: its number of envs, for norm_reward's running returns.
    assert settings.preset is None
    assert settings.config == {"lr": 1e-3, "num_envs_per_env_runner": 8}
    assert (settings.num_envs, settings.max_steps, settings.eval_every) == (8, 1_000_000, 10_000)
    config = build(settings).config
    library = algorithms.PPOConfig(lr=1e-3, num_envs_per_env_runner=8)
    assert config == library and settings.stop_reward == 475.0  # CartPole's threshold


def test_preset_origin_picks_a_row_or_says_which_there_are(capsys, tmp_path):
    assert _settings("dqn").preset == "dqn/CartPole-v1 (jaxlearner)"  # today's default run
    zoo = _settings("dqn", "--preset", "rl_zoo3")
    assert zoo.preset == "dqn/CartPole-v1 (rl_zoo3)" and zoo.max_steps == 50_000
    assert build(zoo).config.target_network_update_freq == 10
    assert _settings("ppo", "--env", "Pendulum-v1", "--preset", "none").preset is None
    out = tmp_path / "x"
    with pytest.raises(SystemExit) as exited:
        main(["train", "ppo", "--env", "Hopper-v5", "--preset", "jaxlearner", "--out", str(out)])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and not out.exists()
    assert "--preset jaxlearner: no jaxlearner preset for ppo on Hopper-v5; ppo has" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "ppo", "--preset", "zoo"], "argument --preset: invalid choice: 'zoo'"),
        (["train", "--resume", "RUN", "--preset", "none"], "drop ['--preset']"),
    ],
)
def test_bad_preset_options_are_one_line(argv, message, capsys, tmp_path):
    argv = [str(tmp_path) if a == "RUN" else a for a in argv]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and message in err and err.count("\n") == 1, err


def test_a_mujoco_env_without_mujoco_names_the_extra(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "mujoco", None)  # as if not installed
    out = tmp_path / "x"
    for preset in ("auto", "none"):
        with pytest.raises(SystemExit) as exited:
            main(["train", "ppo", "--env", "HalfCheetah-v5", "--preset", preset, "--out", str(out)])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and err.count("\n") == 1 and not out.exists()
        assert err == (
            "jaxlearner train: error: HalfCheetah-v5 needs mujoco, which is not installed: "
            'pip install "jaxlearner[mujoco]"\n'
        )


@pytest.mark.parametrize("env", ["LunarLander-v3", "BipedalWalker-v3"])
def test_a_box2d_env_without_box2d_names_the_extra(env, capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "Box2D", None)  # as if not installed
    out = tmp_path / "x"
    with pytest.raises(SystemExit) as exited:
        main(["train", "ppo", "--env", env, "--out", str(out)])
    assert exited.value.code == 2 and not out.exists()
    assert capsys.readouterr().err == (
        f"jaxlearner train: error: {env} needs Box2D, which is not installed: "
        'pip install "jaxlearner[box2d]"\n'
    )


def test_train_help_says_presets_apply(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "--preset {auto,none,rl_zoo3,jaxlearner,published}" in out
    assert "every 2048 env steps; preset ppo/CartPole-v1 (rl_zoo3)" in " ".join(out.split())


def test_max_steps_stretches_an_rl_zoo_rows_schedules_as_its_n_does():
    row = algorithms.presets.preset_row("ppo", "CartPole-v1")
    assert row.origin == "rl_zoo3" and row.max_steps == 100_000
    assert row.config["lr"] == ((0, 1e-3), (100_000, 0.0))
    settings = _settings("ppo", "--max-steps", "20000")
    # SB3's lin_X is X * progress_remaining: 0 at the run's own budget.
    assert settings.config["lr"] == ((0, 1e-3), (20_000, 0.0))
    assert settings.config["clip_param"] == ((0, 0.2), (20_000, 0.0))
    assert settings.scaled_schedules.fields == ("lr", "clip_param")
    assert settings.scaled_schedules.preset_max_steps == 100_000
    # A --config value is the user's: kept, and not named as stretched.
    own = _settings("ppo", "--max-steps", "20000", "--config", "lr=[[0,3e-4],[5000,1e-4]]")
    assert own.config["lr"] == [[0, 3e-4], [5000, 1e-4]]
    assert own.scaled_schedules.fields == ("clip_param",)
    # DQN's exploration_fraction is of the budget too (0.2 of 120k, then of 60k).
    dqn = _settings("dqn", "--env", "MountainCar-v0", "--max-steps", "60000")
    assert dqn.config["epsilon"] == ((0, 1.0), (12_000, 0.07))
    # The budget as is, --keep-schedules, and a row tuned here in env steps: as written.
    assert _settings("ppo").scaled_schedules is None
    kept = _settings("ppo", "--max-steps", "20000", "--keep-schedules")
    assert kept.config["lr"] == row.config["lr"] and kept.scaled_schedules is None
    tuned = _settings("dqn", "--max-steps", "20000")
    assert tuned.config["epsilon"] == ((0, 1.0), (8000, 0.04)) and tuned.scaled_schedules is None


def test_the_run_header_says_the_schedules_were_stretched(capsys, tmp_path):
    argv = ["train", "ppo", "--max-steps", "256", "--eval-every", "256", "--no-progress"]
    argv += ["--config", "train_batch_size=256", "hidden_sizes=[8]"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert (
        "The preset's schedules (lr, clip_param) run over --max-steps 256 env steps instead of "
        "its 100,000, as RL Zoo's -n runs them; --keep-schedules keeps them as written."
    ) in out
    assert main([*argv, "--keep-schedules", "--out", str(tmp_path / "b")]) == 0
    assert "schedules" not in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["train", "--resume", str(tmp_path / "a"), "--keep-schedules"])
    assert exited.value.code == 2 and "drop ['--keep-schedules']" in capsys.readouterr().err


def test_a_preset_whose_environment_gymnasium_lacks_is_one_line(capsys, monkeypatch, tmp_path):
    from jaxlearner.cli import run_settings as settings_module

    def older_gymnasium(env_id, **kwargs):
        raise gymnasium.error.NameNotFound(f"Environment `{env_id.split('-')[0]}` doesn't exist.")

    monkeypatch.setattr(settings_module, "make_env", older_gymnasium)
    with pytest.raises(SystemExit) as exited:
        main(["train", "ppo", "--env", "Acrobot-v1", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1, err
    assert "preset ppo/Acrobot-v1 (rl_zoo3) is for 'Acrobot-v1', which this gymnasium" in err
    assert "Environment `Acrobot` doesn't exist." in err and not (tmp_path / "run").exists()
