"""Named optimizers: optax transformations with a learning rate, clipping and a param subset.

A module owns one or several named optimizers (RLlib's
``register_optimizer``). Each is an :class:`Optimizer` value: the optax
transformation, its (possibly scheduled) learning rate and other numeric
hyperparameters, and how its gradients are clipped. When a module has several,
each optimizer updates only the params labelled with its name.

Learning rates and other hyperparameters given to the factory form are
injected with ``optax.inject_hyperparams``, so their current values are leaves
of the optimizer state: readable there, checkpointed, and sweepable.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import jax
import jax.numpy as jnp
import optax

from jaxlearner.core.schedules import (
    ScheduleLike,
    as_schedule,
    check_not_negative,
    current_value,
    initial_value,
)
from jaxlearner.types import Params, PyTree

ClipMode: TypeAlias = Literal["value", "norm", "global_norm"]
CLIP_MODES: tuple[str, ...] = ("value", "norm", "global_norm")
DEFAULT_OPTIMIZER = "default"
"""The name a module's single ``optimizer=`` is registered under."""
NEGATIVE_RATE = " (optax steps against the gradient already: a negative rate climbs the loss)"
"""Why a negative learning rate is refused, as messages say it."""

_InjectState = optax.InjectStatefulHyperparamsState


@dataclasses.dataclass(frozen=True)
class Optimizer:
    """One named optimizer of a module.

    Two forms:

    * ``Optimizer(optax.adam, learning_rate=3e-4, ...)``: an optax factory
      plus its hyperparameters. The learning rate (and every entry of
      ``hyperparams``) may be a constant, an optax schedule, an RLlib-style
      piecewise list or a :class:`~jaxlearner.Schedule`; the current value
      lives in the optimizer state and is reported in metrics.
    * ``Optimizer(optax.adam(3e-4), ...)``: an already built transformation,
      used as is (add clipping with ``grad_clip``). Its learning rate is
      reported only if it was built with ``optax.inject_hyperparams``.

    Attributes:
      transform: an optax factory (e.g. ``optax.adam``) or a built
        ``optax.GradientTransformation``.
      learning_rate: required with a factory, forbidden with a built
        transformation; never negative (a constant, any point of a piecewise
        list, a schedule's value at count 0).
      grad_clip: clip threshold, or ``None`` for no clipping.
      grad_clip_by: ``"value"`` (each element to ``[-c, c]``), ``"norm"``
        (each array to norm ``c``) or ``"global_norm"`` (all of this
        optimizer's gradients together to norm ``c``), as RLlib's
        ``grad_clip_by``.
      hyperparams: other numeric arguments of the factory to inject, e.g.
        ``{"b1": 0.9, "weight_decay": [[0, 1e-2], [10_000, 0.0]]}``.

    Example:
      >>> import optax, jaxlearner as jl
      >>> opt = jl.Optimizer(optax.adam, learning_rate=[[0, 1e-3], [10_000, 1e-4]],
      ...                    grad_clip=0.5, grad_clip_by="global_norm")
    """

    transform: optax.GradientTransformation | Callable[..., optax.GradientTransformation]
    learning_rate: ScheduleLike | None = None
    grad_clip: float | None = None
    grad_clip_by: ClipMode = "global_norm"
    hyperparams: Mapping[str, ScheduleLike] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "hyperparams", dict(self.hyperparams))
        if isinstance(self.transform, optax.GradientTransformation):
            if self.learning_rate is not None or self.hyperparams:
                raise ValueError(
                    "Optimizer got a built optax transformation together with learning_rate="
                    f"{self.learning_rate!r} / hyperparams={self.hyperparams!r}; pass the "
                    "factory instead (e.g. Optimizer(optax.adam, learning_rate=3e-4)) or drop "
                    "them (e.g. Optimizer(optax.adam(3e-4)))."
                )
        elif callable(self.transform):
            self._validate_factory()
        else:
            raise TypeError(
                "Optimizer.transform must be an optax.GradientTransformation or a factory "
                f"such as optax.adam; got {type(self.transform).__name__} {self.transform!r}."
            )
        if self.grad_clip_by not in CLIP_MODES:
            raise ValueError(
                f"grad_clip_by must be one of {CLIP_MODES}; got {self.grad_clip_by!r}."
            )
        if self.grad_clip is not None and not (
            isinstance(self.grad_clip, int | float)
            and math.isfinite(self.grad_clip)
            and self.grad_clip > 0
        ):
            raise ValueError(
                f"grad_clip must be a positive finite number or None; got {self.grad_clip!r}."
            )

    def _validate_factory(self) -> None:
        name = getattr(self.transform, "__name__", repr(self.transform))
        try:
            parameters = inspect.signature(self.transform).parameters
        except (TypeError, ValueError):
            parameters = {}
        if self.learning_rate is None:
            raise ValueError(
                f"Optimizer({name}) is a factory and needs a learning_rate, e.g. "
                f"Optimizer({name}, learning_rate=3e-4); or pass a built transformation."
            )
        if parameters:
            unknown = sorted(
                set(self.hyperparams) - set(parameters) | ({"learning_rate"} - set(parameters))
            )
            if unknown:
                raise ValueError(
                    f"Optimizer({name}) has no argument(s) {unknown}; valid names: "
                    f"{sorted(parameters)}."
                )
        for key, value in self.scheduled.items():
            as_schedule(value, key)  # raises on a malformed schedule
        check_not_negative(self.learning_rate, f"Optimizer({name}): learning_rate", NEGATIVE_RATE)

    @property
    def is_factory(self) -> bool:
        return not isinstance(self.transform, optax.GradientTransformation)

    @property
    def scheduled(self) -> dict[str, ScheduleLike]:
        """Every injected hyperparameter (learning rate included), by name."""
        if not self.is_factory:
            return {}
        return {"learning_rate": self.learning_rate, **self.hyperparams}

    def build(self) -> optax.GradientTransformation:
        """The optax transformation, without clipping (:func:`transformation` adds it)."""
        if not self.is_factory:
            return self.transform
        initial = {key: float(initial_value(value, key)) for key, value in self.scheduled.items()}
        return optax.inject_hyperparams(self.transform, hyperparam_dtype=jnp.float32)(**initial)


