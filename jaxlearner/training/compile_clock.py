"""How long JAX spent compiling within a stretch of wall time, so speed can leave it out.

An iteration that traces and compiles (the first, and the first that learns in an
off-policy run) took seconds of XLA work, which made its ``env_steps_per_s`` read 1-10.
JAX reports the time span of each tracing, lowering and backend compilation through
``jax.monitoring``; :func:`compile_seconds` is the union of those spans within a window
(nested spans, an inner function traced inside an outer one, count once).

Example:
  >>> watch = Stopwatch()
  >>> _ = jax.jit(lambda x: x + 1)(1.0)
  >>> seconds, compiling = watch.read()
  >>> 0 < compiling <= seconds
  True
"""

from __future__ import annotations

import collections
import threading
import time

import jax

EVENTS: frozenset[str] = frozenset(
    {
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    }
)
"""JAX's events for tracing to a jaxpr, lowering it to MLIR, and compiling it with XLA."""

_SPANS: collections.deque[tuple[float, float]] = collections.deque(maxlen=4096)
_LOCK = threading.Lock()
_LISTENING = False


def _record(event: str, start: float, end: float, **_: object) -> None:
    if event in EVENTS:
        _SPANS.append((start, end))


def listen() -> None:
    """Starts recording compilation spans (once per process; later calls do nothing)."""
    global _LISTENING
    with _LOCK:
        if not _LISTENING:
            jax.monitoring.register_event_time_span_listener(_record)
            _LISTENING = True


def union_seconds(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """The length of the union of ``spans`` clipped to ``[start, end]``.

    Example:
      >>> union_seconds([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)], 0.5, 5.5)
      3.0
    """
    total, reached = 0.0, start
    for low, high in sorted((max(a, start), min(b, end)) for a, b in spans):
        if high <= max(low, reached):
            continue
        total += high - max(low, reached)
        reached = high
    return total


def compile_seconds(start: float, end: float) -> float:
    """Seconds of tracing, lowering and compiling between ``start`` and ``end``
    (``time.time()`` values), counted once where spans nest; only what came after the
    first :func:`listen` is known."""
    return union_seconds(list(_SPANS), start, end)


class Stopwatch:
    """Times one stretch of work and the compilation within it; started when made.

    Example:
      >>> watch = Stopwatch()
      >>> seconds, compiling = watch.read()  # doctest: +SKIP
    """

    def __init__(self) -> None:
        listen()
        self._wall, self._start = time.time(), time.perf_counter()

    def read(self) -> tuple[float, float]:
        """``(seconds, of which compiling)`` since the watch was made."""
        seconds = time.perf_counter() - self._start
        compiling = compile_seconds(self._wall, time.time())
        return seconds, min(compiling, seconds)
