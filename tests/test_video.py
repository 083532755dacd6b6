"""Videos: one episode's frames from gymnasium's rendering, written as GIF and MP4."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from jaxlearner.training.env_runner import EnvRunner
from jaxlearner.training.outputs.video import fps_of, quiet_renders, record_episode, write_video


def push_left(params, obs, key):
    return jnp.zeros(obs.shape[:1], jnp.int32), {}


def test_cartpole_episode_frames_are_the_states_before_each_step():
    runner = EnvRunner("CartPole-v1", num_envs=2, env_config={"render_mode": "rgb_array"})
    frames, episode_return = record_episode(runner, push_left, None, jax.random.key(0), seed=3)
    # CartPole pays 1 per step: one frame per step, the reset state first.
    assert len(frames) == episode_return and 8 <= len(frames) < 50
    assert {f.shape for f in frames} == {(400, 600, 3)} and frames[0].dtype == np.uint8
    assert not np.array_equal(frames[0], frames[-1])  # the pole fell
    again, _ = record_episode(runner, push_left, None, jax.random.key(1), seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(frames, again, strict=True))
    assert fps_of(runner) == 50


def test_recording_opens_no_sound_device_and_keeps_the_users_choice(monkeypatch):
    monkeypatch.delenv("SDL_AUDIODRIVER", raising=False)
    monkeypatch.delenv("SDL_VIDEODRIVER", raising=False)
    runner = EnvRunner("CartPole-v1", env_config={"render_mode": "rgb_array"})
    record_episode(runner, push_left, None, jax.random.key(0), seed=3)
    assert os.environ["SDL_AUDIODRIVER"] == "dummy"
    assert "SDL_VIDEODRIVER" not in os.environ  # a window may follow in this process
    monkeypatch.setenv("SDL_AUDIODRIVER", "pulseaudio")
    quiet_renders(offscreen=True)
    assert os.environ["SDL_AUDIODRIVER"] == "pulseaudio"  # the user's, kept
    assert os.environ["SDL_VIDEODRIVER"] == "dummy"


def test_pendulum_episode_runs_to_truncation():
    runner = EnvRunner("Pendulum-v1", env_config={"render_mode": "rgb_array"})

    def no_torque(params, obs, key):
        return jnp.zeros((obs.shape[0], 1), jnp.float32), {}

    frames, _ = record_episode(runner, no_torque, None, jax.random.key(0), seed=0)
    assert len(frames) == 200 and frames[0].shape == (500, 500, 3)


def test_an_env_that_does_not_render_is_refused():
    with pytest.raises(ValueError, match="render_mode is None: pass env_config="):
        record_episode(EnvRunner("CartPole-v1"), push_left, None, jax.random.key(0))


def test_an_episode_longer_than_max_steps_raises():
    runner = EnvRunner("CartPole-v1", env_config={"render_mode": "rgb_array"})
    with pytest.raises(RuntimeError, match="did not end within 3 steps"):
        record_episode(runner, push_left, None, jax.random.key(0), max_steps=3)


def test_gif_round_trip(tmp_path):
    frames = [np.full((24, 40, 3), 10 * i, np.uint8) for i in range(6)]
    path = write_video(tmp_path / "ramp.gif", frames, fps=20)
    with Image.open(path) as gif:
        assert gif.n_frames == 6 and gif.size == (40, 24)
        assert gif.info["duration"] == 50
        gif.seek(5)
        assert np.asarray(gif.convert("RGB"))[0, 0, 0] == 50


@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # reading runs ffmpeg
def test_mp4_round_trip_pads_to_whole_macroblocks(tmp_path):
    iio = pytest.importorskip("imageio.v3")
    frames = [np.full((20, 30, 3), 40 * i, np.uint8) for i in range(5)]
    video = iio.imread(write_video(tmp_path / "ramp.mp4", frames, fps=10))
    assert video.shape == (5, 32, 32, 3)
    np.testing.assert_allclose(video[:, 5, 5, 0], [0, 40, 80, 120, 160], atol=6)


def test_write_video_refuses_bad_input(tmp_path):
    frame = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match=r"one of \['.gif', '.mp4'\]; got '.*clip.webm'"):
        write_video(tmp_path / "clip.webm", [frame])
    with pytest.raises(ValueError, match="needs at least one frame"):
        write_video(tmp_path / "clip.gif", [])
    with pytest.raises(ValueError, match="share one shape"):
        write_video(tmp_path / "clip.gif", [frame, np.zeros((4, 8, 3), np.uint8)])
