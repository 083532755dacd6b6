"""Initialising modules: finding each model's example input and building its state.

By default the example input is found by tracing the loss once on the sample
batch (with ``jax.eval_shape``, so nothing is computed) and recording the
inputs of the first ``ctx.apply`` call of each module. The model is then
initialised on zeros of those shapes and dtypes. ``ModuleSpec.init_input``
overrides this with an explicit function of the sample batch.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.core.batch import (
    Layout,
    arrays_from_lists,
    batch_layout,
    batch_sizes,
    normalize_batch,
    zeros_like_layout,
)
from jaxlearner.core.context import JointLossFn, LossContext
from jaxlearner.core.learner_config import LearnerConfig
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.optimizer import ModuleOptimizer
from jaxlearner.core.schedules import initial_value
from jaxlearner.core.shared_optimizer import SharedOptimizers
from jaxlearner.core.state import LearnerState, ModuleState, zero_counter
from jaxlearner.errors import ReadableKeyError
from jaxlearner.types import Batch, Params, PyTree


def module_key(key: jax.Array, module_id: str) -> jax.Array:
    """A key for ``module_id`` that does not depend on which other modules exist."""
    return jax.random.fold_in(key, zlib.crc32(module_id.encode()) & 0x7FFFFFFF)


class _AfterFirstApply(Mapping):
    """Stands in for a module's params or extra state while its example input is found.

    Before the loss's first ``ctx.apply`` call nothing is known, and any use
    raises; afterwards it reads through to the (abstract) params the recorder
    initialised, or to the extra state built from them.
    """

    def __init__(
        self, recorder: _Recorder | None, what: str, build: Callable[[Params], Any]
    ) -> None:
        self._recorder = recorder
        self._what = what
        self._build = build

    def _value(self) -> Any:
        if self._recorder is None or self._recorder.params is None:
            module_id = "?" if self._recorder is None else self._recorder.module_id
            raise _UsedBeforeApply(module_id, self._what)
        return self._build(self._recorder.params)

    def __getitem__(self, key: Any) -> Any:
        return self._value()[key]

    def __iter__(self) -> Any:
        return iter(self._value())

    def __len__(self) -> int:
        return len(self._value())


class _UsedBeforeApply(Exception):
    def __init__(self, module_id: str, what: str) -> None:
        super().__init__(module_id, what)
        self.module_id = module_id
        self.what = what


class _Recorder:
    """A ``ctx.apply`` that records its first call's inputs and runs an abstract init."""

    def __init__(self, module_id: str, spec: ModuleSpec, key: jax.Array) -> None:
        self.module_id = module_id
        self.spec = spec
        self.key = key
        self.inputs: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self.params: Params | None = None

    def __call__(self, params: Any, *args: Any, **kwargs: Any) -> Any:
        del params  # not known yet: the recorder initialises its own
        if self.inputs is None:
            self.inputs = (_abstract(args), _abstract(kwargs))
            self.params = self.spec.model.init(self.key, *args, **kwargs)
        return self.spec.model.apply(self.params, *args, **kwargs)


def _abstract(tree: Any) -> Any:
    def leaf(x: Any) -> Any:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x))
        return x

    return jax.tree.map(leaf, tree)


def _zeros(tree: Any) -> Any:
    return jax.tree.map(
        lambda x: jnp.zeros(x.shape, x.dtype) if isinstance(x, jax.ShapeDtypeStruct) else x,
        tree,
    )


