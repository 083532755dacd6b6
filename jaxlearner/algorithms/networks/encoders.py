"""Encoders: observations to features, chosen from a gymnasium observation space.

:func:`encoder_for` reads a space's ``shape``, ``n``, ``nvec`` and ``start``
and builds an :class:`Encoder` (one-hot for discrete observations, a small
:class:`CNN` for images, flattening otherwise) followed by an :class:`MLP`.
Hidden layers use orthogonal initialisation with gain ``sqrt(2)`` and zero
biases (Andrychowicz et al. 2020, https://arxiv.org/abs/2006.05990); with
``ortho_init=False`` every layer takes PyTorch's default initialisation
instead (:func:`dense`), as SB3's policies do with ``ortho_init=False``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeAlias

import flax.linen as nn
import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.algorithms.networks.convolution import Conv
from jaxlearner.core.one_at_a_time import one_at_a_time

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": nn.tanh,
    "relu": nn.relu,
    "silu": nn.silu,
    "swish": nn.swish,
    "gelu": nn.gelu,
    "elu": nn.elu,
    "leaky_relu": nn.leaky_relu,
    "sigmoid": nn.sigmoid,
    "linear": lambda x: x,
}
"""Activations by name (RLlib's ``fcnet_activation`` names; ``"linear"`` is none)."""

OBSERVATION_SPACES = ("Box", "Discrete", "MultiDiscrete", "MultiBinary")
CONV_PADDINGS: tuple[str, ...] = ("same", "valid")

ConvFilters: TypeAlias = tuple[tuple[int, int, int], ...]
"""A CNN's layers as ``((out_channels, kernel_size, stride), ...)``, RLlib's ``conv_filters``."""

NATURE_CNN: ConvFilters = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
"""The Nature DQN's convolutions (Mnih et al. 2015), the default ``conv_filters``."""


def check_conv_filters(value: Any, name: str = "conv_filters") -> ConvFilters | None:
    """``None``, or ``value`` as a tuple of ``(out_channels, kernel_size, stride)`` triples;
    an empty one (``()``) is no convolution: the image is flattened into the MLP.

    Raises:
      ValueError: naming ``name`` and the value unless it is ``None`` or a sequence of
        three positive ints each (lists from JSON are taken).

    Example:
      >>> check_conv_filters([[16, 3, 1]])
      ((16, 3, 1),)
      >>> check_conv_filters([])
      ()
    """
    if value is None:
        return None
    sequence = isinstance(value, Sequence) and not isinstance(value, str | bytes)
    layers = value if sequence else ()
    triples = [
        tuple(layer)
        for layer in layers
        if isinstance(layer, Sequence)
        and len(layer) == 3
        and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in layer)
    ]
    if not sequence or len(triples) != len(layers):
        raise ValueError(
            f"{name} must be None (the Nature CNN), () (no convolution: the image flattened "
            f"into the MLP) or a sequence of (out_channels, kernel_size, stride) triples of "
            f"positive ints, e.g. ((16, 3, 1),); got {value!r}."
        )
    return tuple(triples)


"""The CNN's padding: ``"same"`` keeps small images (MinAtar's 10x10) valid; ``"valid"`` is
the Nature DQN's (84x84 to 20, 9 and 7: 3,136 features), as SB3's ``NatureCNN``."""
SQRT2 = math.sqrt(2.0)


TORCH_KERNEL_INIT = nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
"""PyTorch's default ``nn.Linear``/``nn.Conv2d`` weights: ``kaiming_uniform_(a=sqrt(5))``,
which is ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, variance ``1 / (3 fan_in)``."""


