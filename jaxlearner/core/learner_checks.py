"""A learner's inputs checked in Python, before anything is traced: states, batches, gradients.

Each check names what it received, what it expected and the valid options, so a
wrong input is one clear error rather than a failure deep inside a trace: a state
from a learner with other optimizers is refused naming the module and the
optimizer (it used to fail inside optax, or run on with the wrong optimizer
state); gradients that do not fit the params are refused naming the leaf.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import jax
import numpy as np

from jaxlearner.core.batch import batch_sizes, env_steps_by_module, minibatch_plan, normalize_batch
from jaxlearner.core.gradient_postprocess import check_like_params
from jaxlearner.core.learner_config import LearnerConfig
from jaxlearner.core.module_selection import ModuleSelection
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.optimizer import ModuleOptimizer, Optimizer
from jaxlearner.core.placement import Placement
from jaxlearner.core.state import LearnerState, ModuleState
from jaxlearner.errors import ReadableKeyError
from jaxlearner.types import Batch, PyTree


@final
class LearnerInputs:
    """Checks a learner's states, batches and gradients in Python, before anything is traced.

    Each module's expected optimizer-state structure is found once per params
    structure, with ``jax.eval_shape`` (no computation), and kept; a state whose
    params and optimizer states have a structure checked before passes at the
    cost of one flatten per module.

    Args:
      specs: the learner's module specs.
      layout: their batch layouts, or ``None``.
      selection: which modules each batch trains (``modules_to_train`` resolved).
      config: the learner's configuration (minibatch size, joint loss).
      placement: where the learner runs (each batch must split over its devices).

    Example:
      >>> selection = ModuleSelection(learner.config.modules_to_train, learner.module_ids)
      ... # doctest: +SKIP
      >>> inputs = LearnerInputs(learner.specs, learner.batch_layout,
      ...                        selection, learner.config, learner.placement)
      ... # doctest: +SKIP
      >>> batch, env_steps = inputs.batch(state, batch)              # doctest: +SKIP
    """

    def __init__(
        self,
        specs: Mapping[str, ModuleSpec],
        layout: Mapping[str, Any] | None,
        selection: ModuleSelection,
        config: LearnerConfig,
        placement: Placement,
    ) -> None:
        self._specs = dict(specs)
        self._layout = layout
        self._selection = selection
        self._trained = selection.candidates
        self._config = config
        self._placement = placement
        self._optimizers = {
            m: ModuleOptimizer(spec.named_optimizers, spec.param_labels, m)
            for m, spec in self._specs.items()
        }
        self._expected: dict[tuple[str, Any], dict[str, tuple[Any, Any]]] = {}
        self._fitting: set[tuple[str, Any]] = set()

    def state(self, state: Any) -> None:
        """Raises a clear error when ``state`` does not belong to these modules and optimizers.

        Raises:
          TypeError: when ``state`` is no :class:`~jaxlearner.LearnerState`.
          ValueError: when it holds other modules, other optimizer names, or an
            optimizer state of another structure (another optax transformation),
            naming the module and the optimizer.
        """
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
        for m, module in state.modules.items():
            self._check_optimizers(m, module)
        shared = sorted(self._config.shared_optimizers)
        if sorted(state.shared_opt_states) != shared:
            raise ValueError(
                f"The state holds shared optimizer state(s) for {sorted(state.shared_opt_states)}"
                f", but this learner's shared optimizers are {shared}: the state comes from a "
                "learner with other shared_optimizers. Use the learner that made it."
            )

    def batch(
        self,
        state: Any,
        batch: Batch,
        env_steps: int | Mapping[str, int] | None = None,
        minibatches: bool = True,
    ) -> tuple[dict[str, Batch], dict[str, np.ndarray]]:
        """The state checked, and the batch and env steps as the pure functions take them.

        Args:
          state: the state the batch goes with.
          batch: ``{module_id: batch}`` or, for one module, a plain batch; lists of
            numbers become arrays (:func:`~jaxlearner.core.batch.normalize_batch`).
          env_steps: as :meth:`~jaxlearner.Learner.update` takes it.
          minibatches: check the minibatch sizes too (``update``); ``False`` for
            one step over the whole batch (``compute_gradients``).

        Returns:
          ``({module_id: batch}, {module_id: int32 env steps})``, this process's slices.

        Raises:
          KeyError, ValueError, TypeError: as :meth:`~jaxlearner.Learner.update` lists.
        """
        batch, env_steps, _ = self.batch_to_train(state, batch, env_steps, minibatches)
        return batch, env_steps

    def batch_to_train(
        self,
        state: Any,
        batch: Batch,
        env_steps: int | Mapping[str, int] | None = None,
        minibatches: bool = True,
    ) -> tuple[dict[str, Batch], dict[str, np.ndarray], frozenset[str]]:
        """As :meth:`batch`, with the modules this batch trains (``modules_to_train`` asked
        on the host when it is a batch predicate), which the other checks then use."""
        self.state(state)
        batch = normalize_batch(batch, tuple(self._specs))
        trained = self._selection.select(batch)
        processes = 1 if self._placement.mesh is None else jax.process_count()
        sizes = {m: size * processes for m, size in batch_sizes(batch, self._layout).items()}
        if not any(m in trained for m in batch):
            why = (
                "the modules_to_train predicate (module_id, batch) chose none of them"
                if self._selection.per_batch
                else f"modules_to_train is {sorted(self._trained)}"
            )
            raise ValueError(f"None of the batch's modules {sorted(batch)} is trained; {why}.")
        minibatch_size = self._config.minibatch_size if minibatches else None
        if minibatches:
            joint = self._config.loss is not None
            for m in batch if joint else [m for m in batch if m in trained]:
                minibatch_plan(sizes[m], minibatch_size, m)
        for m, size in sizes.items():
            self._placement.check_split(m, size, minibatch_size)
        return batch, env_steps_by_module(env_steps, sizes), trained

    def gradients(self, state: Any, grads: Any) -> dict[str, PyTree]:
        """The state checked, and ``grads`` as ``{trained module: params-shaped tree}``.

        Raises:
          TypeError: when ``grads`` is no mapping.
          KeyError: for a module id the learner does not have.
          ValueError: for no module, a module not trained, or a tree whose leaves or
            shapes differ from the module's params (the leaf is named).
        """
        self.state(state)
        if not isinstance(grads, Mapping):
            raise TypeError(
                "Gradients must be {module_id: grads}, as learner.compute_gradients returns "
                f"them; got {type(grads).__name__}."
            )
        if not grads:
            raise ValueError(
                f"Got no gradients; expected some of the trained modules {sorted(self._trained)}."
            )
        for m, tree in grads.items():
            if m not in self._specs:
                raise ReadableKeyError(
                    f"Gradients for unknown module {m!r}; the learner's modules are "
                    f"{list(self._specs)}."
                )
            if m not in self._trained:
                raise ValueError(
                    f"Gradients for module {m!r}, which is not trained; modules_to_train is "
                    f"{sorted(self._trained)}."
                )
            check_like_params(f"Module {m!r}", tree, state.modules[m].params)
        return dict(grads)

    def new_module(self, state: Any, module_id: Any, spec: Any) -> None:
        """The state checked, and ``module_id`` and ``spec`` checked for ``add_module``.

        Raises:
          ValueError: for an id that is no non-empty string or exists already.
          TypeError: for a spec that is no :class:`~jaxlearner.ModuleSpec`.
        """
        self.state(state)
        if not isinstance(module_id, str) or not module_id:
            raise ValueError(f"Module ids must be non-empty strings; got {module_id!r}.")
        if module_id in self._specs:
            raise ValueError(f"Module {module_id!r} exists already; modules: {list(self._specs)}.")
        if not isinstance(spec, ModuleSpec):
            raise TypeError(f"add_module needs a jl.ModuleSpec; got {type(spec).__name__}.")

    def removable(self, state: Any, module_id: Any) -> None:
        """The state checked, and ``module_id`` checked for ``remove_module``.

        Raises:
          KeyError: for an unknown id.
          ValueError: for the learner's only module.
        """
        self.state(state)
        if module_id not in self._specs:
            raise ReadableKeyError(f"No module {module_id!r}; modules: {list(self._specs)}.")
        if len(self._specs) == 1:
            raise ValueError(f"Cannot remove {module_id!r}: it is the learner's only module.")

    def _check_optimizers(self, module_id: str, module: ModuleState) -> None:
        seen = (module_id, jax.tree.structure((module.params, module.opt_states)))
        if seen in self._fitting:  # one flatten per module and call, once checked
            return
        names = self._optimizers[module_id].names
        if not isinstance(module.opt_states, Mapping) or set(module.opt_states) != set(names):
            held = sorted(module.opt_states) if isinstance(module.opt_states, Mapping) else "none"
            raise ValueError(
                f"Module {module_id!r}: the state holds optimizer state(s) for {held}, but this "
                f"learner's module has the optimizer(s) {sorted(names)}: the state comes from a "
                "learner with other optimizers. Use the learner that made it, or a state from "
                "this learner's init."
            )
        key = (module_id, jax.tree.structure(module.params))
        if key not in self._expected:
            shapes = jax.eval_shape(self._optimizers[module_id].init, module.params)
            self._expected[key] = {n: (jax.tree.structure(s), s) for n, s in shapes.items()}
        for name, (structure, expected) in self._expected[key].items():
            held = module.opt_states[name]
            if jax.tree.structure(held) != structure:
                optimizer = self._optimizers[module_id].optimizers[name]
                raise ValueError(
                    f"Module {module_id!r}, optimizer {name!r}: the state holds an optimizer "
                    f"state of the form {describe_opt_state(held)}, but this learner's "
                    f"optimizer {name!r} ({describe_optimizer(optimizer)}) keeps "
                    f"{describe_opt_state(expected)}: the state comes from a learner with other "
                    "optimizers. Use the learner that made it, or a state from this learner's "
                    "init."
                )
        self._fitting.add(seen)


def describe_optimizer(optimizer: Optimizer) -> str:
    """A few words for an optimizer: its factory's name (or that it was built), its clipping.

    Example:
      >>> import optax, jaxlearner as jl
      >>> describe_optimizer(jl.Optimizer(optax.adam, learning_rate=1e-3, grad_clip=0.5))
      'adam, clipped by global_norm at 0.5'
    """
    if optimizer.is_factory:
        what = getattr(optimizer.transform, "__name__", type(optimizer.transform).__name__)
    else:
        what = "a built optax transformation"
    if optimizer.grad_clip is not None:
        what += f", clipped by {optimizer.grad_clip_by} at {optimizer.grad_clip}"
    return what


def describe_opt_state(node: Any) -> str:
    """The optax state classes in an optimizer state, nested as they are, without arrays.

    Example:
      >>> import optax
      >>> describe_opt_state(optax.adam(1e-3).init({"w": jax.numpy.zeros(2)}))
      '(ScaleByAdamState, EmptyState)'
    """
    if hasattr(node, "_fields"):  # optax states are NamedTuples
        inner = [text for text in (describe_opt_state(v) for v in node) if text]
        name = type(node).__name__
        return f"{name}({', '.join(inner)})" if inner else name
    if isinstance(node, Mapping):
        inner = [f"{k}: {text}" for k, v in node.items() if (text := describe_opt_state(v))]
        return f"{{{', '.join(inner)}}}" if inner else ""
    if isinstance(node, tuple | list):
        inner = [text for text in (describe_opt_state(v) for v in node) if text]
        return f"({', '.join(inner)})" if inner else ""
    return ""
