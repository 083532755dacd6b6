"""Schedules for learning rates and coefficients, evaluated inside the update.

A schedule is a value: a pure function of a counter plus the name of the
counter it reads. The counters live in each module's state
(``ModuleState.grad_steps`` and ``ModuleState.env_steps``), so a scheduled
value is always a function of the state, is recomputed inside the jitted
update, and is checkpointed with everything else.

Anything accepted where a schedule may go (a :data:`ScheduleLike`):

* a number: a constant. It is stored as a traced leaf in the state and never
  overwritten, so it can be swept with ``jax.vmap`` or edited in the state;
* an optax schedule (``count -> value``): evaluated on the module's gradient
  steps, exactly as optax's ``inject_hyperparams`` would;
* an RLlib-style list ``[[t0, v0], [t1, v1], ...]``: a piecewise-linear
  schedule over env steps (see :func:`piecewise_schedule`);
* a :class:`Schedule`, for full control over the counter.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Literal, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.types import ScheduleFn

Counter: TypeAlias = Literal["grad_steps", "env_steps"]
COUNTERS: tuple[str, ...] = ("grad_steps", "env_steps")


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A function of one of the module's counters.

    Attributes:
      fn: ``count -> value``; ``count`` is a scalar int32 array.
      counter: which counter feeds ``fn``: ``"grad_steps"`` (gradient steps
        this module has taken, optax's convention) or ``"env_steps"`` (rows of
        this module's batches trained on, RLlib's convention).

    Example:
      >>> import optax, jaxlearner as jl
      >>> lr = jl.Schedule(optax.linear_schedule(1e-3, 1e-4, 10_000), counter="env_steps")
      >>> round(float(lr(jax.numpy.array(10_000))), 6)
      0.0001
    """

    fn: ScheduleFn
    counter: Counter = "grad_steps"

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"Schedule.fn must be callable (count -> value); got {self.fn!r}.")
        if self.counter not in COUNTERS:
            raise ValueError(f"Schedule.counter must be one of {COUNTERS}; got {self.counter!r}.")

    def __call__(self, count: jax.Array) -> jax.Array:
        return jnp.asarray(self.fn(count), jnp.float32)


ScheduleLike: TypeAlias = float | int | Schedule | ScheduleFn | Sequence[Sequence[float]]


def piecewise_schedule(
    points: Sequence[Sequence[float]], counter: Counter = "env_steps"
) -> Schedule:
    """An RLlib-style piecewise-linear schedule.

    Linear interpolation between consecutive ``[t, value]`` points; the last
    value holds after the last point. As in RLlib the first point must be at
    ``t = 0``.

    Args:
      points: ``[[t0, v0], [t1, v1], ...]`` with ``0 == t0 < t1 < ...``
        integer counts and finite values.
      counter: ``"env_steps"`` (RLlib's default) or ``"grad_steps"``.

    Returns:
      A :class:`Schedule`.

    Raises:
      ValueError: on an empty list, a point that is not a pair of numbers, a
        first point not at 0, counts that do not strictly increase, negative or
        fractional counts, or non-finite values.

    Example:
      >>> import jaxlearner as jl
      >>> lr = jl.piecewise_schedule([[0, 1e-3], [1000, 1e-4]])
      >>> round(float(lr(jax.numpy.array(500))), 6)
      0.00055
    """
    ts, vs = _validate_points(points)
    ts_array = np.asarray(ts, np.float32)
    vs_array = np.asarray(vs, np.float32)

    def fn(count: jax.Array) -> jax.Array:
        return interpolate(jnp.asarray(count, jnp.float32), ts_array, vs_array)

    return Schedule(fn, counter=counter)


