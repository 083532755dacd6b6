"""Gradient postprocesses a user supplies: RLlib's two hooks as values, run inside ``update``.

RLlib's ``Learner`` subclasses override ``postprocess_gradients`` (every module's gradients)
and ``postprocess_gradients_for_module`` (one module's). Here each is a pure function given
as a value: ``jl.ModuleSpec(..., postprocess_gradients=fn)`` for one module,
``jl.Learner(..., postprocess_gradients=fn)`` for the learner; either one plain, or wrapped in
a :class:`GradientPostprocess` to choose how it stands to the built-in clipping. They run in
the second of the three stages (:mod:`jaxlearner.core.gradients`): inside the compiled
``update``, on every minibatch step, between computing and applying the gradients, and in
:meth:`~jaxlearner.Learner.postprocess_gradients`. In this order:

1. each trained module's own, ``fn(grads, ctx) -> (grads, metrics)``, ``ctx`` its
   :class:`GradientContext`; its metrics join the module's;
2. the learner's, ``fn({module_id: grads}, {module_id: ctx}) -> (grads, {owner: metrics})``
   over every trained module of the step; its metrics join each owner's (a module id or
   ``"__all__"``);
3. each optimizer's built-in clipping (``grad_clip``, ``grad_clip_by``), on what the
   postprocesses returned, unless one replaces it (:attr:`GradientPostprocess.replaces_clipping`):
   a module's replaces its own optimizers' clipping, the learner's every optimizer's.

Metrics are scalars, reduced over an update's steps as a loss's are (the mean, unless
``ModuleSpec.metric_reductions`` names the metric). What a postprocess returns is checked
while the update is traced, before anything compiles: gradients of the tree it was given (the
paths that differ are named, and shapes and dtypes), scalar metrics. A checkpoint records each
postprocess's :attr:`~GradientPostprocess.name`; restoring it into a learner without that
postprocess is refused (:func:`jaxlearner.checkpoint.metadata.check_postprocesses`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias, final

import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.core.metrics import ALL_MODULES, check_loss_metrics
from jaxlearner.core.optimizer import owned_leaves
from jaxlearner.errors import ReadableKeyError
from jaxlearner.types import Metrics, Params, PyTree

ModulePostprocessFn: TypeAlias = Callable[[PyTree, "GradientContext"], tuple[PyTree, Metrics]]
"""A module's postprocess: ``fn(grads, ctx) -> (grads, {name: scalar})``."""

LearnerPostprocessFn: TypeAlias = Callable[
    [Mapping[str, PyTree], Mapping[str, "GradientContext"]],
    tuple[Mapping[str, PyTree], Mapping[str, Metrics]],
]
"""The learner's postprocess: ``fn({module_id: grads}, {module_id: ctx}) -> (grads, {owner:
{name: scalar}})``."""


@final
@dataclasses.dataclass(frozen=True)
class GradientContext:
    """What a gradient postprocess sees of a module besides its gradients (``ctx``).

    Attributes:
      module_id: the module's id.
      params: the module's params, at which the gradients were computed.
      labels: the name of the optimizer that owns each param leaf, a tree shaped like the
        params (for a module of a shared optimizer, that optimizer's name at every leaf).
      hyperparams: the module's scheduled coefficients at their current values (float32).
      counters: the module's ``grad_steps`` and ``env_steps`` before this step.

    Example:
      >>> import jax, jax.numpy as jnp, jaxlearner as jl
      >>> def scale_critic(grads, ctx):      # [the critic's leaves] x 0.5, and a metric
      ...     critic = ctx.for_optimizer("critic", grads)
      ...     scaled = jax.tree.map(lambda g, c: g if c is None else 0.5 * g, grads, critic,
      ...                           is_leaf=lambda x: x is None)
      ...     return scaled, {"critic_grad_sum": sum(jnp.sum(c) for c in jax.tree.leaves(critic))}
      >>> ctx = jl.GradientContext("m", params={"actor": 0.0, "critic": 0.0},
      ...                          labels={"actor": "actor", "critic": "critic"},
      ...                          hyperparams={}, counters={})
      >>> grads, metrics = scale_critic({"actor": jnp.ones(2), "critic": jnp.ones(2)}, ctx)
      >>> grads["critic"].tolist(), float(metrics["critic_grad_sum"])
      ([0.5, 0.5], 2.0)
    """

    module_id: str
    params: Params
    labels: PyTree
    hyperparams: Mapping[str, jax.Array]
    counters: Mapping[str, jax.Array]

    @property
    def optimizer_names(self) -> tuple[str, ...]:
        """The names of the optimizers that own the module's params, in the leaves' order."""
        return tuple(dict.fromkeys(jax.tree.leaves(self.labels)))

    def for_optimizer(self, name: str, tree: PyTree) -> PyTree:
        """``tree`` (shaped like the params: the gradients) with each leaf that optimizer
        ``name`` does not own as ``None`` (as :func:`~jaxlearner.params_for_optimizer`).

        Raises:
          KeyError: for a name that owns none of the module's params.
        """
        if name not in self.optimizer_names:
            raise ReadableKeyError(
                f"Module {self.module_id!r} has no optimizer {name!r}; its params' optimizers "
                f"are {list(self.optimizer_names)}."
            )
        return owned_leaves(tree, self.labels, name)


