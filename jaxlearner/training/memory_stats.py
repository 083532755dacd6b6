"""The memory statistics each training step reports, as rl8's trainer does.

``memory/replay_size`` (rows in the replay buffer, for an off-policy algorithm),
``memory/device_bytes_in_use`` (the first local device's allocator, where the backend
reports one: GPU and TPU; XLA's CPU client reports none) and ``memory/host_rss_bytes``
(the process's resident memory, on Linux).
"""

from __future__ import annotations

import os
from typing import Any

import jax

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def host_rss_bytes() -> float | None:
    """The process's resident memory in bytes (``/proc/self/statm``), or ``None`` off Linux."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return float(int(statm.read().split()[1]) * _PAGE)
    except (OSError, ValueError, IndexError):
        return None


def device_bytes_in_use() -> float | None:
    """Bytes the first local device's allocator holds, or ``None`` where it reports none."""
    try:
        stats = jax.local_devices()[0].memory_stats()
    except Exception:  # backends without allocator statistics raise or return None
        return None
    if not stats or "bytes_in_use" not in stats:
        return None
    return float(stats["bytes_in_use"])


def replay_size(buffer: Any) -> float | None:
    """Rows filled in a replay buffer (or a prioritized replay's), ``None`` without one."""
    if buffer is None:
        return None
    size = getattr(buffer, "size", None)
    if size is None:
        size = getattr(getattr(buffer, "buffer", None), "size", None)
    return None if size is None else float(jax.device_get(size))


def memory_stats(buffer: Any = None) -> dict[str, float]:
    """The step's memory statistics: those this machine reports, under ``"memory/"``.

    Example:
      >>> sorted(memory_stats())  # on Linux, CPU                 # doctest: +SKIP
      ['memory/host_rss_bytes']
    """
    found = {
        "memory/replay_size": replay_size(buffer),
        "memory/device_bytes_in_use": device_bytes_in_use(),
        "memory/host_rss_bytes": host_rss_bytes(),
    }
    return {key: value for key, value in found.items() if value is not None}
