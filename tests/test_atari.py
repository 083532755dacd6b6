"""Atari through ale-py: the preprocessed uint8 observations, the learning signals set apart
from the game's score, the presets, a missing extra, and one command-line run on Pong."""

import json
import sys

import gymnasium as gym
import jax
import numpy as np
import pytest

import jaxlearner as jl
from jaxlearner.cli import main
from jaxlearner.training import atari
from jaxlearner.training.env_runner import EnvRunner
from jaxlearner.training.outputs.loggers import read_json_lines

pytest.importorskip("ale_py")


def test_an_ale_id_gets_84x84x4_uint8_stacks_of_consecutive_frames():
    env = atari.make_atari("ALE/Breakout-v5")
    assert env.observation_space == gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    obs, info = env.reset(seed=0)
    assert obs.shape == (84, 84, 4) and obs.dtype == np.uint8 and info["lives"] == 5
    # The reset's frame pads the first stack; each step shifts the stack by one frame.
    assert all(np.array_equal(obs[..., k], obs[..., 3]) for k in range(3))
    for _ in range(20):
        previous = obs
        obs, *_ = env.step(env.action_space.sample())
        assert obs.dtype == np.uint8 and np.array_equal(obs[..., :3], previous[..., 1:])
    assert obs.max() > 0  # real pixels, not an empty screen
    env.close()


def test_frameskip_is_the_wrappers_and_an_unknown_game_is_gymnasiums_error():
    with pytest.raises(ValueError, match="frameskip=4 is not taken"):
        atari.make_atari("ALE/Breakout-v5", frameskip=4)
    with pytest.raises(gym.error.Error, match="Breakout"):
        atari.make_atari("ALE/Breakoot-v5")


def test_the_runner_learns_from_clipped_rewards_and_life_losses_but_reports_game_scores():
    """Random play on Breakout until a game ends: the rollout's terminations include every life
    lost (5 per game), its rewards are signs, and the episode return is the raw score."""
    runner = EnvRunner("ALE/Breakout-v5", num_envs=1, seed=1)  # a game that scores

    def random_policy(params, obs, key):
        return jax.random.randint(key, obs.shape[:1], 0, 4), {}

    key = jax.random.key(0)
    terminated, rewards, episodes = 0, [], []
    while not episodes:
        key, sample_key = jax.random.split(key)
        rollout = runner.sample(random_policy, None, 1, sample_key)  # stops at the game end
        terminated += int(rollout.terminated.sum())
        rewards.append(rollout.rewards)
        episodes += rollout.episode_returns
    runner.close()
    rewards = np.concatenate(rewards)
    assert set(np.unique(rewards)) <= {0.0, 1.0}
    assert terminated == 5  # four lives lost, then the game's own end
    assert episodes[0] >= rewards.sum() > 0  # bricks are worth 1 to 7 points


def test_fire_is_pressed_after_each_reset_and_lost_life_in_games_that_wait_for_it():
    """Breakout launches a ball only on FIRE: a policy that never fires (always NOOP) loses
    its five balls and its game with the wrapper, and stands still without it."""

    def play_noop(env, steps):
        env.reset(seed=0)
        lives = []
        for step in range(1, steps + 1):
            _, _, terminated, truncated, info = env.step(0)
            lives.append(info["lives"])
            if terminated or truncated:
                return step, lives
        return None, lives

    env = atari.make_atari("ALE/Breakout-v5")
    assert isinstance(env.env.env, atari.FireReset)  # under the frame stack and its transpose
    ended, lives = play_noop(env, 2000)
    assert ended is not None and sorted(set(lives), reverse=True) == [5, 4, 3, 2, 1, 0]
    ended, lives = play_noop(atari.make_atari("ALE/Breakout-v5", fire_reset=False), 500)
    assert ended is None and set(lives) == {5}
    pong = atari.make_atari("ALE/Pong-v5", fire_reset=True)  # Pong's action 1 is FIRE too
    assert atari.FireReset.applies(pong.env.env)
    freeway = gym.make("ALE/Freeway-v5")  # no FIRE: the wrapper is refused, make_atari skips it
    assert not atari.FireReset.applies(freeway)
    with pytest.raises(ValueError, match="FireReset needs a game whose action 1 is FIRE"):
        atari.FireReset(freeway)
    for made in (env, pong, freeway):
        made.close()