@dataclasses.dataclass(frozen=True)
class GradientPostprocess:
    """A gradient postprocess, the name checkpoints record it by, and how it meets clipping.

    Attributes:
      fn: pure and traced: a module's ``fn(grads, ctx) -> (grads, metrics)``; the learner's
        ``fn({module_id: grads}, {module_id: ctx}) -> (grads, {owner: metrics})``, over the
        step's trained modules. It returns gradients of the tree it was given; ``ctx`` is a
        :class:`GradientContext`; metrics are scalars.
      replaces_clipping: ``False`` (the default): the optimizers' built-in clipping
        (``grad_clip``) runs after ``fn``, on what it returns. ``True``: ``fn`` runs instead
        of it: a module's, instead of its own optimizers' clipping (a module of a shared
        optimizer cannot: that clipping spans modules, so the learner's replaces it); the
        learner's, instead of every optimizer's.
      name: the name a checkpoint records (a restore into a learner without a postprocess
        of this name is refused); default ``fn.__name__``.

    Raises:
      TypeError, ValueError: for a ``fn`` that is not callable, a ``replaces_clipping``
        that is not a bool, or a name that is not a non-empty string.

    Example:
      >>> import jax, optax, jaxlearner as jl
      >>> def clip_each_leaf(grads, ctx):
      ...     return jax.tree.map(lambda g: g.clip(-1.0, 1.0), grads), {}
      >>> post = jl.GradientPostprocess(clip_each_leaf, replaces_clipping=True)
      >>> post.name
      'clip_each_leaf'
    """

    fn: Callable[..., tuple[Any, Any]]
    replaces_clipping: bool = False
    name: str | None = None

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(
                "GradientPostprocess.fn must be callable, fn(grads, ctx) -> (grads, metrics); "
                f"got {type(self.fn).__name__} {self.fn!r}."
            )
        if not isinstance(self.replaces_clipping, bool):
            raise TypeError(
                "GradientPostprocess.replaces_clipping must be a bool; got "
                f"{self.replaces_clipping!r}."
            )
        name = self.name
        if name is None:
            name = getattr(self.fn, "__name__", type(self.fn).__name__)
        if not isinstance(name, str) or not name:
            raise ValueError(
                f"GradientPostprocess.name must be a non-empty string; got {self.name!r}."
            )
        object.__setattr__(self, "name", name)


GradientPostprocessLike: TypeAlias = GradientPostprocess | Callable[..., tuple[Any, Any]]
"""A :class:`GradientPostprocess`, or its ``fn`` alone (the built-in clipping runs after it)."""


def as_gradient_postprocess(value: object, owner: str) -> GradientPostprocess | None:
    """``None``, or ``value`` as a :class:`GradientPostprocess` (a plain function wrapped).

    Raises:
      TypeError: for anything else than ``None``, a callable or a ``GradientPostprocess``.
    """
    if value is None or isinstance(value, GradientPostprocess):
        return value
    if callable(value):
        return GradientPostprocess(value)
    raise TypeError(
        f"{owner} postprocess_gradients must be a function fn(grads, ctx) -> (grads, metrics) "
        f"or a jl.GradientPostprocess; got {type(value).__name__} {value!r}."
    )


