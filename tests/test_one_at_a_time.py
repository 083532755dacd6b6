"""one_at_a_time: fn's values, a loop over keys on the CPU, one batched call elsewhere."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import maybe_jit

from jaxlearner.algorithms.networks.encoders import orthogonal
from jaxlearner.core.one_at_a_time import one_at_a_time


def qr_of_normal(key):  # an orthogonal initialiser's work
    return {"q": jnp.linalg.qr(jax.random.normal(key, (5, 3)))[0], "sum": jax.random.normal(key)}


def test_values_are_fns_unbatched_vmapped_and_nested(jit):
    fn = one_at_a_time(qr_of_normal)
    keys = jax.random.split(jax.random.key(1), 6)
    expected = jax.tree.map(lambda *x: np.stack(x), *[qr_of_normal(k) for k in keys])
    one = maybe_jit(fn, jit)(keys[0])
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b[0], rtol=1e-6), one, expected)
    batched = maybe_jit(jax.vmap(fn), jit)(keys)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), batched, expected)
    nested = maybe_jit(jax.vmap(jax.vmap(fn)), jit)(keys.reshape(2, 3))
    flat = jax.tree.map(lambda x: x.reshape(6, *x.shape[2:]), nested)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), flat, expected)


def test_fn_is_traced_once_for_the_unbatched_call_and_both_platform_branches():
    # The CPU's loop, the accelerators' batched call and the unbatched call reuse one trace
    # of fn (Python runs it once), so a program lowers no slower for holding two branches.
    traces = []

    def counted(key):
        traces.append(key)
        return qr_of_normal(key)

    keys = jax.random.split(jax.random.key(1), 3)
    fn = one_at_a_time(counted)
    jax.jit(jax.vmap(fn)).trace(keys).lower(lowering_platforms=("cpu",))
    assert len(traces) == 1
    jax.jit(fn).trace(keys[0]).lower(lowering_platforms=("cuda",))
    assert len(traces) == 1


def qr_operands(fn, keys, platform):
    """The operand types of the QRs in ``jit(vmap(fn))(keys)`` lowered for ``platform``."""
    text = jax.jit(jax.vmap(fn)).trace(keys).lower(lowering_platforms=(platform,)).as_text()
    return set(re.findall(r"call @qr\(%\w+\) : \((tensor<[^>]*>)\)", text))


@pytest.mark.parametrize("wrap", ["one_at_a_time", "orthogonal"])
def test_one_key_at_a_time_on_the_cpu_and_one_batched_call_on_accelerators(wrap):
    init = orthogonal(1.0)
    fn = one_at_a_time(qr_of_normal) if wrap == "one_at_a_time" else lambda k: init(k, (64, 32))
    shape = "5x3" if wrap == "one_at_a_time" else "64x32"
    keys = jax.random.split(jax.random.key(0), 8)
    assert qr_operands(fn, keys, "cpu") == {f"tensor<{shape}xf32>"}
    for platform in ("cuda", "tpu"):
        assert qr_operands(fn, keys, platform) == {f"tensor<8x{shape}xf32>"}, platform
