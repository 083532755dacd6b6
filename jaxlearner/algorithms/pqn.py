"""PQN: Q-learning over vectorized environments, with LayerNorm, lambda-returns, no replay buffer
and no target network.

Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning",
https://arxiv.org/abs/2407.04811. Each iteration collects ``train_batch_size`` env steps with
epsilon-greedy actions, computes Q(lambda) targets over the rollout with the current network,
and trains on them in ``num_epochs`` epochs of shuffled minibatches, as PPO does; nothing is
kept between iterations. The defaults are purejaxql's classic-control settings
(``purejaxql/config/alg/pqn_cartpole.yaml``) but for the learning rate's decay, which needs a
budget: the preset rows carry it.

============================  ===================  ==============================================
field                         default              meaning (purejaxql's name)
============================  ===================  ==============================================
``lr``                        1e-4                 RAdam's learning rate (``LR``); a schedule over
                                                   env steps decays it (``LR_LINEAR_DECAY``)
``gamma``                     0.99                 discount (``GAMMA``)
``lambda_``                   0.95                 the lambda of the targets (``LAMBDA``)
``epsilon``                   ((0, 1.0),           epsilon-greedy over env steps (``EPS_START``,
                              (100000, 0.2))       ``EPS_FINISH``, ``EPS_DECAY`` of the budget)
``reward_scale``              1.0                  rewards are multiplied by it (``REW_SCALE``)
``train_batch_size``          2048                 env steps per iteration (``NUM_ENVS`` x
                                                   ``NUM_STEPS``: 32 x 64)
``minibatch_size``            128                  rows per gradient step (2048 /
                                                   ``NUM_MINIBATCHES``)
``num_epochs``                4                    passes over each batch (``NUM_EPOCHS``)
``grad_clip``                 10.0                 ``MAX_GRAD_NORM`` (``grad_clip_by``:
                                                   global_norm)
``hidden_sizes``              (256, 256)           ``HIDDEN_SIZE`` x ``NUM_LAYERS``
``activation``                "relu"
``layer_norm``                True                 a LayerNorm before every activation
                                                   (``NORM_TYPE: layer_norm``)
``ortho_init``                True                 orthogonal init; False: PyTorch's default
``conv_padding``              "same"               the CNN's padding for images
``conv_filters``              None                 the CNN's ``(out_channels, kernel, stride)``
                                                   layers; None: the Nature DQN's
============================  ===================  ==============================================

The targets are :func:`~jaxlearner.algorithms.trajectories.returns.gae`'s value targets with
``max_a Q(s, a)`` as the values, computed with the params the rollout was collected with (the
current ones): ``G[t] = r[t] + gamma * ((1 - lambda_) * max_a Q(s[t+1], a) + lambda_ *
G[t+1])``, without bootstrap after a termination, on the final observation's values after a
truncation (purejaxql does not bootstrap there), and on ``max_a Q`` of the last
observation at the rollout's end. The loss is ``0.5 * mean(mask * (Q(s, a) - G)^2)``.
"""

from __future__ import annotations

import dataclasses
import functools

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlearner.algorithms.algorithm import (
    MODULE_ID,
    Experience,
    OnPolicyAlgorithm,
    PostprocessFn,
    algorithm_fields,
)
from jaxlearner.algorithms.builtin import BuiltinAlgorithm, register_builtin, single_module_learner
from jaxlearner.algorithms.config import (
    CLIP_MODES,
    check_activation,
    check_bool,
    check_choice,
    check_conv_config,
    check_fraction,
    check_layers,
    check_learning_rates,
    check_minibatch_size,
    check_optional_positive,
    check_positive,
    check_positive_int,
    check_schedule,
    freeze_schedules,
    steps_per_env,
)
from jaxlearner.algorithms.networks.acting import epsilon_greedy
from jaxlearner.algorithms.networks.encoders import ConvFilters
from jaxlearner.algorithms.networks.models import q_network, q_network_options
from jaxlearner.algorithms.networks.spaces import zero_observation
from jaxlearner.algorithms.replay.off_policy import masked_mean
from jaxlearner.algorithms.trajectories.returns import gae
from jaxlearner.core.context import LossContext
from jaxlearner.core.learner import Learner
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.optimizer import Optimizer
from jaxlearner.core.schedules import ScheduleLike
from jaxlearner.core.state import ModuleState
from jaxlearner.types import Batch, Model, Params