def orthogonal(gain: float) -> nn.initializers.Initializer:
    """flax's orthogonal initializer, one matrix after the other under ``jax.vmap`` on the CPU.

    Values are flax's, key for key. Batched (SAC's twin critics, many agents in anakin),
    flax's initializer is one batched QR per layer, which on the CPU can deadlock XLA's
    thread pool (:func:`~jaxlearner.core.one_at_a_time.one_at_a_time`); there this one
    runs a ``lax.map`` of unbatched QRs instead. On other platforms it is flax's batched
    call. It happens once, at init.

    Example:
      >>> init = orthogonal(1.0)
      >>> twin = jax.vmap(lambda key: init(key, (4, 4)))(jax.random.split(jax.random.key(0)))
      >>> twin.shape
      (2, 4, 4)
    """
    flax_orthogonal = nn.initializers.orthogonal(gain)

    def init(key: jax.Array, shape: Sequence[int], dtype: Any = jnp.float32) -> jax.Array:
        return one_at_a_time(lambda key: flax_orthogonal(key, shape, dtype))(key)

    return init


def orthogonal_dense(size: int, gain: float, name: str) -> nn.Dense:
    """A dense layer with orthogonal initialisation of the given gain (:func:`orthogonal`)."""
    return nn.Dense(size, kernel_init=orthogonal(gain), name=name)


def torch_bias_init(fan_in: int) -> nn.initializers.Initializer:
    """PyTorch's default bias: ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``.

    Example:
      >>> bias = torch_bias_init(4)(jax.random.key(0), (3,))   # in [-0.5, 0.5]
    """
    bound = 1.0 / math.sqrt(fan_in)

    def init(key: jax.Array, shape: Sequence[int], dtype: jnp.dtype = jnp.float32) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def dense(size: int, gain: float, name: str, fan_in: int, ortho_init: bool = True) -> nn.Dense:
    """A dense layer: orthogonal with ``gain`` and zero bias, or PyTorch's default.

    ``ortho_init=True`` is SB3's ``ortho_init=True`` (and this library's
    default); ``ortho_init=False`` gives PyTorch's ``nn.Linear`` initialisation,
    which SB3 then keeps: weights from :data:`TORCH_KERNEL_INIT` and biases
    from :func:`torch_bias_init` (``gain`` is unused). The param names are the
    same either way, so checkpoints restore into both.

    Args:
      size: output units.
      gain: the orthogonal initialisation's gain.
      name: the layer's name in the param tree.
      fan_in: the layer's input features (for PyTorch's bias bound).
      ortho_init: orthogonal (``True``) or PyTorch's default (``False``).

    Example:
      >>> layer = dense(8, 1.0, "out", fan_in=4, ortho_init=False)
      >>> params = layer.init(jax.random.key(0), jnp.zeros((2, 4)))
    """
    if ortho_init:
        return orthogonal_dense(size, gain, name)
    return nn.Dense(
        size, kernel_init=TORCH_KERNEL_INIT, bias_init=torch_bias_init(fan_in), name=name
    )


def _sizes(value: Sequence[int], what: str) -> tuple[int, ...]:
    sizes = tuple(value)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in sizes):
        raise ValueError(f"{what} must be positive ints; got {value!r}.")
    return sizes


def _check_activation(name: str) -> None:
    if name not in ACTIVATIONS:
        raise ValueError(f"Unknown activation {name!r}; valid names: {sorted(ACTIVATIONS)}.")


class MLP(nn.Module):
    """Dense layers, each followed by the activation: ``[..., F] -> [..., hidden_sizes[-1]]``.

    Attributes:
      hidden_sizes: units per layer; ``()`` is the identity.
      activation: a name in :data:`ACTIVATIONS`.
      ortho_init: orthogonal layers (gain ``sqrt(2)``), or PyTorch's default
        initialisation (see :func:`dense`).
      layer_norm: a ``flax.linen.LayerNorm`` between each layer and its activation (PQN's
        network, Gallici et al. 2024); params ``layer_norm_{i}``.

    Example:
      >>> mlp = MLP((64, 64), "relu")
      >>> params = mlp.init(jax.random.key(0), jnp.zeros((8, 3)))
    """

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    ortho_init: bool = True
    layer_norm: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_sizes", _sizes(self.hidden_sizes, "MLP.hidden_sizes"))
        _check_activation(self.activation)
        super().__post_init__()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, size in enumerate(self.hidden_sizes):
            x = dense(size, SQRT2, f"dense_{i}", x.shape[-1], self.ortho_init)(x)
            x = _normalized(x, self.layer_norm, i)
            x = ACTIVATIONS[self.activation](x)
        return x


