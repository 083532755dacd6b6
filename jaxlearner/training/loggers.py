"""Metric writers and the progress bar of training runs.

A writer is anything with ``write(step, metrics)`` and ``close()``
(:class:`Writer`); metrics are a flat ``{name: float}`` dict, already fetched
from the device once per iteration by the trainer. Built in: console,
JSON lines, TensorBoard (``pip install jaxlearner[tensorboard]``) and MLflow
(``pip install jaxlearner[mlflow]``); the last two import their library only
when created.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any, Protocol, final, runtime_checkable

from jaxlearner.core.metrics import iter_metrics


@runtime_checkable
class Writer(Protocol):
    """Receives one flat metrics dict per training iteration."""

    def write(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


def flatten_metrics(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """``{"policy": {"total_loss": x}}`` -> ``{"policy/total_loss": float(x)}``.

    Scalars (Python numbers, numpy or JAX arrays of size 1) become floats;
    other values are dropped, so a writer shows what it can of any stats.
    """
    flat: dict[str, float] = {}
    for key, value in iter_metrics(metrics, prefix):
        try:
            flat[key] = float(value)
        except (TypeError, ValueError):
            continue
    return flat


@final
class ConsoleWriter:
    """Prints a few chosen metrics per iteration, every ``every`` iterations.

    Args:
      keys: the metrics to print, in order (missing ones are skipped).
      every: print every this many iterations.
      stream: where to print (default ``sys.stdout``).
    """

    DEFAULT_KEYS = (
        "env_steps",
        "episode_return_mean",
        "eval/return_mean",
        "env_steps_per_s",
        "__all__/total_loss",
    )

    def __init__(
        self, keys: Sequence[str] = DEFAULT_KEYS, every: int = 1, stream: IO[str] | None = None
    ) -> None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"ConsoleWriter every must be a positive int; got {every!r}.")
        self._keys = tuple(keys)
        self._every = every
        self._stream = stream

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        if step % self._every:
            return
        parts = [f"iter {step}"] + [
            f"{key} {_format(metrics[key])}" for key in self._keys if key in metrics
        ]
        print(" | ".join(parts), file=self._stream or sys.stdout, flush=True)

    def close(self) -> None:
        pass


def _format(value: float) -> str:
    if math.isfinite(value) and value == int(value) and abs(value) < 1e12:
        return str(int(value))
    return f"{value:.4g}"


@final
class JSONLinesWriter:
    """Appends ``{"step": step, **metrics}`` as one JSON line per iteration.

    Args:
      path: the file; parent folders are created. Non-finite values are
        written as ``null``.
    """

    def __init__(self, path: str | pathlib.Path) -> None:
        self._path = pathlib.Path(path)
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self._path.open("a", encoding="utf-8")

    @property
    def path(self) -> pathlib.Path:
        """The file written to."""
        return self._path

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        record = {"step": step}
        record.update({k: (v if math.isfinite(v) else None) for k, v in metrics.items()})
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_json_lines(path: str | pathlib.Path) -> list[dict[str, Any]]:
    """The records a :class:`JSONLinesWriter` wrote, in order."""
    with pathlib.Path(path).open(encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


@final
class TensorBoardWriter:
    """Writes scalars with tensorboardX (``pip install jaxlearner[tensorboard]``).

    Args:
      logdir: the TensorBoard log folder.

    Raises:
      ImportError: when tensorboardX is not installed, saying how to install it.
    """

    def __init__(self, logdir: str | pathlib.Path) -> None:
        try:
            from tensorboardX import SummaryWriter
        except ImportError as error:
            raise ImportError(
                "TensorBoardWriter needs tensorboardX: pip install 'jaxlearner[tensorboard]'."
            ) from error
        self._writer = SummaryWriter(str(logdir))

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


@final
class MLflowWriter:
    """Logs metrics to an MLflow run (``pip install jaxlearner[mlflow]``).

    Args:
      experiment: the MLflow experiment name (created if missing).
      run_name: the run's name.
      tracking_uri: where MLflow stores runs; default MLflow's own setting.

    Raises:
      ImportError: when mlflow is not installed, saying how to install it.
    """

    def __init__(
        self,
        experiment: str = "jaxlearner",
        run_name: str | None = None,
        tracking_uri: str | None = None,
    ) -> None:
        try:
            import mlflow
        except ImportError as error:
            raise ImportError(
                "MLflowWriter needs mlflow: pip install 'jaxlearner[mlflow]'."
            ) from error
        self._mlflow = mlflow
        if tracking_uri is not None:
            mlflow.set_tracking_uri(tracking_uri)
        mlflow.set_experiment(experiment)
        self._run = mlflow.start_run(run_name=run_name)

    @property
    def run_id(self) -> str:
        """The MLflow run id."""
        return self._run.info.run_id

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        finite = {k: v for k, v in metrics.items() if math.isfinite(v)}
        self._mlflow.log_metrics(finite, step=step)

    def close(self) -> None:
        self._mlflow.end_run()


@final
class ProgressBar:
    """A tqdm bar over env steps showing the recent return and steps per second.

    Off when the output is not a terminal, or when ``enabled=False``.

    Args:
      total: the env steps the run aims for, if known.
      enabled: ``None`` follows whether stderr is a terminal.
    """

    def __init__(self, total: int | None = None, enabled: bool | None = None) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self._bar = None
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, unit="step", dynamic_ncols=True)
        self._last = 0

    @property
    def enabled(self) -> bool:
        """Whether a bar is shown."""
        return self._bar is not None

    def update(self, metrics: Mapping[str, float]) -> None:
        """Moves the bar to ``metrics["env_steps"]`` and shows return and speed."""
        if self._bar is None:
            return
        steps = int(metrics.get("env_steps", self._last))
        self._bar.update(max(steps - self._last, 0))
        self._last = steps
        shown = {}
        for key, label in (
            ("episode_return_mean", "return"),
            ("eval/return_mean", "eval"),
            ("env_steps_per_s", "steps/s"),
        ):
            if key in metrics and math.isfinite(metrics[key]):
                shown[label] = f"{metrics[key]:.4g}"
        self._bar.set_postfix(shown, refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
