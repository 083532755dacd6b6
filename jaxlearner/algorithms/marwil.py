"""MARWIL with RLlib's semantics: advantage-weighted imitation of a dataset, plus a value loss.

Wang et al. 2018, "Exponentially Weighted Imitation Learning for Batched
Historical Data", https://papers.nips.cc/paper/7866. Field names and defaults
follow RLlib's ``MARWILConfig`` (new API stack):

===========================================  =========  ==========================================
field                                        default    meaning (RLlib's name where it differs)
===========================================  =========  ==========================================
``lr``                                       1e-4       Adam learning rate; constant or schedule
``gamma``                                    0.99       discount of the value targets
``beta``                                     1.0        advantage temperature; 0 imitates every
                                                        action alike (BC's policy loss)
``vf_coeff``                                 1.0        value loss weight
``moving_average_sqd_adv_norm_update_rate``  1e-8       rate of the squared-advantage average
``moving_average_sqd_adv_norm_start``        100.0      its starting value
``grad_clip``                                None       clip threshold (``grad_clip_by``)
``train_batch_size``                         2000       rows per gradient update
``dataset_num_iters_per_learner``            None       updates per iteration; None: one pass
``vf_share_layers``                          False      one encoder for policy and value
``hidden_sizes``                             (256,256)  ``fcnet_hiddens``
``activation``                               "tanh"     ``fcnet_activation``
``head_hidden_sizes``                        ()         ``head_fcnet_hiddens``
``head_activation``                          "relu"     ``head_fcnet_activation``
``log_std_init``                             0.0        initial log-std (Box actions)
``ortho_init``                               True       orthogonal init; False: PyTorch's default
``conv_padding``                             "same"     the CNN's padding ("valid": Nature's)
``conv_filters``                             None       the CNN's ``(out_channels, kernel,
                                                        stride)`` layers; None: Nature's
                                                        (): no CNN, pixels flattened
===========================================  =========  ==========================================

As in RLlib, with ``A = V_target - V(obs)`` over the batch, ``c`` the moving
average of ``mean(A^2)`` (updated at every gradient step before it is used:
``c <- c + rate * (mean(A^2) - c)``, kept in the module's ``extra`` state):

``total = -mean(exp(beta * A / (1e-8 + sqrt(c))) * log pi(a | obs)) + vf_coeff * 0.5 * mean(A^2)``

with the weights held constant (no gradient). The value targets are RLlib's
GAE targets for its default ``lambda_ = 1``: the discounted return to the
episode's end, bootstrapped on the value of the final observation where the
episode was truncated (:func:`~jaxlearner.algorithms.offline.returns_to_go`).
Differences from RLlib: ``beta``, ``vf_coeff`` and the average's rate are
traced hyperparameters (schedulable, sweepable), and the value loss is kept at
``beta = 0`` (RLlib then drops it; set ``vf_coeff=0`` for that); ``lambda_``
other than 1 and ``bc_logstd_coeff`` (RLlib's log-std bonus for Gaussian policies) are not
offered. On CartPole-v1 from 20 PPO episodes, ``beta = 0.5`` learned reliably where RLlib's
``beta = 1`` peaked near 465 and drifted down (``tests/test_offline_training.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.algorithms.algorithm import MODULE_ID, OfflineAlgorithm, RowsFn, algorithm_fields
from jaxlearner.algorithms.builtin import BuiltinAlgorithm, register_builtin, single_module_learner
from jaxlearner.algorithms.config import (
    check_bool,
    check_fraction,
    check_learning_rates,
    check_non_negative,
    check_offline_batch_config,
    check_policy_network_config,
    check_positive,
    check_schedule,
    config_adam,
    freeze_schedules,
)
from jaxlearner.algorithms.networks.acting import explore_and_exploit
from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec, make_distribution
from jaxlearner.algorithms.networks.encoders import ConvFilters
from jaxlearner.algorithms.networks.heads import distribution_for
from jaxlearner.algorithms.networks.models import actor_critic, actor_critic_options
from jaxlearner.algorithms.networks.spaces import bounds, zero_observation
from jaxlearner.algorithms.offline import returns_to_go
from jaxlearner.core.additional_updates import AdditionalUpdate
from jaxlearner.core.context import LossContext
from jaxlearner.core.learner import Learner
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.schedules import ScheduleLike
from jaxlearner.core.state import ModuleState
from jaxlearner.types import Batch, Metrics, Model, Params

AVERAGE = "moving_average_sqd_adv_norm"
"""The ``extra`` entry (and metric) holding the moving average of the squared advantages."""


@dataclasses.dataclass(frozen=True)
class MARWILConfig:
    """MARWIL's configuration; see the module docstring for each field and RLlib's default."""

    lr: ScheduleLike = 1e-4
    gamma: float = 0.99
    beta: ScheduleLike = 1.0
    vf_coeff: float = 1.0
    moving_average_sqd_adv_norm_update_rate: float = 1e-8
    moving_average_sqd_adv_norm_start: float = 100.0
    grad_clip: float | None = None
    grad_clip_by: str = "global_norm"
    train_batch_size: int = 2000
    dataset_num_iters_per_learner: int | None = None
    vf_share_layers: bool = False
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "tanh"
    head_hidden_sizes: tuple[int, ...] = ()
    head_activation: str = "relu"
    log_std_init: float = 0.0
    ortho_init: bool = True
    conv_padding: str = "same"
    conv_filters: ConvFilters | None = None

    def __post_init__(self) -> None:
        check_fraction(
            "MARWILConfig",
            gamma=self.gamma,
            moving_average_sqd_adv_norm_update_rate=self.moving_average_sqd_adv_norm_update_rate,
        )
        check_schedule("MARWILConfig", lr=self.lr, beta=self.beta)
        check_learning_rates("MARWILConfig", lr=self.lr)
        check_positive(
            "MARWILConfig", moving_average_sqd_adv_norm_start=self.moving_average_sqd_adv_norm_start
        )
        check_offline_batch_config(self)
        check_non_negative("MARWILConfig", vf_coeff=self.vf_coeff)
        check_policy_network_config(self)
        check_bool("MARWILConfig", ortho_init=self.ortho_init)
        freeze_schedules(self, "lr", "beta")


def marwil_loss(distribution: DistributionSpec):
    """MARWIL's loss for an actor-critic with ``distribution``; ``loss(params, batch, ctx)``.

    The batch holds ``[B]`` rows of ``obs``, ``actions``, ``returns``,
    ``bootstrap_obs`` and ``bootstrap_discounts``
    (:func:`~jaxlearner.algorithms.offline.returns_to_go`); the value target is
    ``returns + bootstrap_discounts * V(bootstrap_obs)`` with ``V`` held
    constant. Hyperparameters come from ``ctx.hyperparams`` (``beta``,
    ``vf_coeff``, ``moving_average_sqd_adv_norm_update_rate``) and the moving
    average from ``ctx.extra["moving_average_sqd_adv_norm"]``.

    Returns:
      A loss returning ``(total, metrics)`` with ``policy_loss``, ``vf_loss``,
      ``entropy``, ``mean_advantages``, ``mean_weights``,
      ``moving_average_sqd_adv_norm`` (the updated average, which the
      module's additional update stores) and ``vf_explained_var``.

    Example:
      >>> loss = marwil_loss(distribution_for(env.action_space))  # doctest: +SKIP
      >>> total, metrics = loss(params, batch, ctx)              # doctest: +SKIP
    """

    def loss(params: Params, batch: Batch, ctx: LossContext) -> tuple[jax.Array, dict]:
        dist_inputs, values = ctx.apply(params, batch["obs"])
        _, bootstrap_values = ctx.apply(params, batch["bootstrap_obs"])
        targets = batch["returns"] + batch["bootstrap_discounts"] * jax.lax.stop_gradient(
            bootstrap_values
        )
        logp = make_distribution(distribution, dist_inputs).log_prob(batch["actions"])
        hp = ctx.hyperparams
        advantages = targets - values
        squared_mean = jnp.mean(advantages**2)
        average = ctx.extra[AVERAGE]
        average = average + hp["moving_average_sqd_adv_norm_update_rate"] * (
            jax.lax.stop_gradient(squared_mean) - average
        )
        weights = jax.lax.stop_gradient(
            jnp.exp(hp["beta"] * advantages / (1e-8 + jnp.sqrt(average)))
        )
        policy_loss = -jnp.mean(weights * logp)
        vf_loss = 0.5 * squared_mean
        total = policy_loss + hp["vf_coeff"] * vf_loss
        target_var = jnp.var(targets)
        explained = 1.0 - jnp.mean((targets - values) ** 2) / jnp.maximum(target_var, 1e-8)
        return total, {
            "policy_loss": policy_loss,
            "vf_loss": vf_loss,
            "entropy": jnp.mean(make_distribution(distribution, dist_inputs).entropy()),
            "mean_advantages": jnp.mean(advantages),
            "mean_weights": jnp.mean(weights),
            AVERAGE: average,
            "vf_explained_var": explained,
        }

    return loss


def store_average() -> AdditionalUpdate:
    """After each gradient step, the loss's updated squared-advantage average into ``extra``."""

    def fn(module: ModuleState, metrics: Metrics) -> ModuleState:
        return module.replace(extra={**module.extra, AVERAGE: metrics[AVERAGE]})

    return AdditionalUpdate(fn, after="grad_step")


def make_learner(
    observation_space: gymnasium.Space, action_space: gymnasium.Space, config: MARWILConfig
) -> Learner:
    """MARWIL's learner: one actor-critic module, one gradient step per ``update``."""
    distribution = distribution_for(action_space)
    spec = ModuleSpec(
        actor_critic(observation_space, action_space, **actor_critic_options(config)),
        marwil_loss(distribution),
        config_adam(config),
        hyperparams={
            "beta": config.beta,
            "vf_coeff": config.vf_coeff,
            "moving_average_sqd_adv_norm_update_rate": (
                config.moving_average_sqd_adv_norm_update_rate
            ),
        },
        init_extra=lambda params: {
            AVERAGE: jnp.asarray(config.moving_average_sqd_adv_norm_start, jnp.float32)
        },
        additional_updates=[store_average()],
        init_input=lambda batch: batch["obs"],
        metric_reductions={AVERAGE: "last"},
    )
    layout = batch_layout(observation_space, distribution, returns=True)
    return single_module_learner("marwil", observation_space, action_space, config, spec, layout)


def batch_layout(
    observation_space: gymnasium.Space, distribution: DistributionSpec, returns: bool
) -> dict[str, jax.ShapeDtypeStruct]:
    """An offline batch's trailing shapes and dtypes: ``obs`` and ``actions``, and with
    ``returns`` MARWIL's ``returns``, ``bootstrap_obs`` and ``bootstrap_discounts``."""
    obs = zero_observation(observation_space)
    observation = jax.ShapeDtypeStruct(obs.shape, obs.dtype)
    action_dtype = np.int32 if distribution.is_discrete else np.float32
    layout = {
        "obs": observation,
        "actions": jax.ShapeDtypeStruct(distribution.action_shape, np.dtype(action_dtype)),
    }
    if returns:
        row = jax.ShapeDtypeStruct((), np.dtype(np.float32))
        layout.update(returns=row, bootstrap_obs=observation, bootstrap_discounts=row)
    return layout


def make_algorithm(
    learner: Learner, action_space: gymnasium.Space, config: MARWILConfig
) -> OfflineAlgorithm:
    """MARWIL around ``learner`` (one of :func:`make_learner`): act functions and rows."""
    model = learner.specs[MODULE_ID].model
    act = make_act(model, distribution_for(action_space), bounds(action_space), lambda out: out[0])
    return OfflineAlgorithm(
        **algorithm_fields("marwil", learner, config, explore_and_exploit(act)),
        rows=marwil_rows(config.gamma, distribution_for(action_space)),
        train_batch_size=config.train_batch_size,
        updates_per_iteration=config.dataset_num_iters_per_learner,
    )


def marwil_rows(gamma: float, distribution: DistributionSpec) -> RowsFn:
    """``rows(episodes) -> {obs, actions, returns, bootstrap_obs, bootstrap_discounts}``, pure."""

    def rows(episodes: Mapping[str, jax.Array]) -> Batch:
        out = returns_to_go(
            episodes["rewards"],
            episodes["terminated"],
            episodes["episode_ends"],
            episodes["next_obs"],
            gamma,
        )
        return {
            **imitation_rows(distribution)(episodes),
            "returns": out.returns,
            "bootstrap_obs": out.bootstrap_obs,
            "bootstrap_discounts": out.bootstrap_discounts,
        }

    return rows


def imitation_rows(distribution: DistributionSpec) -> RowsFn:
    """``rows(episodes) -> {obs, actions}`` with actions as int32 or float32, pure."""
    dtype = jnp.int32 if distribution.is_discrete else jnp.float32

    def rows(episodes: Mapping[str, jax.Array]) -> Batch:
        return {
            "obs": jnp.asarray(episodes["obs"]),
            "actions": jnp.asarray(episodes["actions"]).astype(dtype),
        }

    return rows


def make_act(
    model: Model,
    distribution: DistributionSpec,
    box: tuple | None,
    policy_inputs: Callable[[Any], jax.Array],
) -> Callable:
    """``act(module, obs, key, deterministic)``: sample (or the mode), clipped to a ``Box``.

    ``policy_inputs`` picks the distribution inputs from the model's output;
    the extras are ``actions`` (unclipped) and ``dist_inputs``.
    """

    def act(module: ModuleState, obs: jax.Array, key: jax.Array, deterministic: bool):
        dist_inputs = policy_inputs(model.apply(module.params, obs))
        policy = make_distribution(distribution, dist_inputs)
        actions = policy.mode() if deterministic else policy.sample(key)
        env_actions = actions if box is None else jnp.clip(actions, box[0], box[1])
        return env_actions, {"actions": actions, "dist_inputs": dist_inputs}

    return act


RECIPE = BuiltinAlgorithm("marwil", MARWILConfig, make_learner, make_algorithm)
"""MARWIL's registry entry: its ``learner``, ``build`` and ``algorithm_for``."""

build, marwil = register_builtin(
    RECIPE, OfflineAlgorithm, doc=RECIPE.learner_doc(config='{"beta": 0.5}')
)