def find_init_inputs(
    specs: Mapping[str, ModuleSpec],
    sample_batch: Mapping[str, Batch],
    key: jax.Array,
    joint_loss: JointLossFn | None,
) -> dict[str, tuple[tuple[Any, ...], dict[str, Any]]]:
    """Each module's model inputs ``(args, kwargs)``, as concrete zero arrays.

    Raises:
      ValueError: when a loss never calls ``ctx.apply`` for a module, or uses
        its params or extra state before the first call; the message says to
        pass ``ModuleSpec(init_input=...)``.
    """
    inputs: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
    recorders: dict[str, _Recorder] = {}
    for module_id, spec in specs.items():
        if spec.init_input is not None:
            found = spec.init_input(sample_batch[module_id])
            args = found if isinstance(found, tuple) else (found,)
            inputs[module_id] = (args, {})
        else:
            recorders[module_id] = _Recorder(module_id, spec, module_key(key, module_id))
    if not recorders:
        return inputs

    if joint_loss is not None:
        recorders.update(
            {m: _Recorder(m, specs[m], module_key(key, m)) for m in specs if m not in recorders}
        )
    contexts = {m: _recording_context(m, specs[m], r) for m, r in recorders.items()}
    placeholder = {m: _AfterFirstApply(r, "params", lambda p: p) for m, r in recorders.items()}

    def trace(batch: Mapping[str, Batch]) -> None:
        if joint_loss is not None:
            joint_loss(placeholder, batch, contexts)
            return
        for module_id in recorders:
            specs[module_id].loss(placeholder[module_id], batch[module_id], contexts[module_id])

    try:
        jax.eval_shape(trace, dict(sample_batch))
    except _UsedBeforeApply as error:
        raise ValueError(
            f"Module {error.module_id!r}: the loss used its {error.what} before its first "
            "ctx.apply call, so its model's example input cannot be found by tracing the loss. "
            "Pass ModuleSpec(init_input=lambda batch: <model inputs>)."
        ) from None
    for module_id, recorder in recorders.items():
        recorder.params = None  # abstract values of the finished trace: drop them
        if module_id in inputs:
            continue  # given by init_input; traced only for the joint loss
        if recorder.inputs is None:
            raise ValueError(
                f"Module {module_id!r}: the loss never called ctx.apply on the sample batch, so "
                "its model's example input is unknown. Pass "
                "ModuleSpec(init_input=lambda batch: <model inputs>)."
            )
        args, kwargs = recorder.inputs
        inputs[module_id] = (_zeros(args), _zeros(kwargs))
    return inputs


def _recording_context(module_id: str, spec: ModuleSpec, recorder: _Recorder) -> LossContext:
    return LossContext(
        module_id=module_id,
        apply=recorder,
        key=recorder.key,
        extra=_AfterFirstApply(recorder, "extra state", lambda p: initial_extra(spec, p)),
        hyperparams=_initial_hyperparams(spec),
        counters={"grad_steps": zero_counter(), "env_steps": zero_counter()},
    )


def _initial_hyperparams(spec: ModuleSpec) -> dict[str, jax.Array]:
    return {name: initial_value(value, name) for name, value in spec.hyperparams.items()}


def initial_extra(spec: ModuleSpec, params: Params) -> dict[str, PyTree]:
    """The module's initial ``extra`` state: its updates' entries, the spec's own, then its
    observers' (:class:`~jaxlearner.Observer`) under their names."""
    extra: dict[str, PyTree] = {}
    for update in spec.additional_updates:
        if update.init_extra is not None:
            extra.update(update.init_extra(params))
    if spec.init_extra is not None:
        extra.update(spec.init_extra(params))
    for observer in spec.observers:
        if observer.name in extra:
            raise ValueError(
                f"Observer {observer.name!r} would overwrite the module's extra state "
                f"{observer.name!r} (extra state: {sorted(extra)}); give the observer another "
                "name."
            )
        extra[observer.name] = observer.init(params)
    # Strongly typed, so a Python float in the extra state is not a weak scalar whose
    # type could change (and recompile the update) after a checkpoint round trip.
    return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.asarray(x).dtype), extra)


def init_module_state(
    module_id: str,
    spec: ModuleSpec,
    key: jax.Array,
    inputs: tuple[tuple[Any, ...], dict[str, Any]],
    params: Params | None = None,
) -> ModuleState:
    """A module's initial state: params, optimizer states, extra, hyperparams, counters.

    Args:
      module_id: the module's id (for error messages).
      spec: the module's spec.
      key: the module's init key.
      inputs: the model's example inputs ``(args, kwargs)``.
      params: params to start from instead of a fresh ``model.init`` (e.g. a
        snapshot of another module's params).
    """
    if params is None:
        params = compiled_init(spec.model, key, *inputs)
    opt_states = ModuleOptimizer(spec.named_optimizers, spec.param_labels, module_id).init(params)
    return ModuleState(
        params=params,
        opt_states=opt_states,
        extra=initial_extra(spec, params),
        hyperparams=_initial_hyperparams(spec),
        grad_steps=zero_counter(),
        env_steps=zero_counter(),
    )


def compiled_init(model: Any, key: jax.Array, args: tuple, kwargs: dict) -> Params:
    """``model.init(key, *args, **kwargs)`` compiled as one program: run eagerly, each
    initializer op compiles on its own for each shape (flax's orthogonal initializer, a QR
    decomposition, took 2.3 s of an 18 s ``jaxlearner train ppo`` so). The inputs' arrays
    are traced; anything else in them is passed as it is.
    """
    leaves, treedef = jax.tree.flatten((args, kwargs))
    traced = [isinstance(leaf, jax.Array | np.ndarray) for leaf in leaves]

    def init(key: jax.Array, arrays: list[Any]) -> Params:
        given = iter(arrays)
        values = [next(given) if t else leaf for leaf, t in zip(leaves, traced, strict=True)]
        args, kwargs = jax.tree.unflatten(treedef, values)
        return model.init(key, *args, **kwargs)

    return jax.jit(init)(key, [leaf for leaf, t in zip(leaves, traced, strict=True) if t])


