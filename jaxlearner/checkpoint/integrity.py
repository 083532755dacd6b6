"""What a restore checks before and after reading a step: links, digests, unreadable leaves.

Orbax-free helpers of :mod:`jaxlearner.checkpoint.manager`'s restore path:

* :func:`refuse_links`: every file and folder of a step is its own, never a symlink to
  something elsewhere (a step folder copied with its links, or one planted to make a
  restore read another file), checked before anything in it is read;
* :func:`verify_digests`: each array read has the sha256 saved with it;
* :func:`first_unreadable_leaf`: when a whole-state read fails, the leaf that fails alone.

Damage is a :class:`CheckpointCorruptedError`, a ``ValueError`` naming the step and the
file or leaf; a link is its subclass :class:`CheckpointLinkError`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from typing import Any

from jaxlearner.checkpoint.leaves import digest, host_value
from jaxlearner.checkpoint.metadata import shorten
from jaxlearner.errors import CheckpointCorruptedError, CheckpointLinkError

__all__ = [
    "CheckpointCorruptedError",
    "CheckpointLinkError",
    "check_extra_arrays",
    "corrupted",
    "first_unreadable_leaf",
    "refuse_links",
    "verify_digests",
]


def refuse_links(directory: str, step: int) -> None:
    """Raises when the step's folder, or anything in it, is a symbolic link.

    A local directory only; a URL such as ``gs://...`` has no links to check.

    Raises:
      CheckpointLinkError: naming the first link found and where it points.
    """
    if "://" in directory:
        return
    root = os.path.join(directory, str(step))
    for path in _walk(root):
        if os.path.islink(path):
            raise CheckpointLinkError(
                f"Checkpoint step {step} in {directory} is refused: {path} is a symbolic link "
                f"(to {os.readlink(path)}); a step's files are read only from its own folder."
            )


def _walk(root: str) -> Iterable[str]:
    yield root
    if os.path.islink(root) or not os.path.isdir(root):
        return
    for folder, names, files in os.walk(root, followlinks=False):
        for name in [*names, *files]:
            yield os.path.join(folder, name)


def verify_digests(step: int, saved: dict[str, str], arrays: dict[str, Any], kind: str) -> None:
    """Raises naming the first array whose sha256 differs from the one saved for its path."""
    for path, expected in saved.items():
        actual = digest(host_value(arrays[path]))
        if actual != expected:
            raise CheckpointCorruptedError(
                f"Checkpoint step {step} is corrupted: {kind} {path} has sha256 {actual[:16]}..., "
                f"but {expected[:16]}... was saved. Restore an earlier step."
            )


def corrupted(where: str, error: BaseException) -> CheckpointCorruptedError:
    """The error for damage found at ``where``, with the reader's own message, shortened.

    Tensorstore ends its messages with the whole spec of the store it read and its own
    source locations (a thousand characters of JSON); what went wrong, and in which
    file, comes before them, and is kept.

    Example:
      >>> str(corrupted("Step 3", OSError('NOT_FOUND: Error reading "d/7f" [tensorstore_spec={}]')))
      'Step 3: NOT_FOUND: Error reading "d/7f"'
    """
    reason = _READER_DETAILS.sub("", str(error))
    return CheckpointCorruptedError(f"{where}: {shorten(reason, 400)}")


_READER_DETAILS = re.compile(r"\s*\[(?:tensorstore_spec|source locations)=.*", re.DOTALL)


def check_extra_arrays(
    step: int, directory: str, records: dict[str, Any], found: dict[str, Any], *, verify: bool
) -> None:
    """Raises unless every extra array saved (``records``: path to sha256) was read intact."""
    missing = [path for path in records if path not in found]
    if missing:
        raise CheckpointCorruptedError(
            f"The extra arrays {missing} of step {step} in {directory} are missing."
        )
    if verify:
        saved = {path: sha for path, sha in records.items() if sha is not None}
        verify_digests(step, saved, found, "extra array")


def first_unreadable_leaf(
    paths: Iterable[str], read_alone: Callable[[str], object]
) -> tuple[str, Exception] | None:
    """The first path whose leaf fails when read alone, with its error; ``None`` if none does.

    Args:
      paths: the state's leaf paths, in order.
      read_alone: reads the leaf at one path (and nothing else), raising if it cannot.
    """
    for path in paths:
        try:
            read_alone(path)
        except Exception as error:  # tensorstore reports damage as ValueError, OSError, ...
            return path, error
    return None
