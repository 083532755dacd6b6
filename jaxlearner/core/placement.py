"""Placement: where a learner's state and batches live, as a value.

A :class:`Placement` is either the default device (no mesh) or a
:class:`jax.sharding.Mesh` with a ``"data"`` axis. On a mesh the learner runs
its own pure update under one ``jax.jit`` with shardings: the state is
replicated (``P()``), the batch is split along its leading axis
(``P("data")``), and inside the update each epoch's minibatch blocks are
constrained to ``P(None, "data")``, so every device computes the loss on its
share of each minibatch and XLA inserts the all-reduce of the gradients.

Why the result equals the single-device update: the loss is written against
the *global* minibatch, exactly as on one device. The per-epoch permutation is
drawn from the replicated state key over the global batch, so the minibatch
at step ``k`` is the same set of rows on any number of devices; only the
order in which partial sums are added differs (float tolerance). A mean over
the minibatch is a global mean, so metrics are reduced across devices by the
same reduction they declare, and no gradient is summed twice (the pitfall of
``shard_map`` with replicated params does not arise).

Several hosts: after :func:`jaxlearner.core.distributed.initialize`, every
process builds the same learner over all global devices and passes only its
local slice of each batch; the slices are assembled in process order with
``jax.make_array_from_process_local_data``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxlearner.types import Batch, PyTree

DATA_AXIS = "data"
"""The mesh axis batches are split along."""

DevicesLike: TypeAlias = str | int | Sequence[jax.Device] | None
"""``None`` (the default device), ``"all"``, a count (the first n) or a device list."""


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a learner runs: the default device, or a mesh with a ``"data"`` axis.

    Build it with :meth:`of`; a learner takes one through
    ``Learner(..., devices=...)`` or ``learner.on(devices=...)``.

    Attributes:
      mesh: the device mesh, or ``None`` for the default device (a plain
        ``jax.jit`` with no shardings).

    Example:
      >>> placement = Placement.of("all")
      >>> placement.num_devices == len(jax.devices())
      True
    """

    mesh: Mesh | None = None

    def __post_init__(self) -> None:
        if self.mesh is not None and DATA_AXIS not in self.mesh.axis_names:
            raise ValueError(
                f"A learner's mesh needs a {DATA_AXIS!r} axis; it has {self.mesh.axis_names}."
            )

    @classmethod
    def of(
        cls,
        devices: DevicesLike = None,
        mesh: Mesh | None = None,
        *,
        placement: Placement | None = None,
    ) -> Placement:
        """A placement from a device choice, a mesh, or a placement as is.

        Args:
          devices: ``None`` (the default device), ``"all"`` (every device of
            every process), an int ``n`` (the first ``n``) or a list of devices.
          mesh: a mesh with a ``"data"`` axis (other axes hold replicas),
            instead of ``devices``.
          placement: a placement, returned as is (instead of the other two).

        Raises:
          ValueError: for both ``devices`` and ``mesh``, an empty device list,
            too many devices, an unknown string, or a mesh without a ``"data"`` axis.
          TypeError: for ``placement`` together with ``devices`` or ``mesh``.
        """
        if placement is not None:
            if devices is not None or mesh is not None:
                raise TypeError("Pass placement= or devices=/mesh=, not both.")
            return placement
        if mesh is not None:
            if devices is not None:
                raise ValueError("Pass devices= or mesh=, not both.")
            return cls(mesh)
        if devices is None:
            return cls()
        available = jax.devices()
        if isinstance(devices, str):
            if devices != "all":
                raise ValueError(
                    f"devices must be None, 'all', a positive int or a list of devices; got "
                    f"{devices!r}."
                )
            chosen = available
        elif isinstance(devices, int | np.integer) and not isinstance(devices, bool):
            if not 1 <= devices <= len(available):
                raise ValueError(
                    f"devices={devices} but {len(available)} device(s) are available "
                    f"({available[0].platform}); pass 1..{len(available)} or 'all'."
                )
            chosen = available[: int(devices)]
        elif isinstance(devices, Sequence) and all(isinstance(d, jax.Device) for d in devices):
            chosen = list(devices)
        else:
            raise ValueError(
                "devices must be None, 'all', a positive int or a list of jax devices; got "
                f"{type(devices).__name__} {devices!r}."
            )
        if not chosen:
            raise ValueError("A learner got an empty device list.")
        return cls(Mesh(np.asarray(chosen), (DATA_AXIS,)))

    @property
    def num_devices(self) -> int:
        """Devices along the ``"data"`` axis: the number of batch shards (1 without a mesh)."""
        return 1 if self.mesh is None else int(self.mesh.shape[DATA_AXIS])

    @property
    def state_sharding(self) -> NamedSharding | None:
        """Every state leaf's sharding (replicated over the mesh), or ``None`` without one."""
        return None if self.mesh is None else NamedSharding(self.mesh, P())

    @property
    def batch_sharding(self) -> NamedSharding | None:
        """Every batch leaf's sharding (split along the leading axis); ``None`` without a mesh."""
        return None if self.mesh is None else NamedSharding(self.mesh, P(DATA_AXIS))

    def jit(self, update_fn: Any, donate_state: bool) -> Any:
        """``jax.jit(update_fn)`` with this placement's shardings (state, batch, env_steps)."""
        donate = (0,) if donate_state else ()
        if self.mesh is None:
            return jax.jit(update_fn, donate_argnums=donate)
        state, batch = self.state_sharding, self.batch_sharding
        return jax.jit(
            update_fn,
            in_shardings=(state, batch, state),
            out_shardings=(state, state),
            donate_argnums=donate,
        )

    def jit_observe(self, observe_fn: Any) -> Any:
        """``jax.jit(observe_fn)`` for ``observe(state, experiences) -> state``, the state
        kept replicated on a mesh (the experience is placed as XLA sees fit)."""
        return self.jit_stage(observe_fn)

    def jit_stage(self, stage_fn: Any, donate_state: bool = False) -> Any:
        """``jax.jit(stage_fn)`` for a function of the state whose outputs are replicated on a
        mesh (gradients, metrics, a state); inputs keep the shardings they come with (a
        placed state, a global batch). Donates the state (argument 0) with ``donate_state``."""
        donate = (0,) if donate_state else ()
        if self.mesh is None:
            return jax.jit(stage_fn, donate_argnums=donate)
        return jax.jit(stage_fn, out_shardings=self.state_sharding, donate_argnums=donate)

    def global_experience(self, experiences: Mapping[str, PyTree]) -> dict[str, PyTree]:
        """Each process's ``[T, N, ...]`` experience as one global array, its ``N`` axes
        side by side in process order; returned as is with one process."""
        if self.mesh is None or jax.process_count() == 1:
            return dict(experiences)
        sharding = NamedSharding(self.mesh, P(None, DATA_AXIS))
        return {
            m: jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), e)
            for m, e in experiences.items()
        }

    def constrain_minibatch(self, blocks: PyTree) -> PyTree:
        """Each epoch's ``[steps, minibatch, ...]`` blocks split over the ``"data"`` axis."""
        if self.mesh is None:
            return blocks
        sharding = NamedSharding(self.mesh, P(None, DATA_AXIS))
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding), blocks)

    def put(self, state: PyTree) -> PyTree:
        """A state (e.g. from ``init`` on one device, or restored) placed here.

        Without a mesh the state is returned as is; on a mesh it is
        replicated, over every process's devices when there are several.
        """
        sharding = self.state_sharding
        if sharding is None:
            return state
        if sharding.is_fully_addressable:
            return jax.device_put(state, sharding)
        return jax.tree.map(lambda x: _replicate(x, sharding), state)

    def shaped(self, state: PyTree) -> PyTree:
        """A state's ``jax.ShapeDtypeStruct`` leaves placed here (replicated over the mesh), as
        a placed state's arrays are, so that a program compiled ahead from them is the one
        the arrays find; without a mesh, or for other leaves, as given."""
        sharding = self.state_sharding
        if sharding is None:
            return state

        def place(x: Any) -> Any:
            if isinstance(x, jax.ShapeDtypeStruct):
                return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
            return x

        return jax.tree.map(place, state)

    def get(self, state: PyTree) -> PyTree:
        """A copy of a replicated state on one local device."""
        if self.mesh is None:
            return state
        return jax.tree.map(lambda x: x.addressable_shards[0].data, state)

    def global_batch(self, batch: Mapping[str, Batch]) -> dict[str, Batch]:
        """Each process's slice of ``{module_id: batch}`` as one global, sharded batch; a
        ``jax.ShapeDtypeStruct`` slice (ahead-of-time compilation) as the global one's shape.

        Raises:
          ValueError: see :meth:`check_split`.
        """
        if self.mesh is None:
            return dict(batch)
        sharding, processes = self.batch_sharding, jax.process_count()

        def global_leaf(x: Any) -> Any:
            if isinstance(x, jax.ShapeDtypeStruct):
                shape = (x.shape[0] * processes, *x.shape[1:])
                return jax.ShapeDtypeStruct(shape, x.dtype, sharding=sharding)
            return jax.make_array_from_process_local_data(sharding, x)

        return {m: jax.tree.map(global_leaf, b) for m, b in batch.items()}

    def check_split(self, module_id: str, size: int, minibatch_size: int | None) -> None:
        """Raises unless a global batch of ``size`` rows and its minibatches split evenly.

        Raises:
          ValueError: naming the sizes that would split over the devices.
        """
        devices = self.num_devices
        if size % devices == 0 and (minibatch_size is None or minibatch_size % devices == 0):
            return
        lower = size // devices * devices
        sizes = sorted({s for s in (lower, lower + devices) if s > 0})
        advice = f"batch sizes that split over {devices} devices: {sizes}"
        if minibatch_size is not None and minibatch_size % devices:
            low = minibatch_size // devices * devices
            good = sorted({s for s in (low, low + devices) if s > 0})
            advice += f"; minibatch sizes that split: {good}"
        raise ValueError(
            f"Module {module_id!r}: a global batch of {size} rows with minibatch_size="
            f"{minibatch_size} does not split evenly over the {devices} devices of the 'data' "
            f"axis; both must be multiples of {devices}. Try {advice}."
        )

    def __repr__(self) -> str:
        return (
            "Placement(default device)"
            if self.mesh is None
            else (f"Placement(devices={self.num_devices})")
        )


def _replicate(x: jax.Array, sharding: NamedSharding) -> jax.Array:
    """``x`` (the same value on every process) as one array replicated over all processes.

    ``jax.device_put`` only reaches this process's devices; each process
    instead supplies the local copies of a global array. Typed PRNG keys travel
    as their key data.
    """
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        data = _replicate(jax.random.key_data(x), sharding)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])
