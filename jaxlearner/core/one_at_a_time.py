"""``one_at_a_time``: a function that runs once per key under ``jax.vmap`` on the CPU.

For initialisation only. Built-in models initialise their weights orthogonally,
through a QR decomposition. Batched over many agents (Anakin's seeds, SAC's twin
critics) on the CPU, jaxlib 0.10's LAPACK kernel splits its batch over XLA's
intra-op thread pool from inside a task of the same pool, and as many of them at
once as the pool has threads (two on a 2-core machine) can wait for each other
forever. On the CPU the wrapped function therefore runs as a ``lax.map`` over the
keys, one unbatched call after the other, which never waits on the pool.

Elsewhere (GPU, TPU) the batched call is kept: there a ``lax.map`` of 64 seeds
launched one small QR at a time from the host, 1,792 kernels and about 90 ms
before the first step at 64 seeds on an H200, where the batched call takes 12
kernels (benchmarks/README.md, "Third sitting: the kernel-level profile"). The choice is made per
platform when the program is lowered (``lax.platform_dependent``), so each
compiled program holds one of the two.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax


def one_at_a_time(fn: Callable[[jax.Array], Any]) -> Callable[[jax.Array], Any]:
    """``fn(key)`` that under ``jax.vmap`` maps over the keys on the CPU, batched elsewhere.

    Args:
      fn: a function of one key (a typed PRNG key array of shape ``[]``) returning
        a pytree of arrays.

    Returns:
      A function with ``fn``'s signature and values: unbatched it is ``fn``;
      under ``jax.vmap`` (nested too) over keys ``[N]`` it returns ``fn``'s
      outputs stacked ``[N, ...]``, computed one key after the other when
      lowered for the CPU and as one batched call otherwise.

    Example:
      >>> init = one_at_a_time(lambda key: jax.random.normal(key, (2,)))
      >>> jax.vmap(init)(jax.random.split(jax.random.key(0), 3)).shape
      (3, 2)
    """

    # Traced once: both platform branches and the unbatched call reuse this trace.
    traced = jax.jit(fn)

    @jax.custom_batching.custom_vmap
    def sequential(key: jax.Array) -> Any:
        return traced(key)

    @sequential.def_vmap
    def rule(axis_size: int, in_batched: list[Any], key: jax.Array) -> tuple[Any, Any]:
        del axis_size
        (batched,) = in_batched
        if batched:
            out = jax.lax.platform_dependent(
                key, cpu=lambda keys: jax.lax.map(sequential, keys), default=jax.vmap(traced)
            )
        else:
            out = sequential(key)
        return out, jax.tree.map(lambda _: batched, out)

    return sequential
