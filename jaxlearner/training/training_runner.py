"""The Trainer's training runner: an :class:`~jaxlearner.training.env_runner.EnvRunner` in
this process, or Ray env runners (:mod:`jaxlearner.training.ray_runners`), chosen once by
:func:`make_training_runner`; both answer :class:`TrainingRunner`, so the Trainer's step is
the same code for either. What the env runners do is :mod:`jaxlearner.training.env_runners`.

Example:
  >>> runner = make_training_runner(algorithm, "CartPole-v1", num_envs=4, num_env_runners=0,
  ...                               options=None, vectorization="sync", env_config=None,
  ...                               seed=0)                                  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

import jax
import numpy as np

from jaxlearner.algorithms.algorithm import Algorithm, OnPolicyAlgorithm
from jaxlearner.algorithms.trajectories.normalization import RETURN_MOMENTS
from jaxlearner.training.env_runner import EnvRunner, Policy
from jaxlearner.training.env_runners import (
    ASYNCHRONOUS_ALGORITHMS,
    EnvRunnersConfig,
    runs_asynchronously,
)
from jaxlearner.training.rollout import Rollout
from jaxlearner.training.vector_env import EnvLike


class TrainingRunner(Protocol):
    """What the Trainer collects with: an :class:`~jaxlearner.training.env_runner.EnvRunner`
    or Ray runners (:mod:`jaxlearner.training.ray_runners`)."""

    @property
    def num_envs(self) -> int:
        """Environments in one rollout (its ``N`` axis)."""
        ...

    @property
    def observations(self) -> np.ndarray:
        """``[N, ...]`` observations like those the next rollout starts from."""
        ...

    @property
    def observation_space(self) -> Any: ...

    @property
    def action_space(self) -> Any: ...

    def sample(self, policy: Policy, params: Any, num_steps: int, key: jax.Array) -> Rollout:
        """``num_steps`` steps of the ``N`` environments with ``policy``."""
        ...

    def get_state(self) -> dict[str, Any]: ...

    def set_state(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def make_training_runner(
    algorithm: Algorithm,
    env: EnvLike,
    *,
    num_envs: int,
    num_env_runners: int,
    options: EnvRunnersConfig | None,
    vectorization: Literal["sync", "async"],
    env_config: Mapping[str, Any] | None,
    seed: int,
) -> TrainingRunner:
    """The Trainer's runner: local for ``num_env_runners=0``, else Ray actors.

    Raises:
      ValueError: for a bad ``num_env_runners`` or ``options``, or asynchronous runners for
        an algorithm that cannot learn from them (naming those that can).
      ImportError: when Ray is missing (naming the ``jaxlearner[ray]`` extra).
    """
    count = num_env_runners
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"num_env_runners must be an int >= 0; got {count!r}.")
    if options is not None and not isinstance(options, EnvRunnersConfig):
        raise TypeError(f"env_runners must be a jl.EnvRunnersConfig; got {type(options).__name__}.")
    if count == 0:
        return EnvRunner(
            env, num_envs=num_envs, vectorization=vectorization, env_config=env_config, seed=seed
        )
    options = options or EnvRunnersConfig()
    asynchronous = is_asynchronous(algorithm, options)
    observers = {o.name for o in algorithm.learner.specs[algorithm.module_id].observers}
    if asynchronous and count > 1 and RETURN_MOMENTS in observers:
        raise ValueError(
            f"norm_reward keeps one running return per environment, but {count} asynchronous "
            f"env runners hand over fragments of {num_envs} environments each in turn, which "
            "would share them. Use EnvRunnersConfig(asynchronous=False) (every runner's "
            f"environments in one batch, num_envs_per_env_runner={count * num_envs}), one "
            "env runner, or norm_reward=False."
        )
    from jaxlearner.training import ray_runners  # Ray only when runners are asked for

    return ray_runners.start_runners(
        algorithm.explore,
        env,
        ray_runners.RunnerSpec(count, num_envs, vectorization, dict(env_config or {}), seed),
        options,
        asynchronous,
    )


def is_asynchronous(algorithm: Algorithm, options: EnvRunnersConfig) -> bool:
    """Whether the runners sample asynchronously (see :class:`EnvRunnersConfig`).

    Raises:
      ValueError: for asynchronous runners (asked for, or APPO's default) with an algorithm
        not in :data:`ASYNCHRONOUS_ALGORITHMS`, or with an APPO ``policy_lag`` (the lag is
        real).
    """
    name = algorithm.name
    asynchronous = runs_asynchronously(name, options.asynchronous)
    if asynchronous and name not in ASYNCHRONOUS_ALGORITHMS:
        raise ValueError(
            f"{name} cannot learn from asynchronous env runners (its loss assumes the "
            f"rollout's own params); algorithms that can: {', '.join(ASYNCHRONOUS_ALGORITHMS)}. "
            "Use asynchronous=False (or None) for synchronous runners."
        )
    if asynchronous and isinstance(algorithm, OnPolicyAlgorithm) and algorithm.policy_lag:
        raise ValueError(
            f"policy_lag={algorithm.policy_lag} simulates stale params in one process; "
            "asynchronous env runners have a real lag (reported as env_runners/policy_lag). "
            "Set policy_lag=0, or EnvRunnersConfig(asynchronous=False) to keep the simulated lag."
        )
    return asynchronous


def runner_metrics(runner: TrainingRunner) -> dict[str, float]:
    """The runners' own metrics for an iteration's stats (none for a local runner)."""
    return {} if isinstance(runner, EnvRunner) else runner.metrics()  # type: ignore[attr-defined]


def restore_runner(runner: TrainingRunner, saved: Mapping[str, Any]) -> None:
    """Gives ``runner`` the saved runner state, where it can take it.

    A local runner's environments continue where they were saved; remote runners start
    fresh environments on resume (their state lives in other processes), and a local runner
    resuming a remote run starts fresh too.
    """
    if isinstance(runner, EnvRunner) and not saved.get("remote", False):
        runner.set_state(dict(saved))
