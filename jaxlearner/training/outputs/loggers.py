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
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any, Protocol, final, runtime_checkable

from jaxlearner import files
from jaxlearner.core.metrics import iter_metrics
from jaxlearner.training.outputs.run_config import flatten_config


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
    """Prints a few chosen metrics per iteration, throttled by wall time or env steps.

    An off-policy run can finish an iteration every 16 env steps; printing each
    would flood the terminal. A line is printed when it is due: at least
    ``every_seconds`` of wall time or ``every_env_steps`` env steps (whichever
    comes first, each rule only when set) have passed since the last printed
    line. The first line is always printed, and so is every line holding an
    ``eval/`` metric; :meth:`close` prints the last line held back, so the end
    of the run is always shown. With both rules ``None`` every line is printed.

    While a :class:`ProgressBar` is shown, lines go through ``tqdm.write``, which
    clears the bar, prints the line and redraws the bar below it, so lines and
    bar never mix on one terminal row.

    Args:
      keys: the metrics to print, in order (missing ones are skipped).
      every: consider only every this many iterations (1: all of them).
      stream: where to print (default ``sys.stdout``).
      every_seconds: the least wall time between printed lines (default 2 s);
        ``None``: no time rule.
      every_env_steps: the least env steps (``metrics["env_steps"]``) between
        printed lines; ``None`` (default): no env-step rule.
      clock: seconds, monotonic (default ``time.monotonic``); tests pass a fake.

    Example:
      >>> writer = ConsoleWriter(every_seconds=None, every_env_steps=10_000)  # doctest: +SKIP
    """

    DEFAULT_KEYS = (
        "env_steps",
        "episode_return_mean",
        "eval/return_mean",
        "env_steps_per_s",
        "__all__/total_loss",
    )

    def __init__(
        self,
        keys: Sequence[str] = DEFAULT_KEYS,
        every: int = 1,
        stream: IO[str] | None = None,
        *,
        every_seconds: float | None = 2.0,
        every_env_steps: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"ConsoleWriter every must be a positive int; got {every!r}.")
        if every_seconds is not None and not every_seconds >= 0:
            raise ValueError(
                f"ConsoleWriter every_seconds must be >= 0 or None; got {every_seconds!r}."
            )
        if every_env_steps is not None and (
            not isinstance(every_env_steps, int) or every_env_steps < 1
        ):
            raise ValueError(
                "ConsoleWriter every_env_steps must be a positive int or None; got "
                f"{every_env_steps!r}."
            )
        self._keys = tuple(keys)
        self._every = every
        self._stream = stream
        self._every_seconds = every_seconds
        self._every_env_steps = every_env_steps
        self._clock = clock
        self._last_time: float | None = None
        self._last_env_steps = 0.0
        self._held: str | None = None

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        if step % self._every:
            return
        parts = [f"iter {step}"] + [
            f"{key} {_format(metrics[key])}" for key in self._keys if key in metrics
        ]
        line = " | ".join(parts)
        now = self._clock()
        env_steps = metrics.get("env_steps", self._last_env_steps)
        if self._due(now, env_steps) or any(key.startswith("eval/") for key in metrics):
            self._print(line)
            self._last_time, self._last_env_steps, self._held = now, env_steps, None
        else:
            self._held = line

    def _due(self, now: float, env_steps: float) -> bool:
        if self._last_time is None:
            return True
        if self._every_seconds is None and self._every_env_steps is None:
            return True
        if self._every_seconds is not None and now - self._last_time >= self._every_seconds:
            return True
        return (
            self._every_env_steps is not None
            and env_steps - self._last_env_steps >= self._every_env_steps
        )

    def _print(self, line: str) -> None:
        stream = self._stream or sys.stdout
        if _ACTIVE_BARS:
            from tqdm.auto import tqdm

            tqdm.write(line, file=stream)
            stream.flush()
        else:
            print(line, file=stream, flush=True)

    def close(self) -> None:
        """Prints the last line held back by the throttle, if any."""
        if self._held is not None:
            self._print(self._held)
            self._held = None


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


def _x_step(step: int, metrics: Mapping[str, float]) -> int:
    """The step to log at: ``metrics["env_steps"]`` when present and finite, else ``step``."""
    env_steps = metrics.get("env_steps")
    if env_steps is not None and math.isfinite(env_steps):
        return int(env_steps)
    return step


