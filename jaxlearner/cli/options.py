"""What each ``jaxlearner`` command was asked to do: typed, frozen, checked values.

:func:`jaxlearner.cli.parser.parse` turns the command line into one of
:class:`TrainOptions`, :class:`EvalOptions`, :class:`RecordOptions`,
:class:`PlotOptions` or :class:`PresetsOptions`; the commands receive that value
and nothing else. Each checks its numbers when it is made, so a value built in
Python (or a test) gets the same clear ``ValueError`` that the command line turns
into one line and exit status 2.

Example:
  >>> import pathlib
  >>> from jaxlearner.cli.options import EvalOptions
  >>> EvalOptions(run=pathlib.Path("runs/ppo"), episodes=0)
  Traceback (most recent call last):
  ValueError: --episodes: expected a positive integer, got 0
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from typing import Literal, TypeAlias

MAX_SEED = 2**63 - 1
"""The largest seed: ``jax.random.key`` takes a signed 64-bit integer."""

Devices: TypeAlias = int | Literal["all"]
"""``--devices``: a number of devices, or ``"all"``."""

PRESET_CHOICES: tuple[str, ...] = ("auto", "none", "rl_zoo3", "jaxlearner", "published")
"""``--preset``: the environment's preferred row (a row tuned here before RL Zoo's), none
(the library's defaults), or the row of one origin."""


def parse_devices(text: str | None) -> Devices | None:
    """``--devices`` as typed (or as ``run.json`` holds it): ``"all"``, a count, or ``None``.

    Raises:
      ValueError: for anything but ``"all"`` or a positive integer.
    """
    if text is None:
        return None
    if text == "all":
        return "all"
    try:
        count = int(text)
    except ValueError:
        raise ValueError(f"--devices takes 'all' or a number; got {text!r}") from None
    if count < 1:
        raise ValueError(f"--devices takes 'all' or a positive number; got {text!r}")
    return count


def check_positive_int(option: str, value: int | None) -> None:
    """Raises ``ValueError`` unless ``value`` is ``None`` or an integer of at least 1."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{option}: expected a positive integer, got {value!r}")


def check_seed(option: str, value: int | None) -> None:
    """Raises ``ValueError`` unless ``value`` is ``None`` or an integer in ``[0, MAX_SEED]``."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED
    ):
        raise ValueError(f"{option}: expected an integer from 0 to 2**63-1, got {value!r}")