@jax.jit
def interpolate(x: jax.Array, xp: jax.Array, fp: jax.Array) -> jax.Array:
    """``jnp.interp(x, xp, fp)``, bit for bit, without a loop in the compiled program.

    ``jnp.interp`` finds the segment with ``searchsorted``'s default binary search, a while
    loop (two iterations for two points) inside every update step that evaluates a schedule;
    on a GPU each iteration is more kernel launches. Here ``x`` is compared with every point
    at once (``method="compare_all"``: a handful of points), then the same arithmetic as
    ``jnp.interp`` (jax 0.10's ``_interp``), compiled as it is (``jnp.interp`` is a jitted
    function too), so the values are equal, not just close.

    Args:
      x: ``[...]`` float32 counts.
      xp: ``[P]`` float32 increasing points, as :func:`piecewise_schedule` validates them.
      fp: ``[P]`` float32 values.

    Returns:
      ``[...]`` float32: linear between the points, ``fp[0]`` before the first and
      ``fp[-1]`` after the last.

    Example:
      >>> import numpy as np
      >>> ts, vs = np.array([0.0, 100.0], np.float32), np.array([1.0, 0.0], np.float32)
      >>> float(interpolate(jax.numpy.float32(25.0), ts, vs))
      0.75
    """
    xp_arr, fp_arr = jnp.asarray(xp), jnp.asarray(fp)
    found = jnp.searchsorted(xp_arr, x, side="right", method="compare_all")
    i = jnp.clip(found, 1, xp_arr.shape[0] - 1)
    df = fp_arr[i] - fp_arr[i - 1]
    dx = xp_arr[i] - xp_arr[i - 1]
    delta = x - xp_arr[i - 1]
    dx0 = jax.lax.abs(dx) <= np.spacing(np.finfo(xp_arr.dtype).eps)
    f = jnp.where(dx0, fp_arr[i - 1], fp_arr[i - 1] + (delta / jnp.where(dx0, 1, dx)) * df)
    f = jnp.where(x < xp_arr[0], fp_arr[0], f)
    return jnp.where(x > xp_arr[-1], fp_arr[-1], f)


def _validate_points(points: object) -> tuple[list[int], list[float]]:
    example = "expected [[t0, v0], [t1, v1], ...] with t0 == 0, e.g. [[0, 1e-3], [10000, 1e-4]]"
    if isinstance(points, str | bytes) or not isinstance(points, Sequence) or not points:
        raise ValueError(f"Malformed piecewise schedule {points!r}: {example}.")
    ts: list[int] = []
    vs: list[float] = []
    for i, point in enumerate(points):
        if (
            isinstance(point, str | bytes)
            or not isinstance(point, Sequence)
            or len(point) != 2
            or not all(_is_number(x) for x in point)
        ):
            raise ValueError(
                f"Malformed piecewise schedule: point {i} is {point!r}, not a pair of "
                f"numbers; {example}."
            )
        t, v = point
        if t < 0 or float(t) != int(t):
            raise ValueError(
                f"Malformed piecewise schedule: point {i} has count {t!r}; counts must be "
                f"non-negative integers; {example}."
            )
        if not math.isfinite(float(v)):
            raise ValueError(f"Malformed piecewise schedule: point {i} has non-finite value {v!r}.")
        if ts and int(t) <= ts[-1]:
            raise ValueError(
                f"Malformed piecewise schedule: counts must strictly increase, but point {i} "
                f"has count {t} after {ts[-1]}."
            )
        ts.append(int(t))
        vs.append(float(v))
    if ts[0] != 0:
        raise ValueError(
            f"Malformed piecewise schedule: the first point must be at count 0, got {ts[0]}; "
            f"{example}."
        )
    return ts, vs


def _is_number(x: object) -> bool:
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool)


def as_schedule(value: ScheduleLike, name: str) -> Schedule | None:
    """Turns a :data:`ScheduleLike` into a :class:`Schedule`, or ``None`` for a constant.

    Args:
      value: see the module docstring for what is accepted.
      name: the hyperparameter's name, used in error messages.

    Returns:
      ``None`` when ``value`` is a constant number, else a :class:`Schedule`.

    Raises:
      TypeError: when ``value`` is none of the accepted forms.
      ValueError: when a piecewise list is malformed.
    """
    if isinstance(value, Schedule):
        return value
    if _is_number(value) or (isinstance(value, np.ndarray | jax.Array) and np.ndim(value) == 0):
        if not math.isfinite(float(value)):
            raise ValueError(f"Hyperparameter {name!r} must be finite; got {value!r}.")
        return None
    if callable(value):
        return Schedule(value, counter="grad_steps")
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        try:
            return piecewise_schedule(value)
        except ValueError as error:
            raise ValueError(f"Hyperparameter {name!r}: {error}") from None
    raise TypeError(
        f"Hyperparameter {name!r} must be a number, an optax schedule (count -> value), "
        f"a piecewise list [[t0, v0], [t1, v1], ...] or a jl.Schedule; got "
        f"{type(value).__name__} {value!r}."
    )


