"""The tests' compile setting (tests/conftest.py): LLVM -O0 outside the slow tests, XLA's
default inside them and in modules marked full_optimization, and XLA:CPU's older loop-fusion
emitters in every test, through the compile options of every program a test compiles and the
XLA_FLAGS of the commands it starts."""

import inspect
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
from jax._src import compiler as jax_compiler

QUICK = ("xla_backend_optimization_level", "0")

needs_overrides = pytest.mark.skipif(
    "env_options_overrides" not in inspect.signature(jax_compiler.get_compile_options).parameters,
    reason="this JAX builds compile options without overrides: every test keeps XLA's default",
)


def overrides(**kwargs) -> list[tuple[str, str]]:
    options = jax_compiler.get_compile_options(num_replicas=1, num_partitions=1, **kwargs)
    return [tuple(pair) for pair in options.env_option_overrides]


@needs_overrides
def test_a_test_not_marked_slow_compiles_at_o0():
    assert QUICK in overrides()
    # A program's own compiler options still win.
    assert ("xla_backend_optimization_level", "2") in overrides(
        env_options_overrides={"xla_backend_optimization_level": "2"}
    )
    assert QUICK not in overrides(env_options_overrides={"xla_backend_optimization_level": "2"})
    # And jax.jit compiles and runs with it: the same values as a default compile.
    x = jnp.linspace(-3.0, 3.0, 64).reshape(8, 8)
    quick = jax.jit(lambda x: jnp.tanh(x @ x.T).sum(axis=0))(x)
    default = jax.jit(
        lambda x: jnp.tanh(x @ x.T).sum(axis=0),
        compiler_options={"xla_backend_optimization_level": "3"},
    )(x)
    assert jnp.allclose(quick, default, rtol=1e-6, atol=1e-6)


def child_xla_flags() -> str:
    """XLA_FLAGS as a command the test starts sees them."""
    code = "import os; print(os.environ['XLA_FLAGS'])"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def test_a_command_started_by_a_test_not_marked_slow_compiles_at_o0():
    assert "--xla_backend_optimization_level=0" in child_xla_flags()


@pytest.mark.slow
@needs_overrides
def test_a_slow_test_compiles_with_xla_defaults():
    assert QUICK not in overrides()
    flags = child_xla_flags()
    assert "xla_backend_optimization_level" not in flags
    assert "--xla_force_host_platform_device_count=8" in flags


@pytest.mark.slow
@pytest.mark.quick_compile
@needs_overrides
def test_a_slow_test_marked_quick_compile_compiles_at_o0():
    assert QUICK in overrides()
    assert "--xla_backend_optimization_level=0" in child_xla_flags()


@pytest.mark.full_optimization
@needs_overrides
def test_a_test_marked_full_optimization_compiles_with_xla_defaults():
    assert QUICK not in overrides()
    assert "xla_backend_optimization_level" not in child_xla_flags()


@pytest.mark.parametrize("slow", [False, pytest.param(True, marks=pytest.mark.slow)])
@needs_overrides
def test_every_test_compiles_without_the_mlir_fusion_emitters(slow):
    assert ("xla_cpu_use_fusion_emitters", False) in overrides()
    assert "--xla_cpu_use_fusion_emitters=false" in child_xla_flags()
    # A program's own compiler options still win.
    assert ("xla_cpu_use_fusion_emitters", True) in overrides(
        env_options_overrides={"xla_cpu_use_fusion_emitters": True}
    )
