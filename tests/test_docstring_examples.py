"""The docstrings' examples run: every ``>>>`` line of the package as a doctest, per module.

Examples marked ``# doctest: +SKIP`` (sketches with placeholders) are left out. They run here,
in the test process, on conftest.py's 8 fake CPU devices.
"""

import doctest
import importlib
import io
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("jaxlearner", "jaxlearner_cli")


def _module_name(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(
    _module_name(path)
    for package in PACKAGES
    for path in (ROOT / package).rglob("*.py")
    if path.name != "__main__.py" and ">>>" in path.read_text()
)


def test_the_modules_with_examples_are_found():
    assert {"jaxlearner", "jaxlearner.core.learner", "jaxlearner.anakin.sweeps"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    # pytest's own doctest default: ELLIPSIS.
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report = io.StringIO()
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test, out=report.write)
    assert runner.failures == 0, report.getvalue()
    if runner.tries == 0:
        pytest.skip(f"{name}: every example is a sketch marked +SKIP")
