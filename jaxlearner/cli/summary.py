"""What ``jaxlearner train`` says at its start and end: its first line, printed before
anything compiles (a cold start compiles for seconds), the budget as it will run, and which
stop rule ended the run, in words a user cannot misread.

A run ends at the first whole iteration at or past ``--max-steps``, so the budget line says
the count it will stop at when that differs. The closing line names the stop rule and whether
it held ("two evaluations in a row at >= 475: reached", or "stopped at --max-steps; two
evaluations in a row at >= -100: not reached; best single evaluation -81.9", which one lucky
evaluation cannot contradict), points at the tuned presets when the run had none, and gives
the whole command's wall time beside the time in training and evaluation and the compilation
within it.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from collections.abc import Mapping, Sequence

from jaxlearner.algorithms.presets import preset_names
from jaxlearner.cli.run_folder import CHECKPOINTS, METRICS_FILE
from jaxlearner.cli.run_settings import RunSettings
from jaxlearner.training.run_loop import budget_end
from jaxlearner.training.stop_conditions import RewardBound


@dataclasses.dataclass(frozen=True)
class CommandTimes:
    """The seconds of one ``jaxlearner train`` command, for its closing line.

    Attributes:
      command_s: the whole command's wall time: start-up, building, compiling, training,
        evaluations and checkpoints.
      training_s: of it, the trainer's iterations and evaluations (this command's, not a
        resumed run's earlier ones).
      compiling_s: of ``training_s``, the compilation the iterations waited for.
    """

    command_s: float
    training_s: float
    compiling_s: float


def opening_line(
    settings: RunSettings, out: pathlib.Path, resume: tuple[pathlib.Path, int] | None
) -> str:
    """The command's first line, said before anything compiles (building the trainer does):
    what trains, where, from which checkpoint step.

    Example:
      >>> opening_line(settings, pathlib.Path("runs/ppo"), None)  # doctest: +SKIP
      "Training ppo on CartPole-v1 with 8 envs, preset ppo/CartPole-v1 (rl_zoo3); run folder
      runs/ppo; compiling the update..."
    """
    where = f"{settings.algorithm} on {settings.env} with {settings.num_envs} envs, " + (
        f"preset {settings.preset}" if settings.preset else "no preset (the library's defaults)"
    )
    if settings.dataset is not None:
        where = f"{settings.algorithm} on dataset {settings.dataset}, evaluated on {settings.env}"
    if resume is None:
        return f"Training {where}; run folder {out}; compiling the update..."
    return (
        f"Resuming {where} from checkpoint step {resume[1]}; run folder {out}; "
        "compiling the update..."
    )


def budget_line(
    settings: RunSettings,
    per_iteration: int,
    unit: str = "env steps",
    start: int = 0,
    *,
    resumed: bool = False,
) -> str:
    """The run's budget and stop rule as it will run, e.g. ``"Stops at two evaluations in a
    row >= 475 or at 100,352 env steps (--max-steps 100,000 rounded up to whole iterations of
    2,048)."``. ``start`` is the count the run goes on from (an off-policy warm-up's, a resumed
    run's); a ``resumed`` run's line begins ``"From env step 512, "``.

    Example:
      >>> budget_line(settings, 2048)  # doctest: +SKIP
    """
    last = budget_end(settings.max_steps, per_iteration, start)
    steps = f"{last:,} {unit}"
    if last != settings.max_steps:
        steps += (
            f" (--max-steps {settings.max_steps:,} rounded up to whole iterations of "
            f"{per_iteration:,})"
        )
    stops = "Stops"
    if resumed:
        stops = f"From {unit[:-1]} {start:,}, stops"
    if settings.stop_reward is None:
        return f"{stops} at {steps}; no stop reward."
    return f"{stops} at two evaluations in a row >= {settings.stop_reward:g} or at {steps}."


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
    """Which stop rule ended the run and whether the reward rule held, with the best single
    evaluation beside it, and a hint when it did not hold.

    Example:
      >>> verdict(settings, [{"eval/return_mean": 480.0}, {"eval/return_mean": 500.0}])
      ... # doctest: +SKIP
      'two evaluations in a row at >= 475: reached.'
      >>> verdict(settings, [{"eval/return_mean": 500.0}, {"eval/return_mean": 80.0}])
      ... # doctest: +SKIP
      'stopped at --max-steps; two evaluations in a row at >= 475: not reached; best single
      evaluation 500.0; a longer --max-steps or another --seed may get there.'
    """
    evaluations = [row["eval/return_mean"] for row in history if "eval/return_mean" in row]
    finite = [value for value in evaluations if math.isfinite(value)]
    best = f"best single evaluation {max(finite):.1f}" if finite else "no finite evaluation"
    if settings.stop_reward is None:
        return f"stopped at --max-steps; no stop reward was set; {best}."
    rule = f"two evaluations in a row at >= {settings.stop_reward:g}"
    if RewardBound(settings.stop_reward, times=2)(history):
        return f"{rule}: reached."
    text = f"stopped at --max-steps; {rule}: not reached; {best}"
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
    steps: int,
    times: CommandTimes,
    out: pathlib.Path,
    extra_lines: Sequence[str] = (),
) -> str:
    """The closing block: the time (the whole command's, training's and compilation's), the
    verdict, and where it all went.

    Args:
      settings: the run's settings.
      history: the trainer's history.
      steps: the env steps (or dataset rows) the run ended at.
      times: the command's seconds.
      out: the run folder.
      extra_lines: more ``"  name: where"`` lines (tensorboard, W&B).

    Example:
      >>> print(done_text(settings, history, 36_864, CommandTimes(12.0, 7.8, 0.5), out))
      ... # doctest: +SKIP
      Done: 36,864 env steps in 12.0 s (7.8 s training and evaluating, 0.5 s of that
      compiling); two evaluations in a row at >= 475: reached.
      ...
    """
    unit = "dataset rows" if settings.dataset is not None else "env steps"
    lines = [
        f"Done: {steps:,} {unit} in {times.command_s:.1f} s ({times.training_s:.1f} s training "
        f"and evaluating, {times.compiling_s:.1f} s of that compiling); "
        + verdict(settings, history),
        f"  metrics:     {out / METRICS_FILE}",
        f"  checkpoints: {out / CHECKPOINTS}",
        f"  evaluate:    jaxlearner eval {out}",
        f"  plot:        jaxlearner plot {out}",
        *extra_lines,
    ]
    return "\n".join(lines)