@dataclasses.dataclass(frozen=True)
class PQNConfig:
    """PQN's configuration; see the module docstring for each field and purejaxql's name."""

    lr: ScheduleLike = 1e-4
    gamma: float = 0.99
    lambda_: float = 0.95
    epsilon: ScheduleLike = ((0, 1.0), (100_000, 0.2))
    reward_scale: float = 1.0
    train_batch_size: int = 2048
    minibatch_size: int = 128
    num_epochs: int = 4
    grad_clip: float | None = 10.0
    grad_clip_by: str = "global_norm"
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    layer_norm: bool = True
    ortho_init: bool = True
    conv_padding: str = "same"
    conv_filters: ConvFilters | None = None

    def __post_init__(self) -> None:
        owner = "PQNConfig"
        freeze_schedules(self, "lr", "epsilon")
        check_learning_rates(owner, lr=self.lr)
        check_schedule(owner, epsilon=self.epsilon)
        check_fraction(owner, gamma=self.gamma, lambda_=self.lambda_)
        check_positive(owner, reward_scale=self.reward_scale)
        check_optional_positive(owner, grad_clip=self.grad_clip)
        check_choice(owner, "grad_clip_by", self.grad_clip_by, CLIP_MODES)
        check_positive_int(
            owner,
            train_batch_size=self.train_batch_size,
            minibatch_size=self.minibatch_size,
            num_epochs=self.num_epochs,
        )
        check_layers(owner, hidden_sizes=self.hidden_sizes)
        check_activation(owner, activation=self.activation)
        check_bool(owner, layer_norm=self.layer_norm, ortho_init=self.ortho_init)
        check_conv_config(self)
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        check_minibatch_size(self)


def q_lambda_targets(
    experience: Experience, q_obs: jax.Array, q_next: jax.Array, config: PQNConfig
) -> jax.Array:
    """PQN's ``[T, N]`` Q(lambda) targets from the rollout's rewards and episode ends.

    Args:
      experience: the rollout's ``rewards``, ``terminated`` and ``truncated``, ``[T, N]``.
      q_obs: ``[T, N, A]`` Q-values of the observations acted in.
      q_next: ``[T, N, A]`` Q-values of the next observations (the final ones at episode
        ends).
      config: ``gamma``, ``lambda_`` and ``reward_scale``.

    Example:
      >>> targets = q_lambda_targets(experience, q_obs, q_next, PQNConfig())  # doctest: +SKIP
    """
    _, targets = gae(
        config.reward_scale * experience["rewards"],
        q_obs.max(axis=-1),
        q_next.max(axis=-1),
        experience["terminated"],
        experience["truncated"],
        config.gamma,
        config.lambda_,
    )
    return targets


def pqn_loss():
    """PQN's loss, ``loss(params, batch, ctx) -> (0.5 * mean(mask * td^2), metrics)``.

    ``batch`` holds ``[B]`` rows of ``obs``, ``actions`` (int indices), ``targets`` and
    ``mask``; ``ctx.apply(params, obs)`` returns Q-values ``[B, num_actions]``. Metrics:
    ``qf_mean``, ``td_error_mean`` (mean absolute) and ``target_mean``.

    Example:
      >>> value, metrics = pqn_loss()(params, batch, ctx)                  # doctest: +SKIP
    """

    def loss(params: Params, batch: Batch, ctx: LossContext) -> tuple[jax.Array, dict]:
        q = ctx.apply(params, batch["obs"])
        actions = batch["actions"].astype(jnp.int32)
        q_taken = jnp.take_along_axis(q, actions[:, None], axis=-1)[:, 0]
        td_error = q_taken - batch["targets"]
        mask = batch["mask"]
        return 0.5 * masked_mean(jnp.square(td_error), mask), {
            "qf_mean": masked_mean(q_taken, mask),
            "td_error_mean": masked_mean(jnp.abs(td_error), mask),
            "target_mean": masked_mean(batch["targets"], mask),
        }

    return loss


