"""Behaviour cloning with RLlib's semantics: maximise the log-likelihood of a dataset's actions.

Pomerleau 1991, "Efficient Training of Artificial Neural Networks for
Autonomous Navigation", https://doi.org/10.1162/neco.1991.3.1.88. RLlib's BC
is MARWIL with ``beta = 0`` (:mod:`jaxlearner.algorithms.marwil`); as in RLlib's
new API stack its module is a policy alone (no value function). Field names
and defaults follow RLlib's ``BCConfig``:

=================================  =========  ==============================================
field                              default    meaning (RLlib's name where it differs)
=================================  =========  ==============================================
``lr``                             1e-4       Adam learning rate; constant or schedule
``grad_clip``                      None       clip threshold (``grad_clip_by``: global_norm)
``train_batch_size``               2000       rows per gradient update
``dataset_num_iters_per_learner``  None       updates per iteration; None: one pass
``hidden_sizes``                   (256,256)  ``fcnet_hiddens``
``activation``                     "tanh"     ``fcnet_activation``
``head_hidden_sizes``              ()         ``head_fcnet_hiddens``
``head_activation``                "relu"     ``head_fcnet_activation``
``conv_padding``                   "same"     the CNN's padding for images ("valid": Nature's)
``conv_filters``                   None       the CNN's ``(out_channels, kernel, stride)``
                                              layers (RLlib's name); None: the Nature DQN's
                                              (): no CNN, pixels flattened
=================================  =========  ==============================================

``total = -mean(log pi(a | obs))`` over the batch's rows.
"""

from __future__ import annotations

import dataclasses

import gymnasium
import jax
import jax.numpy as jnp

from jaxlearner.algorithms.algorithm import MODULE_ID, OfflineAlgorithm, algorithm_fields
from jaxlearner.algorithms.builtin import BuiltinAlgorithm, register_builtin, single_module_learner
from jaxlearner.algorithms.config import (
    check_learning_rates,
    check_offline_batch_config,
    check_policy_network_config,
    config_adam,
    freeze_schedules,
)
from jaxlearner.algorithms.marwil import batch_layout, imitation_rows, make_act
from jaxlearner.algorithms.networks.acting import explore_and_exploit
from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec, make_distribution
from jaxlearner.algorithms.networks.encoders import ConvFilters, encoder_for
from jaxlearner.algorithms.networks.heads import (
    PolicyHead,
    Tower,
    distribution_for,
    with_hidden_layers,
)
from jaxlearner.algorithms.networks.spaces import bounds
from jaxlearner.core.context import LossContext
from jaxlearner.core.learner import Learner
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.schedules import ScheduleLike
from jaxlearner.types import Batch, Params


@dataclasses.dataclass(frozen=True)
class BCConfig:
    """BC's configuration; see the module docstring for each field and RLlib's default."""

    lr: ScheduleLike = 1e-4
    grad_clip: float | None = None
    grad_clip_by: str = "global_norm"
    train_batch_size: int = 2000
    dataset_num_iters_per_learner: int | None = None
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "tanh"
    head_hidden_sizes: tuple[int, ...] = ()
    head_activation: str = "relu"
    conv_padding: str = "same"
    conv_filters: ConvFilters | None = None
    log_std_init: float = 0.0

    def __post_init__(self) -> None:
        check_learning_rates("BCConfig", lr=self.lr)
        check_offline_batch_config(self)
        check_policy_network_config(self)
        freeze_schedules(self, "lr")


def bc_loss(distribution: DistributionSpec):
    """BC's loss for a policy with ``distribution``; ``loss(params, batch, ctx)``.

    The batch holds ``[B]`` rows of ``obs`` and ``actions``; the model maps
    observations to distribution inputs.

    Returns:
      A loss returning ``(-mean(log pi(actions | obs)), metrics)`` with
      ``policy_loss`` and ``entropy``.

    Example:
      >>> loss = bc_loss(distribution_for(env.action_space))  # doctest: +SKIP
      >>> total, metrics = loss(params, batch, ctx)          # doctest: +SKIP
    """

    def loss(params: Params, batch: Batch, ctx: LossContext) -> tuple[jax.Array, dict]:
        policy = make_distribution(distribution, ctx.apply(params, batch["obs"]))
        policy_loss = -jnp.mean(policy.log_prob(batch["actions"]))
        return policy_loss, {"policy_loss": policy_loss, "entropy": jnp.mean(policy.entropy())}

    return loss


def policy_model(
    observation_space: gymnasium.Space, action_space: gymnasium.Space, config: BCConfig
) -> Tower:
    """``obs -> dist_inputs``: an encoder and a policy head (params ``encoder``, ``head``).

    The same layers as the ``actor`` of :func:`~jaxlearner.algorithms.networks.models.actor_critic`
    (MARWIL's), so a MARWIL actor's params are a BC model's params.
    """
    head = with_hidden_layers(
        PolicyHead(distribution_for(action_space), log_std_init=config.log_std_init),
        config.head_hidden_sizes,
        config.head_activation,
    )
    encoder = encoder_for(
        observation_space,
        config.hidden_sizes,
        config.activation,
        conv_padding=config.conv_padding,
        conv_filters=config.conv_filters,
    )
    return Tower(encoder, head)


def make_learner(
    observation_space: gymnasium.Space, action_space: gymnasium.Space, config: BCConfig
) -> Learner:
    """BC's learner: one policy module, one gradient step per ``update``."""
    distribution = distribution_for(action_space)
    spec = ModuleSpec(
        policy_model(observation_space, action_space, config),
        bc_loss(distribution),
        config_adam(config),
        init_input=lambda batch: batch["obs"],
    )
    layout = batch_layout(observation_space, distribution, returns=False)
    return single_module_learner("bc", observation_space, action_space, config, spec, layout)


def make_algorithm(
    learner: Learner, action_space: gymnasium.Space, config: BCConfig
) -> OfflineAlgorithm:
    """BC around ``learner`` (one of :func:`make_learner`): act functions and rows."""
    distribution = distribution_for(action_space)
    model = learner.specs[MODULE_ID].model
    act = make_act(model, distribution, bounds(action_space), lambda out: out)
    return OfflineAlgorithm(
        **algorithm_fields("bc", learner, config, explore_and_exploit(act)),
        rows=imitation_rows(distribution),
        train_batch_size=config.train_batch_size,
        updates_per_iteration=config.dataset_num_iters_per_learner,
    )


RECIPE = BuiltinAlgorithm("bc", BCConfig, make_learner, make_algorithm)
"""BC's registry entry: its ``learner``, ``build`` and ``algorithm_for``."""

build, bc = register_builtin(
    RECIPE, OfflineAlgorithm, doc=RECIPE.learner_doc(config='{"lr": 1e-3}')
)
