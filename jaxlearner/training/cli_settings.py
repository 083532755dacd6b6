"""The ``jaxlearner train`` command line turned into a checked run, and the run folder's layout.

:func:`run_settings` reads the parsed arguments (or ``RUN/run.json`` for ``--resume``)
into a :class:`RunSettings`; :func:`build` turns those into the algorithm with
every option checked, before any run folder is made. A mistake found on the way is
a :class:`UsageError`, which the command prints as one line (exit status 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import pathlib
from typing import Any

from jaxlearner.training.cli_defaults import DEFAULTS

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS = "checkpoints"


class UsageError(Exception):
    """A mistake in the command line discovered after parsing."""


@dataclasses.dataclass(frozen=True)
class RunSettings:
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


def algorithm_names() -> list[str]:
    """The registered algorithms' names (the registry is imported here, not at start-up)."""
    from jaxlearner.core.registry import algorithm_names as registered_names

    return list(registered_names())


def run_settings(args: argparse.Namespace) -> RunSettings:
    """The run's settings from the command line, or from ``RUN/run.json`` for ``--resume``."""
    if args.resume is not None:
        return _resumed_settings(args)
    return _new_settings(args)


def _resumed_settings(args: argparse.Namespace) -> RunSettings:
    """The settings ``RUN/run.json`` recorded, with the config the checkpoint was trained with."""
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
        raise UsageError(
            f"--resume continues a run with the settings in its {RUN_FILE}; drop {given}"
        )
    _, info = read_run(args.resume)
    name, env_id = info["algorithm"], info["env"]
    defaults = DEFAULTS.get(name)
    eval_every = info.get("eval_every") or (defaults.eval_every if defaults else 10_000)
    return RunSettings(
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


def _new_settings(args: argparse.Namespace) -> RunSettings:
    """The settings of a new run: the command line over the algorithm's :data:`DEFAULTS`."""
    from jaxlearner.algorithms.config import parse_overrides
    from jaxlearner.core.registry import algorithm_recipe

    if args.algorithm is None:
        raise UsageError("give an algorithm (" + ", ".join(algorithm_names()) + ") or --resume")
    name = args.algorithm.lower()
    if name not in algorithm_names():
        raise UsageError(f"unknown algorithm {args.algorithm!r}; choose one of {algorithm_names()}")
    recipe = algorithm_recipe(name)
    defaults = DEFAULTS.get(name)
    dataset_env = None if args.dataset is None else load_dataset(args.dataset).env
    env_id = args.env or dataset_env or (defaults.env if defaults else None)
    if env_id is None:
        raise UsageError(f"{name} has no default environment; pass --env")
    try:
        overrides = parse_overrides(recipe.config_type, args.config)
    except ValueError as error:
        raise UsageError(str(error)) from None
    _check_sequences(recipe.config_type, overrides)
    same_env = defaults is not None and env_id == defaults.env
    stop_reward = args.stop_reward
    if stop_reward is None:
        stop_reward = defaults.stop_reward if same_env else _reward_threshold(env_id)
    eval_every = args.eval_every or (defaults.eval_every if defaults else 10_000)
    return RunSettings(
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
            raise UsageError(
                f"--config {field.name}={json.dumps(value)}: {field.name} takes a list "
                f"like {field.name}={example}"
            )


def build(settings: RunSettings) -> Any:
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
        raise UsageError(str(error)) from None
    try:
        algorithm = recipe.build(env.observation_space, env.action_space, config)
    except (TypeError, ValueError) as error:
        raise UsageError(str(error)) from None
    finally:
        env.close()
    devices = _devices(settings.devices)
    if devices is not None:
        try:
            algorithm = algorithm.with_learner(algorithm.learner.on(devices))
        except ValueError as error:
            raise UsageError(f"--devices {settings.devices}: {error}") from None
    _check_dataset(algorithm, settings)
    if is_offline(algorithm):
        return algorithm
    try:
        algorithm.rollout_steps(settings.num_envs)
    except ValueError as error:
        raise UsageError(f"--num-envs {settings.num_envs}: {error}") from None
    return algorithm


def is_offline(algorithm: Any) -> bool:
    """Whether the algorithm trains on a dataset (BC, MARWIL) rather than on rollouts."""
    from jaxlearner.algorithms import OfflineAlgorithm

    return isinstance(algorithm, OfflineAlgorithm)


_DATASETS: dict[str, Any] = {}


def load_dataset(text: str) -> Any:
    """The dataset ``--dataset`` names (a folder, or ``minari:ID``), loaded once."""
    from jaxlearner.training.record import read_dataset

    if text not in _DATASETS:
        try:
            _DATASETS[text] = read_dataset(text)
        except (ImportError, OSError, TypeError, ValueError) as error:
            raise UsageError(f"--dataset {text}: {error}") from None
    return _DATASETS[text]


def _check_dataset(algorithm: Any, settings: RunSettings) -> None:
    """An offline algorithm has a dataset that fits it and the environment; others have none."""
    from jaxlearner.training.record import check_offline_dataset

    dataset = None if settings.dataset is None else load_dataset(settings.dataset)
    try:
        check_offline_dataset(algorithm, dataset, settings.env)
    except ValueError as error:
        if dataset is None or not is_offline(algorithm):  # no dataset, or none belongs here
            raise UsageError(str(error)) from None
        raise UsageError(f"--dataset {settings.dataset}: {error}") from None


def check_tensorboard(args: argparse.Namespace) -> None:
    """``--tensorboard`` without tensorboardX is one line, before a run folder is made."""
    if args.tensorboard:
        from jaxlearner.training.loggers import require_tensorboard

        try:
            require_tensorboard()
        except ImportError:
            raise UsageError(
                "--tensorboard needs tensorboardX: pip install 'jaxlearner[tensorboard]'"
            ) from None


def _devices(text: str | None) -> Any:
    if text is None:
        return None
    if text == "all":
        return "all"
    try:
        count = int(text)
    except ValueError:
        raise UsageError(f"--devices takes 'all' or a number; got {text!r}") from None
    if count < 1:
        raise UsageError(f"--devices takes 'all' or a positive number; got {text!r}")
    return count


def default_run_name(algorithm: str, env_id: str) -> str:
    """``runs/ALGORITHM-ENV-TIME``, the run folder when ``--out`` is not given."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"runs/{algorithm}-{env_id}-{stamp}"


def read_run(path: str) -> tuple[pathlib.Path, dict[str, Any]]:
    """A run folder of ``jaxlearner train`` and its ``run.json``; a usage error if it is none."""
    run = pathlib.Path(path)
    if not (run / RUN_FILE).is_file():
        raise UsageError(f"{run} is not a run folder of 'jaxlearner train' (no {RUN_FILE})")
    return run, json.loads((run / RUN_FILE).read_text())
