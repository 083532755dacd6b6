"""Env runners: where the Trainer's rollouts come from, in its own process or on Ray actors.

``jl.Trainer(..., num_env_runners=0)``, the default, steps its environments in the learner's
process with one :class:`~jaxlearner.training.env_runner.EnvRunner`, as always. With
``num_env_runners=N > 0`` (RLlib's ``num_env_runners``) it starts ``N`` Ray actors
(:mod:`jaxlearner.training.ray_runners`, the ``jaxlearner[ray]`` extra), each owning
``num_envs`` environments and a jitted CPU copy of the policy's act function; the learner
stays on its own devices. Both kinds answer the
:class:`~jaxlearner.training.training_runner.TrainingRunner` protocol, so the Trainer's step is
the same code for either.

Synchronous runners (PPO, DQN, SAC, recurrent PPO; APPO when asked): each iteration sends
the module state once through Ray's object store and gathers one rollout of ``T`` steps from
every runner, concatenated along the environment axis: runner ``r``'s environments are
columns ``r * num_envs .. (r + 1) * num_envs - 1``. Seeds derive from ``(seed, runner)``
only, so a seeded run is reproducible: runner ``r`` seeds its environments with
``seed + r * num_envs`` (gymnasium then seeds sub-environment ``i`` with ``+ i``: the seeds
of one local runner of ``N * num_envs`` environments) and samples with the iteration's key
folded with ``r`` (:func:`runner_key`; runner 0 takes the key as it is), so a run with one
runner collects and learns exactly what the local runner's run does.

Asynchronous runners (APPO, IMPALA-style): every runner keeps sampling with the params it
holds; each :meth:`~jaxlearner.training.training_runner.TrainingRunner.sample` returns the
first fragment ready (``T`` steps of one runner's ``num_envs`` environments), and sends that
runner the newest params at once.
How many updates old the fragment's params were is ``env_runners/policy_lag`` in the
metrics; V-trace corrects for it.

A runner whose process dies or whose environment raises is replaced by a fresh one (seeded
from ``(seed, runner, restarts)``); its partial rollout is dropped, the replacement samples
again, and ``num_env_runner_restarts`` counts it, up to ``max_env_runner_restarts``.

Example:
  >>> options = EnvRunnersConfig(cpus_per_env_runner=0.5, max_env_runner_restarts=3)
  >>> trainer = jl.Trainer(learner, "CartPole-v1", num_envs=4, num_env_runners=2,
  ...                      env_runners=options)                      # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
import numpy as np

from jaxlearner.training.rollout import HOST_COLUMNS, Rollout

ASYNCHRONOUS_ALGORITHMS: tuple[str, ...] = ("appo",)
"""The algorithms that learn from fragments of older params (V-trace corrects for the lag)."""


def runs_asynchronously(algorithm: str, asynchronous: bool | None = None) -> bool:
    """Whether Ray env runners sample asynchronously for ``algorithm``: ``asynchronous`` when
    given (:attr:`EnvRunnersConfig.asynchronous`), else whether the algorithm learns from
    older params (:data:`ASYNCHRONOUS_ALGORITHMS`). The one rule the trainer and the command
    line's batch of envs both read.

    Example:
      >>> runs_asynchronously("appo"), runs_asynchronously("ppo")
      (True, False)
      >>> runs_asynchronously("appo", asynchronous=False)
      False
    """
    return algorithm in ASYNCHRONOUS_ALGORITHMS if asynchronous is None else bool(asynchronous)


RESTART_SEED_STRIDE = 1_000_003
"""A replacement runner's seed is its first one plus this times its restarts (a prime far
from any ``runner * num_envs`` offset), so it never replays its predecessor's episodes."""


