"""A checkpoint step's contents, prepared for orbax and taken back from it, without orbax.

Orbax-free halves of :meth:`~jaxlearner.CheckpointManager.save` and
:meth:`~jaxlearner.CheckpointManager.restore`: checking what a save is given and
turning it into the tree and JSON metadata orbax writes; building the tree a
restore reads into from the target learner, and the state from the arrays read.
:mod:`jaxlearner.checkpoint.manager` hands these to orbax.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jaxlearner.checkpoint.leaves import (
    abstract_state,
    check_module_ids,
    default_device,
    digests,
    extra_array_digests,
    logical_leaf,
    plain_paths,
    plain_tree,
    stored_leaf,
    stored_shape_dtype,
)
from jaxlearner.checkpoint.metadata import (
    Metrics,
    build_metadata,
    check_extra,
    check_postprocesses,
    decode_layouts,
    json_metrics,
)
from jaxlearner.checkpoint.options import CheckpointOptions, check_best_metric
from jaxlearner.core.learner import Learner
from jaxlearner.core.state import LearnerState
from jaxlearner.files import file_in_the_way


def check_learner(learner: object) -> None:
    """Raises ``TypeError`` unless ``learner`` is a :class:`~jaxlearner.Learner`."""
    if not isinstance(learner, Learner):
        raise TypeError(
            f"Expected a jl.Learner (placed where the state should live); got "
            f"{type(learner).__name__}."
        )


def resolve_directory(directory: str | os.PathLike[str]) -> str:
    """A local path made absolute; a URL such as ``gs://bucket/run`` untouched.

    Raises:
      TypeError: for an empty path or one that is not text.
      NotADirectoryError: when a local path is a file, or lies under one.

    Example:
      >>> resolve_directory("gs://bucket/run")
      'gs://bucket/run'
    """
    text = os.fspath(directory)
    if not isinstance(text, str) or not text:
        raise TypeError(f"A checkpoint directory must be a non-empty path; got {directory!r}.")
    if "://" in text:
        return text
    text = os.path.abspath(text)
    blocker = file_in_the_way(text)
    if blocker is not None:
        where = "is a file" if str(blocker) == text else f"lies under the file {blocker}"
        raise NotADirectoryError(
            f"A checkpoint directory must be a folder, or a path where one can be made; {text} "
            f"{where}. Pass a folder's path (e.g. the run folder's checkpoints/)."
        )
    return text


def check_step(step: object, steps: Sequence[int], directory: str) -> int:
    """``step`` as an int, checked to be greater than every saved step in ``steps``."""
    if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 0:
        raise ValueError(f"step must be an int >= 0; got {step!r}.")
    step = int(step)
    if steps and step <= max(steps):
        raise ValueError(
            f"Cannot save step {step} in {directory}: steps must increase and the "
            f"latest saved step is {max(steps)} (steps: {list(steps)})."
        )
    return step


def resolve_step(step: int | None, steps: Sequence[int], directory: str) -> int:
    """``step`` checked to be among ``steps``; ``None``: the latest.

    Raises:
      FileNotFoundError: when there is no such step (or none at all).
    """
    if step is None:
        if not steps:
            raise FileNotFoundError(f"No complete checkpoint step in {directory}.")
        return max(steps)
    if step not in steps:
        raise FileNotFoundError(
            f"No checkpoint step {step!r} in {directory}; steps: {list(steps)}."
        )
    return int(step)


def save_contents(
    step: int,
    state: LearnerState,
    learner: Learner,
    options: CheckpointOptions,
    metrics: Metrics | None,
    extra: Mapping[str, Any] | None,
    extra_arrays: Any,
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The state's tree, the step's JSON metadata, and its flat metrics, all checked.

    Raises:
      ValueError, KeyError, TypeError: as :meth:`~jaxlearner.CheckpointManager.save`.
    """
    learner.check_state(state)
    if learner.batch_layout is None:
        raise ValueError(
            "save needs a learner that knows its batch layout, to restore the state later: "
            "build it with jl.Learner(..., sample_batch=batch) or batch_layout=... "
            "(built-in algorithms know theirs)."
        )
    flat_metrics = json_metrics(metrics)
    if options.best_metric is not None:
        check_best_metric(options.best_metric, flat_metrics)
    tree = state_tree(plain_tree(state, stored_leaf))
    leaf_digests = digests(tree) if options.verify else None
    metadata = build_metadata(step, state, learner, flat_metrics, leaf_digests)
    metadata["extra"] = check_extra(extra)
    if extra_arrays is not None:
        metadata["extra_arrays"] = extra_array_digests(extra_arrays, options.verify)
    return tree, metadata, flat_metrics


def restore_target(
    target: Learner, step: int, metadata: dict[str, Any]
) -> tuple[Any, Any, jax.sharding.Sharding]:
    """The abstract state of ``target``, the tree of arrays to read it into, and its sharding.

    Raises:
      ValueError: when the learner's modules differ from the step's, it lacks a gradient
        postprocess the step was trained with, or its batch layout is unknown and the step
        holds none.
    """
    check_module_ids(step, list(metadata["modules"]), target.module_ids)
    check_postprocesses(step, metadata, target)
    layout = target.batch_layout
    if layout is None:
        layout = decode_layouts(step, metadata)
    abstract = abstract_state(target, layout, metadata["key_impl"])
    sharding = target.placement.state_sharding
    if sharding is None:
        sharding = jax.sharding.SingleDeviceSharding(default_device())
    tree = plain_tree(
        abstract,
        lambda leaf: jax.ShapeDtypeStruct(*stored_shape_dtype(leaf), sharding=sharding),
    )
    return abstract, state_tree(tree), sharding


def state_tree(tree: dict[str, Any]) -> dict[str, Any]:
    """A state's plain tree as a step stores it: without ``shared_opt_states`` when the
    learner has no shared optimizer, so such a step is stored as before that field existed
    and steps saved before it restore."""
    if tree.get("shared_opt_states"):
        return tree
    return {name: value for name, value in tree.items() if name != "shared_opt_states"}


def state_from_arrays(
    abstract: Any, arrays: dict[str, Any], key_impl: str, sharding: jax.sharding.Sharding
) -> LearnerState:
    """The state of ``abstract``'s structure, its leaves the arrays read by path."""
    leaves = [
        logical_leaf(arrays[path], leaf, key_impl, sharding) for path, leaf in plain_paths(abstract)
    ]
    return jax.tree.unflatten(jax.tree.structure(abstract), leaves)