def typed_key(key: Any) -> jax.Array:
    """A typed PRNG key from a typed key or raw ``uint32[2]`` key data.

    Raises:
      TypeError: for anything else.
    """
    if isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    if isinstance(key, jax.Array | np.ndarray) and key.dtype == np.uint32 and key.shape == (2,):
        return jax.random.wrap_key_data(key)
    raise TypeError(
        f"Expected a PRNG key such as jax.random.key(0); got {type(key).__name__} {key!r}."
    )


def init_added_module(
    specs: Mapping[str, ModuleSpec],
    layout: Mapping[str, Layout] | None,
    joint_loss: JointLossFn | None,
    module_id: str,
    spec: ModuleSpec,
    sample_batch: Batch,
    state_key: jax.Array,
    key: Any = None,
    params: Params | None = None,
) -> tuple[ModuleState, Layout, jax.Array]:
    """The initial state of a module added to a learner of ``specs`` at runtime.

    Args:
      specs: the learner's modules before the addition.
      layout: their batch layouts, or ``None``.
      joint_loss: the learner's joint loss, if any (it then finds the new
        model's inputs, on zeros for the other modules).
      module_id: the new module's id.
      spec: its spec.
      sample_batch: a batch for the new module alone (lists of numbers become arrays).
      state_key: the learner state's key.
      key: its init key; ``None`` splits one off ``state_key``.
      params: params to start from instead of a fresh init.

    Returns:
      ``(module_state, the new module's batch layout, the state's next key)``.

    Raises:
      ValueError: when a joint loss must find the inputs but ``layout`` is unknown.
    """
    if key is None:
        state_key, key = jax.random.split(state_key)
    key = typed_key(key)
    sample_batch = arrays_from_lists(module_id, sample_batch)
    new_layout = batch_layout(module_id, sample_batch)
    if params is None and spec.init_input is None and joint_loss is not None:
        if layout is None:
            raise ValueError(
                "add_module with a joint loss needs the learner's batch layout to find the new "
                "model's inputs: build the learner with sample_batch=..."
            )
        sample = {m: zeros_like_layout(layout[m]) for m in specs}
        sample[module_id] = sample_batch
        inputs = find_init_inputs({**specs, module_id: spec}, sample, key, joint_loss)
    else:
        inputs = find_init_inputs({module_id: spec}, {module_id: sample_batch}, key, None)
    module = init_module_state(
        module_id, spec, module_key(key, module_id), inputs[module_id], params=params
    )
    return module, new_layout, state_key


def initial_state(
    specs: Mapping[str, ModuleSpec],
    layout: Mapping[str, Layout] | None,
    config: LearnerConfig,
    key: Any,
    sample_batch: Batch | None,
) -> LearnerState:
    """A learner's initial state, on the default device (:meth:`~jaxlearner.Learner.init`).

    Args:
      specs: the learner's modules.
      layout: their batch layouts, or ``None``.
      config: the learner's configuration (its joint loss, if any, finds the
        inputs; its shared optimizers get their states).
      key: a PRNG key, typed or raw.
      sample_batch: a batch for every module, or ``None`` for a one-row batch
        of zeros of ``layout``.

    Raises:
      KeyError: when a module has no sample batch.
      ValueError: without a sample batch or a layout, or when the sample
        differs from the layout.
    """
    key = typed_key(key)
    if sample_batch is None:
        if layout is None:
            raise ValueError(
                "init needs a sample batch: this learner does not know its batch layout "
                "(build it with jl.Learner(..., sample_batch=batch) to give it one)."
            )
        batch = {m: zeros_like_layout(layout[m]) for m in specs}
    else:
        batch = normalize_batch(sample_batch, tuple(specs))
        if set(batch) != set(specs):
            raise ReadableKeyError(
                f"init needs a sample batch for every module; missing "
                f"{[m for m in specs if m not in batch]} (modules: {list(specs)})."
            )
        batch_sizes(batch, layout)
    init_key, state_key = jax.random.split(key)
    inputs = find_init_inputs(specs, batch, init_key, config.loss)
    modules = {
        m: init_module_state(m, spec, module_key(init_key, m), inputs[m])
        for m, spec in specs.items()
    }
    shared = SharedOptimizers(config.shared_optimizers, specs)
    return LearnerState(
        modules=modules,
        key=state_key,
        updates=zero_counter(),
        grad_steps=zero_counter(),
        skipped_steps=zero_counter(),
        shared_opt_states=shared.init({m: module.params for m, module in modules.items()}),
    )
