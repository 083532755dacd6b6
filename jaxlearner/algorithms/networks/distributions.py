"""Action distributions as small immutable pytrees.

Each distribution is a ``flax.struct.dataclass`` of arrays, so it can be
returned from a jitted function, vmapped and stored. They share one
interface, :class:`Distribution`: ``sample(key)``, ``log_prob(x)``,
``entropy()``, ``kl(other)``, ``mode()`` and ``sample_and_log_prob(key)``.
Shapes follow one rule: a distribution over actions of shape ``A`` with batch
shape ``[...]`` returns samples ``[..., *A]`` and log-probs, entropies and KLs
``[...]`` (summed over the action's components).

* :class:`Categorical`: logits ``[..., n]``, actions ``[...]`` int32 in ``[0, n)``.
* :class:`MultiCategorical`: independent categoricals of sizes ``(n_1, ..., n_K)``
  (gymnasium ``MultiDiscrete``), actions ``[..., K]``.
* :class:`DiagGaussian`: ``mean [..., d]`` and ``log_std`` broadcastable to it.
* :class:`TanhGaussian`: ``tanh`` of a diagonal Gaussian, optionally rescaled
  to a box ``[low, high]`` (SAC's policy).

A policy network's flat output (``[..., num_inputs]``, RLlib's
``action_dist_inputs``) becomes one of these through
:func:`jaxlearner.algorithms.networks.distribution_spec.make_distribution`.
"""

from __future__ import annotations

import math
from typing import Protocol

import jax
import jax.numpy as jnp
from flax import struct
from jax.typing import ArrayLike

_HALF_LOG_TWO_PI = 0.5 * math.log(2.0 * math.pi)
_LOG_TWO = math.log(2.0)
_ATANH_CLIP = 1.0 - 1e-6
"""``log_prob`` of a :class:`TanhGaussian` clips normalised actions to this, below 1."""


class Distribution(Protocol):
    """What every action distribution offers.

    ``x`` and samples have shape ``[..., *action_shape]``; log-probs,
    entropies and KLs have the batch shape ``[...]``.
    """

    def sample(self, key: jax.Array) -> jax.Array: ...

    def log_prob(self, x: ArrayLike) -> jax.Array: ...

    def entropy(self) -> jax.Array: ...

    def kl(self, other: Distribution) -> jax.Array: ...

    def mode(self) -> jax.Array: ...

    def sample_and_log_prob(self, key: jax.Array) -> tuple[jax.Array, jax.Array]: ...


