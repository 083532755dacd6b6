"""Ctrl-C or SIGTERM at any moment, from start-up to exit, imports included.

The command (``python -m jaxlearner_cli``, what the ``jaxlearner`` script runs)
must end with status 130 or 143, one line on stderr naming the signal, and no
traceback; it must never train on as if nothing happened. The signal goes out at
random moments, most of them in the first second and a half (the imports, a short
window, so it is hit many times), the rest later (building, compiling, training,
saving, exiting). A moment before the interpreter reaches the entry point's first
line (its own start-up, some 50 ms) is Python's and is not tried.
"""

import contextlib
import random
import signal
import subprocess
import sys
import time

import pytest
from helpers import TINY_PPO_OPTIONS, environ_without_compilation_cache

TRAIN = ["train", "ppo", "--max-steps", "1024", "--eval-every", "512", *TINY_PPO_OPTIONS]


def interrupt(argv, delay, number):
    """Starts the command, sends ``number`` after ``delay`` seconds; ``None`` when the command
    had finished by then, else ``(status, stdout, stderr)``."""
    # Interrupted at any moment, maybe while it writes to the compilation cache.
    env = environ_without_compilation_cache()
    child = subprocess.Popen(
        [sys.executable, "-m", "jaxlearner_cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    time.sleep(delay)
    if child.poll() is not None:
        child.communicate()
        return None
    child.send_signal(number)
    stdout, stderr = child.communicate(timeout=120)
    return child.returncode, stdout, stderr


def check(result, number, moment):
    status, stdout, stderr = result
    lines = [line for line in stderr.splitlines() if line.strip()]
    name = signal.Signals(number).name
    assert status == 128 + number, (moment, status, stderr[-3000:])
    assert "Traceback" not in stderr, (moment, stderr[-3000:])
    assert len(lines) == 1 and name in lines[0], (moment, stderr[-3000:])


def moments(seed, early, late, end):
    """``early`` random moments in the imports' window and ``late`` ones up to ``end`` s."""
    rng = random.Random(seed)
    return sorted(
        [rng.uniform(0.1, 1.5) for _ in range(early)] + [rng.uniform(1.5, end) for _ in range(late)]
    )


def test_a_signal_during_start_up_or_help_is_one_line():
    # `--help` imports what every command imports, prints and exits: start-up to exit in a second.
    for index, delay in enumerate(moments(seed=1, early=6, late=0, end=1.5)):
        number = (signal.SIGINT, signal.SIGTERM)[index % 2]
        result = interrupt(["train", "--help"], delay, number)
        if result is not None:
            check(result, number, delay)


@pytest.mark.slow
def test_a_signal_at_any_moment_of_a_training_run_is_one_line(tmp_path):
    # The late moments spread over this machine's own run of the command (timed once,
    # uninterrupted), not over a fixed 9 s that a fast machine finishes inside.
    start = time.monotonic()
    whole = subprocess.run(
        [sys.executable, "-m", "jaxlearner_cli", *TRAIN, "--out", str(tmp_path / "whole")],
        capture_output=True,
        text=True,
        env=environ_without_compilation_cache(),
        timeout=300,
    )
    assert whole.returncode == 0, whole.stderr[-3000:]
    end = max(2.0, 0.8 * (time.monotonic() - start))
    finished = 0
    for index, delay in enumerate(moments(seed=2, early=10, late=5, end=end)):
        number = (signal.SIGINT, signal.SIGTERM)[index % 2]
        out = tmp_path / f"run{index}"
        result = interrupt([*TRAIN, "--out", str(out)], delay, number)
        if result is None:
            finished += 1
            continue
        check(result, number, delay)
        if "Stopped by" in result[1]:  # interrupted while training: a checkpoint to resume
            assert (out / "checkpoints").is_dir()
    assert finished <= 2  # most moments land while the command runs


def test_the_entry_point_imports_nothing_heavy():
    # Its handlers are set before anything slow loads: the module itself needs only the stdlib.
    code = (
        "import sys, jaxlearner_cli; print(sorted({'jax', 'jaxlearner', 'numpy'} & {*sys.modules}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


def test_a_signal_swallowed_before_training_still_stops_train():
    from jaxlearner.cli.train import _Interrupted
    from jaxlearner_cli import SIGNALS, Interrupted, SignalCatcher

    catcher = SignalCatcher()
    previous = {number: signal.signal(number, catcher) for number in SIGNALS}
    try:
        # Dropped, as a library's `except BaseException` might.
        with catcher.raising(), contextlib.suppress(Interrupted):
            signal.raise_signal(signal.SIGTERM)
        with pytest.raises(Interrupted) as raised, _Interrupted(trainer=None):
            pass
        assert raised.value.signal_number == signal.SIGTERM
        assert signal.getsignal(signal.SIGINT) is catcher  # train's handlers are gone again
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly():
    # `true` exits at once, long before the command writes: every write meets a closed pipe.
    command = f"{sys.executable} -m jaxlearner_cli presets ppo | true"
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stderr) == (0, "")


def test_an_interrupt_python_cannot_raise_is_not_printed():
    # A signal inside a gc callback raises where no caller receives it ("Exception ignored
    # in ..."): the catcher has remembered it; the hook keeps the traceback off stderr.
    import types

    from jaxlearner_cli import Interrupted, quiet_interrupts

    seen = []
    hook = quiet_interrupts(seen.append)
    hook(types.SimpleNamespace(exc_value=Interrupted(signal.SIGTERM), object=None))
    other = types.SimpleNamespace(exc_value=ValueError("kept"), object=None)
    hook(other)
    assert seen == [other]
