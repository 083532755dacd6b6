"""Learner: RLlib's multi-module learner as an immutable state and one jitted update.

The :class:`Learner` is a thin, immutable holder of the pure functions built
by :func:`~jaxlearner.update.make_update` and of the configuration they
close over. Its ``update`` is that pure function under one ``jax.jit``, with
the batch validated in Python first. Structural changes
(:meth:`Learner.add_module`, :meth:`Learner.remove_module`,
:meth:`Learner.replace`) return a new learner, which compiles once for the new
structure; the state moves over unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeAlias, final

import jax
import numpy as np

from jaxlearner.batch import (
    Layout,
    batch_layout,
    minibatch_plan,
    normalize_batch,
    validate_batch,
)
from jaxlearner.errors import ReadableKeyError
from jaxlearner.initialization import find_init_inputs, init_module_state, module_key
from jaxlearner.module_spec import ModuleSpec
from jaxlearner.state import LearnerState, zero_counter
from jaxlearner.types import Batch, JointLossFn, Params
from jaxlearner.update import LearnerUpdateFn, UpdateConfig, UpdateFn, make_update

ModulesToTrain: TypeAlias = Collection[str] | Callable[[str], bool] | None
"""``None`` (train all), a collection of module ids, or a predicate on ids."""


@final
class Learner:
    """A multi-module learner with a pure, jitted ``update``.

    Args:
      modules: module id -> :class:`~jaxlearner.ModuleSpec`.
      minibatch_size: rows per gradient step; ``None`` uses the whole batch as
        one minibatch. When a module's batch of ``B`` rows does not divide
        evenly, each epoch uses ``B // minibatch_size`` minibatches and leaves
        the remaining ``B % minibatch_size`` rows out of that epoch (with
        ``shuffle`` a different random subset each epoch, so every row is used
        over the epochs). When modules' batches give different numbers of
        minibatches, every epoch takes the largest number of steps and the
        smaller modules cycle through theirs (RLlib's cyclic iterator).
      num_epochs: passes over the batch per ``update``.
      shuffle: permute the rows each epoch with the state's key; ``False``
        keeps the batch order.
      modules_to_train: ``None`` (all), a collection of ids, or a predicate
        ``module_id -> bool``. Modules not trained keep their params,
        optimizer states and counters bit-identical.
      skip_nonfinite: on a minibatch step whose loss or gradients hold a
        NaN/Inf, keep every trained module's state as it was (params,
        optimizer states, extras, gradient-step counters) and count the step
        (``metrics["__all__"]["num_skipped_steps"]``). The env steps the batch
        accounts for are still counted once per update: the environment moved on.
      jit: ``False`` runs the very same update eagerly (loops in Python,
        losses on concrete arrays) so losses can be printed and stepped
        through; results equal the jitted ones.
      loss: an optional learner-level loss over all modules of a batch,
        ``loss(params, batch, ctx) -> (scalar, metrics)`` with mappings by
        module id (RLlib's ``compute_loss`` across modules); it replaces the
        modules' own losses.
      additional_updates: learner-level ``fn(state, metrics) -> state``, run at
        the end of every update.
      donate_state: donate the input state's buffers to the update
        (``donate_argnums=0``): less memory, but the input state may not be
        used afterwards.
      batch_layout: each module's batch layout, for a learner that restores a
        state instead of calling ``init`` (the checkpoint module passes it).
      recipe: a JSON-serialisable description from which a registered builder
        can rebuild this learner (``{"algorithm": name, ...}``); built-in
        algorithms set it so a checkpoint can be restored without code.

    Raises:
      TypeError, ValueError, KeyError: on an invalid configuration, naming what
        was received and what is valid.

    Example:
      >>> import flax.linen as nn, jax, numpy as np, optax, jaxlearner as jl
      >>> def loss(params, batch, ctx):
      ...     error = ctx.apply(params, batch["x"])[:, 0] - batch["y"]
      ...     return (error ** 2).mean(), {}
      >>> learner = jl.Learner({"policy": jl.ModuleSpec(nn.Dense(1), loss, optax.sgd(0.1))},
      ...                      minibatch_size=32, num_epochs=2)
      >>> batch = {"x": np.ones((64, 3), np.float32), "y": np.zeros(64, np.float32)}
      >>> state = learner.init(jax.random.key(0), batch)
      >>> state, metrics = learner.update(state, batch)
      >>> int(state.grad_steps)
      4
    """

    def __init__(
        self,
        modules: Mapping[str, ModuleSpec],
        *,
        minibatch_size: int | None = None,
        num_epochs: int = 1,
        shuffle: bool = True,
        modules_to_train: ModulesToTrain = None,
        skip_nonfinite: bool = False,
        jit: bool = True,
        loss: JointLossFn | None = None,
        additional_updates: Sequence[LearnerUpdateFn] = (),
        donate_state: bool = False,
        batch_layout: Mapping[str, Layout] | None = None,
        recipe: Mapping[str, Any] | None = None,
    ) -> None:
        self._specs = _check_specs(modules, loss)
        _check_positive_int("minibatch_size", minibatch_size, allow_none=True)
        _check_positive_int("num_epochs", num_epochs)
        for name, flag in (
            ("shuffle", shuffle),
            ("skip_nonfinite", skip_nonfinite),
            ("jit", jit),
            ("donate_state", donate_state),
        ):
            if not isinstance(flag, bool):
                raise TypeError(f"Learner {name} must be a bool; got {flag!r}.")
        if loss is not None and not callable(loss):
            raise TypeError(f"Learner loss must be callable or None; got {loss!r}.")
        for update in additional_updates:
            if not callable(update):
                raise TypeError(f"Learner additional_updates must be callables; got {update!r}.")
        self._options: dict[str, Any] = dict(
            minibatch_size=minibatch_size,
            num_epochs=num_epochs,
            shuffle=shuffle,
            modules_to_train=modules_to_train,
            skip_nonfinite=skip_nonfinite,
            jit=jit,
            loss=loss,
            additional_updates=tuple(additional_updates),
            donate_state=donate_state,
            recipe=None if recipe is None else dict(recipe),
        )
        self._trained = _resolve_modules_to_train(modules_to_train, tuple(self._specs))
        self._layout = None if batch_layout is None else dict(batch_layout)
        if self._layout is not None:
            _check_layout_ids(self._layout, tuple(self._specs))
        self._config = UpdateConfig(
            minibatch_size=minibatch_size,
            num_epochs=num_epochs,
            shuffle=shuffle,
            modules_to_train=self._trained,
            skip_nonfinite=skip_nonfinite,
        )
        self._update_fn = self.build_update()
        self._jitted = jax.jit(self._update_fn, donate_argnums=(0,) if donate_state else ())

    @property
    def specs(self) -> dict[str, ModuleSpec]:
        """Module id -> spec (a copy)."""
        return dict(self._specs)

    @property
    def module_ids(self) -> tuple[str, ...]:
        """The module ids, in insertion order."""
        return tuple(self._specs)

    @property
    def modules_to_train(self) -> frozenset[str]:
        """Ids of the modules that get gradient steps."""
        return self._trained

    @property
    def config(self) -> UpdateConfig:
        """The static update configuration."""
        return self._config

    @property
    def options(self) -> dict[str, Any]:
        """The keyword arguments this learner was built with (for :meth:`replace`)."""
        return dict(self._options)

    @property
    def recipe(self) -> dict[str, Any] | None:
        """The JSON description a registered builder rebuilds this learner from, if any."""
        recipe = self._options["recipe"]
        return None if recipe is None else dict(recipe)

    @property
    def batch_layout(self) -> dict[str, Layout] | None:
        """Each module's batch layout (trailing shapes and dtypes), once known."""
        return None if self._layout is None else dict(self._layout)

    @property
    def update_fn(self) -> UpdateFn:
        """The pure, un-jitted ``update(state, batch, env_steps) -> (state, metrics)``.

        ``batch`` must be ``{module_id: batch}`` and ``env_steps``
        ``{module_id: int32 scalar}``; no validation happens. For composing
        into larger compiled programs (``jax.vmap`` over seeds, a rollout and
        update in one ``jit``).
        """
        return self._update_fn

    def build_update(self, constrain_minibatch: Callable[[Batch], Batch] | None = None) -> UpdateFn:
        """A fresh pure update function for this learner's modules and options.

        Args:
          constrain_minibatch: applied to each epoch's ``[steps, minibatch,
            ...]`` blocks inside the update, e.g. a sharding constraint (the
            :class:`~jaxlearner.LearnerGroup` splits minibatches over devices
            this way).

        Returns:
          ``update(state, batch, env_steps) -> (state, metrics)``, un-jitted,
          as :attr:`update_fn`.
        """
        return make_update(
            self._specs,
            self._config,
            joint_loss=self._options["loss"],
            learner_updates=self._options["additional_updates"],
            constrain_minibatch=constrain_minibatch,
        )

    def init(self, key: jax.Array, sample_batch: Batch | None = None) -> LearnerState:
        """Initialises every module and records each module's batch layout.

        Args:
          key: a PRNG key (``jax.random.key(seed)``).
          sample_batch: a batch for every module (``{module_id: batch}``, or a
            plain batch for a single-module learner) with the shapes and
            dtypes later batches will have, leading axis ``[B, ...]``. May be
            left out when the learner knows its layout (built-in algorithms
            pass it): a one-row batch of zeros is used.

        Returns:
          The initial :class:`~jaxlearner.LearnerState`.

        Raises:
          KeyError: when a module has no sample batch.
          ValueError: when a model's example input cannot be found (see
            ``ModuleSpec.init_input``).

        Example:
          >>> state = learner.init(jax.random.key(0), sample_batch)  # doctest: +SKIP
        """
        key = _typed_key(key)
        if sample_batch is None:
            if self._layout is None:
                raise ValueError(
                    "init needs a sample batch: this learner does not know its batch layout."
                )
            sample_batch = {m: zeros_like_layout(self._layout[m]) for m in self._specs}
        batch = normalize_batch(sample_batch, self.module_ids)
        missing = [m for m in self._specs if m not in batch]
        if missing:
            raise ReadableKeyError(
                f"init needs a sample batch for every module; missing {missing} (modules: "
                f"{list(self._specs)})."
            )
        layout = {m: batch_layout(m, batch[m]) for m in self._specs}
        init_key, state_key = jax.random.split(key)
        inputs = find_init_inputs(self._specs, batch, init_key, self._options["loss"])
        modules = {
            m: init_module_state(m, spec, module_key(init_key, m), inputs[m])
            for m, spec in self._specs.items()
        }
        self._layout = layout
        return LearnerState(
            modules=modules,
            key=state_key,
            updates=zero_counter(),
            grad_steps=zero_counter(),
            skipped_steps=zero_counter(),
        )

    def update(
        self,
        state: LearnerState,
        batch: Batch,
        *,
        env_steps: int | Mapping[str, int] | None = None,
    ) -> tuple[LearnerState, dict[str, dict[str, jax.Array]]]:
        """One update: ``num_epochs`` x minibatches of gradient steps, then additional updates.

        Pure: ``state`` is not modified (unless ``donate_state``). Compiled
        once per batch shape; later calls with same-shaped batches reuse it.
        Returns without waiting for the device; metrics stay device arrays.

        Args:
          state: the current state.
          batch: ``{module_id: batch}`` (a subset of the modules), or a plain
            batch for a single-module learner. Checked against the layout
            recorded at ``init``.
          env_steps: env steps this batch accounts for (for ``env_steps``
            schedules and counters): one int for every module or one per
            module. Default: each module's batch size.

        Returns:
          ``(new_state, metrics)``; metrics are ``{module_id: {...},
          "__all__": {...}}``, scalar device arrays.

        Raises:
          KeyError: unknown module id or batch key.
          ValueError: wrong trailing shape, too few rows for a minibatch, a
            batch with no module to train, or a state from another learner.
          TypeError: wrong dtype or float64 data in 32-bit mode.

        Example:
          >>> state, metrics = learner.update(state, batch)          # doctest: +SKIP
          >>> float(metrics["policy"]["total_loss"])                  # doctest: +SKIP
        """
        batch, env_steps_by_module = self.validate(state, batch, env_steps)
        if self._options["jit"]:
            return self._jitted(state, batch, env_steps_by_module)
        with jax.disable_jit():
            return self._update_fn(state, batch, env_steps_by_module)

    def validate(
        self,
        state: Any,
        batch: Batch,
        env_steps: int | Mapping[str, int] | None = None,
        *,
        batch_size_multiple: int = 1,
    ) -> tuple[dict[str, Batch], dict[str, np.ndarray]]:
        """Checks a state and batch in Python, before anything is traced.

        Args:
          state: a state of this learner's modules.
          batch: a batch as :meth:`update` takes it.
          env_steps: as :meth:`update` takes it.
          batch_size_multiple: the factor by which the sizes seen here are
            multiplied to give the global batch (the number of processes, when
            each passes its own slice).

        Returns:
          ``(batch, env_steps)`` as the pure update function takes them:
          ``{module_id: batch}`` and ``{module_id: int32}``.

        Raises:
          KeyError, ValueError, TypeError: see :meth:`update`.
        """
        if self._layout is None:
            raise ValueError(
                "This learner has no batch layout yet: call learner.init(key, sample_batch) "
                "first, or build it with batch_layout=... (restoring a checkpoint does this)."
            )
        self.check_state(state)
        batch = normalize_batch(batch, self.module_ids)
        sizes = {
            m: validate_batch(m, batch[m], self._layout[m]) * batch_size_multiple for m in batch
        }
        if not any(m in self._trained for m in batch):
            raise ValueError(
                f"None of the batch's modules {sorted(batch)} is trained; modules_to_train is "
                f"{sorted(self._trained)}."
            )
        involved = (
            batch if self._options["loss"] is not None else [m for m in batch if m in self._trained]
        )
        for m in involved:
            minibatch_plan(sizes[m], self._config.minibatch_size, m)
        return batch, _env_steps(env_steps, sizes)

    def check_state(self, state: Any) -> None:
        """Raises a clear error when ``state`` does not belong to this learner's modules."""
        if not isinstance(state, LearnerState):
            raise TypeError(
                f"Expected a jl.LearnerState (from learner.init); got {type(state).__name__}."
            )
        if set(state.modules) != set(self._specs):
            raise ValueError(
                f"The state holds modules {sorted(state.modules)} but this learner has "
                f"{sorted(self._specs)}; after add_module/remove_module use the learner and "
                "state they return together."
            )

    def replace(self, **changes: Any) -> Learner:
        """A new learner with some constructor options changed (recompiles once).

        Example:
          >>> frozen = learner.replace(modules_to_train={"main"})  # doctest: +SKIP
        """
        unknown = sorted(set(changes) - set(self._options) - {"modules"})
        if unknown:
            raise TypeError(
                f"Learner.replace got unknown option(s) {unknown}; valid: "
                f"{sorted([*self._options, 'modules'])}."
            )
        modules = changes.pop("modules", self._specs)
        layout = self._layout
        if layout is not None:
            layout = {m: v for m, v in layout.items() if m in modules}
        return Learner(modules, batch_layout=layout, **{**self._options, **changes})

    def add_module(
        self,
        state: LearnerState,
        module_id: str,
        spec: ModuleSpec,
        sample_batch: Batch,
        *,
        params: Params | None = None,
        key: jax.Array | None = None,
        train: bool | None = None,
    ) -> tuple[Learner, LearnerState]:
        """Adds a module; returns the new learner and state.

        The other modules' params, optimizer states and counters carry over
        unchanged (the same arrays). The new learner compiles once.

        Args:
          state: the current state.
          module_id: the new module's id.
          spec: its spec.
          sample_batch: a batch for this module alone.
          params: start from these params (e.g. a league snapshot of another
            module's ``state.modules["main"].params``) instead of a fresh init.
          key: init key; by default one is split off the state's key.
          train: whether to train it; ``None`` follows ``modules_to_train``
            (a predicate is asked, a collection leaves it out, ``None`` trains it).

        Returns:
          ``(new_learner, new_state)``.

        Raises:
          ValueError: when ``module_id`` exists already.

        Example:
          >>> learner, state = learner.add_module(
          ...     state, "snapshot_1", spec, sample, params=state.modules["main"].params,
          ...     train=False)  # doctest: +SKIP
        """
        self.check_state(state)
        if not isinstance(module_id, str) or not module_id:
            raise ValueError(f"Module ids must be non-empty strings; got {module_id!r}.")
        if module_id in self._specs:
            raise ValueError(f"Module {module_id!r} exists already; modules: {list(self._specs)}.")
        if self._layout is None:
            raise ValueError("add_module needs an initialised learner: call init first.")
        if not isinstance(spec, ModuleSpec):
            raise TypeError(f"add_module needs a jl.ModuleSpec; got {type(spec).__name__}.")
        new_key = state.key
        if key is None:
            new_key, key = jax.random.split(state.key)
        key = _typed_key(key)
        layout = batch_layout(module_id, sample_batch)
        specs = {**self._specs, module_id: spec}
        joint = self._options["loss"]
        if params is None and spec.init_input is None and joint is not None:
            sample = {m: zeros_like_layout(self._layout[m]) for m in self._specs}
            sample[module_id] = sample_batch
            inputs = find_init_inputs(specs, sample, key, joint)
        else:
            inputs = find_init_inputs({module_id: spec}, {module_id: sample_batch}, key, None)
        module = init_module_state(
            module_id, spec, module_key(key, module_id), inputs[module_id], params=params
        )
        options = {**self._options, "modules_to_train": self._with_training(module_id, train)}
        learner = Learner(specs, batch_layout={**self._layout, module_id: layout}, **options)
        return learner, state.replace(modules={**state.modules, module_id: module}, key=new_key)

    def _with_training(self, module_id: str, train: bool | None) -> ModulesToTrain:
        rule = self._options["modules_to_train"]
        if train is None:
            return rule
        if callable(rule) and not isinstance(rule, Collection):
            return lambda m: train if m == module_id else rule(m)
        current = set(self._specs) if rule is None else set(rule)
        return current | {module_id} if train else current - {module_id}

    def remove_module(self, state: LearnerState, module_id: str) -> tuple[Learner, LearnerState]:
        """Removes a module; returns the new learner and state.

        The other modules carry over unchanged. Raises ``KeyError`` for an
        unknown id and ``ValueError`` for the last module.

        Example:
          >>> learner, state = learner.remove_module(state, "snapshot_1")  # doctest: +SKIP
        """
        self.check_state(state)
        if module_id not in self._specs:
            raise ReadableKeyError(f"No module {module_id!r}; modules: {list(self._specs)}.")
        if len(self._specs) == 1:
            raise ValueError(f"Cannot remove {module_id!r}: it is the learner's only module.")
        specs = {m: s for m, s in self._specs.items() if m != module_id}
        rule = self._options["modules_to_train"]
        if rule is not None and not callable(rule):
            rule = set(rule) - {module_id}
        learner = self.replace(modules=specs, modules_to_train=rule)
        modules = {m: s for m, s in state.modules.items() if m != module_id}
        return learner, state.replace(modules=modules)

    def __repr__(self) -> str:
        return (
            f"Learner(modules={list(self._specs)}, minibatch_size="
            f"{self._options['minibatch_size']}, num_epochs={self._options['num_epochs']}, "
            f"modules_to_train={sorted(self._trained)})"
        )


def _check_specs(modules: object, loss: object) -> dict[str, ModuleSpec]:
    if not isinstance(modules, Mapping) or not modules:
        raise TypeError(
            "Learner needs a non-empty mapping {module_id: jl.ModuleSpec}; got "
            f"{type(modules).__name__} {modules!r}."
        )
    specs = {}
    for module_id, spec in modules.items():
        if not isinstance(module_id, str) or not module_id:
            raise ValueError(f"Module ids must be non-empty strings; got {module_id!r}.")
        if not isinstance(spec, ModuleSpec):
            raise TypeError(
                f"Module {module_id!r}: expected a jl.ModuleSpec; got {type(spec).__name__}."
            )
        if spec.loss is None and loss is None:
            raise ValueError(
                f"Module {module_id!r} has no loss, and the learner has no joint loss; give "
                "ModuleSpec(loss=...) or Learner(loss=...)."
            )
        specs[module_id] = spec
    return specs


def _check_positive_int(name: str, value: object, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(
            f"Learner {name} must be a positive int{' or None' if allow_none else ''}; "
            f"got {value!r}."
        )


def _resolve_modules_to_train(rule: ModulesToTrain, module_ids: tuple[str, ...]) -> frozenset[str]:
    if rule is None:
        return frozenset(module_ids)
    if isinstance(rule, str):
        raise TypeError(
            f"modules_to_train must be None, a collection of ids or a predicate; got the string "
            f"{rule!r} (did you mean {{{rule!r}}}?)."
        )
    if isinstance(rule, Collection):
        unknown = sorted(set(rule) - set(module_ids))
        if unknown:
            raise ValueError(
                f"modules_to_train names unknown module(s) {unknown}; modules: {list(module_ids)}."
            )
        return frozenset(rule)
    if callable(rule):
        return frozenset(m for m in module_ids if rule(m))
    raise TypeError(
        "modules_to_train must be None, a collection of module ids or a predicate "
        f"module_id -> bool; got {type(rule).__name__} {rule!r}."
    )


def _check_layout_ids(layout: Mapping[str, Layout], module_ids: tuple[str, ...]) -> None:
    if set(layout) != set(module_ids):
        raise ValueError(
            f"batch_layout covers modules {sorted(layout)} but the learner has "
            f"{sorted(module_ids)}."
        )


def _typed_key(key: Any) -> jax.Array:
    if isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    if isinstance(key, jax.Array | np.ndarray) and key.dtype == np.uint32 and key.shape == (2,):
        return jax.random.wrap_key_data(key)
    raise TypeError(
        f"Expected a PRNG key such as jax.random.key(0); got {type(key).__name__} {key!r}."
    )


def _env_steps(
    env_steps: int | Mapping[str, int] | None, sizes: Mapping[str, int]
) -> dict[str, np.ndarray]:
    if env_steps is None:
        return {m: np.int32(n) for m, n in sizes.items()}
    if isinstance(env_steps, Mapping):
        missing = sorted(set(sizes) - set(env_steps))
        if missing:
            raise ReadableKeyError(f"env_steps has no entry for module(s) {missing}.")
        values = {m: env_steps[m] for m in sizes}
    else:
        values = dict.fromkeys(sizes, env_steps)
    for m, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ValueError(f"env_steps for {m!r} must be a non-negative int; got {value!r}.")
        if value > np.iinfo(np.int32).max:
            raise ValueError(f"env_steps for {m!r} is {value}, above the int32 counter's range.")
    return {m: np.int32(v) for m, v in values.items()}


def zeros_like_layout(layout: Layout, rows: int = 1) -> Batch:
    """A batch of zeros with ``layout``'s structure, trailing shapes and dtypes."""
    return jax.tree.map(lambda s: np.zeros((rows, *s.shape), s.dtype), layout)
