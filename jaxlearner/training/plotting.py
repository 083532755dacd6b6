"""Learning curves of many seeds: the mean and its spread, per configuration.

Metrics from :mod:`jaxlearner.anakin.sweeps` are arrays with a seeds axis,
``[S, T]`` for one configuration or ``[C, S, T]`` for a sweep.
:func:`curve_stats` reduces the seeds axis to a mean and a band (plain
numpy, NaN-aware: an iteration in which no episode ended holds NaN);
:func:`plot_curves` draws them with matplotlib, imported only when called.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

SPREADS: tuple[str, ...] = ("std", "minmax", "quartiles")
"""``std``: mean +- one standard deviation; ``minmax``: the seeds' range;
``quartiles``: the 25th to 75th percentiles."""


def curve_stats(
    values: Any, spread: str = "std", axis: int = -2
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The mean over seeds and a band around it, ignoring NaNs.

    Args:
      values: an array with a seeds axis, e.g. ``[S, T]`` or ``[C, S, T]``.
      spread: ``"std"``, ``"minmax"`` or ``"quartiles"`` (see :data:`SPREADS`).
      axis: the seeds axis (default: second to last).

    Returns:
      ``(mean, low, high)``, each ``values``' shape without ``axis``; NaN where
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
) -> Any:
    """Plots ``metrics[name]``'s mean over seeds with a shaded band, one line per configuration.

    Args:
      metrics: ``{name: [S, T] or [C, S, T]}`` from
        :func:`~jaxlearner.anakin.sweeps.train_seeds` or a
        :class:`~jaxlearner.anakin.sweeps.SweepResult`.
      name: the metric, e.g. ``"eval/return_mean"`` or ``"episode_return_mean"``.
      x: the metric on the x axis; default ``"eval/env_steps"`` for ``eval/``
        metrics, else ``"env_steps"`` (the iteration index if absent).
      labels: one legend label per configuration.
      spread: ``"std"``, ``"minmax"`` or ``"quartiles"``.
      ax: a matplotlib ``Axes``; default a new figure's.

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
    for index in range(curves.shape[0]):
        label = None if labels is None else labels[index]
        (line,) = ax.plot(steps, mean[index], label=label)
        ax.fill_between(steps, low[index], high[index], color=line.get_color(), alpha=0.2)
    ax.set_xlabel(x_name)
    ax.set_ylabel(name)
    ax.set_title(f"{name}: mean and {spread} over {curves.shape[1]} seeds")
    if labels is not None:
        ax.legend()
    return ax
