"""Videos of a policy: one episode's ``rgb_array`` frames, written as GIF or MP4.

Frames come from gymnasium's own rendering (``render_mode="rgb_array"``; the
classic control environments need ``pygame``). A ``.gif`` is written with
Pillow, which matplotlib already installs; an ``.mp4`` needs ``imageio`` with
ffmpeg. ``pip install 'jaxlearner[video]'`` installs all three.

Example:
  >>> runner = EnvRunner("CartPole-v1", env_config={"render_mode": "rgb_array"})  # doctest: +SKIP
  >>> frames, episode_return = record_episode(runner, policy, params, key)  # doctest: +SKIP
  >>> write_video("cartpole.gif", frames, fps=fps_of(runner))  # doctest: +SKIP
"""

from __future__ import annotations

import os
import pathlib
import warnings
from collections.abc import Sequence

import jax
import numpy as np

from jaxlearner.training.env_runner import EnvRunner, Policy
from jaxlearner.types import Params

VIDEO_FORMATS = (".gif", ".mp4")
DEFAULT_FPS = 30


def quiet_renders(*, offscreen: bool = False) -> None:
    """Keeps pygame's SDL from opening devices a render has no use for; call it before the
    first frame. A variable the user has set is left as it is.

    Gymnasium's renderers call ``pygame.init()``, which opens a sound device for frames that
    have none: on a machine without one, a screen of ``ALSA lib ... cannot find card '0'``
    lines. ``SDL_AUDIODRIVER=dummy`` opens none. With ``offscreen`` (frames drawn for a video,
    in a process that opens no window) ``SDL_VIDEODRIVER=dummy`` also opens no display
    (without one SDL printed "XDG_RUNTIME_DIR is invalid"); the frames are the same.

    Args:
      offscreen: also no display: only for a process that shows no window afterwards.

    Example:
      >>> quiet_renders()  # "dummy", unless the user (or a library: ale-py) chose one
      >>> "SDL_AUDIODRIVER" in os.environ
      True
    """
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    if offscreen:
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def require_mp4_writer() -> None:
    """Raises unless an .mp4 can be written (imageio with its ffmpeg plugin).

    Call it before any work that ends in writing a video (the command line
    does, before it evaluates anything).

    Raises:
      ImportError: naming the extra to install (``jaxlearner[video]``).
    """
    try:
        import imageio  # noqa: F401
        import imageio_ffmpeg  # noqa: F401  (imageio's ffmpeg plugin needs it)
    except ImportError:
        raise ImportError(
            "Writing an .mp4 needs imageio with ffmpeg: pip install 'jaxlearner[video]' "
            "(or write a .gif, which needs nothing more)."
        ) from None


def check_video_path(path: str | pathlib.Path) -> pathlib.Path:
    """``path`` as a ``Path`` if its suffix is a format :func:`write_video` writes.

    Raises:
      ValueError: for another suffix (the message lists the formats), or
        when its folder does not exist.
    """
    path = pathlib.Path(path)
    if path.suffix.lower() not in VIDEO_FORMATS:
        raise ValueError(f"A video is written as one of {list(VIDEO_FORMATS)}; got {str(path)!r}.")
    if not path.parent.is_dir():
        raise ValueError(f"The video's folder {str(path.parent)!r} does not exist.")
    return path


def fps_of(runner: EnvRunner) -> int:
    """The environment's ``metadata["render_fps"]``, or 30 when it does not say."""
    fps = runner.envs.metadata.get("render_fps")
    return int(fps) if isinstance(fps, int | float) and fps > 0 else DEFAULT_FPS


def _frame(runner: EnvRunner) -> np.ndarray:
    frames = runner.envs.render()
    if frames is None or len(frames) == 0 or frames[0] is None:
        raise ValueError("The environment returned no frame from render().")
    frame = np.asarray(frames[0])
    if frame.ndim != 3 or frame.shape[-1] != 3:
        raise ValueError(f"Expected an RGB frame [H, W, 3]; the env rendered {frame.shape}.")
    return frame.astype(np.uint8)


