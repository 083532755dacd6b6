"""An update's results as RLlib counts them: steps trained, reductions, non-finite flags.

:meth:`~jaxlearner.core.gradients.GradientStep.finish` closes every update with these: each
trained module's metrics reduced over the update's steps (each by its declared reduction),
this update's ``num_env_steps_trained`` and ``num_agent_steps_trained`` beside the lifetime
``num_env_steps_trained_lifetime`` the state counts, ``num_grad_steps``, and ``nonfinite``.
As RLlib's ``compile_results`` counts them, a module's ``num_env_steps_trained`` is the env
steps its batch accounts for and ``"__all__"``'s the whole batch's, given once per update
(``env_steps["__all__"]``; by default the largest of the trained modules'); agent steps are
the rows trained on, summed under ``"__all__"``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from jaxlearner.core.metrics import ALL_MODULES, reduce_metrics
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.state import LearnerState
from jaxlearner.types import PyTree

StepMetrics = dict[str, dict[str, jax.Array]]

_LAST_BY_DEFAULT = ("learning_rate/", "hyperparams/")


def all_finite(tree: PyTree) -> jax.Array:
    """A bool scalar: every leaf of ``tree`` is free of NaN and Inf.

    The floating leaves are checked as one flat array per dtype, so a compiled
    program holds one reduction per dtype rather than one per leaf (integers are
    always finite).
    """
    flat: dict[Any, list[jax.Array]] = {}
    for leaf in jax.tree.leaves(tree):
        leaf = jnp.asarray(leaf)
        if jnp.issubdtype(leaf.dtype, jnp.inexact):
            flat.setdefault(leaf.dtype, []).append(leaf.ravel())
    flags = [jnp.all(jnp.isfinite(jnp.concatenate(leaves))) for leaves in flat.values()]
    return functools.reduce(jnp.logical_and, flags, jnp.asarray(True))


def report_nonfinite(
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
        losses = stacked[m].get("total_loss", stacked[ALL_MODULES].get("total_loss"))
        checked = None if skip_nonfinite else losses  # None has no leaves to check
        finite = all_finite((state.modules[m].params, checked))
        flags.append((~finite).astype(jnp.int32))
        metrics[m]["nonfinite"] = flags[-1]
    metrics[ALL_MODULES]["nonfinite"] = (
        jnp.max(jnp.stack(flags)) if flags else jnp.zeros((), jnp.int32)
    )


def trained_counts(
    trained: tuple[str, ...], env_steps: Mapping[str, jax.Array], rows: Mapping[str, int]
) -> dict[str, dict[str, jax.Array]]:
    """Each trained module's ``num_env_steps_trained`` and ``num_agent_steps_trained`` in
    this update (int32 scalars), and ``"__all__"``'s: the batch's env steps
    (``env_steps["__all__"]`` when given, else the largest of the trained modules') and the
    agent steps summed.

    Example:
      >>> counts = trained_counts(("a", "b"), {"a": 100, "b": 100}, {"a": 100, "b": 100})
      >>> {name: int(value) for name, value in counts["__all__"].items()}
      {'num_env_steps_trained': 100, 'num_agent_steps_trained': 200}
    """
    counts = {
        m: {
            "num_env_steps_trained": jnp.asarray(env_steps[m], jnp.int32),
            "num_agent_steps_trained": jnp.asarray(rows.get(m, 0), jnp.int32),
        }
        for m in trained
    }
    zero = jnp.zeros((), jnp.int32)
    batch_env_steps = env_steps.get(ALL_MODULES)
    if batch_env_steps is None:
        batch_env_steps = functools.reduce(
            jnp.maximum, (c["num_env_steps_trained"] for c in counts.values()), zero
        )
    counts[ALL_MODULES] = {
        "num_env_steps_trained": jnp.asarray(batch_env_steps, jnp.int32),
        "num_agent_steps_trained": sum(
            (c["num_agent_steps_trained"] for c in counts.values()), zero
        ),
    }
    return counts


def count_and_reduce(
    specs: Mapping[str, ModuleSpec],
    state: LearnerState,
    stacked: Mapping[str, Mapping[str, jax.Array]],
    trained: tuple[str, ...],
    counts: Mapping[str, Mapping[str, jax.Array]],
) -> tuple[LearnerState, StepMetrics]:
    """Reduces metrics, advances env-step counters, runs per-update additional updates.

    ``counts`` is :func:`trained_counts`'s; each owner's metrics end with this
    update's counts beside the lifetime ``num_env_steps_trained_lifetime``.
    """
    modules = dict(state.modules)
    metrics: StepMetrics = {}
    for m in trained:
        reductions = {
            name: "last" for name in stacked[m] if name.startswith(_LAST_BY_DEFAULT)
        } | dict(specs[m].metric_reductions)
        module_metrics = reduce_metrics(stacked[m], reductions)
        module = modules[m].replace(
            env_steps=modules[m].env_steps + counts[m]["num_env_steps_trained"]
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
        module_metrics.update(counts[m])
        module_metrics["num_env_steps_trained_lifetime"] = module.env_steps
        modules[m] = module
        metrics[m] = module_metrics
    metrics[ALL_MODULES] = {
        **reduce_metrics(stacked[ALL_MODULES], {}),
        "num_grad_steps": state.grad_steps,
        "num_skipped_steps": state.skipped_steps,
        **counts[ALL_MODULES],
        "num_env_steps_trained_lifetime": sum(
            (module.env_steps for module in modules.values()), jnp.zeros((), jnp.int32)
        ),
    }
    return state.replace(modules=modules), metrics
