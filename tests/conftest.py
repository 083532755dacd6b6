"""Test configuration: 8 fake CPU devices, set before JAX starts, and one compilation cache."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The tests' Ray instances are local only: no usage report leaves the machine (Ray sends one
# by default), in this process or in the commands the tests start.
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import atexit
import inspect
import shutil
import signal
import tempfile

# Ctrl-C as a terminal delivers it: a background job of a non-interactive shell (`pytest &`)
# starts with SIGINT ignored (POSIX), which Python keeps, and then the tests of Ctrl-C find
# no handler to take over (a run's stop on signals only replaces the default one).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Many tests build the same small learners and compile the same programs: a compilation cache
# per test process (a fresh folder, removed at exit) compiles each program once. It is JAX's
# own variable, so the commands, notebooks and scripts the tests start use it too (the
# command line's default folder is $JAX_COMPILATION_CACHE_DIR when set), never ~/.cache.
os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxlearner-tests-cache-")
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.2"
os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"

import jax
import pytest
from jax._src import compiler as jax_compiler

_compilation_cache = os.environ["JAX_COMPILATION_CACHE_DIR"]
atexit.register(shutil.rmtree, _compilation_cache, ignore_errors=True)
jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_compilation_cache_dir", _compilation_cache)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# Most tests run a program once or twice, so compiling is nearly all of their time (89% over
# the tests not marked slow: benchmarks/README.md, "The test suite's time"). LLVM's -O0 cuts XLA's
# compile by a quarter to a half and keeps a program's meaning (the same HLO, IEEE arithmetic;
# the machine code less tuned, so roundings may differ), so those tests compile at -O0. The slow
# tests run long programs, which -O0 makes up to twice as slow: they, the benchmarks and users
# keep XLA's default. A test's own programs get it through the compile options (what
# `jax.jit(f, compiler_options=...)` sets), by the one function JAX builds them with (a JAX
# whose function no longer takes them keeps the default everywhere, only slower); the commands,
# notebooks and runners a test starts get it through XLA_FLAGS.
_QUICK_COMPILE = {"xla_backend_optimization_level": "0"}
_quick_compile = False
# Every test, slow ones included, compiles without XLA:CPU's MLIR loop-fusion emitters
# (`xla_cpu_use_fusion_emitters`, on by default), which took most of a program's compile: the
# PPO update of benchmarks/ppo_workload.py 1.3 -> 0.5 s at -O0, 2.0 -> 1.4 s at XLA's default,
# its run time the same (benchmarks/README.md, "The test suite's time"). The same HLO, emitted
# by XLA's older code generator. Kept only where this XLA knows the option (a compile with it
# is tried once below): an option XLA does not know fails every compile, and in XLA_FLAGS it
# ends the process.
_TESTS_COMPILE = {"xla_cpu_use_fusion_emitters": False}
_get_compile_options = jax_compiler.get_compile_options


def _compile_options(*args, env_options_overrides=None, **kwargs):
    quick = _QUICK_COMPILE if _quick_compile else {}
    env_options_overrides = {**_TESTS_COMPILE, **quick, **(env_options_overrides or {})}
    return _get_compile_options(*args, env_options_overrides=env_options_overrides, **kwargs)


def _xla_flag(name, value):
    return f"--{name}={str(value).lower() if isinstance(value, bool) else value}"


if "env_options_overrides" in inspect.signature(_get_compile_options).parameters:
    try:
        jax.jit(lambda x: x + 1, compiler_options=_TESTS_COMPILE).lower(1.0).compile()
    except Exception:  # an XLA without the option: XLA's default emitters
        _TESTS_COMPILE = {}
    jax_compiler.get_compile_options = _compile_options
else:
    _TESTS_COMPILE = {}
# The commands, notebooks and runners the tests start: through XLA_FLAGS, which this process
# read when its backend started (above), so its own programs take the compile options only.
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ["XLA_FLAGS"], *(_xla_flag(n, v) for n, v in _TESTS_COMPILE.items())]
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test not marked slow compiles at LLVM -O0 (see _QUICK_COMPILE) from its fixtures'
    setup to their teardown. -O0 and XLA's default may round differently (the same IEEE
    operations, fused differently), so what is compared bit for bit must come from one
    setting: a module-scoped fixture takes the setting of the first test that asks for it, so
    a slow test that compares with a fixture of quick tests is marked ``quick_compile``. A test
    module whose quick tests run convolutions is marked ``full_optimization`` (a whole module,
    so its fixtures and tests share one setting): -O0 makes XLA:CPU's convolutions several
    times slower, more than it saves on their compile. ``JAXLEARNER_TESTS_QUICK_COMPILE=0``
    turns -O0 off for a run (to measure it)."""
    global _quick_compile
    marked = item.get_closest_marker
    _quick_compile = os.environ.get("JAXLEARNER_TESTS_QUICK_COMPILE", "1") != "0" and (
        (marked("slow") is None and marked("full_optimization") is None)
        or marked("quick_compile") is not None
    )
    flags = os.environ["XLA_FLAGS"]
    if _quick_compile:
        quick = " ".join(_xla_flag(name, value) for name, value in _QUICK_COMPILE.items())
        os.environ["XLA_FLAGS"] = f"{flags} {quick}"
    try:
        yield
    finally:
        _quick_compile = False
        os.environ["XLA_FLAGS"] = flags


@pytest.fixture(params=[True, False], ids=["jit", "eager"])
def jit(request):
    """Run a test once with jax.jit and once without."""
    return request.param


_CACHE_SETTINGS = (
    "jax_enable_compilation_cache",
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


@pytest.fixture(autouse=True)
def keep_the_cache_settings():
    """The command line run in-process sets JAX's cache to keep every program (the eager
    tests' thousands of tiny ones too), or turns it off; each test ends with the session's
    settings again."""
    before = {name: getattr(jax.config, name) for name in _CACHE_SETTINGS}
    yield
    for name, value in before.items():
        if getattr(jax.config, name) != value:
            jax.config.update(name, value)


@pytest.fixture(autouse=True)
def keep_the_signal_handlers():
    """A test (or the code it runs in-process, such as the command line's main) must leave
    SIGINT's and SIGTERM's handlers as it found them: a run's stop on Ctrl-C only takes
    over default handlers. A changed one is put back and fails the test."""
    import signal

    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    yield
    changed = {}
    for number, handler in before.items():
        if signal.getsignal(number) is not handler:
            changed[signal.Signals(number).name] = signal.getsignal(number)
            signal.signal(number, handler)
    assert not changed, f"the test left signal handlers changed: {changed}"
