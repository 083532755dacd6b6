"""``jaxlearner train``'s options turned into a checked run: :class:`RunSettings` and the algorithm.

:func:`run_settings` reads the :class:`~jaxlearner.cli.options.TrainOptions` (or
``RUN/run.json`` for ``--resume``) into a :class:`RunSettings`; :func:`build` turns
those into the algorithm with every option checked, before any run folder is made.
A mistake found on the way is a :class:`~jaxlearner.cli.run_folder.UsageError`,
which the command prints as one line (exit status 2).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import pathlib
from typing import Any, TypeGuard, cast

import gymnasium as gym

from jaxlearner.algorithms.algorithm import AnyAlgorithm, OfflineAlgorithm
from jaxlearner.algorithms.builtin import algorithm_names, algorithm_recipe
from jaxlearner.algorithms.config import parse_overrides
from jaxlearner.algorithms.presets import Origin, Preset, preset_rows
from jaxlearner.anakin.envs import make as make_jax_env
from jaxlearner.anakin.envs.gymnax import check_gymnax_id, is_gymnax
from jaxlearner.anakin.train import AnakinConfig, make_anakin
from jaxlearner.checkpoint.manager import CheckpointManager
from jaxlearner.cli.defaults import DEFAULTS
from jaxlearner.cli.options import Devices, RunnerOptions, TrainOptions, parse_devices
from jaxlearner.cli.run_folder import (
    CHECKPOINTS,
    RUN_FILE,
    UsageError,
    check_run_keys,
    read_run,
)
from jaxlearner.training.atari import is_atari, make_env, register_ale
from jaxlearner.training.driver import EVAL_EPISODES
from jaxlearner.training.env_runners import runs_asynchronously
from jaxlearner.training.offline.datasets import Dataset
from jaxlearner.training.offline.record import check_offline_dataset, read_dataset
from jaxlearner.training.outputs.loggers import require_tensorboard
from jaxlearner.training.outputs.wandb_writer import require_wandb


@dataclasses.dataclass(frozen=True)
class ScaledSchedules:
    """An RL Zoo preset's schedules stretched to ``--max-steps``, as RL Zoo's ``-n`` does
    (:meth:`~jaxlearner.algorithms.presets.Preset.with_budget`).

    Attributes:
      fields: the config fields whose schedules were stretched (none that ``--config`` set).
      preset_max_steps: the preset's own budget, which the schedules were written for.
    """

    fields: tuple[str, ...]
    preset_max_steps: int


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What ``run.json`` records: enough to rebuild the trainer for ``--resume``.

    Attributes:
      algorithm: the registered algorithm's name, lower case.
      env: the gymnasium environment id (an offline run's evaluation environment).
      config: the config fields as JSON values (schedules as tuples of pairs): the
        preset's fields with the ``--config`` overrides over them for a new run, the
        whole config of a resumed one. Typed ``Any`` since the algorithm, and so its
        config class, is chosen at run time.
      num_envs: sub-environments stepped together.
      seed: the run's seed.
      stop_reward: the evaluation return that ends the run, or ``None``.
      max_steps: the env steps (dataset rows) that end the run.
      eval_every: env steps between evaluations.
      checkpoint_every_steps: env steps between periodic checkpoints.
      devices: ``--devices`` as typed (``"all"`` or a count), or ``None``.
      dataset: an offline run's ``--dataset``.
      preset: the preset row the run started from (``"ppo/HalfCheetah-v5 (rl_zoo3)"``),
        or ``None``.
      eval_episodes: episodes per evaluation, one per evaluation environment.
      scaled_schedules: the preset's schedules stretched to ``max_steps``, or ``None``.
    """

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
    preset: str | None = None
    eval_episodes: int = EVAL_EPISODES
    scaled_schedules: ScaledSchedules | None = None


def run_settings(options: TrainOptions, step: int | None = None) -> RunSettings:
    """The run's settings from the command line, or from ``RUN/run.json`` for ``--resume``.

    Args:
      options: the command line.
      step: for ``--resume``, the checkpoint step it continues from, whose config the
        run takes (``None``: the latest step).

    Raises:
      UsageError: for an unknown algorithm or environment, a bad ``--config`` or
        ``--dataset``, or an option given beside ``--resume``.
    """
    if options.resume is not None:
        return _resumed_settings(options.resume, options, step)
    return _new_settings(options)