def _normalized(x: jax.Array, layer_norm: bool, index: int) -> jax.Array:
    """``x`` through a ``LayerNorm`` over its last axis (``layer_norm_{index}``), if asked."""
    return nn.LayerNorm(name=f"layer_norm_{index}")(x) if layer_norm else x


def scaled_pixels(images: jax.Array) -> jax.Array:
    """Images as float32: integer (e.g. uint8) ones scaled by ``1/255``, others as they are.

    Example:
      >>> scaled_pixels(jnp.full((2, 2), 255, jnp.uint8)).max()
      Array(1., dtype=float32)
    """
    images = jnp.asarray(images)
    x = images.astype(jnp.float32)
    return x / 255.0 if jnp.issubdtype(images.dtype, jnp.integer) else x


class CNN(nn.Module):
    """A Nature-DQN-style convolution stack: ``[..., H, W, C] -> [..., features]`` flattened.

    Integer (e.g. uint8) images are scaled by ``1/255``; float images are used
    as they are. ``"SAME"`` padding (the default) keeps small images (e.g. 10x10)
    valid; ``"VALID"`` is the Nature DQN's. The convolutions are
    :class:`~jaxlearner.algorithms.networks.convolution.Conv` (``flax.linen.Conv``'s params
    and values, with a kernel gradient that stays fast on CPU inside loops).
    Mnih et al. 2015, https://www.nature.com/articles/nature14236.

    Attributes:
      channels: output channels per convolution.
      kernel_sizes: square kernel size per convolution.
      strides: stride per convolution.
      activation: a name in :data:`ACTIVATIONS`.
      ortho_init: orthogonal kernels (gain ``sqrt(2)``) and zero biases, or
        PyTorch's default ``nn.Conv2d`` initialisation.
      padding: ``"SAME"`` or ``"VALID"``, every convolution's.
      layer_norm: a ``LayerNorm`` over the channels between each convolution and its
        activation (:class:`MLP`'s).

    Example:
      >>> cnn = CNN(padding="VALID")
      >>> params = cnn.init(jax.random.key(0), jnp.zeros((2, 84, 84, 4), jnp.uint8))
      >>> cnn.apply(params, jnp.zeros((2, 84, 84, 4), jnp.uint8)).shape
      (2, 3136)
    """

    channels: Sequence[int] = (32, 64, 64)
    kernel_sizes: Sequence[int] = (8, 4, 3)
    strides: Sequence[int] = (4, 2, 1)
    activation: str = "relu"
    ortho_init: bool = True
    padding: str = "SAME"
    layer_norm: bool = False

    def __post_init__(self) -> None:
        if self.padding not in ("SAME", "VALID"):
            raise ValueError(f"CNN.padding must be 'SAME' or 'VALID'; got {self.padding!r}.")
        for name in ("channels", "kernel_sizes", "strides"):
            object.__setattr__(self, name, _sizes(getattr(self, name), f"CNN.{name}"))
        if not len(self.channels) == len(self.kernel_sizes) == len(self.strides):
            raise ValueError(
                "CNN.channels, kernel_sizes and strides need one entry per layer; got "
                f"{self.channels}, {self.kernel_sizes}, {self.strides}."
            )
        _check_activation(self.activation)
        super().__post_init__()

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        x = scaled_pixels(images)
        layers = zip(self.channels, self.kernel_sizes, self.strides, strict=True)
        for i, (channels, kernel, stride) in enumerate(layers):
            fan_in = x.shape[-1] * kernel * kernel
            init = {"kernel_init": orthogonal(SQRT2)}
            if not self.ortho_init:
                init = {"kernel_init": TORCH_KERNEL_INIT, "bias_init": torch_bias_init(fan_in)}
            conv = Conv(channels, kernel, stride, self.padding, name=f"conv_{i}", **init)
            x = ACTIVATIONS[self.activation](_normalized(conv(x), self.layer_norm, i))
        return x.reshape(*x.shape[:-3], -1)


