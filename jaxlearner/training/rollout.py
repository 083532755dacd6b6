"""Rollout: the arrays of ``T`` steps of ``N`` gymnasium environments, as the runner collects them.

:class:`~jaxlearner.training.env_runner.EnvRunner` returns one per ``sample``;
:meth:`Rollout.experience` is what the algorithms' ``postprocess`` or ``transitions``, and the
module's observers, read; :func:`experience_shapes` says what it will hold before any step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jaxlearner.algorithms.algorithm import ActFn, RecurrentAct

HOST_COLUMNS: tuple[str, ...] = (
    "obs",
    "actions",
    "rewards",
    "terminated",
    "truncated",
    "next_obs",
    "valid",
)
"""The host columns of a rollout, as :class:`Rollout` names them (its ``[T, N]`` numpy
arrays; the runners stack them step by step, the Ray runners concatenate them)."""


def stack_steps(steps: Sequence[Mapping[str, Any]]) -> dict[str, jax.Array]:
    """The act function's extras of ``T`` steps, ``[N, ...]`` device arrays each, as
    ``{name: [T, N, ...]}`` device arrays.

    The steps come to the host in one transfer, are stacked there and go back in one:
    ``jnp.stack`` of ``T`` arrays would compile a concatenation of ``T`` operands, whose
    compile time grows faster than ``T`` (9 s for 4,096 one-env steps on a 2-core CPU, once
    per extra), where a host stack compiles nothing.

    Example:
      >>> steps = [{"logp": jax.numpy.zeros(2)}, {"logp": jax.numpy.ones(2)}]
      >>> stack_steps(steps)["logp"].shape
      (2, 2)
    """
    if not steps or not steps[0]:
        return {}
    host = jax.device_get([dict(step) for step in steps])
    return jax.device_put(jax.tree.map(lambda *xs: np.stack(xs), *host))


@dataclasses.dataclass(frozen=True)
class Rollout:
    """``T`` steps of ``N`` environments, time-major.

    Attributes:
      obs: ``[T, N, ...]`` observations the actions were taken in.
      actions: ``[T, N, ...]`` actions, as the policy returned them.
      rewards: ``[T, N]`` float32.
      terminated: ``[T, N]`` bool, the episode ended in a terminal state.
      truncated: ``[T, N]`` bool, the episode was cut (time limit).
      next_obs: ``[T, N, ...]`` the observation each transition led to: the
        final observation when the step ended the episode.
      valid: ``[T, N]`` bool, ``False`` for reset-only steps (``NEXT_STEP``).
      extras: ``{name: [T, N, ...]}`` what the policy returned besides the
        actions (device arrays).
      last_obs: ``[N, ...]`` the observations to act in next.
      episode_returns: returns of the episodes completed during the rollout.
      episode_lengths: their lengths.
      episode_envs: the sub-environment each of them ran in.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    next_obs: np.ndarray
    valid: np.ndarray
    extras: dict[str, jax.Array]
    last_obs: np.ndarray
    episode_returns: list[float]
    episode_lengths: list[int]
    episode_envs: list[int]

    @property
    def env_steps(self) -> int:
        """Environment steps taken (reset-only steps excluded)."""
        return int(self.valid.sum())

    def experience(self) -> dict[str, Any]:
        """The ``[T, N]`` arrays an algorithm's ``postprocess`` or ``transitions`` reads.

        ``obs``, ``actions``, ``rewards``, ``terminated``, ``truncated``,
        ``next_obs``, ``valid`` and the policy's extras (an ``extras["actions"]``
        replaces the env actions: it is the action to train on).
        """
        return {**{name: getattr(self, name) for name in HOST_COLUMNS}, **self.extras}


def experience_shapes(
    policy: ActFn | RecurrentAct, params: Any, observations: np.ndarray, num_steps: int
) -> dict[str, jax.ShapeDtypeStruct]:
    """The shapes and dtypes of :meth:`Rollout.experience` for ``num_steps`` steps, found
    without stepping an environment (the policy is traced, not run), for compiling ahead.

    Args:
      policy: what the runner samples with (``policy(params, obs, key)``, or a
        :class:`~jaxlearner.algorithms.algorithm.RecurrentAct`).
      params: its params, arrays or ``jax.ShapeDtypeStruct``.
      observations: ``[N, ...]`` the runner's observations (host arrays, as it keeps them).
      num_steps: ``T``.

    Returns:
      ``{name: ShapeDtypeStruct [T, N, ...]}``: the host columns as numpy stacks them
      (``rewards`` float32, the flags bool), the policy's extras as it returns them.

    Example:
      >>> import jax.numpy as jnp
      >>> policy = lambda params, obs, key: (jnp.zeros(obs.shape[0], jnp.int32), {})
      >>> shapes = experience_shapes(policy, None, np.zeros((8, 4), np.float32), 32)
      >>> shapes["obs"].shape, shapes["actions"].dtype, shapes["valid"].shape
      ((32, 8, 4), dtype('int32'), (32, 8))
    """
    n = observations.shape[0]
    obs = jax.ShapeDtypeStruct(
        observations.shape, jax.dtypes.canonicalize_dtype(observations.dtype)
    )
    key = jax.random.key(0)
    if isinstance(policy, RecurrentAct):
        carry = jax.eval_shape(lambda: policy.initial_carry(n))
        first = jax.ShapeDtypeStruct((n,), np.bool_)
        actions, extras, _ = jax.eval_shape(policy, params, carry, obs, first, key)
    else:
        actions, extras = jax.eval_shape(policy, params, obs, key)

    def steps(x: Any) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct((num_steps, *x.shape), x.dtype)

    flags = jax.ShapeDtypeStruct((num_steps, n), np.bool_)
    return {
        "obs": steps(obs),
        "actions": steps(actions),  # a host copy: numpy keeps no weak type
        "rewards": jax.ShapeDtypeStruct((num_steps, n), np.float32),
        "terminated": flags,
        "truncated": flags,
        "next_obs": steps(obs),
        "valid": flags,
        **jax.tree.map(steps, dict(extras)),  # stacked on the host: never weakly typed
    }
