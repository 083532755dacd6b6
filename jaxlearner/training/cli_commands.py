"""The commands that read a run folder of ``jaxlearner train``: ``eval``, ``record`` and ``plot``.

* ``jaxlearner eval RUN`` restores the latest (or best) checkpoint and reports
  evaluation returns; ``--video episode.gif`` (or ``.mp4``) records one episode,
  ``--render human`` plays one in a window.
* ``jaxlearner record RUN --episodes N --out DIR`` records episodes of the run's
  policy as a dataset for the offline algorithms.
* ``jaxlearner plot RUN [more runs]`` writes a learning-curve PNG.

gymnasium and matplotlib are imported inside the functions that use them, so
``jaxlearner --help`` starts without them.
"""

from __future__ import annotations

import argparse
import pathlib
from typing import Any

from jaxlearner.training.cli_settings import CHECKPOINTS, METRICS_FILE, UsageError, read_run


def evaluate(args: argparse.Namespace) -> int:
    """Runs ``jaxlearner eval``; returns the exit status."""
    import jax

    import jaxlearner as jl
    from jaxlearner.training.env_runner import EnvRunner
    from jaxlearner.training.env_runner import evaluate as evaluate_policy

    run, info = read_run(args.run)
    video = _video_path(args)
    if video is not None or args.render is not None:
        _check_rendering(info["env"])
    step = _checkpoint_step(run, args)
    learner, state = jl.restore(run / CHECKPOINTS, step)
    algorithm = jl.algorithms.algorithm_for(learner)
    runner = EnvRunner(info["env"], num_envs=args.episodes, seed=args.seed)
    try:
        results = evaluate_policy(
            runner,
            algorithm.exploit,
            state.modules[algorithm.module_id],
            jax.random.key(args.seed),
            seed=args.seed,
        )
    finally:
        runner.close()
    print(
        f"{info['algorithm']} on {info['env']}, checkpoint step {step}: "
        f"return {results['return_mean']:.1f} (min {results['return_min']:.1f}, max "
        f"{results['return_max']:.1f}) over {int(results['episodes'])} episodes, mean length "
        f"{results['length_mean']:.1f}"
    )
    if args.render is not None or video is not None:
        _play_episode(info["env"], algorithm, state, video, args)
    return 0


def _checkpoint_step(run: pathlib.Path, args: argparse.Namespace) -> int:
    """The step ``--best`` or ``--step`` names, else the latest; checked to exist."""
    import jaxlearner as jl

    options: dict[str, Any] = {"read_only": True}
    if args.best:
        options["best_metric"] = "eval/return_mean"
    with jl.CheckpointManager(run / CHECKPOINTS, **options) as checkpoint:
        if checkpoint.latest_step() is None:
            raise UsageError(f"{run / CHECKPOINTS} holds no checkpoint")
        step = checkpoint.best_step() if args.best else args.step
        if step is not None and step not in checkpoint.all_steps():
            raise UsageError(f"no checkpoint step {step}; steps: {list(checkpoint.all_steps())}")
        return checkpoint.latest_step() if step is None else step


def record(args: argparse.Namespace) -> int:
    """Records ``--episodes`` episodes of a run's policy into the dataset folder ``--out``."""
    from jaxlearner.training.record import record_run

    run, info = read_run(args.run)
    step = _checkpoint_step(run, args)
    try:
        dataset = record_run(
            run / CHECKPOINTS,
            info["env"],
            step,
            args.episodes,
            args.out,
            explore=args.explore,
            num_envs=args.num_envs,
            seed=args.seed,
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
        f"  dataset: {args.out}\n"
        f"  train:   jaxlearner train bc --dataset {args.out}"
    )
    return 0


def _video_path(args: argparse.Namespace) -> pathlib.Path | None:
    """The ``--video`` file, checked before anything is restored."""
    from jaxlearner.training.video import check_video_path, require_mp4_writer

    if args.video is None:
        if args.render == "rgb_array":
            raise UsageError("--render rgb_array records frames: give --video PATH (.gif/.mp4)")
        return None
    if args.render == "human":
        raise UsageError("--video records rgb_array frames; drop --render human")
    try:
        path = check_video_path(args.video)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if path.suffix.lower() == ".mp4":
        try:
            require_mp4_writer()
        except ImportError:
            raise UsageError(
                f"--video {args.video}: an .mp4 needs imageio with ffmpeg: "
                "pip install 'jaxlearner[video]' (or write a .gif)"
            ) from None
    return path


def _check_rendering(env: str) -> None:
    """Renders one frame before anything is evaluated, so a missing renderer is one line first.

    Only a missing dependency (pygame for gymnasium's classic control) is reported here;
    anything else is left to the episode itself, which says what went wrong.
    """
    import gymnasium as gym

    try:
        probe = gym.make(env, render_mode="rgb_array")
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
    env: str, algorithm: Any, state: Any, video: pathlib.Path | None, args: argparse.Namespace
) -> None:
    """One episode with the deterministic policy, in a window or into a video file."""
    import gymnasium as gym
    import jax

    from jaxlearner.training.env_runner import EnvRunner
    from jaxlearner.training.video import fps_of, record_episode, write_video

    mode = "human" if video is None else "rgb_array"
    params = state.modules[algorithm.module_id]
    key = jax.random.key(args.seed)
    try:
        runner = EnvRunner(env, env_config={"render_mode": mode}, seed=args.seed)
        try:
            frames, episode_return = record_episode(
                runner, algorithm.exploit, params, key, seed=args.seed
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


def plot(args: argparse.Namespace) -> int:
    """Runs ``jaxlearner plot``: the runs' learning curves in one PNG; returns the exit status."""
    from jaxlearner.training.loggers import read_json_lines
    from jaxlearner.training.plotting import place_legend, plot_run

    runs = [read_run(path) for path in args.runs]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for run, info in runs:
        records = read_json_lines(run / METRICS_FILE) if (run / METRICS_FILE).is_file() else []
        train = [r for r in records if r.get("episode_return_mean") is not None]
        evals = [
            r
            for r in records
            if r.get("eval/return_mean") is not None and r.get("env_steps") is not None
        ]
        if not train and not evals:
            raise UsageError(f"{run / METRICS_FILE} holds no returns to plot")
        label = f"{info['algorithm']} {info['env']} ({run.name})"
        plot_run(records, ax=axes, label=label, stop_reward=info.get("stop_reward"))
    place_legend(axes)
    out = pathlib.Path(args.out) if args.out else runs[0][0] / "learning_curve.png"
    figure.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(figure)
    print(out)
    return 0
