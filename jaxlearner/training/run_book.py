"""RunBook: the bookkeeping every trainer holds, written once.

:class:`~jaxlearner.Trainer`, :class:`~jaxlearner.OfflineTrainer` and
:class:`~jaxlearner.MultiAgentTrainer` differ in how a step collects experience
and learns and in how they evaluate. The rest is the same for all three and
lives here, in one value each trainer holds and delegates to in one line: the
counters and the history of every iteration's stats, the writers they are
recorded to, the stop request (a flag a signal handler may set), ``run`` (the
shared :func:`~jaxlearner.training.run_loop.run_loop`: stop conditions and the
evaluation cadence), ``save`` and ``restore`` of that bookkeeping beside the
learner state and each trainer's own extra state, and ``close`` of the writers.
The trainers' members that only pass through to the book are written here once:
:func:`book_attribute` (``counters``, ``history``), :func:`trainer_request_stop`,
:data:`trainer_stop_requested`, :func:`trainer_run`, :data:`trainer_state` (and, for the
trainers of one algorithm, :data:`trainer_algorithm` and :data:`trainer_learner`); every
``step`` starts its stats with :func:`iteration_stats`.

A checkpoint step's ``extra`` JSON holds the counters under the book's
``counters_key`` (``"trainer"``, or ``"multi_agent_trainer"``), then
``"history"``, then the trainer's own entries (``"runner"``, ``"seed"``, ...);
its extra arrays are the trainer's (``"key"``, ``"buffer"``, ...).

The run loop itself stays in :mod:`~jaxlearner.training.run_loop`: it drives any
:class:`~jaxlearner.training.run_loop.Steppable` and is tested on its own.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar, final

import jax

from jaxlearner.algorithms.algorithm import ActFn
from jaxlearner.checkpoint import metadata as checkpoint_metadata
from jaxlearner.checkpoint.manager import CheckpointManager
from jaxlearner.core.learner import Learner
from jaxlearner.core.metrics import ALL_MODULES
from jaxlearner.core.state import LearnerState, ModuleState
from jaxlearner.errors import CheckpointCorruptedError, NonFiniteError
from jaxlearner.training.env_runner import EnvRunner, evaluate
from jaxlearner.training.history import History, from_columns, to_columns
from jaxlearner.training.outputs.loggers import Writer
from jaxlearner.training.outputs.run_config import ConfigWriter
from jaxlearner.training.run_loop import Steppable, evaluation_row, run_loop
from jaxlearner.training.stop_conditions import StopCondition
from jaxlearner.training.stop_signals import stop_on_signals


class Counters(Protocol):
    """A trainer's counters: a dataclass whose fields JSON can hold, with at least these."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    iteration: int
    env_steps: int
    time_total_s: float


CountersT = TypeVar("CountersT", bound=Counters)


@dataclasses.dataclass(frozen=True)
class RestoredRun:
    """What :meth:`RunBook.restore` read beside its own bookkeeping.

    Attributes:
      state: the learner state.
      extra: the step's extra JSON (the trainer's own entries among it).
      arrays: the step's extra arrays.
    """

    state: LearnerState
    extra: dict[str, Any]
    arrays: dict[str, Any]


