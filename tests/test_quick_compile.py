"""The tests' compile setting (tests/conftest.py): LLVM -O0 outside the slow tests, XLA's
default inside them, through the compile options of every program a test compiles."""

import inspect

import jax
import jax.numpy as jnp
import pytest
from jax._src import compiler as jax_compiler

QUICK = ("xla_backend_optimization_level", "0")

pytestmark = pytest.mark.skipif(
    "env_options_overrides" not in inspect.signature(jax_compiler.get_compile_options).parameters,
    reason="this JAX builds compile options without overrides: every test keeps XLA's default",
)


def overrides(**kwargs) -> list[tuple[str, str]]:
    options = jax_compiler.get_compile_options(num_replicas=1, num_partitions=1, **kwargs)
    return [tuple(pair) for pair in options.env_option_overrides]


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


@pytest.mark.slow
def test_a_slow_test_compiles_with_xla_defaults():
    assert QUICK not in overrides()
