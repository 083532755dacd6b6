"""A run's history: every iteration's flat stats, with each metric's values read once.

A trainer's ``history`` is a list of flat stats dicts, oldest first. The stop
conditions read one metric's values out of it after every iteration; scanning the
whole list each time costs ``O(n)`` per iteration, ``O(n^2)`` over a run, which at
one iteration per env step (SAC and DQN at ``rollout_fragment_length=1``) came to
minutes over 50,000 iterations. :class:`History` is that same list, with each
metric's values gathered incrementally: :meth:`History.column` reads only the
entries appended since its last call, and :meth:`History.tail` gives the last few values
without copying the others (a condition that needs the last value or two reads ``tail``;
copying the whole column each iteration was ``O(n^2)`` again: 40 s of a 50,000-iteration
SAC run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, final

import numpy as np


@final
class History(list):
    """A trainer's history: a ``list`` of flat stats dicts, with cached metric columns.

    It is a plain list to every reader (indexing, slicing, ``len``, ``json.dumps``,
    ``==`` with a list). :meth:`column` caches the values of the entries before the
    last one; the last entry is read afresh on every call, because the run loop adds
    an iteration's evaluation results to its dict after it is appended. Entries before
    the last are taken as final: replace an entry (or the list) rather than mutating an
    old dict in place, and the cache starts over.

    Example:
      >>> history = History([{"env_steps": 10.0}, {"env_steps": 20.0, "eval/return_mean": 3.0}])
      >>> history.column("eval/return_mean"), history.column("env_steps")
      ([3.0], [10.0, 20.0])
    """

    def __init__(self, entries: Iterable[Mapping[str, float]] = ()) -> None:
        super().__init__(entries)
        # key -> (entries scanned, their values of key, the last entry scanned)
        self._columns: dict[str, tuple[int, list[float], object]] = {}

    def column(self, key: str) -> list[float]:
        """The values of ``key`` in order, over the entries that have it (a new list)."""
        before, last = self._gathered(key)
        return [*before, *last]

    def tail(self, key: str, count: int) -> list[float]:
        """The last ``count`` values of ``key`` (fewer when fewer entries have it), oldest
        first: ``column(key)[-count:]`` in ``O(count)``.

        Example:
          >>> History([{"a": 1.0}, {"a": 2.0}, {"b": 0.0}, {"a": 3.0}]).tail("a", 2)
          [2.0, 3.0]
        """
        if count < 1:
            return []
        before, last = self._gathered(key)
        start = max(len(before) - (count - len(last)), 0)
        return [*before[start:], *last]

    def _gathered(self, key: str) -> tuple[list[float], list[float]]:
        """The cached values of the entries before the last (the cache itself, not a copy:
        read it, never change it), and ``[value]`` of the last entry or ``[]``."""
        final = len(self) - 1
        scanned, values, anchor = self._columns.get(key, (0, [], None))
        if scanned > max(final, 0) or (scanned and self[scanned - 1] is not anchor):
            scanned, values = 0, []  # the list was cleared, cut or replaced
        values.extend(float(entry[key]) for entry in self[scanned:final] if key in entry)
        if final > 0:
            self._columns[key] = (final, values, self[final - 1])
        last = self[final] if final >= 0 else {}
        return values, [float(last[key])] if key in last else []


def column(history: Sequence[Mapping[str, float]], key: str) -> list[float]:
    """``key``'s values in ``history``, oldest first: cached for a :class:`History`,
    scanned for any other sequence of dicts.

    Example:
      >>> column([{"a": 1.0}, {"b": 2.0}, {"a": 3.0}], "a")
      [1.0, 3.0]
    """
    if isinstance(history, History):
        return history.column(key)
    return [float(entry[key]) for entry in history if key in entry]


def tail(history: Sequence[Mapping[str, float]], key: str, count: int) -> list[float]:
    """The last ``count`` values of ``key`` in ``history``, oldest first (``column(history,
    key)[-count:]``): without a copy of the others for a :class:`History`.

    Example:
      >>> tail([{"a": 1.0}, {"b": 2.0}, {"a": 3.0}], "a", 1)
      [3.0]
    """
    if isinstance(history, History):
        return history.tail(key, count)
    return column(history, key)[-count:] if count else []


def to_columns(history: Sequence[Mapping[str, float]]) -> tuple[list[str], Any, Any]:
    """``history`` as arrays, as checkpoints keep it: ``(keys, values, present)`` with
    ``values [N, K]`` float64 (NaN and infinities as they are) and ``present [N, K]`` bool
    (entry ``n`` has key ``k``); keys in the order they first appear.
    :func:`from_columns` reads it back; JSON of 50,000 iterations' stats came to 75 MB.

    Example:
      >>> keys, values, present = to_columns([{"a": 1.0}, {"a": 2.0, "b": float("nan")}])
      >>> keys, values.tolist(), present.tolist()
      (['a', 'b'], [[1.0, 0.0], [2.0, nan]], [[True, False], [True, True]])
    """
    keys = list(dict.fromkeys(key for entry in history for key in entry))
    index = {key: i for i, key in enumerate(keys)}
    values = np.zeros((len(history), len(keys)), np.float64)
    present = np.zeros((len(history), len(keys)), np.bool_)
    for row, entry in enumerate(history):
        columns = [index[key] for key in entry]
        values[row, columns] = [float(value) for value in entry.values()]
        present[row, columns] = True
    return keys, values, present


def from_columns(keys: Sequence[str], values: Any, present: Any) -> list[dict[str, float]]:
    """The history :func:`to_columns` wrote: one dict of floats per row, with the keys the
    row has, in ``keys``' order.

    Example:
      >>> from_columns(["a", "b"], np.array([[1.0, 0.0], [2.0, 5.0]]), np.array([[1, 0], [1, 1]]))
      [{'a': 1.0}, {'a': 2.0, 'b': 5.0}]
    """
    present = np.asarray(present, np.bool_).tolist()
    return [
        {key: value for key, value, has in zip(keys, row, flags, strict=True) if has}
        for row, flags in zip(np.asarray(values, np.float64).tolist(), present, strict=True)
    ]
