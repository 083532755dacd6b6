"""Acting with a policy's distribution: a sample or the mode, clipped to a ``Box``; or
uniformly random actions of the distribution's space, for an off-policy warm-up; or
epsilon-greedy over a Q-network's values (DQN, PQN).

What the act functions of the actor-critic algorithms (PPO, APPO) share: the action to train
on is the distribution's own sample (unclipped, so its log-probability is exact), the action
sent to the environment is that sample clipped to the bounds of a ``Box`` action space.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp

from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec, make_distribution
from jaxlearner.core.schedules import ScheduleLike, current_value
from jaxlearner.core.state import ModuleState
from jaxlearner.types import Model


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


WARMUP_ACTIONS: tuple[str, ...] = ("policy", "uniform")
"""``warmup_actions`` values: the policy's own samples before learning starts (RLlib), or
actions drawn uniformly from the action space (SB3's off-policy warm-up)."""


def uniform_actions(
    distribution: DistributionSpec, batch_shape: tuple[int, ...], key: jax.Array
) -> jax.Array:
    """Actions drawn uniformly from what the distribution covers, SB3's warm-up actions.

    Args:
      distribution: a ``"tanh_gaussian"`` (uniform in ``[low, high)`` per dimension, ``-1``
        and ``1`` where unset) or a ``"categorical"`` (each of its ``n`` indices alike).
      batch_shape: the leading shape, e.g. ``(N,)`` for ``N`` environments.
      key: the PRNG key.

    Returns:
      ``[*batch_shape, d]`` float32 or ``[*batch_shape]`` int32 actions.

    Raises:
      ValueError: for another kind.

    Example:
      >>> spec = DistributionSpec("tanh_gaussian", (2,), low=(0.0, -2.0), high=(1.0, 2.0))
      >>> uniform_actions(spec, (5,), jax.random.key(0)).shape
      (5, 2)
    """
    if distribution.kind == "categorical":
        return jax.random.randint(key, batch_shape, 0, distribution.sizes[0], jnp.int32)
    if distribution.kind == "tanh_gaussian":
        (size,) = distribution.sizes
        low = jnp.asarray(distribution.low or (-1.0,) * size, jnp.float32)
        high = jnp.asarray(distribution.high or (1.0,) * size, jnp.float32)
        return jax.random.uniform(key, (*batch_shape, size), jnp.float32, low, high)
    raise ValueError(
        f"Uniform warm-up actions need a 'tanh_gaussian' or 'categorical' distribution; got "
        f"{distribution.kind!r}."
    )


def epsilon_greedy(
    model: Model, epsilon: ScheduleLike, action_space: gymnasium.spaces.Discrete
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(explore, exploit)`` over a Q-network: epsilon-greedy, and greedy.

    ``explore(module, obs [N, ...], key)`` takes a uniformly random action with probability
    epsilon, the argmax of ``model.apply(module.params, obs)`` otherwise; epsilon is the
    module hyperparameter ``"epsilon"``, a schedule evaluated at the module's counters (so
    at its ``env_steps`` now, not as the last update refreshed it) or the stored constant.
    Actions are trained on as int32 indices; the environment gets ``index + start``
    (``extras["actions"]`` holds the index where they differ).

    Example:
      >>> explore, exploit = epsilon_greedy(model, ((0, 1.0), (10_000, 0.05)), space)
      ... # doctest: +SKIP
      >>> actions, extras = explore(module, obs, key)                     # doctest: +SKIP
    """
    num_actions, start = int(action_space.n), int(action_space.start)

    def env_actions(actions: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        if start == 0:
            return actions, {}
        return actions + start, {"actions": actions}

    def explore(module: ModuleState, obs: jax.Array, key: jax.Array):
        value = current_value(epsilon, module.hyperparams["epsilon"], module.counters, "epsilon")
        greedy = jnp.argmax(model.apply(module.params, obs), axis=-1).astype(jnp.int32)
        random_key, coin_key = jax.random.split(key)
        random = jax.random.randint(random_key, greedy.shape, 0, num_actions, jnp.int32)
        explore_now = jax.random.uniform(coin_key, greedy.shape) < value
        return env_actions(jnp.where(explore_now, random, greedy))

    def exploit(module: ModuleState, obs: jax.Array, key: jax.Array):
        del key
        return env_actions(jnp.argmax(model.apply(module.params, obs), -1).astype(jnp.int32))

    return explore, exploit
