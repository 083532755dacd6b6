"""What ``jaxlearner train`` says at its start and end: the budget as it will run, and
whether the run reached its stop reward, in words a user cannot misread.

A run ends at the first whole iteration at or past ``--max-steps``, so the budget line says
the count it will stop at when that differs; the closing line says "reached the stop
reward" or "did not reach the stop reward (best X < Y)", points at the tuned presets when
the run had none, and gives the compilation time apart from the training time.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Mapping, Sequence

from jaxlearner.algorithms.presets import preset_names
from jaxlearner.cli.run_folder import CHECKPOINTS, METRICS_FILE
from jaxlearner.cli.run_settings import RunSettings
from jaxlearner.training.stop_conditions import RewardBound


def budget_line(settings: RunSettings, per_iteration: int, unit: str = "env steps") -> str:
    """The run's budget and stop rule as it will run, e.g. ``"stops at 2 evaluations in a
    row >= 475 or 100,352 env steps (--max-steps 100,000 rounded up to whole iterations of
    2,048)"``.

    Example:
      >>> budget_line(settings, 2048)  # doctest: +SKIP
    """
    last = math.ceil(settings.max_steps / per_iteration) * per_iteration
    steps = f"{last:,} {unit}"
    if last != settings.max_steps:
        steps += (
            f" (--max-steps {settings.max_steps:,} rounded up to whole iterations of "
            f"{per_iteration:,})"
        )
    if settings.stop_reward is None:
        return f"Stops at {steps}; no stop reward."
    return f"Stops at two evaluations in a row >= {settings.stop_reward:g} or at {steps}."


def schedules_line(settings: RunSettings) -> str:
    """What became of an RL Zoo preset's schedules under ``--max-steps``, e.g. ``"The preset's
    schedules (lr, clip_param) run over --max-steps 20,000 env steps instead of its 100,000,
    as RL Zoo's -n runs them; --keep-schedules keeps them as written."``

    Example:
      >>> schedules_line(settings)  # doctest: +SKIP
    """
    scaled = settings.scaled_schedules
    if scaled is None:
        return "The preset's schedules run as written."
    return (
        f"The preset's schedules ({', '.join(scaled.fields)}) run over --max-steps "
        f"{settings.max_steps:,} env steps instead of its {scaled.preset_max_steps:,}, as RL "
        "Zoo's -n runs them; --keep-schedules keeps them as written."
    )


def verdict(settings: RunSettings, history: Sequence[Mapping[str, float]]) -> str:
    """Whether the run reached its stop reward, and a hint when it did not.

    Example:
      >>> verdict(settings, [{"eval/return_mean": 480.0}, {"eval/return_mean": 500.0}])
      ... # doctest: +SKIP
      'reached the stop reward 475 (two evaluations in a row).'
    """
    evaluations = [row["eval/return_mean"] for row in history if "eval/return_mean" in row]
    finite = [value for value in evaluations if math.isfinite(value)]
    best = max(finite, default=math.nan)
    if settings.stop_reward is None:
        return f"best evaluation return {best:.1f}; no stop reward was set."
    if RewardBound(settings.stop_reward, times=2)(history):
        return f"reached the stop reward {settings.stop_reward:g} (two evaluations in a row)."
    text = f"did not reach the stop reward (best {best:.1f} < {settings.stop_reward:g})"
    tuned = (settings.algorithm, settings.env) in preset_names_or_none(settings.algorithm)
    if settings.dataset is not None:
        return text + "."
    if settings.preset is None and tuned:
        return text + (
            f"; {settings.env} has tuned settings: drop --preset none "
            f"('jaxlearner presets {settings.algorithm}' shows them)."
        )
    if not tuned:
        return text + (
            f"; {settings.algorithm} has no tuned settings for {settings.env} "
            f"('jaxlearner presets {settings.algorithm}' lists the environments that have)."
        )
    return text + "; a longer --max-steps or another --seed may get there."


def preset_names_or_none(algorithm: str) -> tuple[tuple[str, str], ...]:
    """The algorithm's ``(algorithm, env)`` preset pairs; none for one without presets."""
    try:
        return preset_names(algorithm)
    except ValueError:
        return ()


def done_text(
    settings: RunSettings,
    history: Sequence[Mapping[str, float]],
    totals: tuple[int, float],
    out: pathlib.Path,
    extra_lines: Sequence[str] = (),
) -> str:
    """The closing block: the verdict, the time (compilation apart), and where it all went.

    Args:
      settings: the run's settings.
      history: the trainer's history.
      totals: ``(env steps or rows, seconds)`` of the whole run.
      out: the run folder.
      extra_lines: more ``"  name: where"`` lines (tensorboard, W&B).
    """
    steps, seconds = totals
    unit = "dataset rows" if settings.dataset is not None else "env steps"
    compiling = sum(row.get("time_compile_s", 0.0) for row in history)
    lines = [
        f"Done: {steps:,} {unit} in {seconds:.1f} s ({compiling:.1f} s of it compiling); "
        + verdict(settings, history),
        f"  metrics:     {out / METRICS_FILE}",
        f"  checkpoints: {out / CHECKPOINTS}",
        f"  evaluate:    jaxlearner eval {out}",
        f"  plot:        jaxlearner plot {out}",
        *extra_lines,
    ]
    return "\n".join(lines)
