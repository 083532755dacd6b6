"""Recurrent (stateful) models: an MLP encoder, an LSTM or GRU cell, and PPO's two heads.

RLlib's ``use_lstm`` model for PPO, one environment step at a time: a
:class:`RecurrentActorCritic` maps ``(carry, obs, is_first)`` to ``(carry,
(dist_inputs, value))``. The carry is a dict of ``[..., cell_size]`` arrays,
one entry per recurrent tower (``"encoder"`` when the towers share it,
``"actor"`` and ``"critic"`` otherwise), each the cell's state as a dict
(``{"c", "h"}`` for an LSTM, ``{"h"}`` for a GRU). Where ``is_first`` is true
(an episode starts at this step) the carry is zeroed before the cell runs, so
an acting loop and a learner unrolling stored sequences reset the state at the
same places without knowing its structure.

:func:`unroll` runs such a step function over ``[B, L]`` sequences (a
``lax.scan`` over time); :func:`initial_carry` gives the zero carry of ``N``
environments without any params.

Hochreiter and Schmidhuber 1997 (LSTM); Cho et al. 2014,
https://arxiv.org/abs/1406.1078 (GRU).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp

from jaxlearner.algorithms.networks.encoders import ConvFilters, encoder_for
from jaxlearner.algorithms.networks.heads import (
    PolicyHead,
    ValueHead,
    distribution_for,
    with_hidden_layers,
)
from jaxlearner.types import Params

Carry: TypeAlias = dict[str, Any]
"""A recurrent model's state: nested dicts of ``[..., cell_size]`` float32 arrays."""

CELLS: tuple[str, ...] = ("lstm", "gru")
"""The recurrent cells by name."""


def _check_cell(cell: str, cell_size: int) -> None:
    if cell not in CELLS:
        raise ValueError(f"Unknown recurrent cell {cell!r}; valid names: {list(CELLS)}.")
    if isinstance(cell_size, bool) or not isinstance(cell_size, int) or cell_size < 1:
        raise ValueError(f"The recurrent cell_size must be a positive int; got {cell_size!r}.")


def cell_carry(cell: str, cell_size: int, batch_shape: tuple[int, ...]) -> dict[str, jax.Array]:
    """The zero state of one cell: ``{"c", "h"}`` (LSTM) or ``{"h"}`` (GRU), ``[*batch, size]``."""
    zeros = jnp.zeros((*batch_shape, cell_size), jnp.float32)
    return {"c": zeros, "h": zeros} if cell == "lstm" else {"h": zeros}


class RecurrentTower(nn.Module):
    """``(carry, obs, is_first) -> (carry, features [..., cell_size])``: an encoder, then a cell.

    Attributes:
      encoder: observations to features (e.g. :func:`encoder_for`'s MLP).
      cell: ``"lstm"`` (flax's ``OptimizedLSTMCell``) or ``"gru"`` (``GRUCell``).
      cell_size: the cell's units.
    """

    encoder: nn.Module
    cell: str = "lstm"
    cell_size: int = 64

    def __post_init__(self) -> None:
        _check_cell(self.cell, self.cell_size)
        super().__post_init__()

    @nn.compact
    def __call__(
        self, carry: dict[str, jax.Array], obs: jax.Array, is_first: jax.Array
    ) -> tuple[dict[str, jax.Array], jax.Array]:
        features = self.encoder(obs)
        first = jnp.asarray(is_first, jnp.bool_)[..., None]
        carry = jax.tree.map(lambda x: jnp.where(first, jnp.zeros_like(x), x), carry)
        if self.cell == "lstm":
            cell = nn.OptimizedLSTMCell(self.cell_size, name="lstm")
            (c, h), out = cell((carry["c"], carry["h"]), features)
            return {"c": c, "h": h}, out
        h, out = nn.GRUCell(self.cell_size, name="gru")(carry["h"], features)
        return {"h": h}, out