OptimizerLike: TypeAlias = Optimizer | optax.GradientTransformation


def as_optimizer(value: object, name: str) -> Optimizer:
    """Accepts an :class:`Optimizer` or a built optax transformation."""
    if isinstance(value, Optimizer):
        return value
    if isinstance(value, optax.GradientTransformation):
        return Optimizer(value)
    raise TypeError(
        f"Optimizer {name!r} must be a jl.Optimizer or an optax.GradientTransformation "
        f"(e.g. optax.adam(3e-4)); got {type(value).__name__} {value!r}."
    )


def clipping(optimizer: Optimizer) -> optax.GradientTransformation | None:
    """The optax clipping ``optimizer.grad_clip_by`` names, or ``None`` without ``grad_clip``."""
    if optimizer.grad_clip is None:
        return None
    return {
        "value": optax.clip,
        "norm": _clip_by_leaf_norm,
        "global_norm": optax.clip_by_global_norm,
    }[optimizer.grad_clip_by](optimizer.grad_clip)


def transformation(optimizer: Optimizer, clip: bool = True) -> optax.GradientTransformation:
    """One named optimizer as one optax value: ``chain(clip, inject_hyperparams(factory))``.

    Without ``grad_clip`` it is the (injected) transformation alone, so its
    state is the optax state users know (``opt_state.hyperparams``).

    Args:
      optimizer: the named optimizer.
      clip: ``False`` puts ``optax.identity()`` where the clipping goes, for
        gradients clipped already (:meth:`ModuleOptimizer.clip`); the state is
        the same either way (both are stateless), so one state serves both.

    Example:
      >>> import optax, jaxlearner as jl
      >>> tx = transformation(jl.Optimizer(optax.sgd, learning_rate=0.1, grad_clip=1.0))
      >>> state = tx.init({"w": jnp.zeros(2)})
    """
    clipper = clipping(optimizer)
    inner = optimizer.build()
    if clipper is None:
        return inner
    return optax.chain(clipper if clip else optax.identity(), inner)


