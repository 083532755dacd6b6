"""``jaxlearner train``: a run folder, the training loop, its checkpoints and interruptions.

Ctrl-C (SIGINT) or SIGTERM finishes the iteration in flight, saves a checkpoint,
prints how to continue (``jaxlearner train --resume RUN``) and exits with status
130 or 143. A loss or params gone NaN or infinite stops the run with one line
naming the iteration, the module and the metric, and exit status 1; the NaN state
is never saved, so the newest checkpoint is the last finite one. ``--resume``
restores the newest checkpoint and drops the metrics written after it. When the newest
is damaged (said in one line), or ``--step N`` names an older one, the run goes on from
that step in a new folder beside it (``RUN-2``: its ``run.json``, its metrics up to the
step, the step itself, then the steps it saves), so nothing ``RUN`` holds is deleted
or changed; with no intact step it ends in one line, exit status 2.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import pathlib
import signal
import sys
import time
import warnings
from collections.abc import Callable
from types import FrameType
from typing import TypeAlias

from jaxlearner.algorithms.algorithm import AnyAlgorithm, OffPolicyAlgorithm
from jaxlearner.algorithms.config import config_to_json
from jaxlearner.anakin.envs.gymnax import is_gymnax
from jaxlearner.anakin.trainer import AnakinEngine, AnakinTrainer
from jaxlearner.checkpoint.manager import CheckpointManager
from jaxlearner.checkpoint.rebuild import restore
from jaxlearner.cli.checkpoint_choice import read_checkpoint
from jaxlearner.cli.options import TrainOptions
from jaxlearner.cli.run_folder import (
    CHECKPOINTS,
    METRICS_FILE,
    RUN_FILE,
    check_folder_path,
    default_run_name,
    new_run_folder,
    own_folder,
    read_metrics,
    read_run,
    sibling_run_folder,
)
from jaxlearner.cli.run_settings import (
    RunSettings,
    build,
    check_env_runners,
    check_resume_options,
    check_tensorboard,
    check_wandb,
    is_offline,
    load_dataset,
    run_settings,
)
from jaxlearner.cli.summary import (
    CommandTimes,
    budget_line,
    done_text,
    opening_line,
    schedules_line,
)
from jaxlearner.errors import NonFiniteError, SmallDatasetWarning
from jaxlearner.files import write_atomic
from jaxlearner.folder_lock import FolderLock
from jaxlearner.training.driver import Driver
from jaxlearner.training.env_runners import EnvRunnersConfig
from jaxlearner.training.offline.trainer import OfflineEngine, OfflineTrainer
from jaxlearner.training.outputs.loggers import (
    ConsoleWriter,
    JSONLinesWriter,
    TensorBoardWriter,
    Writer,
)
from jaxlearner.training.stop_conditions import AnyOf, MaxEnvSteps, RewardBound, StopCondition
from jaxlearner.training.trainer import EnvEngine, Trainer
from jaxlearner_cli import SIGNALS, Interrupted, command_started

AnyTrainer: TypeAlias = Driver[EnvEngine] | Driver[OfflineEngine] | Driver[AnakinEngine]
"""The trainer ``jaxlearner train`` runs: on rollouts, on a dataset (BC, MARWIL), or compiled
with a gymnax environment (``--env gymnax:NAME``)."""

_Handler: TypeAlias = Callable[[int, FrameType | None], object] | int | None


class _Interrupted:
    """Turns SIGINT and SIGTERM into ``trainer.request_stop()``; a second signal aborts."""

    def __init__(self, trainer: AnyTrainer) -> None:
        self.signal: int | None = None
        self._trainer = trainer
        self._previous: dict[int, _Handler] = {}

    def __enter__(self) -> _Interrupted:
        for number in SIGNALS:
            self._previous[number] = signal.signal(number, self._handle)
        # A signal the entry point's handler saw, but that something swallowed: stop now.
        early = [getattr(h, "received", None) for h in self._previous.values()]
        if any(early):
            self.__exit__()
            raise Interrupted(next(n for n in early if n))
        return self

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self.signal is not None:
            raise Interrupted(number)  # a second Ctrl-C: stop now, without saving
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


def train(options: TrainOptions) -> int:
    """Runs ``jaxlearner train``; returns the exit status.

    Raises:
      UsageError: for any option that does not fit, before the run folder is made.
    """
    started = _command_start()
    if options.resume is not None:
        return _resume(options, options.resume, started)
    if options.out is not None:
        check_folder_path("--out", options.out)  # before anything is built
    settings = run_settings(options)
    algorithm = build(settings)
    check_tensorboard(options.tensorboard)
    check_wandb(options.wandb)
    check_env_runners(options.runners, settings, algorithm)
    out = options.out or pathlib.Path(default_run_name(settings.algorithm, settings.env))
    check_folder_path("--out", out)
    # Never into a folder that holds a run; the default name is always a fresh one.
    out, lock = new_run_folder(out, beside=options.new_run or options.out is None)
    record = {
        **dataclasses.asdict(settings),
        "config": config_to_json(algorithm.config),  # resolved: every field
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    write_atomic(out / RUN_FILE, json.dumps(record, indent=2) + "\n")
    return _train_in(out, [lock], settings, algorithm, options, None, started)


def _command_start() -> float:
    """When the command began (``time.monotonic()``): the entry point's start, before JAX was
    imported; this call's, where ``jaxlearner.cli.main`` runs in-process."""
    started = command_started()
    return time.monotonic() if started is None else started


