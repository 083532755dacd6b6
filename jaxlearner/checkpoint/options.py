"""How a :class:`~jaxlearner.CheckpointManager` saves, keeps, ranks and restores steps.

:class:`CheckpointOptions` is the validated configuration; it is re-exported
by :mod:`jaxlearner.checkpoint.manager`, which turns it into orbax's options and
preservation policy. The ranking by ``best_metric`` lives here, free of orbax:
a missing or NaN value ranks worst, and a manager that ranks steps refuses a
save whose metrics lack the metric.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

from jaxlearner.errors import ReadableKeyError

BestMode: TypeAlias = Literal["max", "min"]


@dataclasses.dataclass(frozen=True)
class CheckpointOptions:
    """How a :class:`~jaxlearner.CheckpointManager` saves, keeps and restores steps.

    Attributes:
      max_to_keep: keep the latest ``max_to_keep`` steps; ``None`` keeps all.
      keep_best: also keep the ``keep_best`` best steps by ``best_metric``.
      best_metric: ``"/"``-separated key of the metric that ranks steps, into
        the metrics passed to ``save`` (e.g. ``"eval/return_mean"`` or
        ``"policy/total_loss"``). Required with ``keep_best``; every save must
        then pass it.
      best_mode: ``"max"`` (higher is better) or ``"min"``.
      async_save: write in a background thread; ``save`` returns once the
        arrays are copied off the devices. ``False`` waits for the write.
      verify: store a sha256 digest of every leaf at save and check it at
        restore (a checkpoint saved without digests restores unchecked).
      read_only: never create, write or delete anything (e.g. an evaluator
        reading a directory a trainer writes).

    The latest step is always kept, whatever the ranking says.
    """

    max_to_keep: int | None = 3
    keep_best: int = 0
    best_metric: str | None = None
    best_mode: BestMode = "max"
    async_save: bool = True
    verify: bool = True
    read_only: bool = False

    def __post_init__(self) -> None:
        if self.max_to_keep is not None and not _is_int(self.max_to_keep, minimum=1):
            raise ValueError(
                f"max_to_keep must be a positive int or None (keep all); got {self.max_to_keep!r}."
            )
        if not _is_int(self.keep_best, minimum=0):
            raise ValueError(f"keep_best must be an int >= 0; got {self.keep_best!r}.")
        if self.best_metric is not None and (
            not isinstance(self.best_metric, str)
            or not self.best_metric.strip("/")
            or "//" in self.best_metric
        ):
            raise ValueError(
                "best_metric must be a '/'-separated metric key such as 'eval/return_mean'; "
                f"got {self.best_metric!r}."
            )
        if self.keep_best and self.best_metric is None:
            raise ValueError(
                f"keep_best={self.keep_best} needs best_metric=... (e.g. 'eval/return_mean') to "
                "rank steps by."
            )
        if self.best_mode not in ("max", "min"):
            raise ValueError(f"best_mode must be 'max' or 'min'; got {self.best_mode!r}.")
        for name in ("async_save", "verify", "read_only"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool; got {getattr(self, name)!r}.")


def checkpoint_options(options: Mapping[str, Any]) -> CheckpointOptions:
    """:class:`CheckpointOptions` from keyword options, naming any unknown one.

    Raises:
      TypeError: for an unknown option, listing the valid ones.
    """
    valid = [field.name for field in dataclasses.fields(CheckpointOptions)]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise TypeError(f"CheckpointManager got unknown option(s) {unknown}; valid: {valid}.")
    return CheckpointOptions(**options)


def metric_ranker(key: str, mode: BestMode) -> Any:
    """The function orbax ranks steps with: the metric ``key``, worst when missing or NaN."""
    worst = -math.inf if mode == "max" else math.inf

    def rank(metrics: Any) -> float:
        value = metrics.get(key) if isinstance(metrics, Mapping) else None
        try:
            number = float(value)  # also parses the "nan" / "inf" strings non-finite values get
        except (TypeError, ValueError):
            return worst
        return worst if math.isnan(number) else number

    return rank


def check_best_metric(key: str, metrics: dict[str, Any]) -> None:
    """Raises a ``KeyError`` naming the metric keys when ``key`` is not among them."""
    if key not in metrics:
        raise ReadableKeyError(
            f"This manager ranks steps by best_metric={key!r}, so save needs it in metrics; got "
            f"metric keys {sorted(metrics)}."
        )


def _is_int(value: object, minimum: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= minimum
