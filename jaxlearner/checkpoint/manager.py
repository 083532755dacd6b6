"""Checkpoints of a learner state: orbax arrays plus JSON metadata, restored exactly.

This is the only module that imports orbax. A checkpoint step is a folder
``<directory>/<step>/`` written atomically by orbax (a partial save stays in a
temporary folder that is never read, and is cleaned up by the next manager):

* ``state/``: the :class:`~jaxlearner.LearnerState` as its natural tree of
  nested dicts and lists (params, every optimizer state, schedule counters,
  extra state, counters, the PRNG key as its key data), an orbax/tensorstore
  PyTree checkpoint that plain orbax reads without jaxlearner::

      restored = ocp.StandardCheckpointer().restore(step_dir / "state")
      kernel = restored["modules"]["policy"]["params"]["params"]["Dense_0"]["kernel"]

* ``jaxlearner/metadata``: JSON with what orbax does not record (see
  :meth:`CheckpointManager.metadata`): versions, each module's spec and batch
  layout, devices and mesh, counters, metrics, the learner's recipe, the key
  implementation, and each leaf's sha256 digest by path;
* ``metrics/metrics``: JSON metrics, written by orbax when a best metric is
  tracked.

Nothing is pickled. Restoring builds the expected state from the learner with
``jax.eval_shape`` (no computation), compares its leaves with the shapes and
dtypes orbax recorded, and only then reads the arrays, directly onto the
devices of the learner's placement.

The orbax-free parts live beside it: :mod:`jaxlearner.checkpoint.options`
(what to keep), :mod:`jaxlearner.checkpoint.metadata` (the JSON metadata) and
:mod:`jaxlearner.checkpoint.leaves` (the state's leaves, digests, comparison).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxlearner.checkpoint.leaves import (
    abstract_state,
    check_module_ids,
    check_structure,
    default_device,
    digest,
    digests,
    extra_array_digests,
    host_value,
    logical_leaf,
    path_name,
    plain_paths,
    plain_tree,
    stored_leaf,
    stored_shape_dtype,
    stored_shapes,
)
from jaxlearner.checkpoint.metadata import (
    Metrics,
    build_metadata,
    check_extra,
    check_format,
    decode_layouts,
    json_metrics,
    shorten,
)
from jaxlearner.checkpoint.options import CheckpointOptions, check_best_metric, metric_ranker
from jaxlearner.core.batch import Layout
from jaxlearner.core.learner import Learner
from jaxlearner.core.registry import learner_from_recipe
from jaxlearner.core.state import LearnerState

_STATE_ITEM = "state"
_META_ITEM = "jaxlearner"
_EXTRA_ITEM = "extra_arrays"


class CheckpointCorruptedError(ValueError):
    """A saved array cannot be read, or its content differs from the digest saved with it."""


class CheckpointManager:
    """Saves and restores learner states in a directory of numbered steps.

    Args:
      directory: a local path (made absolute), or any path orbax accepts
        (``gs://...``), passed through untouched.
      **options: the fields of :class:`CheckpointOptions`.

    Raises:
      ValueError, TypeError: on invalid options.

    Example:
      >>> ckpt = jl.CheckpointManager("/tmp/run", max_to_keep=3, keep_best=1,
      ...                             best_metric="eval/return_mean")   # doctest: +SKIP
      >>> ckpt.save(10, state, learner, metrics={"eval": {"return_mean": 3.5}})
      ... # doctest: +SKIP
      >>> ckpt.wait_until_finished()                                   # doctest: +SKIP
      >>> state = ckpt.restore(learner)         # the latest step      # doctest: +SKIP
    """

    def __init__(self, directory: str | os.PathLike[str], **options: Any) -> None:
        unknown = sorted(set(options) - {f.name for f in dataclasses.fields(CheckpointOptions)})
        if unknown:
            raise TypeError(
                f"CheckpointManager got unknown option(s) {unknown}; valid: "
                f"{[f.name for f in dataclasses.fields(CheckpointOptions)]}."
            )
        self._options = CheckpointOptions(**options)
        self._directory = _resolve_directory(directory)
        with _without_read_only_notices():
            self._manager = ocp.CheckpointManager(
                self._directory,
                options=_orbax_options(self._options),
                item_handlers={
                    # PyTree rather than Standard (same files): its restore can skip leaves,
                    # to find the one a failed read could not read.
                    _STATE_ITEM: ocp.PyTreeCheckpointHandler(),
                    _META_ITEM: ocp.JsonCheckpointHandler(),
                    _EXTRA_ITEM: ocp.StandardCheckpointHandler(),
                },
            )

    @property
    def directory(self) -> str:
        """The checkpoint directory, as handed to orbax."""
        return self._directory

    @property
    def options(self) -> CheckpointOptions:
        """The validated options."""
        return self._options

    def all_steps(self) -> tuple[int, ...]:
        """The complete steps in the directory, ascending (partial saves are not steps)."""
        return tuple(sorted(self._manager.all_steps()))

    def latest_step(self) -> int | None:
        """The newest complete step, or ``None`` for an empty directory."""
        return self._manager.latest_step()

    def best_step(self) -> int | None:
        """The kept step with the best ``best_metric``, or ``None`` for an empty directory.

        Raises:
          ValueError: when the manager has no ``best_metric`` to rank by.

        Example:
          >>> ckpt = jl.CheckpointManager("/tmp/run", read_only=True,
          ...                             best_metric="eval/return_mean")  # doctest: +SKIP
          >>> state = ckpt.restore(learner, step=ckpt.best_step())         # doctest: +SKIP
        """
        if self._options.best_metric is None:
            raise ValueError(
                "best_step needs a metric to rank steps by: build the manager with "
                "best_metric=... (e.g. 'eval/return_mean') and best_mode=..."
            )
        return self._manager.best_step()

    def reload(self) -> None:
        """Re-reads the steps from the directory (when another process writes it)."""
        self._manager.reload()

    def wait_until_finished(self) -> None:
        """Blocks until an asynchronous save is written; raises its error if it failed.

        Example:
          >>> ckpt.save(step, state, learner)  # returns once arrays left the device
          ... # doctest: +SKIP
          >>> ckpt.wait_until_finished()      # the step is now complete on disk
          ... # doctest: +SKIP
        """
        self._manager.wait_until_finished()
        self._manager.check_for_errors()

    def close(self) -> None:
        """Waits for pending saves and releases orbax's resources."""
        self._manager.close()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def save(
        self,
        step: int,
        state: LearnerState,
        learner: Learner,
        *,
        metrics: Metrics | None = None,
        extra: Mapping[str, Any] | None = None,
        extra_arrays: Any = None,
    ) -> None:
        """Saves ``state`` as ``step``; asynchronous unless ``async_save=False``.

        Everything in the state is saved, with the metadata needed to restore
        it into a fresh learner (see :meth:`metadata`). After the write,
        steps beyond ``max_to_keep`` that are not among the ``keep_best`` best
        are deleted; the latest step never is.

        Args:
          step: a step number greater than every saved step (e.g.
            ``int(state.updates)`` or an iteration count).
          state: the learner's state; on one device or replicated over the
            learner's mesh.
          learner: the learner the state belongs to.
          metrics: scalars to store with the step: the learner's nested
            ``{module: {name: value}}`` metrics, a flat ``{"eval/return_mean":
            value}``, or both merged. Required, with ``best_metric`` in it, when
            ``keep_best`` or ``best_metric`` is set.
          extra: JSON-serialisable data to keep with the step (e.g. a trainer's
            counters); read back with :meth:`restore_extra`.
          extra_arrays: a pytree of arrays (nested dicts, lists; no typed keys:
            store ``jax.random.key_data(key)``) to keep with the step, e.g. a
            replay buffer; digested like the state and read back with
            :meth:`restore_extra`.

        Raises:
          ValueError: when ``step`` is not greater than the latest step, the
            state does not belong to the learner, the learner has no batch
            layout, the manager is read-only, or a metric is not a scalar.
          KeyError: when ``best_metric`` is missing from ``metrics``.
          TypeError: when the learner's recipe is not JSON-serialisable.

        Example:
          >>> state, metrics = learner.update(state, batch)               # doctest: +SKIP
          >>> ckpt.save(int(state.updates), state, learner, metrics=metrics)
          ... # doctest: +SKIP
        """
        _check_learner(learner)
        if self._options.read_only:
            raise ValueError(f"This CheckpointManager of {self._directory} is read-only.")
        if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 0:
            raise ValueError(f"step must be an int >= 0; got {step!r}.")
        step = int(step)
        latest = self.latest_step()
        if latest is not None and step <= latest:
            raise ValueError(
                f"Cannot save step {step} in {self._directory}: steps must increase and the "
                f"latest saved step is {latest} (steps: {list(self.all_steps())})."
            )
        learner.check_state(state)
        if learner.batch_layout is None:
            raise ValueError(
                "save needs a learner that knows its batch layout, to restore the state later: "
                "build it with jl.Learner(..., sample_batch=batch) or batch_layout=... "
                "(built-in algorithms know theirs)."
            )
        flat_metrics = json_metrics(metrics)
        if self._options.best_metric is not None:
            check_best_metric(self._options.best_metric, flat_metrics)
        tree = plain_tree(state, stored_leaf)
        leaf_digests = digests(tree) if self._options.verify else None
        metadata = build_metadata(step, state, learner, flat_metrics, leaf_digests)
        metadata["extra"] = check_extra(extra)
        items = {
            _STATE_ITEM: ocp.args.PyTreeSave(tree),
            _META_ITEM: ocp.args.JsonSave(metadata),
        }
        if extra_arrays is not None:
            metadata["extra_arrays"] = extra_array_digests(extra_arrays, self._options.verify)
            items[_EXTRA_ITEM] = ocp.args.StandardSave(extra_arrays)
        self._manager.save(
            step,
            args=ocp.args.Composite(**items),
            metrics=flat_metrics if self._options.best_metric is not None else None,
            force=True,
        )
        if not self._options.async_save:
            self.wait_until_finished()

    def metadata(self, step: int | None = None) -> dict[str, Any]:
        """The JSON metadata saved with a step (default: the latest).

        Keys: ``format``, ``format_version``, ``step``, ``versions``
        (jaxlearner, jax, flax, optax, orbax, python), ``modules`` (per module
        id: ``spec`` description, ``trained``, ``batch_layout``,
        ``counters``), ``counters`` (updates, grad_steps, skipped_steps),
        ``devices`` (count, processes, platform, the state's sharding and mesh),
        ``learner`` (its settings), ``recipe``, ``key_impl`` (of the state's
        PRNG key), ``metrics``, ``digests`` (``{path: sha256}`` per leaf of
        the saved tree, e.g. ``"modules/policy/params/params/Dense_0/kernel"``;
        ``None`` when saved with ``verify=False``), ``extra`` and, when
        extra arrays were saved, ``extra_arrays`` (their digests by path).
        The tree's structure, shapes and dtypes are orbax's own metadata.

        Raises:
          FileNotFoundError: when the step does not exist.
          ValueError: when the step is in another checkpoint format (an older
            jaxlearner's, for one), naming the format found and the one read.

        Example:
          >>> ckpt.metadata()["metrics"]["eval/return_mean"]          # doctest: +SKIP
          3.5
        """
        step = self._resolve_step(step)
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(**{_META_ITEM: ocp.args.JsonRestore()})
            )
        except Exception as error:  # orbax and the JSON parser raise many kinds
            raise CheckpointCorruptedError(
                f"The metadata of step {step} in {self._directory} cannot be read: {error}"
            ) from error
        metadata = restored[_META_ITEM]
        check_format(step, self._directory, metadata)
        return metadata

    def batch_layout(self, step: int | None = None) -> dict[str, Layout]:
        """Each module's batch layout saved with a step (default: the latest).

        For building a learner that can update a restored state:
        ``jl.Learner(specs, batch_layout=ckpt.batch_layout(), ...)``.

        Raises:
          FileNotFoundError: when the step does not exist.
          ValueError: when a module's layout could not be saved as JSON.

        Example:
          >>> learner = jl.Learner({"policy": spec}, batch_layout=ckpt.batch_layout())
          ... # doctest: +SKIP
        """
        step = self._resolve_step(step)
        return decode_layouts(step, self.metadata(step))

    def restore(self, target: Learner, step: int | None = None) -> LearnerState:
        """Restores a step (default: the latest) as a state of ``target``.

        The expected state is built from the learner with ``jax.eval_shape``
        and compared with the shapes and dtypes orbax recorded, path by path,
        before anything is read; arrays are then read directly onto the
        learner's placement: the default device, or replicated over its mesh
        (any device count, whatever it was at save). Typed PRNG keys, optax named
        tuples, empty states and weakly typed scalars come back as they were.

        The learner is left as it was. One that does not know its batch
        layout (built without ``sample_batch=`` or ``batch_layout=``) gets
        its expected state from the layout saved with the step; build it with
        ``batch_layout=ckpt.batch_layout()`` to check batches and save again.

        Args:
          target: the :class:`~jaxlearner.Learner` to restore for, placed where
            the state should live (``learner.on(...)``).
          step: the step; ``None`` for the latest.

        Returns:
          The restored :class:`~jaxlearner.LearnerState`.

        Raises:
          FileNotFoundError: when the directory holds no such step.
          ValueError: when the learner's modules or state structure differ from
            the checkpoint (the first differing path, saved versus expected),
            or the step is in another checkpoint format; nothing is cast or
            skipped.
          CheckpointCorruptedError: when an array cannot be read or its digest
            differs; the message names the leaf.

        Example:
          >>> learner = make_learner()                  # same code, fresh  # doctest: +SKIP
          >>> state = ckpt.restore(learner)                                # doctest: +SKIP
          >>> state, metrics = learner.update(state, batch)               # doctest: +SKIP
          >>> state = ckpt.restore(make_learner().on("all"))  # replicated  # doctest: +SKIP
        """
        _check_learner(target)
        step = self._resolve_step(step)
        metadata = self.metadata(step)
        check_module_ids(step, list(metadata["modules"]), target.module_ids)
        layout = target.batch_layout
        if layout is None:
            layout = decode_layouts(step, metadata)
        key_impl = metadata["key_impl"]
        abstract = abstract_state(target, layout, key_impl)
        sharding = target.placement.state_sharding
        if sharding is None:
            sharding = jax.sharding.SingleDeviceSharding(default_device())
        target_tree = plain_tree(
            abstract,
            lambda leaf: jax.ShapeDtypeStruct(*stored_shape_dtype(leaf), sharding=sharding),
        )
        check_structure(step, self._saved_shapes(step), stored_shapes(abstract))
        arrays = dict(plain_paths(self._read_state(step, target_tree)))
        if self._options.verify:
            _verify_digests(step, metadata.get("digests") or {}, arrays, "leaf")
        leaves = [
            logical_leaf(arrays[path], leaf, key_impl, sharding)
            for path, leaf in plain_paths(abstract)
        ]
        return jax.tree.unflatten(jax.tree.structure(abstract), leaves)

    def restore_extra(self, step: int | None = None) -> tuple[Any, Any]:
        """The ``extra`` JSON and ``extra_arrays`` saved with a step (default: the latest).

        Returns:
          ``(extra, extra_arrays)``: the JSON data (``None`` if none was
          saved) and the arrays as saved (nested dicts and lists of arrays on
          the default device; ``None`` if none were saved).

        Raises:
          CheckpointCorruptedError: when an array cannot be read or its digest differs.

        Example:
          >>> counters, arrays = ckpt.restore_extra()                     # doctest: +SKIP
        """
        step = self._resolve_step(step)
        metadata = self.metadata(step)
        records = metadata.get("extra_arrays")
        if records is None:
            return metadata.get("extra"), None
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(**{_EXTRA_ITEM: ocp.args.StandardRestore()})
            )[_EXTRA_ITEM]
        except Exception as error:  # tensorstore reports damage as ValueError, OSError, ...
            raise CheckpointCorruptedError(
                f"The extra arrays of step {step} in {self._directory} cannot be read: "
                f"{shorten(str(error), 400)}"
            ) from error
        found = dict(plain_paths(restored))
        missing = [path for path in records if path not in found]
        if missing:
            raise CheckpointCorruptedError(
                f"The extra arrays {missing} of step {step} in {self._directory} are missing."
            )
        if self._options.verify:
            saved = {path: sha for path, sha in records.items() if sha is not None}
            _verify_digests(step, saved, found, "extra array")
        return metadata.get("extra"), restored

    def _resolve_step(self, step: int | None) -> int:
        steps = self.all_steps()
        if step is None:
            if not steps:
                raise FileNotFoundError(f"No complete checkpoint step in {self._directory}.")
            return steps[-1]
        if step not in steps:
            raise FileNotFoundError(
                f"No checkpoint step {step!r} in {self._directory}; steps: {list(steps)}."
            )
        return int(step)

    def _saved_shapes(self, step: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """``{path: (shape, dtype)}`` of the state's leaves, from orbax's metadata of the step."""
        try:
            tree = self._manager.metadata(step).item_metadata[_STATE_ITEM].tree
            return stored_shapes(tree)
        except Exception as error:  # a missing or damaged metadata file, in many forms
            raise CheckpointCorruptedError(
                f"Checkpoint step {step} in {self._directory} is damaged: orbax's description "
                f"of its state cannot be read: {shorten(str(error), 400)}"
            ) from error

    def _read_state(self, step: int, target: Any) -> Any:
        """The saved tree, read onto ``target``'s shardings; a failure names an unreadable leaf."""

        def read(item: Any) -> Any:
            args = ocp.args.PyTreeRestore(
                item, restore_args=ocp.checkpoint_utils.construct_restore_args(item)
            )
            return self._manager.restore(step, args=ocp.args.Composite(**{_STATE_ITEM: args}))

        try:
            return read(target)[_STATE_ITEM]
        except Exception as error:  # tensorstore reports damage as ValueError, OSError, ...
            failure = error
        for path, _ in plain_paths(target):
            alone = jax.tree_util.tree_map_with_path(
                lambda p, leaf, path=path: leaf if path_name(p) == path else ocp.PLACEHOLDER,
                target,
            )
            try:
                read(alone)
            except Exception as leaf_error:
                raise CheckpointCorruptedError(
                    f"Checkpoint step {step} in {self._directory} is damaged: leaf {path} "
                    f"cannot be read: {shorten(str(leaf_error), 400)}"
                ) from failure
        raise CheckpointCorruptedError(
            f"Checkpoint step {step} in {self._directory} cannot be read: "
            f"{shorten(str(failure), 400)}"
        ) from failure


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
        if learner.batch_layout is None:
            learner = learner.replace(batch_layout=decode_layouts(step, metadata))
        return learner, manager.restore(learner, step)
    finally:
        manager.close()


_READ_ONLY_NOTICES = (
    "CheckpointManagerOptions.read_only=True",
    "Given directory is read only",
)


@contextlib.contextmanager
def _without_read_only_notices() -> Iterator[None]:
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


def _check_learner(learner: object) -> None:
    if not isinstance(learner, Learner):
        raise TypeError(
            f"Expected a jl.Learner (placed where the state should live); got "
            f"{type(learner).__name__}."
        )


def _resolve_directory(directory: str | os.PathLike[str]) -> str:
    """A local path made absolute; a URL such as ``gs://bucket/run`` untouched.

    Example:
      >>> _resolve_directory("gs://bucket/run")
      'gs://bucket/run'
    """
    text = os.fspath(directory)
    if not isinstance(text, str) or not text:
        raise TypeError(f"A checkpoint directory must be a non-empty path; got {directory!r}.")
    return text if "://" in text else os.path.abspath(text)


def _orbax_options(options: CheckpointOptions) -> ocp.CheckpointManagerOptions:
    # orbax's own max_to_keep combined with best_fn ranks every step by the metric alone and
    # can delete the step just written; an explicit policy keeps the latest unconditionally.
    policies: list[Any] = [
        ocp.checkpoint_managers.LatestN(n=1),
        ocp.checkpoint_managers.LatestN(n=options.max_to_keep),
    ]
    best_fn = None
    if options.best_metric is not None:
        best_fn = metric_ranker(options.best_metric, options.best_mode)
    if options.keep_best:
        policies.append(
            ocp.checkpoint_managers.BestN(
                get_metric_fn=best_fn,
                reverse=options.best_mode == "min",
                n=options.keep_best,
                keep_checkpoints_without_metrics=False,
            )
        )
    return ocp.CheckpointManagerOptions(
        best_fn=best_fn,
        best_mode=options.best_mode,
        preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy(policies),
        enable_async_checkpointing=options.async_save,
        read_only=options.read_only,
        create=not options.read_only,
        cleanup_tmp_directories=not options.read_only,
    )


def _verify_digests(step: int, saved: dict[str, str], arrays: dict[str, Any], kind: str) -> None:
    """Raises naming the first array whose sha256 differs from the one saved for its path."""
    for path, expected in saved.items():
        actual = digest(host_value(arrays[path]))
        if actual != expected:
            raise CheckpointCorruptedError(
                f"Checkpoint step {step} is corrupted: {kind} {path} has sha256 {actual[:16]}..., "
                f"but {expected[:16]}... was saved. Restore an earlier step."
            )
