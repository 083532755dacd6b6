"""conv2d and Conv: lax's and flax's values, with the kernel gradient computed from patches
on CPU; the same params, outputs and (to float rounding) gradients, also inside a scan."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import maybe_jit

from jaxlearner.algorithms.networks.convolution import Conv, conv2d
from jaxlearner.algorithms.networks.encoders import TORCH_KERNEL_INIT, orthogonal

LAYERS = [(8, 4, "VALID", 84), (4, 2, "VALID", 20), (3, 1, "SAME", 9), (3, 2, "SAME", 10)]


@pytest.mark.parametrize(("kernel", "stride", "padding", "side"), LAYERS)
def test_conv2d_is_lax_and_its_gradients_match(kernel, stride, padding, side, jit):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(3, side, side, 5)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(kernel, kernel, 5, 7)), jnp.float32)
    dims = ("NHWC", "HWIO", "NHWC")
    lax_conv = lambda x, w: jax.lax.conv_general_dilated(
        x, w, (stride, stride), padding, dimension_numbers=dims
    )
    ours = lambda x, w: conv2d(x, w, (stride, stride), padding)
    np.testing.assert_array_equal(maybe_jit(ours, jit)(x, w), lax_conv(x, w))
    loss = lambda conv: lambda x, w: jnp.sum(jnp.sin(conv(x, w)))
    expected = jax.grad(loss(lax_conv), argnums=(0, 1))(x, w)
    got = maybe_jit(jax.grad(loss(ours), argnums=(0, 1)), jit)(x, w)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("torch_init", [False, True])
@pytest.mark.parametrize(("kernel", "stride", "padding", "side"), LAYERS)
def test_conv_has_flaxs_params_values_and_gradients_also_in_a_scan(
    kernel, stride, padding, side, torch_init
):
    init = {"kernel_init": orthogonal(1.4)}
    if torch_init:
        init = {"kernel_init": TORCH_KERNEL_INIT, "bias_init": nn.initializers.uniform(0.3)}
    x = jnp.asarray(np.random.default_rng(1).normal(size=(2, side, side, 3)), jnp.float32)
    ours = Conv(6, kernel, stride, padding, **init)
    flax_conv = nn.Conv(6, (kernel, kernel), (stride, stride), padding=padding, **init)
    params = ours.init(jax.random.key(3), x)
    assert jax.tree.all(jax.tree.map(np.array_equal, params, flax_conv.init(jax.random.key(3), x)))
    np.testing.assert_array_equal(ours.apply(params, x), flax_conv.apply(params, x))

    def scanned_grad(module):
        grad = jax.grad(lambda p: jnp.sum(module.apply(p, x) ** 2))
        return jax.jit(lambda p: jax.lax.scan(lambda c, _: (c, grad(p)), 0, None, length=2)[1])

    got, expected = scanned_grad(ours)(params), scanned_grad(flax_conv)(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4), got, expected)


def test_conv2d_under_vmap_as_anakin_runs_seeds():
    x = jnp.ones((4, 2, 10, 10, 3))
    w = jax.random.normal(jax.random.key(0), (4, 3, 3, 3, 2))
    grad = jax.vmap(jax.grad(lambda x, w: jnp.sum(conv2d(x, w, (1, 1), "SAME") ** 2), 1))
    single = jax.grad(lambda x, w: jnp.sum(conv2d(x, w, (1, 1), "SAME") ** 2), 1)
    np.testing.assert_allclose(grad(x, w)[2], single(x[2], w[2]), rtol=1e-5)