def make_learner(
    observation_space: gymnasium.Space, action_space: gymnasium.Space, config: PQNConfig
) -> Learner:
    """PQN's learner: one LayerNorm Q-network trained with RAdam in minibatch epochs."""
    model = q_network(observation_space, action_space, **q_network_options(config))
    optimizer = Optimizer(
        optax.radam,
        learning_rate=config.lr,
        grad_clip=config.grad_clip,
        grad_clip_by=config.grad_clip_by,
    )
    spec = ModuleSpec(
        model,
        pqn_loss(),
        optimizer,
        hyperparams={"epsilon": config.epsilon},
        init_input=lambda batch: batch["obs"],
    )
    row = jax.ShapeDtypeStruct((), np.float32)
    observation = zero_observation(observation_space)
    layout = {
        "obs": jax.ShapeDtypeStruct(observation.shape, observation.dtype),
        "actions": jax.ShapeDtypeStruct((), np.int32),
        "targets": row,
        "mask": row,
    }
    return single_module_learner(
        "pqn",
        observation_space,
        action_space,
        config,
        spec,
        layout,
        minibatch_size=config.minibatch_size,
        num_epochs=config.num_epochs,
        shuffle=True,
    )


def make_algorithm(
    learner: Learner, action_space: gymnasium.Space, config: PQNConfig
) -> OnPolicyAlgorithm:
    """PQN around ``learner`` (one of :func:`make_learner`): epsilon-greedy to explore, greedy
    to evaluate, and the Q(lambda) targets as postprocess."""
    model = learner.specs[MODULE_ID].model
    return OnPolicyAlgorithm(
        **algorithm_fields(
            "pqn", learner, config, epsilon_greedy(model, config.epsilon, action_space)
        ),
        rollout_steps=functools.partial(steps_per_env, "PQN", config.train_batch_size),
        postprocess=_postprocess(model, config),
    )


def _postprocess(model: Model, config: PQNConfig) -> PostprocessFn:
    """The rollout as ``[T * N]`` rows of ``obs``, ``actions``, ``targets`` and ``mask``."""

    def postprocess(module: ModuleState, experience: Experience) -> Batch:
        steps, envs = experience["rewards"].shape
        rows = lambda x: x.reshape(steps * envs, *x.shape[2:])
        both = jnp.concatenate([rows(experience["obs"]), rows(experience["next_obs"])])
        q_obs, q_next = jnp.split(model.apply(module.params, both), 2)
        shape = (steps, envs, q_obs.shape[-1])
        targets = q_lambda_targets(experience, q_obs.reshape(shape), q_next.reshape(shape), config)
        batch = {
            "obs": experience["obs"],
            "actions": experience["actions"].astype(jnp.int32),
            "targets": targets,
            "mask": experience["valid"].astype(jnp.float32),
        }
        return jax.tree.map(rows, batch)

    return postprocess


RECIPE = BuiltinAlgorithm("pqn", PQNConfig, make_learner, make_algorithm)
"""PQN's registry entry: its ``learner``, ``build`` and ``algorithm_for``."""

build, pqn = register_builtin(
    RECIPE,
    OnPolicyAlgorithm,
    parts="learner, epsilon-greedy, Q(lambda) postprocess",
    action_space=(
        "a ``Discrete`` space (a ``start`` offset is added to the actions sent to the "
        "environment; the index is trained on)."
    ),
    type_error="for an action space that is not ``Discrete``.",
    doc=RECIPE.learner_doc(
        "It trains on each rollout in minibatch epochs, as PPO does.", config='{"lr": 3e-4}'
    ),
)