def check_resume_options(options: TrainOptions) -> None:
    """Raises unless ``--resume`` comes alone, or with ``--step`` and the run's local options
    (``--no-progress``, ``--tensorboard``, the compilation cache).

    Raises:
      UsageError: naming the options to drop.
    """
    given = [
        option
        for option, value in [
            ("ALGORITHM", options.algorithm),
            ("--env", options.env),
            ("--config", options.config or None),
            ("--stop-reward", options.stop_reward),
            ("--max-steps", options.max_steps),
            ("--out", options.out),
            ("--new-run", options.new_run or None),
            ("--devices", options.devices),
            ("--num-envs", options.num_envs),
            ("--eval-every", options.eval_every),
            ("--eval-episodes", options.eval_episodes),
            ("--checkpoint-every-steps", options.checkpoint_every_steps),
            ("--seed", options.seed),
            ("--dataset", options.dataset),
            ("--preset", None if options.preset == "auto" else options.preset),
            ("--keep-schedules", options.keep_schedules or None),
        ]
        if value is not None
    ]
    if given:
        raise UsageError(
            f"--resume continues a run with the settings in its {RUN_FILE}; drop {given}"
        )


def _resumed_settings(run: pathlib.Path, options: TrainOptions, step: int | None) -> RunSettings:
    """The settings ``RUN/run.json`` recorded, with the config the checkpoint was trained with."""
    check_resume_options(options)
    _, info = read_run(run)
    number = (int, float, type(None))
    types = {"config": dict, "num_envs": int, "seed": int, "max_steps": int, "stop_reward": number}
    check_run_keys(run, info, types)
    name, env_id = info["algorithm"], info["env"]
    defaults = DEFAULTS.get(name)
    # Older runs lack these keys (or hold null): the defaults they ran with.
    default_eval_every = defaults.eval_every if defaults else 10_000
    eval_every = _saved_count(run, info, "eval_every", default_eval_every)
    return RunSettings(
        algorithm=name,
        env=env_id,
        config=_saved_config(run, info["config"], step),
        num_envs=info["num_envs"],
        seed=info["seed"],
        stop_reward=info["stop_reward"],
        max_steps=info["max_steps"],
        eval_every=eval_every,
        checkpoint_every_steps=_saved_count(run, info, "checkpoint_every_steps", eval_every),
        devices=info.get("devices"),
        dataset=info.get("dataset"),
        preset=info.get("preset"),
        eval_episodes=_saved_count(run, info, "eval_episodes", EVAL_EPISODES),
    )


def _saved_count(run: pathlib.Path, info: dict[str, Any], key: str, default: int) -> int:
    """``run.json``'s positive int ``key``, or ``default`` where it is missing or null."""
    value = info.get(key)
    if value is None:
        return default
    if type(value) is not int or value < 1:
        raise UsageError(f"{run / RUN_FILE} is damaged: {key!r} is {value!r}")
    return value


