"""Several hosts: a thin wrapper over ``jax.distributed.initialize``.

Call :func:`initialize` once per process, before any other JAX call. Then
every process builds the same learner and a :class:`~jaxlearner.LearnerGroup`
over all global devices, and passes only its local slice of each batch.

On CPU, cross-process collectives need an implementation; this wrapper
selects gloo (the setting is ignored by GPU and TPU backends).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax

CPU_COLLECTIVES: tuple[str, ...] = ("gloo", "mpi")


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids: int | Sequence[int] | None = None,
    cpu_collectives: str | None = "gloo",
    timeout_seconds: int = 300,
) -> None:
    """Joins this process to a multi-process JAX job.

    All arguments may be left out where JAX detects the cluster itself (Cloud
    TPU pods, SLURM, Open MPI); on one machine or a plain cluster give all three.

    Args:
      coordinator_address: ``"host:port"`` of process 0's coordinator service.
      num_processes: the number of processes.
      process_id: this process's id in ``[0, num_processes)``.
      local_device_ids: restrict this process to these local devices.
      cpu_collectives: ``"gloo"`` (default) or ``"mpi"`` for cross-process
        collectives on CPU, or ``None`` to keep JAX's setting.
      timeout_seconds: how long to wait for all processes to join.

    Raises:
      ValueError: on a malformed address, ids out of range, or an unknown
        collectives implementation.

    Example:
      >>> jl.distributed.initialize(
      ...     "127.0.0.1:12355", num_processes=2, process_id=0)  # doctest: +SKIP
    """
    if coordinator_address is not None:
        host, _, port = coordinator_address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"coordinator_address must look like 'host:port' (e.g. '127.0.0.1:12355'); "
                f"got {coordinator_address!r}."
            )
    if num_processes is not None and (not isinstance(num_processes, int) or num_processes < 1):
        raise ValueError(f"num_processes must be a positive int; got {num_processes!r}.")
    if (
        process_id is not None
        and num_processes is not None
        and not (isinstance(process_id, int) and 0 <= process_id < num_processes)
    ):
        raise ValueError(f"process_id must be an int in [0, {num_processes}); got {process_id!r}.")
    if cpu_collectives is not None:
        if cpu_collectives not in CPU_COLLECTIVES:
            raise ValueError(
                f"cpu_collectives must be one of {CPU_COLLECTIVES} or None; got "
                f"{cpu_collectives!r}."
            )
        jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_device_ids,
        initialization_timeout=timeout_seconds,
    )


def shutdown() -> None:
    """Leaves the multi-process job (``jax.distributed.shutdown``)."""
    jax.distributed.shutdown()