def _resume(options: TrainOptions, run: pathlib.Path, started: float) -> int:
    """``train --resume RUN``: from its newest intact step (or ``--step N``), in ``RUN`` itself
    when that is its newest step, else in a new folder beside it (``RUN-2``), so that no step
    of ``RUN``, damaged or newer, is deleted or changed."""
    check_resume_options(options)
    read_run(run)
    # One run per folder: refused while one is live; claimed once the resume writes there.
    locks = [own_folder(run, "--resume", claim=False)]
    try:
        chosen = read_checkpoint(
            run / CHECKPOINTS, "train", functools.partial(_read_resumable, run), step=options.step
        )
        settings = run_settings(options, chosen.step)
        algorithm = build(settings)
        check_tensorboard(options.tensorboard)
        check_wandb(options.wandb)
        check_env_runners(options.runners, settings, algorithm)
        out = run
        if chosen.newer:
            out, lock = sibling_run_folder(run, "--resume")
            locks.append(lock)
            _start_beside(run, out, chosen.step)
            which = "the newest intact one" if chosen.skipped else "as --step asks"
            print(
                f"jaxlearner train: resuming from checkpoint step {chosen.step}, {which}, in a "
                f"new run folder {out} ({run} is left as it is, its steps {list(chosen.newer)} "
                "included)",
                file=sys.stderr,
                flush=True,
            )
    except BaseException:
        for lock in locks:
            lock.release()
        raise
    if out == run:
        locks[0].claim()  # beside it, RUN is only read: its lock file stays as it was
    return _train_in(out, locks, settings, algorithm, options, (run, chosen.step), started)


def _read_resumable(run: pathlib.Path, step: int) -> None:
    """Reads a step in full as a resume does: its metadata, state and extra data, digests
    checked; raises :class:`~jaxlearner.errors.CheckpointCorruptedError` for damage."""
    restore(run / CHECKPOINTS, step)
    with CheckpointManager(run / CHECKPOINTS, read_only=True) as checkpoint:
        checkpoint.restore_extra(step)


def _start_beside(run: pathlib.Path, out: pathlib.Path, step: int) -> None:
    """``out``'s ``run.json`` (``run``'s, saying where it came from) and its metrics up to
    ``step``; ``run`` is only read."""
    _, info = read_run(run)
    info["resumed_from"] = {"run": str(run.absolute()), "step": step}
    write_atomic(out / RUN_FILE, json.dumps(info, indent=2) + "\n")
    kept = [r for r in read_metrics(run / METRICS_FILE) if r.get("step", 0) <= step]
    write_atomic(out / METRICS_FILE, "".join(json.dumps(record) + "\n" for record in kept))


def _train_in(
    out: pathlib.Path,
    locks: list[FolderLock],
    settings: RunSettings,
    algorithm: AnyAlgorithm,
    options: TrainOptions,
    resume: tuple[pathlib.Path, int] | None,
    started: float,
) -> int:
    """Trains into the run folder ``out`` (from step ``resume = (run, step)``, if given) and
    releases ``locks`` at the end; the closing line counts the command's time from
    ``started`` (``time.monotonic()``)."""
    checkpoint = CheckpointManager(
        out / CHECKPOINTS, max_to_keep=3, keep_best=1, best_metric="eval/return_mean"
    )
    trainer = None
    try:
        if resume is not None and resume[0] == out:
            _truncate_metrics(out / METRICS_FILE, resume[1])
        # Said before the trainer is built: building it compiles (seconds on a cold start).
        print(opening_line(settings, out, resume), flush=True)
        trainer = _trainer(settings, algorithm, _writers(out, options), options)
        if resume is not None:
            _restore(trainer, checkpoint, *resume, beside=resume[0] != out)
        status, summary = _run(trainer, checkpoint, settings, out, options)
        trainer.close()  # the console's last held-back line comes before the summary
        trainer = None
        if summary is not None:
            print(summary(time.monotonic() - started), flush=True)
        return status
    except NonFiniteError as error:
        print(_nonfinite_line(error, checkpoint, out), file=sys.stderr, flush=True)
        return 1
    finally:
        checkpoint.close()
        if trainer is not None:
            trainer.close()
        for lock in locks:
            lock.release()


