"""The ``jaxlearner`` command: train, evaluate and plot built-in algorithms.

* ``jaxlearner train ppo`` trains PPO on its default environment (CartPole-v1)
  with settings that reach the reward bound in about a minute on a laptop CPU,
  logs to the console and ``runs/NAME/metrics.jsonl``, checkpoints to
  ``runs/NAME/checkpoints`` periodically and at the end, and prints where
  everything went.
* ``jaxlearner eval runs/NAME`` restores the latest (or best) checkpoint and
  reports evaluation returns; ``--video episode.gif`` (or ``.mp4``) records one
  episode, ``--render human`` plays one in a window.
* ``jaxlearner plot runs/NAME [more runs]`` writes a learning-curve PNG.

Bad arguments print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import pathlib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS = "checkpoints"


@dataclasses.dataclass(frozen=True)
class Defaults:
    """What ``jaxlearner train ALGORITHM`` uses when the command line does not say.

    Attributes:
      env: the gymnasium environment id.
      config: overrides of the algorithm's config tuned for that environment.
      stop_reward: the evaluation return that ends the run.
      max_steps: the env steps that end the run regardless.
      num_envs: sub-environments stepped together.
      eval_every: env steps between evaluations.
    """

    env: str
    config: dict[str, Any]
    stop_reward: float
    max_steps: int
    num_envs: int
    eval_every: int


DEFAULTS: dict[str, Defaults] = {
    "ppo": Defaults(
        env="CartPole-v1",
        config={
            "lr": 3e-4,
            "train_batch_size": 2048,
            "minibatch_size": 256,
            "num_epochs": 10,
            "hidden_sizes": (64, 64),
            "lambda_": 0.95,
            "clip_param": 0.2,
            "use_kl_loss": False,
            "grad_clip": 0.5,
        },
        stop_reward=475.0,
        max_steps=300_000,
        num_envs=8,
        eval_every=10_240,
    ),
    "dqn": Defaults(
        env="CartPole-v1",
        config={
            "lr": 2.3e-3,
            "train_batch_size": 64,
            "training_intensity": 32,
            "n_step": 3,
            "rollout_fragment_length": 8,
            "epsilon": ((0, 1.0), (8000, 0.04)),
            "target_network_update_freq": 256,
            "replay_buffer_capacity": 100_000,
        },
        stop_reward=400.0,
        max_steps=100_000,
        num_envs=8,
        eval_every=2560,
    ),
    "sac": Defaults(
        env="Pendulum-v1",
        config={
            "actor_lr": 1e-3,
            "critic_lr": 1e-3,
            "alpha_lr": 1e-3,
            "num_steps_sampled_before_learning_starts": 1000,
            "hidden_sizes": (64, 64),
            "train_batch_size": 128,
        },
        stop_reward=-250.0,
        max_steps=30_000,
        num_envs=4,
        eval_every=1000,
    ),
}


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (and exit with status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="jaxlearner", description="Train, evaluate and plot RL agents.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser("train", help="train a built-in algorithm")
    train.add_argument("algorithm", help="the algorithm: " + ", ".join(_algorithm_names()))
    train.add_argument("--env", help="a gymnasium environment id (default: the algorithm's)")
    train.add_argument(
        "--config",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="algorithm config overrides, e.g. lr=1e-3 hidden_sizes=[64,64]",
    )
    train.add_argument("--stop-reward", type=float, help="stop at this mean evaluation return")
    train.add_argument("--max-steps", type=_positive_int, help="stop after this many env steps")
    train.add_argument("--out", help="the run folder (default: runs/ALGORITHM-ENV-TIME)")
    train.add_argument("--devices", help="'all' or a number of devices to train on")
    train.add_argument("--num-envs", type=_positive_int, help="sub-environments per step")
    train.add_argument("--eval-every", type=_positive_int, help="env steps between evaluations")
    train.add_argument(
        "--checkpoint-every",
        type=_positive_int,
        default=10,
        help="iterations between checkpoints (default 10)",
    )
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    train.add_argument(
        "--tensorboard",
        action="store_true",
        help="also log to RUN/tensorboard (needs jaxlearner[tensorboard])",
    )

    evaluate = commands.add_parser("eval", help="evaluate a run's checkpoint")
    evaluate.add_argument("run", help="the run folder written by 'jaxlearner train'")
    evaluate.add_argument("--episodes", type=_positive_int, default=10)
    which = evaluate.add_mutually_exclusive_group()
    which.add_argument("--best", action="store_true", help="the best checkpoint, not the latest")
    which.add_argument("--step", type=int, help="a specific checkpoint step")
    evaluate.add_argument("--seed", type=int, default=0)
    evaluate.add_argument(
        "--render",
        choices=("rgb_array", "human"),
        help="also play one episode: 'human' in a window, 'rgb_array' into --video",
    )
    evaluate.add_argument(
        "--video",
        metavar="PATH",
        help="write one episode as a .gif or .mp4 (implies --render rgb_array; "
        "needs jaxlearner[video])",
    )

    plot = commands.add_parser("plot", help="plot learning curves")
    plot.add_argument("runs", nargs="+", help="run folders")
    plot.add_argument("--out", help="the PNG to write (default: FIRST_RUN/learning_curve.png)")
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _algorithm_names() -> list[str]:
    from jaxlearner.core.registry import algorithm_names

    return list(algorithm_names())


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    logging.getLogger("absl").setLevel(logging.ERROR)  # orbax's notes on read-only folders
    try:
        if args.command == "train":
            return _train(args)
        if args.command == "eval":
            return _eval(args)
        return _plot(args)
    except _UsageError as error:
        parser.exit(2, f"jaxlearner {args.command}: error: {error}\n")


class _UsageError(Exception):
    """A mistake in the command line discovered after parsing."""


def _train(args: argparse.Namespace) -> int:
    import gymnasium as gym

    import jaxlearner as jl
    from jaxlearner.algorithms.config import parse_overrides
    from jaxlearner.core.registry import algorithm_recipe

    name = args.algorithm
    if name not in _algorithm_names():
        raise _UsageError(f"unknown algorithm {name!r}; choose one of {_algorithm_names()}")
    recipe = algorithm_recipe(name)
    defaults = DEFAULTS.get(name)
    env_id = args.env or (defaults.env if defaults else None)
    if env_id is None:
        raise _UsageError(f"{name} has no default environment; pass --env")
    try:
        overrides = parse_overrides(recipe.config_type, args.config)
    except ValueError as error:
        raise _UsageError(str(error)) from None
    same_env = defaults is not None and env_id == defaults.env
    config = {**(defaults.config if same_env else {}), **overrides}
    try:
        env = gym.make(env_id)
    except gym.error.Error as error:
        raise _UsageError(str(error)) from None
    try:
        algorithm = recipe.build(env.observation_space, env.action_space, config)
    except (TypeError, ValueError) as error:
        raise _UsageError(str(error)) from None
    env.close()
    devices = _devices(args.devices)
    num_envs = args.num_envs or (defaults.num_envs if defaults else 8)
    out = pathlib.Path(args.out or _default_run_name(name, env_id))
    out.mkdir(parents=True, exist_ok=True)
    stop_reward = (
        args.stop_reward
        if args.stop_reward is not None
        else (defaults.stop_reward if same_env else None)
    )
    max_steps = args.max_steps or (defaults.max_steps if defaults else 1_000_000)
    eval_every = args.eval_every or (defaults.eval_every if defaults else 10_000)
    (out / RUN_FILE).write_text(
        json.dumps(
            {
                "algorithm": name,
                "env": env_id,
                "config": overrides,
                "num_envs": num_envs,
                "seed": args.seed,
                "stop_reward": stop_reward,
                "max_steps": max_steps,
                "started": datetime.datetime.now().isoformat(timespec="seconds"),
            },
            indent=2,
        )
        + "\n"
    )

    writers: list[Any] = [
        jl.loggers.ConsoleWriter(every=1),
        jl.loggers.JSONLinesWriter(out / METRICS_FILE),
    ]
    if args.tensorboard:
        writers.append(jl.loggers.TensorBoardWriter(out / "tensorboard"))
    trainer = jl.Trainer(
        algorithm,
        env_id,
        num_envs=num_envs,
        seed=args.seed,
        devices=devices,
        writers=writers,
        progress=False if args.no_progress else None,
    )
    conditions: list[Any] = [jl.MaxEnvSteps(max_steps)]
    if stop_reward is not None:
        # Two evaluations in a row, so one lucky evaluation does not end the run.
        conditions.append(jl.RewardBound(stop_reward, times=2))
    checkpoint = jl.CheckpointManager(
        out / CHECKPOINTS, max_to_keep=3, keep_best=1, best_metric="eval/return_mean"
    )
    print(f"Training {name} on {env_id} with {num_envs} envs; run folder {out}", flush=True)

    def save(stats: dict[str, float]) -> None:
        if "eval/return_mean" in stats and stats["iteration"] % args.checkpoint_every == 0:
            trainer.save(checkpoint)

    try:
        trainer.run(conditions, steps_per_eval=eval_every, on_iteration=save)
        last = trainer.history[-1] if trainer.history else {}
        if "eval/return_mean" not in last:
            last.update({f"eval/{k}": v for k, v in trainer.eval().items()})
        if checkpoint.latest_step() != trainer.counters.iteration:
            trainer.save(checkpoint, metrics=last)
        checkpoint.wait_until_finished()
    finally:
        checkpoint.close()
        trainer.close()
    reached = last.get("eval/return_mean", float("nan"))
    print(
        f"Done: {trainer.counters.env_steps} env steps in {trainer.counters.time_total_s:.1f} s, "
        f"evaluation return {reached:.1f}.\n"
        f"  metrics:     {out / METRICS_FILE}\n"
        f"  checkpoints: {out / CHECKPOINTS}\n"
        f"  evaluate:    jaxlearner eval {out}\n"
        f"  plot:        jaxlearner plot {out}",
        flush=True,
    )
    return 0


def _devices(text: str | None) -> Any:
    if text is None:
        return None
    if text == "all":
        return "all"
    try:
        count = int(text)
    except ValueError:
        raise _UsageError(f"--devices takes 'all' or a number; got {text!r}") from None
    if count < 1:
        raise _UsageError(f"--devices takes 'all' or a positive number; got {text!r}")
    return count


def _default_run_name(algorithm: str, env_id: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"runs/{algorithm}-{env_id}-{stamp}"


def _read_run(path: str) -> tuple[pathlib.Path, dict[str, Any]]:
    run = pathlib.Path(path)
    if not (run / RUN_FILE).is_file():
        raise _UsageError(f"{run} is not a run folder of 'jaxlearner train' (no {RUN_FILE})")
    return run, json.loads((run / RUN_FILE).read_text())


def _eval(args: argparse.Namespace) -> int:
    import jax

    import jaxlearner as jl
    from jaxlearner.training.env_runner import EnvRunner, evaluate

    run, info = _read_run(args.run)
    video = _video_path(args)
    options = {"read_only": True}
    if args.best:
        options["best_metric"] = "eval/return_mean"
    with jl.CheckpointManager(run / CHECKPOINTS, **options) as checkpoint:
        if checkpoint.latest_step() is None:
            raise _UsageError(f"{run / CHECKPOINTS} holds no checkpoint")
        step = checkpoint.best_step() if args.best else args.step
        if step is not None and step not in checkpoint.all_steps():
            raise _UsageError(f"no checkpoint step {step}; steps: {list(checkpoint.all_steps())}")
        step = checkpoint.latest_step() if step is None else step
    learner, state = jl.restore(run / CHECKPOINTS, step)
    algorithm = jl.algorithms.algorithm_for(learner)
    runner = EnvRunner(info["env"], num_envs=args.episodes, seed=args.seed)
    try:
        results = evaluate(
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


def _video_path(args: argparse.Namespace) -> pathlib.Path | None:
    """The ``--video`` file, checked before anything is restored."""
    from jaxlearner.training.video import check_video_path

    if args.video is None:
        if args.render == "rgb_array":
            raise _UsageError("--render rgb_array records frames: give --video PATH (.gif/.mp4)")
        return None
    if args.render == "human":
        raise _UsageError("--video records rgb_array frames; drop --render human")
    try:
        return check_video_path(args.video)
    except ValueError as error:
        raise _UsageError(str(error)) from None


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
        raise _UsageError(f"{error} (pip install 'jaxlearner[video]')") from None
    if video is None:
        print(f"played one episode in a window: return {episode_return:.1f}")
    else:
        print(f"video of one episode (return {episode_return:.1f}, {len(frames)} frames): {video}")


def _plot(args: argparse.Namespace) -> int:
    from jaxlearner.training.loggers import read_json_lines
    from jaxlearner.training.plotting import place_legend, plot_run

    runs = [_read_run(path) for path in args.runs]
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
            raise _UsageError(f"{run / METRICS_FILE} holds no returns to plot")
        label = f"{info['algorithm']} {info['env']} ({run.name})"
        plot_run(records, ax=axes, label=label, stop_reward=info.get("stop_reward"))
    place_legend(axes)
    out = pathlib.Path(args.out) if args.out else runs[0][0] / "learning_curve.png"
    figure.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(figure)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
