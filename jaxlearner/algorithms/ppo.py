"""PPO with RLlib's semantics: clipped surrogate, clipped value loss, adaptive KL penalty.

Schulman et al. 2017, https://arxiv.org/abs/1707.06347. Field names and
defaults follow RLlib's ``PPOConfig`` (new API stack):

============================  ==============  =====================================================
field                         default         meaning (RLlib's name where it differs)
============================  ==============  =====================================================
``lr``                        5e-5            Adam learning rate; constant or piecewise schedule
``adam_epsilon``              1e-8            Adam's epsilon (PyTorch's default, as RLlib's; SB3's
                                              PPO uses 1e-5, which the RL Zoo presets set)
``gamma``                     0.99            discount
``lambda_``                   1.0             GAE lambda
``clip_param``                0.3             surrogate clip ``epsilon`` (schedulable)
``vf_clip_param``             10.0            the *squared* value error is clipped at this
``vf_loss_coeff``             1.0             value loss weight
``entropy_coeff``             0.0             entropy bonus (schedulable)
``use_kl_loss``               True            add ``kl_coeff * KL(old || new)``
``kl_coeff``                  0.2             initial KL coefficient, adapted after each update
``kl_target``                 0.01            x1.5 above 2x target, x0.5 below 0.5x target
``grad_clip``                 None            clip threshold (``grad_clip_by``: global_norm)
``train_batch_size``          4000            env steps per training iteration
``minibatch_size``            128
``num_epochs``                30
``shuffle``                   True            ``shuffle_batch_per_epoch``
``normalize_advantages``      True            True or ``"batch"``: standardize over the train
                                              batch (RLlib's GAE connector does this always);
                                              ``"minibatch"``: each minibatch over its own rows,
                                              unbiased std + 1e-8 (SB3's ``normalize_advantage``);
                                              False: raw GAE advantages
``vf_share_layers``           False           one encoder for policy and value
``hidden_sizes``              (256, 256)      ``fcnet_hiddens``
``activation``                "tanh"          ``fcnet_activation``
``head_hidden_sizes``         ()              ``head_fcnet_hiddens``: hidden layers of each head
``head_activation``           "relu"          ``head_fcnet_activation``
``log_std_init``              0.0             initial state-independent log-std (Box actions)
``ortho_init``                True            orthogonal init (gain sqrt(2) hidden, 0.01 policy,
                                              1 value); False: PyTorch's default, as SB3's
                                              ``ortho_init=False`` (jaxlearner's; SB3's name)
``conv_padding``              "same"          the CNN's padding for images; "valid": the
                                              Nature DQN's (SB3's ``NatureCNN``)
``conv_filters``              None            the CNN's ``(out_channels, kernel, stride)``
                                              layers (RLlib's name); None: the Nature DQN's
                                              (): no CNN, pixels flattened
``use_lstm``                  False           an LSTM (or GRU) after the MLP encoder
``lstm_cell_size``            256             the cell's units
``max_seq_len``               20              steps per training sequence
``recurrent_cell``            "lstm"          ``"lstm"`` or ``"gru"`` (jaxlearner's; RLlib has LSTM)
``norm_obs``                  False           running observation mean/std (SB3 ``VecNormalize``,
                                              RLlib ``MeanStdFilter``)
``norm_reward``               False           rewards / std of the running discounted return
``clip_obs``                  10.0            normalized observations clipped to +-clip_obs
``clip_reward``               10.0            scaled rewards clipped to +-clip_reward
``num_envs_per_env_runner``   1               environments the reward statistics keep a running
                                              return for (must equal the Trainer's num_envs)
============================  ==============  =====================================================

With ``norm_obs`` or ``norm_reward`` the statistics are observers of the module
(:mod:`~jaxlearner.algorithms.trajectories.normalization`): updated from each collected
batch before postprocessing, which then values the batch's observations and next
observations and scales its rewards with them (one normalization for both ends of every TD
error, as brax's PPO), while the loss trains on the observations as the act functions
normalized them (its first ratio is 1, as with SB3's rollout buffer); the act functions
normalize with the statistics in the state they are given, frozen in evaluation.

With ``use_lstm`` the model is recurrent
(:func:`~jaxlearner.algorithms.networks.recurrent.recurrent_actor_critic`): the act
functions are :class:`~jaxlearner.algorithms.algorithm.RecurrentAct` values that
carry the state from step to step (reset where an episode starts), and
``postprocess`` cuts each environment's rollout into zero-padded sequences of
``max_seq_len`` steps, each with the state it started from
(:mod:`~jaxlearner.algorithms.trajectories.sequences`), which :func:`recurrent_ppo_loss`
unrolls. As in RLlib, ``minibatch_size`` counts env steps: a minibatch is
``minibatch_size // max_seq_len`` sequences (a multiple of ``max_seq_len`` is
required). There is no burn-in: each sequence starts from the state stored
when it was collected (RLlib's default).

As in RLlib, ``total = mean(-surrogate + vf_loss_coeff * min((V - V_target)^2,
vf_clip_param) - entropy_coeff * entropy) + kl_coeff * mean(KL)``. GAE
bootstraps on truncation (on the value of the final observation) and not on
termination.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp

from jaxlearner.algorithms.algorithm import (
    MODULE_ID,
    Experience,
    OnPolicyAlgorithm,
    PostprocessFn,
    RecurrentAct,
    algorithm_fields,
)
from jaxlearner.algorithms.builtin import BuiltinAlgorithm, register_builtin, single_module_learner
from jaxlearner.algorithms.config import (
    check_minibatch_size,
    check_positive,
    check_positive_int,
    config_adam,
    steps_per_env,
)
from jaxlearner.algorithms.networks.acting import explore_and_exploit, policy_actions
from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec
from jaxlearner.algorithms.networks.encoders import ConvFilters
from jaxlearner.algorithms.networks.heads import distribution_for
from jaxlearner.algorithms.networks.models import actor_critic, actor_critic_options
from jaxlearner.algorithms.networks.recurrent import CELLS, initial_carry, recurrent_actor_critic
from jaxlearner.algorithms.networks.spaces import bounds
from jaxlearner.algorithms.objectives.ppo_objective import (
    check_ppo_fields,
    masked_mean_std,
    ppo_batch_layout,
    ppo_loss,
    ppo_sequence_batch_layout,
    recurrent_ppo_loss,
)
from jaxlearner.algorithms.trajectories.normalization import (
    NORMALIZED_OBS,
    Normalization,
    normalization_for,
)
from jaxlearner.algorithms.trajectories.returns import gae
from jaxlearner.algorithms.trajectories.sequences import chunk_sequences, chunk_starts
from jaxlearner.core.additional_updates import adaptive_kl_coeff
from jaxlearner.core.learner import Learner
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.schedules import ScheduleLike
from jaxlearner.core.state import ModuleState
from jaxlearner.types import Batch, Model


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO's configuration; see the module docstring for each field and RLlib's default."""

    lr: ScheduleLike = 5e-5
    adam_epsilon: float = 1e-8
    gamma: float = 0.99
    lambda_: float = 1.0
    clip_param: ScheduleLike = 0.3
    vf_clip_param: float = 10.0
    vf_loss_coeff: float = 1.0
    entropy_coeff: ScheduleLike = 0.0
    use_kl_loss: bool = True
    kl_coeff: float = 0.2
    kl_target: float = 0.01
    grad_clip: float | None = None
    grad_clip_by: str = "global_norm"
    train_batch_size: int = 4000
    minibatch_size: int = 128
    num_epochs: int = 30
    shuffle: bool = True
    normalize_advantages: bool | str = True
    vf_share_layers: bool = False
    hidden_sizes: tuple[int, ...] = (256, 256)
    activation: str = "tanh"
    head_hidden_sizes: tuple[int, ...] = ()
    head_activation: str = "relu"
    log_std_init: float = 0.0
    ortho_init: bool = True
    conv_padding: str = "same"
    conv_filters: ConvFilters | None = None
    use_lstm: bool = False
    lstm_cell_size: int = 256
    max_seq_len: int = 20
    recurrent_cell: str = "lstm"
    norm_obs: bool = False
    norm_reward: bool = False
    clip_obs: float = 10.0
    clip_reward: float = 10.0
    num_envs_per_env_runner: int = 1

    def __post_init__(self) -> None:
        check_ppo_fields(self)
        normalize = self.normalize_advantages
        if not (isinstance(normalize, bool) or normalize in ("batch", "minibatch")):
            raise ValueError(
                f"PPOConfig.normalize_advantages must be True, False, 'batch' or 'minibatch'; "
                f"got {normalize!r}."
            )
        check_positive(
            "PPOConfig", vf_clip_param=self.vf_clip_param, adam_epsilon=self.adam_epsilon
        )
        check_positive_int(
            "PPOConfig",
            train_batch_size=self.train_batch_size,
            minibatch_size=self.minibatch_size,
            num_epochs=self.num_epochs,
            lstm_cell_size=self.lstm_cell_size,
            max_seq_len=self.max_seq_len,
        )
        self._check_recurrent()
        check_minibatch_size(self)

    def _check_recurrent(self) -> None:
        if not isinstance(self.use_lstm, bool):
            raise TypeError(f"PPOConfig.use_lstm must be a bool; got {self.use_lstm!r}.")
        if self.recurrent_cell not in CELLS:
            raise ValueError(
                f"PPOConfig.recurrent_cell must be one of {list(CELLS)}; got "
                f"{self.recurrent_cell!r}."
            )
        if self.use_lstm and self.minibatch_size % self.max_seq_len:
            raise ValueError(
                f"PPOConfig.minibatch_size ({self.minibatch_size}) counts env steps and must be a "
                f"multiple of max_seq_len ({self.max_seq_len}) with use_lstm=True: a minibatch "
                f"is minibatch_size // max_seq_len whole sequences."
            )


