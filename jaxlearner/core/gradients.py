"""RLlib's three-stage gradient step, as pure functions: compute, postprocess, apply.

RLlib's ``Learner`` takes each minibatch step in three stages, and so does
:func:`~jaxlearner.make_update`'s ``lax.scan`` body:

1. **compute**: refresh the scheduled hyperparameters from the counters, call
   each trained module's loss (or the one joint loss) and differentiate it;
2. **postprocess**: the gradient postprocesses given, the modules' and the
   learner's (:mod:`jaxlearner.core.gradient_postprocess`), then each optimizer's
   clipping as its ``grad_clip_by`` says (the clipping of
   :func:`~jaxlearner.core.optimizer.transformation`, taken out of its chain)
   unless a postprocess replaces it;
3. **apply**: step each module's named optimizers (their learning rates
   refreshed from the counters), count the step, run the ``after="grad_step"``
   additional updates; with ``skip_nonfinite`` a step whose loss or gradients
   are not finite leaves the modules as they were.

:class:`GradientStep` holds what the stages need (specs, config, optimizers) and
does each on module states; it also closes an update (:meth:`GradientStep.finish`:
metrics reduced, env steps counted, ``after="update"`` and learner-level
additional updates, the key advanced). :func:`make_gradient_stages` exposes the
stages on their own, each over a whole batch, for gradient accumulation and
custom data-parallel steps: ``compute`` then ``postprocess`` then ``apply`` is
one update of one epoch of one minibatch.

A module's gradient is one tree shaped like its params: each leaf the gradient
its own optimizer follows (of the module's loss, of the optimizer's own term of
a per-optimizer loss, or of the joint loss).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeAlias, final

import jax
import jax.numpy as jnp
import optax

from jaxlearner.core.gradient_postprocess import GradientContext, Postprocesses
from jaxlearner.core.learner_config import LearnerConfig
from jaxlearner.core.loss_gradients import loss_gradients, refresh_hyperparams
from jaxlearner.core.metrics import ALL_MODULES, reduce_steps
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.optimizer import ModuleOptimizer
from jaxlearner.core.results import all_finite, count_and_reduce, report_nonfinite, trained_counts
from jaxlearner.core.shared_optimizer import SharedOptimizers
from jaxlearner.core.state import LearnerState, ModuleState, select_tree
from jaxlearner.types import Batch, PyTree

Gradients: TypeAlias = dict[str, PyTree]
"""``{module_id: grads}``, each shaped like the module's params."""

StepMetrics: TypeAlias = dict[str, dict[str, jax.Array]]
"""``{module_id: {name: scalar}, "__all__": {name: scalar}}``."""

ComputeFn: TypeAlias = Callable[[LearnerState, Mapping[str, Batch]], tuple[Gradients, StepMetrics]]
PostprocessFn: TypeAlias = Callable[..., Any]
ApplyFn: TypeAlias = Callable[..., LearnerState]


def update_keys(key: jax.Array, num_epochs: int) -> tuple[jax.Array, jax.Array]:
    """``(next state key, [num_epochs] epoch keys)`` of one update from the state's key."""
    next_key, update_key = jax.random.split(key)
    return next_key, jax.random.split(update_key, num_epochs)


def step_keys(epoch_key: jax.Array, num_steps: int) -> tuple[jax.Array, jax.Array]:
    """``(the key that permutes the epoch's rows, [num_steps] step keys)``."""
    blocks_key, steps_key = jax.random.split(epoch_key)
    return blocks_key, jax.random.split(steps_key, num_steps)


def first_step_key(key: jax.Array) -> jax.Array:
    """The key the first step of an update from a state with ``key`` gives its losses."""
    _, epoch_keys = update_keys(key, 1)
    _, keys = step_keys(epoch_keys[0], 1)
    return keys[0]


