"""The ``jaxlearner`` command: train, evaluate and plot built-in algorithms.

* ``jaxlearner train ppo`` trains PPO on its default environment (CartPole-v1)
  with RL Zoo's tuned settings for it (:data:`DEFAULTS`; the library's own
  defaults stay RLlib's), which reach the reward bound in seconds on a laptop CPU,
  logs to the console and ``runs/NAME/metrics.jsonl``, checkpoints to
  ``runs/NAME/checkpoints`` periodically and at the end, and prints where
  everything went.
* ``jaxlearner eval runs/NAME`` restores the latest (or best) checkpoint and
  reports evaluation returns; ``--video episode.gif`` (or ``.mp4``) records one
  episode, ``--render human`` plays one in a window.
* ``jaxlearner plot runs/NAME [more runs]`` writes a learning-curve PNG.
* ``jaxlearner record runs/NAME --episodes 20 --out data/NAME`` records episodes of a
  run's policy as a dataset, and ``jaxlearner train bc --dataset data/NAME`` (or
  ``marwil``) trains an offline algorithm on it (``--dataset minari:ID`` reads a
  locally stored Minari dataset), evaluating in the dataset's environment.

Bad arguments print one line and exit with status 2, before a run folder is
made; bare ``jaxlearner`` prints the usage and exits with status 2.

Ctrl-C (SIGINT) or SIGTERM during ``train`` finishes the iteration in flight,
saves a checkpoint, prints how to continue (``jaxlearner train --resume RUN``)
and exits with status 130 or 143. ``train`` and ``eval`` keep JAX's compiled
programs in a persistent cache (``~/.cache/jaxlearner/jax``; ``--compilation-cache
DIR``, or off with ``--no-compilation-cache`` or ``JAXLEARNER_NO_COMPILATION_CACHE=1``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import pathlib
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from jaxlearner.training.cli_commands import evaluate, plot, record
from jaxlearner.training.cli_defaults import DEFAULTS, Defaults
from jaxlearner.training.cli_settings import (
    CHECKPOINTS,
    METRICS_FILE,
    RUN_FILE,
    UsageError,
    algorithm_names,
)
from jaxlearner.training.cli_train import train

__all__ = [
    "CHECKPOINTS",
    "DEFAULTS",
    "METRICS_FILE",
    "NO_CACHE_VARIABLE",
    "RUN_FILE",
    "Defaults",
    "main",
]

NO_CACHE_VARIABLE = "JAXLEARNER_NO_COMPILATION_CACHE"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (and exit with status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    """The ``jaxlearner`` parser: the commands train, eval, record and plot."""
    parser = _Parser(prog="jaxlearner", description="Train, evaluate and plot RL agents.")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)
    for add_command in (_add_train, _add_eval, _add_record):
        _add_cache_options(add_command(commands))
    _add_plot(commands)
    return parser


def _add_train(commands: Any) -> argparse.ArgumentParser:
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
        help="continue RUN from its latest checkpoint with its settings (after Ctrl-C)",
    )
    command.add_argument("--env", help="a gymnasium environment id (default: the algorithm's)")
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
    command.add_argument("--stop-reward", type=float, help="stop at this mean evaluation return")
    command.add_argument("--max-steps", type=_positive_int, help="stop after this many env steps")
    command.add_argument("--out", help="the run folder (default: runs/ALGORITHM-ENV-TIME)")
    command.add_argument("--devices", help="'all' or a number of devices to train on")
    command.add_argument("--num-envs", type=_positive_int, help="sub-environments per step")
    command.add_argument("--eval-every", type=_positive_int, help="env steps between evaluations")
    command.add_argument(
        "--checkpoint-every-steps",
        type=_positive_int,
        metavar="N",
        help="save every N env steps (default: --eval-every); also at each new best "
        "evaluation, at the end and on Ctrl-C",
    )
    command.add_argument("--checkpoint-every", type=_positive_int, help=argparse.SUPPRESS)
    command.add_argument("--seed", type=int, help="seed (default 0)")
    command.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    command.add_argument(
        "--tensorboard",
        action="store_true",
        help="also log to RUN/tensorboard (needs jaxlearner[tensorboard])",
    )
    return command


def _add_eval(commands: Any) -> argparse.ArgumentParser:
    """``jaxlearner eval RUN``: which checkpoint, how many episodes, a window or a video."""
    command = commands.add_parser("eval", help="evaluate a run's checkpoint")
    command.add_argument("run", help="the run folder written by 'jaxlearner train'")
    command.add_argument("--episodes", type=_positive_int, default=10)
    which = command.add_mutually_exclusive_group()
    which.add_argument("--best", action="store_true", help="the best checkpoint, not the latest")
    which.add_argument("--step", type=int, help="a specific checkpoint step")
    command.add_argument("--seed", type=int, default=0)
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


def _add_record(commands: Any) -> argparse.ArgumentParser:
    """``jaxlearner record RUN``: episodes of the run's policy into a dataset folder."""
    command = commands.add_parser("record", help="record episodes of a run's policy as a dataset")
    command.add_argument("run", help="the run folder written by 'jaxlearner train'")
    command.add_argument("--episodes", type=_positive_int, required=True, help="episodes to record")
    command.add_argument("--out", required=True, help="the dataset folder (never overwritten)")
    command.add_argument(
        "--explore", action="store_true", help="act with the sampling policy, not the greedy one"
    )
    which = command.add_mutually_exclusive_group()
    which.add_argument("--best", action="store_true", help="the best checkpoint, not the latest")
    which.add_argument("--step", type=int, help="a specific checkpoint step")
    command.add_argument("--num-envs", type=_positive_int, default=8, help="envs stepped together")
    command.add_argument("--seed", type=int, default=0)
    return command