def _new_settings(options: TrainOptions) -> RunSettings:
    """The settings of a new run: the command line over the environment's preset row."""
    if options.algorithm is None:
        raise UsageError("give an algorithm (" + ", ".join(algorithm_names()) + ") or --resume")
    name = options.algorithm.lower()
    if name not in algorithm_names():
        known = list(algorithm_names())
        raise UsageError(f"unknown algorithm {options.algorithm!r}; choose one of {known}")
    recipe = algorithm_recipe(name)
    defaults = DEFAULTS.get(name)
    dataset_env = None if options.dataset is None else load_dataset(options.dataset).env
    env_id = options.env or dataset_env or (defaults.env if defaults else None)
    if env_id is None:
        raise UsageError(f"{name} has no default environment; pass --env")
    try:
        overrides = parse_overrides(recipe.config_type, options.config)
    except ValueError as error:
        raise UsageError(str(error)) from None
    _check_sequences(recipe.config_type, overrides)
    row = _preset(name, env_id, options.preset)
    scaled = None
    if row is not None and options.max_steps not in (None, row.max_steps):
        stretched = row.with_budget(options.max_steps)  # which rows stretch: Preset's rule
        fields = [
            f for f in row.schedules if f not in overrides and stretched.config[f] != row.config[f]
        ]
        if fields and not options.keep_schedules:
            scaled = ScaledSchedules(tuple(fields), row.max_steps)
            row = stretched
    num_envs = options.num_envs or (row.num_envs if row else 8)
    stop_reward = None if options.stop_reward == "none" else options.stop_reward
    if options.stop_reward is None:
        same_env = defaults is not None and env_id == defaults.env
        stop_reward = defaults.stop_reward if same_env else _reward_threshold(env_id)
    eval_every = options.eval_every or (row.eval_every if row else 10_000)
    # The envs in one batch: synchronous Ray runners hand in theirs together (the command
    # line sets no EnvRunnersConfig.asynchronous, so the algorithm's default decides).
    runners = options.runners.env_runners
    together = runners and not runs_asynchronously(name)
    batch_envs = num_envs * runners if together else num_envs
    return RunSettings(
        algorithm=name,
        env=env_id,
        config=_resolved_config(recipe.config_type, row, overrides, batch_envs),
        num_envs=num_envs,
        seed=0 if options.seed is None else options.seed,
        stop_reward=stop_reward,
        max_steps=options.max_steps or (row.max_steps if row else 1_000_000),
        eval_every=eval_every,
        checkpoint_every_steps=options.checkpoint_every_steps or eval_every,
        devices=None if options.devices is None else str(options.devices),
        dataset=options.dataset,
        preset=row.name if row else None,
        eval_episodes=options.eval_episodes or EVAL_EPISODES,
        scaled_schedules=scaled,
    )


def _preset(algorithm: str, env_id: str, choice: str) -> Preset | None:
    """The row ``--preset`` picks: ``auto`` the environment's preferred one (or none), ``none``
    none, an origin that origin's (a usage error where it has none)."""
    if choice == "none":
        return None
    origin = None if choice == "auto" else cast(Origin, choice)
    rows = preset_rows(algorithm, env_id, origin)
    if rows or origin is None:
        return rows[0] if rows else None
    known = sorted(row.env_id for row in preset_rows(algorithm, origin=origin))
    raise UsageError(
        f"--preset {choice}: no {choice} preset for {algorithm} on {env_id}; "
        f"{algorithm} has {choice} presets for {known} ('jaxlearner presets {algorithm}')"
    )


def _resolved_config(
    config_type: type, row: Preset | None, overrides: dict[str, Any], batch_envs: int
) -> dict[str, Any]:
    """The preset's fields with the ``--config`` overrides over them.

    A config with ``num_envs_per_env_runner`` (reward normalization keeps one running return
    per environment) gets ``batch_envs``, the environments of one batch (``--num-envs``, times
    ``--env-runners`` for synchronous runners), unless ``--config`` sets it, so ``--num-envs``
    and ``--env-runners`` over a preset stay consistent.
    """
    config = {**(dict(row.config) if row else {}), **overrides}
    fields = {field.name for field in dataclasses.fields(config_type)}
    if "num_envs_per_env_runner" in fields and "num_envs_per_env_runner" not in overrides:
        config["num_envs_per_env_runner"] = batch_envs
    return config


def _saved_config(run: pathlib.Path, recorded: dict[str, Any], step: int | None) -> dict[str, Any]:
    """The whole config the run's checkpoint ``step`` (``None``: the latest) was trained with.

    ``run.json`` records only the ``--config`` overrides; the command line's
    defaults beneath them may have changed since (they did for PPO), so a
    resumed run takes its config from the learner recipe saved with the
    checkpoint, and from ``run.json`` only where there is none.
    """
    if not (run / CHECKPOINTS).is_dir():
        return {key: _tuples(value) for key, value in recorded.items()}
    with CheckpointManager(run / CHECKPOINTS, read_only=True) as checkpoint:
        step = checkpoint.latest_step() if step is None else step
        recipe = checkpoint.metadata(step).get("recipe") if step is not None else None
    config = recipe["config"] if recipe else recorded
    return {key: _tuples(value) for key, value in config.items()}


