"""The JSON metadata saved with every checkpoint step, and the metrics and extras in it.

Orbax-free helpers of :mod:`jaxlearner.checkpoint.manager`, which writes and reads
this metadata as one JSON item per step (see
:meth:`~jaxlearner.CheckpointManager.metadata` for its keys). It holds what
orbax does not record (orbax records the state's tree, shapes and dtypes): the
format and versions, each module's spec description and batch layout, the
devices and mesh, the counters, the learner's settings and recipe, the PRNG
key implementation, the metrics flattened to ``{"a/b": value}``, a sha256 per
leaf, and the caller's extra JSON. Nothing in it is pickled: what JSON cannot
hold is described by name or a shortened repr. The batch layouts read back
with :func:`decode_layouts` let a fresh learner be restored without a sample
batch.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import math
import platform
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.checkpoint.leaves import host_value
from jaxlearner.core.batch import Layout
from jaxlearner.core.learner import Learner
from jaxlearner.core.metrics import iter_metrics
from jaxlearner.core.state import LearnerState

FORMAT = "jaxlearner.checkpoint.manager"
FORMAT_VERSION = 2
"""2: the state as its nested tree of dicts and lists. 1 (jaxlearner 0.1.0): the state's leaves
as a flat tree named "00000", "00001", ...; no longer read."""

Metrics: TypeAlias = Mapping[str, Any]
"""``{name: scalar}`` or nested ``{module: {name: scalar}}``; keys are joined with ``"/"``."""


def build_metadata(
    step: int,
    state: LearnerState,
    learner: Learner,
    metrics: dict[str, Any],
    digests: dict[str, str] | None,
) -> dict[str, Any]:
    """The JSON metadata of a step (see :meth:`~jaxlearner.CheckpointManager.metadata`)."""
    recipe = learner.recipe
    try:
        json.dumps(recipe, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"The learner's recipe is not JSON-serialisable ({error}): {recipe!r}."
        ) from None
    config = learner.config
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
                "counters": {
                    "grad_steps": int(host_value(state.modules[m].grad_steps)),
                    "env_steps": int(host_value(state.modules[m].env_steps)),
                },
            }
            for m, spec in learner.specs.items()
        },
        "counters": {
            name: int(host_value(getattr(state, name)))
            for name in ("updates", "grad_steps", "skipped_steps")
        },
        "devices": _devices(state),
        "learner": {
            "minibatch_size": config.minibatch_size,
            "num_epochs": config.num_epochs,
            "shuffle": config.shuffle,
            "drop_last": config.drop_last,
            "skip_nonfinite": config.skip_nonfinite,
            "modules_to_train": sorted(learner.modules_to_train),
            "joint_loss": _name(config.loss) if config.loss is not None else None,
            "postprocess_gradients": _postprocess_name(config.postprocess_gradients),
            "shared_optimizers": {
                name: {
                    "module_ids": list(shared.module_ids),
                    **_describe_optimizer(shared.optimizer),
                }
                for name, shared in config.shared_optimizers.items()
            },
        },
        "recipe": recipe,
        "key_impl": str(jax.random.key_impl(state.key)),
        "metrics": metrics,
        "digests": digests,
    }


def check_format(step: int, directory: str, metadata: Any) -> None:
    """Checks that the JSON read from a step is jaxlearner metadata of the format this reads.

    Raises:
      ValueError: when the step was not saved by jaxlearner's CheckpointManager, or in
        another format version than this jaxlearner reads (naming both).
    """
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise ValueError(
            f"Step {step} in {directory} was not saved by jaxlearner's "
            "CheckpointManager (no jaxlearner metadata)."
        )
    found = metadata.get("format_version")
    if found != FORMAT_VERSION:
        saved_by = metadata.get("versions", {}).get("jaxlearner", "unknown")
        advice = (
            "Upgrade jaxlearner."
            if isinstance(found, int) and found > FORMAT_VERSION
            else f"Read it with the jaxlearner release that saved it ({saved_by})."
        )
        raise ValueError(
            f"Step {step} in {directory} uses checkpoint format {found} (saved by jaxlearner "
            f"{saved_by}); this jaxlearner reads format {FORMAT_VERSION} only (the state as its "
            f"nested tree). {advice}"
        )


def _versions() -> dict[str, str]:
    return dict(_installed_versions())


@functools.cache
def _installed_versions() -> tuple[tuple[str, str], ...]:
    # Read once per process: importlib.metadata parses each package's METADATA file, about
    # 2 ms a package, which was a fifth of a small state's save.
    versions = [("python", platform.python_version())]
    for package in ("jaxlearner", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint"):
        try:
            versions.append((package, importlib.metadata.version(package)))
        except importlib.metadata.PackageNotFoundError:
            versions.append((package, "unknown"))
    return tuple(versions)


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


def decode_layouts(step: int, metadata: dict[str, Any]) -> dict[str, Layout]:
    """The batch layout of every module of a step, read back from its metadata."""
    layouts = {}
    for module_id, module in metadata["modules"].items():
        if module.get("batch_layout") is None:
            raise ValueError(
                f"Step {step} holds no JSON batch layout for module {module_id!r} (its batch is a "
                "container other than dicts, lists and tuples), so a fresh learner cannot be "
                "restored from it: build the learner with sample_batch=... and restore into it."
            )
        layouts[module_id] = _decode_layout(module["batch_layout"])
    return layouts


def _describe_spec(spec: Any) -> dict[str, Any]:
    return {
        "model": _name(type(spec.model)),
        "model_repr": _short_repr(spec.model),
        "loss": _name(spec.loss) if spec.loss is not None else None,
        "optimizers": {
            name: _describe_optimizer(opt) for name, opt in spec.named_optimizers.items()
        },
        "hyperparams": {k: _jsonable(v) for k, v in spec.hyperparams.items()},
        "additional_updates": [
            {"fn": _name(u.fn), "after": u.after} for u in spec.additional_updates
        ],
        "metric_reductions": dict(spec.metric_reductions),
        "postprocess_gradients": _postprocess_name(spec.postprocess_gradients),
    }


def _postprocess_name(postprocess: Any) -> str | None:
    return None if postprocess is None else postprocess.name


def check_postprocesses(step: int, metadata: Mapping[str, Any], target: Learner) -> None:
    """Raises when the step was trained with a gradient postprocess ``target`` has not.

    A step records the name of each gradient postprocess, the learner's and each module's
    (:class:`~jaxlearner.GradientPostprocess`); ``target`` must have one of the same name
    wherever the step records one. A step that records none (among them every step saved
    before postprocesses were recorded) restores into any learner.

    Raises:
      ValueError: in one line, naming the step, the owner, the postprocess recorded and
        the learner's.
    """
    saved = {"the learner": (metadata.get("learner") or {}).get("postprocess_gradients")}
    own = {"the learner": _postprocess_name(target.config.postprocess_gradients)}
    for m, module in metadata["modules"].items():
        saved[f"module {m!r}"] = (module.get("spec") or {}).get("postprocess_gradients")
    for m, spec in target.specs.items():
        own[f"module {m!r}"] = _postprocess_name(spec.postprocess_gradients)
    for owner, name in saved.items():
        if name is not None and own.get(owner) != name:
            has = "none" if own.get(owner) is None else repr(own.get(owner))
            raise ValueError(
                f"Checkpoint step {step} was trained with the gradient postprocess {name!r} of "
                f"{owner}, and this learner's has {has}: build it with that "
                f"postprocess_gradients (jl.GradientPostprocess(fn, name={name!r}) names one)."
            )


def _describe_optimizer(opt: Any) -> dict[str, Any]:
    return {
        "transform": _name(opt.transform) if opt.is_factory else "built transformation",
        "learning_rate": _jsonable(opt.learning_rate),
        "hyperparams": {k: _jsonable(v) for k, v in opt.hyperparams.items()},
        "grad_clip": opt.grad_clip,
        "grad_clip_by": opt.grad_clip_by,
    }


def _name(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    return f"{module}.{qualname}" if module else qualname


def _short_repr(obj: Any, limit: int = 2000) -> str:
    return shorten(repr(obj), limit)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending in ``...`` when cut."""
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


