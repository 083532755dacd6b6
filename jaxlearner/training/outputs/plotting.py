"""Learning curves: one run's, or many seeds' center and spread per configuration.

:func:`plot_run` draws one training run from the records a
:class:`~jaxlearner.training.outputs.loggers.JSONLinesWriter` wrote (what
``jaxlearner plot`` shows). Metrics from :mod:`jaxlearner.anakin.sweeps`
are arrays with a seeds axis, ``[S, T]`` for one configuration or
``[C, S, T]`` for a sweep.
:func:`curve_stats` reduces the seeds axis to a center and a band (plain
numpy, NaN-aware: an iteration in which no episode ended holds NaN); ``spread="iqm"`` gives
the interquartile mean with its 95% stratified bootstrap interval
(:mod:`~jaxlearner.training.outputs.statistics`), which stays within the seeds' values;
:func:`plot_curves` draws them with matplotlib, imported only when called.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxlearner.training.outputs.statistics import iqm_curve

SPREADS: tuple[str, ...] = ("std", "minmax", "quartiles", "iqm")
"""``std``: mean +- one standard deviation; ``minmax``: the seeds' range;
``quartiles``: the 25th to 75th percentiles; ``iqm``: the interquartile mean (the center
instead of the mean) and its 95% stratified bootstrap confidence interval (Agarwal et al.
2021), which never leaves the seeds' range."""


