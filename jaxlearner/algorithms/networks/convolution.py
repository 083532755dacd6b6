"""2-D convolutions whose kernel gradient stays fast on CPU inside loops.

On CPU, XLA computes a convolution's kernel gradient (a convolution over the batch axis)
through a slow generic path when it sits inside a while loop, which is where every update
runs (``lax.scan`` over epochs and minibatches, over replay updates, over anakin's
iterations; jax-ml/jax#12868). Measured on jaxlib 0.10.2, 2 cores: the Nature CNN's
gradient on 32 frames of ``84 x 84 x 4`` takes 35 ms outside a scan and 342 ms inside one.
:func:`conv2d` computes that gradient on CPU as one matmul of the input's patches with the
output's gradient instead: 50 ms inside a scan. The forward pass and the input's gradient
are ``lax.conv_general_dilated``'s own, and other platforms keep its kernel gradient too
(``lax.platform_dependent`` picks when the program is lowered).

:class:`Conv` is ``flax.linen.Conv`` (NHWC, square kernels, ``"SAME"`` or ``"VALID"``)
with the same param names and initial values, built on :func:`conv2d`.
"""

from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

_DIMENSIONS = ("NHWC", "HWIO", "NHWC")


def _conv(x: jax.Array, kernel: jax.Array, strides: tuple[int, int], padding: str) -> jax.Array:
    return jax.lax.conv_general_dilated(x, kernel, strides, padding, dimension_numbers=_DIMENSIONS)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def conv2d(x: jax.Array, kernel: jax.Array, strides: tuple[int, int], padding: str) -> jax.Array:
    """``lax.conv_general_dilated`` of NHWC images with an HWIO kernel; see the module docstring.

    Args:
      x: ``[B, H, W, C]`` images (float).
      kernel: ``[kh, kw, C, F]``.
      strides: ``(sh, sw)``.
      padding: ``"SAME"`` or ``"VALID"``.

    Returns:
      ``[B, H', W', F]``, exactly ``lax.conv_general_dilated``'s.

    Example:
      >>> y = conv2d(jnp.ones((2, 8, 8, 3)), jnp.ones((4, 4, 3, 5)), (2, 2), "VALID")
      >>> y.shape
      (2, 3, 3, 5)
    """
    return _conv(x, kernel, strides, padding)


def _forward(
    x: jax.Array, kernel: jax.Array, strides: tuple[int, int], padding: str
) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return _conv(x, kernel, strides, padding), (x, kernel)


def _backward(
    strides: tuple[int, int], padding: str, residuals: tuple[jax.Array, jax.Array], grad: Any
) -> tuple[jax.Array, jax.Array]:
    x, kernel = residuals
    grad_x = jax.vjp(lambda x: _conv(x, kernel, strides, padding), x)[1](grad)[0]

    def by_lax(x: jax.Array, grad: jax.Array) -> jax.Array:
        return jax.vjp(lambda kernel: _conv(x, kernel, strides, padding), kernel)[1](grad)[0]

    def by_patches(x: jax.Array, grad: jax.Array) -> jax.Array:
        height, width, channels, features = kernel.shape
        patches = jax.lax.conv_general_dilated_patches(
            x, (height, width), strides, padding, dimension_numbers=_DIMENSIONS
        )  # [B, H', W', C * kh * kw], channel-major
        flat = jnp.einsum("bhwp,bhwf->pf", patches, grad)
        return flat.reshape(channels, height, width, features).transpose(1, 2, 0, 3)

    grad_kernel = jax.lax.platform_dependent(x, grad, cpu=by_patches, default=by_lax)
    return grad_x, grad_kernel.astype(kernel.dtype)


conv2d.defvjp(_forward, _backward)


class Conv(nn.Module):
    """``flax.linen.Conv`` over :func:`conv2d`: same params (``kernel [k, k, C, F]``, ``bias
    [F]``), same initial values, same outputs (``[..., H, W, C]``: any leading axes); a fast
    kernel gradient on CPU.

    Attributes:
      features: output channels.
      kernel_size: the square kernel's side.
      strides: the stride on both axes.
      padding: ``"SAME"`` or ``"VALID"``.
      kernel_init: the kernel's initializer.
      bias_init: the bias's initializer.

    Example:
      >>> conv = Conv(8, 3, 1, "SAME")
      >>> params = conv.init(jax.random.key(0), jnp.ones((1, 5, 5, 2)))
      >>> conv.apply(params, jnp.ones((1, 5, 5, 2))).shape
      (1, 5, 5, 8)
    """

    features: int
    kernel_size: int
    strides: int
    padding: str
    kernel_init: Any = nn.initializers.lecun_normal()
    bias_init: Any = nn.initializers.zeros_init()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        size = (self.kernel_size, self.kernel_size, x.shape[-1], self.features)
        kernel = self.param("kernel", self.kernel_init, size)
        bias = self.param("bias", self.bias_init, (self.features,))
        strides = (self.strides, self.strides)
        batch = x.shape[:-3]  # any leading axes, as nn.Conv takes them
        y = conv2d(x.reshape(-1, *x.shape[-3:]), kernel, strides, self.padding) + bias
        return y.reshape(*batch, *y.shape[1:])