def _reward_threshold(env_id: str) -> float | None:
    """gymnasium's ``reward_threshold`` for the environment (``None`` where it has none, and for
    gymnax's)."""
    if is_gymnax(env_id):
        return None
    try:
        threshold = gym.spec(env_id).reward_threshold
    except gym.error.Error:
        return None  # an unknown id: gym.make says why, with suggestions
    return None if threshold is None else float(threshold)


def _tuples(value: Any) -> Any:
    """JSON lists back into the tuples the configs hold (``Any``: a JSON value in, and out)."""
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value


def _check_sequences(config_type: type, overrides: dict[str, Any]) -> None:
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


def build(settings: RunSettings) -> AnyAlgorithm:
    """The algorithm, placed on its devices, with every option checked; touches no disk.

    Raises:
      UsageError: for an unknown environment, a config the algorithm rejects, too
        many ``--devices``, a ``--dataset`` that does not fit, or a ``--num-envs``
        the batch does not split over.
    """
    check_env_extra(settings.env)
    if is_gymnax(settings.env):
        return _build_anakin(settings)
    try:
        env = make_env(settings.env)
    except gym.error.Error as error:
        if settings.preset is None:
            raise UsageError(str(error)) from None
        raise UsageError(
            f"preset {settings.preset} is for {settings.env!r}, which this gymnasium "
            f"({gym.__version__}) cannot make: {error}"
        ) from None
    try:
        algorithm = _build_algorithm(settings, env.observation_space, env.action_space)
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


def _build_algorithm(settings: RunSettings, observation_space: Any, action_space: Any) -> Any:
    """The algorithm of ``settings`` for these spaces; a config it rejects is a usage error."""
    recipe = algorithm_recipe(settings.algorithm)
    try:
        return recipe.build(observation_space, action_space, settings.config)
    except (TypeError, ValueError) as error:
        raise UsageError(str(error)) from None


def _build_anakin(settings: RunSettings) -> AnyAlgorithm:
    """The algorithm of a ``gymnax:`` run, checked as :func:`make_anakin` takes it (on one
    device, on rollouts, collecting with the current params)."""
    if settings.dataset is not None or settings.algorithm in ("bc", "marwil"):
        raise UsageError(
            f"{settings.algorithm} trains on a recorded dataset evaluated in gymnasium; gymnax "
            "environments (--env gymnax:NAME) train ppo, appo, dqn or sac on their own rollouts"
        )
    if settings.devices not in (None, "1"):
        raise UsageError(
            f"--devices {settings.devices}: a gymnax run is one compiled program on one device "
            "(jaxlearner.anakin.sweeps trains many seeds over devices); drop --devices"
        )
    env = make_jax_env(settings.env)
    algorithm = _build_algorithm(settings, env.observation_space, env.action_space)
    try:
        algorithm.rollout_steps(settings.num_envs)
    except ValueError as error:
        raise UsageError(f"--num-envs {settings.num_envs}: {error}") from None
    try:
        make_anakin(algorithm, env, AnakinConfig(num_envs=settings.num_envs))
    except ValueError as error:
        raise UsageError(f"{settings.env}: {error}") from None
    return algorithm


EXTRAS: dict[str, tuple[str, str]] = {
    "gymnasium.envs.mujoco": ("mujoco", "mujoco"),
    "gymnasium.envs.box2d": ("Box2D", "box2d"),  # LunarLander, BipedalWalker, CarRacing
}
"""Environments by entry-point package: the module they import and jaxlearner's extra."""


