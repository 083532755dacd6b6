"""Test configuration: 8 fake CPU devices, set before JAX starts."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import pytest

jax.config.update("jax_num_cpu_devices", 8)


@pytest.fixture(params=[True, False], ids=["jit", "eager"])
def jit(request):
    """Run a test once with jax.jit and once without."""
    return request.param
