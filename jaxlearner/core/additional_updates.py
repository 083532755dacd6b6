"""Non-gradient updates of a module's state: target networks and KL coefficients.

An additional update is a pure function ``(module_state, metrics) ->
module_state`` that runs inside the jitted update, either after every
gradient step or once after each ``update`` call (RLlib's
``after_gradient_based_update``). Wrapped in :class:`AdditionalUpdate` it
also declares the ``extra`` entries and hyperparameters it needs, so a recipe
only lists its updates and the learner initialises what they use.

Built-ins: :func:`polyak_update`, :func:`periodic_copy`,
:func:`adaptive_kl_coeff`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Literal, TypeAlias

import jax
import jax.numpy as jnp
import optax

from jaxlearner.core.schedules import COUNTERS, Counter, ScheduleLike
from jaxlearner.core.state import ModuleState
from jaxlearner.errors import ReadableKeyError
from jaxlearner.types import Metrics, Params, PyTree

When: TypeAlias = Literal["update", "grad_step"]
WHEN: tuple[str, ...] = ("update", "grad_step")
UpdateFn: TypeAlias = Callable[[ModuleState, Metrics], ModuleState]


@dataclasses.dataclass(frozen=True)
class AdditionalUpdate:
    """A non-gradient update and what it needs.

    Attributes:
      fn: ``fn(module_state, metrics) -> module_state``, pure. ``metrics`` are
        the module's metrics: of the step just taken (``after="grad_step"``)
        or reduced over the whole update (``after="update"``).
      after: ``"update"`` (once per ``update`` call) or ``"grad_step"``.
      init_extra: ``params -> {name: pytree}``, entries added to the module's
        ``extra`` state at init (an entry the spec already sets is kept).
      hyperparams: coefficients this update reads from
        ``module_state.hyperparams``, with their defaults or schedules.

    Example:
      >>> def decay_noise(module, metrics):
      ...     return module.replace(extra={**module.extra, "noise": module.extra["noise"] * 0.99})
      >>> update = jl.AdditionalUpdate(decay_noise, init_extra=lambda params: {"noise": 1.0})
    """

    fn: UpdateFn
    after: When = "update"
    init_extra: Callable[[Params], Mapping[str, PyTree]] | None = None
    hyperparams: Mapping[str, ScheduleLike] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"AdditionalUpdate.fn must be callable; got {self.fn!r}.")
        if self.after not in WHEN:
            raise ValueError(f"AdditionalUpdate.after must be one of {WHEN}; got {self.after!r}.")
        object.__setattr__(self, "hyperparams", dict(self.hyperparams))


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


def _copy_params(params: Params) -> PyTree:
    return jax.tree.map(jnp.array, params)


def polyak_update(
    tau: ScheduleLike = 0.005, target: str = "target_params", after: When = "grad_step"
) -> AdditionalUpdate:
    """Polyak averaging of a target network: ``target <- tau * params + (1 - tau) * target``.

    ``tau`` is the traced hyperparameter ``"tau"`` (schedulable, sweepable).
    The target starts as a copy of the params in ``extra[target]``.

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
    _check_fraction(tau, "tau")

    def fn(module: ModuleState, metrics: Metrics) -> ModuleState:
        del metrics
        new_target = optax.incremental_update(
            module.params, module.extra[target], module.hyperparams["tau"]
        )
        return module.replace(extra={**module.extra, target: new_target})

    return AdditionalUpdate(
        fn,
        after=after,
        init_extra=lambda params: {target: _copy_params(params)},
        hyperparams={"tau": tau},
    )


def periodic_copy(
    period: int, counter: Counter = "env_steps", target: str = "target_params"
) -> AdditionalUpdate:
    """Hard copy of the params into a target network every ``period`` counts.

    RLlib's DQN rule: after an update, if ``counter - last_copy >= period``,
    copy and remember ``last_copy = counter``. The last copy's count is kept in
    ``extra[target + "_last_update"]``.

    Args:
      period: counts between copies (RLlib's ``target_network_update_freq``).
      counter: ``"env_steps"`` (RLlib's default) or ``"grad_steps"``.
      target: the ``extra`` entry holding the target params.

    Returns:
      An :class:`AdditionalUpdate` that runs once per ``update`` call.

    Raises:
      ValueError: on a non-positive period or an unknown counter.
    """
    if isinstance(period, bool) or not isinstance(period, int) or period <= 0:
        raise ValueError(f"periodic_copy period must be a positive int; got {period!r}.")
    if counter not in COUNTERS:
        raise ValueError(f"periodic_copy counter must be one of {COUNTERS}; got {counter!r}.")
    last_key = f"{target}_last_update"

    def fn(module: ModuleState, metrics: Metrics) -> ModuleState:
        del metrics
        now = module.counters[counter]
        due = now - module.extra[last_key] >= period
        new_target = jax.tree.map(
            lambda p, t: jnp.where(due, p, t), module.params, module.extra[target]
        )
        last = jnp.where(due, now, module.extra[last_key])
        return module.replace(extra={**module.extra, target: new_target, last_key: last})

    return AdditionalUpdate(
        fn,
        after="update",
        init_extra=lambda params: {
            target: _copy_params(params),
            last_key: jnp.zeros((), jnp.int32),
        },
    )


def adaptive_kl_coeff(
    kl_coeff: float = 0.2, kl_target: ScheduleLike = 0.01, metric: str = "mean_kl"
) -> AdditionalUpdate:
    """RLlib's adaptive KL coefficient for PPO's KL penalty.

    After each update, with ``kl`` the update's mean KL (``metrics[metric]``):
    ``kl > 2 * kl_target`` multiplies the coefficient by 1.5, and
    ``kl < 0.5 * kl_target`` multiplies it by 0.5. The coefficient lives in
    ``extra["kl_coeff"]``; the target is the hyperparameter ``"kl_target"``.

    Args:
      kl_coeff: initial coefficient.
      kl_target: the target KL, a constant or schedule.
      metric: the loss metric holding the mean KL.

    Returns:
      An :class:`AdditionalUpdate` that runs once per ``update`` call.

    Example:
      >>> update = jl.adaptive_kl_coeff(kl_coeff=0.2, kl_target=0.01)
    """
    if not isinstance(kl_coeff, int | float) or kl_coeff < 0:
        raise ValueError(f"kl_coeff must be a non-negative number; got {kl_coeff!r}.")

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
        after="update",
        init_extra=lambda params: {"kl_coeff": jnp.asarray(kl_coeff, jnp.float32)},
        hyperparams={"kl_target": kl_target},
    )


def _check_fraction(value: ScheduleLike, name: str) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool) and not 0 <= value <= 1:
        raise ValueError(f"{name} must lie in [0, 1]; got {value!r}.")
