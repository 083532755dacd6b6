"""Many agents in one compiled call: seeds and hyperparameter sweeps, over devices.

A pure ``train(key, hyperparams=None) -> (state, metrics)`` (from
:func:`jaxlearner.anakin.train.make_train`) trains one agent. Here it is
``jax.vmap``-ed over an agent axis: each agent has its own key and its own
traced hyperparameters (learning rate, entropy coefficient, ...; see
:func:`~jaxlearner.core.hyperparams.with_hyperparams`), so every seed of every
configuration is one XLA program, compiled once.

Over several devices the agent axis is split along a mesh's ``"data"`` axis
(the :class:`~jaxlearner.LearnerGroup`'s mesh, or one built from a device
list) with ``jax.shard_map``: each device trains its own agents, and no value
crosses devices, so the result equals the single-device one.

Example:
  >>> import jax, jaxlearner as jl
  >>> from jaxlearner import anakin, envs, sweeps
  >>> env = envs.make("CartPole-v1")
  >>> ppo = jl.algorithms.build("ppo", env.observation_space, env.action_space,
  ...     {"lr": 1e-3, "train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1,
  ...      "hidden_sizes": (8,)})
  >>> train = anakin.make_train(ppo, env, anakin.AnakinConfig(num_envs=4,
  ...     num_iterations=2, eval_envs=2))
  >>> result = sweeps.sweep(train, jax.random.key(0), {"learning_rate": [1e-4, 1e-3]},
  ...                       num_seeds=3)
  >>> result.metrics["eval/return_mean"].shape    # [configs, seeds, evaluations]
  (2, 3, 1)
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jaxlearner.anakin.train import AnakinState, Metrics, TrainFn
from jaxlearner.core.placement import DATA_AXIS
from jaxlearner.training.outputs.statistics import aggregates, final_scores, format_table

Devices = str | int | Sequence[jax.Device] | None
"""``None`` (the default device), ``"all"``, a number of devices, or a device list."""


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """The agents of a sweep, by configuration and seed.

    Attributes:
      configs: each configuration's hyperparameters, ``{name: value}``, in
        the order of the leading axis (the grid's product, last name fastest).
      states: final :class:`~jaxlearner.anakin.train.AnakinState` s, leaves
        ``[C, S, ...]``.
      metrics: ``{name: [C, S, ...]}`` curves (see
        :func:`~jaxlearner.anakin.train.make_anakin` for names and shapes).
    """

    configs: tuple[dict[str, float], ...]
    states: AnakinState
    metrics: Metrics

    def aggregates(
        self,
        name: str = "eval/return_mean",
        *,
        target: float | None = None,
        reps: int = 2000,
        seed: int = 0,
    ) -> list[dict[str, tuple[float, float, float]]]:
        """Per configuration, each seed's final ``name`` aggregated over the seeds: IQM,
        median, mean (and the optimality gap to ``target``), each ``(value, low, high)`` with
        its 95% stratified bootstrap interval
        (:func:`~jaxlearner.training.outputs.statistics.aggregates`).

        Raises:
          KeyError: for a metric the sweep did not record.

        Example:
          >>> result.aggregates(target=475.0)[0]["iqm"]  # (value, low, high)  # doctest: +SKIP
        """
        finals = final_scores(self._metric(name))  # [C, S]
        return [aggregates(scores, target=target, reps=reps, seed=seed) for scores in finals]

    def table(
        self, name: str = "eval/return_mean", *, target: float | None = None, reps: int = 2000
    ) -> str:
        """:meth:`aggregates` as a plain-text table, a row per configuration.

        Example:
          >>> print(result.table(target=475.0))  # doctest: +SKIP
          group                runs  IQM [95% CI]  ...
          learning_rate=0.001     8  500.0 [487.2, 500.0]  ...
        """
        labels = [", ".join(f"{k}={v:g}" for k, v in config.items()) for config in self.configs]
        finals = final_scores(self._metric(name))
        return format_table(dict(zip(labels, finals, strict=True)), target=target, reps=reps)

    def _metric(self, name: str) -> np.ndarray:
        if name not in self.metrics:
            raise KeyError(f"No metric {name!r} in this sweep; metrics: {sorted(self.metrics)}.")
        return np.asarray(self.metrics[name], np.float64)


def train_agents(
    train: TrainFn,
    keys: jax.Array,
    hyperparams: Mapping[str, jax.typing.ArrayLike] | None = None,
    *,
    devices: Devices = None,
    mesh: Mesh | None = None,
) -> tuple[AnakinState, Metrics]:
    """Trains ``A`` agents, one per key, in one compiled call.

    Compiled once per ``train``, number of agents, hyperparameter names and
    devices; calling again with other keys or values reuses it.

    Args:
      train: ``train(key, hyperparams) -> (state, metrics)``, pure.
      keys: ``[A]`` typed PRNG keys, one per agent.
      hyperparams: ``{name: [A] values}``, one per agent, or ``None``.
      devices: where to train, splitting the agents over them: ``None`` (the
        default device), ``"all"``, a number of devices or a device list.
      mesh: a mesh with a ``"data"`` axis instead (e.g. ``group.mesh`` of a
        :class:`~jaxlearner.LearnerGroup`); the agents are split along it.

    Returns:
      ``(states, metrics)`` with a leading ``[A]`` axis, device arrays.

    Raises:
      ValueError: for keys that are no ``[A]`` key array, hyperparameters
        of another length, or agents that do not split over the devices.

    Example:
      >>> keys = jax.random.split(jax.random.key(0), 8)                  # doctest: +SKIP
      >>> states, metrics = train_agents(train, keys, devices="all")     # doctest: +SKIP
    """
    if not (
        isinstance(keys, jax.Array)
        and jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key)
        and keys.ndim == 1
    ):
        raise ValueError(
            "train_agents needs a [A] array of typed keys, e.g. "
            f"jax.random.split(jax.random.key(0), A); got {getattr(keys, 'dtype', type(keys))} "
            f"of shape {getattr(keys, 'shape', None)}."
        )
    agents = keys.shape[0]
    values = {}
    for name, value in dict(hyperparams or {}).items():
        array = jnp.asarray(value, jnp.float32)
        if array.shape != (agents,):
            raise ValueError(
                f"Hyperparameter {name!r} needs one value per agent, shape ({agents},); got "
                f"shape {array.shape}."
            )
        values[name] = array
    mesh = _resolve_mesh(devices, mesh)
    if mesh is not None and agents % mesh.shape[DATA_AXIS]:
        count = mesh.shape[DATA_AXIS]
        raise ValueError(
            f"{agents} agents do not split over the {count} devices of the 'data' axis; use a "
            f"multiple of {count} agents (e.g. {max(count, agents // count * count)}) or fewer "
            "devices."
        )
    return _compiled(train, mesh)(keys, values)


def train_seeds(
    train: TrainFn,
    key: jax.Array,
    num_seeds: int,
    *,
    hyperparams: Mapping[str, float] | None = None,
    devices: Devices = None,
    mesh: Mesh | None = None,
) -> tuple[AnakinState, Metrics]:
    """Trains ``num_seeds`` agents from ``jax.random.split(key, num_seeds)`` in one call.

    Args:
      train: as for :func:`train_agents`.
      key: a typed PRNG key.
      num_seeds: agents to train.
      hyperparams: ``{name: value}`` shared by all seeds, or ``None``.
      devices, mesh: as for :func:`train_agents`.

    Returns:
      ``(states, metrics)`` with a leading ``[num_seeds]`` axis.

    Example:
      >>> states, metrics = train_seeds(train, jax.random.key(0), 32)   # doctest: +SKIP
      >>> metrics["eval/return_mean"][:, -1]     # [32] final returns    # doctest: +SKIP
    """
    _check_count("num_seeds", num_seeds)
    shared = {
        name: np.full(num_seeds, value, np.float32) for name, value in (hyperparams or {}).items()
    }
    return train_agents(train, jax.random.split(key, num_seeds), shared, devices=devices, mesh=mesh)


def sweep(
    train: TrainFn,
    key: jax.Array,
    grid: Mapping[str, Sequence[float]],
    num_seeds: int,
    *,
    devices: Devices = None,
    mesh: Mesh | None = None,
) -> SweepResult:
    """Every combination of ``grid``'s values x ``num_seeds`` seeds, in one compiled call.

    Each configuration uses the same ``num_seeds`` keys (common random
    numbers), so differences between configurations are not seed noise of
    their initial weights and first rollouts.

    Args:
      train: as for :func:`train_agents`.
      key: a typed PRNG key, split into the seeds.
      grid: ``{name: values}``, e.g. ``{"learning_rate": [1e-4, 3e-4, 1e-3],
        "entropy_coeff": [0.0, 0.01]}``; names as
        :func:`~jaxlearner.core.hyperparams.with_hyperparams` takes them, each a
        constant of the algorithm's config.
      num_seeds: seeds per configuration.
      devices, mesh: as for :func:`train_agents`; the ``C * num_seeds`` agents
        are split over the devices.

    Returns:
      A :class:`SweepResult` with ``[C, num_seeds, ...]`` states and metrics.

    Raises:
      ValueError: for an empty grid or an empty list of values.
    """
    _check_count("num_seeds", num_seeds)
    if not grid or any(len(values) == 0 for values in grid.values()):
        raise ValueError(f"sweep needs a grid {{name: [values, ...]}} with values; got {grid!r}.")
    names = list(grid)
    configs = tuple(
        dict(zip(names, map(float, combination), strict=True))
        for combination in itertools.product(*(grid[name] for name in names))
    )
    count = len(configs)
    seeds = jax.random.split(key, num_seeds)
    keys = seeds[np.tile(np.arange(num_seeds), count)]  # agent c * S + s: config c, seed s
    values = {
        name: np.repeat(np.asarray([c[name] for c in configs], np.float32), num_seeds)
        for name in names
    }
    states, metrics = train_agents(train, keys, values, devices=devices, mesh=mesh)
    split = lambda x: x.reshape(count, num_seeds, *x.shape[1:])
    return SweepResult(
        configs=configs, states=jax.tree.map(split, states), metrics=jax.tree.map(split, metrics)
    )


@functools.lru_cache(maxsize=32)
def _compiled(train: TrainFn, mesh: Mesh | None) -> Any:
    """``jax.jit`` of the vmapped ``train``, split over ``mesh``'s data axis; one per pair."""
    agents = jax.vmap(train)
    if mesh is None:
        return jax.jit(agents)
    split = P(DATA_AXIS)
    # No collective runs inside: each device trains its own agents. The varying-axis check
    # is off because fresh constants (an environment reset's zero counters) would need a
    # pcast in every scan carry that starts from them.
    sharded = jax.shard_map(
        agents, mesh=mesh, in_specs=(split, split), out_specs=split, check_vma=False
    )
    return jax.jit(sharded)


def _resolve_mesh(devices: Devices, mesh: Mesh | None) -> Mesh | None:
    if mesh is not None:
        if devices is not None:
            raise ValueError("Pass devices= or mesh=, not both.")
        if DATA_AXIS not in mesh.axis_names:
            raise ValueError(f"The mesh needs a {DATA_AXIS!r} axis; it has {mesh.axis_names}.")
        return mesh
    if devices is None:
        return None
    available = jax.devices()
    if devices == "all":
        chosen = available
    elif isinstance(devices, int) and not isinstance(devices, bool):
        if not 1 <= devices <= len(available):
            raise ValueError(f"devices={devices}, but {len(available)} devices are available.")
        chosen = available[:devices]
    elif isinstance(devices, Sequence) and not isinstance(devices, str) and devices:
        chosen = list(devices)
    else:
        raise ValueError(
            f"devices must be None, 'all', a number of devices or a device list; got {devices!r}."
        )
    return Mesh(np.asarray(chosen), (DATA_AXIS,))


def _check_count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int; got {value!r}.")
