"""Learner: RLlib's multi-module learner as one frozen value with a pure, jitted update.

A :class:`Learner` is an immutable value: the module specs, one :class:`~jaxlearner.LearnerConfig`,
the batch layout and a :class:`~jaxlearner.Placement`; ``init``, ``update`` and checkpoint
restores leave it equal to before. Structural changes (:meth:`Learner.add_module`,
:meth:`Learner.remove_module`, :meth:`Learner.replace`, :meth:`Learner.on`) return a new
learner, which compiles once for the new structure; the state moves over unchanged. RLlib's
three stages of a step (:meth:`Learner.compute_gradients`, ``postprocess_gradients``,
``apply_gradients``; :mod:`jaxlearner.core.gradients`) and its ``additional_update``
(:mod:`jaxlearner.core.additional_update_stage`) are methods too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any, final

import jax
import numpy as np
from jax.sharding import Mesh

from jaxlearner.core.batch import Layout, env_steps_by_module, learner_layout
from jaxlearner.core.compiled import learner_functions
from jaxlearner.core.gradients import Gradients, GradientStages, StepMetrics
from jaxlearner.core.initialization import init_added_module, initial_state
from jaxlearner.core.learner_checks import LearnerInputs
from jaxlearner.core.learner_config import LearnerConfig
from jaxlearner.core.module_selection import ModuleSelection
from jaxlearner.core.module_spec import ModuleSpec, check_specs
from jaxlearner.core.placement import DevicesLike, Placement
from jaxlearner.core.state import LearnerState
from jaxlearner.core.update import UpdateFn
from jaxlearner.types import Batch, Experience, Params, PyTree

_VALUE_FIELDS = ("modules", "batch_layout", "placement")


@final
class Learner:
    """A multi-module learner with a pure, jitted ``update``; a frozen, hashable value.

    Args:
      modules: module id -> :class:`~jaxlearner.ModuleSpec`.
      config: a :class:`~jaxlearner.LearnerConfig`; or give its fields as keywords.
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

    __slots__ = ("_checks", "_config", "_functions", "_layout", "_placement", "_specs", "_trained")

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
        selection = ModuleSelection(config.modules_to_train, tuple(specs))
        set_(self, "_trained", selection.candidates)
        set_(self, "_functions", learner_functions(specs, config, self._trained, placement))
        set_(self, "_checks", LearnerInputs(specs, batch_layout, selection, config, placement))

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
        """Ids of the modules trained (with a ``(module_id, batch)`` predicate: it may pick)."""
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

        ``batch`` must be ``{module_id: batch}`` and ``env_steps`` ``{module_id: int32
        scalar}``; no validation happens. On a mesh, each epoch's minibatches are constrained
        to split over the ``"data"`` axis. For composing into larger compiled programs
        (``jax.vmap`` over seeds, a rollout and update in one ``jit``). It trains
        :attr:`modules_to_train`; a ``(module_id, batch)`` predicate is asked by
        :meth:`update` only (``jl.make_update(specs, config, trained)`` builds another set's).
        """
        return self._functions.update

    @property
    def gradient_stages(self) -> GradientStages:
        """The pure, un-jitted ``compute``, ``postprocess`` and ``apply`` of
        :meth:`compute_gradients`, :meth:`postprocess_gradients` and :meth:`apply_gradients`.

        No validation happens; ``batch`` is ``{module_id: batch}`` and ``env_steps``
        ``{module_id: int32}``. For composing into larger compiled programs, such as
        a data-parallel step under ``jax.shard_map``.
        """
        return self._functions.stages

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
        config, changes = self._config.changed(changes, _VALUE_FIELDS)
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
        state = initial_state(self._specs, self._layout, self._config, key, sample_batch)
        return self._placement.put(state)

    def update(
        self,
        state: LearnerState,
        batch: Batch,
        *,
        env_steps: int | Mapping[str, int] | None = None,
    ) -> tuple[LearnerState, dict[str, dict[str, jax.Array]]]:
        """One update: ``num_epochs`` x minibatches of gradient steps, then additional updates.

        Pure: ``state`` is not modified (unless ``donate_state``). Compiled once per batch
        shape and set of trained modules (a ``(module_id, batch)`` ``modules_to_train`` is
        asked here, on the host). Returns without waiting for the device; metrics stay there.

        Args:
          state: the current state (placed as the learner is: see :meth:`init`).
          batch: ``{module_id: batch}`` (a subset of the modules), or a plain
            batch for a single-module learner. On a mesh with several
            processes, each passes its own slice (the same number of rows on
            every process); the global batch is the slices in process order.
          env_steps: env steps this batch accounts for (for ``env_steps`` schedules and
            counters): one int, or one per module with the whole batch's as ``"__all__"``
            (default: the largest module's). Default: each module's global batch size.

        Returns:
          ``(new_state, metrics)``; metrics are ``{module_id: {...}, "__all__": {...}}``,
          device arrays (scalars unless ``reduce_fn`` or ``results_fn`` say otherwise).

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
        update, args = self._update_and_args(state, batch, env_steps)
        return update(*args)

    def compile_update(
        self, state: Any, batch: Batch, *, env_steps: int | Mapping[str, int] | None = None
    ) -> jax.stages.Compiled:
        """:meth:`update` compiled ahead of time for a state and batch of these shapes (arrays,
        or ``jax.ShapeDtypeStruct`` as :func:`jax.eval_shape` gives them; each process's
        slice, as for :meth:`update`), checked as :meth:`update` checks them. JAX keeps the
        program, so the first :meth:`update` on such inputs does not compile; thread-safe
        (the Trainer compiles on a thread while it collects its first rollout). Raises as
        :meth:`update` does, and ``ValueError`` for a learner built with ``jit=False``.

        Example:
          >>> shapes = jax.eval_shape(learner.init, jax.random.key(0))  # doctest: +SKIP
          >>> compiled = learner.compile_update(shapes, batch_shapes)   # doctest: +SKIP
        """
        if not self._config.jit:
            raise ValueError("This learner runs eagerly (jit=False); there is nothing to compile.")
        update, args = self._update_and_args(self._placement.shaped(state), batch, env_steps)
        return update.lower(*args).compile()

    def _update_and_args(self, state: Any, batch: Batch, env_steps: Any) -> tuple[Any, tuple]:
        batch, counted, trained = self._checks.batch_to_train(state, batch, env_steps)
        update = self._functions.for_modules(trained).compiled_update
        return update, (state, self._placement.global_batch(batch), counted)

    def compute_gradients(self, state: LearnerState, batch: Batch) -> tuple[Gradients, StepMetrics]:
        """RLlib's ``compute_gradients``: each trained module's gradient over the whole batch.

        Returns ``(grads, metrics)``: ``{module_id: grads}`` for the batch's trained modules,
        shaped like their params (each leaf its own optimizer's, before clipping), of the loss
        at ``state`` (not changed) on all of ``batch`` (as for :meth:`update`; its rows need
        not fill a minibatch), with no epochs, minibatches or shuffling; the losses get the
        ``ctx.key`` the first step of :meth:`update` would. The metrics are the step's
        (losses, ``grad_norm/NAME`` before clipping, ``hyperparams/NAME``;
        ``"__all__"/total_loss``). Jitted, compiled once per batch shape; raises as
        :meth:`update` does.

        Example:
          >>> grads, metrics = learner.compute_gradients(state, batch)   # doctest: +SKIP
          >>> grads = learner.postprocess_gradients(state, grads)       # doctest: +SKIP
          >>> state = learner.apply_gradients(state, grads, metrics=metrics)  # doctest: +SKIP
        """
        batch, _, trained = self._checks.batch_to_train(state, batch, minibatches=False)
        compute = self._functions.for_modules(trained).compiled_stages.compute
        return compute(state, self._placement.global_batch(batch))

    def postprocess_gradients(
        self, state: LearnerState, grads: Mapping[str, PyTree], *, metrics: Any = None
    ) -> Any:
        """RLlib's ``postprocess_gradients``: the postprocesses given, then each optimizer's
        ``grad_clip`` unless one replaces it; given :meth:`compute_gradients`'s ``metrics``,
        ``(grads, metrics)`` (the postprocesses' added), else ``grads``. Raises ``TypeError``,
        ``KeyError`` or ``ValueError`` (naming module and leaf) unless ``grads`` fit the params.

        Example:
          >>> clipped = learner.postprocess_gradients(state, grads)     # doctest: +SKIP
        """
        grads = self._checks.gradients(state, grads)
        return self._functions.compiled_stages.postprocess(state, grads, metrics)

    def apply_gradients(
        self,
        state: LearnerState,
        grads: Mapping[str, PyTree],
        *,
        metrics: Mapping[str, Mapping[str, Any]] | None = None,
        env_steps: int | Mapping[str, int] | None = None,
    ) -> LearnerState:
        """RLlib's ``apply_gradients``, with what :meth:`update` does around its steps.

        Steps each module's optimizers with ``grads`` (clipped already), learning
        rates and hyperparameters refreshed from the counters; counts the step
        and the update; runs the ``after="grad_step"`` and ``after="update"``
        additional updates and the learner's; advances the key. The three stages
        on a batch give the state :meth:`update` gives with ``num_epochs=1`` and
        one unshuffled minibatch (given its ``metrics`` and ``env_steps``), but for
        ``after="update_start"`` updates, which only :meth:`update` runs.

        ``state`` is the one the gradients were computed at (not changed, unless
        ``donate_state``); ``grads`` ``{module_id: grads}`` of trained modules, shaped like
        their params; ``metrics`` :meth:`compute_gradients`'s, for the additional updates (and
        ``skip_nonfinite``'s check of the loss; default none); ``env_steps`` the env steps to
        count for ``env_steps`` schedules and counters (one int for every module of
        ``grads``, or one per module; default 0). Raises as :meth:`postprocess_gradients`,
        or for a state from another learner (naming the module and optimizer).

        Example:
          >>> state = learner.apply_gradients(state, grads, env_steps=256)  # doctest: +SKIP
        """
        grads = self._checks.gradients(state, grads)
        counted = env_steps_by_module(env_steps, dict.fromkeys(grads, 0))
        return self._functions.compiled_stages.apply(state, grads, metrics, counted)

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
        return self._functions.observe(state, experiences)

    def additional_update(
        self, state: LearnerState, *, module_ids: Collection[str] | None = None, **values: Any
    ) -> LearnerState:
        """RLlib's ``additional_update``: the ``after="additional_update"`` updates of
        ``module_ids`` (default: all that have one), run on outside ``values`` (a sampled KL).

        Pure and jittable; checked in Python first (:mod:`~jaxlearner.core.additional_update_stage`
        lists the errors); compiled once per choice of modules and value names.

        Example:
          >>> state = learner.additional_update(state, module_ids=["policy"], sampled_kl=0.03)
          ... # doctest: +SKIP
        """
        self.check_state(state)
        return self._functions.additional_update(state, module_ids, values)

    def validate(
        self, state: Any, batch: Batch, env_steps: int | Mapping[str, int] | None = None
    ) -> tuple[dict[str, Batch], dict[str, np.ndarray]]:
        """Checks a state and batch in Python, before anything is traced (raising as
        :meth:`update`); returns ``(batch, env_steps)`` as the pure update function takes
        them: ``{module_id: batch}`` (this process's slices) and ``{module_id: int32}``."""
        return self._checks.batch(state, batch, env_steps)

    def check_state(self, state: Any) -> None:
        """Raises a clear error when ``state`` does not belong to this learner's modules and
        optimizers (another module set, other optimizer names, another optax transformation),
        naming the module and optimizer."""
        self._checks.state(state)

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
        self._checks.new_module(state, module_id, spec)
        specs, layout, loss = self._specs, self._layout, self._config.loss
        module, added, state_key = init_added_module(
            specs, layout, loss, module_id, spec, sample_batch, state.key, key, params
        )
        learner = self.replace(
            modules={**specs, module_id: spec},
            batch_layout=None if layout is None else {**layout, module_id: added},
            config=self._config.adding(module_id, train, self.module_ids),
        )
        new_state = state.replace(modules={**state.modules, module_id: module}, key=state_key)
        return learner, self._placement.put(new_state)

    def remove_module(self, state: LearnerState, module_id: str) -> tuple[Learner, LearnerState]:
        """Removes a module; returns the new learner and state.

        The other modules carry over unchanged. Raises ``KeyError`` for an
        unknown id and ``ValueError`` for the last module.

        Example:
          >>> learner, state = learner.remove_module(state, "snapshot_1")  # doctest: +SKIP
        """
        self._checks.removable(state, module_id)
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