def _restore(
    trainer: AnyTrainer,
    checkpoint: CheckpointManager,
    run: pathlib.Path,
    step: int,
    *,
    beside: bool,
) -> None:
    """The trainer from ``run``'s step. ``beside`` ``run``, in a new folder, that step is saved
    first in the new folder (``checkpoint``'s), so the new run holds the state it starts from."""
    if not beside:
        trainer.restore(checkpoint, step)  # the steps it saves are the iterations
        return
    with CheckpointManager(run / CHECKPOINTS, read_only=True) as source:
        trainer.restore(source, step)
    trainer.save(checkpoint, metrics=_ranked(trainer.history[-1] if trainer.history else {}))


def _nonfinite_line(error: NonFiniteError, checkpoint: CheckpointManager, out: pathlib.Path) -> str:
    """The one line a run gone non-finite ends with: where, what, and the checkpoint it kept.

    The trainer raised before the iteration's save, so the newest checkpoint (once
    any save in flight lands) is the last finite state.
    """
    checkpoint.wait_until_finished()
    newest = checkpoint.latest_step()
    kept = (
        "no checkpoint was saved before it"
        if newest is None
        else f"the newest checkpoint, {newest} in {out / CHECKPOINTS}, is the last finite state"
    )
    return f"jaxlearner train: stopped: {error}; {kept}"


def _writers(out: pathlib.Path, options: TrainOptions) -> list[Writer]:
    """The console, ``RUN/metrics.jsonl``, ``RUN/tensorboard`` with ``--tensorboard`` and a
    W&B run (named after the folder, its files in ``RUN/wandb``) with ``--wandb``; the
    trainer hands them its resolved config."""
    writers: list[Writer] = [ConsoleWriter(every=1), JSONLinesWriter(out / METRICS_FILE)]
    if options.tensorboard:
        writers.append(TensorBoardWriter(out / "tensorboard"))
    if options.wandb:
        from jaxlearner.training.outputs.wandb_writer import WandbWriter

        (out / "wandb").mkdir(exist_ok=True)
        writers.append(WandbWriter("jaxlearner", name=out.name, dir=out / "wandb"))
    return writers


def _trainer(
    settings: RunSettings, algorithm: AnyAlgorithm, writers: list[Writer], options: TrainOptions
) -> AnyTrainer:
    """The trainer of the run: on the dataset for BC and MARWIL, else on rollouts."""
    progress = None if options.progress else False
    if is_offline(algorithm):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SmallDatasetWarning)  # said below, in one line
            trainer = OfflineTrainer(
                algorithm,
                load_dataset(settings.dataset),
                settings.env,
                eval_episodes=settings.eval_episodes,
                seed=settings.seed,
                writers=writers,
                progress=progress,
            )
        rows = trainer.engine.algorithm.train_batch_size
        if rows < algorithm.train_batch_size:
            print(
                f"jaxlearner train: notice: the dataset holds {rows} rows, fewer than "
                f"{algorithm.name}'s train_batch_size ({algorithm.train_batch_size}): each "
                f"update trains on all {rows} (--config train_batch_size=N to choose fewer)",
                file=sys.stderr,
                flush=True,
            )
        return trainer
    if is_gymnax(settings.env):
        spi = algorithm.rollout_steps(settings.num_envs) * settings.num_envs
        return AnakinTrainer(
            algorithm,
            settings.env,
            num_envs=settings.num_envs,
            iterations_per_step=iterations_per_step(settings, spi),
            eval_episodes=settings.eval_episodes,
            seed=settings.seed,
            writers=writers,
            progress=progress,
        )
    runners = options.runners
    step = 1
    if isinstance(algorithm, OffPolicyAlgorithm):
        envs = settings.num_envs * max(1, runners.env_runners)
        spi = algorithm.rollout_steps(envs) * envs
        step = iterations_per_step(settings, spi, most_env_steps=OFF_POLICY_ROW_STEPS)
    return Trainer(
        algorithm,
        settings.env,
        num_envs=settings.num_envs,
        eval_episodes=settings.eval_episodes,
        seed=settings.seed,
        writers=writers,
        progress=progress,
        num_env_runners=runners.env_runners,
        env_runners=EnvRunnersConfig(
            cpus_per_env_runner=runners.cpus_per_env_runner,
            max_env_runner_restarts=runners.max_env_runner_restarts,
            ray_address=runners.ray_address,
        ),
        iterations_per_step=step,
    )


OFF_POLICY_ROW_STEPS = 1_000
"""The most env steps one row of an off-policy run on gymnasium envs covers (RLlib's DQN
iterations are at least 1,000 env steps): one row per rollout of one env step would cost
more than the step, and write a line per env step."""