def json_metrics(metrics: Metrics | None) -> dict[str, float | str]:
    """Metrics as flat ``{"a/b": float}`` JSON values; non-finite values as ``"nan"``/``"inf"``.

    :func:`~jaxlearner.core.metrics.iter_metrics`'s traversal, as the writers'
    ``flatten_metrics`` uses it, made strict for saving: a value that is not a
    real scalar is an error rather than dropped (a saved metric may rank steps,
    so a silently missing one would mislead),
    two keys that flatten alike are an error, and non-finite values, which JSON
    cannot hold, become strings.

    Raises:
      TypeError: when ``metrics`` is not a mapping.
      ValueError: when a value is not a real scalar, or two keys flatten alike.

    Example:
      >>> json_metrics({"policy": {"loss": 0.5}, "eval/return_mean": 2})
      {'policy/loss': 0.5, 'eval/return_mean': 2.0}
    """
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics must be a mapping of scalars; got {type(metrics).__name__}.")
    flat: dict[str, float | str] = {}
    for key, node in iter_metrics(metrics):
        value = host_value(node) if isinstance(node, jax.Array) else np.asarray(node)
        dtype = value.dtype
        real = jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.floating)
        if np.ndim(value) != 0 or not (real or dtype == np.bool_):
            raise ValueError(
                f"Metric {key!r} must be a real scalar to be saved; got {np.shape(value)} "
                f"{type(node).__name__}."
            )
        if key in flat:
            raise ValueError(f"Two metrics flatten to the same key {key!r}.")
        number = float(value)
        flat[key] = number if math.isfinite(number) else str(number)
    return flat


def history_from_json(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
    """A history saved as a JSON list of flat stats (the layout before
    :func:`~jaxlearner.training.history.to_columns`; non-finite values as ``"nan"``/``"inf"``),
    as floats again.

    Example:
      >>> history_from_json([{"episode_return_mean": "nan", "iteration": 3.0}])
      [{'episode_return_mean': nan, 'iteration': 3.0}]
    """
    return [{key: float(value) for key, value in entry.items()} for entry in entries]


def check_extra(extra: Mapping[str, Any] | None) -> Any:
    """``extra`` as JSON would read it back; raises ``TypeError`` if JSON cannot hold it."""
    if extra is None:
        return None
    try:
        return json.loads(json.dumps(extra, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise TypeError(f"save's extra must be JSON-serialisable ({error}).") from None
