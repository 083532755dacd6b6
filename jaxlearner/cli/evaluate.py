"""The commands that act with a run's policy: ``eval`` and ``record``.

* ``jaxlearner eval RUN`` restores the newest intact (or the best, or ``--step N``)
  checkpoint and reports evaluation returns; ``--video episode.gif`` (or ``.mp4``)
  records one episode, ``--render human`` plays one in a window.
* ``jaxlearner record RUN --episodes N --out DIR`` records episodes of the run's
  policy as a dataset for the offline algorithms.

A ``gymnax:`` run is evaluated in one compiled loop; it has no frames to record and no
gymnasium episodes to record as a dataset, which ``--video``, ``--render`` and ``record``
say in one line.

A newest checkpoint that is damaged is reported in one line and the next older intact
one is read instead (:mod:`jaxlearner.cli.checkpoint_choice`).
"""

from __future__ import annotations

import pathlib
import sys

import gymnasium as gym
import jax

from jaxlearner.algorithms import algorithm_for
from jaxlearner.algorithms.algorithm import AnyAlgorithm
from jaxlearner.anakin.envs import make as make_jax_env
from jaxlearner.anakin.envs.gymnax import is_gymnax
from jaxlearner.anakin.rollouts import make_evaluate
from jaxlearner.checkpoint.rebuild import restore
from jaxlearner.cli.checkpoint_choice import Chosen, read_checkpoint
from jaxlearner.cli.options import EvalOptions, RecordOptions
from jaxlearner.cli.run_folder import (
    CHECKPOINTS,
    UsageError,
    check_folder_path,
    own_folder,
    read_run,
)
from jaxlearner.core.state import LearnerState
from jaxlearner.training.atari import make_env
from jaxlearner.training.env_runner import EnvRunner
from jaxlearner.training.env_runner import evaluate as evaluate_policy
from jaxlearner.training.offline.record import check_no_dataset, record_run
from jaxlearner.training.outputs.video import (
    check_video_path,
    fps_of,
    quiet_renders,
    record_episode,
    require_mp4_writer,
    write_video,
)


def evaluate(options: EvalOptions) -> int:
    """Runs ``jaxlearner eval``; returns the exit status.

    Raises:
      UsageError: for a folder that is no run, a checkpoint it does not hold, a bad
        ``--video`` or a missing renderer, before anything is evaluated.
    """
    run, info = read_run(options.run)
    video = _video_path(options)
    if is_gymnax(info["env"]) and (video is not None or options.render is not None):
        raise UsageError(
            f"{info['env']} is a gymnax environment, which draws no frames: drop "
            f"{'--video' if video is not None else '--render'} (eval reports its returns)"
        )
    if video is not None or options.render is not None:
        quiet_renders(offscreen=video is not None)  # no sound device; a video, no display
        _check_rendering(info["env"])
    chosen = read_checkpoint(
        run / CHECKPOINTS,
        "eval",
        lambda step: restore(run / CHECKPOINTS, step),
        step=options.step,
        best=options.best,
    )
    say_fallback("eval", chosen)
    step, (learner, state) = chosen.step, chosen.value
    algorithm = algorithm_for(learner)
    results = _evaluate(info["env"], algorithm, state, options)
    print(
        f"{info['algorithm']} on {info['env']}, checkpoint step {step}: "
        f"return {results['return_mean']:.1f} (min {results['return_min']:.1f}, max "
        f"{results['return_max']:.1f}) over {int(results['episodes'])} episodes, mean length "
        f"{results['length_mean']:.1f}"
    )
    if options.render is not None or video is not None:
        _play_episode(info["env"], algorithm, state, video, options)
    return 0


def _evaluate(
    env: str, algorithm: AnyAlgorithm, state: LearnerState, options: EvalOptions
) -> dict[str, float]:
    """``--episodes`` whole episodes with the deterministic policy: in gymnasium envs, or for
    a ``gymnax:`` id in one compiled loop (:func:`~jaxlearner.anakin.rollouts.make_evaluate`)."""
    module, key = state.modules[algorithm.module_id], jax.random.key(options.seed)
    if is_gymnax(env):
        evaluate = make_evaluate(algorithm, make_jax_env(env), options.episodes)
        results = jax.device_get(jax.jit(evaluate)(module, key))
        return {**{k: float(v) for k, v in results.items()}, "episodes": float(options.episodes)}
    runner = EnvRunner(env, num_envs=options.episodes, seed=options.seed)
    try:
        return evaluate_policy(runner, algorithm.exploit, module, key, seed=options.seed)
    finally:
        runner.close()