def _per_minibatch(config: PPOConfig) -> bool:
    """Whether the loss standardizes each minibatch's advantages (SB3's way)."""
    return config.normalize_advantages == "minibatch"


def make_learner(
    observation_space: gymnasium.Space, action_space: gymnasium.Space, config: PPOConfig
) -> Learner:
    """PPO's learner: one actor-critic module trained in minibatch epochs.

    With ``use_lstm`` the model is recurrent and the learner trains on
    sequences: its rows are ``[max_seq_len]`` steps, and its minibatches
    ``minibatch_size // max_seq_len`` sequences.
    """
    spec, layout = ppo_module(observation_space, action_space, config)
    minibatch_size = config.minibatch_size
    if config.use_lstm and minibatch_size is not None:
        minibatch_size //= config.max_seq_len
    return single_module_learner(
        "ppo",
        observation_space,
        action_space,
        config,
        spec,
        layout,
        minibatch_size=minibatch_size,
        num_epochs=config.num_epochs,
        shuffle=config.shuffle,
    )


def ppo_module(
    observation_space: gymnasium.Space, action_space: gymnasium.Space, config: PPOConfig
) -> tuple[ModuleSpec, dict[str, jax.ShapeDtypeStruct]]:
    """One PPO module for the two spaces: its spec and its batch layout.

    The module-level fields of ``config`` (model, optimizer, loss coefficients,
    KL, ``use_lstm``) shape the module; the learner-level ones
    (``minibatch_size``, ``num_epochs``, ``shuffle``) are for the
    :class:`~jaxlearner.Learner` that holds it. For learners of several PPO
    modules (multi-agent). With ``use_lstm`` the layout's rows are
    ``[max_seq_len]`` sequences.

    Example:
      >>> spec, layout = ppo_module(env.observation_space, env.action_space, PPOConfig())
      ... # doctest: +SKIP
      >>> learner = jl.Learner({"left": spec, "right": spec},
      ...                      batch_layout={"left": layout, "right": layout})  # doctest: +SKIP
    """
    distribution = distribution_for(action_space)
    common = actor_critic_options(config)
    if config.use_lstm:
        model = recurrent_actor_critic(
            observation_space,
            action_space,
            cell=config.recurrent_cell,
            cell_size=config.lstm_cell_size,
            **common,
        )
        loss = recurrent_ppo_loss(distribution, config.use_kl_loss, _per_minibatch(config))
        init_input = lambda batch: (batch["state_in"], batch["obs"][:, 0], batch["is_first"][:, 0])
        layout = ppo_sequence_batch_layout(
            observation_space, distribution, model, config.max_seq_len
        )
    else:
        model = actor_critic(observation_space, action_space, **common)
        loss = ppo_loss(distribution, config.use_kl_loss, _per_minibatch(config))
        init_input = lambda batch: batch["obs"]
        layout = ppo_batch_layout(observation_space, distribution)
    observers = normalization_for(config, config.gamma).observers(observation_space)
    return _module_spec(model, loss, init_input, config, observers), layout


