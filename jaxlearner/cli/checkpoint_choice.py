"""Which checkpoint step ``eval``, ``record`` and ``train --resume`` read, damaged steps skipped.

A step asked for (``--step N``, ``--best``) is read or refused: damage to it is one line
and exit status 2. Otherwise the newest step is read; when it is damaged (an array file
missing or unreadable, metadata that is not JSON, a digest that differs), its line is
printed and the next older step is tried, down to the oldest; the command goes on with
the newest intact one, and says so, or when none is intact ends with one line and exit
status 2. Reading never deletes, moves or writes anything: the damaged steps stay as
they were.

A step holding a symbolic link is not damage but a refusal
(:class:`~jaxlearner.errors.CheckpointLinkError`): it is never skipped over.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Callable
from typing import Generic, TypeVar

from jaxlearner.checkpoint.manager import CheckpointManager
from jaxlearner.cli.run_folder import UsageError
from jaxlearner.errors import CheckpointCorruptedError, CheckpointLinkError

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Chosen(Generic[T]):
    """The step a command reads and what reading it gave.

    Attributes:
      step: the step read.
      value: what ``read(step)`` returned.
      steps: every step in the folder, ascending (the damaged ones included).
      skipped: the newer steps found damaged and skipped, newest first.
    """

    step: int
    value: T
    steps: tuple[int, ...]
    skipped: tuple[int, ...] = ()

    @property
    def newer(self) -> tuple[int, ...]:
        """The steps in the folder newer than the one read."""
        return tuple(step for step in self.steps if step > self.step)


def read_checkpoint(
    checkpoints: pathlib.Path,
    command: str,
    read: Callable[[int], T],
    *,
    step: int | None = None,
    best: bool = False,
) -> Chosen[T]:
    """Reads the step asked for, or the newest intact step, with ``read(step)``.

    Args:
      checkpoints: the run's checkpoint folder.
      command: ``"eval"``, ``"record"`` or ``"train"``, for the lines printed.
      read: reads a step in full (raising
        :class:`~jaxlearner.errors.CheckpointCorruptedError` for damage).
      step: the step ``--step`` asks for.
      best: read the step ``--best`` asks for (by ``eval/return_mean``).

    Returns:
      The step read, and what ``read`` returned. Each damaged step skipped has been
      reported on stderr in one line; the caller says which step it goes on with.

    Raises:
      UsageError: for a folder without steps, a step it does not hold, a step asked
        for that is damaged, or no intact step at all (one line each).
      CheckpointLinkError: for a step holding a symbolic link.
    """
    with CheckpointManager(
        checkpoints, read_only=True, best_metric="eval/return_mean" if best else None
    ) as manager:
        steps = manager.all_steps()
        if not steps:
            raise UsageError(f"{checkpoints} holds no checkpoint")
        asked = manager.best_step() if best else step
    if asked is not None:
        if asked not in steps:
            raise UsageError(f"no checkpoint step {asked}; steps: {list(steps)}")
        try:
            return Chosen(asked, read(asked), steps)
        except CheckpointLinkError:
            raise
        except CheckpointCorruptedError as error:
            raise UsageError(
                f"{one_line(error)}; choose another step with --step N (steps: {list(steps)})"
            ) from None
    return _newest_intact(checkpoints, command, read, steps)


def _newest_intact(
    checkpoints: pathlib.Path, command: str, read: Callable[[int], T], steps: tuple[int, ...]
) -> Chosen[T]:
    """The newest step ``read`` reads without damage; the damaged ones before it reported."""
    damaged: list[tuple[int, str]] = []
    for step in reversed(steps):
        try:
            value = read(step)
        except CheckpointLinkError:
            raise
        except CheckpointCorruptedError as error:
            damaged.append((step, one_line(error)))
            continue
        for _, message in damaged:
            print(f"jaxlearner {command}: {message}", file=sys.stderr, flush=True)
        return Chosen(step, value, steps, tuple(step for step, _ in damaged))
    older = [step for step, _ in damaged[1:]]
    others = f"; the older steps {older} are damaged too" if older else ""
    raise UsageError(f"no intact checkpoint in {checkpoints}: {damaged[0][1]}{others}")


def one_line(error: BaseException) -> str:
    """An error's message on one line (a reader's message may hold line breaks)."""
    return " ".join(str(error).split())
