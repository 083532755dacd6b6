"""Which distribution a policy's flat outputs parameterise: a hashable spec, and the constructor.

A policy head outputs ``[..., num_inputs]`` (RLlib's ``action_dist_inputs``);
:func:`make_distribution` turns them into one of the distributions of
:mod:`jaxlearner.algorithms.networks.distributions` as a :class:`DistributionSpec` says. The
models module builds specs from gymnasium spaces
(:func:`jaxlearner.algorithms.networks.heads.distribution_for`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal, TypeAlias

import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxlearner.algorithms.networks.distributions import (
    Categorical,
    DiagGaussian,
    Distribution,
    MultiCategorical,
    TanhGaussian,
)

DistributionKind: TypeAlias = Literal[
    "categorical", "multi_categorical", "diag_gaussian", "tanh_gaussian"
]
DISTRIBUTION_KINDS: tuple[str, ...] = (
    "categorical",
    "multi_categorical",
    "diag_gaussian",
    "tanh_gaussian",
)


@dataclasses.dataclass(frozen=True)
class DistributionSpec:
    """Which distribution a policy's flat outputs parameterise, as a hashable value.

    A policy head outputs ``[..., num_inputs]`` (RLlib's
    ``action_dist_inputs``): logits for the categorical kinds (concatenated
    over components for ``"multi_categorical"``), ``[mean, log_std]``
    concatenated for the Gaussian kinds. :func:`make_distribution` turns
    them into a distribution.

    Attributes:
      kind: one of ``"categorical"``, ``"multi_categorical"``,
        ``"diag_gaussian"``, ``"tanh_gaussian"``.
      sizes: ``(n,)`` for ``"categorical"``, ``(n_1, ..., n_K)`` for
        ``"multi_categorical"``, ``(d,)`` (the action dimension) for the
        Gaussian kinds.
      low: per-dimension lower bounds of a ``"tanh_gaussian"`` (``d``
        floats), or ``None`` for ``-1``.
      high: per-dimension upper bounds, or ``None`` for ``+1``.

    Example:
      >>> spec = DistributionSpec("tanh_gaussian", (2,), low=(0.0, -2.0), high=(1.0, 2.0))
      >>> spec.num_inputs
      4
    """

    kind: DistributionKind
    sizes: tuple[int, ...]
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in DISTRIBUTION_KINDS:
            raise ValueError(
                f"DistributionSpec.kind must be one of {DISTRIBUTION_KINDS}; got {self.kind!r}."
            )
        sizes = tuple(self.sizes)
        if not sizes or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sizes
        ):
            raise ValueError(
                f"DistributionSpec.sizes must be a non-empty tuple of positive ints; got "
                f"{self.sizes!r}."
            )
        if self.kind != "multi_categorical" and len(sizes) != 1:
            raise ValueError(
                f"DistributionSpec({self.kind!r}) takes one size ((n,) or (action_dim,)); got "
                f"{sizes}."
            )
        object.__setattr__(self, "sizes", sizes)
        self._validate_bounds()

    def _validate_bounds(self) -> None:
        if self.low is None and self.high is None:
            return
        if self.kind != "tanh_gaussian":
            raise ValueError(
                f"DistributionSpec: low/high apply only to 'tanh_gaussian'; got kind {self.kind!r}."
            )
        if self.low is None or self.high is None:
            raise ValueError("DistributionSpec needs both low and high, or neither.")
        low, high = tuple(map(float, self.low)), tuple(map(float, self.high))
        dim = self.sizes[0]
        if len(low) != dim or len(high) != dim:
            raise ValueError(
                f"DistributionSpec: low and high need {dim} entries (one per action dimension); "
                f"got {len(low)} and {len(high)}."
            )
        if not all(
            math.isfinite(a) and math.isfinite(b) and a < b for a, b in zip(low, high, strict=True)
        ):
            raise ValueError(
                f"DistributionSpec: bounds must be finite with low < high; got low={low}, "
                f"high={high}."
            )
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    @property
    def num_inputs(self) -> int:
        """Size of the last axis of the policy output this spec reads."""
        if self.kind in ("categorical", "multi_categorical"):
            return sum(self.sizes)
        return 2 * self.sizes[0]

    @property
    def action_shape(self) -> tuple[int, ...]:
        """Shape of one action: ``()``, ``(K,)`` or ``(d,)``."""
        if self.kind == "categorical":
            return ()
        if self.kind == "multi_categorical":
            return (len(self.sizes),)
        return (self.sizes[0],)

    @property
    def is_discrete(self) -> bool:
        """Whether actions are integers (the categorical kinds)."""
        return self.kind in ("categorical", "multi_categorical")


def make_distribution(spec: DistributionSpec, inputs: ArrayLike) -> Distribution:
    """Builds the distribution ``spec`` describes from a policy's flat outputs.

    Args:
      spec: the :class:`DistributionSpec`.
      inputs: ``[..., spec.num_inputs]`` policy outputs (logits, or
        ``[mean, log_std]`` concatenated on the last axis).

    Returns:
      A :class:`Categorical`, :class:`MultiCategorical`, :class:`DiagGaussian`
      or :class:`TanhGaussian` with batch shape ``[...]``.

    Raises:
      ValueError: when the last axis of ``inputs`` is not ``spec.num_inputs``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> spec = DistributionSpec("diag_gaussian", (3,))
      >>> dist = make_distribution(spec, jnp.zeros((8, 6)))
      >>> dist.sample(jax.random.key(0)).shape
      (8, 3)
    """
    inputs = jnp.asarray(inputs)
    if inputs.shape[-1:] != (spec.num_inputs,):
        raise ValueError(
            f"make_distribution({spec.kind!r}, sizes={spec.sizes}) expects inputs "
            f"[..., {spec.num_inputs}]; got shape {inputs.shape}."
        )
    if spec.kind == "categorical":
        return Categorical(inputs)
    if spec.kind == "multi_categorical":
        return MultiCategorical.from_flat(inputs, spec.sizes)
    mean, log_std = jnp.split(inputs, 2, axis=-1)
    if spec.kind == "diag_gaussian":
        return DiagGaussian(mean, log_std)
    if spec.low is None:
        return TanhGaussian(mean, log_std)
    return TanhGaussian(
        mean,
        log_std,
        low=jnp.asarray(spec.low, inputs.dtype),
        high=jnp.asarray(spec.high, inputs.dtype),
    )