class Encoder(nn.Module):
    """Observations to features: preprocessing, then an :class:`MLP`.

    Preprocessing by ``kind``: ``"vector"`` flattens the observation to
    float32; ``"one_hot"`` one-hot encodes each integer component and
    concatenates; ``"image"`` runs a :class:`CNN`. Build one with
    :func:`encoder_for`.

    Attributes:
      observation_shape: shape of one observation; leading axes of the input
        beyond it are batch axes.
      kind: ``"vector"``, ``"one_hot"`` or ``"image"``.
      one_hot_sizes: for ``"one_hot"``, the number of values of each
        component (in order of the flattened observation).
      one_hot_starts: for ``"one_hot"``, each component's smallest value
        (gymnasium's ``start``); empty means all zero.
      hidden_sizes: the MLP's layers; ``()`` returns the preprocessed input.
      activation: the MLP's activation (the CNN always uses ReLU).
      ortho_init: the CNN's and the MLP's initialisation (see :func:`dense`).
      conv_padding: the CNN's padding, one of :data:`CONV_PADDINGS`.
      conv_filters: the CNN's layers (:data:`ConvFilters`); ``None``: :data:`NATURE_CNN`;
        ``()``: none, the image is flattened (scaled as the CNN scales it) into the MLP.
      layer_norm: the CNN's and the MLP's ``LayerNorm`` before each activation.
    """

    observation_shape: tuple[int, ...]
    kind: Literal["vector", "one_hot", "image"] = "vector"
    one_hot_sizes: tuple[int, ...] = ()
    one_hot_starts: tuple[int, ...] = ()
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    ortho_init: bool = True
    conv_padding: str = "same"
    conv_filters: ConvFilters | None = None
    layer_norm: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "observation_shape", tuple(self.observation_shape))
        object.__setattr__(self, "conv_filters", check_conv_filters(self.conv_filters))
        if self.conv_padding not in CONV_PADDINGS:
            raise ValueError(
                f"conv_padding must be one of {CONV_PADDINGS}; got {self.conv_padding!r}."
            )
        if self.kind == "image":
            _check_conv_sizes(self.observation_shape, self.conv_padding, self.filters)
        if self.kind not in ("vector", "one_hot", "image"):
            raise ValueError(
                f"Encoder.kind must be 'vector', 'one_hot' or 'image'; got {self.kind!r}."
            )
        object.__setattr__(self, "hidden_sizes", _sizes(self.hidden_sizes, "hidden_sizes"))
        _check_activation(self.activation)
        super().__post_init__()

    @property
    def filters(self) -> ConvFilters:
        """The CNN's layers: ``conv_filters``, or :data:`NATURE_CNN` for ``None``."""
        return NATURE_CNN if self.conv_filters is None else self.conv_filters

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        obs = jnp.asarray(obs)
        rank = len(self.observation_shape)
        if obs.ndim < rank or obs.shape[obs.ndim - rank :] != self.observation_shape:
            raise ValueError(
                f"Encoder expects observations [..., *{self.observation_shape}]; got shape "
                f"{obs.shape}."
            )
        batch = obs.shape[: obs.ndim - rank]
        if self.kind == "image" and not self.filters:  # no convolution: pixels into the MLP
            x = scaled_pixels(obs).reshape(*batch, -1)
        elif self.kind == "image":
            channels, kernels, strides = zip(*self.filters, strict=True)
            x = CNN(
                channels,
                kernels,
                strides,
                ortho_init=self.ortho_init,
                padding=self.conv_padding.upper(),
                layer_norm=self.layer_norm,
                name="cnn",
            )(obs)
        elif self.kind == "one_hot":
            values = obs.reshape(*batch, len(self.one_hot_sizes)).astype(jnp.int32)
            starts = jnp.asarray(self.one_hot_starts or (0,) * len(self.one_hot_sizes))
            x = jnp.concatenate(
                [
                    jax.nn.one_hot(values[..., k] - starts[k], n)
                    for k, n in enumerate(self.one_hot_sizes)
                ],
                axis=-1,
            )
        else:
            x = obs.reshape(*batch, -1).astype(jnp.float32)
        mlp = MLP(self.hidden_sizes, self.activation, self.ortho_init, self.layer_norm, name="mlp")
        return mlp(x)