def record_episode(
    runner: EnvRunner,
    policy: Policy,
    params: Params,
    key: jax.Array,
    seed: int | None = None,
    max_steps: int = 10_000,
) -> tuple[list[np.ndarray], float]:
    """One episode of the runner's first sub-environment, from a fresh reset, with its frames.

    Args:
      runner: an :class:`~jaxlearner.training.env_runner.EnvRunner` whose environments
        render ``rgb_array`` frames (``env_config={"render_mode": "rgb_array"}``),
        or ``"human"`` ones (the environment shows each step in a window and
        no frame is returned).
      policy: ``policy(params, obs [N, ...], key) -> (actions, extras)``, e.g.
        an algorithm's deterministic ``exploit``.
      params: the policy's params.
      key: PRNG key, split once per step.
      seed: seed of the reset.
      max_steps: a bound on the episode's length.

    Returns:
      ``(frames, episode_return)``: ``frames`` is a list of ``[H, W, 3]``
      uint8 arrays, the state before each step (the first is the reset
      state), so its length is the episode's length; empty in ``"human"`` mode.

    Raises:
      ValueError: when the environment renders neither mode.
      RuntimeError: when the episode has not ended within ``max_steps``.
    """
    quiet_renders()  # no sound device for frames (a window may follow: a display is kept)
    mode = runner.envs.render_mode
    if mode not in ("rgb_array", "human"):
        raise ValueError(
            f"record_episode needs an env rendering 'rgb_array' or 'human' frames; its "
            f"render_mode is {mode!r}: pass env_config={{'render_mode': 'rgb_array'}}."
        )
    capture = (lambda: [_frame(runner)]) if mode == "rgb_array" else list
    runner.reset(seed)
    frames = capture()
    for step_key in jax.random.split(key, max_steps):
        rollout = runner.sample(policy, params, 1, step_key)
        if 0 in rollout.episode_envs:
            # The first sub-environment has already reset (its frame is the next episode's).
            return frames, rollout.episode_returns[rollout.episode_envs.index(0)]
        frames += capture()
    raise RuntimeError(f"The recorded episode did not end within {max_steps} steps.")


def write_video(
    path: str | pathlib.Path, frames: Sequence[np.ndarray], fps: int = DEFAULT_FPS
) -> pathlib.Path:
    """Writes ``[H, W, 3]`` uint8 frames as a ``.gif`` (Pillow) or ``.mp4`` (imageio + ffmpeg).

    Args:
      path: the file to write; its suffix picks the format.
      frames: at least one frame, all of one shape.
      fps: frames per second.

    Returns:
      The path written.

    Raises:
      ValueError: for a suffix that is not ``.gif`` or ``.mp4``, no frames, or
        frames of different shapes.
      ImportError: for ``.mp4`` without imageio and ffmpeg (the message says
        what to install).

    Example:
      >>> frames = [np.zeros((32, 48, 3), np.uint8)] * 4
      >>> write_video(tmp / "blank.gif", frames, fps=10).name  # doctest: +SKIP
      'blank.gif'
    """
    path = check_video_path(path)
    if not frames:
        raise ValueError("write_video needs at least one frame.")
    shapes = {np.shape(frame) for frame in frames}
    if len(shapes) != 1:
        raise ValueError(f"Frames of one video must share one shape; got {sorted(shapes)}.")
    if path.suffix.lower() == ".gif":
        from PIL import Image

        images = [Image.fromarray(np.asarray(frame, np.uint8)) for frame in frames]
        duration = max(1, round(1000 / fps))
        images[0].save(path, save_all=True, append_images=images[1:], duration=duration, loop=0)
        return path
    require_mp4_writer()
    import imageio.v3 as iio

    video = np.stack(frames).astype(np.uint8)
    # H.264 wants sides in multiples of 16: pad with edge pixels rather than resize.
    pad = [(0, 0), (0, -video.shape[1] % 16), (0, -video.shape[2] % 16), (0, 0)]
    with warnings.catch_warnings():
        # ffmpeg runs as a subprocess (fork + exec at once), which JAX warns about.
        warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
        iio.imwrite(path, np.pad(video, pad, mode="edge"), fps=fps, codec="libx264")
    return path
