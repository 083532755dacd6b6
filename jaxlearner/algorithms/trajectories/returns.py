"""Return and advantage estimates over ``[T, B]`` rollouts with gymnasium's episode ends.

Row ``t`` of every input comes from one ``env.step`` (rlax's naming):

* ``v_tm1[t]``: value of the observation the action was taken in;
* ``r_t[t]``: the reward that step returned;
* ``v_t[t]``: value of the observation that step returned (the *next*
  observation). For a truncated episode this must be the value of the
  episode's final observation, not of the reset observation that follows;
* ``terminated[t]``: the episode ended in a terminal state; there is nothing
  to bootstrap from, ``v_t[t]`` is ignored;
* ``truncated[t]``: the episode was cut (time limit); ``v_t[t]`` is
  bootstrapped from, but no estimate reaches past it into the next episode.

The end of the rollout (row ``T - 1``) is treated like a truncation: its
``v_t`` is bootstrapped from. Rows are independent along ``B`` (and any
further trailing axes).

With gymnasium's default ``NEXT_STEP`` autoreset, the step after an episode
end is a reset step (action ignored, reward 0): its row gets a meaningless
estimate, which does not leak into the episode before it; mask it out of the
loss.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

BACKWARD_UNROLL = 16
"""Time steps per iteration of the backward scans on GPU and TPU (purejaxrl's ``unroll=16``).

Each step is a few elementwise operations on ``[B]`` rows; one step per loop
iteration made a GPU launch three tiny kernels per step from the host
(benchmarks/README.md, "Third sitting: the kernel-level profile"). The same
operations in the same order; XLA may fuse a rollout of 16 steps or fewer,
unrolled whole, differently (V-trace then within an ulp). On the CPU, where a
loop's iterations cost no round trip, the scans keep one step per iteration:
there the unroll ran no faster and compiled about 0.5 s longer in Anakin's
program (benchmarks/README.md, "Issue 24 item 5: compile time against the
reference, fresh processes"). The choice is made when the program is lowered
(``lax.platform_dependent``).
"""


def gae(
    r_t: ArrayLike,
    v_tm1: ArrayLike,
    v_t: ArrayLike,
    terminated: ArrayLike,
    truncated: ArrayLike,
    gamma: ArrayLike,
    lambda_: ArrayLike,
    stop_target_gradients: bool = True,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation (Schulman et al. 2016, https://arxiv.org/abs/1506.02438).

    With ``done = terminated | truncated``, computed backwards in time by a
    reverse ``lax.scan``::

        delta[t] = r_t[t] + gamma * (1 - terminated[t]) * v_t[t] - v_tm1[t]
        A[t]     = delta[t] + gamma * lambda_ * (1 - done[t]) * A[t + 1],   A[T] = 0
        target[t] = A[t] + v_tm1[t]

    So a terminated step does not bootstrap, a truncated step bootstraps on
    the final observation's value ``v_t[t]`` and cuts the trace, and the
    last row bootstraps on ``v_t[T - 1]``. ``lambda_ = 1`` gives discounted
    Monte-Carlo returns (bootstrapped at truncations) minus ``v_tm1``;
    ``lambda_ = 0`` gives one-step TD errors.

    Args:
      r_t: ``[T, B]`` rewards.
      v_tm1: ``[T, B]`` values of the observations the actions were taken in.
      v_t: ``[T, B]`` values of the next observations (of the final
        observation at a truncation; anything finite at a termination).
      terminated: ``[T, B]`` bool (or 0/1) terminal flags.
      truncated: ``[T, B]`` bool (or 0/1) truncation flags.
      gamma: discount in ``[0, 1]``, a scalar (may be traced).
      lambda_: GAE's lambda in ``[0, 1]``, a scalar (may be traced).
      stop_target_gradients: wrap both outputs in ``lax.stop_gradient``
        (rlax's default), so a loss using them gets no gradient through them.

    Returns:
      ``(advantages, value_targets)``, each ``[T, B]`` in the dtype of the
      values (at least float32); ``value_targets = advantages + v_tm1``.

    Raises:
      ValueError: when the inputs' shapes differ or are scalars, when ``gamma``
        or ``lambda_`` is not a scalar, or when a Python or NumPy ``gamma`` or
        ``lambda_`` lies outside ``[0, 1]`` (JAX arrays are not checked).

    Example:
      >>> r = jnp.ones((3, 1)); v = jnp.zeros((3, 1)); no = jnp.zeros((3, 1), bool)
      >>> advantages, targets = gae(r, v, v, no, no, gamma=0.5, lambda_=1.0)
      >>> advantages[:, 0].tolist()              # 1 + 0.5 + 0.25, 1 + 0.5, 1
      [1.75, 1.5, 1.0]
    """
    r_t, v_tm1, v_t = (jnp.asarray(x) for x in (r_t, v_tm1, v_t))
    terminated, truncated = jnp.asarray(terminated), jnp.asarray(truncated)
    _check_shapes(
        "gae",
        r_t=r_t,
        v_tm1=v_tm1,
        v_t=v_t,
        terminated=terminated,
        truncated=truncated,
    )
    _check_fraction("gae", gamma=gamma, lambda_=lambda_)
    dtype = jnp.result_type(r_t, v_tm1, v_t, jnp.float32)
    terminal = terminated.astype(bool)
    not_terminated = 1.0 - terminal.astype(dtype)
    not_done = 1.0 - (terminal | truncated.astype(bool)).astype(dtype)
    delta = r_t.astype(dtype) + gamma * not_terminated * v_t.astype(dtype) - v_tm1.astype(dtype)
    trace = jnp.asarray(gamma, dtype) * jnp.asarray(lambda_, dtype) * not_done

    def backward(next_advantage: jax.Array, step: tuple[jax.Array, jax.Array]) -> tuple:
        delta_t, trace_t = step
        advantage = delta_t + trace_t * next_advantage
        return advantage, advantage

    advantages = _backward_scan(backward, jnp.zeros_like(delta[0]), (delta, trace))
    targets = advantages + v_tm1.astype(dtype)
    if stop_target_gradients:
        return jax.lax.stop_gradient(advantages), jax.lax.stop_gradient(targets)
    return advantages, targets


class VTraceOutput(NamedTuple):
    """V-trace's value targets and policy-gradient advantages.

    Attributes:
      vs: ``[T, B]`` V-trace value targets ``v_s``, the regression targets of
        the critic.
      pg_advantages: ``[T, B]``
        ``min(clip_pg_rho_threshold, rho_s) * (q_s - v_tm1[s])``, the
        advantages of the actor's policy-gradient loss.
    """

    vs: jax.Array
    pg_advantages: jax.Array


def vtrace(
    v_tm1: ArrayLike,
    v_t: ArrayLike,
    r_t: ArrayLike,
    discount_t: ArrayLike,
    log_rhos: ArrayLike,
    truncated: ArrayLike | None = None,
    lambda_: ArrayLike = 1.0,
    clip_rho_threshold: ArrayLike | None = 1.0,
    clip_pg_rho_threshold: ArrayLike | None = 1.0,
    stop_target_gradients: bool = True,
) -> VTraceOutput:
    """V-trace off-policy value targets and advantages (Espeholt et al. 2018, https://arxiv.org/abs/1802.01561).

    For actions drawn by a behaviour policy ``mu`` and a learner policy
    ``pi``, with ``rho_s = exp(log_rhos[s]) = pi(a_s|x_s) / mu(a_s|x_s)``,
    the clipped ratios ``rho_bar_s = min(clip_rho_threshold, rho_s)`` and
    ``c_s = lambda_ * min(1, rho_s)`` (IMPALA's ``c_bar = 1``; ``lambda_`` as
    in rlax), computed backwards in time by a reverse ``lax.scan``::

        delta[s] = rho_bar_s * (r_t[s] + discount_t[s] * v_t[s] - v_tm1[s])
        vs[s]    = v_tm1[s] + delta[s]
                   + discount_t[s] * c_s * (1 - truncated[s]) * (vs[s + 1] - v_tm1[s + 1])

    with the trace cut at the last row. This is the paper's equation (1),
    ``vs[s] = V(x_s) + sum_t discount^(t - s) (prod_{i<t} c_i) delta[t]``.
    The policy-gradient advantage bootstraps on the next target::

        q[s] = r_t[s] + discount_t[s] * (lambda_ * vs[s + 1] + (1 - lambda_) * v_tm1[s + 1])
        pg_advantages[s] = min(clip_pg_rho_threshold, rho_s) * (q[s] - v_tm1[s])

    where a truncated row and the last row use ``v_t[s]`` in place of the
    bracket. Episode ends follow :func:`gae`: a termination is
    ``discount_t[s] = 0`` (no bootstrap, no trace through it); a truncation
    bootstraps on the final observation's value ``v_t[s]`` and cuts the
    trace. On-policy (``log_rhos = 0``) ``vs`` and ``pg_advantages`` are
    :func:`gae`'s targets and advantages with the same ``lambda_``.

    Args:
      v_tm1: ``[T, B]`` values ``V(x_s)`` of the observations the actions were
        taken in.
      v_t: ``[T, B]`` values of the next observations (of the final
        observation at a truncation; anything finite at a termination). Inside
        an episode ``v_t[s]`` is ``v_tm1[s + 1]``; the last row is the
        bootstrap value.
      r_t: ``[T, B]`` rewards.
      discount_t: ``[T, B]`` discounts, ``gamma * (1 - terminated)``.
      log_rhos: ``[T, B]`` log importance ratios ``log pi(a|x) - log mu(a|x)``
        of the actions taken.
      truncated: ``[T, B]`` bool (or 0/1) truncation flags, or ``None`` for no
        truncations.
      lambda_: trace coefficient in ``[0, 1]``, a scalar (may be traced).
      clip_rho_threshold: ``rho_bar``, a positive scalar (may be traced), or
        ``None`` for no clipping of ``rho`` in ``delta``.
      clip_pg_rho_threshold: the clip of ``rho`` in the advantages, a positive
        scalar (may be traced) or ``None``.
      stop_target_gradients: wrap both outputs in ``lax.stop_gradient``, as
        IMPALA's reference does (rlax stops the targets and leaves the
        advantages to its policy-gradient loss); so no loss sends gradients
        through the targets into the critic or the importance ratios.

    Returns:
      A :class:`VTraceOutput` of ``[T, B]`` arrays in the dtype of the inputs
      (at least float32).

    Raises:
      ValueError: when the inputs' shapes differ or are scalars, when a
        coefficient is not a scalar, when a Python or NumPy ``lambda_`` lies
        outside ``[0, 1]``, or a Python or NumPy clip threshold is not positive
        (JAX arrays are not checked).

    Example:
      >>> v = jnp.zeros((2, 1)); r = jnp.ones((2, 1)); discount = jnp.full((2, 1), 0.5)
      >>> log_rhos = jnp.log(jnp.asarray([[2.0], [0.5]]))   # rho_bar = c = [1, 0.5]
      >>> out = vtrace(v, v, r, discount, log_rhos)
      >>> out.vs[:, 0].tolist()              # [1 + 0.5 * 1 * 0.5, 0.5 * 1]
      [1.25, 0.5]
      >>> out.pg_advantages[:, 0].tolist()   # [1 * (1 + 0.5 * 0.5), 0.5 * 1]
      [1.25, 0.5]
    """
    v_tm1, v_t, r_t = (jnp.asarray(x) for x in (v_tm1, v_t, r_t))
    discount_t, log_rhos = jnp.asarray(discount_t), jnp.asarray(log_rhos)
    truncated = jnp.zeros(v_tm1.shape, bool) if truncated is None else jnp.asarray(truncated)
    _check_shapes(
        "vtrace",
        v_tm1=v_tm1,
        v_t=v_t,
        r_t=r_t,
        discount_t=discount_t,
        log_rhos=log_rhos,
        truncated=truncated,
    )
    _check_fraction("vtrace", lambda_=lambda_)
    _check_threshold(
        "vtrace", clip_rho_threshold=clip_rho_threshold, clip_pg_rho_threshold=clip_pg_rho_threshold
    )
    dtype = jnp.result_type(v_tm1, v_t, r_t, discount_t, log_rhos, jnp.float32)
    v_tm1, v_t, r_t, discount_t = (x.astype(dtype) for x in (v_tm1, v_t, r_t, discount_t))
    lambda_ = jnp.asarray(lambda_, dtype)
    rhos = jnp.exp(log_rhos.astype(dtype))
    # The trace continues into row s + 1 unless row s is truncated or is the last row.
    continues = 1.0 - truncated.astype(bool).astype(dtype)
    continues = continues.at[-1].set(0.0)
    deltas = _clip(rhos, clip_rho_threshold) * (r_t + discount_t * v_t - v_tm1)
    traces = discount_t * lambda_ * jnp.minimum(1.0, rhos) * continues

    def backward(next_error: jax.Array, step: tuple[jax.Array, jax.Array]) -> tuple:
        delta, trace = step
        error = delta + trace * next_error
        return error, error

    errors = _backward_scan(backward, jnp.zeros_like(deltas[0]), (deltas, traces))
    vs = errors + v_tm1
    next_vs, next_values = (jnp.concatenate([x[1:], v_t[-1:]]) for x in (vs, v_tm1))
    bootstrap = jnp.where(continues > 0, lambda_ * next_vs + (1.0 - lambda_) * next_values, v_t)
    q = r_t + discount_t * bootstrap
    pg_advantages = _clip(rhos, clip_pg_rho_threshold) * (q - v_tm1)
    if stop_target_gradients:
        return VTraceOutput(jax.lax.stop_gradient(vs), jax.lax.stop_gradient(pg_advantages))
    return VTraceOutput(vs, pg_advantages)


class NStepRewards(NamedTuple):
    """Discounted reward sums of n-step transitions and how to bootstrap them.

    The n-step target of row ``t`` is
    ``rewards[t] + discount_t[t] * v_t[bootstrap_index[t]]``.

    Attributes:
      rewards: ``[T, B]``, ``sum_{k=0}^{m-1} gamma^k r_t[t + k]``.
      discount_t: ``[T, B]``, ``gamma^m`` times 0 if the window ended in a
        termination, else 1.
      bootstrap_index: ``[T, B]`` int32, ``t + m - 1``: the row whose next
        observation (``v_t``) the target bootstraps on. Store
        ``next_obs[bootstrap_index]`` as the n-step transition's next
        observation.
    """

    rewards: jax.Array
    discount_t: jax.Array
    bootstrap_index: jax.Array


def n_step_rewards(
    r_t: ArrayLike,
    terminated: ArrayLike,
    truncated: ArrayLike,
    n: int,
    gamma: ArrayLike,
) -> NStepRewards:
    """The n-step transitions of a ``[T, B]`` rollout, stopping at episode ends.

    The window of row ``t`` covers ``m`` steps, ``t .. t + m - 1``, where
    ``m <= n`` is cut short by the first episode end (terminated or
    truncated) in it and by the end of the rollout. Used to build DQN's
    n-step transitions before they go into a replay buffer
    (Sutton & Barto 2018, section 7.1; Hessel et al. 2018,
    https://arxiv.org/abs/1710.02298).

    Args:
      r_t: ``[T, B]`` rewards.
      terminated: ``[T, B]`` bool (or 0/1) terminal flags.
      truncated: ``[T, B]`` bool (or 0/1) truncation flags.
      n: the number of steps, a positive Python int (static).
      gamma: discount in ``[0, 1]``, a scalar (may be traced).

    Returns:
      An :class:`NStepRewards` of ``[T, B]`` arrays.

    Raises:
      ValueError: on mismatched or scalar shapes, a non-positive ``n``, or a
        Python or NumPy ``gamma`` outside ``[0, 1]``.

    Example:
      >>> r = jnp.ones((3, 1)); no = jnp.zeros((3, 1), bool)
      >>> rewards, discount, index = n_step_rewards(r, no, no, n=2, gamma=0.5)
      >>> rewards[:, 0].tolist(), discount[:, 0].tolist(), index[:, 0].tolist()
      ([1.5, 1.5, 1.0], [0.25, 0.25, 0.5], [1, 2, 2])
    """
    r_t = jnp.asarray(r_t)
    terminated, truncated = jnp.asarray(terminated), jnp.asarray(truncated)
    _check_shapes("n_step_rewards", r_t=r_t, terminated=terminated, truncated=truncated)
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ValueError(f"n_step_rewards: n must be a positive int; got {n!r}.")
    _check_fraction("n_step_rewards", gamma=gamma)
    dtype = jnp.result_type(r_t, jnp.float32)
    r_t = r_t.astype(dtype)
    terminal = terminated.astype(bool)
    done = terminal | truncated.astype(bool)
    horizon = r_t.shape[0]
    row = jnp.broadcast_to(
        jnp.arange(horizon, dtype=jnp.int32).reshape((horizon,) + (1,) * (r_t.ndim - 1)),
        r_t.shape,
    )
    gamma = jnp.asarray(gamma, dtype)

    rewards = jnp.zeros_like(r_t)
    discount = jnp.zeros_like(r_t)
    index = row
    gamma_k = jnp.ones((), dtype)
    open_window = jnp.ones(r_t.shape, bool)
    # Step k adds r_t[t + k] to every window still open; a window closes at an episode end,
    # at its n-th step or at the last row, and bootstraps with gamma^(k + 1) from there.
    for k in range(n):
        reward_k, terminal_k, done_k = (_shift(x, k) for x in (r_t, terminal, done))
        rewards = rewards + jnp.where(open_window, gamma_k * reward_k, 0.0)
        closes = open_window & (done_k | (row + k >= horizon - 1) | (k == n - 1))
        bootstrap = gamma_k * gamma * (1.0 - terminal_k.astype(dtype))
        discount = jnp.where(closes, bootstrap, discount)
        index = jnp.where(closes, row + k, index)
        open_window = open_window & ~closes
        gamma_k = gamma_k * gamma
    return NStepRewards(rewards, discount, index)


def n_step_returns(
    r_t: ArrayLike,
    v_t: ArrayLike,
    terminated: ArrayLike,
    truncated: ArrayLike,
    n: int,
    gamma: ArrayLike,
    stop_target_gradients: bool = True,
) -> jax.Array:
    """n-step bootstrapped returns that stop at episode ends.

    ``G[t] = sum_{k=0}^{m-1} gamma^k r_t[t+k] + gamma^m (1 - terminated[t+m-1]) v_t[t+m-1]``
    with the window length ``m`` of :func:`n_step_rewards`: at most ``n``,
    cut by the first termination or truncation and by the end of the rollout.
    A truncated window bootstraps on the final observation's value; a
    terminated one does not bootstrap.

    Args:
      r_t: ``[T, B]`` rewards.
      v_t: ``[T, B]`` values of the next observations (e.g.
        ``max_a Q_target(next_obs, a)``); at a truncation, of the final one.
      terminated: ``[T, B]`` bool (or 0/1) terminal flags.
      truncated: ``[T, B]`` bool (or 0/1) truncation flags.
      n: the number of steps, a positive Python int (static).
      gamma: discount in ``[0, 1]``, a scalar (may be traced).
      stop_target_gradients: wrap the result in ``lax.stop_gradient``.

    Returns:
      ``[T, B]`` n-step targets.

    Raises:
      ValueError: as :func:`n_step_rewards`, or when ``v_t``'s shape differs.

    Example:
      >>> r = jnp.ones((3, 1)); v = jnp.full((3, 1), 10.0); no = jnp.zeros((3, 1), bool)
      >>> n_step_returns(r, v, no, no, n=2, gamma=0.5)[:, 0].tolist()  # 1.5 + 2.5, ..., 1 + 5
      [4.0, 4.0, 6.0]
    """
    v_t = jnp.asarray(v_t)
    _check_shapes("n_step_returns", r_t=jnp.asarray(r_t), v_t=v_t)
    rewards, discount, index = n_step_rewards(r_t, terminated, truncated, n, gamma)
    returns = rewards + discount * jnp.take_along_axis(v_t.astype(rewards.dtype), index, axis=0)
    return jax.lax.stop_gradient(returns) if stop_target_gradients else returns


def _backward_scan(step: Callable, init: jax.Array, xs: tuple[jax.Array, ...]) -> jax.Array:
    """The stacked outputs of ``lax.scan(step, init, xs, reverse=True)``: one step per loop
    iteration on the CPU, ``BACKWARD_UNROLL`` elsewhere."""
    scan = functools.partial(jax.lax.scan, step, reverse=True)
    unrolled = functools.partial(scan, unroll=BACKWARD_UNROLL)
    _, outputs = jax.lax.platform_dependent(init, xs, cpu=scan, default=unrolled)
    return outputs


def _shift(x: jax.Array, k: int) -> jax.Array:
    """``x[t + k]`` at row ``t``; rows past the end repeat the last row (never read)."""
    if k == 0:
        return x
    return jnp.concatenate([x[k:], jnp.repeat(x[-1:], min(k, x.shape[0]), axis=0)])[: x.shape[0]]


def _check_shapes(name: str, **arrays: jax.Array) -> None:
    shapes = {key: tuple(x.shape) for key, x in arrays.items()}
    first = next(iter(shapes.values()))
    if len(set(shapes.values())) > 1 or not first or first[0] == 0:
        raise ValueError(
            f"{name}: every input must have the same [T, B] (or [T, ...]) shape with T >= 1; "
            f"got {shapes}."
        )


def _check_fraction(name: str, **values: ArrayLike) -> None:
    """Checks Python and NumPy scalars; JAX arrays (possibly traced) pass unchecked."""
    for key, value in values.items():
        if jnp.ndim(value) != 0:
            raise ValueError(f"{name}: {key} must be a scalar; got shape {jnp.shape(value)}.")
        if isinstance(value, int | float | np.number | np.ndarray) and not 0 <= value <= 1:
            raise ValueError(f"{name}: {key} must lie in [0, 1]; got {value!r}.")


def _check_threshold(name: str, **values: ArrayLike | None) -> None:
    """Clip thresholds: ``None`` or scalars, positive when Python or NumPy."""
    for key, value in values.items():
        if value is None:
            continue
        if jnp.ndim(value) != 0:
            raise ValueError(
                f"{name}: {key} must be a scalar or None; got shape {jnp.shape(value)}."
            )
        if isinstance(value, int | float | np.number | np.ndarray) and not value > 0:
            raise ValueError(
                f"{name}: {key} must be positive (or None for no clipping); got {value!r}."
            )


def _clip(rhos: jax.Array, threshold: ArrayLike | None) -> jax.Array:
    return rhos if threshold is None else jnp.minimum(jnp.asarray(threshold, rhos.dtype), rhos)