def encoder_for(
    observation_space: gymnasium.Space,
    hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    ortho_init: bool = True,
    conv_padding: str = "same",
    conv_filters: ConvFilters | None = None,
    layer_norm: bool = False,
) -> Encoder:
    """An :class:`Encoder` for a gymnasium observation space.

    * ``Box`` of shape ``(H, W, C)``: a :class:`CNN` (uint8 scaled by
      ``1/255``), then the MLP. Add a channel axis to a 2-D image to get one.
    * any other ``Box`` and ``MultiBinary``: flattened, then the MLP.
    * ``Discrete`` and ``MultiDiscrete``: one-hot per component, then the MLP.

    Args:
      observation_space: the environment's (single, unbatched) observation space.
      hidden_sizes: the MLP's layers after preprocessing.
      activation: a name in :data:`ACTIVATIONS`.
      ortho_init: orthogonal initialisation, or PyTorch's default (see :func:`dense`).
      conv_padding: the CNN's padding for images, one of :data:`CONV_PADDINGS`.
      conv_filters: the CNN's layers (:data:`ConvFilters`); ``None``: :data:`NATURE_CNN`.
      layer_norm: a ``LayerNorm`` before each activation of the CNN and the MLP.

    Returns:
      An :class:`Encoder`: ``obs [..., *space.shape] -> features [..., F]``.

    Raises:
      TypeError: for other spaces (``Dict``, ``Tuple``, ``Text``, ``Graph``, ...).
      ValueError: for an unknown ``conv_padding``, malformed ``conv_filters``, or
        ``"valid"`` on an image too small for the CNN.

    Example:
      >>> encoder = encoder_for(gymnasium.spaces.Box(-1, 1, (4,)), (64, 64), "tanh")
      >>> params = encoder.init(jax.random.key(0), jnp.zeros((8, 4)))
    """
    common = {
        "hidden_sizes": tuple(hidden_sizes),
        "activation": activation,
        "ortho_init": ortho_init,
        "conv_padding": conv_padding,
        "conv_filters": conv_filters,
        "layer_norm": layer_norm,
    }
    spaces = gymnasium.spaces
    if isinstance(observation_space, spaces.Box):
        kind = "image" if len(observation_space.shape) == 3 else "vector"
        return Encoder(tuple(observation_space.shape), kind, **common)
    if isinstance(observation_space, spaces.MultiBinary):
        return Encoder(tuple(observation_space.shape), "vector", **common)
    if isinstance(observation_space, spaces.Discrete):
        return Encoder(
            (), "one_hot", (int(observation_space.n),), (int(observation_space.start),), **common
        )
    if isinstance(observation_space, spaces.MultiDiscrete):
        sizes = tuple(int(n) for n in np.ravel(observation_space.nvec))
        starts = tuple(int(s) for s in np.ravel(observation_space.start))
        return Encoder(tuple(observation_space.shape), "one_hot", sizes, starts, **common)
    raise TypeError(
        f"encoder_for supports observation spaces {OBSERVATION_SPACES}; got {observation_space!r}."
        " Flatten Dict and Tuple spaces first (e.g. gymnasium.wrappers.FlattenObservation)."
    )


def _check_conv_sizes(shape: tuple[int, ...], padding: str, filters: ConvFilters) -> None:
    """Raises ``ValueError`` when ``"valid"`` convolutions leave nothing of an image."""
    if padding != "valid":
        return
    height, width = shape[:2]
    for layer, (_, kernel, stride) in enumerate(filters):
        height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
        if height < 1 or width < 1:
            raise ValueError(
                f"conv_padding='valid' leaves nothing of a {shape[0]}x{shape[1]} image at "
                f"convolution {layer} (kernel {kernel}, stride {stride}); use 'same' for "
                "small images."
            )
