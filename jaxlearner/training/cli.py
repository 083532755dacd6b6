"""The ``jaxlearner`` command's old home: ``python -m jaxlearner.training.cli`` still runs it.

The command line is an application on top of the library and lives in
:mod:`jaxlearner.cli`, a layer above ``training``; this module forwards to it
(``main`` and the names it exported) without importing it at module level, so
the training layer does not depend on the layer above.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

_FORWARDED = (
    "CHECKPOINTS",
    "DEFAULTS",
    "METRICS_FILE",
    "NO_CACHE_VARIABLE",
    "RUN_FILE",
    "Defaults",
)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs :func:`jaxlearner.cli.main`; returns the exit status."""
    from jaxlearner.cli.main import main as cli_main

    return cli_main(argv)


def __getattr__(name: str) -> object:
    if name in _FORWARDED:
        return getattr(importlib.import_module("jaxlearner.cli"), name)
    raise AttributeError(f"module 'jaxlearner.training.cli' has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(main())
