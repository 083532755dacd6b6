"""Stop conditions: composable values that decide when a training run ends.

A stop condition is a pure function of the run's history, a sequence of flat
metric dicts (one per iteration; evaluation results merged in under
``"eval/..."`` keys where an evaluation ran). It reads no clock and keeps no
state, so a condition can be tested on a hand-written history and reused.
A condition whose metric has not been recorded yet does not stop the run.
:class:`AnyOf` and :class:`AllOf` combine conditions (``Any`` and ``All`` are
their older names, kept as aliases).

Example:
  >>> import jaxlearner as jl
  >>> stop = jl.AnyOf(jl.RewardBound(475.0), jl.MaxEnvSteps(200_000))
  >>> stop([{"env_steps": 1000, "eval/return_mean": 480.0}])
  True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from jaxlearner.training.history import column, tail

History = Sequence[Mapping[str, float]]


@runtime_checkable
class StopCondition(Protocol):
    """``condition(history) -> bool``: whether to stop after the last entry."""

    def __call__(self, history: History) -> bool: ...


def _values(history: History, key: str) -> list[float]:
    return column(history, key)


def _check_key(key: object) -> None:
    if not isinstance(key, str) or not key:
        raise ValueError(f"A stop condition's key must be a metric name; got {key!r}.")


def _check_positive(name: str, value: object, integer: bool = False) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:
        raise ValueError(
            f"{name} must be a positive {'int' if integer else 'number'}; got {value!r}."
        )


@dataclasses.dataclass(frozen=True)
class RewardBound:
    """Stop once ``key`` reaches ``bound`` (by default the mean evaluation return).

    Attributes:
      bound: the value to reach (``>=``).
      key: the metric; ``"eval/return_mean"`` or e.g. ``"episode_return_mean"``.
      times: how many of the latest recorded values must all reach the bound
        (2 or more guards against stopping on one lucky evaluation).
    """

    bound: float
    key: str = "eval/return_mean"
    times: int = 1

    def __post_init__(self) -> None:
        _check_key(self.key)
        if not isinstance(self.bound, int | float) or not math.isfinite(self.bound):
            raise ValueError(f"RewardBound.bound must be a finite number; got {self.bound!r}.")
        _check_positive("RewardBound.times", self.times, integer=True)

    def __call__(self, history: History) -> bool:
        values = tail(history, self.key, self.times)
        return len(values) == self.times and min(values) >= self.bound


@dataclasses.dataclass(frozen=True)
class MaxEnvSteps:
    """Stop once the lifetime env steps reach ``steps``."""

    steps: int
    key: str = "env_steps"

    def __post_init__(self) -> None:
        _check_positive("MaxEnvSteps.steps", self.steps, integer=True)
        _check_key(self.key)

    def __call__(self, history: History) -> bool:
        values = tail(history, self.key, 1)
        return bool(values) and values[-1] >= self.steps


@dataclasses.dataclass(frozen=True)
class MaxIterations:
    """Stop after ``iterations`` training iterations."""

    iterations: int
    key: str = "iteration"

    def __post_init__(self) -> None:
        _check_positive("MaxIterations.iterations", self.iterations, integer=True)
        _check_key(self.key)

    def __call__(self, history: History) -> bool:
        values = tail(history, self.key, 1)
        return bool(values) and values[-1] >= self.iterations


@dataclasses.dataclass(frozen=True)
class MaxWallTime:
    """Stop once the run's recorded wall time reaches ``seconds``."""

    seconds: float
    key: str = "time_total_s"

    def __post_init__(self) -> None:
        _check_positive("MaxWallTime.seconds", self.seconds)
        _check_key(self.key)

    def __call__(self, history: History) -> bool:
        values = tail(history, self.key, 1)
        return bool(values) and values[-1] >= self.seconds


@dataclasses.dataclass(frozen=True)
class Plateau:
    """Stop when ``key`` stayed within a band of ``tolerance`` over the last ``patience`` records.

    Attributes:
      key: the metric.
      patience: records in the window (at least 2).
      tolerance: the largest ``max - min`` over the window that counts as flat.
    """

    key: str
    patience: int = 10
    tolerance: float = 0.0

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_positive("Plateau.patience", self.patience, integer=True)
        if self.patience < 2:
            raise ValueError(f"Plateau.patience must be at least 2; got {self.patience}.")
        if not isinstance(self.tolerance, int | float) or self.tolerance < 0:
            raise ValueError(f"Plateau.tolerance must be >= 0; got {self.tolerance!r}.")

    def __call__(self, history: History) -> bool:
        window = tail(history, self.key, self.patience)
        return len(window) == self.patience and max(window) - min(window) <= self.tolerance


@dataclasses.dataclass(frozen=True)
class StopsIncreasing:
    """Stop when ``key`` has set no new maximum in the last ``patience`` records.

    Attributes:
      key: the metric.
      patience: records without a new best before stopping.
      min_delta: how much a new value must exceed the best to count.
    """

    key: str
    patience: int = 10
    min_delta: float = 0.0

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_positive("StopsIncreasing.patience", self.patience, integer=True)

    def __call__(self, history: History) -> bool:
        values = _values(history, self.key)
        if len(values) <= self.patience:
            return False
        best_before = max(values[: -self.patience])
        return max(values[-self.patience :]) <= best_before + self.min_delta


@dataclasses.dataclass(frozen=True)
class StopsDecreasing:
    """Stop when ``key`` has set no new minimum in the last ``patience`` records."""

    key: str
    patience: int = 10
    min_delta: float = 0.0

    def __post_init__(self) -> None:
        _check_key(self.key)
        _check_positive("StopsDecreasing.patience", self.patience, integer=True)

    def __call__(self, history: History) -> bool:
        values = _values(history, self.key)
        if len(values) <= self.patience:
            return False
        best_before = min(values[: -self.patience])
        return min(values[-self.patience :]) >= best_before - self.min_delta


def _check_conditions(name: str, conditions: tuple[object, ...]) -> None:
    if not conditions:
        raise ValueError(f"{name} needs at least one condition.")
    for condition in conditions:
        if not callable(condition):
            raise TypeError(f"{name} got {condition!r}, which is not a stop condition.")


class AllOf:
    """Stop when every condition says stop.

    Example:
      >>> import jaxlearner as jl
      >>> stop = jl.AllOf(jl.RewardBound(200.0), jl.MaxEnvSteps(10_000))
    """

    def __init__(self, *conditions: StopCondition) -> None:
        _check_conditions("AllOf", conditions)
        self.conditions = conditions

    def __call__(self, history: History) -> bool:
        return all(condition(history) for condition in self.conditions)

    def __repr__(self) -> str:
        return f"AllOf({', '.join(map(repr, self.conditions))})"


class AnyOf:
    """Stop when any condition says stop (a list of conditions means the same)."""

    def __init__(self, *conditions: StopCondition) -> None:
        _check_conditions("AnyOf", conditions)
        self.conditions = conditions

    def __call__(self, history: History) -> bool:
        return any(condition(history) for condition in self.conditions)

    def __repr__(self) -> str:
        return f"AnyOf({', '.join(map(repr, self.conditions))})"


# The older names, kept so that existing code runs unchanged. ``Any`` collides with
# ``typing.Any`` in any module that imports both by name, hence AnyOf/AllOf.
All = AllOf
"""Backwards-compatible alias of :class:`AllOf`."""
Any = AnyOf
"""Backwards-compatible alias of :class:`AnyOf`."""
