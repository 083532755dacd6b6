"""Aggregates over seeds that a reviewer trusts: interquartile mean, median, mean and
optimality gap, with stratified bootstrap confidence intervals, and performance profiles.

As Agarwal et al. 2021 ("Deep Reinforcement Learning at the Edge of the Statistical
Precipice", https://arxiv.org/abs/2108.13264) define them and their ``rliable`` library
computes them, written here in a few numpy functions rather than taken as a dependency
(``rliable`` pulls in ``arch``, ``scipy`` and ``seaborn`` for what fits on a page):

- scores are ``[runs, tasks]``: one final score per run (seed) and task (environment);
  one task is ``[runs]`` or ``[runs, 1]``;
- the interquartile mean (IQM) is the mean of the middle 50% of all the scores, pooled over
  tasks: ``scipy.stats.trim_mean(scores, 0.25, axis=None)``, which cuts
  ``int(0.25 * n)`` scores from each end;
- the optimality gap is ``mean(max(target - score, 0))``: how far the runs fall short of a
  target (``1`` for normalized scores; the stop reward for raw returns);
- a stratified bootstrap resamples the runs of each task with replacement, independently
  per task, ``reps`` times; the interval is the percentile interval of the statistic over
  the resamples (``rliable``'s default method);
- a performance profile is, for each threshold ``tau``, the fraction of runs scoring above
  ``tau``, averaged over tasks.

An IQM, a median or a mean of scores lies within their range, and so do their bootstrap
intervals: a band drawn from them never leaves the returns an environment can give.
NaN scores (a run that never evaluated) are left out.

Example:
  >>> scores = np.array([[10.0], [20.0], [30.0], [40.0], [500.0]])  # 5 seeds, 1 task
  >>> float(iqm(scores))
  30.0
  >>> low, high = bootstrap_interval(scores, iqm, reps=200, seed=0)
  >>> bool(10.0 <= low <= 30.0 <= high <= 500.0)
  True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

Statistic = Callable[[np.ndarray], float]
"""``statistic(scores [runs, tasks]) -> float``."""

STATISTICS: tuple[str, ...] = ("iqm", "median", "mean", "optimality_gap")
"""The aggregates :func:`aggregates` reports, in Agarwal et al.'s order."""


def as_scores(scores: Any) -> np.ndarray:
    """``scores`` as float64 ``[runs, tasks]`` (``[runs]`` is one task).

    Raises:
      ValueError: for anything that is not 1- or 2-dimensional, or holds no finite score.
    """
    array = np.asarray(scores, np.float64)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.size == 0:
        raise ValueError(
            f"scores must be [runs] or [runs, tasks] with at least one run; got shape "
            f"{np.shape(scores)}."
        )
    if not np.isfinite(array).any():
        raise ValueError("scores hold no finite value (did any run evaluate?).")
    return array


def _finite(scores: np.ndarray) -> np.ndarray:
    flat = np.asarray(scores, np.float64).reshape(-1)
    return flat[np.isfinite(flat)]


def iqm(scores: Any) -> float:
    """The interquartile mean of all finite scores: the mean after cutting ``int(n / 4)``
    from each end of the sorted scores (``scipy.stats.trim_mean(x, 0.25, axis=None)``).

    Example:
      >>> iqm([1.0, 2.0, 3.0, 4.0, 100.0, 7.0, 8.0, 9.0])
      5.5
    """
    return float(_middle_half_mean(np.sort(_finite(scores))))


def _middle_half_mean(ordered: np.ndarray) -> np.ndarray:
    """The mean of the middle half of each row of ``ordered`` (sorted along its last axis,
    ``n`` long): ``int(n / 4)`` values cut from each end, as ``scipy.stats.trim_mean``."""
    n = ordered.shape[-1]
    cut = int(0.25 * n)
    return ordered[..., cut : n - cut].mean(axis=-1)


def median(scores: Any) -> float:
    """The median of all finite scores."""
    return float(np.median(_finite(scores)))


def mean(scores: Any) -> float:
    """The mean of all finite scores."""
    return float(_finite(scores).mean())


