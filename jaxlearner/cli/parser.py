"""The ``jaxlearner`` command line parsed, once, into one command's typed options.

:func:`parse` is the only place that sees ``argparse``: it returns a
:class:`~jaxlearner.cli.options.TrainOptions`, :class:`~jaxlearner.cli.options.EvalOptions`,
:class:`~jaxlearner.cli.options.RecordOptions`, :class:`~jaxlearner.cli.options.PlotOptions`
or :class:`~jaxlearner.cli.options.PresetsOptions`, with every option checked. A bad
option is one line on stderr and exit status 2 (``SystemExit``), before anything is built
or written.

Example:
  >>> from jaxlearner.cli.parser import parse
  >>> parse(["eval", "runs/ppo", "--episodes", "3"]).episodes
  3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
from collections.abc import Sequence
from typing import NoReturn

from jaxlearner.algorithms.builtin import algorithm_names, algorithm_recipe
from jaxlearner.cli.argument_types import (
    count,
    positive_float,
    positive_int,
    seed,
    stop_reward,
)
from jaxlearner.cli.defaults import DEFAULTS
from jaxlearner.cli.options import (
    PRESET_CHOICES,
    CacheOptions,
    EvalOptions,
    Options,
    PlotOptions,
    PresetsOptions,
    RecordOptions,
    RunnerOptions,
    TrainOptions,
    parse_devices,
)

NO_CACHE_VARIABLE = "JAXLEARNER_NO_COMPILATION_CACHE"
"""Set to 1 (or anything but 0, false, no) to compile afresh, as ``--no-compilation-cache``."""

_Commands = argparse._SubParsersAction  # what add_subparsers returns


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (and exit with status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    """The ``jaxlearner`` parser: the commands train, eval, record, plot and presets."""
    parser = _Parser(prog="jaxlearner", description="Train, evaluate and plot RL agents.")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)
    for add_command in (_add_train, _add_eval, _add_record):
        _add_cache_options(add_command(commands))
    _add_plot(commands)
    _add_presets(commands)
    return parser


def _add_train(commands: _Commands) -> argparse.ArgumentParser:
    """``jaxlearner train``: an algorithm or ``--resume``, the run's options."""
    command = commands.add_parser(
        "train",
        help="train a built-in algorithm",
        epilog=_algorithms_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    command.add_argument(
        "algorithm",
        nargs="?",
        help="the algorithm, any case: " + ", ".join(algorithm_names()),
    )
    command.add_argument(
        "--resume",
        metavar="RUN",
        help="continue RUN from its newest intact checkpoint with its settings (after Ctrl-C); "
        "from an older one, the run goes on in a new folder beside it (RUN-2)",
    )
    command.add_argument(
        "--step",
        type=int,
        help="with --resume: the checkpoint step to continue from (default: the newest intact)",
    )
    command.add_argument(
        "--env",
        help="a gymnasium environment id (default: the algorithm's), or gymnax:NAME for a "
        "gymnax game trained in one compiled program (pip install 'jaxlearner[gymnax]')",
    )
    command.add_argument(
        "--preset",
        choices=PRESET_CHOICES,
        default="auto",
        help="the tuned settings to start from ('jaxlearner presets' lists them): auto (the "
        "environment's row, one tuned here before RL Zoo's before a published one), rl_zoo3, "
        "jaxlearner or published (that origin's row), none (the library's defaults)",
    )
    command.add_argument(
        "--dataset",
        metavar="DIR",
        help="the dataset an offline algorithm (bc, marwil) trains on: a folder of "
        "'jaxlearner record', or minari:ID for a locally stored Minari dataset "
        "(--env defaults to the dataset's)",
    )
    command.add_argument(
        "--config",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="algorithm config overrides, e.g. lr=1e-3 hidden_sizes=[64,64]",
    )
    _add_stop_options(command)
    command.add_argument(
        "--out",
        help="the run folder (default: runs/ALGORITHM-ENV-TIME); a folder that holds a run "
        "is refused: continue it with --resume, or add --new-run",
    )
    command.add_argument(
        "--new-run",
        action="store_true",
        help="when --out holds a run, leave it untouched and write OUT-2 (OUT-3, ...) instead",
    )
    command.add_argument("--devices", help="'all' or a number of devices to train on")
    command.add_argument("--num-envs", type=positive_int, help="sub-environments per step")
    command.add_argument("--eval-every", type=positive_int, help="env steps between evaluations")
    command.add_argument(
        "--eval-episodes", type=positive_int, help="episodes per evaluation (default 10)"
    )
    command.add_argument(
        "--checkpoint-every-steps",
        type=positive_int,
        metavar="N",
        help="save every N env steps (default: --eval-every); also at each new best "
        "evaluation, at the end and on Ctrl-C",
    )
    command.add_argument("--checkpoint-every", type=positive_int, help=argparse.SUPPRESS)
    command.add_argument("--seed", type=seed, help="seed (default 0)")
    _add_output_options(command)
    _add_runner_options(command)
    return command


def _add_runner_options(command: argparse.ArgumentParser) -> None:
    """``train``'s Ray env runners (RLlib's ``num_env_runners``; the jaxlearner[ray] extra)."""
    command.add_argument(
        "--env-runners",
        type=count,
        default=0,
        metavar="N",
        help="step the environments on N Ray actors, --num-envs each (default 0: in this "
        "process; needs jaxlearner[ray]); APPO's runners sample asynchronously",
    )
    command.add_argument(
        "--cpus-per-env-runner", type=positive_float, default=1.0, help="CPUs per env runner"
    )
    command.add_argument(
        "--max-env-runner-restarts",
        type=count,
        default=100,
        metavar="N",
        help="failed env runners replaced before the run stops with an error (default 100)",
    )
    command.add_argument(
        "--ray-address",
        help="the Ray cluster the env runners join (default: $RAY_ADDRESS, else a local one)",
    )


def _add_stop_options(command: argparse.ArgumentParser) -> None:
    """``train``'s stop rule: the stop reward and the env-step budget."""
    command.add_argument(
        "--stop-reward",
        type=stop_reward,
        help="stop once two evaluations in a row reach this mean return (each the mean of "
        "the evaluation episodes); 'none': no reward stop, train the whole --max-steps",
    )
    command.add_argument(
        "--max-steps",
        type=positive_int,
        help="stop once this many env steps are collected; iterations are whole, so a run "
        "ends at the first multiple of its iteration's env steps at or past it (the run "
        "prints that count when it starts)",
    )
    command.add_argument(
        "--keep-schedules",
        action="store_true",
        help="with --max-steps other than an RL Zoo preset's budget, keep the preset's "
        "schedules (lin_ learning rates and clip ranges, DQN's exploration) as written; by "
        "default they run over --max-steps, as RL Zoo's -n runs them",
    )


def _add_output_options(command: argparse.ArgumentParser) -> None:
    """``train``'s options for where its progress and metrics go besides the run folder."""
    command.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    command.add_argument(
        "--tensorboard",
        action="store_true",
        help="also log to RUN/tensorboard (needs jaxlearner[tensorboard])",
    )
    command.add_argument(
        "--wandb",
        action="store_true",
        help="also log to Weights & Biases, project 'jaxlearner', run named after the folder, "
        "files in RUN/wandb (needs jaxlearner[wandb]; WANDB_MODE=offline needs no account)",
    )


def _add_eval(commands: _Commands) -> argparse.ArgumentParser:
    """``jaxlearner eval RUN``: which checkpoint, how many episodes, a window or a video."""
    command = commands.add_parser("eval", help="evaluate a run's checkpoint")
    command.add_argument("run", help="the run folder written by 'jaxlearner train'")
    command.add_argument("--episodes", type=positive_int, default=10)
    which = command.add_mutually_exclusive_group()
    which.add_argument("--best", action="store_true", help="the best checkpoint, not the latest")
    which.add_argument(
        "--step", type=int, help="a specific checkpoint step (default: the newest intact one)"
    )
    command.add_argument("--seed", type=seed, default=0)
    command.add_argument(
        "--render",
        choices=("rgb_array", "human"),
        help="also play one episode: 'human' in a window, 'rgb_array' into --video",
    )
    command.add_argument(
        "--video",
        metavar="PATH",
        help="write one episode as a .gif or .mp4 (implies --render rgb_array; "
        "needs jaxlearner[video])",
    )
    return command


def _add_record(commands: _Commands) -> argparse.ArgumentParser:
    """``jaxlearner record RUN``: episodes of the run's policy into a dataset folder."""
    command = commands.add_parser("record", help="record episodes of a run's policy as a dataset")
    command.add_argument("run", help="the run folder written by 'jaxlearner train'")
    command.add_argument("--episodes", type=positive_int, required=True, help="episodes to record")
    command.add_argument("--out", required=True, help="the dataset folder (never overwritten)")
    command.add_argument(
        "--explore", action="store_true", help="act with the sampling policy, not the greedy one"
    )
    which = command.add_mutually_exclusive_group()
    which.add_argument("--best", action="store_true", help="the best checkpoint, not the latest")
    which.add_argument(
        "--step", type=int, help="a specific checkpoint step (default: the newest intact one)"
    )
    command.add_argument("--num-envs", type=positive_int, default=8, help="envs stepped together")
    command.add_argument("--seed", type=seed, default=0)
    return command


def _add_plot(commands: _Commands) -> None:
    """``jaxlearner plot RUN...``: learning curves into one PNG."""
    command = commands.add_parser("plot", help="plot learning curves")
    command.add_argument("runs", nargs="+", help="run folders")
    command.add_argument("--out", help="the PNG to write (default: FIRST_RUN/learning_curve.png)")
    command.add_argument(
        "--aggregate",
        action="store_true",
        help="seeds of one algorithm and environment as one curve: the interquartile mean of "
        "their evaluation returns with a 95%% stratified bootstrap interval (Agarwal et al. 2021)",
    )
    command.add_argument(
        "--table",
        action="store_true",
        help="print each algorithm and environment's final evaluation return over its runs "
        "(IQM, median, mean, and the optimality gap to each stop reward the runs name, with "
        "95%% bootstrap intervals) instead of drawing",
    )


def _add_presets(commands: _Commands) -> None:
    """``jaxlearner presets [ALGORITHM]``: the table of tuned settings."""
    command = commands.add_parser(
        "presets", help="list the tuned settings per algorithm and environment"
    )
    command.add_argument(
        "algorithm", nargs="?", help="show this algorithm's rows with their configs"
    )


def _add_cache_options(command: argparse.ArgumentParser) -> None:
    """The compilation-cache options of the commands that compile (train, eval, record)."""
    command.add_argument(
        "--compilation-cache",
        metavar="DIR",
        help=f"JAX's persistent compilation cache (default {default_cache()})",
    )
    command.add_argument(
        "--no-compilation-cache",
        action="store_true",
        help=f"compile afresh (also: {NO_CACHE_VARIABLE}=1)",
    )


def _algorithms_help() -> str:
    """Presets, each algorithm's defaults and config fields, for ``jaxlearner train --help``."""
    lines = [
        "presets: on an environment with a preset ('jaxlearner presets' lists them: RL Zoo's",
        "PPO, SAC and DQN settings for classic control and MuJoCo, and a few tuned here), a",
        "run starts from its config, envs, step budget and evaluation cadence; --config,",
        "--num-envs, --max-steps and --eval-every override them, --preset none uses the",
        "library's defaults (RLlib's, jl.algorithms.*Config). The run prints, and run.json",
        "records, the preset used and the resolved config. Without --env each algorithm",
        "trains on its own environment (below, with its preset's settings); on another",
        "--env training stops at gymnasium's reward_threshold for it, if it has one, or at",
        "--stop-reward (--stop-reward none: at --max-steps only).",
        "algorithms (config fields as 'name: type = default', and the preset's value on the",
        "algorithm's own environment):",
    ]
    for name in algorithm_names():
        lines += _algorithm_help(name)
    return "\n".join(lines)


def _algorithm_help(name: str) -> list[str]:
    """One algorithm's lines of :func:`_algorithms_help`."""
    defaults = DEFAULTS.get(name)
    tuned: dict[str, object] = {}
    if defaults is None:
        lines = [f"  {name}: no default environment (pass --env)"]
    elif defaults.offline:
        lines = [
            f"  {name} (offline, needs --dataset): a {defaults.env} dataset, stops at two "
            f"evaluations\n    in a row >= {defaults.stop_reward:g} or "
            f"{defaults.max_steps} dataset rows, evaluates every {defaults.eval_every} rows"
        ]
        tuned = defaults.config
    else:
        lines = [
            f"  {name}: {defaults.env}, stops at two evaluations in a row >= "
            f"{defaults.stop_reward:g} or {defaults.max_steps} env steps;\n    "
            f"{defaults.num_envs} envs, evaluates "
            f"every {defaults.eval_every} env steps; preset {defaults.preset.name}"
        ]
        tuned = defaults.config
    for field in dataclasses.fields(algorithm_recipe(name).config_type):
        default = field.default
        if default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        text = f"    {field.name}: {field.type} = {_value(default)}"
        if defaults is not None and field.name in tuned and tuned[field.name] != default:
            text += f"; on {defaults.env}: {_value(tuned[field.name])}"
        lines.append(text)
    return lines


def _value(value: object) -> str:
    """A config value as it is written after --config (JSON, without spaces)."""
    try:
        return json.dumps(value, separators=(",", ":"))
    except TypeError:
        return repr(value)


def default_cache() -> pathlib.Path:
    """$JAX_COMPILATION_CACHE_DIR (JAX's own variable) when set, else ~/.cache/jaxlearner/jax."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return pathlib.Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "jaxlearner" / "jax"


def usage() -> str:
    """The usage and commands of bare ``jaxlearner`` (its ``--help``)."""
    return _parser().format_help()


def parse(argv: Sequence[str] | None = None) -> Options | None:
    """The command line as one command's checked options; ``None`` for bare ``jaxlearner``.

    Args:
      argv: the arguments after ``jaxlearner`` (``None``: ``sys.argv[1:]``).

    Returns:
      The options of the command named first, or ``None`` when no command is named.

    Raises:
      SystemExit: with status 2 and one line on stderr for a bad option; with
        status 0 after ``--help``.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            return _train_options(args)
        if args.command in ("eval", "record"):
            return _run_options(args)
        if args.command == "plot":
            return PlotOptions(
                runs=tuple(args.runs), out=args.out, aggregate=args.aggregate, table=args.table
            )
        if args.command == "presets":
            return PresetsOptions(algorithm=args.algorithm)
    except ValueError as error:
        parser.exit(2, f"jaxlearner {args.command}: error: {error}\n")
    return None


def _train_options(args: argparse.Namespace) -> TrainOptions:
    """``train``'s options. ``--checkpoint-every`` is gone; ``--config lr=1e-3 ppo`` names ppo."""
    if args.checkpoint_every is not None:
        raise ValueError(
            "--checkpoint-every (iterations, and only when evaluating) is replaced by "
            "--checkpoint-every-steps N (env steps)"
        )
    config, algorithm = list(args.config), args.algorithm
    if algorithm is None and config and "=" not in config[-1]:
        algorithm = config.pop()
    return TrainOptions(
        algorithm=algorithm,
        resume=None if args.resume is None else pathlib.Path(args.resume),
        step=args.step,
        env=args.env,
        dataset=args.dataset,
        config=tuple(config),
        stop_reward=args.stop_reward,
        max_steps=args.max_steps,
        out=None if args.out is None else pathlib.Path(args.out),
        new_run=args.new_run,
        devices=parse_devices(args.devices),
        num_envs=args.num_envs,
        eval_every=args.eval_every,
        eval_episodes=args.eval_episodes,
        checkpoint_every_steps=args.checkpoint_every_steps,
        seed=args.seed,
        progress=not args.no_progress,
        tensorboard=args.tensorboard,
        wandb=args.wandb,
        cache=_cache_options(args),
        preset=args.preset,
        keep_schedules=args.keep_schedules,
        runners=RunnerOptions(
            env_runners=args.env_runners,
            cpus_per_env_runner=args.cpus_per_env_runner,
            max_env_runner_restarts=args.max_env_runner_restarts,
            ray_address=args.ray_address,
        ),
    )


def _run_options(args: argparse.Namespace) -> EvalOptions | RecordOptions:
    """``eval``'s or ``record``'s options: a run folder and the checkpoint to read."""
    common = {
        "run": pathlib.Path(args.run),
        "episodes": args.episodes,
        "best": args.best,
        "step": args.step,
        "seed": args.seed,
        "cache": _cache_options(args),
    }
    if args.command == "eval":
        return EvalOptions(**common, render=args.render, video=args.video)
    return RecordOptions(**common, out=args.out, explore=args.explore, num_envs=args.num_envs)


def _cache_options(args: argparse.Namespace) -> CacheOptions:
    folder = args.compilation_cache
    return CacheOptions(
        folder=None if folder is None else pathlib.Path(folder),
        disabled=args.no_compilation_cache,
    )
