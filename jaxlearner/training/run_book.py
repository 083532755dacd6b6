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
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar, final

from jaxlearner.checkpoint import metadata as checkpoint_metadata
from jaxlearner.checkpoint.manager import CheckpointManager
from jaxlearner.core.learner import Learner
from jaxlearner.core.metrics import ALL_MODULES
from jaxlearner.core.state import LearnerState
from jaxlearner.errors import NonFiniteError
from jaxlearner.training.outputs.loggers import Writer
from jaxlearner.training.run_loop import Steppable, run_loop
from jaxlearner.training.stop_conditions import StopCondition


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
    ) -> None:
        if not dataclasses.is_dataclass(counters) or isinstance(counters, type):
            raise TypeError(
                f"RunBook's counters must be a dataclass instance; got {type(counters).__name__}."
            )
        self.counters: CountersT = counters
        self.history: list[dict[str, float]] = []
        self.stop_requested = False
        self._owner, self._counters_key = owner, counters_key
        self._writers, self._progress = tuple(writers), progress

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
        steps_per_eval: int | None = None,
        max_iterations: int | None = None,
        on_iteration: Callable[[dict[str, float]], None] | None = None,
    ) -> list[dict[str, float]]:
        """Clears the stop request and runs :func:`~jaxlearner.training.run_loop.run_loop`.

        Args:
          trainer: the trainer holding this book (its ``step`` and ``eval`` run).
          stop_conditions, steps_per_eval, max_iterations, on_iteration: as
            :meth:`jaxlearner.Trainer.run`.

        Returns:
          The stats of the iterations this call ran.

        Raises:
          ValueError: when there is neither a stop condition nor ``max_iterations``.
        """
        self.stop_requested = False
        return run_loop(
            trainer,
            self._writers,
            stop_conditions,
            steps_per_eval,
            max_iterations,
            on_iteration,
            self._progress,
        )

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
          The step saved: the iteration count.
        """
        step = self.counters.iteration
        if metrics is None:
            metrics = self.history[-1] if self.history else {}
        saved = {
            self._counters_key: dataclasses.asdict(self.counters),
            # JSON has no NaN: flat stats come out with non-finite values as "nan"/"inf".
            "history": checkpoint_metadata.history_to_json(self.history),
            **extra,
        }
        checkpoint.save(
            step,
            state,
            learner,
            metrics=dict(metrics),
            extra=saved,
            extra_arrays=dict(arrays),
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
        self.history = checkpoint_metadata.history_from_json(extra.get("history", []))
        return RestoredRun(state, extra, dict(arrays))

    def close(self) -> None:
        """Closes the writers."""
        for writer in self._writers:
            writer.close()


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


def check_eval_episodes(eval_episodes: object) -> None:
    """Raises unless ``eval_episodes`` (a trainer's evaluation episodes) is a positive int.

    Raises:
      ValueError: naming the value received (a bool is no count).
    """
    if type(eval_episodes) is not int or eval_episodes < 1:
        raise ValueError(f"eval_episodes must be a positive int; got {eval_episodes!r}.")
