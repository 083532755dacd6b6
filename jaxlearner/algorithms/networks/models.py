"""Flax models built from gymnasium spaces: PPO's actor-critic, DQN's Q-network, SAC's.

The ``*_for`` and factory
functions read a space's ``shape``, ``n``, ``nvec``, ``low`` and ``high`` and
build ``flax.linen`` modules whose fields are plain hashable values, so the
modules themselves know nothing of gymnasium.

Outputs and parameter paths (``params["params"][...]``):

* :func:`actor_critic` (PPO): ``obs -> (dist_inputs [..., P], value [...])``;
  ``make_distribution(distribution_for(action_space), dist_inputs)`` gives the
  policy. Submodules ``actor`` and ``critic``, plus ``encoder`` when shared.
* :func:`q_network` (DQN): ``obs -> q [..., n]``.
* :func:`sac_networks` (SAC): methods ``policy``, ``q_values`` and
  ``log_alpha`` on submodules ``actor``, ``critic`` (``num_critics`` stacked
  critics, params with a leading ``[num_critics]`` axis) and ``temperature``
  (one param, ``log_alpha``), so optimizers named ``actor``, ``critic`` and
  ``temperature`` each find their params.

Hidden layers use orthogonal initialisation with gain ``sqrt(2)``; the policy
head gain 0.01 and value and Q heads gain 1 (as in Andrychowicz et al. 2020,
https://arxiv.org/abs/2006.05990). :func:`actor_critic` takes ``ortho_init=False``
for PyTorch's default initialisation instead (SB3's ``ortho_init=False``), with
the same param names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp

from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec
from jaxlearner.algorithms.networks.encoders import (
    MLP,
    ConvFilters,
    dense,
    encoder_for,
)
from jaxlearner.algorithms.networks.heads import (
    PolicyHead,
    Tower,
    ValueHead,
    check_log_std,
    distribution_for,
    with_hidden_layers,
)


class ActorCritic(nn.Module):
    """PPO's network: ``obs -> (dist_inputs [..., P], value [...])``.

    Attributes:
      actor: features (or observations) to distribution inputs.
      critic: features (or observations) to values.
      encoder: a shared encoder run first (RLlib's ``vf_share_layers``), or
        ``None`` when ``actor`` and ``critic`` each encode the observations.

    Example:
      >>> model = actor_critic(gymnasium.spaces.Box(-1, 1, (4,)), gymnasium.spaces.Discrete(2))
      >>> params = model.init(jax.random.key(0), jnp.zeros((8, 4)))
      >>> dist_inputs, value = model.apply(params, jnp.zeros((8, 4)))  # [8, 2], [8]
    """

    actor: nn.Module
    critic: nn.Module
    encoder: nn.Module | None = None

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        features = obs if self.encoder is None else self.encoder(obs)
        return self.actor(features), self.critic(features)


def actor_critic(
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    share_encoder: bool = False,
    squash: bool = False,
    log_std_init: float = 0.0,
    head_hidden_sizes: Sequence[int] = (),
    head_activation: str = "relu",
    ortho_init: bool = True,
    conv_padding: str = "same",
    conv_filters: ConvFilters | None = None,
) -> ActorCritic:
    """PPO's :class:`ActorCritic` for two gymnasium spaces.

    Params: with ``share_encoder=False``, ``actor/{encoder,head}`` and
    ``critic/{encoder,head}``; with ``share_encoder=True``, ``encoder``,
    ``actor`` (the policy head) and ``critic`` (the value head).

    Args:
      observation_space: see :func:`encoder_for`.
      action_space: see :func:`distribution_for`.
      hidden_sizes: each encoder's MLP layers.
      activation: the MLPs' activation.
      share_encoder: one encoder for both heads (RLlib's ``vf_share_layers``).
      squash: for ``Box`` actions, a tanh-squashed Gaussian instead of a plain one.
      log_std_init: initial state-independent ``log_std`` for ``Box`` actions.
      head_hidden_sizes: hidden layers of the policy and the value head, after
        the encoder (RLlib's ``head_fcnet_hiddens``); ``()``: linear heads.
      head_activation: their activation (RLlib's ``head_fcnet_activation``).
      ortho_init: orthogonal initialisation (gain ``sqrt(2)`` hidden, 0.01
        policy output, 1 value output, zero biases) as SB3's ``ortho_init=True``,
        or PyTorch's default ``nn.Linear`` initialisation for every layer, as
        SB3's ``ortho_init=False``; see
        :func:`~jaxlearner.algorithms.networks.encoders.dense`.
      conv_padding: the CNN's padding for images (see :func:`encoder_for`).
      conv_filters: the CNN's layers for images (see :func:`encoder_for`).

    Returns:
      The module; ``make_distribution(distribution_for(action_space, squash),
      dist_inputs)`` is its policy.

    Raises:
      TypeError, ValueError: for unsupported spaces, as :func:`encoder_for`
        and :func:`distribution_for`.

    Example:
      >>> box = gymnasium.spaces.Box(-1.0, 1.0, (3,))
      >>> model = actor_critic(gymnasium.spaces.Box(-1, 1, (4,)), box, share_encoder=True)
      >>> params = model.init(jax.random.key(0), jnp.zeros((8, 4)))
      >>> sorted(params["params"])
      ['actor', 'critic', 'encoder']
    """
    spec = distribution_for(action_space, squash)
    head = lambda out: with_hidden_layers(out, head_hidden_sizes, head_activation, ortho_init)
    policy = head(PolicyHead(spec, log_std_init=log_std_init, ortho_init=ortho_init))
    value = head(ValueHead(ortho_init))
    encoder = lambda: encoder_for(
        observation_space, hidden_sizes, activation, ortho_init, conv_padding, conv_filters
    )
    if share_encoder:
        return ActorCritic(policy, value, encoder())
    return ActorCritic(Tower(encoder(), policy), Tower(encoder(), value))


def actor_critic_options(config: Any) -> dict[str, Any]:
    """The keyword arguments of :func:`actor_critic` that an actor-critic config sets.

    For PPO's, APPO's and MARWIL's configs (RLlib's field names):
    ``hidden_sizes``, ``activation``, ``vf_share_layers`` (as ``share_encoder``),
    ``log_std_init``, ``head_hidden_sizes``, ``head_activation``, ``ortho_init``,
    ``conv_padding`` and ``conv_filters``;
    :func:`~jaxlearner.algorithms.networks.recurrent.recurrent_actor_critic`
    takes the same.

    Example:
      >>> model = actor_critic(obs_space, action_space, **actor_critic_options(PPOConfig()))
      ... # doctest: +SKIP
    """
    return {
        "hidden_sizes": config.hidden_sizes,
        "activation": config.activation,
        "share_encoder": config.vf_share_layers,
        "log_std_init": config.log_std_init,
        "head_hidden_sizes": config.head_hidden_sizes,
        "head_activation": config.head_activation,
        "ortho_init": config.ortho_init,
        "conv_padding": config.conv_padding,
        "conv_filters": config.conv_filters,
    }


class QNetwork(nn.Module):
    """Q-values over discrete actions: ``obs -> q [..., num_actions]``.

    With ``dueling`` (Wang et al. 2016, https://arxiv.org/abs/1511.06581):
    ``q = value + advantage - mean(advantage)`` from two streams.

    Attributes:
      encoder: observations to features.
      num_actions: the number of actions.
      dueling: use the dueling decomposition.
      head_hidden_sizes: hidden layers of each head (of each stream when
        dueling) before its output layer; ``()``: linear heads.
      activation: the head layers' activation.
      ortho_init: orthogonal head layers, or PyTorch's default (:func:`dense`).
    """

    encoder: nn.Module
    num_actions: int
    dueling: bool = False
    head_hidden_sizes: Sequence[int] = ()
    activation: str = "relu"
    ortho_init: bool = True

    def _head(self, features: jax.Array, size: int, name: str) -> jax.Array:
        if self.head_hidden_sizes:
            hidden = MLP(
                self.head_hidden_sizes, self.activation, self.ortho_init, name=f"{name}_hidden"
            )
            features = hidden(features)
        return dense(size, 1.0, name, features.shape[-1], self.ortho_init)(features)

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        features = self.encoder(obs)
        if not self.dueling:
            return self._head(features, self.num_actions, "q")
        value = self._head(features, 1, "value")
        advantage = self._head(features, self.num_actions, "advantage")
        return value + advantage - jnp.mean(advantage, axis=-1, keepdims=True)


def q_network(
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    hidden_sizes: Sequence[int] = (256, 256),
    activation: str = "relu",
    dueling: bool = False,
    head_hidden_sizes: Sequence[int] = (),
    conv_padding: str = "same",
    conv_filters: ConvFilters | None = None,
    ortho_init: bool = True,
    layer_norm: bool = False,
) -> QNetwork:
    """DQN's :class:`QNetwork` for two gymnasium spaces.

    Args:
      observation_space: see :func:`encoder_for`.
      action_space: a ``Discrete`` space (actions are indices in ``[0, n)``).
      hidden_sizes: the encoder's MLP layers.
      activation: the MLPs' activation.
      dueling: use the dueling decomposition.
      head_hidden_sizes: hidden layers of each head or dueling stream.
      conv_padding: the CNN's padding for images (see :func:`encoder_for`).
      conv_filters: the CNN's layers for images (see :func:`encoder_for`).
      ortho_init: orthogonal layers (gain ``sqrt(2)`` hidden, 1 output), or PyTorch's default
        (SB3's DQN keeps it; :func:`dense`).
      layer_norm: a ``LayerNorm`` before each of the encoder's activations (PQN's).

    Returns:
      ``obs [..., *obs_shape] -> q [..., n]``.

    Raises:
      TypeError: when the action space is not ``Discrete``, or for an
        unsupported observation space.

    Example:
      >>> model = q_network(gymnasium.spaces.Box(-1, 1, (4,)), gymnasium.spaces.Discrete(2))
      >>> params = model.init(jax.random.key(0), jnp.zeros((8, 4)))
    """
    if not isinstance(action_space, gymnasium.spaces.Discrete):
        raise TypeError(
            f"q_network supports Discrete action spaces only; got {action_space!r}. "
            "For Box actions use sac_networks."
        )
    encoder = encoder_for(
        observation_space,
        hidden_sizes,
        activation,
        ortho_init,
        conv_padding=conv_padding,
        conv_filters=conv_filters,
        layer_norm=layer_norm,
    )
    head = MLP(head_hidden_sizes, activation)  # checks the sizes now, not when traced
    return QNetwork(
        encoder, int(action_space.n), dueling, head.hidden_sizes, activation, ortho_init
    )


Q_NETWORK_FIELDS = (
    "hidden_sizes",
    "activation",
    "dueling",
    "head_hidden_sizes",
    "conv_padding",
    "conv_filters",
    "ortho_init",
    "layer_norm",
)
"""The config fields :func:`q_network` takes, by their names."""


def q_network_options(config: Any) -> dict[str, Any]:
    """The keyword arguments of :func:`q_network` that a Q-learning config sets: those of
    :data:`Q_NETWORK_FIELDS` it has (DQN's and PQN's configs; PQN's has no dueling streams,
    DQN's no ``layer_norm``).

    Example:
      >>> model = q_network(obs_space, action_space, **q_network_options(DQNConfig()))
      ... # doctest: +SKIP
    """
    return {name: getattr(config, name) for name in Q_NETWORK_FIELDS if hasattr(config, name)}


class StateActionValue(nn.Module):
    """``Q(s, a)`` for continuous actions: ``(obs, action [..., d]) -> q [...]``.

    The action is concatenated to the encoded observation, then an MLP.

    Attributes:
      encoder: observations to features (an MLP-less :class:`Encoder` for
        vectors, so the action enters at the first layer).
      hidden_sizes: the MLP after the concatenation.
      activation: the MLP's activation.
      ortho_init: orthogonal layers, or PyTorch's default (:func:`dense`).
    """

    encoder: nn.Module
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    ortho_init: bool = True

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([self.encoder(obs), jnp.asarray(action, jnp.float32)], axis=-1)
        x = MLP(self.hidden_sizes, self.activation, self.ortho_init, name="mlp")(x)
        return dense(1, 1.0, "q", x.shape[-1], self.ortho_init)(x)[..., 0]


class Temperature(nn.Module):
    """SAC's entropy temperature: one param ``log_alpha``, returned by ``__call__()``.

    Attributes:
      initial_alpha: ``exp(log_alpha)`` at init.
    """

    initial_alpha: float = 1.0

    @nn.compact
    def __call__(self) -> jax.Array:
        initial = math.log(self.initial_alpha)
        return self.param("log_alpha", nn.initializers.constant(initial), ())


def stacked(module_class: type[nn.Module], num: int) -> type[nn.Module]:
    """``module_class`` as ``num`` independent copies, params and outputs ``[num, ...]``.

    Inputs are shared by all copies. Used for SAC's twin critics.

    Example:
      >>> twin = stacked(MLP, 2)((8,), "relu")
      >>> params = twin.init(jax.random.key(0), jnp.zeros((5, 3)))
      >>> params["params"]["dense_0"]["kernel"].shape, twin.apply(params, jnp.zeros((5, 3))).shape
      ((2, 3, 8), (2, 5, 8))
    """
    return nn.vmap(
        module_class,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=None,
        out_axes=0,
        axis_size=num,
    )


class SACNetworks(nn.Module):
    """SAC's actor, critics and temperature in one module.

    Whichever method ``init`` calls creates every param (``log_alpha`` only
    when given an observation), so a loss may call them in any order.

    Attributes:
      actor: ``obs -> dist_inputs [..., P]``.
      critic: stacked critics: ``(obs, action) -> [C, ...]`` for continuous
        actions, ``obs -> [C, ..., n]`` for discrete ones.
      temperature: a :class:`Temperature`.
      distribution: the actor's distribution spec.

    Example:
      >>> model = sac_networks(gymnasium.spaces.Box(-1, 1, (3,)), gymnasium.spaces.Box(-2, 2, (1,)))
      >>> params = model.init(jax.random.key(0), jnp.zeros((8, 3)))
      >>> q = model.apply(params, jnp.zeros((8, 3)), jnp.zeros((8, 1)), method="q_values")  # [2, 8]
    """

    actor: nn.Module
    critic: nn.Module
    temperature: nn.Module
    distribution: DistributionSpec

    def __call__(
        self, obs: jax.Array, action: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(dist_inputs, q, log_alpha)``; continuous critics see zeros without an action."""
        dist_inputs = self.actor(obs)
        if action is None and not self.distribution.is_discrete:
            action = jnp.zeros((*dist_inputs.shape[:-1], self.distribution.sizes[0]), jnp.float32)
        return dist_inputs, self._q_values(obs, action), self.temperature()

    def policy(self, obs: jax.Array) -> jax.Array:
        """Distribution inputs ``[..., P]``; see ``make_distribution(self.distribution, ...)``."""
        if self.is_initializing():
            return self(obs)[0]
        return self.actor(obs)

    def q_values(self, obs: jax.Array, action: jax.Array | None = None) -> jax.Array:
        """Every critic's Q-values.

        Args:
          obs: ``[..., *obs_shape]``.
          action: ``[..., d]`` float (continuous, required) or ``[...]`` int
            (discrete, optional).

        Returns:
          ``[C, ...]`` given an action; ``[C, ..., n]`` over all discrete
          actions without one.
        """
        if action is None and not self.distribution.is_discrete:
            raise ValueError(
                "SACNetworks.q_values needs an action [..., d] for a Box action space."
            )
        if self.is_initializing():
            self(obs)
        return self._q_values(obs, action)

    def log_alpha(self, obs: jax.Array | None = None) -> jax.Array:
        """The temperature's ``log_alpha`` (a scalar).

        ``obs`` is read only by ``init``, to create the other params too.
        """
        if self.is_initializing() and obs is not None:
            return self(obs)[2]
        return self.temperature()

    def _q_values(self, obs: jax.Array, action: jax.Array | None) -> jax.Array:
        if not self.distribution.is_discrete:
            return self.critic(obs, action)
        q = self.critic(obs)
        if action is None:
            return q
        index = jnp.broadcast_to(jnp.asarray(action, jnp.int32)[..., None], (*q.shape[:-1], 1))
        return jnp.take_along_axis(q, index, axis=-1)[..., 0]


def sac_networks(
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    hidden_sizes: Sequence[int] = (256, 256),
    activation: str = "relu",
    num_critics: int = 2,
    initial_alpha: float = 1.0,
    ortho_init: bool = True,
    log_std_range: tuple[float, float] = (-5.0, 2.0),
    log_std_bound: str = "tanh",
) -> SACNetworks:
    """SAC's :class:`SACNetworks` for two gymnasium spaces.

    ``Box`` actions: a tanh-Gaussian actor rescaled to the bounds with a
    state-dependent ``log_std`` in ``log_std_range``, and critics ``Q(s, a)`` on
    the concatenated observation and action. ``Discrete`` actions: a
    categorical actor and critics over all actions (Christodoulou 2019,
    https://arxiv.org/abs/1910.07207). Haarnoja et al. 2018,
    https://arxiv.org/abs/1812.05905.

    Args:
      observation_space: see :func:`encoder_for`.
      action_space: a 1-D bounded ``Box`` or a ``Discrete``.
      hidden_sizes: the MLP layers of the actor and of each critic.
      activation: the MLPs' activation.
      num_critics: the number of critics (2: clipped double-Q).
      initial_alpha: the initial temperature.
      ortho_init: orthogonal layers (hidden gain ``sqrt(2)``, policy 0.01, Q 1), or
        PyTorch's default initialisation everywhere (SB3's SAC).
      log_std_range: ``(min, max)`` of the actor's ``log_std``.
      log_std_bound: ``"tanh"`` squashes ``log_std`` smoothly into the range
        (CleanRL's), ``"clip"`` clips it (SB3's and sbx's, with ``(-20, 2)``).

    Returns:
      The module; params ``actor``, ``critic`` and ``temperature/log_alpha``.
      ``make_distribution(model.distribution, model.apply(params, obs,
      method="policy"))`` is the policy.

    Raises:
      TypeError: for other action spaces or an unsupported observation space.
      ValueError: for a ``Box`` with infinite bounds, ``num_critics < 1`` or
        ``initial_alpha <= 0``.

    Example:
      >>> model = sac_networks(gymnasium.spaces.Box(-1, 1, (3,)), gymnasium.spaces.Discrete(4))
      >>> params = model.init(jax.random.key(0), jnp.zeros((8, 3)), method="policy")
      >>> model.apply(params, jnp.zeros((8, 3)), method="q_values").shape   # [critics, B, n]
      (2, 8, 4)
    """
    if not isinstance(action_space, gymnasium.spaces.Box | gymnasium.spaces.Discrete):
        raise TypeError(
            f"sac_networks supports Box and Discrete action spaces; got {action_space!r}."
        )
    if isinstance(num_critics, bool) or not isinstance(num_critics, int) or num_critics < 1:
        raise ValueError(f"num_critics must be a positive int; got {num_critics!r}.")
    if not initial_alpha > 0:
        raise ValueError(f"initial_alpha must be positive; got {initial_alpha!r}.")
    spec = distribution_for(action_space, squash=True)
    head = PolicyHead(
        spec,
        state_dependent_std=True,
        log_std_range=check_log_std("sac_networks", log_std_range, log_std_bound),
        log_std_bound=log_std_bound,
        ortho_init=ortho_init,
    )
    actor = Tower(encoder_for(observation_space, hidden_sizes, activation, ortho_init), head)
    if spec.is_discrete:
        critic = stacked(QNetwork, num_critics)(
            encoder_for(observation_space, hidden_sizes, activation, ortho_init),
            spec.sizes[0],
            ortho_init=ortho_init,
        )
    else:
        critic = state_action_critics(
            observation_space, hidden_sizes, activation, ortho_init, num_critics
        )
    return SACNetworks(actor, critic, Temperature(initial_alpha), spec)


def state_action_critics(
    observation_space: gymnasium.Space,
    hidden_sizes: Sequence[int],
    activation: str,
    ortho_init: bool,
    num_critics: int,
) -> nn.Module:
    """``num_critics`` stacked :class:`StateActionValue` critics, the action entering at the
    first layer beside the flattened observation (SAC's and TD3's continuous critics):
    ``(obs, action [..., d]) -> [num_critics, ...]``.

    Example:
      >>> critic = state_action_critics(gymnasium.spaces.Box(-1, 1, (3,)), (8,), "relu", True, 2)
      >>> params = critic.init(jax.random.key(0), jnp.zeros((5, 3)), jnp.zeros((5, 1)))
      >>> critic.apply(params, jnp.zeros((5, 3)), jnp.zeros((5, 1))).shape
      (2, 5)
    """
    return stacked(StateActionValue, num_critics)(
        encoder_for(observation_space, (), activation, ortho_init),
        tuple(hidden_sizes),
        activation,
        ortho_init,
    )
