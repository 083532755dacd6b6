"""Ctrl-C and SIGTERM as a stop request while a trainer runs.

A run with no stop condition trains until it is asked to stop (rl8's trainer runs until
killed); :func:`stop_on_signals` turns SIGINT and SIGTERM into that request for the length
of a ``run``, so the iteration in flight completes and the trainer can be saved.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Protocol


class StopRequester(Protocol):
    """What asks a run to stop: a trainer (a :class:`~jaxlearner.Driver`)."""

    def request_stop(self) -> None: ...


@contextlib.contextmanager
def stop_on_signals(trainer: StopRequester) -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM call ``trainer.request_stop()``: the run ends
    after the iteration in flight. Only in the main thread, and only for a signal whose
    handler is still Python's default (the command line installs its own, which also
    request a stop and remember the signal); the previous handlers come back after.

    Example:
      >>> with stop_on_signals(trainer):              # doctest: +SKIP
      ...     run_loop(trainer, [], [])               # until Ctrl-C
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    previous = {}
    for number, default in defaults.items():
        if signal.getsignal(number) is default:
            previous[number] = signal.signal(number, lambda *_: trainer.request_stop())
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
