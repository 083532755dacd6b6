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
import datetime
import json
import logging
import math
import os
import pathlib
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS = "checkpoints"


@dataclasses.dataclass(frozen=True)
class Defaults:
    """What ``jaxlearner train ALGORITHM`` uses when the command line does not say.

    :data:`DEFAULTS` holds tuned hyperparameters for each built-in
    algorithm's environment, mapped onto the RLlib-named config fields:
    RL Zoo's (rl-baselines3-zoo's ``hyperparams/ppo.yml``) for PPO, and for
    DQN and SAC settings that reach the bound in fewer seconds on a CPU than
    RL Zoo's (each entry says why). The configs' own defaults, which the
    library uses, stay RLlib's.

    Attributes:
      env: the gymnasium environment id.
      config: overrides of the algorithm's config tuned for that environment.
      stop_reward: the evaluation return that ends the run.
      max_steps: the env steps that end the run regardless.
      num_envs: sub-environments stepped together.
      eval_every: env steps between evaluations.
      offline: trains on ``--dataset`` (BC, MARWIL); its env steps are dataset rows.
    """

    env: str
    config: dict[str, Any]
    stop_reward: float
    max_steps: int
    num_envs: int
    eval_every: int
    offline: bool = False


DEFAULTS: dict[str, Defaults] = {
    "ppo": Defaults(
        # RL Zoo's PPO CartPole-v1 (8 envs x 32 steps, 20 epochs of one minibatch of 256,
        # gamma 0.98, GAE 0.8, lr 1e-3 and clip 0.2 annealed to 0 over 1e5 steps) with
        # SB3's PPO defaults it relies on (64x64 tanh, vf_coef 0.5, max_grad_norm 0.5, no
        # KL term, no value clipping).
        env="CartPole-v1",
        config={
            "lr": ((0, 1e-3), (100_000, 0.0)),
            "clip_param": ((0, 0.2), (100_000, 0.0)),
            "train_batch_size": 256,
            "minibatch_size": 256,
            "num_epochs": 20,
            "gamma": 0.98,
            "lambda_": 0.8,
            "entropy_coeff": 0.0,
            "vf_loss_coeff": 0.5,
            "vf_clip_param": 1e6,
            "use_kl_loss": False,
            "grad_clip": 0.5,
            "hidden_sizes": (64, 64),
        },
        stop_reward=475.0,
        max_steps=100_000,
        num_envs=8,
        eval_every=2048,
    ),
    "dqn": Defaults(
        # Tuned here rather than RL Zoo's (one env, 256 steps then 128 updates, target copy
        # every 10 steps, 256x256): to two evaluations >= 475 (seed 0, a 2-core CPU) those
        # took 35.8k env steps and 2.6x the time, these 7.7k; benchmarks/bench_intensity.py
        # --solve compares these with sbx's DQN at RL Zoo's settings.
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
        # Tuned here: one update per env step (RLlib's training_intensity None) as RL Zoo,
        # with RL Zoo's lr 1e-3 but 64x64 networks and batches of 128; RL Zoo's 256x256 and
        # 256 reached -250 in the same env steps (6k, seed 0) in 3.5x the time on this CPU,
        # where their update is compute-bound (bench_off_policy.py: ~7 ms each).
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
    "appo": Defaults(
        env="CartPole-v1",
        config={
            "lr": 1e-3,
            "rollout_fragment_length": 32,
            "train_batch_size": 512,
            "minibatch_size": 128,
            "num_epochs": 8,
            "hidden_sizes": (64, 64),
            "lambda_": 0.95,
            "clip_param": 0.2,
            "vf_loss_coeff": 1.0,
        },
        stop_reward=475.0,
        max_steps=200_000,
        num_envs=8,
        eval_every=5120,
    ),
    # Offline: the environment evaluates; "env steps" are dataset rows trained on.
    "bc": Defaults(
        env="CartPole-v1",
        config={"lr": 1e-3, "train_batch_size": 256, "hidden_sizes": (64, 64)},
        stop_reward=475.0,
        max_steps=500_000,
        num_envs=1,
        eval_every=10_000,
        offline=True,
    ),
    "marwil": Defaults(
        env="CartPole-v1",
        config={"lr": 1e-3, "train_batch_size": 256, "hidden_sizes": (64, 64), "beta": 0.5},
        stop_reward=475.0,
        max_steps=1_000_000,
        num_envs=1,
        eval_every=10_000,
        offline=True,
    ),
}


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (and exit with status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="jaxlearner", description="Train, evaluate and plot RL agents.")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)

    train = commands.add_parser(
        "train",
        help="train a built-in algorithm",
        epilog=_algorithms_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument(
        "algorithm",
        nargs="?",
        help="the algorithm, any case: " + ", ".join(_algorithm_names()),
    )
    train.add_argument(
        "--resume",
        metavar="RUN",
        help="continue RUN from its latest checkpoint with its settings (after Ctrl-C)",
    )
    train.add_argument("--env", help="a gymnasium environment id (default: the algorithm's)")
    train.add_argument(
        "--dataset",
        metavar="DIR",
        help="the dataset an offline algorithm (bc, marwil) trains on: a folder of "
        "'jaxlearner record', or minari:ID for a locally stored Minari dataset "
        "(--env defaults to the dataset's)",
    )
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
        "--checkpoint-every-steps",
        type=_positive_int,
        metavar="N",
        help="save every N env steps (default: --eval-every); also at each new best "
        "evaluation, at the end and on Ctrl-C",
    )
    train.add_argument("--checkpoint-every", type=_positive_int, help=argparse.SUPPRESS)
    train.add_argument("--seed", type=int, help="seed (default 0)")
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

    record = commands.add_parser("record", help="record episodes of a run's policy as a dataset")
    record.add_argument("run", help="the run folder written by 'jaxlearner train'")
    record.add_argument("--episodes", type=_positive_int, required=True, help="episodes to record")
    record.add_argument("--out", required=True, help="the dataset folder (never overwritten)")
    record.add_argument(
        "--explore", action="store_true", help="act with the sampling policy, not the greedy one"
    )
    which = record.add_mutually_exclusive_group()
    which.add_argument("--best", action="store_true", help="the best checkpoint, not the latest")
    which.add_argument("--step", type=int, help="a specific checkpoint step")
    record.add_argument("--num-envs", type=_positive_int, default=8, help="envs stepped together")
    record.add_argument("--seed", type=int, default=0)

    for command in (train, evaluate, record):
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

    plot = commands.add_parser("plot", help="plot learning curves")
    plot.add_argument("runs", nargs="+", help="run folders")
    plot.add_argument("--out", help="the PNG to write (default: FIRST_RUN/learning_curve.png)")
    return parser


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
    for name in _algorithm_names():
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


