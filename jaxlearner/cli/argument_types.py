"""The command line's value types: each parses one option's text or raises
``argparse.ArgumentTypeError`` with what was received and what was expected (argparse prints
it as one line, naming the option).

Example:
  >>> positive_int("8"), count("0"), stop_reward("none")
  (8, 0, 'none')
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from jaxlearner.cli.options import MAX_SEED


def _checked(
    text: str, convert: Callable[[str], Any], valid: Callable[[Any], bool], what: str
) -> Any:
    """``convert(text)`` if it converts and is ``valid``; else one line: ``expected WHAT``."""
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not valid(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _checked(text, int, lambda value: value >= 1, "a positive integer")


def count(text: str) -> int:
    return _checked(text, int, lambda value: value >= 0, "an integer >= 0")


def positive_float(text: str) -> float:
    valid = lambda value: math.isfinite(value) and value > 0
    return _checked(text, float, valid, "a number > 0")


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def stop_reward(text: str) -> float | str:
    if text == "none":
        return text
    try:
        return finite_float(text)
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{error} (or 'none': no reward stop)") from None


def seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected an integer from 0 to 2**63-1, got {text!r}")
    return value
