"""Weights & Biases as a writer: the one module that imports ``wandb``.

``pip install "jaxlearner[wandb]"``. Metrics are logged at ``env_steps`` (the x axis that
compares across algorithms), the resolved config becomes the run's config, and
:meth:`WandbWriter.log_video` attaches an evaluation video. ``mode="offline"`` (or
``WANDB_MODE=offline``) needs no network and no account: the run is kept under ``dir`` and
``wandb sync`` uploads it later; the tests use it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any, Literal, final

Mode = Literal["online", "offline", "disabled"]
MODES: tuple[str, ...] = ("online", "offline", "disabled")


def require_wandb() -> None:
    """Raises ``ImportError`` naming the extra when wandb is not installed (the command
    line checks before it makes a run folder)."""
    try:
        import wandb  # noqa: F401
    except ImportError as error:
        raise ImportError("WandbWriter needs wandb: pip install 'jaxlearner[wandb]'.") from error


@final
class WandbWriter:
    """Logs metrics to a Weights & Biases run, keyed by env steps.

    Args:
      project: the W&B project.
      name: the run's name (W&B makes one up if ``None``).
      config: the run's config, e.g. the resolved algorithm config (``dataclasses.asdict``)
        and the training settings; shown and compared in W&B's tables.
      mode: ``"online"``, ``"offline"`` (no network, no account) or ``"disabled"``;
        ``None``: W&B's own setting (``WANDB_MODE``, else online).
      dir: where W&B keeps the run's files (default: W&B's, ``./wandb``).

    Raises:
      ImportError: when wandb is not installed, saying how to install it.
      ValueError: for an unknown ``mode``, listing the valid ones.

    Example:
      >>> writer = WandbWriter("cartpole", config={"lr": 1e-3}, mode="offline")  # doctest: +SKIP
      >>> trainer = jl.Trainer(learner, "CartPole-v1", writers=[writer])        # doctest: +SKIP
    """

    def __init__(
        self,
        project: str = "jaxlearner",
        name: str | None = None,
        config: Mapping[str, Any] | None = None,
        mode: Mode | None = None,
        dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if mode is not None and mode not in MODES:
            raise ValueError(f"WandbWriter mode must be one of {list(MODES)}; got {mode!r}.")
        require_wandb()
        import wandb

        self._wandb = wandb
        self._run = wandb.init(
            project=project,
            name=name,
            config=dict(config or {}),
            mode=mode,
            dir=None if dir is None else os.fspath(dir),
            reinit="create_new",
        )
        self._step = -1

    @property
    def run(self) -> Any:
        """The ``wandb`` run (``run.id``, ``run.dir``, ``run.config``)."""
        return self._run

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        """Logs the finite metrics at ``metrics["env_steps"]`` if present, else at ``step``.

        W&B's steps only go forward; an evaluation row written after its iteration's row
        (same env steps) joins that step.
        """
        at = int(metrics["env_steps"]) if "env_steps" in metrics else int(step)
        finite = {k: float(v) for k, v in metrics.items() if math.isfinite(v)}
        self._run.log(finite, step=max(at, self._step))
        self._step = max(at, self._step)

    def log_config(self, config: Mapping[str, Any]) -> None:
        """Adds ``config`` to the run's config (e.g. settings known after it started)."""
        self._run.config.update(dict(config), allow_val_change=True)

    def log_video(self, path: str | os.PathLike[str], key: str = "eval/video") -> None:
        """Attaches an evaluation video (``.mp4`` or ``.gif``) at the latest step."""
        self._run.log({key: self._wandb.Video(os.fspath(path))}, step=max(self._step, 0))

    def close(self) -> None:
        self._run.finish()
