"""ModuleSpec: everything the learner needs to know about one module, as a value."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxlearner.core.additional_updates import AdditionalUpdate, as_additional_update
from jaxlearner.core.context import LossFn
from jaxlearner.core.gradient_postprocess import GradientPostprocessLike, as_gradient_postprocess
from jaxlearner.core.observers import Observer, check_observers
from jaxlearner.core.optimizer import DEFAULT_OPTIMIZER, Optimizer, OptimizerLike, as_optimizer
from jaxlearner.core.schedules import ScheduleLike, as_schedule
from jaxlearner.types import REDUCTIONS, Batch, Model, Params, PyTree, Reduction


@dataclasses.dataclass(frozen=True)
class ModuleSpec:
    """One trainable module: its model, loss, optimizers and non-gradient updates.

    Attributes:
      model: a ``flax.linen.Module`` (anything with ``init``/``apply``).
      loss: ``loss(params, batch, ctx) -> (loss, metrics)``, pure (see
        :class:`~jaxlearner.core.context.LossFn`). May be ``None`` only when the
        learner has a joint loss.
      optimizer: the module's single optimizer, registered as ``"default"``:
        a built optax transformation or a :class:`~jaxlearner.Optimizer`.
      optimizers: several named optimizers instead, ``{name: optimizer}``;
        each updates the params labelled with its name (see ``param_labels``).
        With neither, the module must be in one of the learner's
        ``shared_optimizers`` (:class:`~jaxlearner.SharedOptimizer`), which the
        learner checks when it is built.
      param_labels: ``params -> tree of optimizer names`` (optax's
        ``partition`` labels). Default: a param belongs to the optimizer named
        by the first key on its path that names one (submodules ``actor``
        and ``critic`` go with optimizers ``actor`` and ``critic``).
      hyperparams: the module's coefficients, ``{name: constant or schedule}``,
        e.g. ``{"entropy_coeff": [[0, 0.01], [100_000, 0.0]]}``. Their
        current values are float32 leaves of the state, read by the loss as
        ``ctx.hyperparams[name]``.
      init_input: ``sample_batch -> model inputs`` (an array or a tuple of
        positional inputs) used to initialise the model. Default: the inputs
        of the loss's first ``ctx.apply`` call on the sample batch.
      init_extra: ``params -> {name: pytree}``, the module's initial ``extra``
        (non-gradient) state.
      additional_updates: non-gradient updates run inside the update, each a
        :class:`~jaxlearner.AdditionalUpdate` or a plain callable
        ``(module_state, metrics) -> module_state`` (run once per update).
      metric_reductions: how a metric the loss returns is reduced over the
        minibatch steps of an update, ``{name: "mean" | "sum" | "min" |
        "max" | "last"}``; unlisted metrics use the mean.
      observers: state that learns from collected experience, each a
        :class:`~jaxlearner.Observer` whose state is ``extra[observer.name]``;
        drivers fold every collected batch into it with
        :meth:`~jaxlearner.Learner.observe` (see :mod:`jaxlearner.core.observers`).
      postprocess_gradients: RLlib's ``postprocess_gradients_for_module`` as a value: a
        pure ``fn(grads, ctx) -> (grads, metrics)`` run on the module's gradients at every
        gradient step, before its optimizers' clipping, or a
        :class:`~jaxlearner.GradientPostprocess` (to run instead of the clipping, or to name
        it); its metrics join the module's (see :mod:`jaxlearner.core.gradient_postprocess`).

    Example:
      >>> import flax.linen as nn, optax, jaxlearner as jl
      >>> def loss(params, batch, ctx):
      ...     prediction = ctx.apply(params, batch["x"])[:, 0]
      ...     mse = ((prediction - batch["y"]) ** 2).mean()
      ...     return mse, {"mse": mse}
      >>> spec = jl.ModuleSpec(nn.Dense(1), loss, optax.adam(1e-3))
    """

    model: Model
    loss: LossFn | None = None
    optimizer: OptimizerLike | None = None
    optimizers: Mapping[str, OptimizerLike] | None = None
    param_labels: Callable[[Params], PyTree] | None = None
    hyperparams: Mapping[str, ScheduleLike] = dataclasses.field(default_factory=dict)
    init_input: Callable[[Batch], Any] | None = None
    init_extra: Callable[[Params], Mapping[str, PyTree]] | None = None
    additional_updates: Sequence[AdditionalUpdate | Callable[..., Any]] = ()
    metric_reductions: Mapping[str, Reduction] = dataclasses.field(default_factory=dict)
    observers: Sequence[Observer] = ()
    postprocess_gradients: GradientPostprocessLike | None = None

    def __post_init__(self) -> None:
        if not (
            callable(getattr(self.model, "init", None))
            and callable(getattr(self.model, "apply", None))
        ):
            raise TypeError(
                "ModuleSpec.model must have init(key, *inputs) and apply(params, *inputs), "
                f"like a flax.linen.Module; got {type(self.model).__name__}."
            )
        if self.loss is not None and not callable(self.loss):
            raise TypeError(f"ModuleSpec.loss must be callable; got {self.loss!r}.")
        object.__setattr__(self, "optimizers", self._named_optimizers())
        object.__setattr__(self, "optimizer", None)
        for name in ("param_labels", "init_input", "init_extra"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"ModuleSpec.{name} must be callable or None; got {value!r}.")
        object.__setattr__(
            self,
            "additional_updates",
            tuple(as_additional_update(u) for u in self.additional_updates),
        )
        hyperparams = {}
        for update in self.additional_updates:
            hyperparams.update(update.hyperparams)
        hyperparams.update(self.hyperparams)
        for name, value in hyperparams.items():
            if not isinstance(name, str):
                raise TypeError(f"Hyperparameter names must be strings; got {name!r}.")
            as_schedule(value, name)  # raises on a malformed schedule
        object.__setattr__(self, "hyperparams", hyperparams)
        reductions = dict(self.metric_reductions)
        for name, reduction in reductions.items():
            if reduction not in REDUCTIONS:
                raise ValueError(
                    f"metric_reductions[{name!r}] is {reduction!r}; valid reductions: {REDUCTIONS}."
                )
        object.__setattr__(self, "metric_reductions", reductions)
        object.__setattr__(self, "observers", check_observers(self.observers))
        postprocess = as_gradient_postprocess(self.postprocess_gradients, "ModuleSpec")
        object.__setattr__(self, "postprocess_gradients", postprocess)

    def _named_optimizers(self) -> dict[str, Optimizer]:
        if self.optimizer is not None and self.optimizers is not None:
            raise ValueError(
                "ModuleSpec takes one of optimizer=... (e.g. optax.adam(3e-4)) or "
                "optimizers={'actor': ..., 'critic': ...}; got both."
            )
        if self.optimizer is None and self.optimizers is None:
            return {}
        if self.optimizer is not None:
            return {DEFAULT_OPTIMIZER: as_optimizer(self.optimizer, DEFAULT_OPTIMIZER)}
        if not isinstance(self.optimizers, Mapping) or not self.optimizers:
            raise ValueError(
                "ModuleSpec.optimizers must be a non-empty mapping {name: optimizer}; got "
                f"{self.optimizers!r}."
            )
        named = {}
        for name, optimizer in self.optimizers.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"Optimizer names must be non-empty strings; got {name!r}.")
            named[name] = as_optimizer(optimizer, name)
        return named

    @property
    def named_optimizers(self) -> dict[str, Optimizer]:
        """The module's optimizers by name (``{"default": ...}`` for a single one; ``{}``
        for a module of a shared optimizer)."""
        return dict(self.optimizers or {})

    def updates_after(self, when: str) -> tuple[AdditionalUpdate, ...]:
        """The additional updates that run after each ``"grad_step"`` or ``"update"``."""
        return tuple(u for u in self.additional_updates if u.after == when)


def check_specs(modules: object, loss: object) -> dict[str, ModuleSpec]:
    """A learner's ``{module_id: ModuleSpec}``, checked; ``loss`` is its joint loss, if any.

    Raises:
      TypeError, ValueError: naming the module and what is wrong.
    """
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