@struct.dataclass
class Categorical:
    """A categorical distribution over ``n`` actions, from unnormalised logits.

    Logits of ``-inf`` mask actions out: they are never sampled, and
    ``entropy`` and ``kl`` stay finite (``0 * log 0`` counts as 0), with
    finite gradients.

    Attributes:
      logits: ``[..., n]`` float unnormalised log-probabilities.

    Example:
      >>> dist = Categorical(jnp.log(jnp.asarray([0.25, 0.75])))
      >>> action = dist.sample(jax.random.key(0))       # int32 scalar in {0, 1}
      >>> float(dist.log_prob(1))                       # doctest: +ELLIPSIS
      -0.287...
    """

    logits: jax.Array

    @property
    def log_probs(self) -> jax.Array:
        """Normalised log-probabilities ``[..., n]``."""
        return jax.nn.log_softmax(self.logits, axis=-1)

    @property
    def probs(self) -> jax.Array:
        """Probabilities ``[..., n]``."""
        return jax.nn.softmax(self.logits, axis=-1)

    def sample(self, key: jax.Array) -> jax.Array:
        """Draws actions ``[...]`` int32."""
        return jax.random.categorical(key, self.logits, axis=-1).astype(jnp.int32)

    def log_prob(self, x: ArrayLike) -> jax.Array:
        """Log-probability ``[...]`` of integer actions ``x [...]`` in ``[0, n)``."""
        log_probs = self.log_probs
        x = jnp.asarray(x).astype(jnp.int32)
        batch = jnp.broadcast_shapes(x.shape, log_probs.shape[:-1])
        log_probs = jnp.broadcast_to(log_probs, (*batch, log_probs.shape[-1]))
        x = jnp.broadcast_to(x, batch)
        return jnp.take_along_axis(log_probs, x[..., None], axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        """``-sum_a p(a) log p(a)``, shape ``[...]``."""
        probs = self.probs
        return -jnp.sum(probs * _where_possible(probs, self.log_probs), axis=-1)

    def kl(self, other: Categorical) -> jax.Array:
        """``KL(self || other) = sum_a p(a) (log p(a) - log q(a))``, shape ``[...]``."""
        _check_same_type(self, other)
        probs = self.probs
        difference = _where_possible(probs, self.log_probs - other.log_probs)
        return jnp.sum(probs * difference, axis=-1)

    def mode(self) -> jax.Array:
        """The most likely action ``[...]`` int32 (the first one on ties)."""
        return jnp.argmax(self.logits, axis=-1).astype(jnp.int32)

    def sample_and_log_prob(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(actions [...], log_probs [...])`` from one key."""
        x = self.sample(key)
        return x, self.log_prob(x)


@struct.dataclass
class MultiCategorical:
    """Independent categoricals, one per component (gymnasium ``MultiDiscrete``).

    Log-probs, entropies and KLs are sums over the ``K`` components.

    Attributes:
      logits: a tuple of ``K`` arrays ``[..., n_k]`` (sizes may differ).

    Example:
      >>> dist = MultiCategorical.from_flat(jnp.zeros(5), sizes=(2, 3))
      >>> dist.sample(jax.random.key(0)).shape          # one action per component
      (2,)
      >>> float(dist.log_prob(jnp.asarray([1, 2])))     # log(1/2) + log(1/3)  # doctest: +ELLIPSIS
      -1.791...
    """

    logits: tuple[jax.Array, ...]

    @classmethod
    def from_flat(cls, logits: ArrayLike, sizes: tuple[int, ...]) -> MultiCategorical:
        """Splits concatenated logits ``[..., sum(sizes)]`` into the components.

        Args:
          logits: ``[..., n_1 + ... + n_K]``.
          sizes: ``(n_1, ..., n_K)``, static.

        Returns:
          A :class:`MultiCategorical` with ``K`` components.

        Raises:
          ValueError: when the last axis is not ``sum(sizes)``.
        """
        logits = jnp.asarray(logits)
        if logits.shape[-1:] != (sum(sizes),):
            raise ValueError(
                f"MultiCategorical.from_flat: logits of shape {logits.shape} do not split into "
                f"sizes {tuple(sizes)}; the last axis must be {sum(sizes)}."
            )
        boundaries = [sum(sizes[:k]) for k in range(1, len(sizes))]
        return cls(tuple(jnp.split(logits, boundaries, axis=-1)))

    @property
    def components(self) -> tuple[Categorical, ...]:
        """One :class:`Categorical` per component."""
        return tuple(Categorical(logits) for logits in self.logits)

    def sample(self, key: jax.Array) -> jax.Array:
        """Draws actions ``[..., K]`` int32."""
        keys = jax.random.split(key, len(self.logits))
        return jnp.stack([c.sample(k) for c, k in zip(self.components, keys, strict=True)], -1)

    def log_prob(self, x: ArrayLike) -> jax.Array:
        """Summed log-probability ``[...]`` of actions ``x [..., K]``."""
        x = jnp.asarray(x)
        if x.shape[-1:] != (len(self.logits),):
            raise ValueError(
                f"MultiCategorical.log_prob expects actions [..., {len(self.logits)}] (one per "
                f"component); got shape {x.shape}."
            )
        return sum(c.log_prob(x[..., k]) for k, c in enumerate(self.components))

    def entropy(self) -> jax.Array:
        """Sum of the components' entropies, ``[...]``."""
        return sum(c.entropy() for c in self.components)

    def kl(self, other: MultiCategorical) -> jax.Array:
        """Sum of the components' KLs, ``[...]``."""
        _check_same_type(self, other)
        if len(other.logits) != len(self.logits):
            raise ValueError(
                f"MultiCategorical.kl needs the same number of components; got "
                f"{len(self.logits)} and {len(other.logits)}."
            )
        return sum(p.kl(q) for p, q in zip(self.components, other.components, strict=True))

    def mode(self) -> jax.Array:
        """The most likely action of each component, ``[..., K]`` int32."""
        return jnp.stack([c.mode() for c in self.components], axis=-1)

    def sample_and_log_prob(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(actions [..., K], log_probs [...])`` from one key."""
        x = self.sample(key)
        return x, self.log_prob(x)


@struct.dataclass
class DiagGaussian:
    """A Gaussian with diagonal covariance over ``d``-dimensional actions.

    Attributes:
      mean: ``[..., d]``.
      log_std: natural log of the standard deviation, broadcastable to
        ``mean`` (e.g. a state-independent ``[d]`` parameter).

    Example:
      >>> dist = DiagGaussian(jnp.zeros(2), jnp.zeros(2))
      >>> dist.sample(jax.random.key(0)).shape
      (2,)
      >>> float(dist.log_prob(jnp.zeros(2)))            # -log(2 pi)  # doctest: +ELLIPSIS
      -1.837...
    """

    mean: jax.Array
    log_std: jax.Array

    def _broadcast(self) -> tuple[jax.Array, jax.Array]:
        mean, log_std = jnp.broadcast_arrays(jnp.asarray(self.mean), jnp.asarray(self.log_std))
        return mean, log_std

    def sample(self, key: jax.Array) -> jax.Array:
        """Draws actions ``[..., d]``: ``mean + exp(log_std) * N(0, 1)``."""
        mean, log_std = self._broadcast()
        return mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)

    def log_prob(self, x: ArrayLike) -> jax.Array:
        """Log-density ``[...]`` of actions ``x [..., d]``, summed over ``d``."""
        mean, log_std = self._broadcast()
        z = (jnp.asarray(x) - mean) * jnp.exp(-log_std)
        return jnp.sum(-0.5 * jnp.square(z) - log_std - _HALF_LOG_TWO_PI, axis=-1)

    def entropy(self) -> jax.Array:
        """``sum_d (log_std + 0.5 * log(2 pi e))``, shape ``[...]``."""
        _, log_std = self._broadcast()
        return jnp.sum(log_std + 0.5 + _HALF_LOG_TWO_PI, axis=-1)

    def kl(self, other: DiagGaussian) -> jax.Array:
        """Closed-form ``KL(self || other)``, shape ``[...]``.

        Per dimension: ``log(s_q / s_p) + (s_p^2 + (m_p - m_q)^2) / (2 s_q^2) - 1/2``.
        """
        _check_same_type(self, other)
        mean_p, log_std_p = self._broadcast()
        mean_q, log_std_q = other._broadcast()
        variance_ratio = jnp.exp(2.0 * (log_std_p - log_std_q))
        mean_term = jnp.square((mean_p - mean_q) * jnp.exp(-log_std_q))
        per_dim = log_std_q - log_std_p + 0.5 * (variance_ratio + mean_term - 1.0)
        return jnp.sum(per_dim, axis=-1)

    def mode(self) -> jax.Array:
        """The mean, ``[..., d]``."""
        mean, _ = self._broadcast()
        return mean

    def sample_and_log_prob(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(actions [..., d], log_probs [...])`` from one key."""
        x = self.sample(key)
        return x, self.log_prob(x)


@struct.dataclass
class TanhGaussian:
    """``y = shift + scale * tanh(u)`` with ``u ~ DiagGaussian(mean, log_std)``.

    Without bounds ``y`` lies in ``(-1, 1)``; with ``low`` and ``high`` it is
    rescaled to ``(low, high)`` (``scale = (high - low) / 2``,
    ``shift = (high + low) / 2``). The log-density uses the change of
    variables ``log p(y) = log N(u) - sum_d [log(1 - tanh(u)^2) + log(scale)]``
    with the stable form ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``
    (Haarnoja et al. 2018, https://arxiv.org/abs/1801.01290, appendix C).

    Attributes:
      mean: ``[..., d]``, mean of the pre-squash Gaussian.
      log_std: broadcastable to ``mean``, log std of the pre-squash Gaussian.
      low: ``[d]`` lower bounds, or ``None`` for ``-1``.
      high: ``[d]`` upper bounds, or ``None`` for ``+1``.

    Example:
      >>> dist = TanhGaussian(jnp.zeros(2), jnp.zeros(2), low=jnp.zeros(2), high=jnp.ones(2) * 4)
      >>> action, log_prob = dist.sample_and_log_prob(jax.random.key(0))  # SAC's actor step
      >>> bool(((action > 0) & (action < 4)).all())
      True
    """

    mean: jax.Array
    log_std: jax.Array
    low: jax.Array | None = None
    high: jax.Array | None = None

    @property
    def base(self) -> DiagGaussian:
        """The pre-squash Gaussian over ``u``."""
        return DiagGaussian(self.mean, self.log_std)

    def _scale_shift(self) -> tuple[jax.Array | float, jax.Array | float]:
        if self.low is None and self.high is None:
            return 1.0, 0.0
        if self.low is None or self.high is None:
            raise ValueError("TanhGaussian needs both low and high, or neither.")
        low, high = jnp.asarray(self.low), jnp.asarray(self.high)
        return (high - low) / 2.0, (high + low) / 2.0

    def _squash(self, u: jax.Array) -> jax.Array:
        scale, shift = self._scale_shift()
        return shift + scale * jnp.tanh(u)

    def _log_det_jacobian(self, u: jax.Array) -> jax.Array:
        """``sum_d log |dy/du|`` at ``u [..., d]``, shape ``[...]``."""
        scale, _ = self._scale_shift()
        log_tanh_derivative = 2.0 * (_LOG_TWO - u - jax.nn.softplus(-2.0 * u))
        return jnp.sum(log_tanh_derivative + jnp.log(jnp.broadcast_to(scale, u.shape)), axis=-1)

    def sample(self, key: jax.Array) -> jax.Array:
        """Draws squashed (and rescaled) actions ``[..., d]``."""
        return self._squash(self.base.sample(key))

    def sample_and_log_prob(self, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(actions [..., d], log_probs [...])``, the log-prob from the pre-tanh sample.

        Use this for the policy's own samples (SAC's actor and target): it
        never inverts ``tanh``, so it stays accurate when ``|u|`` is large and
        ``tanh(u)`` rounds to ``+-1``.
        """
        u = self.base.sample(key)
        return self._squash(u), self.base.log_prob(u) - self._log_det_jacobian(u)

    def log_prob(self, x: ArrayLike) -> jax.Array:
        """Log-density ``[...]`` of actions ``x [..., d]`` given from outside.

        ``x`` is mapped back with ``atanh`` after clipping the normalised
        action to ``[-1 + 1e-6, 1 - 1e-6]``, so actions on (or past) the
        bounds get a finite, approximate log-density. Prefer
        :meth:`sample_and_log_prob` for the policy's own samples.
        """
        scale, shift = self._scale_shift()
        normalised = jnp.clip((jnp.asarray(x) - shift) / scale, -_ATANH_CLIP, _ATANH_CLIP)
        u = jnp.arctanh(normalised)
        return self.base.log_prob(u) - self._log_det_jacobian(u)

    def entropy(self, key: jax.Array | None = None) -> jax.Array:
        """An entropy ``[...]``; the squashed distribution has no closed form.

        Args:
          key: ``None`` returns the closed-form entropy of the *pre-squash*
            Gaussian, ``H(u)`` (what PPO implementations with squashed
            actions commonly use as an entropy bonus). It is an upper bound
            on the entropy of ``tanh(u)`` and ignores the rescale's constant
            ``sum_d log(scale)``. With a key: the unbiased single-sample
            estimate ``H(u) + log|dy/du|`` at ``u`` drawn with ``key``
            (rescale included), whose expectation is the entropy of ``y``.

        Returns:
          ``[...]`` entropies.
        """
        entropy = self.base.entropy()
        if key is None:
            return entropy
        return entropy + self._log_det_jacobian(self.base.sample(key))

    def kl(self, other: TanhGaussian) -> jax.Array:
        """``KL(self || other)``, shape ``[...]``, exact when both share ``low``/``high``.

        The KL divergence is unchanged by applying the same invertible map to
        both distributions, so it equals the KL of the pre-squash Gaussians.
        The bounds are not compared (they may be traced); distributions with
        different bounds give a meaningless value.
        """
        _check_same_type(self, other)
        return self.base.kl(other.base)

    def mode(self) -> jax.Array:
        """The deterministic action ``shift + scale * tanh(mean)``, ``[..., d]``.

        This is the median of each component (``tanh`` is monotone), the
        usual deterministic SAC action; the density's own mode can differ.
        """
        mean, _ = self.base._broadcast()
        return self._squash(mean)


def _where_possible(probs: jax.Array, values: jax.Array) -> jax.Array:
    """``values`` where ``probs > 0``, else 0.

    Zeroing before multiplying by ``probs`` (not after) keeps ``0 * -inf`` out
    of both the value and its gradient when logits are ``-inf``.
    """
    return jnp.where(probs > 0, values, 0.0)


def _check_same_type(this: object, other: object) -> None:
    if type(other) is not type(this):
        raise TypeError(
            f"{type(this).__name__}.kl needs another {type(this).__name__}; got "
            f"{type(other).__name__}."
        )
