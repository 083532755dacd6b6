"""``jaxlearner``'s entry point: parse, turn on the compilation cache, run one command.

The command modules are imported when their command runs (see :func:`_run`), so
``jaxlearner --help`` and a bad option answer without loading orbax or matplotlib.
"""

from __future__ import annotations

import logging
import os
import pathlib
import signal
import sys
from collections.abc import Sequence

from jaxlearner.cli.options import (
    CacheOptions,
    EvalOptions,
    Options,
    PlotOptions,
    PresetsOptions,
    RecordOptions,
    TrainOptions,
)
from jaxlearner.cli.parser import NO_CACHE_VARIABLE, default_cache, parse, usage
from jaxlearner.cli.run_folder import UsageError
from jaxlearner.errors import CheckpointCorruptedError
from jaxlearner_cli import exiting_on_signal, interrupted_line

_COMMANDS = {
    TrainOptions: "train",
    EvalOptions: "eval",
    RecordOptions: "record",
    PlotOptions: "plot",
    PresetsOptions: "presets",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status.

    Args:
      argv: the arguments after ``jaxlearner`` (``None``: ``sys.argv[1:]``).

    Returns:
      0 on success, 2 for bare ``jaxlearner``, 128 + the signal's number after
      Ctrl-C (130) or SIGTERM (143) during ``train``.

    Raises:
      SystemExit: with status 2 and one line on stderr for a bad option or argument, or a
        checkpoint refused as damaged (a symbolic link in it included).

    Example:
      >>> from jaxlearner.cli import main
      >>> main(["plot", "runs/ppo-CartPole-v1-20250101-000000"])  # doctest: +SKIP
    """
    options = parse(argv)
    if options is None:  # bare `jaxlearner`: the usage, as for any missing argument
        print(usage(), file=sys.stderr, end="")
        return 2
    command = _COMMANDS[type(options)]
    logging.getLogger("absl").setLevel(logging.ERROR)  # orbax's notes on read-only folders
    try:
        if not isinstance(options, PlotOptions | PresetsOptions):
            _compilation_cache(options.cache)
        return _run(options)
    except UsageError as error:
        print(f"jaxlearner {command}: error: {error}", file=sys.stderr, flush=True)
        sys.exit(2)
    except CheckpointCorruptedError as error:  # a damaged or planted step: refused, as a bad input
        message = " ".join(str(error).split())
        print(f"jaxlearner {command}: error: {message}", file=sys.stderr, flush=True)
        sys.exit(2)
    except KeyboardInterrupt as error:  # a SIGTERM too, under the jaxlearner_cli entry point
        number = getattr(error, "signal_number", signal.SIGINT)
        print(interrupted_line(f"jaxlearner {command}", number), file=sys.stderr, flush=True)
        return 128 + number


def _run(options: Options) -> int:
    """Runs one command. Its module is imported here, when it runs, for start-up time:
    ``train``, ``eval`` and ``record`` load orbax (a quarter of a second), ``plot``
    matplotlib. A signal during that import ends the command at once
    (:func:`jaxlearner_cli.exiting_on_signal`): nothing has started yet."""
    if isinstance(options, TrainOptions):
        with exiting_on_signal():
            from jaxlearner.cli.train import train
        return train(options)
    if isinstance(options, EvalOptions):
        with exiting_on_signal():
            from jaxlearner.cli.evaluate import evaluate
        return evaluate(options)
    if isinstance(options, RecordOptions):
        with exiting_on_signal():
            from jaxlearner.cli.evaluate import record
        return record(options)
    if isinstance(options, PresetsOptions):
        with exiting_on_signal():
            from jaxlearner.cli.presets import list_presets
        return list_presets(options)
    with exiting_on_signal():
        from jaxlearner.cli.plot import plot
    return plot(options)


def _compilation_cache(cache: CacheOptions) -> pathlib.Path | None:
    """Turns on JAX's persistent compilation cache, so a second run skips compiling."""
    off = os.environ.get(NO_CACHE_VARIABLE, "").strip().lower() not in ("", "0", "false", "no")
    import jax

    if cache.disabled or off:
        # Off even where $JAX_COMPILATION_CACHE_DIR turned JAX's own cache on.
        jax.config.update("jax_enable_compilation_cache", False)
        return None

    folder = (cache.folder or default_cache()).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"--compilation-cache {folder}: {error.strerror}") from None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # The defaults skip programs compiled in under a second: most of a CPU run's.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