def read_json_lines(path: str | pathlib.Path) -> list[dict[str, Any]]:
    """The records a :class:`JSONLinesWriter` wrote, in order.

    A last line cut short (a run killed while writing it) is skipped with a one-line
    notice on stderr (see :func:`jaxlearner.files.read_json_lines`).

    Raises:
      jaxlearner.files.JSONLinesError: a ``ValueError`` naming the file and line, for a
        damaged line before the last.
    """
    return files.read_json_lines(path)


def require_tensorboard() -> None:
    """Raises unless tensorboardX is installed (check before a run that will log to it).

    Raises:
      ImportError: naming the extra to install (``jaxlearner[tensorboard]``).
    """
    try:
        import tensorboardX  # noqa: F401
    except ImportError as error:
        raise ImportError(
            "TensorBoardWriter needs tensorboardX: pip install 'jaxlearner[tensorboard]'."
        ) from error


@final
class TensorBoardWriter:
    """Writes scalars with tensorboardX (``pip install jaxlearner[tensorboard]``).

    The x axis is env steps: :meth:`write` logs at ``metrics["env_steps"]``
    when present (else at ``step``, the iteration), so curves of algorithms
    with very different env steps per iteration (PPO, DQN, SAC) line up.

    Args:
      logdir: the TensorBoard log folder.

    Raises:
      ImportError: when tensorboardX is not installed, saying how to install it.
    """

    def __init__(self, logdir: str | pathlib.Path) -> None:
        require_tensorboard()
        from tensorboardX import SummaryWriter

        self._writer = SummaryWriter(str(logdir))

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        """Logs every metric at ``metrics["env_steps"]`` if present, else at ``step``."""
        at = _x_step(step, metrics)
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, at)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


@final
class MLflowWriter:
    """Logs metrics and the run's config to an MLflow run (``pip install jaxlearner[mlflow]``).

    Like :class:`TensorBoardWriter`, it logs at ``metrics["env_steps"]`` when
    present (else at ``step``, the iteration): env steps are the x axis that
    compares across algorithms. As a
    :class:`~jaxlearner.training.outputs.run_config.ConfigWriter` it logs the run's
    config as MLflow params when a trainer is made with it: the algorithm, its
    resolved config (``config/lr``, ... every field), the learner's and the trainer's
    settings (``trainer/num_envs``, ...), as rl8 logs its parameters.

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
        """Logs the finite metrics at ``metrics["env_steps"]`` if present, else at ``step``."""
        finite = {k: v for k, v in metrics.items() if math.isfinite(v)}
        self._mlflow.log_metrics(finite, step=_x_step(step, metrics))

    def log_config(self, config: Mapping[str, Any]) -> None:
        """Logs a nested ``config`` as MLflow params, ``{"config/lr": "0.0003", ...}``
        (:func:`~jaxlearner.training.outputs.run_config.flatten_config`).

        Values longer than MLflow's oldest limit (500 characters) are cut, ending in
        ``...``; they go in batches of 100, MLflow's most per call.

        Example:
          >>> writer.log_config({"config": {"lr": 3e-4}})  # doctest: +SKIP
        """
        flat = {
            name: text if len(text) <= 500 else text[:497] + "..."
            for name, text in flatten_config(config).items()
        }
        names = list(flat)
        for start in range(0, len(names), 100):
            self._mlflow.log_params({name: flat[name] for name in names[start : start + 100]})

    def close(self) -> None:
        self._mlflow.end_run()


_ACTIVE_BARS: list[ProgressBar] = []
"""The bars on screen now; :class:`ConsoleWriter` prints through ``tqdm.write`` while any is."""

COMPILING = "compiling the first iteration..."
"""The bar's postfix until the first iteration ends (it includes XLA compilation)."""

_BAR_FORMAT = (
    "{percentage:3.0f}%|{bar:16}| {n_fmt}/{total_fmt} steps{postfix} [{elapsed}<{remaining}]"
)
"""A bar of fixed width, then what matters most, so a narrow terminal cuts only the times (the
stop rule, which used to stand before the bar and squeeze it, is printed on a line above)."""

_COUNTER_FORMAT = "{n_fmt} steps{postfix} [{elapsed}]"
"""The bar without a budget: a counter."""


