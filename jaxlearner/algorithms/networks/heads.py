"""Output heads and the action space's distribution: what every model ends with.

:func:`distribution_for` maps a gymnasium action space to the
:class:`~jaxlearner.algorithms.networks.distribution_spec.DistributionSpec` a policy
head outputs inputs for; :class:`PolicyHead` and :class:`ValueHead` are the
output layers (orthogonal initialisation, gain 0.01 for the policy and 1 for
values, as in Andrychowicz et al. 2020, https://arxiv.org/abs/2006.05990; or
PyTorch's default with ``ortho_init=False``, see
:func:`~jaxlearner.algorithms.networks.encoders.dense`);
:func:`with_hidden_layers` puts an MLP before a head (RLlib's
``head_fcnet_hiddens``); :class:`Tower` runs an encoder, then a head.
:mod:`~jaxlearner.algorithms.networks.models` builds whole networks from these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec
from jaxlearner.algorithms.networks.encoders import MLP, dense

ACTION_SPACES = ("Discrete", "MultiDiscrete", "MultiBinary", "Box (1-D)")

LOG_STD_BOUNDS = ("tanh", "clip")
"""How a state-dependent ``log_std`` is kept in its range (:class:`PolicyHead`)."""


def check_log_std(owner: str, log_std_range: Any, log_std_bound: Any) -> tuple[float, float]:
    """``log_std_range`` as ``(min, max)`` floats, checked with ``log_std_bound``.

    Raises:
      ValueError: naming ``owner``, unless ``log_std_bound`` is one of
        :data:`LOG_STD_BOUNDS` and ``log_std_range`` two finite numbers with min < max.

    Example:
      >>> check_log_std("SACConfig", [-20, 2], "clip")
      (-20.0, 2.0)
    """
    if log_std_bound not in LOG_STD_BOUNDS:
        raise ValueError(
            f"{owner}.log_std_bound must be one of {LOG_STD_BOUNDS}; got {log_std_bound!r}."
        )
    numbers = (
        isinstance(log_std_range, tuple | list)
        and len(log_std_range) == 2
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in log_std_range)
    )
    if (
        not numbers
        or not all(math.isfinite(x) for x in log_std_range)
        or not log_std_range[0] < log_std_range[1]
    ):
        raise ValueError(
            f"{owner}.log_std_range must be (min, max), two finite numbers with min < max; "
            f"got {log_std_range!r}."
        )
    return float(log_std_range[0]), float(log_std_range[1])


def distribution_for(action_space: gymnasium.Space, squash: bool = False) -> DistributionSpec:
    """The :class:`~jaxlearner.algorithms.networks.distributions.DistributionSpec` of a space.

    * ``Discrete(n)``: ``"categorical"``; actions are indices in ``[0, n)``
      (add ``space.start`` before ``env.step`` when it is not 0).
    * ``MultiDiscrete(nvec)`` (1-D): ``"multi_categorical"`` with sizes
      ``nvec``; ``MultiBinary(n)`` (1-D): ``"multi_categorical"`` with sizes
      ``(2,) * n``.
    * ``Box`` (1-D): ``"diag_gaussian"`` (clip actions to the bounds in the
      environment loop), or with ``squash=True`` ``"tanh_gaussian"`` rescaled
      to ``[low, high]`` (no rescale when the bounds are ``[-1, 1]``).

    Args:
      action_space: the environment's (single) action space.
      squash: for ``Box``, squash with ``tanh`` into the bounds (SAC).

    Returns:
      The spec; its ``num_inputs`` is the size of the policy head's output.

    Raises:
      TypeError: for unsupported spaces (``Dict``, ``Tuple``, ``Text``, ...).
      ValueError: for a multi-dimensional ``Box``, ``MultiDiscrete`` or
        ``MultiBinary``, or ``squash=True`` with infinite bounds.

    Example:
      >>> spec = distribution_for(gymnasium.spaces.Box(-2.0, 2.0, (3,)), squash=True)
      >>> spec.kind, spec.num_inputs, spec.high
      ('tanh_gaussian', 6, (2.0, 2.0, 2.0))
    """
    spaces = gymnasium.spaces
    if isinstance(action_space, spaces.Discrete):
        return DistributionSpec("categorical", (int(action_space.n),))
    vector_spaces = spaces.MultiDiscrete | spaces.MultiBinary | spaces.Box
    if isinstance(action_space, vector_spaces) and len(action_space.shape) != 1:
        raise ValueError(
            f"distribution_for supports 1-D {type(action_space).__name__} action spaces; got "
            f"shape {action_space.shape} ({action_space!r}). Flatten the actions."
        )
    if isinstance(action_space, spaces.MultiDiscrete):
        return DistributionSpec("multi_categorical", tuple(int(n) for n in action_space.nvec))
    if isinstance(action_space, spaces.MultiBinary):
        return DistributionSpec("multi_categorical", (2,) * int(action_space.shape[0]))
    if isinstance(action_space, spaces.Box):
        dim = int(action_space.shape[0])
        if not squash:
            return DistributionSpec("diag_gaussian", (dim,))
        if not action_space.is_bounded("both"):
            raise ValueError(
                f"squash=True rescales tanh into the Box's bounds, which must be finite; got "
                f"low={action_space.low}, high={action_space.high}."
            )
        low, high = np.asarray(action_space.low), np.asarray(action_space.high)
        if np.all(low == -1.0) and np.all(high == 1.0):
            return DistributionSpec("tanh_gaussian", (dim,))
        return DistributionSpec(
            "tanh_gaussian", (dim,), tuple(map(float, low)), tuple(map(float, high))
        )
    raise TypeError(
        f"distribution_for supports action spaces {ACTION_SPACES}; got {action_space!r}."
    )


class PolicyHead(nn.Module):
    """Features to the flat distribution inputs ``[..., spec.num_inputs]``.

    Categorical kinds output logits. Gaussian kinds output ``[mean, log_std]``:
    ``log_std`` is a state-independent parameter ``log_std [d]`` (PPO), or
    with ``state_dependent_std`` a second output bounded to ``log_std_range``
    (SAC): squashed smoothly by ``tanh`` (CleanRL's), or clipped (``"clip"``,
    SB3's and sbx's).

    Attributes:
      distribution: the :class:`~jaxlearner.algorithms.networks.distributions.DistributionSpec`.
      state_dependent_std: Gaussian kinds only; see above.
      log_std_init: initial value of the state-independent ``log_std``.
      log_std_range: ``(min, max)`` of a state-dependent ``log_std``.
      log_std_bound: how it is kept there: ``"tanh"`` or ``"clip"``.
      ortho_init: the output layer orthogonal with gain 0.01, or PyTorch's default.
    """

    distribution: DistributionSpec
    state_dependent_std: bool = False
    log_std_init: float = 0.0
    log_std_range: tuple[float, float] = (-5.0, 2.0)
    log_std_bound: str = "tanh"
    ortho_init: bool = True

    @nn.compact
    def __call__(self, features: jax.Array) -> jax.Array:
        spec = self.distribution
        output = lambda size, name: dense(size, 0.01, name, features.shape[-1], self.ortho_init)
        if spec.is_discrete:
            return output(spec.num_inputs, "logits")(features)
        dim = spec.sizes[0]
        if self.state_dependent_std:
            mean, raw = jnp.split(output(2 * dim, "mean_log_std")(features), 2, axis=-1)
            low, high = self.log_std_range
            if self.log_std_bound == "clip":
                log_std = jnp.clip(raw, low, high)
            else:
                log_std = low + 0.5 * (high - low) * (jnp.tanh(raw) + 1.0)
            return jnp.concatenate([mean, log_std], axis=-1)
        mean = output(dim, "mean")(features)
        log_std = self.param("log_std", nn.initializers.constant(self.log_std_init), (dim,))
        return jnp.concatenate([mean, jnp.broadcast_to(log_std, mean.shape)], axis=-1)


class ValueHead(nn.Module):
    """Features ``[..., F]`` to a value ``[...]``.

    Attributes:
      ortho_init: the output layer orthogonal with gain 1, or PyTorch's default.
    """

    ortho_init: bool = True

    @nn.compact
    def __call__(self, features: jax.Array) -> jax.Array:
        layer = dense(1, 1.0, "value", features.shape[-1], self.ortho_init)
        return layer(features)[..., 0]


class HiddenHead(nn.Module):
    """``head(hidden(features))``: hidden layers before an output head (``head_fcnet_hiddens``).

    Params ``hidden`` and ``head``. Between a recurrent cell, whose outputs lie
    in ``[-1, 1]``, and a value head, the hidden layers let values reach the
    scale of the returns. Build one with :func:`with_hidden_layers`.

    Attributes:
      hidden: the hidden layers, an :class:`~jaxlearner.algorithms.networks.encoders.MLP`.
      head: the output head, e.g. :class:`PolicyHead` or :class:`ValueHead`.
    """

    hidden: MLP
    head: nn.Module

    def __call__(self, features: jax.Array) -> Any:
        return self.head(self.hidden(features))


def with_hidden_layers(
    head: nn.Module,
    hidden_sizes: Sequence[int] = (),
    activation: str = "relu",
    ortho_init: bool = True,
) -> nn.Module:
    """``head`` itself for ``hidden_sizes=()``, else a :class:`HiddenHead` around it.

    ``ortho_init`` is the hidden layers' initialisation (see
    :class:`~jaxlearner.algorithms.networks.encoders.MLP`).

    Raises:
      ValueError: for sizes that are not positive ints or an unknown activation
        (the :class:`~jaxlearner.algorithms.networks.encoders.MLP` checks both when made).

    Example:
      >>> head = with_hidden_layers(ValueHead(), (32,))
      >>> params = head.init(jax.random.key(0), jnp.zeros((8, 16)))
      >>> sorted(params["params"]), head.apply(params, jnp.zeros((8, 16))).shape
      (['head', 'hidden'], (8,))
    """
    if not tuple(hidden_sizes):
        return head
    return HiddenHead(MLP(hidden_sizes, activation, ortho_init), head)


class Tower(nn.Module):
    """``head(encoder(x))``: an encoder and a head as one submodule (params under both names)."""

    encoder: nn.Module
    head: nn.Module

    def __call__(self, x: jax.Array) -> Any:
        return self.head(self.encoder(x))
