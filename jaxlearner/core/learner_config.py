"""LearnerConfig: how a learner updates, as one typed, frozen, validated value.

Every field is static: it is part of the compiled update, and changing it
(``learner.replace(num_epochs=...)``) compiles the update anew, once.
Values that change during training (learning rates, coefficients) are not
here: they live in the state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np

from jaxlearner.core.context import JointLossFn
from jaxlearner.core.gradient_postprocess import GradientPostprocessLike, as_gradient_postprocess
from jaxlearner.core.metrics import ReduceFn, ResultsFn, check_reduce_fn
from jaxlearner.core.module_selection import (
    ModulesToTrain,
    freeze_rule,
    static_trained,
    with_module,
)
from jaxlearner.core.shared_optimizer import (
    SharedOptimizer,
    SharedOptimizerLike,
    check_shared_optimizers,
)
from jaxlearner.core.state import LearnerState

LearnerUpdateFn: TypeAlias = Callable[[LearnerState, Mapping[str, Any]], LearnerState]
"""A learner-level non-gradient update ``fn(state, metrics) -> state``."""


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """The static configuration of a :class:`~jaxlearner.Learner`'s update.

    Attributes:
      minibatch_size: rows per gradient step; ``None`` uses the whole batch as
        one minibatch. A batch of ``B`` rows gives ``ceil(B / minibatch_size)``
        minibatches per epoch, the last one completed with the epoch's first
        rows, so every row is trained on (see ``drop_last``). When modules'
        batches give different numbers of minibatches, every epoch takes the
        largest number and the smaller modules cycle through theirs (RLlib's
        cyclic iterator).
      num_epochs: passes over the batch per update.
      shuffle: permute the rows each epoch with the state's key; ``False``
        keeps the batch order.
      drop_last: leave the rows past the last full minibatch out of each
        epoch (``B // minibatch_size`` minibatches; with ``shuffle``, a
        different random subset each epoch; without it, the same last rows
        are never trained on) instead of wrapping around.
      modules_to_train: ``None`` (all), a collection of module ids, a
        predicate ``module_id -> bool`` (asked once), or RLlib's
        ``should_module_be_updated(module_id, batch) -> bool``, asked on the host
        before each update (see :mod:`jaxlearner.core.module_selection` for what it
        sees; each set it picks compiles once). Modules not trained keep their
        params, optimizer states and counters bit-identical.
      skip_nonfinite: on a minibatch step whose loss or gradients hold a
        NaN/Inf, keep every trained module's state as it was and count the
        step (``metrics["__all__"]["num_skipped_steps"]``). The env steps the
        batch accounts for are still counted: the environment moved on.
      jit: ``False`` runs the same update eagerly (loops in Python, losses on
        concrete arrays) so losses can be printed and stepped through.
      loss: an optional learner-level loss over all modules of a batch,
        ``loss(params, batch, ctx) -> (scalar, metrics)`` with mappings by
        module id (RLlib's ``compute_loss`` across modules); it replaces the
        modules' own losses.
      additional_updates: learner-level ``fn(state, metrics) -> state``, run at
        the end of every update.
      donate_state: donate the input state's buffers to the update
        (``donate_argnums=0``): less memory, but the input state may not be
        used afterwards.
      reduce_fn: how the update's per-minibatch-step metrics are reduced to
        the metrics it returns (RLlib's ``reduce_fn``): ``"default"``, each
        metric by its ``ModuleSpec.metric_reductions`` entry (the mean, the
        last value for learning rates and hyperparams); ``"mean"``, ``"sum"``,
        ``"min"``, ``"max"`` or ``"last"`` for every metric; ``None`` for
        none, the stacked ``[steps, ...]`` values (``steps = num_epochs x
        minibatches``); or a callable ``fn(stacked) -> metrics`` over
        ``{owner: {name: [steps, ...]}}``, traced inside the compiled update.
        The per-update values (counters, ``extra/...``, ``nonfinite``) are
        added to what it returns, and additional updates always see the
        default reductions. See :func:`~jaxlearner.core.metrics.reduce_steps`.
      shared_optimizers: optimizers over several modules' params (RLlib's
        ``register_optimizer(module_id=ALL_MODULES, ...)``), ``{name:
        jl.SharedOptimizer(optimizer, module_ids)}`` or ``{name: (optimizer,
        module_ids)}``: one optax state and one clip over all of their
        modules' gradients; their modules have no optimizer of their own (see
        :mod:`jaxlearner.core.shared_optimizer`). Not part of the hash.
      recipe: a JSON-serialisable description from which a registered builder
        rebuilds the learner (``{"algorithm": name, ...}``); built-in
        algorithms set it so a checkpoint can be restored without code. Not
        part of the hash.
      postprocess_gradients: RLlib's ``postprocess_gradients`` as a value: a pure
        ``fn({module_id: grads}, {module_id: ctx}) -> (grads, {owner: metrics})`` over the
        trained modules' gradients at every gradient step, after the modules' own
        postprocesses and before the optimizers' clipping, or a
        :class:`~jaxlearner.GradientPostprocess` (to run instead of every clipping, or to
        name it); see :mod:`jaxlearner.core.gradient_postprocess`.
      results_fn: RLlib's ``compile_results``: an optional pure ``fn(batch, metrics) ->
        {owner: {name: value}}`` traced at the end of every update, on the update's whole
        batch (``{module_id: [B, ...]}``) and its metrics; what it returns joins the
        metrics (a name already there is replaced), values of any shape (a histogram, a
        per-row statistic). See :func:`~jaxlearner.core.metrics.add_results`.

    Raises:
      TypeError, ValueError: on an invalid field, naming what was received
        and what is valid.

    Example:
      >>> config = LearnerConfig(minibatch_size=128, num_epochs=4)
      >>> sorted(config.trained(("policy", "target")))
      ['policy', 'target']
    """

    minibatch_size: int | None = None
    num_epochs: int = 1
    shuffle: bool = True
    modules_to_train: ModulesToTrain = None
    skip_nonfinite: bool = False
    jit: bool = True
    loss: JointLossFn | None = None
    additional_updates: Sequence[LearnerUpdateFn] = ()
    donate_state: bool = False
    drop_last: bool = False
    reduce_fn: ReduceFn | str | None = "default"
    shared_optimizers: Mapping[str, SharedOptimizerLike] = dataclasses.field(
        default_factory=dict, hash=False
    )
    recipe: Mapping[str, Any] | None = dataclasses.field(default=None, hash=False)
    postprocess_gradients: GradientPostprocessLike | None = None
    results_fn: ResultsFn | None = None

    def __post_init__(self) -> None:
        _check_positive_int("minibatch_size", self.minibatch_size, allow_none=True)
        _check_positive_int("num_epochs", self.num_epochs)
        for name in ("shuffle", "drop_last", "skip_nonfinite", "jit", "donate_state"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"Learner {name} must be a bool; got {getattr(self, name)!r}.")
        check_reduce_fn(self.reduce_fn)
        for name in ("loss", "results_fn"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"Learner {name} must be callable or None; got {value!r}.")
        postprocess = as_gradient_postprocess(self.postprocess_gradients, "Learner")
        object.__setattr__(self, "postprocess_gradients", postprocess)
        updates = tuple(self.additional_updates)
        for update in updates:
            if not callable(update):
                raise TypeError(f"Learner additional_updates must be callables; got {update!r}.")
        object.__setattr__(self, "additional_updates", updates)
        object.__setattr__(self, "modules_to_train", freeze_rule(self.modules_to_train))
        shared: dict[str, SharedOptimizer] = check_shared_optimizers(self.shared_optimizers)
        object.__setattr__(self, "shared_optimizers", shared)
        if self.recipe is not None:
            object.__setattr__(self, "recipe", dict(self.recipe))
        if self.minibatch_size is not None:
            object.__setattr__(self, "minibatch_size", int(self.minibatch_size))
        object.__setattr__(self, "num_epochs", int(self.num_epochs))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The names of the fields, in order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def of(cls, config: LearnerConfig | None, options: Mapping[str, Any]) -> LearnerConfig:
        """``config``, or one built from its fields given as keywords (not both).

        Raises:
          TypeError: for both, an unknown field (the valid ones are listed), or a
            ``config`` that is not a :class:`LearnerConfig`.
        """
        unknown = sorted(set(options) - set(cls.field_names()))
        if unknown:
            raise TypeError(
                f"Learner got unknown option(s) {unknown}; valid: {list(cls.field_names())} (or "
                "config=, sample_batch=, batch_layout=, devices=, mesh=, placement=)."
            )
        if config is None:
            return cls(**options)
        if options:
            raise TypeError("Pass config=LearnerConfig(...) or its fields as keywords, not both.")
        if not isinstance(config, LearnerConfig):
            raise TypeError(f"config must be a jl.LearnerConfig; got {type(config).__name__}.")
        return config

    def changed(
        self, changes: Mapping[str, Any], others: Sequence[str]
    ) -> tuple[LearnerConfig, dict[str, Any]]:
        """``changes`` split: this config with its fields (or ``config=``) changed, and the rest.

        Args:
          changes: a ``replace``'s keywords: fields of this config, ``config``, or ``others``.
          others: the names the caller takes itself (e.g. a learner's ``modules``).

        Raises:
          TypeError: for a name that is none of those, listing the valid ones.
        """
        fields = self.field_names()
        unknown = sorted(set(changes) - {*fields, *others, "config"})
        if unknown:
            raise TypeError(
                f"Learner.replace got unknown option(s) {unknown}; valid: "
                f"{[*others, 'config', *fields]}."
            )
        config = changes.get("config", self)
        own = {k: v for k, v in changes.items() if k in fields}
        rest = {k: v for k, v in changes.items() if k in others}
        return (dataclasses.replace(config, **own) if own else config), rest

    def trained(self, module_ids: Sequence[str]) -> frozenset[str]:
        """The ids among ``module_ids`` that get gradient steps (for a batch predicate, those
        that may: every module).

        Raises:
          ValueError: when ``modules_to_train`` names an unknown module, or its
            predicate raises.
          TypeError: when its predicate returns something else than a bool.
        """
        return static_trained(self.modules_to_train, module_ids)

    def adding(
        self, module_id: str, train: bool | None, module_ids: Sequence[str]
    ) -> LearnerConfig:
        """This config for a learner that gains ``module_id`` (trained or not).

        ``train=None`` follows the rule: a predicate is asked, a collection
        leaves the new module out, ``None`` trains it.
        """
        rule = with_module(self.modules_to_train, module_id, train, module_ids)
        if rule is self.modules_to_train:
            return self
        return dataclasses.replace(self, modules_to_train=rule)

    def removing(self, module_id: str) -> LearnerConfig:
        """This config for a learner that loses ``module_id``."""
        rule = self.modules_to_train
        if rule is None or callable(rule):
            return self
        return dataclasses.replace(self, modules_to_train=rule - {module_id})


def _check_positive_int(name: str, value: object, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(
            f"Learner {name} must be a positive int{' or None' if allow_none else ''}; "
            f"got {value!r}."
        )
