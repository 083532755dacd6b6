"""Non-gradient updates of a module's state: target networks and KL coefficients.

An additional update is a pure function ``(module_state, metrics) ->
module_state``. Wrapped in :class:`AdditionalUpdate` it also declares when it
runs, the ``extra`` entries and hyperparameters it needs, and the outside values
it takes, so a recipe only lists its updates and the learner initialises what
they use. It runs at one of four points (``after=``):

* ``"grad_step"``: inside the jitted update, after every gradient step, on the
  step's metrics;
* ``"update"``: once per ``update`` call, after its gradient steps, on the
  update's metrics (RLlib's ``after_gradient_based_update``);
* ``"update_start"``: once per ``update`` call, before its first gradient step
  (RLlib's ``before_gradient_based_update``), on ``{"env_steps": the env steps
  the update accounts for}``; the losses see what it wrote;
* ``"additional_update"``: only when :meth:`~jaxlearner.Learner.additional_update`
  calls it, on the values given there (RLlib's ``additional_update(module_ids_to_update,
  **kwargs)``, e.g. a KL sampled outside the learner).

Built-ins: :func:`target_update`, the one target-network rule (a polyak
step or a copy, maybe every ``period`` counts, of all the params or a
selection), with its two common forms :func:`polyak_update` and
:func:`periodic_copy`; and :func:`adaptive_kl_coeff`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, TypeAlias

import jax
import jax.numpy as jnp
import optax

from jaxlearner.core.schedules import COUNTERS, Counter, ScheduleLike, as_schedule
from jaxlearner.core.state import ModuleState, select_tree
from jaxlearner.errors import ReadableKeyError
from jaxlearner.types import Metrics, Params, PyTree

When: TypeAlias = Literal["update", "grad_step", "update_start", "additional_update"]
WHEN: tuple[str, ...] = ("update", "grad_step", "update_start", "additional_update")
UpdateFn: TypeAlias = Callable[[ModuleState, Metrics], ModuleState]


@dataclasses.dataclass(frozen=True)
class AdditionalUpdate:
    """A non-gradient update and what it needs.

    Attributes:
      fn: ``fn(module_state, metrics) -> module_state``, pure. ``metrics`` are
        the module's metrics: of the step just taken (``after="grad_step"``)
        or reduced over the whole update (``after="update"``); for
        ``after="update_start"``, ``{"env_steps": int32}``, the env steps the update
        accounts for; for ``after="additional_update"``, the values named in
        ``takes``, as :meth:`~jaxlearner.Learner.additional_update` got them.
      after: when it runs: ``"update"`` (once per ``update`` call, after its
        gradient steps), ``"grad_step"``, ``"update_start"`` (once per ``update``
        call, before its gradient steps) or ``"additional_update"`` (only when
        :meth:`~jaxlearner.Learner.additional_update` asks).
      init_extra: ``params -> {name: pytree}``, entries added to the module's
        ``extra`` state at init (an entry the spec already sets is kept).
      hyperparams: coefficients this update reads from
        ``module_state.hyperparams``, with their defaults or schedules.
      takes: the names of the outside values ``fn`` reads (``after="additional_update"``
        only); :meth:`~jaxlearner.Learner.additional_update` must be given each.

    Raises:
      TypeError, ValueError: for a non-callable ``fn``, an unknown ``after``, or
        ``takes`` that are not distinct non-empty strings or go with another ``after``.

    Example:
      >>> import jaxlearner as jl
      >>> def decay_noise(module, metrics):
      ...     return module.replace(extra={**module.extra, "noise": module.extra["noise"] * 0.99})
      >>> update = jl.AdditionalUpdate(decay_noise, init_extra=lambda params: {"noise": 1.0})
      >>> def set_beta(module, values):   # run by learner.additional_update(state, beta=...)
      ...     return module.replace(extra={**module.extra, "beta": values["beta"]})
      >>> outside = jl.AdditionalUpdate(set_beta, after="additional_update", takes=("beta",),
      ...                               init_extra=lambda params: {"beta": 0.0})
    """

    fn: UpdateFn
    after: When = "update"
    init_extra: Callable[[Params], Mapping[str, PyTree]] | None = None
    hyperparams: Mapping[str, ScheduleLike] = dataclasses.field(default_factory=dict)
    takes: Sequence[str] = ()

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"AdditionalUpdate.fn must be callable; got {self.fn!r}.")
        if self.after not in WHEN:
            raise ValueError(f"AdditionalUpdate.after must be one of {WHEN}; got {self.after!r}.")
        object.__setattr__(self, "hyperparams", dict(self.hyperparams))
        object.__setattr__(self, "takes", _check_takes(self.takes, self.after))


def _check_takes(takes: object, after: str) -> tuple[str, ...]:
    if isinstance(takes, str) or not isinstance(takes, Sequence):
        hint = f" (did you mean ({takes!r},)?)" if isinstance(takes, str) else ""
        raise TypeError(
            f"AdditionalUpdate.takes must be a sequence of value names; got {takes!r}{hint}."
        )
    names = tuple(takes)
    keywords = all(isinstance(n, str) and n.isidentifier() for n in names)
    if not keywords or len(set(names)) != len(names):
        raise ValueError(
            "AdditionalUpdate.takes must be distinct names usable as keywords of "
            f"learner.additional_update; got {names!r}."
        )
    reserved = sorted(set(names) & {"self", "state", "module_ids"})
    if reserved:
        raise ValueError(
            f"AdditionalUpdate.takes names {reserved}, which learner.additional_update takes "
            "itself; choose other names."
        )
    if names and after != "additional_update":
        raise ValueError(
            f"AdditionalUpdate.takes names outside values {list(names)}, which only "
            f"learner.additional_update passes; use after='additional_update' (got {after!r})."
        )
    return names


def as_additional_update(value: object) -> AdditionalUpdate:
    """A plain callable becomes an update that runs once per ``update`` call."""
    if isinstance(value, AdditionalUpdate):
        return value
    if callable(value):
        return AdditionalUpdate(value)
    raise TypeError(
        "An additional update must be a jl.AdditionalUpdate or a callable "
        f"(module_state, metrics) -> module_state; got {type(value).__name__} {value!r}."
    )


def target_update(
    tau: ScheduleLike,
    *,
    period: int | None = None,
    counter: Counter = "grad_steps",
    after: When = "grad_step",
    target: str = "target_params",
    select: Callable[[Params], PyTree] | None = None,
    hyperparam: str | None = "tau",
) -> AdditionalUpdate:
    """A target network's update: ``target <- tau * source + (1 - tau) * target``, maybe periodic.

    One rule covers the target networks of the built-in algorithms: a polyak
    step after every gradient step (SAC, ``select`` picking the critics), a
    hard copy (``tau=1``) every ``period`` env steps (DQN), a polyak step every
    ``period`` env steps (DQN with ``tau < 1``), or a polyak step every
    ``period`` gradient steps (TD3's delayed targets). ``source`` is
    ``select(params)``, all the params by default; the target starts as a copy
    of it in ``extra[target]``.

    ``tau`` is the traced hyperparameter ``hyperparams[hyperparam]``, so a
    schedule, a sweep (``jax.vmap`` over the state) or an edit of the state
    changes it without recompiling. With ``hyperparam=None`` it is a constant
    closed over instead, and the module declares no hyperparameter
    (:func:`periodic_copy`'s hard copy, ``tau=1``, is written so).

    With a ``period``, the update runs when ``counter - last >= period`` and
    then remembers ``last = counter`` in ``extra[target + "_last_update"]``
    (an int32, 0 at init): RLlib's DQN rule, which holds for counters that
    advance by more than one (env steps come in batches), where optax's
    ``periodic_update`` (``counter % period == 0``) would miss the multiples.
    Without a period it runs every time (and keeps no count).

    Args:
      tau: the step size in ``[0, 1]``, a constant or a schedule; ``1`` copies.
        A number when ``hyperparam`` is ``None``.
      period: counts between updates (a positive int), or ``None``: every time.
      counter: the module counter ``period`` counts, ``"grad_steps"`` or
        ``"env_steps"``.
      after: ``"grad_step"`` (after every gradient step) or ``"update"``
        (once per ``update`` call).
      target: the ``extra`` entry holding the target params.
      select: ``params -> source``, the part of the params the target follows
        (e.g. ``lambda p: p["params"]["critic"]``); ``None`` for all of them.
      hyperparam: the name of the hyperparameter holding ``tau``, or ``None``
        for a constant ``tau``.

    Returns:
      An :class:`AdditionalUpdate` that declares ``extra[target]`` (and the
      last update's count with a period) and the ``tau`` hyperparameter.

    Raises:
      ValueError: on a ``tau`` outside ``[0, 1]`` or not a schedule, a
        non-positive ``period``, an unknown ``counter`` or ``after``.
      TypeError: on a non-callable ``select``, an empty or non-string
        ``target`` or ``hyperparam``, or a scheduled ``tau`` without ``hyperparam``.

    Example:
      >>> import jaxlearner as jl
      >>> # TD3's delayed targets: a polyak step every 2 gradient steps.
      >>> update = jl.target_update(0.005, period=2, counter="grad_steps")
      >>> # SAC's target critics: a polyak step of the critics after every step.
      >>> update = jl.target_update(0.005, target="target_critic",
      ...                           select=lambda params: params["params"]["critic"])
    """
    _check_target_update(tau, period, counter, target, select, hyperparam)
    source = select if select is not None else _all_params
    last_key = f"{target}_last_update"

    def stepped(module: ModuleState) -> PyTree:
        new = source(module.params)
        if hyperparam is None and tau == 1:
            return new  # a copy, exact whatever the old target holds
        step_size = tau if hyperparam is None else module.hyperparams[hyperparam]
        return optax.incremental_update(new, module.extra[target], step_size)

    def fn(module: ModuleState, metrics: Metrics) -> ModuleState:
        del metrics
        if period is None:
            return module.replace(extra={**module.extra, target: stepped(module)})
        now, last = module.counters[counter], module.extra[last_key]
        due = now - last >= period
        new_target = select_tree(due, stepped(module), module.extra[target])
        last = jnp.where(due, now, last)
        return module.replace(extra={**module.extra, target: new_target, last_key: last})

    def init_extra(params: Params) -> dict[str, PyTree]:
        extra = {target: copy_tree(source(params))}
        if period is not None:
            extra[last_key] = jnp.zeros((), jnp.int32)
        return extra

    return AdditionalUpdate(
        fn,
        after=after,
        init_extra=init_extra,
        hyperparams={} if hyperparam is None else {hyperparam: tau},
    )


@jax.jit
def copy_tree(tree: PyTree) -> PyTree:
    """A copy of every leaf of ``tree`` in new buffers, compiled as one program (copied
    eagerly, each leaf's shape compiled its own copy: 0.05-1 s of a cold ``jaxlearner train
    dqn``, the most while the first update compiled ahead on the other core).

    Example:
      >>> params = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}
      >>> copy = copy_tree(params)
      >>> bool((copy["w"] == params["w"]).all()), copy["w"] is params["w"]
      (True, False)
    """
    return jax.tree.map(jnp.copy, tree)


def _all_params(params: Params) -> Params:
    return params


def _check_target_update(
    tau: ScheduleLike,
    period: int | None,
    counter: str,
    target: str,
    select: Callable[[Params], PyTree] | None,
    hyperparam: str | None,
) -> None:
    """Raises on what :func:`target_update` cannot use, before anything is traced."""
    _check_fraction(tau, "tau")
    if hyperparam is None:
        if isinstance(tau, bool) or not isinstance(tau, int | float):
            raise TypeError(
                f"target_update with hyperparam=None needs a constant tau (a number); got "
                f"{tau!r}. Name a hyperparameter (e.g. hyperparam='tau') to schedule it."
            )
    elif not isinstance(hyperparam, str) or not hyperparam:
        raise TypeError(
            f"target_update hyperparam must be a non-empty str or None; got {hyperparam!r}."
        )
    else:
        as_schedule(tau, hyperparam)
    if period is not None and (
        isinstance(period, bool) or not isinstance(period, int) or period <= 0
    ):
        raise ValueError(f"target_update period must be a positive int or None; got {period!r}.")
    if counter not in COUNTERS:
        raise ValueError(f"target_update counter must be one of {COUNTERS}; got {counter!r}.")
    if not isinstance(target, str) or not target:
        raise TypeError(
            f"target_update target must be a non-empty str (an extra entry); got {target!r}."
        )
    if select is not None and not callable(select):
        raise TypeError(
            f"target_update select must be a callable params -> params or None; got {select!r}."
        )


def polyak_update(
    tau: ScheduleLike = 0.005, target: str = "target_params", after: When = "grad_step"
) -> AdditionalUpdate:
    """Polyak averaging of a target network: ``target <- tau * params + (1 - tau) * target``.

    ``tau`` is the traced hyperparameter ``"tau"`` (schedulable, sweepable).
    The target starts as a copy of the params in ``extra[target]``. This is
    ``target_update(tau, target=target, after=after)``.

    Args:
      tau: the step size of the average, in ``[0, 1]``.
      target: the ``extra`` entry holding the target params.
      after: ``"grad_step"`` (SAC's convention) or ``"update"``.

    Returns:
      An :class:`AdditionalUpdate`.

    Example:
      >>> spec = jl.ModuleSpec(model, loss, optax.adam(3e-4),
      ...                      additional_updates=[jl.polyak_update(tau=0.005)])  # doctest: +SKIP
    """
    return target_update(tau, target=target, after=after)


def periodic_copy(
    period: int, counter: Counter = "env_steps", target: str = "target_params"
) -> AdditionalUpdate:
    """Hard copy of the params into a target network every ``period`` counts.

    RLlib's DQN rule: after an update, if ``counter - last_copy >= period``,
    copy and remember ``last_copy = counter``. The last copy's count is kept in
    ``extra[target + "_last_update"]``. This is :func:`target_update` with a
    constant ``tau=1`` (no hyperparameter) after each ``update`` call.

    Args:
      period: counts between copies (RLlib's ``target_network_update_freq``).
      counter: ``"env_steps"`` (RLlib's default) or ``"grad_steps"``.
      target: the ``extra`` entry holding the target params.

    Returns:
      An :class:`AdditionalUpdate` that runs once per ``update`` call.

    Raises:
      ValueError: on a non-positive period or an unknown counter.
    """
    return target_update(
        1.0, period=period, counter=counter, after="update", target=target, hyperparam=None
    )


def adaptive_kl_coeff(
    kl_coeff: float = 0.2,
    kl_target: ScheduleLike = 0.01,
    metric: str = "mean_kl",
    after: Literal["update", "additional_update"] = "update",
) -> AdditionalUpdate:
    """RLlib's adaptive KL coefficient for PPO's KL penalty.

    With ``kl`` the mean KL (``metrics[metric]``): ``kl > 2 * kl_target``
    multiplies the coefficient by 1.5, and ``kl < 0.5 * kl_target`` multiplies
    it by 0.5. The coefficient lives in ``extra["kl_coeff"]``; the target is the
    hyperparameter ``"kl_target"``.

    Args:
      kl_coeff: initial coefficient.
      kl_target: the target KL, a constant or schedule.
      metric: the loss metric holding the mean KL; with
        ``after="additional_update"``, the name of the value it takes.
      after: ``"update"``: after each update, on the update's mean KL;
        ``"additional_update"``: only on a KL given from outside (RLlib's
        ``additional_update(sampled_kl_values=...)``), as
        ``learner.additional_update(state, **{metric: kl})``.

    Returns:
      An :class:`AdditionalUpdate`.

    Example:
      >>> import jaxlearner as jl
      >>> update = jl.adaptive_kl_coeff(kl_coeff=0.2, kl_target=0.01)
      >>> outside = jl.adaptive_kl_coeff(metric="sampled_kl", after="additional_update")
    """
    if not isinstance(kl_coeff, int | float) or kl_coeff < 0:
        raise ValueError(f"kl_coeff must be a non-negative number; got {kl_coeff!r}.")
    if after not in ("update", "additional_update"):
        raise ValueError(
            f"adaptive_kl_coeff after must be 'update' or 'additional_update'; got {after!r}."
        )

    def fn(module: ModuleState, metrics: Metrics) -> ModuleState:
        if metric not in metrics:
            raise ReadableKeyError(
                f"adaptive_kl_coeff reads metrics[{metric!r}], which the loss does not return; "
                f"it returns {sorted(metrics)}."
            )
        kl = metrics[metric]
        target = module.hyperparams["kl_target"]
        coeff = module.extra["kl_coeff"]
        factor = jnp.where(kl > 2.0 * target, 1.5, jnp.where(kl < 0.5 * target, 0.5, 1.0))
        return module.replace(extra={**module.extra, "kl_coeff": coeff * factor})

    return AdditionalUpdate(
        fn,
        after=after,
        init_extra=lambda params: {"kl_coeff": jnp.asarray(kl_coeff, jnp.float32)},
        hyperparams={"kl_target": kl_target},
        takes=(metric,) if after == "additional_update" else (),
    )


def _check_fraction(value: ScheduleLike, name: str) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool) and not 0 <= value <= 1:
        raise ValueError(f"{name} must lie in [0, 1]; got {value!r}.")