def clip_gradients(grads: PyTree, optimizer: Optimizer) -> PyTree:
    """Clips ``grads`` as ``optimizer.grad_clip_by`` says (a no-op without ``grad_clip``)."""
    clip = clipping(optimizer)
    if clip is None:
        return grads
    clipped, _ = clip.update(grads, clip.init(grads))
    return clipped


def _clip_by_leaf_norm(max_norm: float) -> optax.GradientTransformation:
    """Clips each gradient array to L2 norm ``max_norm`` (RLlib's ``grad_clip_by="norm"``)."""

    def clip_leaf(g: jax.Array, _: Any) -> jax.Array:
        norm = jnp.sqrt(jnp.sum(jnp.square(g)))
        return g * jnp.minimum(1.0, max_norm / jnp.maximum(norm, 1e-30)).astype(g.dtype)

    return optax.stateless_with_tree_map(clip_leaf)


def set_scheduled_hyperparams(
    opt_state: optax.OptState, optimizer: Optimizer, counters: dict[str, jax.Array]
) -> optax.OptState:
    """Writes the current value of each scheduled hyperparameter into the optimizer state.

    Constants are left as stored, so a value edited in the state (a sweep)
    stays in force. Pure: returns a new state.
    """
    if not optimizer.scheduled:
        return opt_state

    def refresh(node: Any) -> Any:
        if not isinstance(node, _InjectState):
            return node
        values = dict(node.hyperparams)
        for key, value in optimizer.scheduled.items():
            values[key] = current_value(value, values[key], counters, key)
        return node._replace(hyperparams=values)

    return jax.tree.map(refresh, opt_state, is_leaf=lambda n: isinstance(n, _InjectState))


def learning_rate(opt_state: optax.OptState) -> jax.Array | None:
    """The learning rate stored in an optimizer state, if it was injected; else ``None``."""
    found = [
        node.hyperparams["learning_rate"]
        for node in jax.tree.leaves(opt_state, is_leaf=lambda n: isinstance(n, _InjectState))
        if isinstance(node, _InjectState) and "learning_rate" in node.hyperparams
    ]
    return found[0] if found else None


def label_params(
    params: Params,
    names: Sequence[str],
    param_labels: Callable[[Params], PyTree] | None,
    module_id: str,
) -> PyTree:
    """Labels each param leaf with the name of the optimizer that owns it.

    With one optimizer every leaf gets its name. With several and no
    ``param_labels``, a leaf belongs to the optimizer whose name is the first
    key on its path that names an optimizer (so a model with submodules
    ``actor`` and ``critic`` pairs with optimizers ``actor`` and ``critic``).

    Raises:
      ValueError: when a leaf matches no optimizer or a label names none.
    """
    if len(names) == 1 and param_labels is None:
        return jax.tree.map(lambda _: names[0], params)
    if param_labels is not None:
        labels = param_labels(params)
        unknown = sorted(set(jax.tree.leaves(labels)) - set(names))
        if unknown:
            raise ValueError(
                f"Module {module_id!r}: param_labels produced labels {unknown} that name no "
                f"optimizer; optimizers are {sorted(names)}."
            )
        return jax.tree.map(lambda _, label: label, params, labels)

    unmatched: list[str] = []

    def label(path: tuple[Any, ...], _: Any) -> str | None:
        for entry in path:
            key = str(getattr(entry, "key", getattr(entry, "name", getattr(entry, "idx", ""))))
            if key in names:
                return key
        unmatched.append(jax.tree_util.keystr(path))
        return None

    labels = jax.tree_util.tree_map_with_path(label, params)
    if unmatched:
        raise ValueError(
            f"Module {module_id!r} has optimizers {sorted(names)} but no rule places these "
            f"params: {unmatched[:5]}{' ...' if len(unmatched) > 5 else ''}. Name a submodule "
            "after each optimizer (e.g. an 'actor' and a 'critic' submodule), or pass "
            "ModuleSpec(param_labels=fn) returning a tree of optimizer names."
        )
    return labels


