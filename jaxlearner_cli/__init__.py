"""The ``jaxlearner`` command's entry point: Ctrl-C and SIGTERM handled from its first line.

This package sits beside ``jaxlearner``, not in it, and imports only the standard
library, because importing ``jaxlearner`` loads JAX and flax (a second or more): a
signal in that window would otherwise end in a 40-line ``KeyboardInterrupt``
traceback, an ``ImportError`` from an extension that the interrupt cut short, or,
where a library swallowed the exception, nothing at all. :func:`main` installs
its handlers first, then imports and runs :func:`jaxlearner.cli.main`, so a
SIGINT or SIGTERM at any moment, imports included, ends the command with one
line on stderr and exit status 130 or 143:

* during ``train``'s training loop, the command's own handler takes over: the
  iteration in flight completes, a checkpoint is saved and the line says how to
  continue (:mod:`jaxlearner.cli.train`);
* anywhere else, the signal raises :class:`Interrupted` (a ``KeyboardInterrupt``),
  which the command turns into ``jaxlearner COMMAND: interrupted by SIGINT``; a
  signal some library swallowed is still reported, and the status still says so;
* once the command is done, a signal while the interpreter exits is reported the
  same way, and the process ends without running Python's teardown.

Only a signal in the interpreter's own start-up, before this module's first line
runs (some 50 ms), is Python's to handle.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import NoReturn

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals the command answers with one line and status ``128 + number``."""

_started: float | None = None
"""When :func:`main` began, as ``time.monotonic()``; ``None`` until it runs."""


def command_started() -> float | None:
    """When this process's ``jaxlearner`` command began (``time.monotonic()``), before it
    imported JAX: ``train``'s closing line counts the whole command's wall time from it.

    Returns:
      ``None`` where :func:`main` did not run (``jaxlearner.cli.main`` called from Python).
    """
    return _started


class Interrupted(KeyboardInterrupt):
    """A SIGINT or SIGTERM turned into an exception.

    Attributes:
      signal_number: the signal's number (``signal.SIGINT``, ``signal.SIGTERM``).
    """

    def __init__(self, signal_number: int) -> None:
        super().__init__(signal_number)
        self.signal_number = signal_number


class SignalCatcher:
    """The command's SIGINT and SIGTERM handler: remembers the first signal, then either
    raises :class:`Interrupted` (once) or ends the process at once.

    It ends the process at once (its line printed, status ``128 + number``) while
    modules import: an exception raised into an extension module's import can be
    printed by the extension itself (numpy prints a traceback, then raises an
    ``ImportError``), and an import has nothing to clean up. While the command
    runs (:meth:`raising`) it raises :class:`Interrupted` instead, once, so the
    command can release its run folder and close its files; any later signal ends
    the process at once, so no exception lands in the code handling the first, or
    in the interpreter's exit.

    ``received`` stays set whatever becomes of the exception, so a signal that some
    code caught and dropped is still seen: by :func:`main` when the command returns,
    and by ``train``'s own handler, which takes over from this one before training
    (and then stops at once).

    Attributes:
      received: the number of the first signal caught, or ``None``.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._raising = False

    @contextlib.contextmanager
    def raising(self, raising: bool = True) -> Iterator[None]:
        """Within the block a signal raises :class:`Interrupted` (with ``raising=False``:
        ends the process at once); afterwards, as before."""
        before, self._raising = self._raising, raising
        try:
            yield
        finally:
            self._raising = before

    def __call__(self, number: int, frame: FrameType | None) -> None:
        if self._raising and self.received is None:
            self.received = number
            raise Interrupted(number)
        self.received = self.received or number
        _report(number)
        _exit(128 + number)


@contextlib.contextmanager
def exiting_on_signal() -> Iterator[None]:
    """Within the block a SIGINT or SIGTERM ends the command at once, with its line.

    For imports inside a running command (``jaxlearner train`` imports orbax when
    it runs): see :class:`SignalCatcher`. Without the command's handler installed
    (``jaxlearner.cli.main`` called from Python) it changes nothing.

    Example:
      >>> with exiting_on_signal():
      ...     import json
    """
    handler = signal.getsignal(signal.SIGINT)
    if not isinstance(handler, SignalCatcher):
        yield
        return
    with handler.raising(False):
        yield


def quiet_interrupts(hook: Callable[[object], object]) -> Callable[[object], object]:
    """``sys.unraisablehook`` that drops an :class:`Interrupted` Python could not raise.

    A signal that lands while Python runs a garbage-collection callback or a
    ``__del__`` (JAX's ``_xla_gc_callback``, say) raises :class:`Interrupted` where
    no caller can receive it: Python would print ``Exception ignored in ...`` with a
    traceback. The catcher has remembered the signal (``received``), so the command
    still stops and says so in its one line; this hook keeps that traceback out of
    it and passes every other unraisable exception to ``hook``.

    Example:
      >>> sys.unraisablehook = quiet_interrupts(sys.unraisablehook)  # doctest: +SKIP
    """

    def unraisable(report: object) -> object:
        if isinstance(getattr(report, "exc_value", None), Interrupted):
            return None
        return hook(report)

    return unraisable


def interrupted_line(command: str, number: int) -> str:
    """The one line an interrupted command ends with: ``jaxlearner train: interrupted by SIGINT``.

    Example:
      >>> interrupted_line("jaxlearner", signal.SIGTERM)
      'jaxlearner: interrupted by SIGTERM'
    """
    return f"{command}: interrupted by {signal.Signals(number).name}"


def main() -> NoReturn:
    """Runs the ``jaxlearner`` command with signals handled from the start, then exits.

    The exit status is the command's; after a SIGINT or SIGTERM it is 130 or 143,
    with one line on stderr and no traceback. The process ends with ``os._exit``
    once stdout and stderr are flushed (the command closed its files and
    checkpoints already), so no signal can land in Python's teardown.
    """
    global _started
    _started = time.monotonic()
    catcher = SignalCatcher()
    for number in SIGNALS:
        signal.signal(number, catcher)
    sys.unraisablehook = quiet_interrupts(sys.unraisablehook)
    from jaxlearner.cli.main import main as run  # a signal here ends the process at once

    try:
        with catcher.raising():
            code = _command(run)
    except BaseException as error:
        if catcher.received is None and not isinstance(error, KeyboardInterrupt):
            raise  # a bug: its traceback is wanted
        number = catcher.received or getattr(error, "signal_number", signal.SIGINT)
        _report(number)
        code = 128 + number
    if catcher.received is not None and code != 128 + catcher.received:
        _report(catcher.received)  # a signal that some library swallowed: still noticed
        code = 128 + catcher.received
    _exit(code)


def _command(run: Callable[[], int]) -> int:
    """Runs the command; its exit status, ``sys.exit``'s included. A reader that closed
    the output early (``jaxlearner presets | head``) ends the command quietly, status 0."""
    try:
        return run()
    except SystemExit as error:
        return _exit_status(error.code)
    except BrokenPipeError:
        with contextlib.suppress(OSError):  # nothing more can be written to a closed pipe
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _report(number: int) -> None:
    print(interrupted_line("jaxlearner", number), file=sys.stderr, flush=True)


def _exit_status(code: object) -> int:
    """``sys.exit``'s argument as a status: ``None`` is 0, an int is itself, a message 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _exit(code: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(code)