@final
class RunBook(Generic[CountersT]):
    """What every trainer keeps: counters, history, writers, the stop request.

    Args:
      counters: the trainer's counters at the start (a dataclass; restored as
        ``type(counters)(**saved)``).
      owner: the trainer's name, for error messages (``"Trainer"``).
      counters_key: the key of the counters in a checkpoint's extra JSON.
      writers: metric writers every recorded iteration goes to.
      progress: show a progress bar in :meth:`run`; ``None`` shows one on a terminal.
      config: the run's config (:func:`~jaxlearner.training.outputs.run_config.run_config`),
        logged here once to each writer that takes it (a
        :class:`~jaxlearner.training.outputs.run_config.ConfigWriter`, such as MLflow's).

    Raises:
      TypeError: when ``counters`` is not a dataclass instance.

    Example:
      >>> from jaxlearner.training.trainer import TrainerCounters
      >>> book = RunBook(TrainerCounters(), owner="Trainer")
      >>> book.counters.iteration += 1
      >>> book.record({"iteration": 1.0})
      >>> book.history
      [{'iteration': 1.0}]
    """

    def __init__(
        self,
        counters: CountersT,
        *,
        owner: str,
        counters_key: str = "trainer",
        writers: Sequence[Writer] = (),
        progress: bool | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        if not dataclasses.is_dataclass(counters) or isinstance(counters, type):
            raise TypeError(
                f"RunBook's counters must be a dataclass instance; got {type(counters).__name__}."
            )
        self.counters: CountersT = counters
        self.history: History = History()
        self.stop_requested = False
        self._owner, self._counters_key = owner, counters_key
        self._writers, self._progress = tuple(writers), progress
        for writer in self._writers:
            if config is not None and isinstance(writer, ConfigWriter):
                writer.log_config(config)

    def request_stop(self) -> None:
        """Asks :meth:`run` to return once the iteration in flight is done.

        Only sets a flag, so a signal handler may call it.
        """
        self.stop_requested = True

    def record(self, stats: dict[str, float]) -> None:
        """Appends one iteration's stats to :attr:`history` (this same dict: the run loop
        joins evaluations to it), writes them at the iteration's index, then checks them.

        Raises:
          NonFiniteError: when a module's ``nonfinite`` metric is set (its loss or params
            went NaN/Inf in this iteration's update); the stats are recorded first.
        """
        self.history.append(stats)
        for writer in self._writers:
            writer.write(self.counters.iteration, stats)
        check_finite(stats, self.counters.iteration)

    def run(
        self,
        trainer: Steppable,
        stop_conditions: StopCondition | Sequence[StopCondition] = (),
        **options: Any,
    ) -> list[dict[str, float]]:
        """Clears the stop request and runs :func:`~jaxlearner.training.run_loop.run_loop`,
        with SIGINT and SIGTERM asking it to stop where nobody else handles them
        (:func:`~jaxlearner.training.stop_signals.stop_on_signals`).

        Args:
          trainer: the trainer holding this book (its ``step`` and ``eval`` run).
          stop_conditions: as :meth:`jaxlearner.Trainer.run`.
          **options: ``run_loop``'s ``steps_per_eval``, ``max_iterations``,
            ``on_iteration``, ``evaluate_at_end`` and ``eval_every_iterations``, as
            :func:`trainer_run` documents them.

        Returns:
          The stats of the iterations this call ran.
        """
        self.stop_requested = False
        with stop_on_signals(self):
            # The book writes each evaluation itself (write_evaluation): no writers here.
            return run_loop(trainer, (), stop_conditions, progress=self._progress, **options)

    def save(
        self,
        checkpoint: CheckpointManager,
        state: LearnerState,
        learner: Learner,
        extra: Mapping[str, Any],
        arrays: Mapping[str, Any],
        metrics: Mapping[str, Any] | None = None,
    ) -> int:
        """Saves ``state`` with the counters, the history and the trainer's own ``extra``
        JSON and extra ``arrays``, at the iteration count.

        Args:
          checkpoint: the manager to save with.
          state: the learner state.
          learner: the learner ``state`` belongs to.
          extra: the trainer's own JSON entries, saved after ``counters_key`` and
            ``"history"``.
          arrays: the trainer's extra arrays, at least one (its key; a replay
            buffer, ...): :meth:`restore` takes a step without them for a plain
            learner checkpoint.
          metrics: metrics to rank the step by (default: the last iteration's stats).

        Returns:
          The step saved (the iteration count).
        """
        step = self.counters.iteration
        if metrics is None:
            metrics = self.history[-1] if self.history else {}
        if "history" in arrays:
            raise ValueError("A trainer's own extra arrays cannot be named 'history'.")
        keys, values, present = to_columns(self.history)
        saved = {
            self._counters_key: dataclasses.asdict(self.counters),
            "history": {"keys": keys, "length": len(self.history)},  # arrays: [length, keys]
            **extra,
        }
        columns = {"history": {"values": values, "present": present}} if self.history else {}
        checkpoint.save(
            step,
            state,
            learner,
            metrics=dict(metrics),
            extra=saved,
            extra_arrays={**arrays, **columns},
        )
        return step

    def restore(
        self,
        checkpoint: CheckpointManager,
        learner: Learner,
        step: int | None = None,
        check: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> RestoredRun:
        """Reads a step saved by :meth:`save` (default: the latest) and takes back its counters
        and history.

        Args:
          checkpoint: the manager to restore from.
          learner: the learner to restore the state for.
          step: the step (default: the latest).
          check: called with the step's extra JSON before anything changes; raises
            to refuse the step (e.g. one trained on another dataset).

        Returns:
          The learner state and the step's extra JSON and arrays, for the
          trainer to take back its own state from.

        Raises:
          ValueError: when the step holds a learner state but no state of this
            book's trainer, or ``check`` refuses it.
        """
        state = checkpoint.restore(learner, step)
        extra, arrays = checkpoint.restore_extra(step)
        if not isinstance(extra, dict) or self._counters_key not in extra or arrays is None:
            raise ValueError(
                f"This checkpoint step holds a learner state but no trainer state (its extra data "
                f"has no {self._counters_key!r}); restore it with checkpoint.restore(learner) and "
                f"pass state= to the {self._owner} instead."
            )
        if check is not None:
            check(extra)
        self.counters = type(self.counters)(**extra[self._counters_key])
        arrays = dict(arrays)
        columns = arrays.pop("history", None)
        self.history = History(_saved_history(extra.get("history", []), columns))
        return RestoredRun(state, extra, arrays)

    def evaluate(
        self,
        runner: EnvRunner,
        policy: ActFn,
        module: ModuleState,
        key: jax.Array,
        seed: int,
        start: float,
    ) -> dict[str, float]:
        """One evaluation: :func:`~jaxlearner.training.env_runner.evaluate` of ``policy`` in
        ``runner``, its envs reset with ``seed + 10_000 + iteration`` (fresh episodes each
        time, never the training envs' seeds); the seconds since ``start`` are counted in
        ``counters.time_total_s``.

        Returns:
          ``{"return_mean", "return_min", "return_max", "length_mean", "episodes"}``.
        """
        seed = seed + 10_000 + self.counters.iteration
        results = evaluate(runner, policy, module, key, seed=seed)
        self.counters.time_total_s += time.perf_counter() - start
        self.write_evaluation(results)
        return results

    def write_evaluation(self, results: Mapping[str, float]) -> None:
        """Writes an evaluation's results as ``{"eval/...": ..., "env_steps", "iteration"}``
        at the current iteration to the writers: every evaluation, whether ``run``'s
        schedule or a direct ``trainer.eval()`` made it (rl8 logs each one)."""
        row = evaluation_row(results, self.counters.env_steps, self.counters.iteration)
        for writer in self._writers:
            writer.write(self.counters.iteration, row)

    def close(self) -> None:
        """Closes the writers."""
        for writer in self._writers:
            writer.close()


def _saved_history(saved: Any, columns: Mapping[str, Any] | None) -> list[dict[str, float]]:
    """The history a step holds: ``{"keys", "length"}`` beside the arrays ``columns``, or a
    JSON list of dicts (steps saved before the history became arrays)."""
    if isinstance(saved, list):
        return checkpoint_metadata.history_from_json(saved)
    length, keys = saved["length"], saved["keys"]
    shape = None if columns is None else tuple(columns["values"].shape)
    if length and shape != (length, len(keys)):
        raise CheckpointCorruptedError(
            f"The step's history has {length} iterations of {len(keys)} stats, but its arrays "
            f"hold {'none' if shape is None else shape}."
        )
    return from_columns(keys, columns["values"], columns["present"]) if length else []


def book_attribute(name: str, doc: str) -> property:
    """A trainer attribute kept by its :class:`RunBook` (``trainer._book``): read and
    assigned through the book, documented with ``doc``. The one line a trainer writes for
    its ``counters`` and ``history``.

    Example:
      >>> class MyTrainer:                                          # doctest: +SKIP
      ...     counters = book_attribute("counters", "The run's progress.")
    """
    return property(
        lambda trainer: getattr(trainer._book, name),
        lambda trainer, value: setattr(trainer._book, name, value),
        doc=doc,
    )


def trainer_request_stop(trainer: Any) -> None:
    """Asks :meth:`run` to return once the iteration in flight is done.

    Only sets a flag, so a signal handler may call it: the command line's
    Ctrl-C handler does, then saves a checkpoint to resume from.

    Example:
      >>> signal.signal(signal.SIGINT, lambda *_: trainer.request_stop())  # doctest: +SKIP
    """
    trainer._book.request_stop()


trainer_stop_requested = property(
    lambda trainer: trainer._book.stop_requested,
    doc="Whether :meth:`request_stop` was called since :meth:`run` last started.",
)
"""A trainer's ``stop_requested``, read from its book."""


def trainer_run(
    trainer: Any,
    stop_conditions: StopCondition | Sequence[StopCondition] = (),
    steps_per_eval: int | None = None,
    max_iterations: int | None = None,
    on_iteration: Callable[[dict[str, float]], None] | None = None,
    evaluate_at_end: bool = False,
    eval_every_iterations: int | None = None,
) -> list[dict[str, float]]:
    """Steps until a stop condition holds; evaluates every ``steps_per_eval`` env steps.

    The ``run`` of every trainer (its book's :meth:`RunBook.run` over the trainer's own
    ``step`` and ``eval``); the offline trainer counts dataset rows as env steps. With no
    stop condition and no ``max_iterations`` it trains until :meth:`request_stop`, Ctrl-C
    or SIGTERM (rl8's trainer runs until killed): while it runs, those signals ask it to
    stop after the iteration in flight, unless the program has its own handlers; save
    afterwards (``trainer.save(checkpoint)``) or in ``on_iteration``.

    Args:
      stop_conditions: a condition or a list (any of them stops the run).
      steps_per_eval: env steps between evaluations (``None``: no
        evaluation), counted from the last evaluation in :attr:`history`, so
        a restored trainer keeps the schedule of the run it continues; results
        join the iteration's stats as ``"eval/..."``.
      max_iterations: a hard bound on iterations, a safety net.
      on_iteration: called with each iteration's stats (e.g. to save a
        checkpoint).
      evaluate_at_end: also evaluate the last iteration (the one after which a stop
        condition holds) when no scheduled evaluation fell on it, before
        ``on_iteration`` sees its stats, so the last row and a checkpoint saved from it
        carry an evaluation; not after :meth:`request_stop`. ``jaxlearner train`` sets it.
      eval_every_iterations: also evaluate every this many iterations (rl8's
        ``steps_per_eval`` unit), beside or instead of ``steps_per_eval``.

    Returns:
      The stats of the iterations this call ran; fewer than the stop
      conditions ask for when :meth:`request_stop` was called (the
      iteration in flight then completes, evaluation and ``on_iteration``
      included, and :attr:`stop_requested` stays true).

    Raises:
      ValueError: for an evaluation cadence that is not a positive int.

    Example:
      >>> trainer.run([jl.RewardBound(475.0)], steps_per_eval=20_000)  # doctest: +SKIP
      >>> trainer.run(eval_every_iterations=10)  # until Ctrl-C              # doctest: +SKIP
    """
    return trainer._book.run(
        trainer,
        stop_conditions,
        steps_per_eval=steps_per_eval,
        max_iterations=max_iterations,
        on_iteration=on_iteration,
        evaluate_at_end=evaluate_at_end,
        eval_every_iterations=eval_every_iterations,
    )


trainer_algorithm = property(
    lambda trainer: trainer._algorithm,
    doc="The algorithm being trained (its learner, act functions and config).",
)
"""A trainer's ``algorithm`` (``trainer._algorithm``)."""

trainer_learner = property(
    lambda trainer: trainer._algorithm.learner,
    doc="The learner being trained, the algorithm's.",
)
"""A trainer's ``learner``, its algorithm's."""

trainer_state = property(
    lambda trainer: trainer._state,
    doc="The current learner state (replicated over the learner's mesh, if it has one).",
)
"""A trainer's ``state``: the learner state it holds (``trainer._state``)."""


def iteration_stats(
    counters: Counters,
    env_steps: int,
    elapsed: float,
    counts: Mapping[str, float],
    compiling: float = 0.0,
) -> dict[str, float]:
    """The stats every trainer's ``step`` starts with, in this order: ``iteration``,
    ``env_steps`` (lifetime), the trainer's own ``counts`` (episodes, agent steps, ...),
    ``env_steps_per_s`` (this iteration's ``env_steps`` over ``elapsed`` less the
    ``compiling`` seconds within it, so an iteration that compiles does not read 1-10),
    ``time_this_iter_s`` (all of it), ``time_compile_s`` (JAX's tracing and compiling in
    it, :mod:`~jaxlearner.training.compile_clock`) and ``time_total_s``.

    Example:
      >>> from jaxlearner.training.trainer import TrainerCounters
      >>> iteration_stats(TrainerCounters(iteration=1, env_steps=8), 8, 2.0, {})["env_steps_per_s"]
      4.0
    """
    return {
        "iteration": float(counters.iteration),
        "env_steps": float(counters.env_steps),
        **counts,
        "env_steps_per_s": env_steps / max(elapsed - compiling, 1e-9),
        "time_this_iter_s": elapsed,
        "time_compile_s": compiling,
        "time_total_s": counters.time_total_s,
    }


def check_finite(stats: Mapping[str, float], iteration: int) -> None:
    """Raises when an iteration's flat stats hold a module's ``nonfinite`` flag.

    The flag (``"<module>/nonfinite"``, from :func:`~jaxlearner.make_update`) is one
    device reduction over the update's losses and params; only these few host
    floats are read here. The error names the module's first non-finite metric,
    its ``total_loss`` first.

    Args:
      stats: one iteration's flat stats (``"default_policy/total_loss"``, ...).
      iteration: the iteration's number, for the message.

    Raises:
      NonFiniteError: naming the iteration, the module and the metric.

    Example:
      >>> check_finite({"policy/nonfinite": 0.0, "policy/total_loss": 0.5}, 3)
    """
    for key, flag in stats.items():
        module, _, name = key.rpartition("/")
        if name != "nonfinite" or module == ALL_MODULES or not flag:
            continue
        owned = [k for k in stats if k.startswith(f"{module}/")]
        ordered = sorted(owned, key=lambda k: k != f"{module}/total_loss")  # stable
        bad = [k for k in ordered if not math.isfinite(stats[k])]
        metric = bad[0] if bad else f"{module}/params"
        raise NonFiniteError(iteration, module, metric, stats[metric] if bad else math.nan)


EVAL_EPISODES = 10
"""Episodes per evaluation unless a trainer is told otherwise (RLlib's ``evaluation_duration``)."""


def check_eval_episodes(eval_episodes: object) -> None:
    """Raises unless ``eval_episodes`` (a trainer's evaluation episodes) is a positive int.

    Raises:
      ValueError: naming the value received (a bool is no count).
    """
    if type(eval_episodes) is not int or eval_episodes < 1:
        raise ValueError(f"eval_episodes must be a positive int; got {eval_episodes!r}.")
