"""Acting with a policy's distribution: a sample or the mode, clipped to a ``Box``.

What the act functions of the actor-critic algorithms (PPO, APPO) share: the action to train
on is the distribution's own sample (unclipped, so its log-probability is exact), the action
sent to the environment is that sample clipped to the bounds of a ``Box`` action space.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec, make_distribution


def policy_actions(
    distribution: DistributionSpec,
    box: tuple[jax.Array, jax.Array] | None,
    dist_inputs: jax.Array,
    key: jax.Array,
    deterministic: bool,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """A sample (or the mode) of the policy, and the same clipped to the action bounds.

    Args:
      distribution: the action distribution (``distribution_for(action_space)``).
      box: ``(low, high)`` of a ``Box`` action space, or ``None`` (no clipping).
      dist_inputs: ``[N, ...]`` the distribution's inputs (logits, or mean and log-std).
      key: PRNG key of the sample (unused when ``deterministic``).
      deterministic: take the mode instead of a sample (static).

    Returns:
      ``(env_actions [N, ...], {"actions": [N, ...] unclipped, "logp": [N]})``.

    Example:
      >>> spec = distribution_for(gymnasium.spaces.Discrete(3))          # doctest: +SKIP
      >>> env_actions, extras = policy_actions(spec, None, logits, key, False)  # doctest: +SKIP
    """
    policy = make_distribution(distribution, dist_inputs)
    actions = policy.mode() if deterministic else policy.sample(key)
    env_actions = actions if box is None else jnp.clip(actions, box[0], box[1])
    return env_actions, {"actions": actions, "logp": policy.log_prob(actions)}


def explore_and_exploit(act: Callable[..., Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(explore, exploit)`` from ``act(module, obs, key, deterministic)``: a sample, the mode.

    Example:
      >>> explore, exploit = explore_and_exploit(act)                 # doctest: +SKIP
      >>> env_actions, extras = exploit(module, obs, key)             # doctest: +SKIP
    """
    explore = lambda module, obs, key: act(module, obs, key, False)
    exploit = lambda module, obs, key: act(module, obs, key, True)
    return explore, exploit