def curve_stats(
    values: Any, spread: str = "std", axis: int = -2
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean over seeds (the IQM for ``spread="iqm"``) and a band around it, ignoring NaNs.

    Args:
      values: an array with a seeds axis, e.g. ``[S, T]`` or ``[C, S, T]``.
      spread: ``"std"``, ``"minmax"``, ``"quartiles"`` or ``"iqm"`` (see :data:`SPREADS`).
      axis: the seeds axis (default: second to last).

    Returns:
      ``(center, low, high)``, each ``values``' shape without ``axis``; NaN where
      every seed is NaN.

    Raises:
      ValueError: for an unknown ``spread``.

    Example:
      >>> mean, low, high = curve_stats(np.array([[1.0, 2.0], [3.0, 6.0]]))
      >>> mean.tolist(), low.tolist(), high.tolist()
      ([2.0, 4.0], [1.0, 2.0], [3.0, 6.0])
    """
    if spread not in SPREADS:
        raise ValueError(f"spread must be one of {SPREADS}; got {spread!r}.")
    values = np.asarray(values, np.float64)
    if spread == "iqm":
        return iqm_curve(np.moveaxis(values, axis, -2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN, quietly
        mean = np.nanmean(values, axis=axis)
        if spread == "std":
            std = np.nanstd(values, axis=axis)
            return mean, mean - std, mean + std
        if spread == "minmax":
            return mean, np.nanmin(values, axis=axis), np.nanmax(values, axis=axis)
        low, high = np.nanpercentile(values, [25, 75], axis=axis)
        return mean, low, high


def plot_curves(
    metrics: Mapping[str, Any],
    name: str,
    *,
    x: str | None = None,
    labels: Sequence[str] | None = None,
    spread: str = "std",
    ax: Any = None,
    stop_reward: float | None = None,
    reward_range: tuple[float, float] | None = None,
) -> Any:
    """Plots ``metrics[name]``'s mean (or IQM) over seeds with a shaded band, one line per
    configuration.

    Args:
      metrics: ``{name: [S, T] or [C, S, T]}`` from
        :func:`~jaxlearner.anakin.sweeps.train_seeds` or a
        :class:`~jaxlearner.anakin.sweeps.SweepResult`.
      name: the metric, e.g. ``"eval/return_mean"`` or ``"episode_return_mean"``.
      x: the metric on the x axis; default ``"eval/env_steps"`` for ``eval/``
        metrics, else ``"env_steps"`` (the iteration index if absent).
      labels: one legend label per configuration.
      spread: ``"std"``, ``"minmax"``, ``"quartiles"`` or ``"iqm"`` (the interquartile mean
        with its 95% stratified bootstrap interval: what reviewers ask for).
      ax: a matplotlib ``Axes``; default a new figure's.
      stop_reward: drawn as a dashed horizontal line when given.
      reward_range: ``(low, high)``, the env's bounds on an episode's return
        where known (e.g. ``(0, 500)`` for CartPole-v1): the band is clipped to
        them (a mean +- std band can pass them) and so are the y limits.

    Returns:
      The ``Axes``.

    Raises:
      KeyError: for a metric that is not there.
      ValueError: for values that are not ``[S, T]`` or ``[C, S, T]``, or a
        wrong number of labels.

    Example:
      >>> ax = plot_curves(metrics, "eval/return_mean", labels=["a", "b"])  # doctest: +SKIP
      >>> ax.figure.savefig("curves.png")                                 # doctest: +SKIP
    """
    if name not in metrics:
        raise KeyError(f"No metric {name!r}; metrics: {sorted(metrics)}.")
    values = np.asarray(metrics[name], np.float64)
    if values.ndim not in (2, 3):
        raise ValueError(
            f"plot_curves needs {name!r} as [seeds, T] or [configs, seeds, T]; got shape "
            f"{values.shape}."
        )
    curves = values[None] if values.ndim == 2 else values
    if labels is not None and len(labels) != curves.shape[0]:
        raise ValueError(f"Got {len(labels)} labels for {curves.shape[0]} configurations.")
    x_name = x or ("eval/env_steps" if name.startswith("eval/") else "env_steps")
    if x_name in metrics:
        steps = np.asarray(metrics[x_name], np.float64).reshape(-1, values.shape[-1])[0]
    elif x is None:
        x_name, steps = "iteration", np.arange(1, values.shape[-1] + 1)
    else:
        raise KeyError(f"No metric {x!r} for the x axis; metrics: {sorted(metrics)}.")

    import matplotlib.pyplot as plt  # an optional dependency: imported only to plot

    if ax is None:
        _, ax = plt.subplots()
    mean, low, high = curve_stats(curves, spread)
    low, high = _clip(low, reward_range), _clip(high, reward_range)
    for index in range(curves.shape[0]):
        label = None if labels is None else labels[index]
        (line,) = ax.plot(steps, mean[index], label=label)
        ax.fill_between(steps, low[index], high[index], color=line.get_color(), alpha=0.2)
    ax.set_xlabel(x_name)
    ax.set_ylabel(name)
    center = "IQM and 95% bootstrap CI" if spread == "iqm" else f"mean and {spread}"
    ax.set_title(f"{name}: {center} over {curves.shape[1]} seeds")
    if stop_reward is not None:
        draw_stop_reward(ax, stop_reward)
    _limit_y(ax, reward_range)
    if labels is not None or stop_reward is not None:
        place_legend(ax)
    return ax


TRAINING_LABEL = "training return, {window}-episode moving mean, with exploration"
"""The legend text of a run's training curve (``window``: episodes averaged)."""

TRAINING_BAND_LABEL = "training return, min to max of those {window} episodes"
"""The legend text of the band around a run's training curve."""

EVALUATION_LABEL = "evaluation return, deterministic policy"
"""The legend text of a run's evaluation points."""


def plot_run(
    records: Sequence[Mapping[str, Any]],
    *,
    ax: Any = None,
    label: str | None = None,
    stop_reward: float | None = None,
    reward_range: tuple[float, float] | None = None,
    window: int = 100,
) -> Any:
    """Plots one run's training curve, its min-max band and its evaluation points.

    The training curve is ``episode_return_mean``: the mean return of the
    last ``window`` episodes, played while exploring, so it trails and
    undershoots the policy's own return. The evaluation points
    (``eval/return_mean``) are episodes played with the deterministic policy.
    The x axis is env steps, comparable across algorithms.

    Args:
      records: the run's metrics, as
        :func:`~jaxlearner.training.outputs.loggers.read_json_lines` returns them;
        records without ``env_steps`` are skipped.
      ax: a matplotlib ``Axes``; default a new figure's. Call again with the
        same ``ax`` to compare runs.
      label: the run's name, put before each legend text (e.g. ``"ppo
        CartPole-v1 (run1)"``).
      stop_reward: the return that stops the run, drawn as a dashed
        horizontal line (once per ``Axes`` and value).
      reward_range: ``(low, high)``, the env's bounds on an episode's return
        where known; the band and the y limits are clipped to them.
      window: the episodes in the moving mean, for the legend (the
        trainer's ``RECENT_EPISODES``).

    Returns:
      The ``Axes``. Call :func:`place_legend` once all runs are drawn.

    Raises:
      ValueError: when no record holds a return to plot.

    Example:
      >>> records = read_json_lines("runs/ppo/metrics.jsonl")  # doctest: +SKIP
      >>> ax = plot_run(records, stop_reward=475, reward_range=(0, 500))  # doctest: +SKIP
      >>> place_legend(ax)  # doctest: +SKIP
      >>> ax.figure.savefig("curve.png", bbox_inches="tight")  # doctest: +SKIP
    """
    train = [r for r in records if _finite(r, "episode_return_mean") and _finite(r, "env_steps")]
    evals = [r for r in records if _finite(r, "eval/return_mean") and _finite(r, "env_steps")]
    if not train and not evals:
        raise ValueError("The records hold no episode_return_mean or eval/return_mean to plot.")
    import matplotlib.pyplot as plt  # an optional dependency: imported only to plot

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    prefix = f"{label}: " if label else ""
    color = None
    if train:
        steps = np.array([r["env_steps"] for r in train], np.float64)
        (line,) = ax.plot(
            steps,
            [r["episode_return_mean"] for r in train],
            label=prefix + TRAINING_LABEL.format(window=window),
        )
        color = line.get_color()
        banded = [
            r
            for r in train
            if _finite(r, "episode_return_min") and _finite(r, "episode_return_max")
        ]
        if banded:
            ax.fill_between(
                [r["env_steps"] for r in banded],
                _clip(np.array([r["episode_return_min"] for r in banded]), reward_range),
                _clip(np.array([r["episode_return_max"] for r in banded]), reward_range),
                color=color,
                alpha=0.15,
                linewidth=0,
                label=prefix + TRAINING_BAND_LABEL.format(window=window),
            )
    if evals:
        ax.plot(
            [r["env_steps"] for r in evals],
            [r["eval/return_mean"] for r in evals],
            "o",
            color=color,
            markeredgecolor="black",
            markeredgewidth=0.5,
            label=prefix + EVALUATION_LABEL,
        )
    if stop_reward is not None:
        draw_stop_reward(ax, stop_reward)
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return")
    ax.grid(alpha=0.3)
    _limit_y(ax, reward_range)
    return ax


def draw_stop_reward(ax: Any, stop_reward: float) -> Any:
    """Draws ``stop_reward`` as a dashed horizontal line, once per ``Axes`` and value.

    Returns:
      The line (``Line2D``), with ``gid="stop_reward"``.
    """
    for line in ax.get_lines():
        if line.get_gid() == "stop_reward" and line.get_ydata()[0] == stop_reward:
            return line
    return ax.axhline(
        stop_reward,
        color="black",
        linestyle="--",
        linewidth=1,
        alpha=0.7,
        label=f"stop reward {stop_reward:g}",
        gid="stop_reward",
    )


def place_legend(ax: Any) -> Any:
    """Puts the legend below the axes, off the data; save with ``bbox_inches="tight"``.

    Returns:
      The ``Legend``.
    """
    return ax.legend(
        loc="upper left",
        bbox_to_anchor=(0.0, -0.14),
        fontsize="small",
        frameon=False,
    )


def _finite(record: Mapping[str, Any], key: str) -> bool:
    value = record.get(key)
    return isinstance(value, (int, float)) and bool(np.isfinite(value))


def _clip(values: np.ndarray, reward_range: tuple[float, float] | None) -> np.ndarray:
    if reward_range is None:
        return values
    low, high = reward_range
    return np.clip(values, low, high)


def _limit_y(ax: Any, reward_range: tuple[float, float] | None) -> None:
    """Keeps the y limits within the reward bounds, plus a 3% margin for markers."""
    if reward_range is None:
        return
    low, high = reward_range
    if not low < high:
        raise ValueError(f"reward_range must be (low, high) with low < high; got {reward_range}.")
    margin = 0.03 * (high - low) if np.isfinite(high - low) else 0.0
    bottom, top = ax.get_ylim()
    bottom = max(bottom, low - margin) if np.isfinite(low) else bottom
    top = min(top, high + margin) if np.isfinite(high) else top
    ax.set_ylim(bottom, top)