class RecurrentActorCritic(nn.Module):
    """PPO's recurrent network: ``(carry, obs, is_first) -> (carry, (dist_inputs, value))``.

    Shapes: ``obs [..., *obs_shape]``, ``is_first [...]`` bool, carry leaves
    ``[..., cell_size]``; outputs ``dist_inputs [..., P]`` and ``value [...]``.
    One step: unroll sequences with :func:`unroll`.

    Attributes:
      actor: the policy head (on the shared tower's features, or on ``actor_tower``'s).
      critic: the value head.
      tower: the shared :class:`RecurrentTower`, or ``None`` when each head has its own.
      actor_tower: the policy's own tower (when ``tower`` is ``None``).
      critic_tower: the value's own tower (when ``tower`` is ``None``).

    Example:
      >>> box, two = gymnasium.spaces.Box(-1, 1, (2,)), gymnasium.spaces.Discrete(2)
      >>> model = recurrent_actor_critic(box, two, (16,), cell_size=8, share_encoder=True)
      >>> carry = initial_carry(model, 4)
      >>> params = model.init(jax.random.key(0), carry, jnp.zeros((4, 2)), jnp.ones(4, bool))
      >>> carry, (dist_inputs, value) = model.apply(
      ...     params, carry, jnp.zeros((4, 2)), jnp.zeros(4, bool))
      >>> carry["encoder"]["h"].shape, dist_inputs.shape, value.shape
      ((4, 8), (4, 2), (4,))
    """

    actor: nn.Module
    critic: nn.Module
    tower: RecurrentTower | None = None
    actor_tower: RecurrentTower | None = None
    critic_tower: RecurrentTower | None = None

    def __call__(
        self, carry: Carry, obs: jax.Array, is_first: jax.Array
    ) -> tuple[Carry, tuple[jax.Array, jax.Array]]:
        if self.tower is not None:
            state, features = self.tower(carry["encoder"], obs, is_first)
            return {"encoder": state}, (self.actor(features), self.critic(features))
        actor_state, actor_features = self.actor_tower(carry["actor"], obs, is_first)
        critic_state, critic_features = self.critic_tower(carry["critic"], obs, is_first)
        outputs = (self.actor(actor_features), self.critic(critic_features))
        return {"actor": actor_state, "critic": critic_state}, outputs


def recurrent_actor_critic(
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    hidden_sizes: tuple[int, ...] = (64,),
    activation: str = "tanh",
    cell: str = "lstm",
    cell_size: int = 64,
    share_encoder: bool = False,
    log_std_init: float = 0.0,
    head_hidden_sizes: tuple[int, ...] = (),
    head_activation: str = "relu",
    ortho_init: bool = True,
    conv_padding: str = "same",
    conv_filters: ConvFilters | None = None,
) -> RecurrentActorCritic:
    """A :class:`RecurrentActorCritic` for two gymnasium spaces (RLlib's ``use_lstm``).

    Params: with ``share_encoder``, ``tower/{encoder,lstm}``, ``actor`` and
    ``critic`` (the heads); without, ``actor_tower`` and ``critic_tower`` each
    with its own encoder and cell (RLlib's new stack, ``vf_share_layers=False``).

    Args:
      observation_space: see :func:`~jaxlearner.algorithms.networks.encoders.encoder_for`.
      action_space: see :func:`~jaxlearner.algorithms.networks.heads.distribution_for`.
      hidden_sizes: the MLP before the cell (RLlib's ``fcnet_hiddens``).
      activation: the MLP's activation.
      cell: ``"lstm"`` or ``"gru"``.
      cell_size: the cell's units (RLlib's ``lstm_cell_size``).
      share_encoder: one tower (MLP and cell) for both heads.
      log_std_init: initial state-independent ``log_std`` for ``Box`` actions.
      head_hidden_sizes: hidden layers of each head, after the cell (RLlib's
        ``head_fcnet_hiddens``). The cell's outputs lie in ``[-1, 1]``, so a
        linear value head learns returns of tens slowly; a hidden layer here
        lets it reach them.
      head_activation: their activation (RLlib's ``head_fcnet_activation``).
      ortho_init: the MLPs' and heads' initialisation, orthogonal or PyTorch's
        default (see :func:`~jaxlearner.algorithms.networks.models.actor_critic`);
        the cell keeps flax's initialisation either way.
      conv_padding: the CNN's padding for images (see
        :func:`~jaxlearner.algorithms.networks.encoders.encoder_for`).
      conv_filters: the CNN's layers for images (the same function's).

    Raises:
      ValueError: for an unknown cell or a cell size that is not a positive int;
        TypeError, ValueError for unsupported spaces.

    Example:
      >>> box, two = gymnasium.spaces.Box(-1, 1, (2,)), gymnasium.spaces.Discrete(2)
      >>> model = recurrent_actor_critic(box, two, cell="gru", cell_size=8)
      >>> sorted(initial_carry(model, 3))
      ['actor', 'critic']
    """
    _check_cell(cell, cell_size)
    spec = distribution_for(action_space)
    head = lambda out: with_hidden_layers(out, head_hidden_sizes, head_activation, ortho_init)
    heads = {
        "actor": head(PolicyHead(spec, log_std_init=log_std_init, ortho_init=ortho_init)),
        "critic": head(ValueHead(ortho_init)),
    }

    def tower() -> RecurrentTower:
        encoder = encoder_for(
            observation_space, hidden_sizes, activation, ortho_init, conv_padding, conv_filters
        )
        return RecurrentTower(encoder, cell, cell_size)

    if share_encoder:
        return RecurrentActorCritic(**heads, tower=tower())
    return RecurrentActorCritic(**heads, actor_tower=tower(), critic_tower=tower())