def _module_spec(
    model: Model, loss: Callable, init_input: Callable, config: PPOConfig, observers: tuple
) -> ModuleSpec:
    """The module: PPO's loss, Adam, the loss coefficients and the adaptive KL coefficient."""
    return ModuleSpec(
        model,
        loss,
        config_adam(config, eps=config.adam_epsilon),
        hyperparams={
            "clip_param": config.clip_param,
            "vf_clip_param": config.vf_clip_param,
            "vf_loss_coeff": config.vf_loss_coeff,
            "entropy_coeff": config.entropy_coeff,
        },
        additional_updates=[adaptive_kl_coeff(config.kl_coeff, config.kl_target)],
        init_input=init_input,
        metric_reductions={"mean_kl": "mean"},
        observers=observers,
    )


def make_algorithm(
    learner: Learner,
    action_space: gymnasium.Space,
    config: PPOConfig,
    module_id: str = MODULE_ID,
) -> OnPolicyAlgorithm:
    """PPO around ``learner`` (one of :func:`make_learner`): act functions and postprocess.

    They apply the learner's own model (``learner.specs[module_id].model``,
    ``"default_policy"`` unless another PPO module of a multi-module learner is
    named); nothing is built but these functions. With ``use_lstm`` the act
    functions are :class:`~jaxlearner.algorithms.algorithm.RecurrentAct` values.
    """
    model = learner.specs[module_id].model
    distribution, box = distribution_for(action_space), bounds(action_space)
    norm = normalization_for(config, config.gamma)
    if config.use_lstm:
        act = _recurrent_act(model, distribution, box, norm)
        carry = functools.partial(initial_carry, model)
        explore: Any = RecurrentAct(functools.partial(act, deterministic=False), carry)
        exploit: Any = RecurrentAct(functools.partial(act, deterministic=True), carry)
        postprocess = _recurrent_postprocess(model, config, norm)
    else:
        explore, exploit = explore_and_exploit(_act(model, distribution, box, norm))
        postprocess = _postprocess(model, config, norm)
    return OnPolicyAlgorithm(
        **algorithm_fields("ppo", learner, config, (explore, exploit), module_id),
        rollout_steps=functools.partial(_rollout_steps, config, norm),
        postprocess=postprocess,
    )