def check_not_negative(value: ScheduleLike, name: str, why: str = "") -> None:
    """Raises unless a :data:`ScheduleLike` stays at or above 0 where that can be known.

    A constant is checked, every point of a piecewise list, and a schedule
    function's value at count 0 (its later values are its own business).

    Args:
      value: the constant or schedule.
      name: what it is, for the message (``"SACConfig.critic_lr"``).
      why: a few words on why a negative value is refused, for the message.

    Raises:
      ValueError: naming ``name``, the value received and the negative value in it.
      TypeError: when ``value`` is no :data:`ScheduleLike` (see :func:`as_schedule`).

    Example:
      >>> check_not_negative([[0, 1e-3], [1000, -1e-4]], "lr")
      Traceback (most recent call last):
      ...
      ValueError: lr must be >= 0; got [[0, 0.001], [1000, -0.0001]], which reaches -0.0001.
    """
    schedule = as_schedule(value, name)
    if schedule is None:
        values, reach = [float(value)], ""  # type: ignore[arg-type]
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        values, reach = [float(v) for _, v in value], ", which reaches {}"
    else:
        values, reach = [float(initial_value(value, name))], ", which starts at {}"
    if min(values) < 0:
        raise ValueError(f"{name} must be >= 0{why}; got {value!r}{reach.format(min(values))}.")


def initial_value(value: ScheduleLike, name: str) -> jax.Array:
    """The value of a :data:`ScheduleLike` at count 0, as a concrete float32 scalar.

    Concrete inside a trace too (the optimizers' initial hyperparameters are Python floats).
    A constant is itself and a piecewise list its first point's value (what
    :func:`interpolate` gives at count 0, bit for bit), both without compiling anything. A
    schedule function runs at count 0 as one small program, compiled once per schedule in
    a process; run op by op (as a callable that cannot be hashed still is), each op is
    compiled on its own: 0.16 s of Anakin's first trace for a piecewise learning rate.

    Example:
      >>> import optax
      >>> initial_value([[0, 0.5], [1000, 0.25]], "lr")
      Array(0.5, dtype=float32)
      >>> float(initial_value(optax.linear_schedule(2.0, 0.0, 100), "lr"))
      2.0
    """
    schedule = as_schedule(value, name)
    with jax.ensure_compile_time_eval():
        if schedule is None:
            return jnp.asarray(value, jnp.float32)
        if isinstance(value, Sequence):
            return jnp.asarray(_first_value(value))
        if not _hashable(schedule):  # a callable object without __hash__: op by op
            return schedule(jnp.zeros((), jnp.int32))
        return _at_count_zero(schedule)


def _hashable(schedule: Schedule) -> bool:
    try:
        hash(schedule)
    except TypeError:
        return False
    return True


def _first_value(points: Sequence[Sequence[float]]) -> np.float32:
    """:func:`interpolate`'s value at count 0, in numpy: the first value plus zero times the
    first slope (the sign of a zero follows IEEE as in the compiled arithmetic)."""
    _, values = _validate_points(points)
    vs = np.asarray(values, np.float32)
    if len(vs) == 1:
        return vs[0]
    return vs[0] + np.float32(0.0) * (vs[1] - vs[0])


@functools.partial(jax.jit, static_argnums=0)
def _at_count_zero(schedule: Schedule) -> jax.Array:
    return schedule(jnp.zeros((), jnp.int32))


def current_value(
    value: ScheduleLike, stored: jax.Array, counters: dict[str, jax.Array], name: str
) -> jax.Array:
    """The value to use now: the schedule at its counter, or the stored constant.

    A constant is read back from the state (``stored``) rather than from the
    config, so that users may sweep or edit it in the state.
    """
    schedule = as_schedule(value, name)
    if schedule is None:
        return stored
    return schedule(counters[schedule.counter]).astype(stored.dtype)
