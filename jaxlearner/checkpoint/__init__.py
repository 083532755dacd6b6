"""Checkpoints: orbax steps of the learner state as its nested tree, plus JSON metadata.

The only sub-package that imports orbax (in :mod:`jaxlearner.checkpoint.manager`).

Example:
  >>> from jaxlearner.checkpoint import CheckpointManager  # or jl.CheckpointManager
"""

from jaxlearner.checkpoint.manager import CheckpointCorruptedError, CheckpointManager
from jaxlearner.checkpoint.options import CheckpointOptions
from jaxlearner.checkpoint.rebuild import restore

__all__ = ["CheckpointCorruptedError", "CheckpointManager", "CheckpointOptions", "restore"]
