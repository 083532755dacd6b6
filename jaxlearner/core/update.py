"""The pure update: epochs x minibatches of gradient steps, then non-gradient updates.

:func:`make_update` builds ``update(state, batch, env_steps) -> (state,
metrics)`` from module specs and a :class:`~jaxlearner.LearnerConfig`. It is a pure
function, meant to be wrapped in a single ``jax.jit`` at the outermost level
(the :class:`~jaxlearner.Learner` does that, with its placement's shardings); the loops inside are
``lax.scan``s, so one update is one compiled XLA program whatever the number of
epochs and minibatches.

One update, for the modules present in the batch:

1. split the state's key; one key per epoch;
2. per epoch, permute each module's rows and cut them into minibatches
   (``[steps, minibatch_size, ...]`` blocks);
3. per minibatch step: refresh scheduled hyperparameters from the counters,
   compute each trained module's loss and gradients (or one joint loss), clip
   and apply each named optimizer, run ``after="grad_step"`` additional
   updates; with ``skip_nonfinite`` a step whose loss or gradients are not
   finite leaves the state as it was;
4. reduce the metrics over all steps, advance the counters, run
   ``after="update"`` additional updates and learner-level updates.

Non-finite values are reported, never hidden: each trained module's metrics
hold ``nonfinite``, 1 when the update leaves the module's params holding a
NaN/Inf or (without ``skip_nonfinite``, whose skipped steps are counted in
``"__all__"/num_skipped_steps`` instead) when a step's loss was not finite, else
0; ``"__all__"/nonfinite`` is 1 when any module's is. It costs one fused
reduction over the losses and the new params per update. The update still
applies what it computed (RLlib's semantics); a driver decides what to do
(:class:`~jaxlearner.Trainer` stops with :class:`~jaxlearner.errors.NonFiniteError`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import optax

from jaxlearner.core.batch import epoch_blocks, minibatch_plan
from jaxlearner.core.context import JointLossFn, LossContext
from jaxlearner.core.initialization import module_key
from jaxlearner.core.learner_config import LearnerConfig
from jaxlearner.core.metrics import ALL_MODULES, check_loss_metrics, flatten_steps, reduce_metrics
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.optimizer import ModuleOptimizer
from jaxlearner.core.schedules import current_value
from jaxlearner.core.state import LearnerState, ModuleState, select_tree
from jaxlearner.types import Batch, Params, PyTree

UpdateFn: TypeAlias = Callable[
    [LearnerState, Mapping[str, Batch], Mapping[str, jax.Array]],
    tuple[LearnerState, dict[str, dict[str, jax.Array]]],
]

_LAST_BY_DEFAULT = ("learning_rate/", "hyperparams/")


def make_update(
    specs: Mapping[str, ModuleSpec],
    config: LearnerConfig,
    trained: Collection[str] | None = None,
    constrain_minibatch: Callable[[PyTree], PyTree] | None = None,
) -> UpdateFn:
    """Builds the pure update function.

    Each module's named optimizers are composed into one optax
    transformation here, once (:class:`~jaxlearner.core.optimizer.ModuleOptimizer`).

    Args:
      specs: module id -> :class:`~jaxlearner.ModuleSpec`.
      config: the update's static configuration (its joint ``loss`` replaces
        the modules' own losses; its ``additional_updates`` run after
        everything else in each update).
      trained: the ids of the modules to train; default
        ``config.trained(specs)``.
      constrain_minibatch: applied to each epoch's ``[steps, minibatch, ...]``
        blocks, e.g. a sharding constraint that splits minibatches over devices.

    Returns:
      ``update(state, batch, env_steps) -> (state, metrics)`` where ``batch``
      is ``{module_id: [B_m, ...] arrays}`` and ``env_steps`` is
      ``{module_id: int32 scalar}``, the env steps each module's batch counts
      for. ``metrics`` is ``{module_id: {...}, "__all__": {...}}``.
    """
    specs = dict(specs)
    to_train = config.trained(tuple(specs)) if trained is None else frozenset(trained)
    joint_loss = config.loss
    optimizers = {
        m: ModuleOptimizer(spec.named_optimizers, spec.param_labels, m) for m, spec in specs.items()
    }

    def update(
        state: LearnerState, batch: Mapping[str, Batch], env_steps: Mapping[str, jax.Array]
    ) -> tuple[LearnerState, dict[str, dict[str, jax.Array]]]:
        module_ids = tuple(sorted(batch))
        trained = tuple(m for m in module_ids if m in to_train)
        involved = module_ids if joint_loss is not None else trained
        plans = {
            m: minibatch_plan(jax.tree.leaves(batch[m])[0].shape[0], config.minibatch_size, m)
            for m in involved
        }
        num_steps = max(count for _, count in plans.values())
        key, update_key = jax.random.split(state.key)
        step = _make_step(specs, optimizers, config, trained, involved)

        def run_epoch(state: LearnerState, epoch_key: jax.Array) -> tuple[LearnerState, Any]:
            blocks_key, steps_key = jax.random.split(epoch_key)
            blocks = {
                m: epoch_blocks(
                    batch[m], module_key(blocks_key, m), *plans[m], num_steps, config.shuffle
                )
                for m in involved
            }
            if constrain_minibatch is not None:
                blocks = constrain_minibatch(blocks)
            return jax.lax.scan(step, state, (blocks, jax.random.split(steps_key, num_steps)))

        state, stacked = jax.lax.scan(
            run_epoch, state, jax.random.split(update_key, config.num_epochs)
        )
        stacked = flatten_steps(stacked)
        state, metrics = _finish_update(specs, state, stacked, trained, env_steps)
        _report_nonfinite(state, stacked, metrics, trained, config.skip_nonfinite)
        state = state.replace(key=key, updates=state.updates + 1)
        metrics[ALL_MODULES]["num_updates"] = state.updates
        for learner_update in config.additional_updates:
            state = learner_update(state, metrics)
        return state, metrics

    return update


def _make_step(
    specs: dict[str, ModuleSpec],
    optimizers: Mapping[str, ModuleOptimizer],
    config: LearnerConfig,
    trained: tuple[str, ...],
    involved: tuple[str, ...],
) -> Callable[[LearnerState, tuple[Mapping[str, Batch], jax.Array]], tuple[LearnerState, Any]]:
    """One minibatch step over the trained modules, as a ``lax.scan`` body."""

    def step(
        state: LearnerState, inputs: tuple[Mapping[str, Batch], jax.Array]
    ) -> tuple[LearnerState, Any]:
        minibatch, key = inputs
        joint_loss = config.loss
        modules = {m: _refresh_hyperparams(specs[m], state.modules[m]) for m in involved}
        contexts = {
            m: LossContext(
                module_id=m,
                apply=specs[m].model.apply,
                key=module_key(key, m),
                extra=modules[m].extra,
                hyperparams=modules[m].hyperparams,
                counters=modules[m].counters,
            )
            for m in involved
        }
        if joint_loss is None:
            results = {
                m: _module_gradients(specs[m], m, modules[m].params, minibatch[m], contexts[m])
                for m in trained
            }
            all_metrics: dict[str, jax.Array] = {}
            total = sum(loss for loss, _, _ in results.values())
        else:
            total, grads, all_metrics = _joint_gradients(
                joint_loss, specs, modules, minibatch, contexts, trained
            )
            results = {m: (None, grads[m], {}) for m in trained}

        new_modules, metrics = {}, {}
        for m in trained:
            loss, grads_by_optimizer, loss_metrics = results[m]
            new_modules[m], optimizer_metrics = _apply_optimizers(
                optimizers[m], modules[m], grads_by_optimizer
            )
            metrics[m] = {
                **({} if loss is None else {"total_loss": loss}),
                **loss_metrics,
                **optimizer_metrics,
                **{f"hyperparams/{k}": v for k, v in modules[m].hyperparams.items()},
            }
            for additional in specs[m].updates_after("grad_step"):
                new_modules[m] = additional.fn(new_modules[m], metrics[m])
        metrics[ALL_MODULES] = {"total_loss": total, **all_metrics}

        skipped = state.skipped_steps
        if config.skip_nonfinite:  # static: the check costs nothing when it is off
            finite = jnp.isfinite(total) & _all_finite([r[1] for r in results.values()])
            old = {m: state.modules[m] for m in trained}
            new_modules = select_tree(finite, new_modules, old)
            skipped = skipped + (~finite).astype(jnp.int32)
        return (
            state.replace(
                modules={**state.modules, **new_modules},
                grad_steps=state.grad_steps + 1,
                skipped_steps=skipped,
            ),
            metrics,
        )

    return step


def _refresh_hyperparams(spec: ModuleSpec, module: ModuleState) -> ModuleState:
    """The module state with each scheduled hyperparameter at its current value."""
    if not spec.hyperparams:
        return module
    values = {
        name: current_value(value, module.hyperparams[name], module.counters, name)
        for name, value in spec.hyperparams.items()
    }
    return module.replace(hyperparams={**module.hyperparams, **values})


def _check_loss(owner: str, loss: Any, names: Sequence[str]) -> None:
    if isinstance(loss, Mapping):
        if set(loss) != set(names):
            raise ValueError(
                f"The loss of {owner} returned per-optimizer losses for {sorted(loss)}, but the "
                f"module's optimizers are {sorted(names)}; return one scalar, or one per "
                "optimizer name."
            )
        values = list(loss.values())
    else:
        values = [loss]
    for value in values:
        if jnp.shape(value) != () or not jnp.issubdtype(jnp.result_type(value), jnp.floating):
            raise ValueError(
                f"The loss of {owner} must be a float scalar (or a dict of them, one per "
                f"optimizer); got shape {jnp.shape(value)} and dtype {jnp.result_type(value)}."
            )


def _module_gradients(
    spec: ModuleSpec, module_id: str, params: Params, batch: Batch, ctx: LossContext
) -> tuple[jax.Array, dict[str, PyTree], dict[str, jax.Array]]:
    """``(total_loss, {optimizer: grads}, metrics)`` of one module's own loss.

    A scalar loss gives every optimizer the same gradient (each then uses its
    own params' share). A per-optimizer loss ``{name: scalar}`` gives each
    optimizer the gradient of its own term, one backward pass per term.
    """
    owner = f"module {module_id!r}"
    names = list(spec.named_optimizers)

    def loss_fn(p: Params) -> tuple[Any, Any]:
        output = spec.loss(p, batch, ctx)
        if not (isinstance(output, tuple) and len(output) == 2):
            raise TypeError(
                f"The loss of {owner} must return a pair (loss, metrics); got "
                f"{type(output).__name__}."
            )
        loss, metrics = output
        _check_loss(owner, loss, names)
        return loss, check_loss_metrics(owner, metrics)

    loss, pullback, metrics = jax.vjp(loss_fn, params, has_aux=True)
    if isinstance(loss, Mapping):
        grads = {}
        for name in names:
            cotangent = {k: jnp.asarray(k == name, jnp.result_type(v)) for k, v in loss.items()}
            (grads[name],) = pullback(cotangent)
        total = sum(loss.values())
        metrics = {**{f"loss/{name}": value for name, value in loss.items()}, **metrics}
    else:
        (shared,) = pullback(jnp.ones_like(loss))
        grads = dict.fromkeys(names, shared)
        total = loss
    return total, grads, metrics


def _joint_gradients(
    joint_loss: JointLossFn,
    specs: Mapping[str, ModuleSpec],
    modules: Mapping[str, ModuleState],
    minibatch: Mapping[str, Batch],
    contexts: Mapping[str, LossContext],
    trained: tuple[str, ...],
) -> tuple[jax.Array, dict[str, dict[str, PyTree]], dict[str, jax.Array]]:
    """The joint loss, its gradient for each trained module, and its metrics."""

    def loss_fn(trained_params: dict[str, Params]) -> tuple[jax.Array, Any]:
        params = {
            m: trained_params[m] if m in trained_params else jax.lax.stop_gradient(s.params)
            for m, s in modules.items()
        }
        output = joint_loss(params, dict(minibatch), dict(contexts))
        if not (isinstance(output, tuple) and len(output) == 2):
            raise TypeError(
                f"The joint loss must return a pair (loss, metrics); got {type(output).__name__}."
            )
        loss, metrics = output
        _check_loss("the learner (joint loss)", loss, ())
        return loss, check_loss_metrics("the learner (joint loss)", metrics)

    (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        {m: modules[m].params for m in trained}
    )
    return loss, {m: dict.fromkeys(specs[m].named_optimizers, grads[m]) for m in trained}, metrics


def _apply_optimizers(
    optimizer: ModuleOptimizer,
    module: ModuleState,
    grads_by_optimizer: Mapping[str, PyTree],
) -> tuple[ModuleState, dict[str, jax.Array]]:
    """Steps the module's composed optimizer; returns the stepped module state."""
    updates, opt_states, metrics = optimizer.update(
        grads_by_optimizer, module.opt_states, module.params, module.counters
    )
    return (
        module.replace(
            params=optax.apply_updates(module.params, updates),
            opt_states=opt_states,
            grad_steps=module.grad_steps + 1,
        ),
        metrics,
    )


def _all_finite(tree: PyTree) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def _report_nonfinite(
    state: LearnerState,
    stacked: Mapping[str, Mapping[str, jax.Array]],
    metrics: dict[str, dict[str, jax.Array]],
    trained: tuple[str, ...],
    skip_nonfinite: bool,
) -> None:
    """Adds ``nonfinite`` (int32 0 or 1) to each trained module's metrics and to ``__all__``.

    A module is non-finite when its params after the update hold a NaN/Inf or,
    unless ``skip_nonfinite`` skipped such steps, when any step's loss (the
    module's own ``total_loss``, else the joint one) was not finite.
    """
    flags = []
    for m in trained:
        finite = _all_finite(state.modules[m].params)
        if not skip_nonfinite:
            losses = stacked[m].get("total_loss", stacked[ALL_MODULES]["total_loss"])
            finite = finite & jnp.all(jnp.isfinite(losses))
        flags.append((~finite).astype(jnp.int32))
        metrics[m]["nonfinite"] = flags[-1]
    metrics[ALL_MODULES]["nonfinite"] = (
        jnp.max(jnp.stack(flags)) if flags else jnp.zeros((), jnp.int32)
    )


def _finish_update(
    specs: Mapping[str, ModuleSpec],
    state: LearnerState,
    stacked: Mapping[str, Mapping[str, jax.Array]],
    trained: tuple[str, ...],
    env_steps: Mapping[str, jax.Array],
) -> tuple[LearnerState, dict[str, dict[str, jax.Array]]]:
    """Reduces metrics, advances env-step counters, runs per-update additional updates."""
    modules = dict(state.modules)
    metrics: dict[str, dict[str, jax.Array]] = {}
    for m in trained:
        reductions = {
            name: "last" for name in stacked[m] if name.startswith(_LAST_BY_DEFAULT)
        } | dict(specs[m].metric_reductions)
        module_metrics = reduce_metrics(stacked[m], reductions)
        module = modules[m].replace(
            env_steps=modules[m].env_steps + jnp.asarray(env_steps[m], jnp.int32)
        )
        for additional in specs[m].updates_after("update"):
            module = additional.fn(module, module_metrics)
        module_metrics.update(
            {
                f"extra/{k}": v
                for k, v in module.extra.items()
                if isinstance(v, jax.Array) and v.shape == ()
            }
        )
        module_metrics["num_grad_steps"] = module.grad_steps
        module_metrics["num_env_steps_trained"] = module.env_steps
        modules[m] = module
        metrics[m] = module_metrics
    metrics[ALL_MODULES] = {
        **reduce_metrics(stacked[ALL_MODULES], {}),
        "num_grad_steps": state.grad_steps,
        "num_skipped_steps": state.skipped_steps,
        "num_env_steps_trained": sum(
            (module.env_steps for module in modules.values()), jnp.zeros((), jnp.int32)
        ),
    }
    return state.replace(modules=modules), metrics