def describe_stop(
    max_env_steps: int | None = None,
    stop_reward: float | None = None,
    times: int = 1,
) -> str:
    """A short description of a run's stop rule, for :class:`ProgressBar`.

    Args:
      max_env_steps: the env-step budget, if any.
      stop_reward: the evaluation return that stops the run, if any.
      times: evaluations in a row that must reach ``stop_reward``.

    Returns:
      E.g. ``"stops at 2 evals >= 475 in a row or 300k steps"``; ``""`` when
      neither rule is given.

    Example:
      >>> describe_stop(300_000, 475, times=2)
      'stops at 2 evals >= 475 in a row or 300k steps'
      >>> describe_stop(max_env_steps=1_500_000)
      'stops at 1.5M steps'
    """
    rules = []
    if stop_reward is not None:
        if times > 1:
            rules.append(f"{times} evals >= {stop_reward:g} in a row")
        else:
            rules.append(f"an eval >= {stop_reward:g}")
    if max_env_steps is not None:
        rules.append(f"{_short_count(max_env_steps)} steps")
    return f"stops at {' or '.join(rules)}" if rules else ""


def _short_count(count: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(count) >= size:
            return f"{count / size:.4g}{suffix}"
    return f"{count:g}"


@final
class ProgressBar:
    """A tqdm bar over env steps showing the recent return and steps per second.

    Off when the output is not a terminal, or when ``enabled=False``. Until the
    first :meth:`update`, the bar's postfix says the first iteration is
    compiling (:data:`COMPILING`), which explains a long first wait.
    While the bar is shown, :class:`ConsoleWriter` lines are printed above it.

    Args:
      total: the env steps the run ends at (``MaxEnvSteps.steps`` rounded up to whole
        iterations: :func:`~jaxlearner.training.run_loop.budget_end`), so the bar shows a
        fraction and an ETA; ``None``: a counter without an end. An update past it moves
        the total there: the bar ends at 100%.
      enabled: ``None`` follows whether stderr is a terminal.
      description: text before the bar, e.g. the stop rule from
        :func:`describe_stop`.
      stream: where the bar is drawn (default ``sys.stderr``).

    Example:
      >>> bar = ProgressBar(
      ...     total=300_000, description=describe_stop(300_000, 475, times=2)
      ... )  # doctest: +SKIP
      >>> bar.update({"env_steps": 2048, "episode_return_mean": 21.5})  # doctest: +SKIP
      >>> bar.close()  # doctest: +SKIP
    """

    def __init__(
        self,
        total: int | None = None,
        enabled: bool | None = None,
        *,
        description: str | None = None,
        stream: IO[str] | None = None,
    ) -> None:
        if enabled is None:
            enabled = sys.stderr.isatty()
        self._bar = None
        if enabled:
            from tqdm.auto import tqdm

            if description:  # its own line: on the bar it squeezed the bar to one character
                print(description, file=stream or sys.stderr, flush=True)
            self._bar = tqdm(
                total=total,
                unit="step",
                dynamic_ncols=True,
                file=stream,
                bar_format=_BAR_FORMAT if total else _COUNTER_FORMAT,
                postfix=COMPILING,
            )
            _ACTIVE_BARS.append(self)
        self._last = 0

    @property
    def enabled(self) -> bool:
        """Whether a bar is shown."""
        return self._bar is not None

    def set_total(self, total: int | None) -> None:
        """Sets the env-step budget the bar runs to (``None``: no end)."""
        if self._bar is not None:
            self._bar.total = total
            self._bar.bar_format = _BAR_FORMAT if total else _COUNTER_FORMAT
            self._bar.refresh()

    def set_description(self, description: str) -> None:
        """Prints ``description`` (e.g. :func:`describe_stop`'s) on its own line above the bar."""
        if self._bar is not None:
            self._bar.write(description, file=self._bar.fp)

    def update(self, metrics: Mapping[str, float]) -> None:
        """Moves the bar to ``metrics["env_steps"]`` and shows return and speed."""
        if self._bar is None:
            return
        steps = int(metrics.get("env_steps", self._last))
        if self._bar.total and steps > self._bar.total:
            # Past its total tqdm drops it and shows "0%| 200704/?": the budget is reached.
            self._bar.total = steps
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
        self._bar.set_postfix_str(" ".join(f"{k} {v}" for k, v in shown.items()), refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            _ACTIVE_BARS.remove(self)
