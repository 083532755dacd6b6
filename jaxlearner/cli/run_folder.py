"""A run folder of ``jaxlearner train``: its layout, reading it, and the command line's error.

A run folder holds ``run.json`` (:data:`RUN_FILE`, the run's settings),
``metrics.jsonl`` (:data:`METRICS_FILE`) and ``checkpoints/`` (:data:`CHECKPOINTS`).
A mistake found after parsing is a :class:`UsageError`, which ``jaxlearner``
prints as one line with exit status 2.
"""

from __future__ import annotations

import datetime
import json
import pathlib
from typing import Any

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS = "checkpoints"


class UsageError(Exception):
    """A mistake in the command line discovered after parsing."""


def read_run(path: str | pathlib.Path) -> tuple[pathlib.Path, dict[str, Any]]:
    """A run folder of ``jaxlearner train`` and its ``run.json`` (a JSON object).

    Raises:
      UsageError: when ``path`` holds no ``run.json``.
    """
    run = pathlib.Path(path)
    if not (run / RUN_FILE).is_file():
        raise UsageError(f"{run} is not a run folder of 'jaxlearner train' (no {RUN_FILE})")
    return run, json.loads((run / RUN_FILE).read_text())


def default_run_name(algorithm: str, env_id: str) -> str:
    """``runs/ALGORITHM-ENV-TIME``, the run folder when ``--out`` is not given."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"runs/{algorithm}-{env_id}-{stamp}"


def check_folder_path(option: str, path: pathlib.Path) -> None:
    """Raises :class:`UsageError` unless ``path`` is a folder or can be made one.

    Checked before any work, so ``--out FILE`` is one line rather than a
    traceback from ``mkdir`` once the run has been built.
    """
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == path else f"is under the file {existing}"
        raise UsageError(f"{option} {path}: expected a folder, but {path} {what}")