def say_fallback(command: str, chosen: Chosen[object]) -> None:
    """The one line saying a command reads an older step than the newest, if it does."""
    if chosen.skipped:
        print(
            f"jaxlearner {command}: using checkpoint step {chosen.step}, the newest intact one "
            f"(the damaged steps {list(chosen.skipped)} are left as they are)",
            file=sys.stderr,
            flush=True,
        )


def record(options: RecordOptions) -> int:
    """Records ``--episodes`` episodes of a run's policy into the dataset folder ``--out``.

    Raises:
      UsageError: for a folder that is no run, a checkpoint it does not hold, or an
        ``--out`` that is a file or holds a dataset already.
    """
    run, info = read_run(options.run)
    if is_gymnax(info["env"]):
        raise UsageError(
            f"record writes gymnasium episodes as a dataset for bc and marwil, which train and "
            f"evaluate in gymnasium; {info['env']} is a gymnax environment"
        )
    check_folder_path("--out", pathlib.Path(options.out))
    chosen = read_checkpoint(
        run / CHECKPOINTS,
        "record",
        lambda step: restore(run / CHECKPOINTS, step),  # read in full, then again to record
        step=options.step,
        best=options.best,
    )
    say_fallback("record", chosen)
    step = chosen.step
    # Not into a folder a live run writes; a folder refused is left as it was.
    lock = own_folder(pathlib.Path(options.out), "--out", claim=False)
    try:
        check_no_dataset(pathlib.Path(options.out))
    except FileExistsError as error:
        lock.release()
        raise UsageError(f"--out {error}") from None
    lock.claim()
    try:
        dataset = record_run(
            run / CHECKPOINTS,
            info["env"],
            step,
            options.episodes,
            options.out,
            explore=options.explore,
            num_envs=options.num_envs,
            seed=options.seed,
            source={"run": str(run), "algorithm": info["algorithm"]},
        )
    except FileExistsError as error:
        raise UsageError(f"--out {error}") from None
    returns = dataset.episode_returns()
    print(
        f"Recorded {dataset.num_episodes} episodes ({dataset.num_steps} steps) of "
        f"{info['algorithm']} on {info['env']}, checkpoint step {step}, "
        f"{dataset.source['policy']} policy: return {returns.mean():.1f} (min "
        f"{returns.min():.1f}, max {returns.max():.1f})\n"
        f"  dataset: {options.out}\n"
        f"  train:   jaxlearner train bc --dataset {options.out}"
    )
    return 0


def _video_path(options: EvalOptions) -> pathlib.Path | None:
    """The ``--video`` file, checked before anything is restored."""
    if options.video is None:
        if options.render == "rgb_array":
            raise UsageError("--render rgb_array records frames: give --video PATH (.gif/.mp4)")
        return None
    if options.render == "human":
        raise UsageError("--video records rgb_array frames; drop --render human")
    try:
        path = check_video_path(options.video)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if path.suffix.lower() == ".mp4":
        try:
            require_mp4_writer()
        except ImportError:
            raise UsageError(
                f"--video {options.video}: an .mp4 needs imageio with ffmpeg: "
                "pip install 'jaxlearner[video]' (or write a .gif)"
            ) from None
    return path


def _check_rendering(env: str) -> None:
    """Renders one frame before anything is evaluated, so a missing renderer is one line first.

    Only a missing dependency (pygame for gymnasium's classic control) is reported here;
    anything else is left to the episode itself, which says what went wrong.
    """
    try:
        probe = make_env(env, render_mode="rgb_array")
        try:
            probe.reset(seed=0)
            probe.render()
        finally:
            probe.close()
    except (gym.error.DependencyNotInstalled, ImportError) as error:
        raise UsageError(f"{error} (pip install 'jaxlearner[video]')") from None
    except Exception:
        return


def _play_episode(
    env: str,
    algorithm: AnyAlgorithm,
    state: LearnerState,
    video: pathlib.Path | None,
    options: EvalOptions,
) -> None:
    """One episode with the deterministic policy, in a window or into a video file."""
    mode = "human" if video is None else "rgb_array"
    params = state.modules[algorithm.module_id]
    key = jax.random.key(options.seed)
    try:
        runner = EnvRunner(env, env_config={"render_mode": mode}, seed=options.seed)
        try:
            frames, episode_return = record_episode(
                runner, algorithm.exploit, params, key, seed=options.seed
            )
            if video is not None:
                write_video(video, frames, fps=fps_of(runner))
        finally:
            runner.close()
    except (gym.error.DependencyNotInstalled, ImportError) as error:
        raise UsageError(f"{error} (pip install 'jaxlearner[video]')") from None
    if video is None:
        print(f"played one episode in a window: return {episode_return:.1f}")
    else:
        print(f"video of one episode (return {episode_return:.1f}, {len(frames)} frames): {video}")
