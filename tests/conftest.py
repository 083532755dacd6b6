"""Test configuration: 8 fake CPU devices, set before JAX starts, and one compilation cache."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import atexit
import shutil
import tempfile

import jax
import pytest

jax.config.update("jax_num_cpu_devices", 8)

# Many tests build the same small learners and compile the same programs: a compilation cache
# shared by the session's tests (a fresh folder, removed at exit) compiles each program once.
_compilation_cache = tempfile.mkdtemp(prefix="jaxlearner-tests-cache-")
atexit.register(shutil.rmtree, _compilation_cache, ignore_errors=True)
jax.config.update("jax_compilation_cache_dir", _compilation_cache)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@pytest.fixture(params=[True, False], ids=["jit", "eager"])
def jit(request):
    """Run a test once with jax.jit and once without."""
    return request.param