def optimality_gap(scores: Any, target: float = 1.0) -> float:
    """``mean(max(target - score, 0))``: how far the scores fall short of ``target``.

    Example:
      >>> optimality_gap([0.5, 1.0, 1.5])
      0.16666666666666666
    """
    return float(np.maximum(target - _finite(scores), 0.0).mean())


def stratified_resamples(scores: Any, reps: int = 2000, seed: int = 0) -> np.ndarray:
    """``reps`` stratified bootstrap resamples of ``scores``: ``[reps, runs, tasks]``, each
    task's runs drawn with replacement from that task's own runs."""
    array = as_scores(scores)
    runs, tasks = array.shape
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps must be a positive int; got {reps!r}.")
    rng = np.random.default_rng(seed)
    index = rng.integers(0, runs, size=(reps, runs, tasks))
    return np.take_along_axis(np.broadcast_to(array, (reps, runs, tasks)), index, axis=1)


def bootstrap_interval(
    scores: Any,
    statistic: Statistic,
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """The stratified bootstrap percentile interval of ``statistic(scores)``.

    Args:
      scores: ``[runs, tasks]`` (or ``[runs]``).
      statistic: e.g. :func:`iqm`, :func:`median`, :func:`mean`.
      reps: bootstrap resamples (``rliable``'s default is 2000).
      confidence: the interval's coverage, in (0, 1).
      seed: the resampling seed (the same seed, the same interval).

    Returns:
      ``(low, high)``.

    Raises:
      ValueError: for bad scores, ``reps`` or ``confidence``.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1); got {confidence!r}.")
    values = [statistic(sample) for sample in stratified_resamples(scores, reps, seed)]
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.nanpercentile(values, [tail, 100.0 - tail])
    return float(low), float(high)


def aggregates(
    scores: Any,
    *,
    target: float | None = None,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, tuple[float, float, float]]:
    """Each of :data:`STATISTICS` as ``(value, low, high)``, with stratified bootstrap
    intervals; ``optimality_gap`` only when ``target`` is given.

    Example:
      >>> table = aggregates([480.0, 500.0, 495.0, 120.0], target=475.0, reps=500)
      >>> sorted(table), table["iqm"][0]
      (['iqm', 'mean', 'median', 'optimality_gap'], 487.5)
    """
    array = as_scores(scores)
    functions: dict[str, Statistic] = {"iqm": iqm, "median": median, "mean": mean}
    if target is not None:
        functions["optimality_gap"] = lambda sample: optimality_gap(sample, target)
    return {
        name: (
            function(array),
            *bootstrap_interval(array, function, reps=reps, confidence=confidence, seed=seed),
        )
        for name, function in functions.items()
    }


def performance_profile(
    scores: Any,
    taus: Sequence[float],
    *,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fraction of runs scoring above each ``tau``, averaged over tasks, with
    stratified bootstrap intervals.

    Returns:
      ``(fraction, low, high)``, each ``[len(taus)]``.

    Example:
      >>> fraction, _, _ = performance_profile([[1.0], [2.0], [3.0], [4.0]], [0.0, 2.5])
      >>> fraction.tolist()
      [1.0, 0.5]
    """
    array = as_scores(scores)
    thresholds = np.asarray(taus, np.float64).reshape(-1)

    def profile(sample: np.ndarray) -> np.ndarray:
        finite = np.isfinite(sample)
        above = (sample[..., None] > thresholds) & finite[..., None]  # [runs, tasks, taus]
        return (above.sum(axis=-3) / np.maximum(finite.sum(axis=-2), 1)[..., None]).mean(-2)

    resampled = stratified_resamples(array, reps, seed)
    profiles = np.stack([profile(sample) for sample in resampled])
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(profiles, [tail, 100.0 - tail], axis=0)
    return profile(array), low, high


def final_scores(values: Any) -> np.ndarray:
    """Each curve's last finite value: ``[..., T] -> [...]`` (NaN where a curve has none).

    Example:
      >>> final_scores([[1.0, 2.0, np.nan], [3.0, np.nan, np.nan]]).tolist()
      [2.0, 3.0]
    """
    array = np.asarray(values, np.float64)
    if array.ndim < 1 or array.shape[-1] == 0:
        raise ValueError(f"final_scores needs curves [..., T] with T > 0; got {array.shape}.")
    finite = np.isfinite(array)
    last = array.shape[-1] - 1 - np.argmax(finite[..., ::-1], axis=-1)
    picked = np.take_along_axis(array, last[..., None], axis=-1)[..., 0]
    return np.where(finite.any(axis=-1), picked, np.nan)


def iqm_curve(
    values: Any, *, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The IQM over seeds at each time, and its bootstrap interval (the seeds resampled).

    Args:
      values: ``[..., S, T]``: seeds on the second to last axis (e.g. ``[S, T]`` or
        ``[C, S, T]`` from :mod:`jaxlearner.anakin.sweeps`); NaN where a seed has no value.

    Returns:
      ``(iqm, low, high)``, each ``values``' shape without the seeds axis; NaN where no
      seed has a value.

    Example:
      >>> center, low, high = iqm_curve([[0.0, 10.0], [4.0, 20.0], [8.0, 30.0]], reps=100)
      >>> center.tolist()
      [4.0, 20.0]
    """
    array = np.asarray(values, np.float64)
    if array.ndim < 2:
        raise ValueError(f"iqm_curve needs [..., seeds, T]; got shape {array.shape}.")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1); got {confidence!r}.")
    seeds_last = np.moveaxis(array, -2, -1)  # [..., T, S]
    flat = seeds_last.reshape(-1, seeds_last.shape[-1])
    center, low, high = (np.full(len(flat), np.nan) for _ in range(3))
    rng = np.random.default_rng(seed)
    tail = 100.0 * (1.0 - confidence) / 2.0
    for index, series in enumerate(flat):
        finite = series[np.isfinite(series)]
        if finite.size:
            center[index] = iqm(finite)
            samples = np.sort(finite[rng.integers(0, finite.size, (reps, finite.size))], axis=1)
            estimates = _middle_half_mean(samples)
            low[index], high[index] = np.percentile(estimates, [tail, 100.0 - tail])
    shape = seeds_last.shape[:-1]
    return center.reshape(shape), low.reshape(shape), high.reshape(shape)


def format_table(
    groups: Mapping[str, Any],
    *,
    target: float | Sequence[float] | None = None,
    reps: int = 2000,
    seed: int = 0,
) -> str:
    """A plain-text table of :func:`aggregates` per group of runs: ``{label: scores}``.

    Args:
      groups: ``{label: scores}``, each as :func:`as_scores` takes them.
      target: the score the runs aim at (a stop reward), for an optimality-gap column
        (``"opt. gap to 475 [95% CI]"``), or several, a column each (runs compared whose
        stop rewards differ); ``None`` or none: no gap column.
      reps: bootstrap resamples.
      seed: the resampling's seed.

    Example:
      >>> print(format_table({"ppo": [480.0, 500.0, 120.0, 495.0]}, reps=200))  # doctest: +SKIP
      group  runs  IQM [95% CI]            median [95% CI]         mean [95% CI]
      ppo       4  487.5 [300.0, 497.5]   ...
    """
    targets = (target,) if isinstance(target, int | float) else tuple(target or ())
    names = [name for name in STATISTICS if name != "optimality_gap"]
    heads = {"iqm": "IQM", "median": "median", "mean": "mean"}
    header = [
        "group",
        "runs",
        *(f"{heads[name]} [95% CI]" for name in names),
        *(f"opt. gap to {value:g} [95% CI]" for value in targets),
    ]
    rows = []
    for label, scores in groups.items():
        array = as_scores(scores)
        table = aggregates(array, reps=reps, seed=seed)
        found = [table[name] for name in names]
        for value in targets:
            gap = aggregates(array, target=value, reps=reps, seed=seed)["optimality_gap"]
            found.append(gap)
        cells = [f"{v:.1f} [{lo:.1f}, {hi:.1f}]" for v, lo, hi in found]
        rows.append([label, str(int(np.isfinite(array).sum())), *cells])
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            cell.rjust(w) if i == 1 else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in [header, *rows]
    )