def check_env_extra(env_id: str) -> None:
    """A MuJoCo, Box2D, Atari or gymnax environment without its extra installed is one line
    naming the extra; so is an unknown gymnax name, with gymnax's names.

    Raises:
      UsageError: ``HalfCheetah-v5 needs mujoco, which is not installed: pip install
        "jaxlearner[mujoco]"``; ``LunarLander-v3 needs Box2D, which is not installed: pip
        install "jaxlearner[box2d]"``;
        ``ALE/Pong-v5 needs ale-py, which is not installed: pip install "jaxlearner[atari]"``;
        ``gymnax environments need gymnax, which is not installed: pip install
        "jaxlearner[gymnax]"``.
    """
    if is_atari(env_id):
        try:
            register_ale(env_id)
        except ImportError as error:
            raise UsageError(str(error)) from None
    if is_gymnax(env_id):
        try:
            check_gymnax_id(env_id)
        except (ImportError, ValueError) as error:
            raise UsageError(str(error)) from None
        return
    try:
        entry_point = gym.spec(env_id).entry_point
    except gym.error.Error:
        return  # an unknown id: gym.make says why, with suggestions
    for package, (module, extra) in EXTRAS.items():
        if isinstance(entry_point, str) and entry_point.startswith(package):
            try:
                importlib.import_module(module)
            except ImportError:
                install = f'pip install "jaxlearner[{extra}]"'
                raise UsageError(
                    f"{env_id} needs {module}, which is not installed: {install}"
                ) from None


def is_offline(algorithm: AnyAlgorithm) -> TypeGuard[OfflineAlgorithm]:
    """Whether the algorithm trains on a dataset (BC, MARWIL) rather than on rollouts."""
    return isinstance(algorithm, OfflineAlgorithm)


_DATASETS: dict[str, Dataset] = {}


def load_dataset(text: str) -> Dataset:
    """The dataset ``--dataset`` names (a folder, or ``minari:ID``), loaded once."""
    if text not in _DATASETS:
        try:
            _DATASETS[text] = read_dataset(text)
        except (ImportError, OSError, TypeError, ValueError) as error:
            raise UsageError(f"--dataset {text}: {error}") from None
    return _DATASETS[text]


def _check_dataset(algorithm: AnyAlgorithm, settings: RunSettings) -> None:
    """An offline algorithm has a dataset that fits it and the environment; others have none."""
    dataset = None if settings.dataset is None else load_dataset(settings.dataset)
    try:
        check_offline_dataset(algorithm, dataset, settings.env)
    except ValueError as error:
        if dataset is None or not is_offline(algorithm):  # no dataset, or none belongs here
            raise UsageError(str(error)) from None
        raise UsageError(f"--dataset {settings.dataset}: {error}") from None


def check_wandb(wandb: bool) -> None:
    """``--wandb`` without wandb is one line, before a run folder is made."""
    if wandb:
        try:
            require_wandb()
        except ImportError:
            raise UsageError("--wandb needs wandb: pip install 'jaxlearner[wandb]'") from None


def check_env_runners(
    runners: RunnerOptions, settings: RunSettings, algorithm: AnyAlgorithm
) -> None:
    """``--env-runners`` where they cannot run, or without Ray, is one line, before a run
    folder is made."""
    if runners.env_runners == 0:
        return
    if is_offline(algorithm):
        raise UsageError(
            f"--env-runners: {settings.algorithm} trains on a recorded dataset; env runners "
            "collect experience for the algorithms that act"
        )
    if is_gymnax(settings.env):
        raise UsageError(
            f"--env-runners: {settings.env} steps inside the compiled update on the learner's "
            "devices (Anakin); env runners step gymnasium environments"
        )
    if importlib.util.find_spec("ray") is None:
        raise UsageError("--env-runners needs Ray: pip install 'jaxlearner[ray]'")


def check_tensorboard(tensorboard: bool) -> None:
    """``--tensorboard`` without tensorboardX is one line, before a run folder is made."""
    if tensorboard:
        try:
            require_tensorboard()
        except ImportError:
            raise UsageError(
                "--tensorboard needs tensorboardX: pip install 'jaxlearner[tensorboard]'"
            ) from None


def _devices(text: str | None) -> Devices | None:
    """``run.json``'s ``devices`` (as typed) as a count or ``"all"``."""
    try:
        return parse_devices(text)
    except ValueError as error:
        raise UsageError(str(error)) from None
