"""``jaxlearner presets [ALGORITHM]``: the table of tuned settings, one row a line or in full.

Every row, one line each: the algorithm, the environment, who tuned it, its envs, budget and
evaluation cadence, and its source; a ``*`` marks the row ``jaxlearner train`` uses on that
environment (``--preset auto``). With an algorithm, its rows in full: the config fields and
the notes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from jaxlearner.algorithms.presets import Preset, preset_names, preset_rows
from jaxlearner.cli.options import PresetsOptions
from jaxlearner.cli.run_folder import UsageError


def list_presets(options: PresetsOptions) -> int:
    """Prints the preset rows; returns the exit status.

    Raises:
      UsageError: for an algorithm without presets, listing those with some.

    Example:
      >>> list_presets(PresetsOptions("sac"))  # doctest: +SKIP
    """
    algorithm = None if options.algorithm is None else options.algorithm.lower()
    try:
        pairs = preset_names(algorithm)
    except ValueError as error:
        raise UsageError(str(error)) from None
    rows = [row for pair in pairs for row in preset_rows(*pair)]
    print(_header() if algorithm is None else f"{algorithm}: {len(rows)} presets")
    for row in rows:
        print(_line(row))
        if algorithm is not None:
            print("\n".join(_details(row)))
    print(
        "* the row 'jaxlearner train ALGO --env ENV' uses (--preset auto); --preset rl_zoo3 "
        "or jaxlearner picks an origin, --preset none the library's defaults."
    )
    return 0


def _header() -> str:
    return f"  {'algorithm':<9} {'environment':<26} {'origin':<10} {'envs':>4} {'budget':>9} " + (
        f"{'eval':>6}  source"
    )


def _line(row: Preset) -> str:
    used = "*" if preset_rows(row.algorithm, row.env_id)[0] is row else " "
    return (
        f"{used} {row.algorithm:<9} {row.env_id:<26} {row.origin:<10} {row.num_envs:>4} "
        f"{row.max_steps:>9} {row.eval_every:>6}  {row.source}"
    )


def _details(row: Preset) -> Iterable[str]:
    """The row's config as ``--config``-style ``key=value`` fields, then its notes."""
    fields = " ".join(
        f"{key}={json.dumps(value, separators=(',', ':'))}" for key, value in row.config.items()
    )
    yield f"    config: {fields}"
    if row.notes:
        yield f"    notes: {row.notes}"
