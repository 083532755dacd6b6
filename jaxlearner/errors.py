"""Error and warning types whose messages read well."""

from __future__ import annotations


class ReadableKeyError(KeyError):
    """A ``KeyError`` whose message prints as written (``KeyError`` quotes it)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CheckpointCorruptedError(ValueError):
    """A saved array cannot be read, or its content differs from the digest saved with it; or
    a step holds a symbolic link. Raised by :class:`~jaxlearner.CheckpointManager`'s reads.

    Defined here, apart from the orbax-bound checkpoint package, so that the command
    line can answer it with one line without loading orbax first.
    """


class CheckpointLinkError(CheckpointCorruptedError):
    """A checkpoint step holds a symbolic link: refused before anything in it is read.

    Damage (a missing or unreadable file, a digest that differs) happens to a disk or a
    copy; a link in a step was put there, and could make a restore read another file.
    So where the command line falls back past a damaged step to an older intact one,
    it refuses a step with a link instead, and stops.
    """


class NonFiniteError(FloatingPointError):
    """A training iteration left a module's loss or params non-finite (NaN or infinite).

    Raised by the trainers' ``step`` (:func:`~jaxlearner.Trainer`,
    :func:`~jaxlearner.OfflineTrainer`, :func:`~jaxlearner.MultiAgentTrainer`)
    once the iteration's stats are recorded, so the last checkpoint saved stays
    the newest finite one. ``skip_nonfinite=True`` skips such minibatch steps
    instead (counted in ``"__all__/num_skipped_steps"``), and training goes on.

    Attributes:
      iteration: the iteration that went non-finite (1-based, as in the stats).
      module: the module id.
      metric: the flat name of the first non-finite metric (``"default_policy/total_loss"``),
        or ``"<module>/params"`` when only the params are.
      value: that metric's value (``nan`` for params).
    """

    def __init__(self, iteration: int, module: str, metric: str, value: float) -> None:
        self.iteration, self.module, self.metric, self.value = iteration, module, metric, value
        super().__init__(
            f"iteration {iteration}: module {module!r} went non-finite ({metric} = {value})"
        )

    def __reduce__(self) -> tuple[type[NonFiniteError], tuple[int, str, str, float]]:
        return type(self), (self.iteration, self.module, self.metric, self.value)


class SmallDatasetWarning(UserWarning):
    """A dataset holds fewer rows than an offline algorithm's ``train_batch_size``.

    Warned by :func:`~jaxlearner.OfflineTrainer`, which then trains on every row in
    each update (see :func:`~jaxlearner.algorithms.offline.fit_batch`); the command
    line prints it as one line naming ``--config train_batch_size=N``.
    """
