"""A purejaxrl-style fused PPO: one pure ``train(key)``, written here as the peer to beat.

Modelled on purejaxrl's ``make_train`` (``purejaxrl/ppo.py``, Lu et al. 2022,
https://github.com/luchris429/purejaxrl): the whole training run is one
function of a PRNG key, a ``lax.scan`` over updates, each a ``lax.scan`` over
env steps then a ``lax.scan`` over epochs of ``lax.scan``s over minibatches;
``jax.jit(jax.vmap(train))`` trains many seeds in one call. Its config is
purejaxrl's default for CartPole (``PURE_JAX_RL``): 4 envs x 128 steps, 4
epochs x 4 minibatches, Adam (eps 1e-5) at 2.5e-4 annealed linearly to 0
after global-norm clipping at 0.5, separate 64x64 tanh actor and critic
(orthogonal init), GAE gamma 0.99 lambda 0.95, clip 0.2 (surrogate and value),
value coefficient 0.5, entropy coefficient 0.01, advantages standardized per
minibatch.

``network`` chooses the model: purejaxrl's MLP (``"mlp"``), or for MinAtar's 10x10 grids
gymnax-blines' separate 2 x 256 ReLU MLPs on the flattened grid (``"minatar_mlp"``), or
MinAtar's network (Young & Tian 2019: one 3x3 convolution of 16 filters, stride 1, no
padding, then 128 ReLU units; separate actor and critic as purejaxrl's), its convolution
``flax.linen.Conv`` as a purejaxrl user writes it (``"minatar_cnn"``) or jaxlearner's
``Conv`` (``"minatar_cnn_jl"``: the same values, a kernel gradient that XLA:CPU does not slow
down inside loops, jax-ml/jax#12868; ``benchmarks/bench_conv.py``). :data:`MINATAR` (the
MinAtar preset's) is the config of ``benchmarks/bench_pixels.py``; :data:`MINATAR_CNN` the
same with MinAtar's network.

Two differences from purejaxrl, both for a like-for-like comparison with
``jaxlearner.anakin``: the environment is jaxlearner's pure-JAX ``CartPole-v1``
(``jaxlearner.anakin.envs``, the same env code, so env cost is identical;
gymnax is not needed), and each update returns a few scalars (mean loss, the
mean return of the episodes that ended) instead of the whole rollout's
``info`` (``[updates, 128, 4]`` arrays that purejaxrl copies out), which would
only make the reference slower. Like purejaxrl, GAE treats truncation as
termination (no bootstrap on the final observation) and there is no
evaluation inside the program.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlearner.anakin.envs.environment import Environment


@dataclasses.dataclass(frozen=True)
class FusedPPOConfig:
    """purejaxrl's PPO config fields (its defaults for CartPole).

    Attributes:
      num_envs: environments stepped together (``NUM_ENVS``).
      num_steps: steps per environment per update (``NUM_STEPS``).
      total_timesteps: env steps of the whole run (``TOTAL_TIMESTEPS``).
      update_epochs: epochs per update (``UPDATE_EPOCHS``).
      num_minibatches: minibatches per epoch (``NUM_MINIBATCHES``).
      lr: initial Adam learning rate, annealed linearly to 0 (``LR``, ``ANNEAL_LR``).
      anneal_lr: anneal it (``False``: constant, as jaxlearner's MinAtar preset).
      gamma, gae_lambda: GAE's discount and lambda.
      clip_eps: surrogate and value clip.
      ent_coef, vf_coef: loss coefficients.
      max_grad_norm: global-norm clip.
      hidden: hidden layer width (two layers each for actor and critic; the CNNs' one layer).
      network: ``"mlp"``, ``"minatar_mlp"``, ``"minatar_cnn"`` or ``"minatar_cnn_jl"`` (see
        the module docstring).
    """

    num_envs: int = 4
    num_steps: int = 128
    total_timesteps: int = 500_000
    update_epochs: int = 4
    num_minibatches: int = 4
    lr: float = 2.5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: int = 64
    network: str = "mlp"
    anneal_lr: bool = True

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.num_steps // self.num_envs

    @property
    def minibatch_size(self) -> int:
        return self.num_envs * self.num_steps // self.num_minibatches


PURE_JAX_RL = FusedPPOConfig()

MINATAR_CNN = FusedPPOConfig(
    num_envs=64,
    num_steps=128,
    total_timesteps=1_048_576,
    update_epochs=4,
    num_minibatches=8,
    lr=5e-4,
    gamma=0.999,
    hidden=128,
    network="minatar_cnn",
)
"""gymnax-blines' MinAtar PPO shapes with MinAtar's network (the MinAtar preset's before it
took gymnax-blines' network)."""

MINATAR = dataclasses.replace(MINATAR_CNN, hidden=256, network="minatar_mlp")
"""gymnax-blines' MinAtar PPO, shapes and network (jaxlearner's MinAtar preset)."""


class ActorCritic(nn.Module):
    """purejaxrl's ``ActorCritic``: separate 2-layer tanh MLPs; logits and a value."""

    action_dim: int
    hidden: int = 64

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        dense = lambda n, scale: nn.Dense(
            n, kernel_init=nn.initializers.orthogonal(scale), bias_init=nn.initializers.zeros
        )
        actor = nn.tanh(dense(self.hidden, np.sqrt(2))(x))
        actor = nn.tanh(dense(self.hidden, np.sqrt(2))(actor))
        logits = dense(self.action_dim, 0.01)(actor)
        critic = nn.tanh(dense(self.hidden, np.sqrt(2))(x))
        critic = nn.tanh(dense(self.hidden, np.sqrt(2))(critic))
        value = dense(1, 1.0)(critic)
        return logits, jnp.squeeze(value, axis=-1)


class MinAtarActorCritic(nn.Module):
    """MinAtar's network for actor and critic apart: Conv(16, 3x3, VALID), ReLU, Dense(128), ReLU.

    ``jaxlearner_conv``: jaxlearner's ``Conv`` instead of ``flax.linen.Conv`` (same params).
    """

    action_dim: int
    hidden: int = 128
    jaxlearner_conv: bool = False

    def conv(self) -> nn.Module:
        init = nn.initializers.orthogonal(np.sqrt(2))
        if not self.jaxlearner_conv:
            return nn.Conv(16, (3, 3), padding="VALID", kernel_init=init)
        from jaxlearner.algorithms.networks.convolution import Conv

        return Conv(16, 3, 1, "VALID", kernel_init=init)

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        def tower(out: int, scale: float) -> jax.Array:
            y = self.conv()(x)
            y = nn.relu(y).reshape(*x.shape[:-3], -1)
            dense = lambda n, s: nn.Dense(n, kernel_init=nn.initializers.orthogonal(s))
            return dense(out, scale)(nn.relu(dense(self.hidden, np.sqrt(2))(y)))

        logits = tower(self.action_dim, 0.01)
        value = tower(1, 1.0)
        return logits, jnp.squeeze(value, axis=-1)


class FlatActorCritic(nn.Module):
    """gymnax-blines' ``Categorical-MLP`` with ``flatten_3d``: the grid flattened, then
    separate 2-layer ReLU MLPs for the logits and the value (orthogonal init, as ours)."""

    action_dim: int
    hidden: int = 256

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = x.reshape(*x.shape[:-3], -1).astype(jnp.float32)

        def tower(out: int, scale: float) -> jax.Array:
            dense = lambda n, s: nn.Dense(n, kernel_init=nn.initializers.orthogonal(s))
            y = nn.relu(dense(self.hidden, np.sqrt(2))(x))
            return dense(out, scale)(nn.relu(dense(self.hidden, np.sqrt(2))(y)))

        return tower(self.action_dim, 0.01), jnp.squeeze(tower(1, 1.0), axis=-1)


def network_for(config: FusedPPOConfig, action_dim: int) -> nn.Module:
    """The config's ``network`` as a flax module."""
    if config.network == "mlp":
        return ActorCritic(action_dim, config.hidden)
    if config.network == "minatar_mlp":
        return FlatActorCritic(action_dim, config.hidden)
    if config.network == "minatar_cnn":
        return MinAtarActorCritic(action_dim, config.hidden)
    if config.network == "minatar_cnn_jl":
        return MinAtarActorCritic(action_dim, config.hidden, jaxlearner_conv=True)
    raise ValueError(
        "network must be 'mlp', 'minatar_mlp', 'minatar_cnn' or 'minatar_cnn_jl'; got "
        f"{config.network!r}."
    )


def make_train(
    config: FusedPPOConfig,
    env: Environment,
    network: Any = None,
    loss: Callable[..., Any] | None = None,
    advantages: Callable[..., Any] | None = None,
    track_truncations: bool = False,
) -> Callable[[jax.Array], Any]:
    """purejaxrl's ``make_train``: a pure ``train(key) -> (runner_state, metrics)``.

    ``network`` (anything with flax's ``init(key, obs)`` and ``apply(params, obs) -> (logits,
    value)``) and ``loss`` (``loss(logits, value, traj, gae, targets) -> (total, (value_loss,
    actor_loss, entropy))``) replace the config's network and purejaxrl's loss, and
    ``advantages(params, traj) -> (advantages, targets)`` (``traj`` then also holds
    ``terminated``, ``truncated`` and ``final_obs``, ``[T, N, ...]``) its GAE, one piece at a
    time, to find where another implementation's learning differs
    (``benchmarks/minatar_gap.py``).

    ``metrics``: ``{"total_loss", "episode_return_mean"}``, ``[num_updates]`` each
    (the mean loss over the update's minibatches; the mean return of the
    episodes that ended in the update's rollout, NaN when none); with
    ``track_truncations`` also ``"truncated_fraction"``, the share of those episodes that
    the time limit ended (NaN when none ended).

    Example:
      >>> train = make_train(PURE_JAX_RL, envs.make("CartPole-v1"))  # doctest: +SKIP
      >>> out = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), 8))  # doctest: +SKIP
    """
    c = config
    network = network_for(c, int(env.action_space.n)) if network is None else network
    batch_size = c.num_envs * c.num_steps

    def linear_schedule(count: jax.Array) -> jax.Array:
        frac = 1.0 - (count // (c.num_minibatches * c.update_epochs)) / c.num_updates
        return c.lr * frac if c.anneal_lr else c.lr * jnp.ones_like(frac)

    tx = optax.chain(
        optax.clip_by_global_norm(c.max_grad_norm),
        optax.adam(learning_rate=linear_schedule, eps=1e-5),
    )

    def loss_fn(params, traj, gae, targets):
        logits, value = network.apply(params, traj["obs"])
        if loss is not None:
            return loss(logits, value, traj, gae, targets)
        log_probs = jax.nn.log_softmax(logits)
        log_prob = jnp.take_along_axis(log_probs, traj["action"][:, None], axis=-1)[:, 0]
        value_clipped = traj["value"] + (value - traj["value"]).clip(-c.clip_eps, c.clip_eps)
        value_loss = (
            0.5
            * jnp.maximum(jnp.square(value - targets), jnp.square(value_clipped - targets)).mean()
        )
        ratio = jnp.exp(log_prob - traj["log_prob"])
        gae = (gae - gae.mean()) / (gae.std() + 1e-8)
        actor_loss = -jnp.minimum(
            ratio * gae, jnp.clip(ratio, 1.0 - c.clip_eps, 1.0 + c.clip_eps) * gae
        ).mean()
        entropy = -(jnp.exp(log_probs) * log_probs).sum(-1).mean()
        total = actor_loss + c.vf_coef * value_loss - c.ent_coef * entropy
        return total, (value_loss, actor_loss, entropy)

    def train(key: jax.Array):
        key, init_key, reset_key = jax.random.split(key, 3)
        obs_shape = env.observation_space.shape
        params = network.init(init_key, jnp.zeros(obs_shape))
        opt_state = tx.init(params)
        env_state, obs = jax.vmap(env.reset)(jax.random.split(reset_key, c.num_envs))

        def update_step(runner_state, _):
            def env_step(runner_state, _):
                params, opt_state, env_state, last_obs, key = runner_state
                key, act_key, step_key = jax.random.split(key, 3)
                logits, value = network.apply(params, last_obs)
                action = jax.random.categorical(act_key, logits)
                log_prob = jnp.take_along_axis(
                    jax.nn.log_softmax(logits), action[:, None], axis=-1
                )[:, 0]
                env_state, obs, reward, terminated, truncated, info = jax.vmap(env.step)(
                    env_state, action, jax.random.split(step_key, c.num_envs)
                )
                done = terminated | truncated
                transition = {
                    "done": done,
                    "action": action,
                    "value": value,
                    "reward": reward,
                    "log_prob": log_prob,
                    "obs": last_obs,
                    "episode_return": info["episode_return"],
                }
                if advantages is not None:  # what another GAE may need; else not kept
                    transition.update(terminated=terminated, final_obs=info["final_obs"])
                if advantages is not None or track_truncations:
                    transition["truncated"] = truncated
                return (params, opt_state, env_state, obs, key), transition

            runner_state, traj = jax.lax.scan(env_step, runner_state, None, c.num_steps)
            params, opt_state, env_state, last_obs, key = runner_state
            _, last_value = network.apply(params, last_obs)

            def gae_step(carry, transition):
                gae, next_value = carry
                not_done = 1.0 - transition["done"].astype(jnp.float32)
                delta = transition["reward"] + c.gamma * next_value * not_done - transition["value"]
                gae = delta + c.gamma * c.gae_lambda * not_done * gae
                return (gae, transition["value"]), gae

            if advantages is None:
                _, gaes = jax.lax.scan(
                    gae_step,
                    (jnp.zeros_like(last_value), last_value),
                    traj,
                    reverse=True,
                    unroll=16,
                )
                targets = gaes + traj["value"]
            else:
                gaes, targets = advantages(params, traj)

            def update_epoch(update_state, _):
                def update_minibatch(carry, minibatch):
                    params, opt_state = carry
                    traj, gaes, targets = minibatch
                    (total, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(
                        params, traj, gaes, targets
                    )
                    updates, opt_state = tx.update(grads, opt_state, params)
                    return (optax.apply_updates(params, updates), opt_state), total

                params, opt_state, traj, gaes, targets, key = update_state
                key, perm_key = jax.random.split(key)
                permutation = jax.random.permutation(perm_key, batch_size)
                batch = jax.tree.map(
                    lambda x: x.reshape((batch_size, *x.shape[2:])), (traj, gaes, targets)
                )
                minibatches = jax.tree.map(
                    lambda x: jnp.take(x, permutation, axis=0).reshape(
                        (c.num_minibatches, -1, *x.shape[1:])
                    ),
                    batch,
                )
                (params, opt_state), total = jax.lax.scan(
                    update_minibatch, (params, opt_state), minibatches
                )
                return (params, opt_state, traj, gaes, targets, key), total

            update_state = (params, opt_state, traj, gaes, targets, key)
            update_state, total = jax.lax.scan(update_epoch, update_state, None, c.update_epochs)
            params, opt_state, *_, key = update_state
            done = traj["done"]
            ended = done.sum()
            metrics = {
                "total_loss": total.mean(),
                "episode_return_mean": jnp.where(
                    ended > 0,
                    (traj["episode_return"] * done).sum() / jnp.maximum(ended, 1),
                    jnp.nan,
                ),
            }
            if track_truncations:
                metrics["truncated_fraction"] = jnp.where(
                    ended > 0, traj["truncated"].sum() / jnp.maximum(ended, 1), jnp.nan
                )
            return (params, opt_state, env_state, last_obs, key), metrics

        key, run_key = jax.random.split(key)
        runner_state = (params, opt_state, env_state, obs, run_key)
        return jax.lax.scan(update_step, runner_state, None, c.num_updates)

    return train
