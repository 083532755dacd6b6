"""The loop of every trainer's ``run``: step, evaluate on schedule, log, stop.

:meth:`jaxlearner.training.driver.Driver.run` runs it over the driver's ``step`` and
``eval`` (which differ underneath by engine); :func:`run_loop` is the rest, the same for
every trainer and tested on its own: evaluations every ``steps_per_eval`` env
steps joined to the iteration's stats as ``"eval/..."`` (and written, with
``env_steps`` and ``iteration``, to the writers), a progress bar over env
steps, an ``on_iteration`` callback, the stop conditions over the history, and
a stop request (e.g. from a Ctrl-C handler) honoured between iterations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from jaxlearner.training.outputs.loggers import ProgressBar, Writer, describe_stop
from jaxlearner.training.stop_conditions import AnyOf, RewardBound, StopCondition


class RunCounters(Protocol):
    """What the loop reads of a trainer's counters."""

    @property
    def env_steps(self) -> int: ...

    @property
    def iteration(self) -> int: ...

    @property
    def time_total_s(self) -> float: ...


class Steppable(Protocol):
    """A trainer as :func:`run_loop` drives it.

    ``step()`` runs one iteration and appends its stats to ``history`` (the
    same dict it returns); ``eval()`` evaluates the current policy; the loop
    stops early once ``stop_requested`` is true.
    """

    @property
    def counters(self) -> RunCounters: ...

    @property
    def history(self) -> list[dict[str, float]]: ...

    @property
    def stop_requested(self) -> bool: ...

    def step(self, **options: Any) -> dict[str, float]: ...

    def eval(self, **options: Any) -> dict[str, float]: ...


@runtime_checkable
class FixedIterations(Protocol):
    """A trainer whose every :meth:`Steppable.step` collects the same number of env steps
    (:func:`~jaxlearner.Trainer`, :func:`~jaxlearner.anakin.AnakinTrainer`): the loop's
    progress bar runs to the budget as it will end (:func:`budget_end`) from the start."""

    @property
    def env_steps_per_iteration(self) -> int: ...


def budget_end(max_env_steps: int, per_iteration: int, start: int = 0) -> int:
    """The env steps a run stopped by ``MaxEnvSteps(max_env_steps)`` ends at: iterations are
    whole, so the first count ``start + k * per_iteration`` at or past the budget.

    Args:
      max_env_steps: the budget (``MaxEnvSteps.steps``, ``--max-steps``).
      per_iteration: env steps one iteration collects.
      start: env steps counted before the run (a resumed run's, an off-policy warm-up's).

    Returns:
      The last iteration's env-step count; ``start`` once the budget is spent.

    Raises:
      ValueError: for a ``per_iteration`` that is not a positive int.

    Example:
      >>> budget_end(100_000, 2048)  # 49 iterations
      100352
      >>> budget_end(4096, 2048)
      4096
    """
    if isinstance(per_iteration, bool) or not isinstance(per_iteration, int) or per_iteration < 1:
        raise ValueError(f"per_iteration must be a positive int; got {per_iteration!r}.")
    if start >= max_env_steps:
        return start
    return start + math.ceil((max_env_steps - start) / per_iteration) * per_iteration


def stop_conditions_list(
    stop_conditions: StopCondition | Sequence[StopCondition],
) -> list[StopCondition]:
    """A condition or a sequence of them as a list (``AnyOf`` counts as one condition)."""
    if isinstance(stop_conditions, Sequence) and not isinstance(stop_conditions, StopCondition):
        return list(stop_conditions)
    return [stop_conditions]


def target_steps(conditions: Sequence[StopCondition]) -> int | None:
    """The env-step budget of the first condition that has one (``MaxEnvSteps``), or ``None``."""
    for condition in conditions:
        steps = getattr(condition, "steps", None)
        if isinstance(steps, int):
            return steps
    return None


def stop_description(conditions: Sequence[StopCondition], steps: int | None = None) -> str | None:
    """The progress bar's words for the stop rule: "stops at 2 evals >= 475 in a row or ...",
    with ``steps`` for the budget when given (the one it ends at, :func:`budget_end`)."""
    bound = next((c for c in conditions if isinstance(c, RewardBound)), None)
    description = describe_stop(
        target_steps(conditions) if steps is None else steps,
        None if bound is None else bound.bound,
        1 if bound is None else bound.times,
    )
    return description or None


def next_evaluation(history: Sequence[Mapping[str, float]], steps_per_eval: int) -> int:
    """The env steps at or after which the next evaluation falls.

    Evaluations fall ``steps_per_eval`` env steps after the last one the history
    holds (a row with ``"eval/..."`` stats), or after env step 0 when it holds
    none; so a trainer restored from a checkpoint (which keeps the history)
    continues the evaluation schedule of the run it resumes, and its stats equal
    those of the uninterrupted run.

    Args:
      history: the trainer's stats so far, oldest first (each with ``env_steps``).
      steps_per_eval: env steps between evaluations.

    Returns:
      The env-step count from which the next iteration evaluates.

    Example:
      >>> next_evaluation([{"env_steps": 256.0}, {"env_steps": 512.0, "eval/return_mean": 9.0},
      ...                  {"env_steps": 768.0}], 640)
      1152
      >>> next_evaluation([{"env_steps": 256.0}], 640)
      640
    """
    for stats in reversed(history):
        if any(name.startswith("eval/") for name in stats):
            return int(stats.get("env_steps", 0)) + steps_per_eval
    return steps_per_eval


