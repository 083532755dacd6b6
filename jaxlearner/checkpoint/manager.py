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

* ``jaxlearner/metadata``: JSON with what orbax does not record, each leaf's
  sha256 included (see :meth:`CheckpointManager.metadata`);
* ``metrics/metrics``: JSON metrics, when a best metric is tracked.

Nothing is pickled. Restoring refuses a step with a symbolic link in it, builds
the expected state from the learner with ``jax.eval_shape`` (no computation),
compares its leaves with the shapes and dtypes orbax recorded, and only then
reads the arrays, directly onto the devices of the learner's placement.

One writer per directory: a writable manager holds an OS lock on it from its creation
(or first save) until ``close`` or its process ends; another manager's save, in this
process or another, is refused naming its pid. A failed save raises; the process exits.

Orbax-free parts live beside it: ``options`` (what to keep), ``metadata`` (the
JSON), ``leaves`` (the state's leaves, digests, comparison), ``step_contents``
(a save's and a restore's trees), ``integrity`` (links, digests, unreadable
leaves), ``quiet`` (orbax's echoes of failures), ``rebuild`` (``jl.restore``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint._src.futures import future as orbax_future
from orbax.checkpoint._src.futures import synchronization as orbax_sync
from orbax.checkpoint._src.serialization import tensorstore_utils as orbax_tensorstore

from jaxlearner.checkpoint.integrity import (
    CheckpointCorruptedError,
    check_extra_arrays,
    corrupted,
    first_unreadable_leaf,
    refuse_links,
    verify_digests,
)
from jaxlearner.checkpoint.leaves import check_structure, path_name, plain_paths, stored_shapes
from jaxlearner.checkpoint.metadata import Metrics, check_format, decode_layouts
from jaxlearner.checkpoint.options import CheckpointOptions, checkpoint_options, metric_ranker
from jaxlearner.checkpoint.quiet import quiet_orbax_failures, without_read_only_notices
from jaxlearner.checkpoint.step_contents import (
    check_learner,
    check_step,
    resolve_directory,
    resolve_step,
    restore_target,
    save_contents,
    state_from_arrays,
)
from jaxlearner.core.batch import Layout
from jaxlearner.core.learner import Learner
from jaxlearner.core.state import LearnerState
from jaxlearner.folder_lock import FolderBusyError, FolderLock

_STATE_ITEM = "state"
_META_ITEM = "jaxlearner"
_EXTRA_ITEM = "extra_arrays"

__all__ = ["CheckpointCorruptedError", "CheckpointManager", "FolderBusyError"]


class CheckpointManager:
    """Saves and restores learner states in a directory of numbered steps.

    Args:
      directory: a local folder's path (made absolute), or any path orbax accepts as is.
      **options: the fields of :class:`CheckpointOptions`.

    Raises:
      ValueError, TypeError: on invalid options.
      NotADirectoryError: when ``directory`` is a file, or lies under one.
      FolderBusyError: from :meth:`save`, when another manager (in this process or
        another, named by its pid) writes the directory.

    Example:
      >>> ckpt = jl.CheckpointManager("/tmp/run", max_to_keep=3, keep_best=1,
      ...                             best_metric="eval/return_mean")   # doctest: +SKIP
      >>> ckpt.save(10, state, learner, metrics={"eval": {"return_mean": 3.5}})
      ... # doctest: +SKIP
      >>> ckpt.wait_until_finished()                                   # doctest: +SKIP
      >>> state = ckpt.restore(learner)         # the latest step      # doctest: +SKIP
    """

    def __init__(self, directory: str | os.PathLike[str], **options: Any) -> None:
        self._options = checkpoint_options(options)
        self._directory = resolve_directory(directory)
        self._failure: BaseException | None = None
        self._operation: str | None = None
        quiet_orbax_failures(orbax_tensorstore)
        writable = "://" not in self._directory and not self._options.read_only
        self._lock = FolderLock(self._directory, "jl.CheckpointManager") if writable else None
        # Free: it writes here and cleans up partial saves. Busy (or unwritable): it reads.
        with contextlib.suppress(FolderBusyError, OSError):
            if self._lock is not None:
                self._lock.acquire()
        with without_read_only_notices():
            self._manager = ocp.CheckpointManager(
                self._directory,
                options=_orbax_options(self._options, cleanup=not self._lock or self._lock.held),
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

        After a failure, orbax's threads of that save are let go (the process can exit).

        Example:
          >>> ckpt.save(step, state, learner)  # returns once arrays left the device
          ... # doctest: +SKIP
          >>> ckpt.wait_until_finished()      # the step is now complete on disk
          ... # doctest: +SKIP
        """
        try:
            self._manager.wait_until_finished()
            self._manager.check_for_errors()
        except BaseException as error:
            _release_waiting_threads(self._operation)
            self._failure = error
            raise

    def close(self) -> None:
        """Waits for pending saves, releases orbax's resources and the directory's lock.

        Raises:
          Exception: a pending save's failure not raised before.
        """
        reported = self._failure
        try:
            self.wait_until_finished()
            self._manager.close()
        except BaseException as error:
            if error is not reported:
                raise
        finally:
            if self._lock is not None:
                self._lock.release()

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
        check_learner(learner)
        if self._options.read_only:
            raise ValueError(f"This CheckpointManager of {self._directory} is read-only.")
        if self._lock is not None:
            self._lock.acquire()  # FolderBusyError while another manager writes here
        step = check_step(step, self.all_steps(), self._directory)
        tree, metadata, flat_metrics = save_contents(
            step, state, learner, self._options, metrics, extra, extra_arrays
        )
        items = {_STATE_ITEM: ocp.args.PyTreeSave(tree), _META_ITEM: ocp.args.JsonSave(metadata)}
        if extra_arrays is not None:
            items[_EXTRA_ITEM] = ocp.args.StandardSave(extra_arrays)
        try:
            self._manager.save(
                step,
                args=ocp.args.Composite(**items),
                metrics=flat_metrics if self._options.best_metric is not None else None,
                force=True,
            )
        except BaseException as error:
            self._failure = error
            _release_waiting_threads(orbax_sync.OperationIdGenerator.get_current_operation_id())
            raise
        self._operation = orbax_sync.OperationIdGenerator.get_current_operation_id()
        if not self._options.async_save:
            self.wait_until_finished()

    def metadata(self, step: int | None = None) -> dict[str, Any]:
        """The JSON metadata saved with a step (default: the latest).

        Keys: ``format``, ``format_version``, ``step``, ``versions`` (jaxlearner, jax,
        flax, optax, orbax, python), ``modules`` (per module id: ``spec`` description,
        ``trained``, ``batch_layout``, ``counters``), ``counters`` (updates, grad_steps,
        skipped_steps), ``devices`` (count, processes, platform, the state's sharding and
        mesh), ``learner`` (its settings, its gradient postprocess's name), ``recipe``,
        ``key_impl`` (of the state's PRNG key), ``metrics``, ``digests`` (``{path: sha256}``
        per leaf of the saved tree, e.g. ``"modules/policy/params/params/Dense_0/kernel"``;
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
        step = resolve_step(step, self.all_steps(), self._directory)
        refuse_links(self._directory, step)
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(**{_META_ITEM: ocp.args.JsonRestore()})
            )
        except Exception as error:  # orbax and the JSON parser raise many kinds
            where = f"The metadata of step {step} in {self._directory} cannot be read"
            raise corrupted(where, error) from error
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
        step = resolve_step(step, self.all_steps(), self._directory)
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
            the checkpoint (the first differing path, saved versus expected), it
            lacks a gradient postprocess the step recorded, or the step is in
            another checkpoint format; nothing is cast or skipped.
          CheckpointCorruptedError: when an array cannot be read or its digest
            differs; the message names the leaf.

        Example:
          >>> learner = make_learner()                  # same code, fresh  # doctest: +SKIP
          >>> state = ckpt.restore(learner)                                # doctest: +SKIP
          >>> state = ckpt.restore(make_learner().on("all"))  # replicated  # doctest: +SKIP
        """
        check_learner(target)
        step = resolve_step(step, self.all_steps(), self._directory)
        metadata = self.metadata(step)
        abstract, target_tree, sharding = restore_target(target, step, metadata)
        check_structure(step, self._saved_shapes(step), stored_shapes(abstract))
        arrays = dict(plain_paths(self._read_state(step, target_tree)))
        if self._options.verify:
            verify_digests(step, metadata.get("digests") or {}, arrays, "leaf")
        return state_from_arrays(abstract, arrays, metadata["key_impl"], sharding)

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
        step = resolve_step(step, self.all_steps(), self._directory)
        metadata = self.metadata(step)
        records = metadata.get("extra_arrays")
        if records is None:
            return metadata.get("extra"), None
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(**{_EXTRA_ITEM: ocp.args.StandardRestore()})
            )[_EXTRA_ITEM]
        except Exception as error:  # tensorstore reports damage as ValueError, OSError, ...
            where = f"The extra arrays of step {step} in {self._directory} cannot be read"
            raise corrupted(where, error) from error
        found = dict(plain_paths(restored))
        check_extra_arrays(step, self._directory, records, found, verify=self._options.verify)
        return metadata.get("extra"), restored

    def _saved_shapes(self, step: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """``{path: (shape, dtype)}`` of the state's leaves, from orbax's metadata of the step."""
        try:
            tree = self._manager.metadata(step).item_metadata[_STATE_ITEM].tree
            return stored_shapes(tree)
        except Exception as error:  # a missing or damaged metadata file, in many forms
            where = f"Checkpoint step {step} in {self._directory} is damaged: orbax's description"
            raise corrupted(f"{where} of its state cannot be read", error) from error

    def _read_state(self, step: int, target: Any) -> Any:
        """The saved tree, read onto ``target``'s shardings; a failure names an unreadable leaf."""

        def read(item: Any) -> Any:
            args = ocp.args.PyTreeRestore(
                item, restore_args=ocp.checkpoint_utils.construct_restore_args(item)
            )
            return self._manager.restore(step, args=ocp.args.Composite(**{_STATE_ITEM: args}))

        def read_alone(path: str) -> Any:
            only = lambda p, leaf: leaf if path_name(p) == path else ocp.PLACEHOLDER
            return read(jax.tree_util.tree_map_with_path(only, target))

        try:
            return read(target)[_STATE_ITEM]
        except Exception as error:  # tensorstore reports damage as ValueError, OSError, ...
            failure = error
        unreadable = first_unreadable_leaf((path for path, _ in plain_paths(target)), read_alone)
        where = f"Checkpoint step {step} in {self._directory}"
        if unreadable is not None:
            path, leaf_error = unreadable
            raise corrupted(f"{where} is damaged: leaf {path} cannot be read", leaf_error) from (
                failure
            )
        raise corrupted(f"{where} cannot be read", failure) from failure


def _orbax_options(options: CheckpointOptions, cleanup: bool) -> ocp.CheckpointManagerOptions:
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
        cleanup_tmp_directories=cleanup and not options.read_only,
    )


def _release_waiting_threads(operation: str | None) -> None:
    """Lets the background threads of a failed orbax save end, so the process can exit.

    Orbax 0.12 runs each part of a save in a thread waiting for the signals of the parts
    before it; a failed part sends none and the exit hangs 300 s. Each waiting thread of
    ``operation`` is cancelled and signalled (orbax 0.11 lacks both calls: left alone)."""
    waiting = [
        thread
        for thread in threading.enumerate()
        if isinstance(thread, orbax_future._SignalingThread)
        and thread.is_alive()
        and callable(getattr(thread, "cancel", None))
        and hasattr(orbax_future, "set_signals")
        and operation in (None, getattr(thread, "_operation_id", None))
    ]
    for thread in waiting:
        thread.cancel()
        orbax_future.set_signals(thread._receive_signals, operation_id=thread._operation_id)
    for thread in waiting:
        threading.Thread.join(thread, timeout=10)
