"""Driver: the one step / eval / run / save / restore every trainer is, over its engine.

What one iteration does differs between :func:`~jaxlearner.Trainer` (gymnasium envs),
:func:`~jaxlearner.OfflineTrainer` (a recorded dataset),
:func:`~jaxlearner.MultiAgentTrainer` (PettingZoo envs) and
:func:`~jaxlearner.anakin.AnakinTrainer` (one compiled block over a pure-JAX env): each is
an :class:`Engine`. Everything else is the same for all four and written once here, in
:class:`Driver`: the learner state it threads through the engine, the counters and the
history of every iteration's stats, the writers they go to, the stop request (a flag a
signal handler may set), ``run`` (the shared
:func:`~jaxlearner.training.run_loop.run_loop`: stop conditions and the evaluation
cadence), ``save`` and ``restore`` of that bookkeeping beside the engine's own state, and
``close``. Each trainer's constructor builds its engine and returns a ``Driver`` over it;
what only one kind has (the env runner, the replay buffer, the dataset, the agent groups)
is its engine's, as ``trainer.engine.runner``.

A checkpoint step's ``extra`` JSON holds the counters under the engine's
``counters_key`` (``"trainer"``, or ``"multi_agent_trainer"``), then ``"history"``, then
the engine's own entries (``"runner"``, ``"seed"``, ...); its extra arrays are the
engine's (``"key"``, ``"buffer"``, ...) and the history's columns.

Example:
  >>> import jaxlearner as jl
  >>> trainer = jl.Trainer(learner, "CartPole-v1", num_envs=8)       # doctest: +SKIP
  >>> trainer.step()["episode_return_mean"]                           # doctest: +SKIP
  >>> trainer.run([jl.MaxEnvSteps(50_000)], steps_per_eval=10_000)    # doctest: +SKIP
  >>> trainer.save(jl.CheckpointManager("runs/ppo")); trainer.close()  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar, final

from jaxlearner.checkpoint import metadata as checkpoint_metadata
from jaxlearner.checkpoint.manager import CheckpointManager
from jaxlearner.core.learner import Learner
from jaxlearner.core.metrics import ALL_MODULES
from jaxlearner.core.state import LearnerState
from jaxlearner.errors import CheckpointCorruptedError, NonFiniteError
from jaxlearner.training.compile_clock import Stopwatch
from jaxlearner.training.history import History, from_columns, to_columns
from jaxlearner.training.outputs.loggers import Writer
from jaxlearner.training.outputs.run_config import ConfigWriter
from jaxlearner.training.run_loop import evaluation_row, run_loop
from jaxlearner.training.stop_conditions import StopCondition
from jaxlearner.training.stop_signals import stop_on_signals

EVAL_EPISODES = 10
"""Episodes per evaluation unless a trainer is told otherwise (RLlib's ``evaluation_duration``)."""


class Counters(Protocol):
    """A trainer's counters: a dataclass whose fields JSON can hold, with at least these.

    The driver counts ``iteration``, ``env_steps`` and ``time_total_s``; the engine counts
    the rest (episodes, agent steps, the recent episodes' returns).
    """

    __dataclass_fields__: ClassVar[dict[str, Any]]
    iteration: int
    env_steps: int
    time_total_s: float


class Iteration(NamedTuple):
    """What one :meth:`Engine.iterate` did, for the driver to count and record.

    Attributes:
      env_steps: env steps it collected (dataset rows, for the offline trainer).
      counts: the engine's counts after it (``episodes``, ``num_episodes``, ``agent_steps``),
        placed in the row after ``env_steps``.
      stats: the rest of the row after the timing stats: episode statistics, the learner's
        metrics flattened, memory and runner stats.
      iterations: iterations it ran (an Anakin block runs several).
    """

    env_steps: int
    counts: dict[str, float]
    stats: dict[str, float]
    iterations: int = 1


class Saved(NamedTuple):
    """What an engine saves beside the driver's bookkeeping (:meth:`Engine.saved`).

    Attributes:
      learner_state: the learner state (a learner checkpoint of it).
      extra: the engine's own JSON entries.
      arrays: the engine's extra arrays, at least one (its key, a replay buffer, ...): a
        step without them is a plain learner checkpoint, which :meth:`Driver.restore` refuses.
    """

    learner_state: LearnerState
    extra: dict[str, Any]
    arrays: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class RestoredRun:
    """What :meth:`Driver.restore` read beside its own bookkeeping, for the engine.

    Attributes:
      state: the learner state.
      extra: the step's extra JSON (the engine's own entries among it).
      arrays: the step's extra arrays, the history's columns taken out.
    """

    state: LearnerState
    extra: dict[str, Any]
    arrays: dict[str, Any]


StateT = TypeVar("StateT")


class Engine(Protocol[StateT]):
    """One trainer kind underneath :class:`Driver`: how an iteration collects and learns,
    how it evaluates, and what it saves.

    Attributes:
      owner: the trainer's public name, for messages (``"Trainer"``).
      counters_key: the counters' key in a checkpoint's extra JSON.
      learner: the learner being trained (what checkpoints restore the state for).
      env_steps_per_iteration: env steps (rows) one iteration collects; the progress bar
        runs to the budget as it will end.
    """

    owner: str
    counters_key: str
    learner: Learner
    env_steps_per_iteration: int

    def iterate(self, state: StateT, counters: Any, **options: Any) -> tuple[StateT, Iteration]:
        """One iteration from ``state``: collect, learn, count the engine's own counters."""
        ...

    def evaluate(self, state: StateT, counters: Any, **options: Any) -> dict[str, float]:
        """Whole episodes with the policy of ``state``: ``{"return_mean", ...}``."""
        ...

    def run_options(self, **options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """``run``'s own options split into those of every ``iterate`` and ``evaluate``."""
        ...

    def saved(self, state: StateT) -> Saved:
        """What to save of ``state`` and the engine, beside the driver's bookkeeping."""
        ...

    def restored(self, state: StateT, run: RestoredRun) -> StateT:
        """Takes back the engine's own state from ``run``; returns the state to go on from.

        Raises ``ValueError``, before it changes anything, for a step it cannot continue
        (another dataset, a run of another shape): the driver's counters and history are
        taken back only after it returns.
        """
        ...

    def close(self) -> None:
        """Closes the engine's environments and threads."""
        ...


EngineT = TypeVar("EngineT")


def no_run_options(owner: str, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict]:
    """:meth:`Engine.run_options` of an engine whose ``run`` takes no options of its own.

    Raises:
      TypeError: naming the first option, as Python does for an unexpected keyword.
    """
    if options:
        raise TypeError(
            f"{owner}'s run() got an unexpected keyword argument {next(iter(options))!r}."
        )
    return {}, {}


@final
class Driver(Generic[EngineT]):
    """A trainer: counters, history, writers and the stop request over one engine
    (:class:`~jaxlearner.training.driver.Engine`).

    Made by the trainers' constructors (:func:`~jaxlearner.Trainer`,
    :func:`~jaxlearner.OfflineTrainer`, :func:`~jaxlearner.MultiAgentTrainer`,
    :func:`~jaxlearner.anakin.AnakinTrainer`), not by hand.

    Args:
      engine: what an iteration does.
      state: the state to start from (the learner state; an Anakin run's whole state).
      counters: the counters at the start (a dataclass; restored as ``type(counters)(**saved)``).
      writers: metric writers every recorded iteration and evaluation goes to.
      progress: show a progress bar in :meth:`run`; ``None`` shows one on a terminal.
      config: the run's config (:func:`~jaxlearner.training.outputs.run_config.run_config`),
        logged here once to each writer that takes it (a
        :class:`~jaxlearner.training.outputs.run_config.ConfigWriter`, such as MLflow's).

    Attributes:
      engine: the engine (``trainer.engine.runner``, ``.buffer``, ``.dataset``, ...).
      state: the current state (replicated over the learner's mesh, if it has one).
      learner: the learner being trained, the engine's.
      counters: the run's progress (iterations, env steps, seconds, and the engine's own
        counts); checkpoints keep it.
      history: the rows :meth:`step` returned, with :meth:`run`'s evaluations joined as
        ``"eval/..."``; stop conditions such as ``Plateau`` read it, checkpoints keep it.
      env_steps_per_iteration: env steps one :meth:`step` collects (a run with
        ``MaxEnvSteps(n)`` ends at the first multiple of it at or past ``n``).
      stop_requested: whether :meth:`request_stop` was called since :meth:`run` last started.

    Raises:
      TypeError: when ``counters`` is not a dataclass instance.
    """

    def __init__(
        self,
        engine: EngineT,
        state: Any,
        counters: Counters,
        *,
        writers: Sequence[Writer] = (),
        progress: bool | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        if not dataclasses.is_dataclass(counters) or isinstance(counters, type):
            raise TypeError(
                f"A trainer's counters must be a dataclass instance; got {type(counters).__name__}."
            )
        self.engine = engine
        self.state = state
        self.learner: Learner = engine.learner
        self.counters: Any = counters
        self.history: History = History()
        self.env_steps_per_iteration: int = engine.env_steps_per_iteration
        self.stop_requested = False
        self._writers, self._progress = tuple(writers), progress
        for writer in self._writers:
            if config is not None and isinstance(writer, ConfigWriter):
                writer.log_config(config)

    def step(self, **options: Any) -> dict[str, float]:
        """One iteration: the engine collects and learns; the row is counted and recorded.

        Args:
          **options: the engine's (``Trainer``: ``env_config``, a config for the training
            envs from this step on).

        Returns:
          A flat dict of ``iteration``, ``env_steps`` (lifetime), the engine's counts
          (``episodes``, ``num_episodes``, ...), ``env_steps_per_s`` (less the seconds spent
          compiling), ``time_this_iter_s``, ``time_compile_s``, ``time_total_s``, then the
          engine's stats: episode statistics over the last 100 episodes
          (``episode_return_mean``, ...) and the learner's metrics flattened
          (``"default_policy/total_loss"``, ``"__all__/num_grad_steps"``, ...). It is also
          appended to ``history`` and written to the writers.

        Raises:
          NonFiniteError: when a module's loss or params went NaN or infinite in this
            iteration's update (the row is recorded first).
        """
        watch = Stopwatch()
        self.state, done = self.engine.iterate(self.state, self.counters, **options)
        elapsed, compiling = watch.read()
        counters = self.counters
        counters.iteration += done.iterations
        counters.env_steps += done.env_steps
        counters.time_total_s += elapsed
        stats = {
            **iteration_stats(counters, done.env_steps, elapsed, done.counts, compiling),
            **done.stats,
        }
        self.record(stats)
        return stats

    def eval(self, **options: Any) -> dict[str, float]:
        """Whole episodes with the current policy (deterministic unless told otherwise).

        Every evaluation is written to the writers as ``{"eval/...", "env_steps",
        "iteration"}`` at the current iteration, whether :meth:`run`'s schedule or a direct
        call made it (rl8 logs each one); its seconds count in ``time_total_s``.

        Args:
          **options: the engine's (``Trainer``: ``env_config``, ``deterministic``,
            ``episodes``; ``OfflineTrainer`` and ``MultiAgentTrainer``: ``deterministic``).

        Returns:
          ``{"return_mean", "return_min", "return_max", "length_mean", "episodes"}`` (and
          per-agent returns for the multi-agent trainer).
        """
        start = time.perf_counter()
        results = self.engine.evaluate(self.state, self.counters, **options)
        self.counters.time_total_s += time.perf_counter() - start
        row = evaluation_row(results, self.counters.env_steps, self.counters.iteration)
        for writer in self._writers:
            writer.write(self.counters.iteration, row)
        return results

    def request_stop(self) -> None:
        """Asks :meth:`run` to return once the iteration in flight is done.

        Only sets a flag, so a signal handler may call it: the command line's Ctrl-C handler
        does, then saves a checkpoint to resume from.

        Example:
          >>> signal.signal(signal.SIGINT, lambda *_: trainer.request_stop())  # doctest: +SKIP
        """
        self.stop_requested = True

    def record(self, stats: dict[str, float]) -> None:
        """Appends one iteration's stats to ``history`` (this same dict: the run loop
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
        stop_conditions: StopCondition | Sequence[StopCondition] = (),
        steps_per_eval: int | None = None,
        max_iterations: int | None = None,
        on_iteration: Callable[[dict[str, float]], None] | None = None,
        evaluate_at_end: bool = False,
        eval_every_iterations: int | None = None,
        **options: Any,
    ) -> list[dict[str, float]]:
        """Steps until a stop condition holds; evaluates every ``steps_per_eval`` env steps.

        The offline trainer counts dataset rows as env steps. With no stop condition and no
        ``max_iterations`` it trains until :meth:`request_stop`, Ctrl-C or SIGTERM (rl8's
        trainer runs until killed): while it runs, those signals ask it to stop after the
        iteration in flight, unless the program has its own handlers; save afterwards
        (``trainer.save(checkpoint)``) or in ``on_iteration``.

        Args:
          stop_conditions: a condition or a list (any of them stops the run).
          steps_per_eval: env steps between evaluations (``None``: no evaluation), counted
            from the last evaluation in ``history``, so a restored trainer keeps the
            schedule of the run it continues; results join the iteration's stats as
            ``"eval/..."``.
          max_iterations: a hard bound on iterations (steps), a safety net.
          on_iteration: called with each iteration's stats (e.g. to save a checkpoint).
          evaluate_at_end: also evaluate the last iteration (the one after which a stop
            condition holds) when no scheduled evaluation fell on it, before
            ``on_iteration`` sees its stats, so the last row and a checkpoint saved from it
            carry an evaluation; not after :meth:`request_stop`. ``jaxlearner train`` sets it.
          eval_every_iterations: also evaluate every this many iterations (rl8's
            ``steps_per_eval`` unit), beside or instead of ``steps_per_eval``.
          **options: the engine's (``Trainer``: ``env_config``, a config or a schedule
            ``config(counters)`` for every step, and ``eval_env_config`` for every
            evaluation).

        Returns:
          The stats of the iterations this call ran; fewer than the stop conditions ask for
          when :meth:`request_stop` was called (the iteration in flight then completes,
          evaluation and ``on_iteration`` included, and ``stop_requested`` stays true).

        Raises:
          ValueError: for an evaluation cadence that is not a positive int.
          TypeError: for an option the engine does not take.

        Example:
          >>> trainer.run([jl.RewardBound(475.0)], steps_per_eval=20_000)  # doctest: +SKIP
          >>> trainer.run(eval_every_iterations=10)  # until Ctrl-C              # doctest: +SKIP
          >>> gravity = lambda counters: {"g": 9.0 + counters.iteration % 3}   # doctest: +SKIP
          >>> trainer.run([jl.MaxEnvSteps(50_000)], env_config=gravity)        # doctest: +SKIP
        """
        step_options, eval_options = self.engine.run_options(**options)
        self.stop_requested = False
        with stop_on_signals(self):
            return run_loop(
                self,
                (),  # eval() writes each evaluation itself
                stop_conditions,
                steps_per_eval=steps_per_eval,
                max_iterations=max_iterations,
                on_iteration=on_iteration,
                progress=self._progress,
                evaluate_at_end=evaluate_at_end,
                eval_every_iterations=eval_every_iterations,
                step_options=step_options,
                eval_options=eval_options,
            )

    def save(self, checkpoint: CheckpointManager, metrics: Mapping[str, Any] | None = None) -> int:
        """Saves everything needed to continue exactly: the learner state, the counters, the
        history (which stop conditions such as ``Plateau`` read) and the engine's own state
        (the key, the envs' state, a replay buffer, the lagged behaviour params, ...).

        Args:
          checkpoint: the manager to save with.
          metrics: metrics to rank the step by (default: the last iteration's stats).

        Returns:
          The step saved (the iteration count).

        Example:
          >>> ckpt = jl.CheckpointManager("runs/ppo")                   # doctest: +SKIP
          >>> trainer.save(ckpt)                                         # doctest: +SKIP
        """
        step = self.counters.iteration
        if metrics is None:
            metrics = self.history[-1] if self.history else {}
        own = self.engine.saved(self.state)
        if "history" in own.arrays:
            raise ValueError("An engine's own extra arrays cannot be named 'history'.")
        keys, values, present = to_columns(self.history)
        saved = {
            self.engine.counters_key: dataclasses.asdict(self.counters),
            "history": {"keys": keys, "length": len(self.history)},  # arrays: [length, keys]
            **own.extra,
        }
        columns = {"history": {"values": values, "present": present}} if self.history else {}
        checkpoint.save(
            step,
            own.learner_state,
            self.learner,
            metrics=dict(metrics),
            extra=saved,
            extra_arrays={**own.arrays, **columns},
        )
        return step

    def restore(self, checkpoint: CheckpointManager, step: int | None = None) -> None:
        """Continues from a step saved by :meth:`save` (default: the latest).

        The learner state, counters, history and the engine's own state come back, so the
        next iterations (and when :meth:`run`'s stop conditions hold) equal those of an
        uninterrupted run (for environments whose state the runner can capture; see
        :meth:`~jaxlearner.training.env_runner.EnvRunner.get_state`).

        Raises:
          ValueError: when the step holds a learner state but no state of this kind of
            trainer, or the engine refuses it (another dataset, another run's shape).
        """
        engine = self.engine
        state = checkpoint.restore(self.learner, step)
        extra, arrays = checkpoint.restore_extra(step)
        if not isinstance(extra, dict) or engine.counters_key not in extra or arrays is None:
            raise ValueError(
                f"This checkpoint step holds a learner state but no trainer state (its extra data "
                f"has no {engine.counters_key!r}); restore it with checkpoint.restore(learner) "
                f"and pass state= to the {engine.owner} instead."
            )
        arrays = dict(arrays)
        columns = arrays.pop("history", None)
        history = History(_saved_history(extra.get("history", []), columns))
        self.state = engine.restored(self.state, RestoredRun(state, extra, arrays))
        self.counters = type(self.counters)(**extra[engine.counters_key])
        self.history = history

    def close(self) -> None:
        """Closes the engine (its environments) and the writers."""
        self.engine.close()
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


def iteration_stats(
    counters: Counters,
    env_steps: int,
    elapsed: float,
    counts: Mapping[str, float],
    compiling: float = 0.0,
) -> dict[str, float]:
    """The stats every row starts with, in this order: ``iteration``, ``env_steps``
    (lifetime), the engine's ``counts`` (episodes, agent steps, ...), ``env_steps_per_s``
    (this iteration's ``env_steps`` over ``elapsed`` less the ``compiling`` seconds within
    it, so an iteration that compiles does not read 1-10), ``time_this_iter_s`` (all of it),
    ``time_compile_s`` (JAX's tracing and compiling in it,
    :mod:`~jaxlearner.training.compile_clock`) and ``time_total_s``.

    Example:
      >>> from jaxlearner.training.trainer_counters import TrainerCounters
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


def check_iterations_per_step(iterations_per_step: object) -> None:
    """Raises unless ``iterations_per_step`` (a trainer's iterations in one step) is a positive
    int.

    Raises:
      ValueError: naming the value received (a bool is no count).
    """
    if type(iterations_per_step) is not int or iterations_per_step < 1:
        raise ValueError(
            f"iterations_per_step must be a positive int; got {iterations_per_step!r}."
        )


def check_eval_episodes(eval_episodes: object) -> None:
    """Raises unless ``eval_episodes`` (a trainer's evaluation episodes) is a positive int.

    Raises:
      ValueError: naming the value received (a bool is no count).
    """
    if type(eval_episodes) is not int or eval_episodes < 1:
        raise ValueError(f"eval_episodes must be a positive int; got {eval_episodes!r}.")
