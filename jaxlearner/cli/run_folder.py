"""A run folder of ``jaxlearner train``: its layout, its one owner, reading it, and the error.

A run folder holds ``run.json`` (:data:`RUN_FILE`, the run's settings),
``metrics.jsonl`` (:data:`METRICS_FILE`) and ``checkpoints/`` (:data:`CHECKPOINTS`).
It belongs to one run: a live ``train`` (or ``record``) holds its lock
(:func:`own_folder`), and a new run never writes into a folder that holds one
(:func:`new_run_folder`). A mistake found after parsing is a :class:`UsageError`,
which ``jaxlearner`` prints as one line with exit status 2.
"""

from __future__ import annotations

import datetime
import json
import pathlib
from typing import Any

from jaxlearner.files import JSONLinesError, file_in_the_way, read_json_lines
from jaxlearner.folder_lock import FolderBusyError, FolderLock

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS = "checkpoints"


class UsageError(Exception):
    """A mistake in the command line discovered after parsing."""


def read_run(path: str | pathlib.Path) -> tuple[pathlib.Path, dict[str, Any]]:
    """A run folder of ``jaxlearner train`` and its ``run.json`` (a JSON object).

    Raises:
      UsageError: when ``path`` holds no ``run.json``, or one that is not a JSON object
        naming the run's algorithm and environment.
    """
    run = pathlib.Path(path)
    if not (run / RUN_FILE).is_file():
        raise UsageError(f"{run} is not a run folder of 'jaxlearner train' (no {RUN_FILE})")
    try:
        info = json.loads((run / RUN_FILE).read_text(encoding="utf-8"))
    except (ValueError, OSError) as error:
        raise UsageError(f"{run / RUN_FILE} cannot be read: {error}") from None
    check_run_keys(run, info, {"algorithm": str, "env": str})
    return run, info


def check_run_keys(run: pathlib.Path, info: Any, types: dict[str, type | tuple[type, ...]]) -> None:
    """Raises :class:`UsageError` unless ``run.json``'s object has each key, of its type."""
    if not isinstance(info, dict):
        raise UsageError(f"{run / RUN_FILE} holds {type(info).__name__}, not a JSON object")
    for key, kind in types.items():
        if key not in info:
            raise UsageError(f"{run / RUN_FILE} is damaged: it has no {key!r}")
        if not isinstance(info[key], kind) or isinstance(info[key], bool):
            raise UsageError(f"{run / RUN_FILE} is damaged: {key!r} is {info[key]!r}")


def read_metrics(path: pathlib.Path) -> list[dict[str, Any]]:
    """A run's ``metrics.jsonl`` records (none if missing); a torn last line is skipped.

    Raises:
      UsageError: for a damaged line before the last, naming the file and line.
    """
    if not path.is_file():
        return []
    try:
        return read_json_lines(path)
    except JSONLinesError as error:
        raise UsageError(str(error)) from None


def holds_run(folder: pathlib.Path) -> bool:
    """Whether ``folder`` holds something a run wrote (``run.json``, metrics, checkpoints)."""
    return any((folder / name).exists() for name in (RUN_FILE, METRICS_FILE, CHECKPOINTS))


def own_folder(folder: pathlib.Path, option: str, *, claim: bool = True) -> FolderLock:
    """The lock of ``folder`` (made if missing), held until the process ends or releases it;
    with ``claim=False`` its file is left as it is until the caller claims it
    (:meth:`~jaxlearner.folder_lock.FolderLock.claim`), so a folder refused after this is
    left as it was.

    Raises:
      UsageError: naming the pid of the live ``jaxlearner`` that holds it.
    """
    try:
        return FolderLock(folder, "jaxlearner").acquire(claim)
    except FolderBusyError as error:
        owner = f"pid {error.pid}" if error.pid is not None else "another process"
        raise UsageError(
            f"{option} {folder}: a running jaxlearner ({owner}) writes this folder; one run "
            "per folder: wait for it, stop it, or choose another folder"
        ) from None


def new_run_folder(out: pathlib.Path, *, beside: bool) -> tuple[pathlib.Path, FolderLock]:
    """The folder of a new run, owned: ``out``, or with ``beside`` a fresh ``out-2``, ``out-3``...

    ``out`` is taken when it holds no run. With ``beside``, a folder that holds one
    is left as it is and the run goes to the first of ``out-2``, ``out-3``, ...
    that does not exist (made here, so two runs never pick the same one).

    Raises:
      UsageError: when ``out`` holds a run and ``beside`` is false, or a live run owns it.
    """
    lock = own_folder(out, "--out", claim=False)
    if not holds_run(out):
        return out, lock.claim()
    lock.release()  # the run's folder, its lock file included, as it was
    if not beside:
        raise UsageError(
            f"--out {out} holds a run already; continue it with 'jaxlearner train --resume "
            f"{out}', or start a new run beside it with --new-run ({_sibling(out, 2)}, ...)"
        )
    return sibling_run_folder(out, "--out")


def sibling_run_folder(run: pathlib.Path, option: str) -> tuple[pathlib.Path, FolderLock]:
    """The first of ``RUN-2``, ``RUN-3``, ... that does not exist, made here and owned.

    Raises:
      UsageError: when none is free up to ``RUN-9999`` (naming ``option``).
    """
    for number in range(2, 10_000):
        candidate = _sibling(run, number)
        try:
            candidate.mkdir(parents=True)
        except FileExistsError:
            continue
        return candidate, own_folder(candidate, option)
    raise UsageError(f"{option} {run}: no free folder beside it up to {_sibling(run, 9999)}")


def _sibling(out: pathlib.Path, number: int) -> pathlib.Path:
    return out.with_name(f"{out.name}-{number}")


def default_run_name(algorithm: str, env_id: str) -> str:
    """``runs/ALGORITHM-ENV-TIME``, the run folder when ``--out`` is not given."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"runs/{algorithm}-{env_id}-{stamp}"


def check_folder_path(option: str, path: pathlib.Path) -> None:
    """Raises :class:`UsageError` unless ``path`` is a folder or can be made one.

    Checked before any work, so ``--out FILE`` is one line rather than a
    traceback from ``mkdir`` once the run has been built.
    """
    existing = file_in_the_way(path)
    if existing is not None:
        what = "is a file" if existing == path else f"is under the file {existing}"
        raise UsageError(f"{option} {path}: expected a folder, but {path} {what}")
