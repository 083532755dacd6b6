"""One writer per folder: an OS file lock, released when its owner exits, however it exits.

A run folder of ``jaxlearner train`` and a :class:`~jaxlearner.CheckpointManager`'s
directory each have one writer at a time. The writer holds ``fcntl.flock`` on the
file :data:`LOCK_FILE` inside the folder; the file records the owner's pid (as JSON)
so a refused writer can name it. The operating system drops the lock when the owner
closes it or its process ends (a crash, ``kill -9``, running out of memory), so a lock
is never stale. The lock is per open file: a second :class:`FolderLock` on the same
folder is refused in the same process too. On a file system without locks (some
network file systems answer ``ENOLCK``), nothing is locked and nothing is refused.

Example:
  >>> import tempfile
  >>> folder = tempfile.mkdtemp()
  >>> with FolderLock(folder, "run"):
  ...     try:
  ...         FolderLock(folder, "run").acquire()
  ...     except FolderBusyError as error:
  ...         error.pid == os.getpid()
  True
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pathlib
from typing import BinaryIO, final

LOCK_FILE = ".jaxlearner.lock"


class FolderBusyError(RuntimeError):
    """Another live writer holds the folder's lock.

    Attributes:
      pid: the owner's process id, when it could be read.
    """

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


@final
class FolderLock:
    """The exclusive, non-blocking ``flock`` of a folder's :data:`LOCK_FILE`.

    Args:
      folder: the folder (created with its parents on :meth:`acquire` if missing).
      owner: what holds it, for messages (e.g. ``"jaxlearner train"``).
    """

    def __init__(self, folder: str | os.PathLike[str], owner: str) -> None:
        self._folder = pathlib.Path(folder)
        self._owner = owner
        self._file: BinaryIO | None = None  # closed with it, the lock goes, even at exit
        self._claimed = False

    @property
    def folder(self) -> pathlib.Path:
        """The locked folder."""
        return self._folder

    @property
    def held(self) -> bool:
        """Whether this lock holds the folder now."""
        return self._file is not None

    def acquire(self, claim: bool = True) -> FolderLock:
        """Takes the lock, or refuses at once.

        Args:
          claim: also write this process's pid into the lock file (:meth:`claim`). A
            command that may still refuse the folder takes it unclaimed, so a refusal
            leaves the file as it was, and claims it once it writes there.

        Returns:
          ``self``.

        Raises:
          FolderBusyError: when another writer, in this process or another, holds it;
            the message names its pid.
        """
        if self._file is not None:
            return self.claim() if claim else self
        self._folder.mkdir(parents=True, exist_ok=True)
        path = self._folder / LOCK_FILE
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(descriptor)
            if error.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                return self  # no locks here: not held, and nothing to refuse
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            pid = owner_pid(self._folder)
            who = f"pid {pid}" if pid is not None else "pid unknown"
            raise FolderBusyError(
                f"{self._folder} is written by another {self._owner} ({who}); one writer per "
                "folder: wait for it to finish or stop it",
                pid,
            ) from None
        self._file, self._claimed = os.fdopen(descriptor, "r+b"), False
        return self.claim() if claim else self

    def claim(self) -> FolderLock:
        """Writes this process's pid into the held lock file, for a refused writer to name
        (once; nothing when the lock is not held).

        Returns:
          ``self``.
        """
        if self._file is not None and not self._claimed:
            self._file.truncate(0)
            self._file.write(json.dumps({"pid": os.getpid()}).encode())
            self._file.flush()
            self._claimed = True
        return self

    def release(self) -> None:
        """Drops the lock (closing the file releases it); nothing if not held."""
        if self._file is not None:
            file, self._file = self._file, None
            file.close()

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def owner_pid(folder: str | os.PathLike[str]) -> int | None:
    """The pid the folder's lock file names (its last owner, live or not), if readable."""
    try:
        pid = json.loads((pathlib.Path(folder) / LOCK_FILE).read_text()).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None
