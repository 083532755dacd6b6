"""Small files that survive a crash: atomic writes, and JSON lines read with a torn tail.

Every layer that writes a small file (a run's ``run.json``, a dataset's metadata, the
rewritten ``metrics.jsonl`` of a resumed run) writes it with :func:`write_atomic`: the
text goes to a temporary file in the same folder, is flushed to the disk, and replaces
the old file in one ``os.replace``, so a reader sees the old file or the new one, never
half of either, whenever the writer is killed.

An appended JSON lines file (``metrics.jsonl``) cannot be replaced per line; a run
killed while appending leaves a partial last line. :func:`read_json_lines` skips such a
torn last line with a one-line notice and refuses a damaged line before it, naming the
file and the line; a resumed run rewrites the file without it (with :func:`write_atomic`)
before it appends again.

Example:
  >>> import pathlib, tempfile
  >>> folder = pathlib.Path(tempfile.mkdtemp())
  >>> write_atomic(folder / "run.json", '{"algorithm": "ppo"}\\n')
  >>> _ = (folder / "m.jsonl").write_text('{"step": 1}\\n{"step": 2')
  >>> read_json_lines(folder / "m.jsonl", notice=lambda line: None)
  [{'step': 1}]
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile
from collections.abc import Callable
from typing import Any


class JSONLinesError(ValueError):
    """A line before the last of a JSON lines file is not a JSON object."""


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Writes ``text`` to ``path`` so that a crash leaves the old file or the new one.

    The text goes to a temporary file beside ``path``, is fsynced, replaces ``path``
    with ``os.replace``, and the folder is fsynced so the new name is on disk too.

    Args:
      path: the file; its folder must exist.
      text: the whole content, written as UTF-8.

    Raises:
      OSError: when the folder is not writable (the temporary file is removed).
    """
    target = pathlib.Path(path)
    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        pathlib.Path(temporary).unlink(missing_ok=True)
        raise
    sync_folder(target.parent)


def file_in_the_way(path: str | os.PathLike[str]) -> pathlib.Path | None:
    """What keeps ``path`` from being a folder: the file at it, or at the nearest existing
    path above it; ``None`` when ``path`` is a folder or one can be made there.

    Example:
      >>> import tempfile
      >>> file = pathlib.Path(tempfile.mkdtemp()) / "notes"
      >>> _ = file.write_text("mine")
      >>> file_in_the_way(file / "run") == file, file_in_the_way(file.parent / "run")
      (True, None)
    """
    existing = pathlib.Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return None if existing.is_dir() else existing


def sync_folder(folder: str | os.PathLike[str]) -> None:
    """fsyncs a folder, so the names created or replaced in it survive a power loss."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _print_notice(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def read_json_lines(
    path: str | os.PathLike[str], *, notice: Callable[[str], None] = _print_notice
) -> list[dict[str, Any]]:
    """The JSON objects of a JSON lines file, one per line, in order; blank lines skipped.

    Args:
      path: the file (e.g. a run's ``metrics.jsonl``).
      notice: called with one line when a torn last line is skipped (default: printed
        on stderr).

    Returns:
      The records.

    Raises:
      JSONLinesError: when a line before the last is not a JSON object, naming the
        file and the line number (the file is damaged, not merely cut short).

    Example:
      >>> records = read_json_lines("runs/ppo/metrics.jsonl")  # doctest: +SKIP
    """
    records, torn = _parse(pathlib.Path(path))
    if torn is not None:
        notice(
            f"note: {path}: skipped its last line {torn}, cut short (a run stopped while "
            "writing it)"
        )
    return records


def _parse(path: pathlib.Path, text: str | None = None) -> tuple[list[dict[str, Any]], int | None]:
    """The records, and the number of a torn last line (``None`` when the file is whole)."""
    if text is None:
        text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    records = []
    for number, line in enumerate(lines[: last + 1], start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        elif number == last + 1:
            return records, number
        else:
            raise JSONLinesError(
                f"{path}, line {number}: not a JSON object ({_excerpt(line)}); the file is "
                "damaged before its last line"
            )
    return records, None


def _excerpt(line: str, limit: int = 60) -> str:
    text = line.strip()
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