def check_finite(option: str, value: float | None) -> None:
    """Raises ``ValueError`` unless ``value`` is ``None`` or a finite number."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    ):
        raise ValueError(f"{option}: expected a finite number, got {value!r}")


@dataclasses.dataclass(frozen=True)
class CacheOptions:
    """JAX's persistent compilation cache, for the commands that compile (train, eval, record).

    Attributes:
      folder: ``--compilation-cache DIR``; ``None`` for the default folder.
      disabled: ``--no-compilation-cache``.
    """

    folder: pathlib.Path | None = None
    disabled: bool = False


@dataclasses.dataclass(frozen=True)
class RunnerOptions:
    """Where ``train`` collects its rollouts: in its own process, or on Ray env runners.

    Attributes:
      env_runners: ``--env-runners N``: Ray actors stepping the environments (``0``: this
        process, the default).
      cpus_per_env_runner: ``--cpus-per-env-runner``: CPUs Ray reserves for each.
      max_env_runner_restarts: ``--max-env-runner-restarts``: failed runners replaced before
        the run stops with an error.
      ray_address: ``--ray-address``: a Ray cluster to join (default ``$RAY_ADDRESS``, else a
        local instance).

    Raises:
      ValueError: for a count below 0 or CPUs not above 0.
    """

    env_runners: int = 0
    cpus_per_env_runner: float = 1.0
    max_env_runner_restarts: int = 100
    ray_address: str | None = None

    def __post_init__(self) -> None:
        for option, value in (
            ("--env-runners", self.env_runners),
            ("--max-env-runner-restarts", self.max_env_runner_restarts),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{option}: expected an integer >= 0, got {value!r}")
        cpus = self.cpus_per_env_runner
        if not (isinstance(cpus, int | float) and math.isfinite(cpus) and cpus > 0):
            raise ValueError(f"--cpus-per-env-runner: expected a number > 0, got {cpus!r}")


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """``jaxlearner train``: a new run of ``algorithm``, or ``--resume`` of a stopped one.

    ``None`` means "not given": the algorithm's :data:`~jaxlearner.cli.defaults.DEFAULTS`
    (or, for ``--resume``, the run's ``run.json``) decide.

    Attributes:
      algorithm: the algorithm's name as typed (any case); ``None`` with ``resume``.
      resume: the run folder to continue.
      step: with ``resume``, the checkpoint step to continue from (``None``: the newest
        intact one).
      env: a gymnasium environment id.
      dataset: an offline algorithm's dataset: a folder or ``minari:ID``.
      config: the ``--config`` overrides as typed, ``KEY=VALUE`` each.
      stop_reward: the mean evaluation return that ends the run (finite), or ``"none"``:
        no reward stop (the run trains its whole ``max_steps``).
      max_steps: the env steps (dataset rows) that end the run.
      out: the run folder to write; one that holds a run already is refused unless
        ``new_run``.
      new_run: when ``out`` holds a run, leave it and write ``OUT-2`` (``OUT-3``, ...).
      devices: a number of devices, or ``"all"``.
      num_envs: sub-environments stepped together.
      eval_every: env steps between evaluations.
      eval_episodes: episodes per evaluation, one per evaluation environment.
      checkpoint_every_steps: env steps between periodic checkpoints.
      seed: the run's seed, from 0 to 2**63-1.
      progress: show the progress bar (``--no-progress`` turns it off).
      tensorboard: also log to ``RUN/tensorboard``.
      wandb: also log to Weights & Biases (its files under ``RUN/wandb``; ``WANDB_MODE``
        says online or offline).
      cache: the compilation cache.
      preset: which preset row to start from, one of :data:`PRESET_CHOICES`.
      keep_schedules: with ``max_steps`` other than an RL Zoo row's budget, keep the row's
        schedules as written instead of stretching them to ``max_steps``.
      runners: where rollouts are collected (``--env-runners``; with ``--resume`` too: the
        runners start fresh environments).

    Raises:
      ValueError: for a count below 1, a seed out of range, a stop reward that is
        NaN or infinite, a ``devices`` that is neither ``"all"`` nor positive, an
        unknown ``preset``, or a ``step`` without ``resume``.
    """

    algorithm: str | None = None
    resume: pathlib.Path | None = None
    step: int | None = None
    env: str | None = None
    dataset: str | None = None
    config: tuple[str, ...] = ()
    stop_reward: float | Literal["none"] | None = None
    max_steps: int | None = None
    out: pathlib.Path | None = None
    new_run: bool = False
    devices: Devices | None = None
    num_envs: int | None = None
    eval_every: int | None = None
    eval_episodes: int | None = None
    checkpoint_every_steps: int | None = None
    seed: int | None = None
    progress: bool = True
    tensorboard: bool = False
    wandb: bool = False
    cache: CacheOptions = CacheOptions()
    preset: str = "auto"
    keep_schedules: bool = False
    runners: RunnerOptions = RunnerOptions()

    def __post_init__(self) -> None:
        if self.preset not in PRESET_CHOICES:
            raise ValueError(
                f"--preset: expected one of {list(PRESET_CHOICES)}, got {self.preset!r}"
            )
        if self.stop_reward != "none":
            check_finite("--stop-reward", self.stop_reward)
        check_positive_int("--max-steps", self.max_steps)
        check_positive_int("--num-envs", self.num_envs)
        check_positive_int("--eval-every", self.eval_every)
        check_positive_int("--eval-episodes", self.eval_episodes)
        check_positive_int("--checkpoint-every-steps", self.checkpoint_every_steps)
        check_seed("--seed", self.seed)
        if self.devices is not None and self.devices != "all":
            check_positive_int("--devices", self.devices)
        if self.step is not None and self.resume is None:
            raise ValueError(
                f"--step {self.step} chooses the checkpoint --resume RUN continues from"
            )


@dataclasses.dataclass(frozen=True)
class EvalOptions:
    """``jaxlearner eval RUN``: evaluate a checkpoint; optionally play or record one episode.

    Attributes:
      run: the run folder written by ``jaxlearner train``.
      episodes: evaluation episodes, one per environment.
      best: the best checkpoint rather than the latest.
      step: a specific checkpoint step (``None``: the latest, or the best).
      seed: the evaluation's seed, from 0 to 2**63-1.
      render: also play one episode, ``"human"`` in a window or ``"rgb_array"`` into ``video``.
      video: a ``.gif`` or ``.mp4`` to write one episode into.
      cache: the compilation cache.

    Raises:
      ValueError: for ``episodes`` below 1, a seed out of range, or both ``best`` and ``step``.
    """

    run: pathlib.Path
    episodes: int = 10
    best: bool = False
    step: int | None = None
    seed: int = 0
    render: Literal["rgb_array", "human"] | None = None
    video: str | None = None
    cache: CacheOptions = CacheOptions()

    def __post_init__(self) -> None:
        check_positive_int("--episodes", self.episodes)
        check_seed("--seed", self.seed)
        _check_one_checkpoint(self.best, self.step)


@dataclasses.dataclass(frozen=True)
class RecordOptions:
    """``jaxlearner record RUN``: episodes of a run's policy into a new dataset folder.

    Attributes:
      run: the run folder written by ``jaxlearner train``.
      episodes: episodes to record.
      out: the dataset folder (never overwritten).
      explore: act with the sampling policy rather than the greedy one.
      best: the best checkpoint rather than the latest.
      step: a specific checkpoint step.
      num_envs: environments stepped together.
      seed: the recording's seed, from 0 to 2**63-1.
      cache: the compilation cache.

    Raises:
      ValueError: for ``episodes`` or ``num_envs`` below 1, a seed out of range, or
        both ``best`` and ``step``.
    """

    run: pathlib.Path
    episodes: int
    out: str
    explore: bool = False
    best: bool = False
    step: int | None = None
    num_envs: int = 8
    seed: int = 0
    cache: CacheOptions = CacheOptions()

    def __post_init__(self) -> None:
        check_positive_int("--episodes", self.episodes)
        check_positive_int("--num-envs", self.num_envs)
        check_seed("--seed", self.seed)
        _check_one_checkpoint(self.best, self.step)


@dataclasses.dataclass(frozen=True)
class PlotOptions:
    """``jaxlearner plot RUN...``: the runs' learning curves in one PNG.

    Attributes:
      runs: the run folders, at least one.
      out: the PNG to write (``None``: ``FIRST_RUN/learning_curve.png``).
      aggregate: group the runs by algorithm and environment (seeds of one setting) and
        draw each group's evaluation returns as their interquartile mean with a 95%
        stratified bootstrap interval, instead of one curve per run.
      table: print each group's final evaluation return as IQM, median, mean (and the
        optimality gap to each stop reward the runs name), each with its 95% bootstrap
        interval, instead of drawing.

    Raises:
      ValueError: for no run.
    """

    runs: tuple[str, ...]
    out: str | None = None
    aggregate: bool = False
    table: bool = False

    def __post_init__(self) -> None:
        if not self.runs:
            raise ValueError("plot: expected at least one run folder, got none")


@dataclasses.dataclass(frozen=True)
class PresetsOptions:
    """``jaxlearner presets [ALGORITHM]``: the preset rows, one algorithm's with their configs.

    Attributes:
      algorithm: the algorithm whose rows to show in full (any case); ``None``: every row,
        one line each.
    """

    algorithm: str | None = None


Options: TypeAlias = TrainOptions | EvalOptions | RecordOptions | PlotOptions | PresetsOptions
"""What :func:`~jaxlearner.cli.parser.parse` returns: one command's options."""


def _check_one_checkpoint(best: bool, step: int | None) -> None:
    if best and step is not None:
        raise ValueError(f"--best and --step {step} name two checkpoints; give one")