def test_fire_is_pressed_twice_so_sticky_actions_cannot_leave_a_game_waiting():
    """ALE v5 repeats the previous action on a frame with probability 0.25: one FIRE step of
    4 frames can miss, and a game left waiting for FIRE would run to its time limit. With one
    press, some of these always-NOOP games (seeds where it misses under this ale-py) stand
    still for 1,500 steps; with the default two presses every one ends."""

    def lengths(presses, seeds=(8, 16, 46, 94)):
        game = gym.make("ALE/Breakout-v5", frameskip=1)
        env = atari.FireReset(gym.wrappers.AtariPreprocessing(game, noop_max=30), presses)
        played = []
        for seed in seeds:
            env.reset(seed=seed)
            steps, ended = 0, False
            while not ended and steps < 1500:
                _, _, terminated, truncated, _ = env.step(0)
                steps, ended = steps + 1, terminated or truncated
            played.append(steps)
        env.close()
        return played

    assert max(lengths(presses=1)) == 1500  # the seeds do show a missed FIRE
    assert max(lengths(presses=2)) < 400
    with pytest.raises(ValueError, match="presses must be an int >= 1; got 0"):
        atari.FireReset(gym.make("ALE/Breakout-v5"), presses=0)


def test_the_signals_ignore_the_lives_of_a_new_game_and_unknown_lives():
    signals = atari.AtariSignals()
    signals.reset({})
    zeros = np.zeros(2, bool)
    _, terminated = signals(np.zeros(2), zeros, zeros, {"lives": np.array([1, 3])})
    assert not terminated.any()  # nothing to compare with yet
    done = np.array([True, False])
    _, terminated = signals(np.zeros(2), zeros, done, {"lives": np.array([5, 3])})
    assert not terminated.any()  # env 0's game ended: its lives are the next game's


@pytest.mark.parametrize("algorithm", ["dqn", "ppo"])
def test_the_atari_presets_build_the_nature_cnn_for_any_game(algorithm):
    config, row = jl.algorithms.preset(algorithm, "ALE/Pong-v5")
    assert row.env_id == "ALE/*" and row.source == f"rl_zoo3/hyperparams/{algorithm}.yml: atari"
    env = atari.make_atari("ALE/Pong-v5")
    built = jl.algorithms.build(algorithm, env.observation_space, env.action_space, config)
    params = built.learner.init(jax.random.key(0)).modules[built.module_id].params
    kernels = {
        "/".join(str(getattr(p, "key", p)) for p in path): leaf.shape
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
        if getattr(path[-1], "key", "") == "kernel"
    }
    assert (3136, 512) in kernels.values()  # valid convolutions: 84 -> 20 -> 9 -> 7
    assert sum(shape == (8, 8, 4, 32) for shape in kernels.values()) == 1  # one shared CNN
    assert ("dqn", "ALE/*") in jl.algorithms.preset_names()
    if algorithm == "dqn":
        assert config.replay_frame_stack == 4 and config.replay_buffer_capacity == 100_000
    env.close()


def test_an_ale_id_without_ale_py_names_the_extra(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ale_py", None)  # as if not installed
    out = tmp_path / "x"
    with pytest.raises(SystemExit) as exited:
        main(["train", "dqn", "--env", "ALE/Pong-v5", "--out", str(out)])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and not out.exists()
    assert err == (
        "jaxlearner train: error: ALE/Pong-v5 needs ale-py, which is not installed: "
        'pip install "jaxlearner[atari]"\n'
    )
    with pytest.raises(ImportError, match=r"jaxlearner\[atari\]"):
        jl.Trainer(
            jl.algorithms.build("dqn", gym.spaces.Box(0, 1, (4,)), gym.spaces.Discrete(2)),
            "ALE/Pong-v5",
        )


@pytest.mark.slow
def test_train_checkpoint_eval_and_video_on_pong(tmp_path, capsys):
    """The command line on a real game: 2,048 env steps of DQN with the Atari preset (a small
    buffer and warm-up), a checkpoint, an evaluation of two games and a video of one."""
    out = tmp_path / "pong"
    argv = [
        "train", "dqn", "--env", "ALE/Pong-v5", "--out", str(out), "--max-steps", "2048",
        "--eval-every", "2048", "--eval-episodes", "2", "--no-progress",
        "--checkpoint-every-steps", "1024", "--config", "replay_buffer_capacity=2000",
        "num_steps_sampled_before_learning_starts=1024",
    ]  # fmt: skip
    assert main(argv) == 0
    info = json.loads((out / "run.json").read_text())
    assert info["env"] == "ALE/Pong-v5" and info["preset"].startswith("dqn/ALE/*")
    records = read_json_lines(out / "metrics.jsonl")
    assert records[-1]["env_steps"] == 2048 and records[-1]["eval/episodes"] == 2
    assert -21 <= records[-1]["eval/return_mean"] <= 21  # a game score, not a clipped one
    capsys.readouterr()
    video = tmp_path / "game.gif"
    assert main(["eval", str(out), "--episodes", "1", "--video", str(video)]) == 0
    said = capsys.readouterr().out
    assert "dqn on ALE/Pong-v5" in said and video.stat().st_size > 10_000