@final
@dataclasses.dataclass(frozen=True, eq=False)
class GradientStep:
    """A learner's gradient step in three stages, over module states; built once.

    The shared optimizers (:mod:`jaxlearner.core.shared_optimizer`) are checked
    against the modules when it is built.

    Attributes:
      specs: module id -> spec.
      config: the learner's configuration (its joint ``loss``, ``skip_nonfinite``,
        ``shared_optimizers`` and learner-level ``additional_updates`` are used here).
      to_train: the ids of the modules to train.

    Raises:
      ValueError: for shared optimizers that do not fit the modules, or whose
        modules ``to_train`` splits.
    """

    specs: Mapping[str, ModuleSpec]
    config: LearnerConfig
    to_train: frozenset[str]

    def __post_init__(self) -> None:
        self.shared.check_trained(self.to_train)
        _ = self.postprocesses  # built now: a learner with a postprocess that cannot be is refused

    @functools.cached_property
    def postprocesses(self) -> Postprocesses:
        """The modules' and the learner's gradient postprocesses, checked."""
        posts = {m: s.postprocess_gradients for m, s in self.specs.items()}
        return Postprocesses(
            {m: post for m, post in posts.items() if post is not None},
            self.config.postprocess_gradients,
            self.shared.owner,
        )

    @functools.cached_property
    def shared(self) -> SharedOptimizers:
        """The learner's shared optimizers, checked against its modules."""
        return SharedOptimizers(self.config.shared_optimizers, self.specs)

    @functools.cached_property
    def optimizers(self) -> dict[str, ModuleOptimizer]:
        """Each module's named optimizers composed once (one optax value each); for a
        module of a shared optimizer, its part of that one (gradient and norm only)."""
        return {
            m: self.shared.view(m)
            if m in self.shared.owner
            else ModuleOptimizer(spec.named_optimizers, spec.param_labels, m)
            for m, spec in self.specs.items()
        }

    def roles(self, batch: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(trained, involved)``: the batch's modules to train, and those the losses see."""
        module_ids = tuple(sorted(batch))
        trained = tuple(m for m in module_ids if m in self.to_train)
        return trained, module_ids if self.config.loss is not None else trained

    def compute(
        self, modules: Mapping[str, ModuleState], batch: Mapping[str, Batch], key: jax.Array
    ) -> tuple[Gradients, StepMetrics]:
        """Stage 1: each trained module's gradient and the step's metrics.

        Returns:
          ``(grads, metrics)``: ``grads[m]`` shaped like ``m``'s params;
          ``metrics[m]`` its ``total_loss`` (without a joint loss), what its loss
          returned, each optimizer's ``grad_norm/NAME`` (before clipping) and its
          ``hyperparams/NAME``; ``metrics["__all__"]`` the ``total_loss`` and what
          a joint loss returned.
        """
        trained, involved = self.roles(batch)
        current = {m: refresh_hyperparams(self.specs[m], modules[m]) for m in involved}
        names = {m: self.optimizers[m].names for m in trained}
        results, total, joint_metrics = loss_gradients(
            self.specs, current, batch, key, trained, self.config.loss, names
        )
        grads: Gradients = {}
        metrics: StepMetrics = {}
        for m in trained:
            loss, grads_by_optimizer, loss_metrics = results[m]
            params = current[m].params
            grads[m] = self.optimizers[m].gradient(grads_by_optimizer, params)
            metrics[m] = {
                **({} if loss is None else {"total_loss": loss}),
                **loss_metrics,
                **self.optimizers[m].grad_norms(grads[m], params),
                **{f"hyperparams/{k}": v for k, v in current[m].hyperparams.items()},
            }
        metrics[ALL_MODULES] = {
            "total_loss": total,
            **joint_metrics,
            **self.shared.grad_norms(grads),
        }
        return grads, metrics

    def postprocess(
        self,
        modules: Mapping[str, ModuleState],
        grads: Gradients,
        metrics: Mapping[str, Mapping[str, Any]],
    ) -> tuple[Gradients, StepMetrics]:
        """Stage 2: the gradient postprocesses, then each module's gradient clipped as each of
        its optimizers says (a shared optimizer's modules together) unless one replaces it.

        Returns ``(grads, metrics)``: ``metrics`` with the postprocesses' added."""
        posts = self.postprocesses
        if posts.any:
            contexts = {m: self._context(m, modules[m]) for m in grads}
            grads, metrics = posts.run(grads, contexts, metrics)
        clipped = self.shared.clip(grads) if posts.clips_shared else dict(grads)
        return {
            m: self.optimizers[m].clip(g, modules[m].params)
            if m not in self.shared.owner and posts.clips(m)
            else g
            for m, g in clipped.items()
        }, {owner: dict(values) for owner, values in metrics.items()}

    def _context(self, module_id: str, module: ModuleState) -> GradientContext:
        module = refresh_hyperparams(self.specs[module_id], module)
        labels = self.optimizers[module_id].labels(module.params)
        return GradientContext(
            module_id, module.params, labels, module.hyperparams, module.counters
        )

    def apply(
        self, state: LearnerState, grads: Gradients, metrics: Mapping[str, Mapping[str, Any]]
    ) -> tuple[LearnerState, StepMetrics]:
        """Stage 3: steps the optimizers of the modules in ``grads``; counts the step.

        ``metrics`` are the step's (from :meth:`compute`; may be empty): the
        ``after="grad_step"`` additional updates read them, with each
        optimizer's ``learning_rate/NAME`` added, and with ``skip_nonfinite`` a
        non-finite ``"__all__"/total_loss`` skips the step as non-finite
        gradients do.

        Returns:
          ``(state, metrics)``: the stepped state, and ``metrics`` with the
          learning rates.
        """
        step_metrics: StepMetrics = {}
        new_modules = {}
        shared_updates, shared_states, shared_rates = self.shared.step(
            grads,
            state.shared_opt_states,
            {m: state.modules[m].params for m in grads},
            {m: state.modules[m].counters for m in grads},
        )
        for m, module_grads in grads.items():
            spec = self.specs[m]
            module = refresh_hyperparams(spec, state.modules[m])
            if m in shared_updates:
                updates, opt_states, rates = shared_updates[m], module.opt_states, shared_rates[m]
            else:
                updates, opt_states, rates = self.optimizers[m].step(
                    module_grads, module.opt_states, module.params, module.counters
                )
            module = module.replace(
                params=optax.apply_updates(module.params, updates),
                opt_states=opt_states,
                grad_steps=module.grad_steps + 1,
            )
            step_metrics[m] = _with_rates(metrics.get(m, {}), rates)
            for additional in spec.updates_after("grad_step"):
                module = additional.fn(module, step_metrics[m])
            new_modules[m] = module
        all_rates = {k: v for rates in shared_rates.values() for k, v in rates.items()}
        step_metrics[ALL_MODULES] = {**metrics.get(ALL_MODULES, {}), **all_rates}
        skipped = state.skipped_steps
        if self.config.skip_nonfinite:  # static: the check costs nothing when it is off
            finite = all_finite(grads)
            if "total_loss" in step_metrics[ALL_MODULES]:
                finite = finite & jnp.isfinite(step_metrics[ALL_MODULES]["total_loss"])
            old = {m: state.modules[m] for m in grads}
            old_shared = {n: state.shared_opt_states[n] for n in shared_states}
            new_modules, shared_states = select_tree(
                finite, (new_modules, shared_states), (old, old_shared)
            )
            skipped = skipped + (~finite).astype(jnp.int32)
        state = state.replace(
            modules={**state.modules, **new_modules},
            grad_steps=state.grad_steps + 1,
            skipped_steps=skipped,
            shared_opt_states={**state.shared_opt_states, **shared_states},
        )
        return state, step_metrics

    def finish(
        self,
        state: LearnerState,
        stacked: Mapping[str, Mapping[str, jax.Array]],
        trained: tuple[str, ...],
        env_steps: Mapping[str, jax.Array],
        rows: Mapping[str, int] | None = None,
    ) -> tuple[LearnerState, StepMetrics]:
        """Closes an update: metrics, counters, per-update additional updates, the next key.

        Additional updates see each metric's declared reduction; the metrics
        returned are reduced as the config's ``reduce_fn`` says.

        Args:
          state: the state after the update's steps.
          stacked: the steps' metrics, ``{owner: {name: [steps]}}``.
          trained: the modules the steps trained.
          env_steps: ``{module_id: int32}``, the env steps the update counts.
          rows: ``{module_id: rows}`` of the update's batch, the agent steps it
            trained on; default none.

        Returns:
          ``(state, metrics)`` as :func:`~jaxlearner.make_update`'s update returns them.
        """
        next_key, _ = jax.random.split(state.key)
        counts = trained_counts(trained, env_steps, rows or {})
        state, metrics = count_and_reduce(self.specs, state, stacked, trained, counts)
        report_nonfinite(state, stacked, metrics, trained, self.config.skip_nonfinite)
        state = state.replace(key=next_key, updates=state.updates + 1)
        metrics[ALL_MODULES]["num_updates"] = state.updates
        for learner_update in self.config.additional_updates:
            state = learner_update(state, metrics)
        return state, reduce_steps(self.config.reduce_fn, stacked, metrics)


def _with_rates(metrics: Mapping[str, Any], rates: Mapping[str, jax.Array]) -> dict[str, Any]:
    """``metrics`` with the learning rates after the gradient norms, before the hyperparams."""
    head = {k: v for k, v in metrics.items() if not k.startswith("hyperparams/")}
    tail = {k: v for k, v in metrics.items() if k.startswith("hyperparams/")}
    return {**head, **rates, **tail}


@final
@dataclasses.dataclass(frozen=True)
class GradientStages:
    """RLlib's three stages as pure functions over a whole batch (no epochs, no minibatches).

    ``compute`` then ``postprocess`` then ``apply`` is one update of one epoch
    of one unshuffled minibatch: the same losses (the same ``ctx.key``), the
    same clipping, optimizer step, counters and additional updates.

    Attributes:
      compute: ``compute(state, batch) -> (grads, metrics)``. ``batch`` is
        ``{module_id: [B_m, ...]}``; ``grads`` is ``{module_id: grads}`` for the
        batch's trained modules, each shaped like the module's params, before
        clipping; ``metrics`` as :meth:`GradientStep.compute` gives them.
      postprocess: ``postprocess(state, grads) -> grads``: the gradient postprocesses given
        (:mod:`~jaxlearner.core.gradient_postprocess`), then the clipping each optimizer
        applies (``grad_clip``, ``grad_clip_by``) over its own params; ``postprocess(state,
        grads, metrics) -> (grads, metrics)`` returns ``compute``'s metrics with the
        postprocesses' added, for ``apply``.
      apply: ``apply(state, grads, metrics=None, env_steps=None) -> state``: the
        optimizer steps, counters (``grad_steps``, ``updates``; ``env_steps``,
        ``{module_id: int32}``, adds nothing by default), schedules, both kinds of
        additional updates (fed ``metrics``, ``compute``'s, when given) and the next key.

    Example:
      >>> stages = learner.gradient_stages                     # doctest: +SKIP
      >>> grads, metrics = stages.compute(state, {"policy": batch})  # doctest: +SKIP
      >>> state = stages.apply(state, stages.postprocess(state, grads), metrics)
      ... # doctest: +SKIP
    """

    compute: ComputeFn
    postprocess: PostprocessFn
    apply: ApplyFn

    def wrapped(
        self, wrap: Callable[[Callable[..., Any], bool], Callable[..., Any]], donate_state: bool
    ) -> GradientStages:
        """Each stage as ``wrap(stage, donate)`` (a ``jax.jit``); only ``apply`` may donate.

        Example:
          >>> jitted = stages.wrapped(lambda fn, donate: jax.jit(fn), False)  # doctest: +SKIP
        """
        return GradientStages(
            wrap(self.compute, False), wrap(self.postprocess, False), wrap(self.apply, donate_state)
        )


def make_gradient_stages(
    specs: Mapping[str, ModuleSpec],
    config: LearnerConfig,
    trained: Collection[str] | None = None,
) -> GradientStages:
    """Builds RLlib's three stages as pure functions, from the pieces the update scans.

    Args:
      specs: module id -> :class:`~jaxlearner.ModuleSpec`.
      config: the learner's :class:`~jaxlearner.LearnerConfig` (its epochs and
        minibatches play no part).
      trained: the ids of the modules to train; default ``config.trained(specs)``.

    Returns:
      A :class:`GradientStages`; wrap each function in ``jax.jit`` (the
      :class:`~jaxlearner.Learner`'s methods of the same names do, after checking
      their inputs in Python).

    Example:
      >>> stages = make_gradient_stages(learner.specs, learner.config)   # doctest: +SKIP
      >>> grads, metrics = jax.jit(stages.compute)(state, {"policy": batch})  # doctest: +SKIP
    """
    specs = dict(specs)
    to_train = config.trained(tuple(specs)) if trained is None else frozenset(trained)
    step = GradientStep(specs, config, to_train)

    def compute(state: LearnerState, batch: Mapping[str, Batch]) -> tuple[Gradients, StepMetrics]:
        return step.compute(state.modules, batch, first_step_key(state.key))

    def postprocess(
        state: LearnerState,
        grads: Mapping[str, PyTree],
        metrics: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Gradients | tuple[Gradients, StepMetrics]:
        processed, with_posts = step.postprocess(state.modules, dict(grads), metrics or {})
        return processed if metrics is None else (processed, with_posts)

    def apply(
        state: LearnerState,
        grads: Mapping[str, PyTree],
        metrics: Mapping[str, Mapping[str, Any]] | None = None,
        env_steps: Mapping[str, Any] | None = None,
    ) -> LearnerState:
        grads = {m: grads[m] for m in sorted(grads)}
        state, step_metrics = step.apply(state, grads, {} if metrics is None else metrics)
        stacked = jax.tree.map(lambda x: jnp.asarray(x)[None], step_metrics)
        counted = {m: (env_steps or {}).get(m, jnp.zeros((), jnp.int32)) for m in grads}
        state, _ = step.finish(state, stacked, tuple(grads), counted)
        return state

    return GradientStages(compute, postprocess, apply)