def _add_plot(commands: Any) -> None:
    """``jaxlearner plot RUN...``: learning curves into one PNG."""
    command = commands.add_parser("plot", help="plot learning curves")
    command.add_argument("runs", nargs="+", help="run folders")
    command.add_argument("--out", help="the PNG to write (default: FIRST_RUN/learning_curve.png)")


def _add_cache_options(command: argparse.ArgumentParser) -> None:
    """The compilation-cache options of the commands that compile (train, eval, record)."""
    command.add_argument(
        "--compilation-cache",
        metavar="DIR",
        help=f"JAX's persistent compilation cache (default {_default_cache()})",
    )
    command.add_argument(
        "--no-compilation-cache",
        action="store_true",
        help=f"compile afresh (also: {NO_CACHE_VARIABLE}=1)",
    )


def _algorithms_help() -> str:
    """Each algorithm's defaults and config fields, for ``jaxlearner train --help``."""
    from jaxlearner.core.registry import algorithm_recipe

    lines = [
        "algorithms (config fields as 'name: type = default', and the command line's own",
        "default on the algorithm's environment; on another --env, training stops at",
        "gymnasium's reward_threshold for it, if it has one, or at --stop-reward).",
        "The defaults are RLlib's (the library's, jl.algorithms.*Config); on its own",
        "environment the command line uses tuned settings: RL Zoo's for PPO, settings",
        "that solve faster than RL Zoo's on a CPU for DQN and SAC (see cli.DEFAULTS):",
    ]
    for name in algorithm_names():
        defaults = DEFAULTS.get(name)
        if defaults is None:
            lines.append(f"  {name}: no default environment (pass --env)")
            tuned: dict[str, Any] = {}
        elif defaults.offline:
            lines.append(
                f"  {name} (offline, needs --dataset): a {defaults.env} dataset, stops at "
                f"evaluation\n    return {defaults.stop_reward:g} or {defaults.max_steps} dataset "
                f"rows, evaluates every {defaults.eval_every} rows"
            )
            tuned = defaults.config
        else:
            lines.append(
                f"  {name}: {defaults.env}, stops at evaluation return {defaults.stop_reward:g} "
                f"or {defaults.max_steps} env steps;\n    {defaults.num_envs} envs, evaluates "
                f"every {defaults.eval_every} env steps"
            )
            tuned = defaults.config
        for field in dataclasses.fields(algorithm_recipe(name).config_type):
            default = field.default
            if default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
                default = field.default_factory()
            text = f"    {field.name}: {field.type} = {_value(default)}"
            if field.name in tuned:
                text += f"; on {defaults.env}: {_value(tuned[field.name])}"
            lines.append(text)
    return "\n".join(lines)


def _value(value: Any) -> str:
    """A config value as it is written after --config (JSON, without spaces)."""
    try:
        return json.dumps(value, separators=(",", ":"))
    except TypeError:
        return repr(value)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `jaxlearner`: the usage, as for any missing argument
        parser.print_help(sys.stderr)
        return 2
    logging.getLogger("absl").setLevel(logging.ERROR)  # orbax's notes on read-only folders
    try:
        if args.command == "train":
            _fix_train_arguments(args)
        if args.command in ("train", "eval", "record"):
            _compilation_cache(args)
        if args.command == "train":
            return train(args)
        if args.command == "eval":
            return evaluate(args)
        if args.command == "record":
            return record(args)
        return plot(args)
    except UsageError as error:
        parser.exit(2, f"jaxlearner {args.command}: error: {error}\n")
    except KeyboardInterrupt:
        print(f"jaxlearner {args.command}: interrupted", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT


def _default_cache() -> pathlib.Path:
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "jaxlearner" / "jax"


def _compilation_cache(args: argparse.Namespace) -> pathlib.Path | None:
    """Turns on JAX's persistent compilation cache, so a second run skips compiling."""
    off = os.environ.get(NO_CACHE_VARIABLE, "").strip().lower() not in ("", "0", "false", "no")
    if args.no_compilation_cache or off:
        return None
    import jax

    folder = pathlib.Path(args.compilation_cache or _default_cache()).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--compilation-cache {folder}: {error.strerror}") from None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # The defaults skip programs compiled in under a second: most of a CPU run's.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder


def _fix_train_arguments(args: argparse.Namespace) -> None:
    """``--checkpoint-every`` is gone; ``train --config lr=1e-3 ppo`` names ppo."""
    if args.checkpoint_every is not None:
        raise UsageError(
            "--checkpoint-every (iterations, and only when evaluating) is replaced by "
            "--checkpoint-every-steps N (env steps)"
        )
    if args.algorithm is None and args.config and "=" not in args.config[-1]:
        args.algorithm = args.config.pop()


if __name__ == "__main__":
    sys.exit(main())
