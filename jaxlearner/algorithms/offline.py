"""What BC and MARWIL share: a dataset's steps as rows, and the compiled "draw, then update" loop.

A dataset is ``[N]`` steps of whole episodes back to back (see
:mod:`jaxlearner.training.offline.datasets`): ``obs``, ``actions``, ``rewards``,
``terminated``, ``truncated``, ``next_obs`` and ``episode_ends`` (True on each
episode's last step). An :class:`~jaxlearner.algorithms.OfflineAlgorithm`
turns those into training rows once (its ``rows``); :func:`make_offline_updates`
then runs ``U`` gradient updates in one ``lax.scan``, each on
``train_batch_size`` rows drawn without replacement (:func:`epoch_indices`);
:func:`fit_batch` makes that batch every row of a dataset smaller than one batch.

:func:`returns_to_go` gives MARWIL's value targets: with RLlib's default
``lambda_ = 1`` the GAE value target of step ``t`` is the discounted return to
the episode's end plus, where the episode was cut short (truncated, or the
recording stopped), the discounted value of its final observation, which the
loss evaluates with the current value function (:func:`returns_to_go`'s
``bootstrap_obs`` and ``bootstrap_discounts``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp

from jaxlearner.algorithms.algorithm import OfflineAlgorithm
from jaxlearner.core.metrics import last_update_metrics
from jaxlearner.core.state import LearnerState
from jaxlearner.types import Metrics


class ReturnsToGo(NamedTuple):
    """Discounted returns to each episode's end, and what to bootstrap from there.

    Attributes:
      returns: ``[N]`` ``sum_{k=0}^{T-t} gamma^k r[t + k]`` to the episode's last step ``T``.
      bootstrap_obs: ``[N, ...]`` the final observation of the step's episode
        (``next_obs[T]``).
      bootstrap_discounts: ``[N]`` ``gamma^(T - t + 1)`` where the episode did not
        terminate (truncated or cut), else 0: the target is
        ``returns + bootstrap_discounts * V(bootstrap_obs)``.
    """

    returns: jax.Array
    bootstrap_obs: jax.Array
    bootstrap_discounts: jax.Array


def returns_to_go(
    r_t: jax.Array,
    terminated: jax.Array,
    episode_ends: jax.Array,
    next_obs: jax.Array,
    gamma: float,
) -> ReturnsToGo:
    """Discounted returns to go over episodes stored back to back (a reverse ``lax.scan``).

    Args:
      r_t: ``[N]`` rewards.
      terminated: ``[N]`` bool, the step ended its episode in a terminal state.
      episode_ends: ``[N]`` bool, the step is its episode's last stored step
        (terminated, truncated, or where recording stopped). The last row must be one.
      next_obs: ``[N, ...]`` the observation each step led to.
      gamma: the discount in ``[0, 1]``.

    Returns:
      A :class:`ReturnsToGo`.

    Example:
      >>> out = returns_to_go(jnp.ones(3), jnp.array([False, False, True]),
      ...                     jnp.array([False, False, True]), jnp.zeros((3, 1)), 0.5)
      >>> out.returns.tolist(), out.bootstrap_discounts.tolist()
      ([1.75, 1.5, 1.0], [0.0, 0.0, 0.0])
    """
    r_t = jnp.asarray(r_t, jnp.float32)
    live = 1.0 - jnp.asarray(terminated, jnp.float32)

    def back(carry, inputs):
        ret, discount, obs = carry
        reward, alive, end, step_next_obs = inputs
        ret = jnp.where(end, reward, reward + gamma * ret)
        discount = jnp.where(end, gamma * alive, gamma * discount)
        obs = jnp.where(end, step_next_obs, obs)
        return (ret, discount, obs), (ret, discount, obs)

    init = (jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32), jnp.zeros_like(next_obs[0]))
    _, (returns, discounts, bootstrap_obs) = jax.lax.scan(
        back, init, (r_t, live, jnp.asarray(episode_ends), jnp.asarray(next_obs)), reverse=True
    )
    return ReturnsToGo(returns, bootstrap_obs, discounts)


def fit_batch(algorithm: OfflineAlgorithm, num_rows: int) -> OfflineAlgorithm:
    """``algorithm`` with a ``train_batch_size`` that ``num_rows`` rows can fill.

    The algorithm itself when the rows fill its batch; otherwise a copy whose batch is
    every row (RLlib reads what a dataset holds when it holds less than one batch, too).
    The config and the learner are the same: a checkpoint still records the
    ``train_batch_size`` asked for, and the same dataset fits it the same way again.

    Raises:
      ValueError: for ``num_rows`` below 1.

    Example:
      >>> fit_batch(algorithm, 1676).train_batch_size  # BC's default is 2000  # doctest: +SKIP
      1676
    """
    if isinstance(num_rows, bool) or not isinstance(num_rows, int) or num_rows < 1:
        raise ValueError(f"A dataset to train on holds at least one row; got {num_rows!r}.")
    if num_rows >= algorithm.train_batch_size:
        return algorithm
    return dataclasses.replace(algorithm, train_batch_size=num_rows)


def updates_per_iteration(algorithm: OfflineAlgorithm, num_rows: int) -> int:
    """The updates one training iteration runs on ``num_rows`` rows, a static int.

    ``algorithm.updates_per_iteration``, or when that is ``None`` one pass:
    ``num_rows // train_batch_size`` updates (the remainder of the rows waits
    for the next pass, whose order differs).

    Raises:
      ValueError: when the dataset holds fewer rows than one batch (:func:`fit_batch`
        makes a batch that fits).

    Example:
      >>> updates_per_iteration(algorithm, 9530)  # train_batch_size 256  # doctest: +SKIP
      37
    """
    if num_rows < algorithm.train_batch_size:
        raise ValueError(
            f"The dataset holds {num_rows} rows, fewer than {algorithm.name}'s train_batch_size "
            f"({algorithm.train_batch_size}); record more episodes or lower train_batch_size."
        )
    if algorithm.updates_per_iteration is not None:
        return algorithm.updates_per_iteration
    return num_rows // algorithm.train_batch_size


def epoch_indices(key: jax.Array, num_rows: int, batch_size: int, num_batches: int) -> jax.Array:
    """``[num_batches, batch_size]`` row indices, drawn without replacement pass by pass.

    Consecutive permutations of ``range(num_rows)`` are cut into batches, so
    every row is seen once per pass; all sizes are static.

    Example:
      >>> idx = epoch_indices(jax.random.key(0), 10, 5, 2)
      >>> sorted(idx.ravel().tolist())
      [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """
    passes = math.ceil(num_batches * batch_size / num_rows)
    keys = jax.random.split(key, passes)
    order = jax.vmap(lambda k: jax.random.permutation(k, num_rows))(keys).reshape(-1)
    return order[: num_batches * batch_size].reshape(num_batches, batch_size)


class OfflineUpdatesFn(Protocol):
    """``offline_updates(state, rows, key) -> (state, metrics)``."""

    def __call__(
        self, learner_state: LearnerState, rows: Mapping[str, jax.Array], key: jax.Array
    ) -> tuple[LearnerState, Metrics]: ...


def make_offline_updates(algorithm: OfflineAlgorithm, num_rows: int) -> OfflineUpdatesFn:
    """The pure loop of one offline training iteration over ``num_rows`` rows.

    :func:`updates_per_iteration` updates run as one ``lax.scan``; update
    ``u`` trains on the rows :func:`epoch_indices` gives it and counts its
    ``train_batch_size`` rows as env steps (RLlib counts rows read from a
    dataset as env steps sampled). Nothing is jitted here.

    Args:
      algorithm: supplies ``learner.update_fn``, ``module_id``,
        ``train_batch_size`` and ``updates_per_iteration``.
      num_rows: the rows' leading size (static).

    Returns:
      ``offline_updates(learner_state, rows, key) -> (learner_state, metrics)``
      with the metrics of the last update (``nonfinite`` the largest of all).

    Raises:
      ValueError: see :func:`updates_per_iteration`.

    Example:
      >>> updates = jax.jit(make_offline_updates(algorithm, 5000), donate_argnums=0)
      ... # doctest: +SKIP
      >>> state, metrics = updates(state, rows, key)  # doctest: +SKIP
    """
    update_fn = algorithm.learner.update_fn
    module_id, batch_size = algorithm.module_id, algorithm.train_batch_size
    count = updates_per_iteration(algorithm, num_rows)

    def offline_updates(
        learner_state: LearnerState, rows: Mapping[str, jax.Array], key: jax.Array
    ) -> tuple[LearnerState, Metrics]:
        indices = epoch_indices(key, num_rows, batch_size, count)
        env_steps = {module_id: jnp.int32(batch_size)}

        def one_update(state: LearnerState, index: jax.Array) -> tuple[LearnerState, Metrics]:
            batch = jax.tree.map(lambda column: column[index], dict(rows))
            return update_fn(state, {module_id: batch}, env_steps)

        learner_state, stacked = jax.lax.scan(one_update, learner_state, indices)
        return learner_state, last_update_metrics(stacked)

    return offline_updates