def run_loop(
    trainer: Steppable,
    writers: Sequence[Writer],
    stop_conditions: StopCondition | Sequence[StopCondition] = (),
    steps_per_eval: int | None = None,
    max_iterations: int | None = None,
    on_iteration: Callable[[dict[str, float]], None] | None = None,
    progress: bool | None = None,
    evaluate_at_end: bool = False,
    eval_every_iterations: int | None = None,
    step_options: Mapping[str, Any] | None = None,
    eval_options: Mapping[str, Any] | None = None,
) -> list[dict[str, float]]:
    """Steps ``trainer`` until a stop condition holds; evaluates every ``steps_per_eval`` steps.

    Args:
      trainer: what to step and evaluate (a :class:`Steppable`).
      writers: where evaluations are written, as ``{"eval/...": ..., "env_steps",
        "iteration"}`` at the iteration's index (``step`` writes its own stats).
      stop_conditions: a condition or a list (any of them stops the run),
        called with ``trainer.history`` after each iteration.
      steps_per_eval: env steps between evaluations (``None``: no evaluation),
        counted from the last evaluation in ``trainer.history`` (:func:`next_evaluation`).
      max_iterations: a hard bound on iterations, a safety net.
      on_iteration: called with each iteration's stats, evaluation included
        (e.g. to save a checkpoint).
      progress: show a progress bar over env steps; ``None`` shows one on a terminal.
      evaluate_at_end: also evaluate the iteration after which a stop condition holds,
        when no scheduled evaluation fell on it, before ``on_iteration`` sees its stats
        (so the run's last row and the checkpoint saved from it carry an evaluation).
        Not after a stop request: an interrupted run ends as fast as it can.
      eval_every_iterations: also evaluate every this many iterations (``None``: only by
        ``steps_per_eval``).
      step_options: keyword arguments of every ``trainer.step`` (a
        :class:`~jaxlearner.training.driver.Driver`'s engine options, such as an env-config
        schedule).
      eval_options: keyword arguments of every ``trainer.eval`` the loop makes.

    Returns:
      The stats of the iterations run, each also ``trainer.history``'s entry;
      fewer than the stop conditions ask for when ``trainer.stop_requested``
      became true (the iteration in flight completes, evaluation and
      ``on_iteration`` included).

    With neither stop conditions nor ``max_iterations`` it runs until
    ``trainer.stop_requested`` (a Ctrl-C handler's request).

    Raises:
      ValueError: for ``steps_per_eval``, ``eval_every_iterations`` or ``max_iterations``
        that is not a positive int.

    Example:
      >>> run_loop(trainer, [], [jl.MaxEnvSteps(10_000)], steps_per_eval=2_000)  # doctest: +SKIP
    """
    for name, value in (
        ("steps_per_eval", steps_per_eval),
        ("eval_every_iterations", eval_every_iterations),
        ("max_iterations", max_iterations),
    ):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(f"run's {name} must be a positive int or None; got {value!r}.")
    conditions = stop_conditions_list(stop_conditions)
    stop = AnyOf(*conditions) if conditions else (lambda history: False)
    budget, start = target_steps(conditions), trainer.counters.env_steps
    # The bar runs to the count the run ends at, not the one asked for (it would end past its
    # total, where tqdm shows "0%| 200704/?"); a trainer that does not say its iteration's size
    # tells it with its first iteration.
    sized = budget is not None and isinstance(trainer, FixedIterations)
    total = budget_end(budget, trainer.env_steps_per_iteration, start) if sized else budget
    bar = ProgressBar(
        total=total, enabled=progress, description=stop_description(conditions, total)
    )
    step_options, eval_options = dict(step_options or {}), dict(eval_options or {})
    next_eval = None if steps_per_eval is None else next_evaluation(trainer.history, steps_per_eval)
    ran: list[dict[str, float]] = []
    try:
        while not trainer.stop_requested and (max_iterations is None or len(ran) < max_iterations):
            stats = trainer.step(**step_options)
            if budget is not None and not (sized or ran) and trainer.counters.env_steps > start:
                bar.set_total(budget_end(budget, trainer.counters.env_steps - start, start))
            by_steps = next_eval is not None and trainer.counters.env_steps >= next_eval
            evaluated = by_steps or (
                eval_every_iterations is not None
                and trainer.counters.iteration % eval_every_iterations == 0
            )
            if evaluated:
                _evaluate(trainer, stats, writers, eval_options)
            if by_steps:
                next_eval = trainer.counters.env_steps + steps_per_eval
            closing = evaluate_at_end and not (evaluated or trainer.stop_requested)
            if closing and stop(trainer.history):
                _evaluate(trainer, stats, writers, eval_options)
            ran.append(stats)
            bar.update(stats)
            if on_iteration is not None:
                on_iteration(stats)
            if stop(trainer.history):
                break
    finally:
        bar.close()
    return ran


def evaluation_row(
    results: Mapping[str, float], env_steps: float, iteration: float
) -> dict[str, float]:
    """An evaluation as the writers get it: ``{"eval/<name>": ..., "env_steps",
    "iteration"}``.

    Example:
      >>> evaluation_row({"return_mean": 9.5}, 256, 1)
      {'eval/return_mean': 9.5, 'env_steps': 256.0, 'iteration': 1.0}
    """
    row = {f"eval/{name}": float(value) for name, value in results.items()}
    return {**row, "env_steps": float(env_steps), "iteration": float(iteration)}


def _evaluate(
    trainer: Steppable,
    stats: dict[str, float],
    writers: Sequence[Writer],
    options: Mapping[str, Any],
) -> None:
    """Evaluates ``trainer``, joins the results to ``stats`` in place (the history holds this
    same dict) and writes them at the iteration's index."""
    counters = trainer.counters
    logged = evaluation_row(trainer.eval(**options), stats["env_steps"], stats["iteration"])
    stats.update({k: v for k, v in logged.items() if k.startswith("eval/")})
    stats["time_total_s"] = counters.time_total_s
    for writer in writers:
        writer.write(counters.iteration, logged)
