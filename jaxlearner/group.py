"""LearnerGroup: the same update, data-parallel over devices and hosts.

The group runs the learner's pure update under one ``jax.jit`` with
shardings over a :class:`jax.sharding.Mesh` with a ``"data"`` axis: the state
is replicated (``P()``), the batch is split along its leading axis
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

Several hosts: after :func:`jaxlearner.distributed.initialize`, every
process builds the same learner and group over all global devices and passes
only its local slice of each batch; the slices are assembled in process order
with ``jax.make_array_from_process_local_data``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, final

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxlearner.learner import Learner
from jaxlearner.module_spec import ModuleSpec
from jaxlearner.state import LearnerState
from jaxlearner.types import Batch, Params
from jaxlearner.update import UpdateFn

DATA_AXIS = "data"


@final
class LearnerGroup:
    """Runs a :class:`~jaxlearner.Learner`'s update data-parallel over a device mesh.

    Args:
      learner: the learner to run.
      devices: the devices to use; default all devices of all processes
        (``jax.devices()``).
      mesh: a mesh to use instead of ``devices``; it must have a ``"data"``
        axis (other axes hold replicas).

    Raises:
      ValueError: when both ``devices`` and ``mesh`` are given, the device
        list is empty, or the mesh has no ``"data"`` axis.

    Example:
      >>> group = jl.LearnerGroup(learner)                     # doctest: +SKIP
      >>> state = group.init(jax.random.key(0), sample_batch)  # doctest: +SKIP
      >>> state, metrics = group.update(state, batch)          # doctest: +SKIP
      >>> state = group.get(state)  # a single-device state    # doctest: +SKIP
    """

    def __init__(
        self,
        learner: Learner,
        *,
        devices: Sequence[jax.Device] | None = None,
        mesh: Mesh | None = None,
    ) -> None:
        if not isinstance(learner, Learner):
            raise TypeError(f"LearnerGroup needs a jl.Learner; got {type(learner).__name__}.")
        if devices is not None and mesh is not None:
            raise ValueError("Pass devices= or mesh= to LearnerGroup, not both.")
        if mesh is None:
            devices = list(jax.devices() if devices is None else devices)
            if not devices:
                raise ValueError("LearnerGroup got an empty device list.")
            mesh = Mesh(np.asarray(devices), (DATA_AXIS,))
        elif DATA_AXIS not in mesh.axis_names:
            raise ValueError(
                f"LearnerGroup's mesh needs a {DATA_AXIS!r} axis; it has {mesh.axis_names}."
            )
        self._learner = learner
        self._mesh = mesh
        self._state_sharding = NamedSharding(mesh, P())
        self._batch_sharding = NamedSharding(mesh, P(DATA_AXIS))
        self._update = jax.jit(
            self.build_update(),
            in_shardings=(self._state_sharding, self._batch_sharding, self._state_sharding),
            out_shardings=(self._state_sharding, self._state_sharding),
            donate_argnums=(0,) if learner.options["donate_state"] else (),
        )

    def build_update(self) -> UpdateFn:
        """The learner's pure update with each minibatch split over the ``"data"`` axis.

        For composing into a larger jitted function (e.g. a replay sample and
        an update); :meth:`update` is this function under ``jax.jit`` with the
        state replicated and the batch sharded.
        """
        blocks_sharding = NamedSharding(self._mesh, P(None, DATA_AXIS))

        def constrain(blocks: Batch) -> Batch:
            return jax.tree.map(
                lambda x: jax.lax.with_sharding_constraint(x, blocks_sharding), blocks
            )

        return self._learner.build_update(constrain_minibatch=constrain)

    @property
    def learner(self) -> Learner:
        """The learner whose update the group runs."""
        return self._learner

    @property
    def mesh(self) -> Mesh:
        """The device mesh (axis ``"data"`` splits batches)."""
        return self._mesh

    @property
    def num_devices(self) -> int:
        """Devices along the ``"data"`` axis: the number of batch shards."""
        return int(self._mesh.shape[DATA_AXIS])

    @property
    def state_sharding(self) -> NamedSharding:
        """The sharding of every state leaf: replicated over the mesh."""
        return self._state_sharding

    @property
    def batch_sharding(self) -> NamedSharding:
        """The sharding of every batch leaf: split along the leading axis."""
        return self._batch_sharding

    def init(self, key: jax.Array, sample_batch: Batch) -> LearnerState:
        """``learner.init`` on this process, then the state replicated over the mesh.

        With several processes, each calls this with the same key and its own
        slice of the sample batch; the states are identical.
        """
        return self.put(self._learner.init(key, sample_batch))

    def put(self, state: LearnerState) -> LearnerState:
        """Replicates a state (e.g. restored or made by ``learner.init``) over the mesh."""
        self._learner.check_state(state)
        if self._state_sharding.is_fully_addressable:
            return jax.device_put(state, self._state_sharding)
        return jax.tree.map(lambda x: _replicate(x, self._state_sharding), state)

    def get(self, state: LearnerState) -> LearnerState:
        """A copy of a replicated state on one local device, usable by ``learner.update``."""
        return jax.tree.map(lambda x: x.addressable_shards[0].data, state)

    def update(
        self,
        state: LearnerState,
        batch: Batch,
        *,
        env_steps: int | Mapping[str, int] | None = None,
    ) -> tuple[LearnerState, dict[str, dict[str, jax.Array]]]:
        """The learner's update, data-parallel; returns without waiting for the devices.

        Args:
          state: a state replicated over the mesh (from :meth:`init` or :meth:`put`).
          batch: as ``learner.update`` takes it. With several processes, each
            passes its own slice (the same number of rows on every process);
            the global batch is the slices in process order.
          env_steps: as ``learner.update``; default the global batch sizes.

        Returns:
          ``(state, metrics)``, both replicated; metrics stay on the devices.

        Raises:
          ValueError: when a module's batch or minibatch does not split evenly
            over the devices (the message lists sizes that would), or any
            error ``learner.update`` raises.
        """
        processes = jax.process_count()
        batch, env_steps_by_module = self._learner.validate(
            state, batch, env_steps, batch_size_multiple=processes
        )
        for module_id, module_batch in batch.items():
            self._check_split(module_id, jax.tree.leaves(module_batch)[0].shape[0] * processes)
        global_batch = {
            m: jax.tree.map(
                lambda x: jax.make_array_from_process_local_data(self._batch_sharding, x), b
            )
            for m, b in batch.items()
        }
        return self._update(state, global_batch, env_steps_by_module)

    def _check_split(self, module_id: str, size: int) -> None:
        devices = self.num_devices
        minibatch = self._learner.config.minibatch_size
        if size % devices == 0 and (minibatch is None or minibatch % devices == 0):
            return
        lower = size // devices * devices
        sizes = sorted({s for s in (lower, lower + devices) if s > 0})
        advice = f"batch sizes that split over {devices} devices: {sizes}"
        if minibatch is not None and minibatch % devices:
            low = minibatch // devices * devices
            good = sorted({s for s in (low, low + devices) if s > 0})
            advice += f"; minibatch sizes that split: {good}"
        raise ValueError(
            f"Module {module_id!r}: a global batch of {size} rows with minibatch_size="
            f"{minibatch} does not split evenly over the {devices} devices of the 'data' "
            f"axis; both must be multiples of {devices}. Try {advice}."
        )

    def replace(self, **changes: Any) -> LearnerGroup:
        """A group around ``learner.replace(**changes)`` on the same mesh."""
        return LearnerGroup(self._learner.replace(**changes), mesh=self._mesh)

    def add_module(
        self,
        state: LearnerState,
        module_id: str,
        spec: ModuleSpec,
        sample_batch: Batch,
        *,
        params: Params | None = None,
        key: jax.Array | None = None,
        train: bool | None = None,
    ) -> tuple[LearnerGroup, LearnerState]:
        """``learner.add_module`` through the group; the new state is replicated."""
        learner, state = self._learner.add_module(
            state, module_id, spec, sample_batch, params=params, key=key, train=train
        )
        group = LearnerGroup(learner, mesh=self._mesh)
        return group, group.put(state)

    def remove_module(
        self, state: LearnerState, module_id: str
    ) -> tuple[LearnerGroup, LearnerState]:
        """``learner.remove_module`` through the group."""
        learner, state = self._learner.remove_module(state, module_id)
        return LearnerGroup(learner, mesh=self._mesh), state

    def __repr__(self) -> str:
        return f"LearnerGroup({self._learner!r}, devices={self.num_devices})"


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
