"""The pure update: epochs x minibatches of gradient steps, then non-gradient updates.

:func:`make_update` builds ``update(state, batch, env_steps) -> (state,
metrics)`` from module specs and a :class:`~jaxlearner.LearnerConfig`. It is a pure
function, meant to be wrapped in a single ``jax.jit`` at the outermost level
(the :class:`~jaxlearner.Learner` does that, with its placement's shardings); the loops inside are
``lax.scan``s, so one update is one compiled XLA program whatever the number of
epochs and minibatches.

One update, for the modules present in the batch:

1. run the trained modules' ``after="update_start"`` additional updates
   (:func:`~jaxlearner.core.additional_update_stage.run_update_start`); split
   the state's key; one key per epoch;
2. per epoch, permute each module's rows and cut them into minibatches
   (``[steps, minibatch_size, ...]`` blocks, :func:`~jaxlearner.core.batch.epoch_blocks`):
   ``ceil(B / minibatch_size)`` of them, the last completed with the epoch's
   first rows, or ``B // minibatch_size`` with ``drop_last``;
3. per minibatch step, RLlib's three stages (:mod:`jaxlearner.core.gradients`):
   compute (scheduled hyperparameters refreshed from the counters, each
   trained module's loss and gradients, or one joint loss), postprocess (the
   gradient postprocesses given, then each named optimizer's clipping unless a
   postprocess replaces it), apply (each named optimizer's step,
   ``after="grad_step"`` additional updates); with ``skip_nonfinite`` a step
   whose loss or gradients are not finite leaves the state as it was;
4. reduce the metrics over all steps, advance the counters, run
   ``after="update"`` additional updates and learner-level updates; the
   metrics returned are reduced as the config's ``reduce_fn`` says, and the
   config's ``results_fn`` adds what it makes of them and the batch.

:func:`~jaxlearner.core.gradients.make_gradient_stages` gives the same three
stages on their own, over a whole batch.

Non-finite values are reported, never hidden: each trained module's metrics
hold ``nonfinite``, 1 when the update leaves the module's params holding a
NaN/Inf or (without ``skip_nonfinite``, whose skipped steps are counted in
``"__all__"/num_skipped_steps`` instead) when a step's loss was not finite, else
0; ``"__all__"/nonfinite`` is 1 when any module's is. It costs one fused
reduction over the losses and the new params per update. The update still
applies what it computed (RLlib's semantics); a driver decides what to do
(:func:`~jaxlearner.Trainer` stops with :class:`~jaxlearner.errors.NonFiniteError`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeAlias

import jax

from jaxlearner.core.additional_update_stage import run_update_start
from jaxlearner.core.batch import epoch_blocks, minibatch_plan
from jaxlearner.core.gradients import GradientStep, step_keys, update_keys
from jaxlearner.core.initialization import module_key
from jaxlearner.core.learner_config import LearnerConfig
from jaxlearner.core.metrics import add_results, flatten_steps
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.packing import Layout, pack, unpack
from jaxlearner.core.state import LearnerState
from jaxlearner.types import Batch, PyTree

UpdateFn: TypeAlias = Callable[
    [LearnerState, Mapping[str, Batch], Mapping[str, jax.Array]],
    tuple[LearnerState, dict[str, dict[str, jax.Array]]],
]


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
      for, and optionally ``"__all__"``: the whole batch's. ``metrics`` is
      ``{module_id: {...}, "__all__": {...}}``, reduced over the steps as
      ``config.reduce_fn`` says, with ``config.results_fn``'s added; as RLlib's
      results, each trained module's and ``"__all__"`` hold this update's
      ``num_env_steps_trained`` (a module's env steps; ``"__all__"``'s the batch's:
      ``env_steps["__all__"]``, by default the largest module's) and
      ``num_agent_steps_trained`` (the batch's rows, summed under ``"__all__"``;
      sequences, for a batch of sequences) beside the lifetime
      ``num_env_steps_trained_lifetime`` (under ``"__all__"``, the modules' summed)
      and ``num_grad_steps``.

    Example:
      >>> update = jax.jit(make_update(learner.specs, learner.config))   # doctest: +SKIP
      >>> state, metrics = update(state, {"policy": batch}, {"policy": 64})  # doctest: +SKIP
    """
    specs = dict(specs)
    to_train = config.trained(tuple(specs)) if trained is None else frozenset(trained)
    gradient_step = GradientStep(specs, config, to_train)

    def update(
        state: LearnerState, batch: Mapping[str, Batch], env_steps: Mapping[str, jax.Array]
    ) -> tuple[LearnerState, dict[str, dict[str, jax.Array]]]:
        trained, involved = gradient_step.roles(batch)
        state = run_update_start(specs, state, trained, env_steps)
        rows = {m: jax.tree.leaves(batch[m])[0].shape[0] for m in involved}
        plans = {
            m: minibatch_plan(rows[m], config.minibatch_size, m, config.drop_last) for m in involved
        }
        num_steps = max(count for _, count in plans.values())

        layouts: list[Layout] = []  # the step's metrics layout, recorded while it is traced

        def step(
            state: LearnerState, inputs: tuple[Mapping[str, Batch], jax.Array]
        ) -> tuple[LearnerState, Any]:
            minibatch, key = inputs
            grads, metrics = gradient_step.compute(state.modules, minibatch, key)
            grads, metrics = gradient_step.postprocess(state.modules, grads, metrics)
            state, metrics = gradient_step.apply(state, grads, metrics)
            # One stored array per shape and dtype, not one per metric (core/packing.py).
            packed, layout = pack(metrics)
            layouts[:] = [layout]
            return state, packed

        def run_epoch(state: LearnerState, epoch_key: jax.Array) -> tuple[LearnerState, Any]:
            blocks_key, keys = step_keys(epoch_key, num_steps)
            blocks = {
                m: epoch_blocks(
                    batch[m], module_key(blocks_key, m), *plans[m], num_steps, config.shuffle
                )
                for m in involved
            }
            if constrain_minibatch is not None:
                blocks = constrain_minibatch(blocks)
            return jax.lax.scan(step, state, (blocks, keys))

        _, epoch_keys = update_keys(state.key, config.num_epochs)
        state, stacked = jax.lax.scan(run_epoch, state, epoch_keys)
        stacked = unpack(stacked, layouts[0], batch_ndim=2)
        state, metrics = gradient_step.finish(
            state, flatten_steps(stacked), trained, env_steps, rows
        )
        if config.results_fn is not None:
            metrics = add_results(config.results_fn, batch, metrics)
        return state, metrics

    return update
