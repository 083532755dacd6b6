"""``jl.restore``: a learner rebuilt from the recipe saved with a step, and its state.

Built on :class:`~jaxlearner.checkpoint.manager.CheckpointManager` (read-only) and the
recipe registry, for learners built with ``recipe=...`` (the built-in algorithms).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from jaxlearner.checkpoint.manager import CheckpointManager
from jaxlearner.checkpoint.metadata import decode_layouts
from jaxlearner.core.learner import Learner
from jaxlearner.core.registry import learner_from_recipe
from jaxlearner.core.state import LearnerState


def restore(
    directory: str | os.PathLike[str], step: int | None = None, *, verify: bool = True
) -> tuple[Learner, LearnerState]:
    """Rebuilds a learner from the recipe saved with a step, and restores its state.

    For learners built with ``recipe=...`` (the built-in algorithms): the
    builder registered for ``recipe["algorithm"]`` (see
    :func:`~jaxlearner.register_recipe`) makes a fresh learner, given the batch
    layout saved with the step if its builder does not set one, and the state
    is restored into it on the default device. Nothing in the directory is
    created or deleted.

    The learner's settings saved with the step are applied over the builder's
    (:data:`SAVED_SETTINGS`: ``modules_to_train``, ``minibatch_size``, ``num_epochs``,
    ``shuffle``, ``drop_last``, ``skip_nonfinite``), so ``learner.replace(modules_to_train=...)``
    before saving comes back as it was; a step saved without them keeps the
    builder's. What no step records comes from the builder or this process: the
    functions (a joint ``loss``, ``additional_updates``) as the recipe builds them,
    and ``jit``, ``donate_state`` and the placement as their defaults (jit on, no
    donation, the default device).

    Args:
      directory: the checkpoint directory.
      step: the step; ``None`` for the latest.
      verify: check every leaf's digest.

    Returns:
      ``(learner, state)``, ready for ``learner.update`` or evaluation.

    Raises:
      FileNotFoundError: when there is no such step.
      ValueError: when the step was saved from a learner without a recipe.
      KeyError: when no builder is registered for the recipe's algorithm.

    Example:
      >>> learner, state = jl.restore("/tmp/run")                        # doctest: +SKIP
      >>> params = state.modules["policy"].params                        # doctest: +SKIP
    """
    manager = CheckpointManager(directory, read_only=True, verify=verify)
    try:
        if step is None:
            step = manager.latest_step()  # None in an empty directory: metadata then raises
        metadata = manager.metadata(step)
        if metadata.get("recipe") is None:
            raise ValueError(
                f"Step {step} in {manager.directory} was saved from a learner without a "
                "recipe, so it cannot be rebuilt from the checkpoint alone: build the learner "
                "in code and call jl.CheckpointManager(directory).restore(learner)."
            )
        learner = learner_from_recipe(metadata["recipe"])
        changes = saved_settings(learner, metadata)
        if changes:
            learner = learner.replace(**changes)
        if learner.batch_layout is None:
            learner = learner.replace(batch_layout=decode_layouts(step, metadata))
        return learner, manager.restore(learner, step)
    finally:
        manager.close()


SAVED_SETTINGS = (
    "modules_to_train",
    "minibatch_size",
    "num_epochs",
    "shuffle",
    "drop_last",
    "skip_nonfinite",
)
"""The learner settings a step records (its metadata's ``"learner"``) and ``restore`` applies."""


def saved_settings(learner: Learner, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of :data:`SAVED_SETTINGS` that a step recorded and ``learner`` lacks.

    Args:
      learner: the learner the recipe's builder made.
      metadata: the step's metadata (see :meth:`~jaxlearner.CheckpointManager.metadata`).

    Returns:
      ``{field: saved value}`` for ``learner.replace``, only where the saved value
      differs; empty for a step that recorded none.

    Example:
      >>> saved_settings(learner, {"learner": {"num_epochs": 2}})    # doctest: +SKIP
      {'num_epochs': 2}
    """
    saved = metadata.get("learner") or {}
    changes: dict[str, Any] = {}
    for name in SAVED_SETTINGS:
        if name not in saved:
            continue
        value = saved[name]
        current = getattr(learner.config, name)
        if name == "modules_to_train":
            value, current = frozenset(value), learner.modules_to_train
        if value != current:
            changes[name] = value
    return changes
