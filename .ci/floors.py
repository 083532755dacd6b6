"""Print pyproject.toml's dependencies pinned to their lower bounds, one per line.

pyproject.toml is the one source of truth for the floors: each runtime dependency
must say ``name>=version``, and ``name==version`` is printed for it, so CI can
install the oldest versions the project claims to support and run tests on them.

Usage: python .ci/floors.py [pyproject.toml]
"""

import re
import sys
import tomllib
from pathlib import Path

_FLOOR = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?)\s*>=\s*([0-9][^,;\s]*)\s*$")


def floors(pyproject: Path) -> list[str]:
    """Returns ``name==version`` for each ``name>=version`` in ``project.dependencies``.

    Raises:
      ValueError: a dependency has no single ``>=`` bound (an upper bound, a pin, an
        environment marker or no bound at all), so its floor cannot be tested.
    """
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    pins = []
    for requirement in dependencies:
        match = _FLOOR.match(requirement)
        if match is None:
            raise ValueError(
                f"{pyproject}: dependency {requirement!r} has no plain 'name>=version' "
                "lower bound; give it one so CI can test the floor."
            )
        pins.append(f"{match[1]}=={match[2]}")
    return pins


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml")
    try:
        print("\n".join(floors(path)))
    except ValueError as error:
        sys.exit(f"floors: {error}")