def initial_carry(model: RecurrentActorCritic, num_envs: int) -> Carry:
    """The zero carry of ``num_envs`` environments, leaves ``[num_envs, cell_size]``.

    Example:
      >>> model = recurrent_actor_critic(gymnasium.spaces.Box(-1, 1, (2,)),
      ...                                gymnasium.spaces.Discrete(2), cell_size=8)
      >>> jax.tree.map(jnp.shape, initial_carry(model, 3))["actor"]
      {'c': (3, 8), 'h': (3, 8)}
    """
    towers = (
        {"encoder": model.tower}
        if model.tower is not None
        else {"actor": model.actor_tower, "critic": model.critic_tower}
    )
    return {
        name: cell_carry(tower.cell, tower.cell_size, (num_envs,)) for name, tower in towers.items()
    }


StepFn: TypeAlias = Callable[..., tuple[Carry, Any]]
"""``step(params, carry, obs [B, ...], is_first [B]) -> (carry, outputs)``, e.g. ``model.apply``."""


def unroll(
    step: StepFn, params: Params, carry: Carry, obs: jax.Array, is_first: jax.Array
) -> tuple[Carry, Any]:
    """Runs a recurrent step function over ``[B, L]`` sequences with ``lax.scan`` over time.

    Args:
      step: ``step(params, carry, obs_t [B, ...], is_first_t [B]) -> (carry, outputs_t)``.
      params: the model's params.
      carry: the state before each sequence's first step, leaves ``[B, ...]``.
      obs: ``[B, L, ...]``.
      is_first: ``[B, L]`` bool: an episode starts at this step (the carry is zeroed).

    Returns:
      ``(carry after the last step, outputs [B, L, ...])``.

    Raises:
      ValueError: when ``obs`` and ``is_first`` disagree on ``[B, L]`` (at trace time,
        before anything compiles).

    Example:
      >>> _, (dist_inputs, values) = unroll(model.apply, params, carry, obs, is_first)
      ... # doctest: +SKIP
    """
    if jnp.ndim(is_first) != 2 or jnp.shape(obs)[:2] != jnp.shape(is_first):
        raise ValueError(
            f"unroll needs obs [B, L, ...] and is_first [B, L] of the same B and L; got obs "
            f"{jnp.shape(obs)} and is_first {jnp.shape(is_first)}."
        )
    time_major = lambda x: jnp.swapaxes(x, 0, 1)

    def body(carry: Carry, inputs: tuple[jax.Array, jax.Array]) -> tuple[Carry, Any]:
        return step(params, carry, *inputs)

    carry, outputs = jax.lax.scan(body, carry, (time_major(obs), time_major(is_first)))
    return carry, jax.tree.map(time_major, outputs)