def _algorithm_names() -> list[str]:
    from jaxlearner.core.registry import algorithm_names

    return list(algorithm_names())


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
            return _train(args)
        if args.command == "eval":
            return _eval(args)
        if args.command == "record":
            return _record(args)
        return _plot(args)
    except _UsageError as error:
        parser.exit(2, f"jaxlearner {args.command}: error: {error}\n")
    except KeyboardInterrupt:
        print(f"jaxlearner {args.command}: interrupted", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT


NO_CACHE_VARIABLE = "JAXLEARNER_NO_COMPILATION_CACHE"


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
        raise _UsageError(f"--compilation-cache {folder}: {error.strerror}") from None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # The defaults skip programs compiled in under a second: most of a CPU run's.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder


def _fix_train_arguments(args: argparse.Namespace) -> None:
    """``--checkpoint-every`` is gone; ``train --config lr=1e-3 ppo`` names ppo."""
    if args.checkpoint_every is not None:
        raise _UsageError(
            "--checkpoint-every (iterations, and only when evaluating) is replaced by "
            "--checkpoint-every-steps N (env steps)"
        )
    if args.algorithm is None and args.config and "=" not in args.config[-1]:
        args.algorithm = args.config.pop()


class _UsageError(Exception):
    """A mistake in the command line discovered after parsing."""


@dataclasses.dataclass(frozen=True)
class _RunSettings:
    """What ``run.json`` records: enough to rebuild the trainer for ``--resume``."""

    algorithm: str
    env: str
    config: dict[str, Any]
    num_envs: int
    seed: int
    stop_reward: float | None
    max_steps: int
    eval_every: int
    checkpoint_every_steps: int
    devices: str | None
    dataset: str | None = None


def _settings(args: argparse.Namespace) -> _RunSettings:
    """The run's settings from the command line, or from ``RUN/run.json`` for ``--resume``."""
    if args.resume is not None:
        given = [
            option
            for option, value in [
                ("ALGORITHM", args.algorithm),
                ("--env", args.env),
                ("--config", args.config or None),
                ("--stop-reward", args.stop_reward),
                ("--max-steps", args.max_steps),
                ("--out", args.out),
                ("--devices", args.devices),
                ("--num-envs", args.num_envs),
                ("--eval-every", args.eval_every),
                ("--checkpoint-every-steps", args.checkpoint_every_steps),
                ("--seed", args.seed),
                ("--dataset", args.dataset),
            ]
            if value is not None
        ]
        if given:
            raise _UsageError(
                f"--resume continues a run with the settings in its {RUN_FILE}; drop {given}"
            )
        _, info = _read_run(args.resume)
        name, env_id = info["algorithm"], info["env"]
        defaults = DEFAULTS.get(name)
        eval_every = info.get("eval_every") or (defaults.eval_every if defaults else 10_000)
        return _RunSettings(
            algorithm=name,
            env=env_id,
            config=_saved_config(pathlib.Path(args.resume), info["config"]),
            num_envs=info["num_envs"],
            seed=info["seed"],
            stop_reward=info["stop_reward"],
            max_steps=info["max_steps"],
            eval_every=eval_every,
            checkpoint_every_steps=info.get("checkpoint_every_steps") or eval_every,
            devices=info.get("devices"),
            dataset=info.get("dataset"),
        )
    from jaxlearner.algorithms.config import parse_overrides
    from jaxlearner.core.registry import algorithm_recipe

    if args.algorithm is None:
        raise _UsageError("give an algorithm (" + ", ".join(_algorithm_names()) + ") or --resume")
    name = args.algorithm.lower()
    if name not in _algorithm_names():
        raise _UsageError(
            f"unknown algorithm {args.algorithm!r}; choose one of {_algorithm_names()}"
        )
    recipe = algorithm_recipe(name)
    defaults = DEFAULTS.get(name)
    dataset_env = None if args.dataset is None else _load_dataset(args.dataset).env
    env_id = args.env or dataset_env or (defaults.env if defaults else None)
    if env_id is None:
        raise _UsageError(f"{name} has no default environment; pass --env")
    try:
        overrides = parse_overrides(recipe.config_type, args.config)
    except ValueError as error:
        raise _UsageError(str(error)) from None
    _check_sequences(recipe.config_type, overrides)
    same_env = defaults is not None and env_id == defaults.env
    stop_reward = args.stop_reward
    if stop_reward is None:
        stop_reward = defaults.stop_reward if same_env else _reward_threshold(env_id)
    eval_every = args.eval_every or (defaults.eval_every if defaults else 10_000)
    return _RunSettings(
        algorithm=name,
        env=env_id,
        config=overrides,
        num_envs=args.num_envs or (defaults.num_envs if defaults else 8),
        seed=0 if args.seed is None else args.seed,
        stop_reward=stop_reward,
        max_steps=args.max_steps or (defaults.max_steps if defaults else 1_000_000),
        eval_every=eval_every,
        checkpoint_every_steps=args.checkpoint_every_steps or eval_every,
        devices=args.devices,
        dataset=args.dataset,
    )


def _saved_config(run: pathlib.Path, recorded: dict[str, Any]) -> dict[str, Any]:
    """The whole config the run's latest checkpoint was trained with.

    ``run.json`` records only the ``--config`` overrides; the command line's
    defaults beneath them may have changed since (they did for PPO), so a
    resumed run takes its config from the learner recipe saved with the
    checkpoint, and from ``run.json`` only where there is none.
    """
    import jaxlearner as jl

    if not (run / CHECKPOINTS).is_dir():
        return {key: _tuples(value) for key, value in recorded.items()}
    with jl.CheckpointManager(run / CHECKPOINTS, read_only=True) as checkpoint:
        step = checkpoint.latest_step()
        recipe = checkpoint.metadata(step).get("recipe") if step is not None else None
    config = recipe["config"] if recipe else recorded
    return {key: _tuples(value) for key, value in config.items()}


def _reward_threshold(env_id: str) -> float | None:
    """gymnasium's ``reward_threshold`` for the environment (``None`` where it has none)."""
    import gymnasium as gym

    try:
        threshold = gym.spec(env_id).reward_threshold
    except gym.error.Error:
        return None  # an unknown id: gym.make says why, with suggestions
    return None if threshold is None else float(threshold)


def _tuples(value: Any) -> Any:
    """JSON lists back into the tuples the configs hold."""
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value


def _check_sequences(config_type: Any, overrides: dict[str, Any]) -> None:
    """``hidden_sizes=64`` is a mistake for ``hidden_sizes=[64]``: say so before building."""
    for field in dataclasses.fields(config_type):
        value = overrides.get(field.name)
        if (
            isinstance(field.default, tuple)
            and field.name in overrides
            and not isinstance(value, tuple)
        ):
            example = json.dumps(list(field.default)).replace(" ", "")
            raise _UsageError(
                f"--config {field.name}={json.dumps(value)}: {field.name} takes a list "
                f"like {field.name}={example}"
            )


def _build(settings: _RunSettings) -> Any:
    """The algorithm, placed on its devices, with every option checked; touches no disk."""
    import gymnasium as gym

    from jaxlearner.core.registry import algorithm_recipe

    recipe = algorithm_recipe(settings.algorithm)
    defaults = DEFAULTS.get(settings.algorithm)
    same_env = defaults is not None and settings.env == defaults.env
    config = {**(defaults.config if same_env else {}), **settings.config}
    try:
        env = gym.make(settings.env)
    except gym.error.Error as error:
        raise _UsageError(str(error)) from None
    try:
        algorithm = recipe.build(env.observation_space, env.action_space, config)
    except (TypeError, ValueError) as error:
        raise _UsageError(str(error)) from None
    finally:
        env.close()
    devices = _devices(settings.devices)
    if devices is not None:
        try:
            algorithm = algorithm.with_learner(algorithm.learner.on(devices))
        except ValueError as error:
            raise _UsageError(f"--devices {settings.devices}: {error}") from None
    _check_dataset(algorithm, settings)
    if _is_offline(algorithm):
        return algorithm
    try:
        algorithm.rollout_steps(settings.num_envs)
    except ValueError as error:
        raise _UsageError(f"--num-envs {settings.num_envs}: {error}") from None
    return algorithm


def _is_offline(algorithm: Any) -> bool:
    from jaxlearner.algorithms import OfflineAlgorithm

    return isinstance(algorithm, OfflineAlgorithm)


_DATASETS: dict[str, Any] = {}


def _load_dataset(text: str) -> Any:
    """The dataset ``--dataset`` names (a folder, or ``minari:ID``), loaded once."""
    from jaxlearner.training.record import read_dataset

    if text not in _DATASETS:
        try:
            _DATASETS[text] = read_dataset(text)
        except (ImportError, OSError, TypeError, ValueError) as error:
            raise _UsageError(f"--dataset {text}: {error}") from None
    return _DATASETS[text]


def _check_dataset(algorithm: Any, settings: _RunSettings) -> None:
    """An offline algorithm has a dataset that fits it and the environment; others have none."""
    from jaxlearner.training.record import check_offline_dataset

    dataset = None if settings.dataset is None else _load_dataset(settings.dataset)
    try:
        check_offline_dataset(algorithm, dataset, settings.env)
    except ValueError as error:
        if dataset is None or not _is_offline(algorithm):  # no dataset, or none belongs here
            raise _UsageError(str(error)) from None
        raise _UsageError(f"--dataset {settings.dataset}: {error}") from None


def _check_tensorboard(args: argparse.Namespace) -> None:
    if args.tensorboard:
        from jaxlearner.training.loggers import require_tensorboard

        try:
            require_tensorboard()
        except ImportError:
            raise _UsageError(
                "--tensorboard needs tensorboardX: pip install 'jaxlearner[tensorboard]'"
            ) from None


class _Interrupted:
    """Turns SIGINT and SIGTERM into ``trainer.request_stop()``; a second signal aborts."""

    def __init__(self, trainer: Any) -> None:
        self.signal: int | None = None
        self._trainer = trainer
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Interrupted:
        for number in (signal.SIGINT, signal.SIGTERM):
            self._previous[number] = signal.signal(number, self._handle)
        return self

    def _handle(self, number: int, frame: Any) -> None:
        if self.signal is not None:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now, without saving
        self.signal = number
        self._trainer.request_stop()
        print(
            f"\n{signal.Signals(number).name}: stopping after this iteration (again to abort)",
            file=sys.stderr,
            flush=True,
        )

    def __exit__(self, *exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)


def _ranked(stats: dict[str, float]) -> dict[str, float]:
    """Stats to save a step with: a step saved without an evaluation ranks last."""
    return {"eval/return_mean": math.nan, **stats}


def _train(args: argparse.Namespace) -> int:
    import jaxlearner as jl

    settings = _settings(args)
    algorithm = _build(settings)
    _check_tensorboard(args)
    name, env_id = settings.algorithm, settings.env
    if args.resume is not None:
        out = pathlib.Path(args.resume)
        with jl.CheckpointManager(out / CHECKPOINTS, read_only=True) as existing:
            if existing.latest_step() is None:
                raise _UsageError(f"--resume {out}: {out / CHECKPOINTS} holds no checkpoint")
    else:
        out = pathlib.Path(args.out or _default_run_name(name, env_id))
        out.mkdir(parents=True, exist_ok=True)
        record = {
            **dataclasses.asdict(settings),
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
        }
        (out / RUN_FILE).write_text(json.dumps(record, indent=2) + "\n")

    checkpoint = jl.CheckpointManager(
        out / CHECKPOINTS, max_to_keep=3, keep_best=1, best_metric="eval/return_mean"
    )
    trainer = None
    try:
        if args.resume is not None:
            _truncate_metrics(out / METRICS_FILE, checkpoint.latest_step())
        writers: list[Any] = [
            jl.loggers.ConsoleWriter(every=1),
            jl.loggers.JSONLinesWriter(out / METRICS_FILE),
        ]
        if args.tensorboard:
            writers.append(jl.loggers.TensorBoardWriter(out / "tensorboard"))
        progress = False if args.no_progress else None
        if _is_offline(algorithm):
            trainer = jl.OfflineTrainer(
                algorithm,
                _load_dataset(settings.dataset),
                env_id,
                seed=settings.seed,
                writers=writers,
                progress=progress,
            )
        else:
            trainer = jl.Trainer(
                algorithm,
                env_id,
                num_envs=settings.num_envs,
                seed=settings.seed,
                writers=writers,
                progress=progress,
            )
        if args.resume is not None:
            trainer.restore(checkpoint)  # the steps it saves are the iterations
        return _run(trainer, checkpoint, settings, out, args)
    finally:
        checkpoint.close()
        if trainer is not None:
            trainer.close()


def _run(
    trainer: Any, checkpoint: Any, settings: _RunSettings, out: pathlib.Path, args: Any
) -> int:
    """Trains until a stop condition holds or a signal arrives; saves; prints where it all went."""
    import jaxlearner as jl

    conditions: list[Any] = [jl.MaxEnvSteps(settings.max_steps)]
    if settings.stop_reward is not None:
        # Two evaluations in a row, so one lucky evaluation does not end the run.
        conditions.append(jl.RewardBound(settings.stop_reward, times=2))
    every = settings.checkpoint_every_steps
    evaluations = [r["eval/return_mean"] for r in trainer.history if "eval/return_mean" in r]
    best = max(evaluations, default=-math.inf)
    next_save = (trainer.counters.env_steps // every + 1) * every

    def save(stats: dict[str, float]) -> None:
        # Every `every` env steps, and at each new best evaluation (which keep_best keeps).
        nonlocal best, next_save
        evaluation = stats.get("eval/return_mean", -math.inf)
        if evaluation > best or trainer.counters.env_steps >= next_save:
            best = max(best, evaluation)
            next_save = (trainer.counters.env_steps // every + 1) * every
            trainer.save(checkpoint, metrics=_ranked(stats))

    where = f"{settings.algorithm} on {settings.env} with {settings.num_envs} envs"
    steps = "env steps"
    if settings.dataset is not None:
        where = f"{settings.algorithm} on dataset {settings.dataset}, evaluated on {settings.env}"
        steps = "dataset rows"
    if args.resume is None:
        print(f"Training {where}; run folder {out} (the first iteration compiles)", flush=True)
    elif jl.AnyOf(*conditions)(trainer.history):
        print(f"{out} is complete: its stop conditions hold; nothing to resume", flush=True)
        return 0
    else:
        print(
            f"Resuming {where} from {steps[:-1]} {trainer.counters.env_steps}; run folder {out}",
            flush=True,
        )
    with _Interrupted(trainer) as interrupted:
        trainer.run(conditions, steps_per_eval=settings.eval_every, on_iteration=save)
        last = trainer.history[-1] if trainer.history else {}
        if interrupted.signal is None and "eval/return_mean" not in last:
            last.update({f"eval/{k}": v for k, v in trainer.eval().items()})
        if checkpoint.latest_step() != trainer.counters.iteration:
            trainer.save(checkpoint, metrics=_ranked(last))
        checkpoint.wait_until_finished()
    if interrupted.signal is not None:
        print(
            f"Stopped by {signal.Signals(interrupted.signal).name} after "
            f"{trainer.counters.env_steps} {steps}; checkpoint {trainer.counters.iteration} "
            f"saved in {out / CHECKPOINTS}; continue with: jaxlearner train --resume {out}",
            flush=True,
        )
        return 128 + interrupted.signal
    reached = last.get("eval/return_mean", float("nan"))
    tensorboard = f"\n  tensorboard: tensorboard --logdir {out / 'tensorboard'}"
    print(
        f"Done: {trainer.counters.env_steps} {steps} in {trainer.counters.time_total_s:.1f} s, "
        f"evaluation return {reached:.1f}.\n"
        f"  metrics:     {out / METRICS_FILE}\n"
        f"  checkpoints: {out / CHECKPOINTS}\n"
        f"  evaluate:    jaxlearner eval {out}\n"
        f"  plot:        jaxlearner plot {out}" + (tensorboard if args.tensorboard else ""),
        flush=True,
    )
    return 0


def _truncate_metrics(path: pathlib.Path, iteration: int) -> None:
    """Drops records past the restored checkpoint (a run killed without one wrote them)."""
    if not path.is_file():
        return
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= iteration]
    if len(kept) != len(lines):
        path.write_text("".join(kept), encoding="utf-8")


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
    if video is not None or args.render is not None:
        _check_rendering(info["env"])
    step = _checkpoint_step(run, args)
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


def _checkpoint_step(run: pathlib.Path, args: argparse.Namespace) -> int:
    """The step ``--best`` or ``--step`` names, else the latest; checked to exist."""
    import jaxlearner as jl

    options: dict[str, Any] = {"read_only": True}
    if args.best:
        options["best_metric"] = "eval/return_mean"
    with jl.CheckpointManager(run / CHECKPOINTS, **options) as checkpoint:
        if checkpoint.latest_step() is None:
            raise _UsageError(f"{run / CHECKPOINTS} holds no checkpoint")
        step = checkpoint.best_step() if args.best else args.step
        if step is not None and step not in checkpoint.all_steps():
            raise _UsageError(f"no checkpoint step {step}; steps: {list(checkpoint.all_steps())}")
        return checkpoint.latest_step() if step is None else step


def _record(args: argparse.Namespace) -> int:
    """Records ``--episodes`` episodes of a run's policy into the dataset folder ``--out``."""
    from jaxlearner.training.record import record_run

    run, info = _read_run(args.run)
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
        raise _UsageError(f"--out {error}") from None
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
            raise _UsageError("--render rgb_array records frames: give --video PATH (.gif/.mp4)")
        return None
    if args.render == "human":
        raise _UsageError("--video records rgb_array frames; drop --render human")
    try:
        path = check_video_path(args.video)
    except ValueError as error:
        raise _UsageError(str(error)) from None
    if path.suffix.lower() == ".mp4":
        try:
            require_mp4_writer()
        except ImportError:
            raise _UsageError(
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
        raise _UsageError(f"{error} (pip install 'jaxlearner[video]')") from None
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