def iterations_per_step(
    settings: RunSettings, steps_per_iteration: int, most_env_steps: int | None = None
) -> int:
    """Iterations per step (one row) of a run: the most that fit between two evaluations and
    two checkpoints (and in ``most_env_steps``, where given) and divide the run's iterations
    (so ``--max-steps`` is not overshot by more than one iteration) and those between two
    evaluations and two checkpoints, where those are whole; at least one. Anakin's
    are one compiled call each; an off-policy run's on gymnasium envs take at most
    :data:`OFF_POLICY_ROW_STEPS`.

    Example:
      >>> settings = RunSettings("ppo", "gymnax:Breakout-MinAtar", {}, 8, 0, None, 100_000,
      ...     eval_every=10_000, checkpoint_every_steps=20_000, devices=None)
      >>> iterations_per_step(settings, 1024)  # 98 iterations, 9 fit between evaluations
      7
    """
    every = (settings.eval_every, settings.checkpoint_every_steps)
    room = min(*every, most_env_steps or math.inf)
    fit = max(1, int(room // steps_per_iteration))
    total = math.ceil(settings.max_steps / steps_per_iteration)
    # Cadences of whole iterations stay exact: they fall between steps.
    whole = [n // steps_per_iteration for n in every if n % steps_per_iteration == 0]
    return max(k for k in range(1, fit + 1) if all(n % k == 0 for n in (total, *whole)))


def _run(
    trainer: AnyTrainer,
    checkpoint: CheckpointManager,
    settings: RunSettings,
    out: pathlib.Path,
    options: TrainOptions,
) -> tuple[int, Callable[[float], str] | None]:
    """Trains until a stop condition holds or a signal arrives; saves; returns the exit status
    and the closing summary of the command's wall time in seconds, which the caller prints
    once the writers are closed."""
    conditions = _stop_conditions(settings)
    save = _saver(trainer, checkpoint, settings.checkpoint_every_steps)
    steps = "env steps" if settings.dataset is None else "dataset rows"
    if options.resume is not None and AnyOf(*conditions)(trainer.history):
        print(f"{out} is complete: its stop conditions hold; nothing to resume", flush=True)
        return 0, None
    per_iteration = trainer.env_steps_per_iteration  # dataset rows, for the offline trainer
    start = trainer.counters.env_steps
    resumed = options.resume is not None
    print(budget_line(settings, per_iteration, steps, start, resumed=resumed), flush=True)
    if not resumed and settings.scaled_schedules is not None:
        print(schedules_line(settings), flush=True)
    seconds_before, rows_before = trainer.counters.time_total_s, len(trainer.history)
    with _Interrupted(trainer) as interrupted:
        trainer.run(
            conditions, steps_per_eval=settings.eval_every, on_iteration=save, evaluate_at_end=True
        )
        last = trainer.history[-1] if trainer.history else {}
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
        return 128 + interrupted.signal, None
    extra = [f"  tensorboard: tensorboard --logdir {out / 'tensorboard'}"] * options.tensorboard
    extra += [f"  wandb:       {out / 'wandb'} (wandb sync it when offline)"] * options.wandb
    history, env_steps = list(trainer.history), trainer.counters.env_steps
    training = trainer.counters.time_total_s - seconds_before  # this command's, not a resumed run's
    compiling = sum(row.get("time_compile_s", 0.0) for row in history[rows_before:])

    def summary(command_s: float) -> str:
        times = CommandTimes(command_s, training, compiling)
        return done_text(settings, history, env_steps, times, out, extra)

    return 0, summary


def _stop_conditions(settings: RunSettings) -> list[StopCondition]:
    """``--max-steps``, and ``--stop-reward`` reached by two evaluations in a row."""
    conditions: list[StopCondition] = [MaxEnvSteps(settings.max_steps)]
    if settings.stop_reward is not None:
        # Two evaluations in a row, so one lucky evaluation does not end the run.
        conditions.append(RewardBound(settings.stop_reward, times=2))
    return conditions


def _saver(
    trainer: AnyTrainer, checkpoint: CheckpointManager, every: int
) -> Callable[[dict[str, float]], None]:
    """The ``on_iteration`` callback that saves the trainer into ``checkpoint``."""
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

    return save


def _truncate_metrics(path: pathlib.Path, iteration: int) -> None:
    """Drops records past the restored checkpoint (a run killed without one wrote them) and a
    torn last line (one killed while writing it), replacing the file atomically."""
    if path.is_file():
        kept = [r for r in read_metrics(path) if r.get("step", 0) <= iteration]
        write_atomic(path, "".join(json.dumps(record) + "\n" for record in kept))
