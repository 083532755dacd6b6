"""``jaxlearner plot RUN...``: the runs' learning curves in one PNG, or over seeds.

One curve per run by default. ``--aggregate`` groups the runs by algorithm and environment
(the seeds of one setting) and draws each group's evaluation returns as their interquartile
mean with a 95% stratified bootstrap interval; ``--table`` prints each group's final
evaluation return the same way (:mod:`~jaxlearner.training.outputs.statistics`).

matplotlib is imported when the plot is drawn: it is the one command that needs it.
"""

from __future__ import annotations

import math
import pathlib
from typing import Any

import numpy as np

from jaxlearner.cli.options import PlotOptions
from jaxlearner.cli.run_folder import METRICS_FILE, UsageError, read_metrics, read_run
from jaxlearner.training.outputs.plotting import (
    draw_stop_reward,
    place_legend,
    plot_curves,
    plot_run,
)
from jaxlearner.training.outputs.statistics import format_table

Run = tuple[pathlib.Path, dict[str, Any], list[dict[str, Any]]]
"""A run folder, its ``run.json`` and its ``metrics.jsonl`` records."""


def plot(options: PlotOptions) -> int:
    """Runs ``jaxlearner plot``: the runs' learning curves in one PNG (or, with ``--table``,
    the table of their final evaluations); returns the exit status.

    Raises:
      UsageError: for a folder that is no run or holds no returns (no evaluation, with
        ``--aggregate`` or ``--table``), or an ``--out`` in a folder that does not exist.
    """
    runs = [
        (run, info, read_metrics(run / METRICS_FILE)) for run, info in map(read_run, options.runs)
    ]
    if options.table or options.aggregate:
        groups = _groups(runs)
    if options.table:
        print(_table(groups))
        return 0
    out = pathlib.Path(options.out) if options.out else runs[0][0] / "learning_curve.png"
    if not out.parent.is_dir():
        raise UsageError(
            f"--out {out}: expected a file in an existing folder; no folder {out.parent}"
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    if options.aggregate:
        for label, members in groups.items():
            steps, values = _aligned_evaluations(members)
            metrics = {
                "eval/return_mean": values,
                "eval/env_steps": np.tile(steps, (len(values), 1)),
            }
            plot_curves(metrics, "eval/return_mean", labels=[label], spread="iqm", ax=axes)
        axes.set_xlabel("env steps")
        axes.set_ylabel("evaluation return")
        axes.set_title(
            "evaluation return: IQM and 95% stratified bootstrap CI over each group's runs"
        )
        for stop_reward in {info.get("stop_reward") for _, info, _ in runs} - {None}:
            draw_stop_reward(axes, stop_reward)
    else:
        for run, info, records in runs:
            if not _has_returns(records):
                raise UsageError(f"{run / METRICS_FILE} holds no returns to plot")
            label = f"{info['algorithm']} {info['env']} ({run.name})"
            plot_run(records, ax=axes, label=label, stop_reward=info.get("stop_reward"))
    place_legend(axes)
    figure.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(figure)
    print(out)
    return 0


def _has_returns(records: list[dict[str, Any]]) -> bool:
    return any(r.get("episode_return_mean") is not None for r in records) or bool(
        _evaluations(records)
    )


def _evaluations(records: list[dict[str, Any]]) -> dict[float, float]:
    """``{env_steps: eval/return_mean}`` of a run's finite evaluations (the last one at a
    step counts)."""
    found = {}
    for record in records:
        steps, value = record.get("env_steps"), record.get("eval/return_mean")
        numbers = isinstance(steps, int | float) and isinstance(value, int | float)
        if numbers and math.isfinite(value):
            found[float(steps)] = float(value)
    return found


def _final_evaluation(records: list[dict[str, Any]]) -> float:
    """The return of a run's last evaluation (at its most env steps)."""
    found = _evaluations(records)
    return found[max(found)]


def _groups(runs: list[Run]) -> dict[str, list[Run]]:
    """The runs by ``"algorithm env"``, in the order given; each must have evaluated."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        folder, info, records = run
        if not _evaluations(records):
            raise UsageError(
                f"{folder / METRICS_FILE} holds no evaluation; --aggregate and --table "
                "compare evaluation returns"
            )
        groups.setdefault(f"{info['algorithm']} {info['env']}", []).append(run)
    return groups


def _aligned_evaluations(members: list[Run]) -> tuple[np.ndarray, np.ndarray]:
    """The group's evaluation steps (their union) and ``[runs, steps]`` returns, NaN where a
    run did not evaluate at a step."""
    evaluations = [_evaluations(records) for _, _, records in members]
    steps = np.array(sorted(set().union(*evaluations)), np.float64)
    values = np.array([[found.get(step, np.nan) for step in steps] for found in evaluations])
    return steps, values


def _table(groups: dict[str, list[Run]]) -> str:
    """The final evaluation of each run, aggregated per group; an optimality-gap column for
    each stop reward the runs name (none when none does)."""
    finals = {
        label: [_final_evaluation(records) for _, _, records in members]
        for label, members in groups.items()
    }
    named = {info.get("stop_reward") for members in groups.values() for _, info, _ in members}
    targets = sorted(float(value) for value in named if value is not None)
    note = "final evaluation return per run"
    if targets:
        rewards = ", ".join(f"{value:g}" for value in targets)
        note += f"; optimality gap to the stop reward{'s' * (len(targets) > 1)} {rewards}"
    return f"{format_table(finals, target=targets)}\n({note})"