@dataclasses.dataclass(frozen=True)
class EnvRunnersConfig:
    """How the Trainer's Ray env runners run (used when ``num_env_runners > 0``).

    Attributes:
      cpus_per_env_runner: CPUs Ray reserves for each runner (RLlib's
        ``num_cpus_per_env_runner``); fractions share a core.
      max_env_runner_restarts: replacements of failed runners allowed over the run; one more
        failure raises ``RuntimeError`` (RLlib's ``max_num_env_runner_restarts``).
      ray_address: a running Ray cluster to join (``"auto"``, ``"ray://host:10001"``);
        ``None``: ``$RAY_ADDRESS`` if set, else a local Ray instance started for the run and
        shut down by :meth:`~jaxlearner.Driver.close`. A Ray already initialized in this
        process is used as it is.
      asynchronous: ``True``: runners keep sampling while the learner updates (APPO only);
        ``False``: one batch from all runners per iteration; ``None``: asynchronous for
        APPO, synchronous for the others.

    Raises:
      ValueError: for a value out of range, with the value received.

    Example:
      >>> EnvRunnersConfig(cpus_per_env_runner=0.5).max_env_runner_restarts
      100
    """

    cpus_per_env_runner: float = 1.0
    max_env_runner_restarts: int = 100
    ray_address: str | None = None
    asynchronous: bool | None = None

    def __post_init__(self) -> None:
        cpus = self.cpus_per_env_runner
        if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not cpus > 0:
            raise ValueError(f"cpus_per_env_runner must be a number > 0; got {cpus!r}.")
        if not math.isfinite(cpus):
            raise ValueError(f"cpus_per_env_runner must be finite; got {cpus!r}.")
        restarts = self.max_env_runner_restarts
        if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
            raise ValueError(f"max_env_runner_restarts must be an int >= 0; got {restarts!r}.")
        if self.ray_address is not None and not (
            isinstance(self.ray_address, str) and self.ray_address
        ):
            raise ValueError(
                f"ray_address must be a non-empty string or None; got {self.ray_address!r}."
            )
        if self.asynchronous not in (None, True, False):
            raise ValueError(
                f"asynchronous must be True, False or None; got {self.asynchronous!r}."
            )


def runner_seed(seed: int, index: int, num_envs: int, restarts: int = 0) -> int:
    """Runner ``index``'s environment seed after ``restarts`` replacements.

    Example:
      >>> runner_seed(7, 2, num_envs=4), runner_seed(7, 2, num_envs=4, restarts=1)
      (15, 1000018)
    """
    return seed + index * num_envs + restarts * RESTART_SEED_STRIDE


def runner_key(key: jax.Array, index: int) -> jax.Array:
    """Runner ``index``'s sampling key for the rollout whose key is ``key``: ``key`` itself
    for runner 0 (so one runner samples what the local runner would), ``fold_in(key, index)``
    for the others."""
    return key if index == 0 else jax.random.fold_in(key, index)


def concatenate_rollouts(parts: Sequence[Rollout]) -> Rollout:
    """Rollouts of the same ``T`` from several runners as one, along the environment axis.

    Part ``r``'s environment ``i`` becomes environment ``sum(N of parts before r) + i``
    (``episode_envs`` renumbered the same way); extras are host arrays.

    Example:
      >>> one = Rollout(*(np.zeros((3, 2)),) * 7, extras={}, last_obs=np.zeros(2),
      ...               episode_returns=[1.0], episode_lengths=[3], episode_envs=[1])
      >>> both = concatenate_rollouts([one, one])
      >>> both.obs.shape, both.episode_envs
      ((3, 4), [1, 3])
    """
    if len(parts) == 1:
        return parts[0]
    offsets = np.cumsum([0] + [part.valid.shape[1] for part in parts[:-1]])
    columns = {
        name: np.concatenate([getattr(part, name) for part in parts], axis=1)
        for name in HOST_COLUMNS
    }
    extras = jax.tree.map(
        lambda *xs: np.concatenate([np.asarray(x) for x in xs], axis=1),
        *[dict(part.extras) for part in parts],
    )
    return Rollout(
        **columns,
        extras=extras,
        last_obs=np.concatenate([part.last_obs for part in parts], axis=0),
        episode_returns=[x for part in parts for x in part.episode_returns],
        episode_lengths=[x for part in parts for x in part.episode_lengths],
        episode_envs=[
            int(env) + int(offset)
            for part, offset in zip(parts, offsets, strict=True)
            for env in part.episode_envs
        ],
    )
