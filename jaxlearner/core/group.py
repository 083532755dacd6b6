"""LearnerGroup: RLlib's name for a learner placed on several devices.

There is one learner type: a :class:`~jaxlearner.Learner` carries its
:class:`~jaxlearner.Placement`, and ``learner.on("all")`` runs the same pure
update data-parallel over every device (see :mod:`jaxlearner.core.placement` for
how and why the result equals the single-device update). ``LearnerGroup``
stays as a thin alias for readers coming from RLlib.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
from jax.sharding import Mesh

from jaxlearner.core.learner import Learner
from jaxlearner.core.placement import DATA_AXIS

__all__ = ["DATA_AXIS", "LearnerGroup"]


def LearnerGroup(
    learner: Learner,
    *,
    devices: Sequence[jax.Device] | None = None,
    mesh: Mesh | None = None,
) -> Learner:
    """``learner`` placed data-parallel over ``devices`` (default: all) or ``mesh``.

    Args:
      learner: the learner to place.
      devices: the devices to use; default all devices of all processes.
      mesh: a mesh with a ``"data"`` axis instead of ``devices``.

    Returns:
      ``learner.on(devices or "all", mesh=mesh)``: a :class:`~jaxlearner.Learner`.

    Raises:
      TypeError: when ``learner`` is not a :class:`~jaxlearner.Learner`.
      ValueError: see :meth:`~jaxlearner.Placement.of`.

    Example:
      >>> learner = jl.LearnerGroup(learner)                   # doctest: +SKIP
      >>> state = learner.init(jax.random.key(0))  # replicated # doctest: +SKIP
      >>> state, metrics = learner.update(state, batch)        # doctest: +SKIP
    """
    if not isinstance(learner, Learner):
        raise TypeError(f"LearnerGroup needs a jl.Learner; got {type(learner).__name__}.")
    if mesh is not None:
        return learner.on(mesh=mesh) if devices is None else learner.on(devices, mesh=mesh)
    return learner.on("all" if devices is None else list(devices))