@final
@dataclasses.dataclass(frozen=True, eq=False)
class Postprocesses:
    """A learner's gradient postprocesses, checked against its shared optimizers, run in order.

    Attributes:
      modules: ``{module_id: postprocess}`` of the modules that have one.
      learner: the learner's postprocess, or ``None``.
      shared_owner: ``{module_id: shared optimizer name}`` of the modules of shared optimizers.

    Raises:
      ValueError: (when built) for a module postprocess that replaces the clipping of a
        module of a shared optimizer.
    """

    modules: Mapping[str, GradientPostprocess]
    learner: GradientPostprocess | None
    shared_owner: Mapping[str, str]

    def __post_init__(self) -> None:
        for m, post in self.modules.items():
            if post.replaces_clipping and m in self.shared_owner:
                raise ValueError(
                    f"Module {m!r}'s postprocess_gradients {post.name!r} replaces the clipping, "
                    f"but the module is in shared optimizer {self.shared_owner[m]!r}, whose "
                    "clipping spans its modules; give the learner's postprocess_gradients="
                    "jl.GradientPostprocess(fn, replaces_clipping=True) instead."
                )

    @property
    def any(self) -> bool:
        """Whether there is a postprocess to run at all (static)."""
        return bool(self.modules) or self.learner is not None

    @property
    def clips_shared(self) -> bool:
        """Whether the shared optimizers' clipping runs."""
        return self.learner is None or not self.learner.replaces_clipping

    def clips(self, module_id: str) -> bool:
        """Whether the clipping of the module's own optimizers runs."""
        own = self.modules.get(module_id)
        return self.clips_shared and (own is None or not own.replaces_clipping)

    def run(
        self,
        grads: Mapping[str, PyTree],
        contexts: Mapping[str, GradientContext],
        metrics: Mapping[str, Mapping[str, Any]],
    ) -> tuple[dict[str, PyTree], dict[str, dict[str, Any]]]:
        """Steps 1 and 2 of the module docstring: ``(grads, metrics)`` with each
        postprocess's gradients in and its metrics added (under the module, or each owner)."""
        grads, merged = dict(grads), {o: dict(v) for o, v in metrics.items()}
        for m in grads:
            if m in self.modules:
                post = self.modules[m]
                owner = f"module {m!r} (postprocess_gradients {post.name!r})"
                output = _pair(owner, post.fn(grads[m], contexts[m]))
                check_like_params(
                    f"Module {m!r}, postprocess_gradients {post.name!r}",
                    output[0],
                    grads[m],
                    dtypes=True,
                )
                grads[m] = output[0]
                merged.setdefault(m, {}).update(_metrics(owner, output[1]))
        if self.learner is not None:
            grads, owned = _run_learner(self.learner, grads, contexts)
            for owner, values in owned.items():
                merged.setdefault(owner, {}).update(values)
        return grads, merged


def _run_learner(
    post: GradientPostprocess,
    grads: dict[str, PyTree],
    contexts: Mapping[str, GradientContext],
) -> tuple[dict[str, PyTree], dict[str, dict[str, jax.Array]]]:
    """Step 2: the learner's postprocess over the step's trained modules, its output checked."""
    where = f"the learner (postprocess_gradients {post.name!r})"
    new, metrics = _pair(where, post.fn(dict(grads), dict(contexts)))
    if not isinstance(new, Mapping) or set(new) != set(grads):
        got = sorted(new) if isinstance(new, Mapping) else type(new).__name__
        raise ValueError(
            f"The postprocess_gradients {post.name!r} of the learner must return gradients "
            f"for the modules it was given, {sorted(grads)}; got {got}."
        )
    for m in grads:
        check_like_params(
            f"Module {m!r}, learner postprocess_gradients {post.name!r}",
            new[m],
            grads[m],
            dtypes=True,
        )
    owners = (*grads, ALL_MODULES)
    if not isinstance(metrics, Mapping) or not set(metrics) <= set(owners):
        got = sorted(metrics) if isinstance(metrics, Mapping) else type(metrics).__name__
        raise ValueError(
            f"The postprocess_gradients {post.name!r} of the learner must return metrics as "
            f"{{owner: {{name: scalar}}}}, the owners among {list(owners)}; got {got}."
        )
    return {m: new[m] for m in grads}, {o: _metrics(where, v) for o, v in metrics.items()}


def _pair(owner: str, output: Any) -> tuple[Any, Any]:
    if not (isinstance(output, tuple) and len(output) == 2):
        raise TypeError(
            f"The gradient postprocess of {owner} must return a pair (grads, metrics); got "
            f"{type(output).__name__}."
        )
    return output


def _metrics(owner: str, metrics: Any) -> dict[str, jax.Array]:
    return check_loss_metrics(owner, metrics, "The gradient postprocess", "(grads, metrics)")


def check_like_params(owner: str, grads: PyTree, params: PyTree, dtypes: bool = False) -> None:
    """Raises unless ``grads`` has the leaves of ``params``: the same paths and tree, the same
    shapes (and, with ``dtypes``, dtypes).

    Raises:
      ValueError: starting with ``owner`` and naming the paths missing and unexpected, or
        the leaf of another shape or dtype.
    """
    expected = {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_leaves_with_path(params)}
    received = {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_leaves_with_path(grads)}
    missing = [p for p in expected if p not in received]
    extra = [p for p in received if p not in expected]
    if missing or extra or jax.tree.structure(grads) != jax.tree.structure(params):
        raise ValueError(
            f"{owner}: the gradients' leaves differ from the params'. Missing: "
            f"{missing[:5]}; unexpected: {extra[:5]}; expected leaves: {list(expected)[:8]}"
            f"{' ...' if len(expected) > 8 else ''}."
        )
    for path, leaf in received.items():
        if np.shape(leaf) != np.shape(expected[path]):
            raise ValueError(
                f"{owner}, gradient {path}: expected shape "
                f"{tuple(np.shape(expected[path]))} (the param's), got {tuple(np.shape(leaf))}."
            )
        if dtypes and jnp.result_type(leaf) != jnp.result_type(expected[path]):
            raise ValueError(
                f"{owner}, gradient {path}: expected dtype {jnp.result_type(expected[path])}, "
                f"got {jnp.result_type(leaf)}."
            )