def _act(
    model: Model, distribution: DistributionSpec, box: tuple | None, norm: Normalization
) -> Callable:
    """``act(module, obs, key, deterministic) -> (env_actions, extras)``: extras ``actions``
    (unclipped) and ``logp`` (:func:`~jaxlearner.algorithms.networks.acting.policy_actions`),
    ``vf_preds`` and ``dist_inputs``; observations normalized with the module's statistics."""

    def act(module: ModuleState, obs: jax.Array, key: jax.Array, deterministic: bool):
        obs = norm.observation(module.extra, obs)
        dist_inputs, values = model.apply(module.params, obs)
        env_actions, extras = policy_actions(distribution, box, dist_inputs, key, deterministic)
        extras = {**extras, **norm.act_extras(obs)}
        return env_actions, {**extras, "vf_preds": values, "dist_inputs": dist_inputs}

    return act


def _recurrent_act(
    model: Model, distribution: DistributionSpec, box: tuple | None, norm: Normalization
) -> Callable:
    """``act(module, carry, obs, is_first, key, deterministic) -> (env_actions, extras, carry)``.

    Extras as :func:`_act`'s, plus ``state_in`` (the carry given, before the
    reset at ``is_first``) and ``is_first``, which postprocess replays from.
    """

    def act(module, carry, obs, is_first, key, deterministic: bool):
        is_first = jnp.asarray(is_first, jnp.bool_)
        obs = norm.observation(module.extra, obs)
        next_carry, (dist_inputs, values) = model.apply(module.params, carry, obs, is_first)
        env_actions, extras = policy_actions(distribution, box, dist_inputs, key, deterministic)
        extras = {**extras, **norm.act_extras(obs), "vf_preds": values, "dist_inputs": dist_inputs}
        return env_actions, {**extras, "state_in": carry, "is_first": is_first}, next_carry

    return act


