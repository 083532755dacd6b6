"""What orbax prints (or keeps) that a user of :class:`~jaxlearner.CheckpointManager` should not.

Orbax-free filters used by :mod:`jaxlearner.checkpoint.manager`:

* :func:`without_read_only_notices`: the two warnings orbax logs for every read-only
  manager (what was asked for), dropped while one is made;
* :func:`quiet_orbax_failures`: when a save or a restore fails, the manager raises the
  failure to its caller; orbax also logs it, with a traceback, from each background
  thread that met it, and a failed restore leaves reads pending on an event loop orbax
  has closed, which complain (``Event loop is closed``, ``Exception ignored in:
  <coroutine ...>``) when they finish or are collected, long after the error was
  raised; and the futures of the reads that failed beside the one raised log
  ``Future exception was never retrieved`` (or ``Task ...``) when collected. All are
  dropped: orbax's ERROR log records, the unraisable exceptions of its abandoned
  coroutines and asyncio's records of unretrieved tensorstore failures. Everything
  else passes through. It also turns off orbax's count of the bytes tensorstore wrote,
  whose tensorstore call leaks memory (:func:`_skip_leaking_byte_count`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

_READ_ONLY_NOTICES = (
    "CheckpointManagerOptions.read_only=True",
    "Given directory is read only",
)
_ORBAX = f"{os.sep}orbax{os.sep}"
_UNRETRIEVED = ("Future exception was never retrieved", "Task exception was never retrieved")
_installed = False


@contextlib.contextmanager
def without_read_only_notices() -> Iterator[None]:
    """Drops the two warnings orbax logs for every read-only manager (what was asked for).

    ``jl.restore`` and ``jaxlearner eval`` open managers read-only; the notices told users
    nothing and looked like problems. Other orbax warnings pass through.
    """

    def keep(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_READ_ONLY_NOTICES)

    logger = logging.getLogger("absl")
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def quiet_orbax_failures(tensorstore_utils: ModuleType) -> None:
    """Installs, once per process, the filters that drop orbax's echoes of a failure.

    A log filter on the ``absl`` logger drops ERROR records logged from orbax's own
    files, one on the ``asyncio`` logger the unretrieved failures of tensorstore reads;
    ``sys.unraisablehook`` is wrapped to drop the complaints of orbax's abandoned
    coroutines and event loops, and passes everything else to the hook before it.

    Args:
      tensorstore_utils: orbax's ``_src.serialization.tensorstore_utils`` module.
    """
    global _installed
    if _installed:
        return
    _installed = True
    _skip_leaking_byte_count(tensorstore_utils)
    logging.getLogger("absl").addFilter(_not_an_orbax_error)
    logging.getLogger("asyncio").addFilter(_not_an_unretrieved_tensorstore_failure)
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not _orbax_leftover(unraisable):
            previous(unraisable)

    sys.unraisablehook = hook


def _skip_leaking_byte_count(tensorstore_utils: ModuleType) -> None:
    """Turns off orbax's byte count around each array read and write: it leaks memory.

    Orbax (0.12) asks tensorstore for its process-wide kvstore byte counters
    (``ts.experimental_collect_matching_metrics``) before and after it writes or reads
    arrays, only to log a throughput line at INFO level. tensorstore's binding (0.1.86)
    never frees the ~40 Python objects each call returns: half of the 40-65 MB of
    resident memory a process gained per 1,000 saves of a small state (see
    ``benchmarks/bench_memory.py``). Orbax skips the count, and its log line, when the
    starting count is ``None``; this makes it so. Nothing else reads the count.
    """
    if callable(getattr(tensorstore_utils, "get_tensorstore_raw_bytes", None)):
        tensorstore_utils.get_tensorstore_raw_bytes = _no_byte_count


def _no_byte_count(*args: object, **kwargs: object) -> None:
    return None


def _not_an_orbax_error(record: logging.LogRecord) -> bool:
    return record.levelno < logging.ERROR or _ORBAX not in record.pathname


def _not_an_unretrieved_tensorstore_failure(record: logging.LogRecord) -> bool:
    """False for asyncio's record of a tensorstore read's failure nobody retrieved.

    A damaged step fails many of a read's concurrent parts at once; the manager raises
    one failure, and asyncio logs each other one when its future or task is collected
    (the error comes from tensorstore, whose messages name its spec).
    """
    if not record.getMessage().startswith(_UNRETRIEVED):
        return True
    error = record.exc_info[1] if record.exc_info else None
    return error is None or "tensorstore_spec" not in str(error)


def _orbax_leftover(unraisable: Any) -> bool:
    """Whether an unraisable exception comes from a read orbax abandoned."""
    code = getattr(unraisable.object, "cr_code", None)
    if code is not None and _ORBAX in code.co_filename:
        return True
    error = unraisable.exc_value
    if isinstance(error, RuntimeError) and str(error) == "Event loop is closed":
        return True
    trace = unraisable.exc_traceback
    while trace is not None:
        if _ORBAX in trace.tb_frame.f_code.co_filename:
            return True
        trace = trace.tb_next
    return False
