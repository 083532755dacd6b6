"""Which params each named optimizer owns: RLlib's ``filter_param_dict_for_optimizer``.

A module's params are split among its named optimizers by the rule of
:func:`~jaxlearner.core.optimizer.label_params` (the first key on a leaf's path that names
an optimizer, or the spec's ``param_labels``); a module of a shared optimizer
(:class:`~jaxlearner.SharedOptimizer`) gives all of its params to that one, which RLlib
registers under ``ALL_MODULES``. :func:`params_for_optimizer` gives one optimizer's part of a
params-shaped tree (the params, or gradients), for a user's own processing between the three
stages; inside a gradient postprocess, :meth:`~jaxlearner.GradientContext.for_optimizer`
does the same with the labels it is given.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax

from jaxlearner.core.learner import Learner
from jaxlearner.core.metrics import ALL_MODULES
from jaxlearner.core.optimizer import ModuleOptimizer, owned_leaves
from jaxlearner.core.shared_optimizer import SharedOptimizers
from jaxlearner.errors import ReadableKeyError
from jaxlearner.types import PyTree


def params_for_optimizer(
    learner: Learner, module_id: str, optimizer_name: str, tree: PyTree
) -> PyTree:
    """The part of ``tree`` that one named optimizer owns: its other leaves as ``None``.

    The optimizers named for one module partition its tree: each leaf is kept by exactly one
    of them. ``jax.tree.leaves`` of the result are the optimizer's leaves only, and
    ``jax.tree.map(f, part, is_leaf=lambda x: x is None)`` maps over every position.

    Args:
      learner: the learner whose optimizers these are.
      module_id: a module id, with ``tree`` shaped like its params; or ``"__all__"``
        (:data:`~jaxlearner.ALL_MODULES`) for a shared optimizer, with ``tree`` a
        ``{module_id: params-shaped tree}`` (as :meth:`~jaxlearner.Learner.compute_gradients`
        returns gradients) of any of the learner's modules.
      optimizer_name: one of the module's optimizers (``"default"`` for a single one), or
        the name of the shared optimizer that holds it; with ``"__all__"``, a shared
        optimizer's name.
      tree: the params, or a tree shaped like them (gradients, updates); its leaves may be
        arrays or tracers (it runs inside ``jax.jit``).

    Returns:
      ``tree``'s structure, each leaf the optimizer does not own ``None``; with
      ``"__all__"``, ``{module_id: part}``, the modules outside the shared optimizer all
      ``None``.

    Raises:
      KeyError: for an unknown module id, an optimizer the module does not have or no
        shared optimizer of that name (each listing the valid names).
      TypeError: for ``"__all__"`` with a ``tree`` that is no ``{module_id: tree}``.
      ValueError: when a leaf of ``tree`` matches no optimizer of the module.

    Example:
      >>> import flax.linen as nn, jax, jax.numpy as jnp, optax, jaxlearner as jl
      >>> class ActorCritic(nn.Module):
      ...     @nn.compact
      ...     def __call__(self, x):
      ...         return nn.Dense(1, name="actor")(x), nn.Dense(1, name="critic")(x)
      >>> spec = jl.ModuleSpec(ActorCritic(), lambda params, batch, ctx: (0.0, {}),
      ...                      optimizers={"actor": optax.adam(1e-3), "critic": optax.sgd(0.1)})
      >>> learner = jl.Learner({"ac": spec})
      >>> params = ActorCritic().init(jax.random.key(0), jnp.zeros((1, 3)))
      >>> critic = jl.params_for_optimizer(learner, "ac", "critic", params)
      >>> critic["params"]["actor"], critic["params"]["critic"]["bias"].shape
      ({'bias': None, 'kernel': None}, (1,))
    """
    specs = learner.specs
    shared = SharedOptimizers(learner.config.shared_optimizers, specs)
    if module_id == ALL_MODULES:
        return _shared_part(learner, shared, optimizer_name, tree)
    if module_id not in specs:
        raise ReadableKeyError(
            f"params_for_optimizer: no module {module_id!r}; the learner's modules are "
            f"{list(specs)} (or {ALL_MODULES!r} for a shared optimizer)."
        )
    spec = specs[module_id]
    if module_id in shared.owner:
        optimizer = shared.view(module_id)
    else:
        optimizer = ModuleOptimizer(spec.named_optimizers, spec.param_labels, module_id)
    if optimizer_name not in optimizer.names:
        raise ReadableKeyError(
            f"params_for_optimizer: module {module_id!r} has no optimizer {optimizer_name!r}; "
            f"its params' optimizers are {list(optimizer.names)}."
        )
    return owned_leaves(tree, optimizer.labels(tree), optimizer_name)


def _shared_part(
    learner: Learner, shared: SharedOptimizers, optimizer_name: str, tree: PyTree
) -> dict[str, PyTree]:
    """``{module_id: part}`` of a shared optimizer over ``{module_id: tree}``."""
    if optimizer_name not in shared.shared:
        raise ReadableKeyError(
            f"params_for_optimizer: {ALL_MODULES!r} takes a shared optimizer's name; got "
            f"{optimizer_name!r}, and the learner's shared optimizers are "
            f"{list(shared.shared)}."
        )
    if not isinstance(tree, Mapping):
        raise TypeError(
            f"params_for_optimizer: with {ALL_MODULES!r}, tree must be {{module_id: tree}}; got "
            f"{type(tree).__name__}."
        )
    unknown = [m for m in tree if m not in learner.specs]
    if unknown:
        raise ReadableKeyError(
            f"params_for_optimizer: tree holds unknown module(s) {unknown}; the learner's "
            f"modules are {list(learner.specs)}."
        )
    members = shared.shared[optimizer_name].module_ids
    return {
        m: part if m in members else jax.tree.map(lambda _: None, part) for m, part in tree.items()
    }