def _advantages(experience: Experience, next_values: jax.Array, config: PPOConfig) -> dict:
    """GAE advantages (standardized over valid steps if configured), value targets and the
    mask of valid steps, all ``[T, N]``."""
    advantages, targets = gae(
        experience["rewards"],
        experience["vf_preds"],
        next_values,
        experience["terminated"],
        experience["truncated"],
        config.gamma,
        config.lambda_,
    )
    mask = experience["valid"].astype(jnp.float32)
    if config.normalize_advantages in (True, "batch"):
        mean, std = masked_mean_std(advantages, mask)
        advantages = (advantages - mean) / jnp.maximum(std, 1e-4)
    return {
        "obs": experience["obs"],
        "actions": experience["actions"],
        "logp": experience["logp"],
        "dist_inputs": experience["dist_inputs"],
        "advantages": advantages,
        "value_targets": targets,
        "mask": mask,
    }


def _postprocess(model: Model, config: PPOConfig, norm: Normalization) -> PostprocessFn:
    """GAE advantages and value targets, as ``[T * N]`` rows (observations normalized and
    rewards scaled with the module's statistics first)."""

    def postprocess(module: ModuleState, experience: Experience) -> Batch:
        experience = norm.experience(module.extra, experience)
        steps, envs = experience["rewards"].shape
        rows = lambda x: x.reshape(steps * envs, *x.shape[2:])
        if norm.observations:
            # The act's values saw the statistics before this batch: both ends of every
            # TD error are valued here, on one normalization (Normalization.experience).
            both = jnp.concatenate([rows(experience["obs"]), rows(experience["next_obs"])])
            values, next_values = jnp.split(model.apply(module.params, both)[1], 2)
            experience = {**experience, "vf_preds": values.reshape(steps, envs)}
            experience["obs"] = experience.pop(NORMALIZED_OBS)  # the loss's first ratio is 1
        else:
            next_values = model.apply(module.params, rows(experience["next_obs"]))[1]
        batch = _advantages(experience, next_values.reshape(steps, envs), config)
        return jax.tree.map(rows, batch)

    return postprocess


def _recurrent_postprocess(model: Model, config: PPOConfig, norm: Normalization) -> PostprocessFn:
    """GAE advantages and value targets as ``[S, max_seq_len]`` sequences with their start states.

    The value of each ``next_obs`` needs the carry after its step: one model
    step from the stored ``state_in`` (with its ``is_first`` reset), run for
    all ``T * N`` steps at once, gives it; ``next_obs`` belongs to the same
    episode (it is the final observation where the episode ended), so it is
    not reset.
    """

    def postprocess(module: ModuleState, experience: Experience) -> Batch:
        experience = norm.experience(module.extra, experience)
        steps, envs = experience["rewards"].shape
        rows = lambda x: x.reshape(steps * envs, *x.shape[2:])
        state_in, is_first = experience["state_in"], experience["is_first"]
        apply = functools.partial(model.apply, module.params)
        state_out, (_, values) = apply(
            jax.tree.map(rows, state_in), rows(experience["obs"]), rows(is_first)
        )
        not_first = jnp.zeros(steps * envs, jnp.bool_)
        next_values = apply(state_out, rows(experience["next_obs"]), not_first)[1][1]
        if norm.observations:
            # As in _postprocess: both ends of every TD error on one normalization.
            experience = {**experience, "vf_preds": values.reshape(steps, envs)}
            experience["obs"] = experience.pop(NORMALIZED_OBS)
        batch = _advantages(experience, next_values.reshape(steps, envs), config)
        # mask is 0 on padding too: chunk_sequences pads it with zeros.
        sequences, _ = chunk_sequences({**batch, "is_first": is_first}, config.max_seq_len)
        return {**sequences, "state_in": chunk_starts(state_in, config.max_seq_len)}

    return postprocess


def _rollout_steps(config: PPOConfig, norm: Normalization, num_envs: int) -> int:
    norm.check_num_envs("PPOConfig", num_envs)
    # With use_lstm, N * ceil(T / L) sequences >= train_batch_size / L >= one minibatch.
    return steps_per_env("PPO", config.train_batch_size, num_envs)


RECIPE = BuiltinAlgorithm("ppo", PPOConfig, make_learner, make_algorithm)
"""PPO's registry entry: its ``learner``, ``build`` and ``algorithm_for``."""

build, ppo = register_builtin(
    RECIPE, OnPolicyAlgorithm, doc=RECIPE.learner_doc(config='{"lr": 3e-4}')
)
