"""Learner: RLlib's multi-module learner as one frozen value with a pure, jitted update.

A :class:`Learner` is an immutable value: the module specs, one
:class:`~jaxlearner.LearnerConfig`, the batch layout and a
:class:`~jaxlearner.Placement`. Nothing changes it after construction;
``init``, ``update`` and checkpoint restores leave it equal to before.
Structural changes (:meth:`Learner.add_module`, :meth:`Learner.remove_module`,
:meth:`Learner.replace`, :meth:`Learner.on`) return a new learner, which
compiles once for the new structure; the state moves over unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, final

import jax
import numpy as np
from jax.sharding import Mesh

from jaxlearner.core.batch import (
    Layout,
    batch_sizes,
    env_steps_by_module,
    learner_layout,
    minibatch_plan,
    normalize_batch,
    zeros_like_layout,
)
from jaxlearner.core.batch import batch_layout as layout_of
from jaxlearner.core.initialization import (
    find_init_inputs,
    init_added_module,
    init_module_state,
    module_key,
    typed_key,
)
from jaxlearner.core.learner_config import LearnerConfig
from jaxlearner.core.module_spec import ModuleSpec, check_specs
from jaxlearner.core.observers import make_learner_observe
from jaxlearner.core.placement import DevicesLike, Placement
from jaxlearner.core.state import LearnerState, zero_counter
from jaxlearner.core.update import UpdateFn, make_update
from jaxlearner.errors import ReadableKeyError
from jaxlearner.types import Batch, Experience, Params

_CONFIG_FIELDS = LearnerConfig.field_names()
_VALUE_FIELDS = ("modules", "batch_layout", "placement")


@final
class Learner:
    """A multi-module learner with a pure, jitted ``update``; a frozen, hashable value.

    Args:
      modules: module id -> :class:`~jaxlearner.ModuleSpec`.
      config: a :class:`~jaxlearner.LearnerConfig`; or give its fields
        (``minibatch_size``, ``num_epochs``, ``shuffle``, ``modules_to_train``,
        ``skip_nonfinite``, ``jit``, ``loss``, ``additional_updates``,
        ``donate_state``, ``recipe``) as keywords.
      sample_batch: a batch with the shapes and dtypes later batches will have
        (``{module_id: batch}``, or a plain batch for one module); the learner
        keeps its layout and checks every batch against it in Python, before
        tracing. Built-in algorithms know their layout already.
      batch_layout: each module's layout instead of a sample batch (the
        checkpoint module and the built-in algorithms pass it).
      devices: where to run: ``None`` (the default device), ``"all"``, a count
        or a list of devices; see :class:`~jaxlearner.Placement`.
      mesh: a mesh with a ``"data"`` axis instead of ``devices``.
      placement: a :class:`~jaxlearner.Placement` instead of ``devices``/``mesh``.
      **options: the fields of :class:`~jaxlearner.LearnerConfig`.

    Without ``sample_batch`` or ``batch_layout`` the learner checks each batch
    on its own (module ids, leading sizes, float64, minibatch sizes) but not
    against earlier ones; a batch of another shape then compiles anew.

    Raises:
      TypeError, ValueError, KeyError: on an invalid configuration, naming what
        was received and what is valid.

    Example:
      >>> import flax.linen as nn, jax, numpy as np, optax, jaxlearner as jl
      >>> def loss(params, batch, ctx):
      ...     error = ctx.apply(params, batch["x"])[:, 0] - batch["y"]
      ...     return (error ** 2).mean(), {}
      >>> batch = {"x": np.ones((64, 3), np.float32), "y": np.zeros(64, np.float32)}
      >>> learner = jl.Learner({"policy": jl.ModuleSpec(nn.Dense(1), loss, optax.sgd(0.1))},
      ...                      minibatch_size=32, num_epochs=2, sample_batch=batch)
      >>> state = learner.init(jax.random.key(0))
      >>> state, metrics = learner.update(state, batch)
      >>> int(state.grad_steps)
      4
    """

    __slots__ = (
        "_config",
        "_jitted",
        "_layout",
        "_observe",
        "_placement",
        "_specs",
        "_trained",
        "_update_fn",
    )

    def __init__(
        self,
        modules: Mapping[str, ModuleSpec],
        *,
        config: LearnerConfig | None = None,
        sample_batch: Batch | None = None,
        batch_layout: Mapping[str, Layout] | None = None,
        devices: DevicesLike = None,
        mesh: Mesh | None = None,
        placement: Placement | None = None,
        **options: Any,
    ) -> None:
        config = LearnerConfig.of(config, options)
        placement = Placement.of(devices, mesh, placement=placement)
        specs = check_specs(modules, config.loss)
        batch_layout = learner_layout(sample_batch, batch_layout, tuple(specs))
        set_ = object.__setattr__
        set_(self, "_specs", specs)
        set_(self, "_config", config)
        set_(self, "_layout", batch_layout)
        set_(self, "_placement", placement)
        set_(self, "_trained", config.trained(tuple(specs)))
        update_fn = make_update(
            specs,
            config,
            self._trained,
            constrain_minibatch=None if placement.mesh is None else placement.constrain_minibatch,
        )
        set_(self, "_update_fn", update_fn)
        set_(self, "_jitted", placement.jit(update_fn, config.donate_state))
        observers = {m: spec.observers for m, spec in specs.items()}
        set_(self, "_observe", make_learner_observe(observers, placement, config.jit))

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(
            f"A jl.Learner is frozen; use learner.replace({name.lstrip('_')}=...) for a new one."
        )

    __delattr__ = __setattr__  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Learner):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in ("config", *_VALUE_FIELDS))

    def __hash__(self) -> int:
        return hash((self.module_ids, self._config, self._placement))

    @property
    def specs(self) -> dict[str, ModuleSpec]:
        """Module id -> spec (a copy)."""
        return dict(self._specs)

    modules = specs

    @property
    def module_ids(self) -> tuple[str, ...]:
        """The module ids, in insertion order."""
        return tuple(self._specs)

    @property
    def modules_to_train(self) -> frozenset[str]:
        """Ids of the modules that get gradient steps."""
        return self._trained

    @property
    def config(self) -> LearnerConfig:
        """The static update configuration."""
        return self._config

    @property
    def recipe(self) -> dict[str, Any] | None:
        """The JSON description a registered builder rebuilds this learner from, if any."""
        recipe = self._config.recipe
        return None if recipe is None else dict(recipe)

    @property
    def batch_layout(self) -> dict[str, Layout] | None:
        """Each module's batch layout (trailing shapes and dtypes), if known."""
        return None if self._layout is None else dict(self._layout)

    @property
    def placement(self) -> Placement:
        """Where the state and batches live (the default device, or a mesh)."""
        return self._placement

    @property
    def update_fn(self) -> UpdateFn:
        """The pure, un-jitted ``update(state, batch, env_steps) -> (state, metrics)``.

        ``batch`` must be ``{module_id: batch}`` and ``env_steps``
        ``{module_id: int32 scalar}``; no validation happens. On a mesh, each
        epoch's minibatches are constrained to split over the ``"data"`` axis.
        For composing into larger compiled programs (``jax.vmap`` over seeds,
        a replay sample and an update, a rollout and update in one ``jit``).
        """
        return self._update_fn

    def on(self, devices: DevicesLike = None, *, mesh: Mesh | None = None) -> Learner:
        """The same learner placed elsewhere (compiles once for the new placement).

        Example:
          >>> learner = learner.on("all")        # data-parallel over every device
          ... # doctest: +SKIP
          >>> state = learner.init(jax.random.key(0))  # replicated    # doctest: +SKIP
        """
        return self.replace(placement=Placement.of(devices, mesh))

    def replace(self, **changes: Any) -> Learner:
        """A new learner with some fields changed (recompiles once).

        Args:
          **changes: ``modules``, ``batch_layout``, ``placement``, ``config`` or
            any field of :class:`~jaxlearner.LearnerConfig`.

        Example:
          >>> frozen = learner.replace(modules_to_train={"main"})  # doctest: +SKIP
        """
        unknown = sorted(set(changes) - {*_CONFIG_FIELDS, *_VALUE_FIELDS, "config"})
        if unknown:
            raise TypeError(
                f"Learner.replace got unknown option(s) {unknown}; valid: "
                f"{[*_VALUE_FIELDS, 'config', *_CONFIG_FIELDS]}."
            )
        config = changes.pop("config", self._config)
        config_changes = {k: changes.pop(k) for k in _CONFIG_FIELDS if k in changes}
        if config_changes:
            config = dataclasses.replace(config, **config_changes)
        modules = changes.get("modules", self._specs)
        layout = changes.get("batch_layout", self._layout)
        if layout is not None and "batch_layout" not in changes:
            layout = {m: v for m, v in layout.items() if m in modules}
        return Learner(
            modules,
            config=config,
            batch_layout=layout,
            placement=changes.get("placement", self._placement),
        )

    def init(self, key: jax.Array, sample_batch: Batch | None = None) -> LearnerState:
        """Initialises every module; the learner itself is left as it was.

        Args:
          key: a PRNG key (``jax.random.key(seed)``).
          sample_batch: a batch for every module (``{module_id: batch}``, or a
            plain batch for a single-module learner), leading axis ``[B, ...]``,
            used to find the models' example inputs. May be left out when the
            learner knows its layout (a one-row batch of zeros is used); when
            it knows one, the sample must match it.

        Returns:
          The initial :class:`~jaxlearner.LearnerState`, placed as the learner
          is (replicated over its mesh, if it has one).

        Raises:
          KeyError: when a module has no sample batch.
          ValueError: when a model's example input cannot be found (see
            ``ModuleSpec.init_input``), or the sample differs from the layout.

        Example:
          >>> state = learner.init(jax.random.key(0))  # doctest: +SKIP
        """
        key = typed_key(key)
        if sample_batch is None:
            if self._layout is None:
                raise ValueError(
                    "init needs a sample batch: this learner does not know its batch layout "
                    "(build it with jl.Learner(..., sample_batch=batch) to give it one)."
                )
            batch = {m: zeros_like_layout(self._layout[m]) for m in self._specs}
        else:
            batch = normalize_batch(sample_batch, self.module_ids)
            if set(batch) != set(self._specs):
                raise ReadableKeyError(
                    f"init needs a sample batch for every module; missing "
                    f"{[m for m in self._specs if m not in batch]} (modules: {list(self._specs)})."
                )
            batch_sizes(batch, self._layout)
        init_key, state_key = jax.random.split(key)
        inputs = find_init_inputs(self._specs, batch, init_key, self._config.loss)
        modules = {
            m: init_module_state(m, spec, module_key(init_key, m), inputs[m])
            for m, spec in self._specs.items()
        }
        state = LearnerState(
            modules=modules,
            key=state_key,
            updates=zero_counter(),
            grad_steps=zero_counter(),
            skipped_steps=zero_counter(),
        )
        return self._placement.put(state)

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
          state: the current state (placed as the learner is: see :meth:`init`).
          batch: ``{module_id: batch}`` (a subset of the modules), or a plain
            batch for a single-module learner. On a mesh with several
            processes, each passes its own slice (the same number of rows on
            every process); the global batch is the slices in process order.
          env_steps: env steps this batch accounts for (for ``env_steps``
            schedules and counters): one int for every module or one per
            module. Default: each module's global batch size.

        Returns:
          ``(new_state, metrics)``; metrics are ``{module_id: {...},
          "__all__": {...}}``, scalar device arrays.

        Raises:
          KeyError: unknown module id or batch key.
          ValueError: wrong trailing shape, too few rows for a minibatch, a
            batch with no module to train, a state from another learner, or a
            batch or minibatch that does not split over the mesh's devices
            (the message lists sizes that would).
          TypeError: wrong dtype or float64 data in 32-bit mode.

        Example:
          >>> state, metrics = learner.update(state, batch)          # doctest: +SKIP
          >>> float(metrics["policy"]["total_loss"])                  # doctest: +SKIP
        """
        batch, env_steps_by_module = self.validate(state, batch, env_steps)
        batch = self._placement.global_batch(batch)
        if self._config.jit:
            return self._jitted(state, batch, env_steps_by_module)
        with jax.disable_jit():
            return self._update_fn(state, batch, env_steps_by_module)

    def observe(self, state: LearnerState, experiences: Mapping[str, Experience]) -> LearnerState:
        """Folds collected experience into the modules' observers (:class:`~jaxlearner.Observer`).

        Drivers call it once per collected batch, before postprocessing. Pure and jitted;
        only the observers' ``extra`` entries change, and without observers ``state`` itself
        comes back, with no device call.

        Args:
          state: the current state.
          experiences: ``{module_id: experience}``, each ``[T, N, ...]`` arrays with a
            ``[T, N]`` ``valid`` mask; on several processes, each passes its own envs.

        Raises:
          KeyError: for an unknown module id.

        Example:
          >>> state = learner.observe(state, {"default_policy": rollout.experience()})
          ... # doctest: +SKIP
        """
        self.check_state(state)
        return self._observe(state, experiences)

    def validate(
        self, state: Any, batch: Batch, env_steps: int | Mapping[str, int] | None = None
    ) -> tuple[dict[str, Batch], dict[str, np.ndarray]]:
        """Checks a state and batch in Python, before anything is traced.

        Returns:
          ``(batch, env_steps)`` as the pure update function takes them:
          ``{module_id: batch}`` (this process's slices) and ``{module_id: int32}``.

        Raises:
          KeyError, ValueError, TypeError: see :meth:`update`.
        """
        self.check_state(state)
        batch = normalize_batch(batch, self.module_ids)
        processes = 1 if self._placement.mesh is None else jax.process_count()
        sizes = {m: size * processes for m, size in batch_sizes(batch, self._layout).items()}
        if not any(m in self._trained for m in batch):
            raise ValueError(
                f"None of the batch's modules {sorted(batch)} is trained; modules_to_train is "
                f"{sorted(self._trained)}."
            )
        joint = self._config.loss is not None
        for m in batch if joint else [m for m in batch if m in self._trained]:
            minibatch_plan(sizes[m], self._config.minibatch_size, m)
        for m, size in sizes.items():
            self._placement.check_split(m, size, self._config.minibatch_size)
        return batch, env_steps_by_module(env_steps, sizes)

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
        if not isinstance(spec, ModuleSpec):
            raise TypeError(f"add_module needs a jl.ModuleSpec; got {type(spec).__name__}.")
        new_key = state.key
        if key is None:
            new_key, key = jax.random.split(state.key)
        layout = layout_of(module_id, sample_batch)
        module = init_added_module(
            self._specs,
            self._layout,
            self._config.loss,
            module_id,
            spec,
            sample_batch,
            typed_key(key),
            params,
        )
        learner = self.replace(
            modules={**self._specs, module_id: spec},
            batch_layout=None if self._layout is None else {**self._layout, module_id: layout},
            config=self._config.adding(module_id, train, self.module_ids),
        )
        new_state = state.replace(modules={**state.modules, module_id: module}, key=new_key)
        return learner, self._placement.put(new_state)

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
        learner = self.replace(modules=specs, config=self._config.removing(module_id))
        modules = {m: s for m, s in state.modules.items() if m != module_id}
        return learner, state.replace(modules=modules)

    def __repr__(self) -> str:
        return (
            f"Learner(modules={list(self._specs)}, minibatch_size="
            f"{self._config.minibatch_size}, num_epochs={self._config.num_epochs}, "
            f"modules_to_train={sorted(self._trained)}, {self._placement!r})"
        )
