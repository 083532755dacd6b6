"""Checkpoints of a learner state: orbax arrays plus JSON metadata, restored exactly.

This is the only module that imports orbax. A checkpoint step is a folder
``<directory>/<step>/`` written atomically by orbax (a partial save stays in a
temporary folder that is never read, and is cleaned up by the next manager):

* ``state/``: every array leaf of the :class:`~jaxlearner.LearnerState`
  (params, every optimizer state, schedule counters, extra state, counters,
  the PRNG key as its key data), as a flat orbax/tensorstore tree named
  ``00000, 00001, ...`` in the state's flattening order;
* ``jaxlearner/metadata``: JSON describing that tree (see
  :meth:`CheckpointManager.metadata`): versions, each module's spec, batch
  layout and structure fingerprint, devices and mesh, counters, metrics, the
  learner's recipe, and per leaf its path, shape, dtype and sha256 digest;
* ``metrics/metrics``: JSON metrics, written by orbax when a best metric is
  tracked.

Nothing is pickled. Restoring builds the expected state from the learner with
``jax.eval_shape`` (no computation), compares it leaf by leaf with the saved
description, and only then reads the arrays, directly onto the learner's
device or a :class:`~jaxlearner.LearnerGroup`'s sharding.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import math
import os
import platform
from collections.abc import Mapping
from typing import Any, Literal, Protocol, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from jaxlearner.batch import Layout
from jaxlearner.errors import ReadableKeyError
from jaxlearner.learner import Learner
from jaxlearner.registry import learner_from_recipe
from jaxlearner.state import LearnerState

FORMAT = "jaxlearner.checkpoint"
FORMAT_VERSION = 1
_STATE_ITEM = "state"
_META_ITEM = "jaxlearner"
_EXTRA_ITEM = "extra_arrays"
_MODULE_SECTIONS = ("params", "opt_states", "extra", "hyperparams")

BestMode: TypeAlias = Literal["max", "min"]
Metrics: TypeAlias = Mapping[str, Any]
"""``{name: scalar}`` or nested ``{module: {name: scalar}}``; keys are joined with ``"/"``."""


class CheckpointCorruptedError(ValueError):
    """A saved array cannot be read, or its content differs from the digest saved with it."""


class Placement(Protocol):
    """Anything that runs a learner on a sharding, such as a :class:`~jaxlearner.LearnerGroup`."""

    @property
    def learner(self) -> Learner: ...

    @property
    def state_sharding(self) -> jax.sharding.Sharding: ...


@dataclasses.dataclass(frozen=True)
class CheckpointOptions:
    """How a :class:`CheckpointManager` saves, keeps and restores steps.

    Attributes:
      max_to_keep: keep the latest ``max_to_keep`` steps; ``None`` keeps all.
      keep_best: also keep the ``keep_best`` best steps by ``best_metric``.
      best_metric: ``"/"``-separated key of the metric that ranks steps, into
        the metrics passed to ``save`` (e.g. ``"eval/return_mean"`` or
        ``"policy/total_loss"``). Required with ``keep_best``; every save must
        then pass it.
      best_mode: ``"max"`` (higher is better) or ``"min"``.
      async_save: write in a background thread; ``save`` returns once the
        arrays are copied off the devices. ``False`` waits for the write.
      verify: store a sha256 digest of every leaf at save and check it at
        restore (a checkpoint saved without digests restores unchecked).
      read_only: never create, write or delete anything (e.g. an evaluator
        reading a directory a trainer writes).

    The latest step is always kept, whatever the ranking says.
    """

    max_to_keep: int | None = 3
    keep_best: int = 0
    best_metric: str | None = None
    best_mode: BestMode = "max"
    async_save: bool = True
    verify: bool = True
    read_only: bool = False

    def __post_init__(self) -> None:
        if self.max_to_keep is not None and not _is_int(self.max_to_keep, minimum=1):
            raise ValueError(
                f"max_to_keep must be a positive int or None (keep all); got {self.max_to_keep!r}."
            )
        if not _is_int(self.keep_best, minimum=0):
            raise ValueError(f"keep_best must be an int >= 0; got {self.keep_best!r}.")
        if self.best_metric is not None and (
            not isinstance(self.best_metric, str)
            or not self.best_metric.strip("/")
            or "//" in self.best_metric
        ):
            raise ValueError(
                "best_metric must be a '/'-separated metric key such as 'eval/return_mean'; "
                f"got {self.best_metric!r}."
            )
        if self.keep_best and self.best_metric is None:
            raise ValueError(
                f"keep_best={self.keep_best} needs best_metric=... (e.g. 'eval/return_mean') to "
                "rank steps by."
            )
        if self.best_mode not in ("max", "min"):
            raise ValueError(f"best_mode must be 'max' or 'min'; got {self.best_mode!r}.")
        for name in ("async_save", "verify", "read_only"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool; got {getattr(self, name)!r}.")


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
        self._manager = ocp.CheckpointManager(
            self._directory,
            options=_orbax_options(self._options),
            item_handlers={
                _STATE_ITEM: ocp.StandardCheckpointHandler(),
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
        learner: Learner | Placement,
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
          state: the learner's state; on one device or replicated by a
            :class:`~jaxlearner.LearnerGroup`.
          learner: the learner (or group) the state belongs to.
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
        learner, _ = _unpack_target(learner)
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
                "save needs a learner that knows its batch layout: the learner that made the "
                "state with init (or restored it)."
            )
        flat_metrics = _flatten_metrics(metrics)
        if self._options.best_metric is not None:
            _check_best_metric(self._options.best_metric, flat_metrics)
        arrays, leaves = _storable_leaves(state, digests=self._options.verify)
        metadata = _metadata(step, state, learner, leaves, flat_metrics)
        metadata["extra"] = _check_extra(extra)
        items = {
            _STATE_ITEM: ocp.args.StandardSave(arrays),
            _META_ITEM: ocp.args.JsonSave(metadata),
        }
        if extra_arrays is not None:
            metadata["extra_arrays"] = _describe_extra_arrays(extra_arrays, self._options.verify)
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
        ``fingerprint`` of params / opt_states / extra / hyperparams,
        ``counters``), ``counters`` (updates, grad_steps, skipped_steps),
        ``devices`` (count, processes, platform, the state's sharding and mesh),
        ``learner`` (its options), ``recipe``, ``metrics`` and ``leaves`` (per
        array: stored ``name``, ``path``, ``shape``, ``dtype``, ``sha256``, and
        ``key_impl`` / ``weak_type`` where they apply).

        Raises:
          FileNotFoundError: when the step does not exist.

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
        if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
            raise ValueError(
                f"Step {step} in {self._directory} was not saved by jaxlearner's "
                "CheckpointManager (no jaxlearner metadata)."
            )
        if metadata.get("format_version", 0) > FORMAT_VERSION:
            raise ValueError(
                f"Step {step} uses checkpoint format {metadata['format_version']}; this "
                f"jaxlearner reads format {FORMAT_VERSION} and older. Upgrade jaxlearner."
            )
        return metadata

    def restore(self, target: Learner | Placement, step: int | None = None) -> LearnerState:
        """Restores a step (default: the latest) as a state of ``target``.

        The expected state is built from the learner with ``jax.eval_shape``
        and compared with the saved one leaf by leaf (paths, shapes, dtypes)
        before anything is read; arrays are then read directly onto the
        learner's default device, or onto a group's ``state_sharding`` (any
        device count, whatever it was at save). Typed PRNG keys, optax named
        tuples, empty states and weakly typed scalars come back as they were.

        Like ``learner.init``, this records the batch layout on a learner that
        has none yet (a fresh learner built in code or from a recipe), from the
        layout saved with the step, so ``learner.update`` works right after.

        Args:
          target: a :class:`~jaxlearner.Learner`, or anything with ``.learner``
            and ``.state_sharding`` such as a :class:`~jaxlearner.LearnerGroup`.
          step: the step; ``None`` for the latest.

        Returns:
          The restored :class:`~jaxlearner.LearnerState`.

        Raises:
          FileNotFoundError: when the directory holds no such step.
          ValueError: when the learner's modules or state structure differ from
            the checkpoint (the first differing path, saved versus expected);
            nothing is cast or skipped.
          CheckpointCorruptedError: when an array cannot be read or its digest
            differs; the message names the leaf.

        Example:
          >>> learner = make_learner()                  # same code, fresh  # doctest: +SKIP
          >>> state = ckpt.restore(learner)                                # doctest: +SKIP
          >>> state, metrics = learner.update(state, batch)               # doctest: +SKIP
          >>> state = ckpt.restore(jl.LearnerGroup(make_learner()))       # doctest: +SKIP
        """
        learner, sharding = _unpack_target(target)
        step = self._resolve_step(step)
        metadata = self.metadata(step)
        _check_module_ids(step, list(metadata["modules"]), learner.module_ids)
        layout = learner.batch_layout
        if layout is None:
            layout = _decode_layouts(step, metadata)
        key_impl = next(
            (leaf["key_impl"] for leaf in metadata["leaves"] if "key_impl" in leaf), None
        )
        abstract = _abstract_state(learner.replace(), layout, key_impl)
        expected = [_describe_leaf(path, leaf) for path, leaf in _leaves_with_paths(abstract)]
        _check_structure(step, metadata["leaves"], expected)
        if sharding is None:
            sharding = jax.sharding.SingleDeviceSharding(_default_device())
        saved = metadata["leaves"]
        targets = {
            leaf["name"]: jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
            for leaf, (shape, dtype) in zip(
                saved, (_stored_shape_dtype(x) for x in jax.tree.leaves(abstract)), strict=True
            )
        }
        arrays = self._read_arrays(step, targets, saved)
        if self._options.verify:
            _verify_digests(step, saved, arrays)
        leaves = [_logical_leaf(arrays[leaf["name"]], leaf, sharding) for leaf in saved]
        state = jax.tree.unflatten(jax.tree.structure(abstract), leaves)
        if learner.batch_layout is None:
            _abstract_state(learner, layout, key_impl)  # records the layout, as init does
        return state

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
                f"{_shorten(str(error), 400)}"
            ) from error
        found = dict(_plain_paths(restored))
        for record in records:
            leaf = found.get(record["path"])
            if leaf is None or list(np.shape(leaf)) != record["shape"]:
                raise CheckpointCorruptedError(
                    f"The extra array {record['path']} of step {step} is missing or reshaped."
                )
            if "sha256" in record and _digest(_host(leaf)) != record["sha256"]:
                raise CheckpointCorruptedError(
                    f"Checkpoint step {step} is corrupted: extra array {record['path']} differs "
                    "from the digest saved with it. Restore an earlier step."
                )
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

    def _read_arrays(
        self, step: int, targets: dict[str, jax.ShapeDtypeStruct], saved: list[dict[str, Any]]
    ) -> dict[str, jax.Array]:
        try:
            restored = self._manager.restore(
                step,
                args=ocp.args.Composite(**{_STATE_ITEM: ocp.args.StandardRestore(targets)}),
            )
        except Exception as error:  # tensorstore reports damage as ValueError, OSError, ...
            path = self._manager.directory / str(step) / _STATE_ITEM
            paths = {leaf["name"]: leaf["path"] for leaf in saved}
            for name, target in targets.items():
                try:
                    _read_one(path, name, target)
                except Exception as leaf_error:
                    raise CheckpointCorruptedError(
                        f"Checkpoint step {step} in {self._directory} is damaged: leaf "
                        f"{paths[name]} (stored as {name!r}) cannot be read: "
                        f"{_shorten(str(leaf_error), 400)}"
                    ) from error
            raise CheckpointCorruptedError(
                f"Checkpoint step {step} in {self._directory} cannot be read: "
                f"{_shorten(str(error), 400)}"
            ) from error
        return restored[_STATE_ITEM]


def restore(
    directory: str | os.PathLike[str], step: int | None = None, *, verify: bool = True
) -> tuple[Learner, LearnerState]:
    """Rebuilds a learner from the recipe saved with a step, and restores its state.

    For learners built with ``recipe=...`` (the built-in algorithms): the
    builder registered for ``recipe["algorithm"]`` (see
    :func:`~jaxlearner.register_recipe`) makes a fresh learner, and the state
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
        step = manager._resolve_step(step)
        recipe = manager.metadata(step).get("recipe")
        if recipe is None:
            raise ValueError(
                f"Step {step} in {manager.directory} was saved from a learner without a "
                "recipe, so it cannot be rebuilt from the checkpoint alone: build the learner "
                "in code and call jl.CheckpointManager(directory).restore(learner)."
            )
        learner = learner_from_recipe(recipe)
        return learner, manager.restore(learner, step)
    finally:
        manager.close()