@dataclasses.dataclass(frozen=True, eq=False)
class ModuleOptimizer:
    """A module's named optimizers composed into one optax transformation.

    One optimizer is its :func:`transformation` as is. Several are
    ``optax.partition`` over the param labels (:func:`label_params`): each
    named transformation sees and updates only its own params. Built once
    per learner; the state of each name is kept apart (``opt_states[name]``)
    so it can be read, swept and checkpointed by name.

    A step is RLlib's stages: :meth:`gradient` (one tree from each optimizer's
    gradient) and :meth:`grad_norms`, :meth:`clip`, then :meth:`step` (the
    transformation with its clipping taken out, so nothing is clipped twice).

    Attributes:
      optimizers: the module's optimizers by name.
      param_labels: the spec's ``params -> tree of names`` rule, or ``None``.
      module_id: the module's id (for error messages).
    """

    optimizers: Mapping[str, Optimizer]
    param_labels: Callable[[Params], PyTree] | None
    module_id: str

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(self.optimizers)

    @functools.cached_property
    def transform(self) -> optax.GradientTransformation:
        """The composed transformation, over all of the module's params."""
        transforms = {name: transformation(opt) for name, opt in self.optimizers.items()}
        if len(transforms) == 1:
            return transforms[self.names[0]]
        return optax.partition(transforms, self.labels)

    def labels(self, params: Params) -> PyTree:
        """The name of the optimizer that owns each param leaf."""
        return label_params(params, self.names, self.param_labels, self.module_id)

    def init(self, params: Params) -> dict[str, optax.OptState]:
        """Each named optimizer's initial state, by name (checks the param labels); ``{}``
        without optimizers (a module of a shared optimizer). Compiled as one program: run
        eagerly, each zeros-like of a moment and each hyperparameter compiled on its own (3.5 s
        of a cold ``jaxlearner train dqn`` on 2 cores, beside the first update compiling ahead;
        0.2-0.3 s of ``learner.init`` alone)."""
        if not self.names:
            return {}
        self.labels(params)
        return self._by_name(jax.jit(self.transform.init)(params))

    @functools.cached_property
    def _clip(self) -> optax.GradientTransformation | None:
        """Each optimizer's clipping over its own params; ``None`` when none clips."""
        clips = {name: clipping(opt) for name, opt in self.optimizers.items()}
        if all(clip is None for clip in clips.values()):
            return None
        if len(clips) == 1:
            return clips[self.names[0]]
        identity = optax.identity()
        return optax.partition(
            {name: identity if clip is None else clip for name, clip in clips.items()},
            self.labels,
        )

    @functools.cached_property
    def _unclipped(self) -> optax.GradientTransformation:
        """:attr:`transform` with each clipping replaced by the identity (same state)."""
        transforms = {n: transformation(opt, clip=False) for n, opt in self.optimizers.items()}
        if len(transforms) == 1:
            return transforms[self.names[0]]
        return optax.partition(transforms, self.labels)

    def gradient(self, grads_by_optimizer: Mapping[str, PyTree], params: Params) -> PyTree:
        """One gradient over all params: each leaf from the entry of the optimizer that owns it.

        Args:
          grads_by_optimizer: ``{name: grads over all params}`` (the same tree for
            every name with a shared loss, one per name with per-optimizer losses).
          params: the module's params (for the labels).
        """
        if len(self.names) == 1:
            return grads_by_optimizer[self.names[0]]
        return select_by_label(self.labels(params), {n: grads_by_optimizer[n] for n in self.names})

    def grad_norms(self, grads: PyTree, params: Params) -> dict[str, jax.Array]:
        """``{"grad_norm/NAME": L2 norm}`` of each optimizer's leaves of ``grads``."""
        if len(self.names) == 1:
            return {f"grad_norm/{self.names[0]}": optax.tree.norm(grads)}
        labels = self.labels(params)
        return {f"grad_norm/{n}": _label_norm(grads, labels, n) for n in self.names}

    def clip(self, grads: PyTree, params: Params) -> PyTree:
        """``grads`` clipped as each optimizer's ``grad_clip_by`` says, over its own leaves.

        The clipping :attr:`transform` applies inside its chain, here on its own:
        a ``"global_norm"`` optimizer scales its leaves by their joint norm, not
        by the norm of the whole module. Returns ``grads`` itself when no
        optimizer clips.
        """
        if self._clip is None:
            return grads
        clipped, _ = self._clip.update(grads, self._clip.init(params), params)
        return clipped

    def step(
        self,
        grads: PyTree,
        opt_states: Mapping[str, optax.OptState],
        params: Params,
        counters: Mapping[str, jax.Array],
    ) -> tuple[PyTree, dict[str, optax.OptState], dict[str, jax.Array]]:
        """One step of every named optimizer on gradients clipped already (:meth:`clip`).

        Args:
          grads: one gradient over all params (:meth:`gradient`).
          opt_states: each optimizer's state, by name.
          params: the module's current params.
          counters: the module's counters, for env-step and grad-step schedules.

        Returns:
          ``(updates, new_opt_states, metrics)``: updates for every param;
          metrics hold each optimizer's learning rate when it was injected
          (``learning_rate/NAME``).
        """
        refreshed = {
            n: set_scheduled_hyperparams(opt_states[n], self.optimizers[n], counters)
            for n in self.names
        }
        updates, new_state = self._unclipped.update(grads, self._joined(refreshed), params)
        new_opt_states = self._by_name(new_state)
        metrics = {}
        for name, opt_state in new_opt_states.items():
            rate = learning_rate(opt_state)
            if rate is not None:
                metrics[f"learning_rate/{name}"] = jnp.asarray(rate, jnp.float32)
        return updates, new_opt_states, metrics

    def _by_name(self, state: optax.OptState) -> dict[str, optax.OptState]:
        if isinstance(state, optax.PartitionState):
            return dict(state.inner_states)
        return {self.names[0]: state}

    def _joined(self, opt_states: Mapping[str, optax.OptState]) -> optax.OptState:
        if len(self.names) == 1:
            return opt_states[self.names[0]]
        return optax.PartitionState(inner_states=dict(opt_states))


def _label_norm(grads: PyTree, labels: PyTree, name: str) -> jax.Array:
    """The L2 norm of the gradient leaves labelled ``name``."""
    squares = [
        jnp.sum(jnp.square(g))
        for g, label in zip(jax.tree.leaves(grads), jax.tree.leaves(labels), strict=True)
        if label == name
    ]
    return jnp.sqrt(sum(squares, jnp.zeros((), jnp.float32)))


def select_by_label(labels: PyTree, updates: Mapping[str, PyTree]) -> PyTree:
    """Merges per-optimizer trees: each leaf from the optimizer that owns it."""
    names = list(updates)
    return jax.tree.map(
        lambda label, *leaves: leaves[names.index(label)],
        labels,
        *(updates[name] for name in names),
    )


def owned_leaves(tree: PyTree, labels: PyTree, name: str) -> PyTree:
    """``tree`` with each leaf that optimizer ``name`` does not own (by ``labels``) as ``None``.

    Example:
      >>> owned_leaves({"actor": 1.0, "critic": 2.0}, {"actor": "actor", "critic": "critic"},
      ...              "critic")
      {'actor': None, 'critic': 2.0}
    """
    return jax.tree.map(lambda leaf, label: leaf if label == name else None, tree, labels)
