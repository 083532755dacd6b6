"""What orbax prints that a user of :class:`~jaxlearner.CheckpointManager` should not see.

Orbax-free filters used by :mod:`jaxlearner.checkpoint.manager`:

* :func:`without_read_only_notices`: the two warnings orbax logs for every read-only
  manager (what was asked for), dropped while one is made;
* :func:`quiet_orbax_failures`: when a save or a restore fails, the manager raises the
  failure to its caller; orbax also logs it, with a traceback, from each background
  thread that met it, and a failed restore leaves reads pending on an event loop orbax
  has closed, which complain (``Event loop is closed``, ``Exception ignored in:
  <coroutine ...>``) when they finish or are collected, long after the error was
  raised. Both are dropped: orbax's ERROR log records and the unraisable exceptions of
  its abandoned coroutines. Everything else passes through.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

_READ_ONLY_NOTICES = (
    "CheckpointManagerOptions.read_only=True",
    "Given directory is read only",
)
_ORBAX = f"{os.sep}orbax{os.sep}"
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


def quiet_orbax_failures() -> None:
    """Installs, once per process, the filters that drop orbax's echoes of a failure.

    A log filter on the ``absl`` logger drops ERROR records logged from orbax's own
    files; ``sys.unraisablehook`` is wrapped to drop the complaints of orbax's abandoned
    coroutines and event loops, and passes everything else to the hook before it.
    """
    global _installed
    if _installed:
        return
    _installed = True
    logging.getLogger("absl").addFilter(_not_an_orbax_error)
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not _orbax_leftover(unraisable):
            previous(unraisable)

    sys.unraisablehook = hook


def _not_an_orbax_error(record: logging.LogRecord) -> bool:
    return record.levelno < logging.ERROR or _ORBAX not in record.pathname


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