def _check_extra(extra: Mapping[str, Any] | None) -> Any:
    if extra is None:
        return None
    try:
        return json.loads(json.dumps(extra, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise TypeError(f"save's extra must be JSON-serialisable ({error}).") from None


def _describe_extra_arrays(tree: Any, digests: bool) -> list[dict[str, Any]]:
    records = []
    for path, leaf in _plain_paths(tree):
        if not isinstance(leaf, jax.Array | np.ndarray | np.generic):
            raise TypeError(
                f"save's extra_arrays must hold arrays only; {path} is {type(leaf).__name__}."
            )
        if _is_key(leaf):
            raise TypeError(
                f"save's extra_arrays cannot hold typed PRNG keys ({path}); store "
                "jax.random.key_data(key) and re-wrap it with jax.random.wrap_key_data."
            )
        record = {"path": path, "shape": list(np.shape(leaf)), "dtype": str(leaf.dtype)}
        if digests:
            record["sha256"] = _digest(_host(leaf))
        records.append(record)
    return records


def _plain_paths(tree: Any) -> list[tuple[str, Any]]:
    """Leaves by ``"a/b/0"`` paths: a dataclass field and the dict orbax restores it as agree."""

    def name(entry: Any) -> str:
        for attribute in ("key", "name", "idx"):
            if hasattr(entry, attribute):
                return str(getattr(entry, attribute))
        return str(entry)

    return [
        ("/".join(name(entry) for entry in path), leaf)
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    ]


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


def _flatten_metrics(metrics: Metrics | None) -> dict[str, float | str]:
    """Metrics as flat ``{"a/b": float}`` JSON values; non-finite values as ``"nan"``/``"inf"``.

    Raises:
      TypeError: when ``metrics`` is not a mapping or a key is not a string.
      ValueError: when a value is not a scalar, or two keys flatten alike.

    Example:
      >>> _flatten_metrics({"policy": {"loss": 0.5}, "eval/return_mean": 2})
      {'policy/loss': 0.5, 'eval/return_mean': 2.0}
    """
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics must be a mapping of scalars; got {type(metrics).__name__}.")
    flat: dict[str, float | str] = {}

    def visit(prefix: str, node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if not isinstance(key, str):
                    raise TypeError(f"Metric keys must be strings; got {key!r} under {prefix!r}.")
                visit(f"{prefix}/{key}" if prefix else key, value)
            return
        value = _host(node) if isinstance(node, jax.Array) else np.asarray(node)
        dtype = value.dtype
        real = jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.floating)
        if np.ndim(value) != 0 or not (real or dtype == np.bool_):
            raise ValueError(
                f"Metric {prefix!r} must be a real scalar to be saved; got {np.shape(value)} "
                f"{type(node).__name__}."
            )
        if prefix in flat:
            raise ValueError(f"Two metrics flatten to the same key {prefix!r}.")
        number = float(value)
        flat[prefix] = number if math.isfinite(number) else str(number)

    visit("", metrics)
    return flat


def _orbax_options(options: CheckpointOptions) -> ocp.CheckpointManagerOptions:
    # orbax's own max_to_keep combined with best_fn ranks every step by the metric alone and
    # can delete the step just written; an explicit policy keeps the latest unconditionally.
    policies: list[Any] = [
        ocp.checkpoint_managers.LatestN(n=1),
        ocp.checkpoint_managers.LatestN(n=options.max_to_keep),
    ]
    best_fn = None
    if options.best_metric is not None:
        best_fn = _metric_ranker(options.best_metric, options.best_mode)
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


def _metric_ranker(key: str, mode: BestMode) -> Any:
    worst = -math.inf if mode == "max" else math.inf

    def rank(metrics: Any) -> float:
        value = metrics.get(key) if isinstance(metrics, Mapping) else None
        try:
            number = float(value)  # also parses the "nan" / "inf" strings non-finite values get
        except (TypeError, ValueError):
            return worst
        return worst if math.isnan(number) else number

    return rank


def _check_best_metric(key: str, metrics: dict[str, Any]) -> None:
    if key not in metrics:
        raise ReadableKeyError(
            f"This manager ranks steps by best_metric={key!r}, so save needs it in metrics; got "
            f"metric keys {sorted(metrics)}."
        )


def _unpack_target(target: object) -> tuple[Learner, jax.sharding.Sharding | None]:
    if isinstance(target, Learner):
        return target, None
    learner = getattr(target, "learner", None)
    sharding = getattr(target, "state_sharding", None)
    if isinstance(learner, Learner) and isinstance(sharding, jax.sharding.Sharding):
        return learner, sharding
    raise TypeError(
        "Expected a jl.Learner, or an object with .learner (a jl.Learner) and .state_sharding "
        f"(a jax.sharding.Sharding) such as a jl.LearnerGroup; got {type(target).__name__}."
    )


def _default_device() -> jax.Device:
    return next(iter(jnp.zeros(()).devices()))


def _is_int(value: object, minimum: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= minimum


def _is_key(leaf: Any) -> bool:
    return jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key)


def _leaves_with_paths(tree: Any) -> list[tuple[str, Any]]:
    return [(_path_text(p), x) for p, x in jax.tree_util.tree_leaves_with_path(tree)]


def _path_text(path: tuple[Any, ...]) -> str:
    """A leaf's path as Python would index it, e.g. ``.modules['policy'].params['w']``.

    Written out here rather than with ``jax.tree_util.keystr`` so that saved paths do not
    change with JAX's formatting.
    """
    parts = []
    for entry in path:
        if isinstance(entry, jax.tree_util.DictKey):
            parts.append(f"[{entry.key!r}]")
        elif isinstance(entry, jax.tree_util.GetAttrKey):
            parts.append(f".{entry.name}")
        elif isinstance(entry, jax.tree_util.SequenceKey):
            parts.append(f"[{entry.idx}]")
        else:
            parts.append(f"[{getattr(entry, 'key', entry)!r}]")
    return "".join(parts)


def _describe_leaf(path: str, leaf: Any) -> dict[str, Any]:
    return {"path": path, "shape": list(leaf.shape), "dtype": str(leaf.dtype)}


def _stored_shape_dtype(leaf: Any) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype a leaf is stored with (typed keys as their key data)."""
    if _is_key(leaf):
        data = jax.eval_shape(jax.random.key_data, leaf)
        return data.shape, data.dtype
    return tuple(leaf.shape), leaf.dtype


def _host(array: jax.Array) -> np.ndarray:
    """An array's value on this host; also for arrays replicated over several processes."""
    if not isinstance(array, jax.Array):
        return np.asarray(array)
    if array.is_fully_addressable:
        return np.asarray(array)
    if array.is_fully_replicated:
        return np.asarray(array.addressable_shards[0].data)
    raise ValueError(
        "Digests need each state leaf on this process or replicated; got a leaf sharded as "
        f"{array.sharding}. Pass verify=False to save it without digests."
    )


def _digest(array: np.ndarray) -> str:
    # Hashing a byte view, not a copy: about 1 GB/s on one core.
    return hashlib.sha256(np.ascontiguousarray(array).reshape(-1).view(np.uint8)).hexdigest()


def _storable_leaves(
    state: LearnerState, digests: bool
) -> tuple[dict[str, jax.Array], list[dict[str, Any]]]:
    """The state's leaves as named arrays for orbax, and their descriptions."""
    named = _leaves_with_paths(state)
    width = max(5, len(str(len(named) - 1)))
    arrays: dict[str, jax.Array] = {}
    leaves = []
    for index, (path, leaf) in enumerate(named):
        leaf = leaf if isinstance(leaf, jax.Array) else jnp.asarray(leaf)
        record = {"name": f"{index:0{width}d}", **_describe_leaf(path, leaf)}
        if _is_key(leaf):
            record["key_impl"] = str(jax.random.key_impl(leaf))
            leaf = jax.random.key_data(leaf)
        elif leaf.weak_type:
            record["weak_type"] = True
        arrays[record["name"]] = leaf
        leaves.append(record)
    if digests:
        for record, host in zip(leaves, (_host(x) for x in arrays.values()), strict=True):
            record["sha256"] = _digest(host)
    return arrays, leaves


def _logical_leaf(array: jax.Array, record: dict[str, Any], sharding: Any) -> jax.Array:
    """A restored array as the state held it: typed keys re-wrapped, weak scalars weak again."""
    if "key_impl" in record:
        return jax.random.wrap_key_data(array, impl=record["key_impl"])
    if record.get("weak_type") and array.ndim == 0 and sharding.is_fully_addressable:
        weak = jnp.asarray(_host(array).item())
        if weak.dtype == array.dtype and weak.weak_type:
            return jax.device_put(weak, sharding)
    return array


def _verify_digests(step: int, saved: list[dict[str, Any]], arrays: dict[str, jax.Array]) -> None:
    for record in saved:
        if "sha256" not in record:
            continue
        actual = _digest(_host(arrays[record["name"]]))
        if actual != record["sha256"]:
            raise CheckpointCorruptedError(
                f"Checkpoint step {step} is corrupted: leaf {record['path']} (stored as "
                f"{record['name']!r}) has sha256 {actual[:16]}..., but {record['sha256'][:16]}... "
                "was saved. Restore an earlier step."
            )


def _read_one(path: Any, name: str, target: jax.ShapeDtypeStruct) -> None:
    """Reads a single stored array (to find which leaf a failed restore could not read)."""
    checkpointer = ocp.Checkpointer(ocp.PyTreeCheckpointHandler())
    try:
        checkpointer.restore(
            path,
            args=ocp.args.PyTreeRestore(
                item={name: target},
                restore_args={name: ocp.ArrayRestoreArgs(sharding=target.sharding)},
                partial_restore=True,
            ),
        )
    finally:
        checkpointer.close()


def _abstract_state(learner: Learner, layout: Mapping[str, Layout], key_impl: str | None) -> Any:
    """The learner's state as ``ShapeDtypeStruct`` leaves, from its ``init`` traced abstractly.

    The sample batch is abstract, with the saved layout and as many rows as a minibatch (the
    size the loss is written for; nothing is computed or allocated, whatever the size).
    """
    rows = learner.config.minibatch_size or 2
    sample = {
        module_id: jax.tree.map(
            lambda s: jax.ShapeDtypeStruct((rows, *s.shape), s.dtype), layout[module_id]
        )
        for module_id in learner.module_ids
    }
    return jax.eval_shape(
        lambda batch: learner.init(jax.random.key(0, impl=key_impl), batch), sample
    )


def _check_module_ids(step: int, saved: list[str], expected: tuple[str, ...]) -> None:
    missing = [m for m in saved if m not in expected]
    extra = [m for m in expected if m not in saved]
    if missing or extra:
        problems = [f"module {m!r} is in the checkpoint but not in the learner" for m in missing]
        problems += [f"module {m!r} is in the learner but not in the checkpoint" for m in extra]
        raise ValueError(
            f"Checkpoint step {step} does not match this learner: {'; '.join(problems)} "
            f"(checkpoint modules: {saved}; learner modules: {list(expected)})."
        )


def _check_structure(
    step: int, saved: list[dict[str, Any]], expected: list[dict[str, Any]]
) -> None:
    """Raises naming the first leaf whose path, shape or dtype differs."""

    def text(leaf: dict[str, Any]) -> str:
        return f"{leaf['dtype']}[{', '.join(map(str, leaf['shape']))}]"

    saved_paths = {leaf["path"] for leaf in saved}
    expected_paths = {leaf["path"] for leaf in expected}
    for position in range(max(len(saved), len(expected))):
        old = saved[position] if position < len(saved) else None
        new = expected[position] if position < len(expected) else None
        if old is not None and new is not None and old["path"] == new["path"]:
            if old["shape"] == new["shape"] and old["dtype"] == new["dtype"]:
                continue
            path, detail = old["path"], f"saved {text(old)}, expected {text(new)}"
        elif old is not None and old["path"] not in expected_paths:
            path, detail = old["path"], f"saved {text(old)}, expected no such leaf"
        elif new is not None and new["path"] not in saved_paths:
            path, detail = new["path"], f"saved no such leaf, expected {text(new)}"
        else:
            path, detail = (old or new)["path"], "the leaves are in a different order"
        raise ValueError(
            f"Checkpoint step {step} does not match this learner's state at {path}: {detail}. "
            "Nothing was restored: restoring never casts, reshapes or skips a leaf; build the "
            "learner as it was when the step was saved."
        )


def _metadata(
    step: int,
    state: LearnerState,
    learner: Learner,
    leaves: list[dict[str, Any]],
    metrics: dict[str, Any],
) -> dict[str, Any]:
    recipe = learner.recipe
    try:
        json.dumps(recipe, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"The learner's recipe is not JSON-serialisable ({error}): {recipe!r}."
        ) from None
    options = learner.options
    layout = learner.batch_layout or {}
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "step": step,
        "versions": _versions(),
        "modules": {
            m: {
                "spec": _describe_spec(spec),
                "trained": m in learner.modules_to_train,
                "batch_layout": _encode_layout(layout.get(m)),
                "fingerprint": _fingerprint(state.modules[m]),
                "counters": {
                    "grad_steps": int(_host(state.modules[m].grad_steps)),
                    "env_steps": int(_host(state.modules[m].env_steps)),
                },
            }
            for m, spec in learner.specs.items()
        },
        "counters": {
            name: int(_host(getattr(state, name)))
            for name in ("updates", "grad_steps", "skipped_steps")
        },
        "devices": _devices(state),
        "learner": {
            "minibatch_size": options["minibatch_size"],
            "num_epochs": options["num_epochs"],
            "shuffle": options["shuffle"],
            "skip_nonfinite": options["skip_nonfinite"],
            "modules_to_train": sorted(learner.modules_to_train),
            "joint_loss": _name(options["loss"]) if options["loss"] is not None else None,
        },
        "recipe": recipe,
        "metrics": metrics,
        "leaves": leaves,
    }


def _fingerprint(module: Any) -> dict[str, Any]:
    """Per section of a module's state: its leaves' paths, shapes, dtypes and their sha256."""
    result = {}
    for section in _MODULE_SECTIONS:
        described = [_describe_leaf(p, x) for p, x in _leaves_with_paths(getattr(module, section))]
        text = json.dumps(described, sort_keys=True)
        result[section] = {
            "num_leaves": len(described),
            "sha256": hashlib.sha256(text.encode()).hexdigest(),
        }
    return result


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("jaxlearner", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "unknown"
    return versions


def _devices(state: LearnerState) -> dict[str, Any]:
    sharding = getattr(jax.tree.leaves(state)[0], "sharding", None)
    described: dict[str, Any] = {"type": type(sharding).__name__}
    if isinstance(sharding, jax.sharding.NamedSharding):
        described["mesh"] = {
            "axis_names": [str(a) for a in sharding.mesh.axis_names],
            "shape": [int(n) for n in sharding.mesh.devices.shape],
        }
        # PartitionSpec as JSON: one entry per array axis, an axis name, a list of names or null.
        described["spec"] = [
            list(axes) if isinstance(axes, tuple) else axes for axes in sharding.spec
        ]
    if sharding is not None:
        described["num_devices"] = len(sharding.device_set)
    return {
        "device_count": jax.device_count(),
        "process_count": jax.process_count(),
        "platform": jax.default_backend(),
        "state_sharding": described,
    }


def _encode_layout(layout: Any) -> Any:
    """A batch layout as JSON; ``None`` for layouts of containers JSON cannot describe."""

    def encode(node: Any) -> Any:
        if isinstance(node, jax.ShapeDtypeStruct):
            return {"shape": list(node.shape), "dtype": str(node.dtype)}
        if type(node) is dict and all(isinstance(k, str) for k in node):
            return {"dict": {k: encode(v) for k, v in node.items()}}
        if type(node) in (list, tuple):
            return {type(node).__name__: [encode(v) for v in node]}
        raise TypeError(type(node).__name__)

    try:
        return None if layout is None else encode(layout)
    except TypeError:
        return None


def _decode_layout(encoded: Any) -> Any:
    if "shape" in encoded:
        return jax.ShapeDtypeStruct(tuple(encoded["shape"]), jnp.dtype(encoded["dtype"]))
    if "dict" in encoded:
        return {k: _decode_layout(v) for k, v in encoded["dict"].items()}
    kind = "list" if "list" in encoded else "tuple"
    items = [_decode_layout(v) for v in encoded[kind]]
    return items if kind == "list" else tuple(items)


def _decode_layouts(step: int, metadata: dict[str, Any]) -> dict[str, Layout]:
    layouts = {}
    for module_id, module in metadata["modules"].items():
        if module.get("batch_layout") is None:
            raise ValueError(
                f"Step {step} holds no JSON batch layout for module {module_id!r} (its batch is a "
                "container other than dicts, lists and tuples), so a fresh learner cannot be "
                "restored from it: call learner.init(key, sample_batch) first, then restore."
            )
        layouts[module_id] = _decode_layout(module["batch_layout"])
    return layouts


def _describe_spec(spec: Any) -> dict[str, Any]:
    return {
        "model": _name(type(spec.model)),
        "model_repr": _short_repr(spec.model),
        "loss": _name(spec.loss) if spec.loss is not None else None,
        "optimizers": {
            name: {
                "transform": _name(opt.transform) if opt.is_factory else "built transformation",
                "learning_rate": _jsonable(opt.learning_rate),
                "hyperparams": {k: _jsonable(v) for k, v in opt.hyperparams.items()},
                "grad_clip": opt.grad_clip,
                "grad_clip_by": opt.grad_clip_by,
            }
            for name, opt in spec.named_optimizers.items()
        },
        "hyperparams": {k: _jsonable(v) for k, v in spec.hyperparams.items()},
        "additional_updates": [
            {"fn": _name(u.fn), "after": u.after} for u in spec.additional_updates
        ],
        "metric_reductions": dict(spec.metric_reductions),
    }


def _name(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}.{qualname}" if module else qualname


def _short_repr(obj: Any, limit: int = 2000) -> str:
    return _shorten(repr(obj), limit)


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _jsonable(value: Any) -> Any:
    """Numbers, strings and nested lists/dicts of them as they are; anything else as its repr."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float | np.floating | np.integer):
        number = float(value)
        return number if math.isfinite(number) else str(number)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return _short_repr(value, limit=500)
