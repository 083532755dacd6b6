"""Env runners on Ray actors: the only module that imports Ray (the ``jaxlearner[ray]`` extra).

:func:`start_runners` starts ``N`` actors, each an
:class:`~jaxlearner.training.env_runner.EnvRunner` of ``num_envs`` gymnasium environments
with a jitted CPU copy of the act function (``JAX_PLATFORMS=cpu`` in the actor, so a runner
never takes the learner's accelerator). What they are for, and how seeds, keys and
restarts are chosen, is :mod:`jaxlearner.training.env_runners`; this module is how:

- :class:`SyncRayRunners`: the module state goes into the object store once per iteration
  (``ray.put``, host arrays), every actor samples ``T`` steps with it, and the rollouts come
  back as numpy arrays, concatenated along the environment axis.
- :class:`AsyncRayRunners`: every actor always has a fragment in flight; ``sample`` puts the
  new params once, waits for the first fragment ready (``ray.wait``) and hands that actor
  the new params for its next one before returning.
- :class:`RunnerPool` (used by both): starts, replaces and stops the actors. A runner whose
  process died (``RayActorError``) or whose environment raised (``RayTaskError``) is killed
  and replaced by a fresh one, up to ``max_env_runner_restarts``; ``close`` kills every
  actor and shuts down a Ray instance the pool started, so no process outlives the run.

Example:
  >>> spec = RunnerSpec(count=2, num_envs=4, vectorization="sync", env_config={}, seed=0)
  >>> runners = start_runners(algorithm.explore, "CartPole-v1", spec,
  ...                         EnvRunnersConfig(), asynchronous=False)   # doctest: +SKIP
  >>> runners.sample(algorithm.explore, module, 128, key).obs.shape     # doctest: +SKIP
  (128, 8, 4)
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, final

import gymnasium as gym
import jax
import numpy as np

from jaxlearner.training.env_runner import EnvRunner, Policy
from jaxlearner.training.env_runners import (
    EnvRunnersConfig,
    concatenate_rollouts,
    runner_key,
    runner_seed,
)
from jaxlearner.training.rollout import Rollout
from jaxlearner.training.vector_env import EnvLike

try:
    import ray
    import ray.exceptions
    from ray import cloudpickle
except ImportError:  # pragma: no cover - the message is the test
    raise ImportError(
        "num_env_runners > 0 runs env runners on Ray, which is not installed: "
        "pip install 'jaxlearner[ray]'."
    ) from None

CLOSE_TIMEOUT_S = 5.0
"""Seconds :meth:`RunnerPool.close` waits for the runners to close their environments."""

ACTOR_ENV_VARS: Mapping[str, str] = {"JAX_PLATFORMS": "cpu"}
"""The runners' JAX acts on the CPU: the accelerator is the learner's."""


@dataclasses.dataclass(frozen=True)
class RunnerSpec:
    """What each runner builds: ``count`` runners of ``num_envs`` environments.

    Attributes:
      count: runners (actors).
      num_envs: environments per runner.
      vectorization: each runner's gymnasium vectorization (``"sync"`` or ``"async"``).
      env_config: keyword arguments for ``gymnasium.make`` or the factory.
      seed: the run's seed (runner ``r`` seeds with ``runner_seed(seed, r, num_envs)``).
    """

    count: int
    num_envs: int
    vectorization: str
    env_config: dict[str, Any]
    seed: int


class _RunnerActor:
    """One runner's process: an :class:`EnvRunner` and the policy it samples with."""

    def __init__(self, env: EnvLike, spec: RunnerSpec, seed: int, policy: Policy) -> None:
        self._runner = EnvRunner(
            env,
            num_envs=spec.num_envs,
            vectorization=spec.vectorization,  # type: ignore[arg-type]
            env_config=spec.env_config,
            seed=seed,
        )
        self._policy = policy

    def describe(self) -> tuple[gym.Space, gym.Space, np.ndarray]:
        runner = self._runner
        return runner.observation_space, runner.action_space, runner.observations

    def sample(self, params: Any, num_steps: int, key_data: np.ndarray, impl: str) -> Rollout:
        key = jax.random.wrap_key_data(key_data, impl=impl)
        rollout = self._runner.sample(self._policy, params, num_steps, key)
        return dataclasses.replace(rollout, extras=jax.device_get(rollout.extras))

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self._runner.close()


def start_runners(
    policy: Policy,
    env: EnvLike,
    spec: RunnerSpec,
    options: EnvRunnersConfig,
    asynchronous: bool,
) -> SyncRayRunners | AsyncRayRunners:
    """``spec.count`` runners on Ray, started (Ray too, if it is not running).

    Raises:
      ValueError: for an environment or policy that cannot be sent to an actor, naming it,
        or an env instance or vector env (each runner needs a factory or an id).
    """
    _check_sendable("environment", env)
    _check_sendable("act function", policy)
    pool = RunnerPool(policy, env, spec, options, owns_ray=_init_ray(options))
    return AsyncRayRunners(pool) if asynchronous else SyncRayRunners(pool)


def _check_sendable(what: str, value: Any) -> None:
    """Raises ``ValueError`` for a value Ray cannot pickle to send to the actors."""
    if isinstance(value, gym.Env | gym.vector.VectorEnv):
        raise ValueError(
            f"Env runners each build their own environments; got the {what} instance "
            f"{value!r}. Pass a gymnasium id or a factory (lambda: MyEnv()) instead."
        )
    try:
        cloudpickle.dumps(value)
    except Exception as error:  # pickling raises many types; all mean the same here
        raise ValueError(
            f"The {what} {value!r} cannot be sent to the env runners: Ray pickles it and "
            f"failed ({type(error).__name__}: {error}). Define it at module level or pass a "
            "gymnasium id."
        ) from error


def _init_ray(options: EnvRunnersConfig) -> bool:
    """Starts (or joins) Ray unless this process already did; whether this call did."""
    if ray.is_initialized():
        return False
    init_ray(address=options.ray_address or os.environ.get("RAY_ADDRESS") or None)
    return True


def init_ray(**kwargs: Any) -> None:
    """``ray.init(**kwargs)`` (no dashboard, Ray's logger at errors only) that keeps this
    process's SIGINT and SIGTERM handlers.

    ray.init replaces SIGTERM's handler with one that exits at once; the run's own (the
    command line's: save a checkpoint, then stop) must stay.

    Example:
      >>> init_ray(num_cpus=2)  # a local instance for two cores   # doctest: +SKIP
    """
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        with warnings.catch_warnings():
            # Ray starts its daemons with fork + exec; Python's warning about forking a
            # multithreaded (JAX) process does not apply to an exec'd child.
            warnings.filterwarnings("ignore", message=".*os.fork\\(\\) was called.*")
            # Ray's own notes at start-up (its token authentication, the instance started)
            # would land between the run's lines; its errors still show.
            ray.init(**{"include_dashboard": False, "logging_level": logging.ERROR, **kwargs})
    finally:
        if threading.current_thread() is threading.main_thread():
            for number, handler in handlers.items():
                signal.signal(number, handler)


@final
class RunnerPool:
    """The actors of one run, by index: started, replaced on failure, and stopped.

    Args:
      policy: the act function each runner samples with.
      env: the environment each runner builds ``spec.num_envs`` of.
      spec: counts, vectorization, config and seed.
      options: CPUs per runner and restarts allowed.
      owns_ray: shut Ray down at :meth:`close` (this pool's run started it).
    """

    def __init__(
        self,
        policy: Policy,
        env: EnvLike,
        spec: RunnerSpec,
        options: EnvRunnersConfig,
        owns_ray: bool,
    ) -> None:
        self.policy, self.spec, self._options = policy, spec, options
        self._owns_ray = owns_ray
        self._actor_class = ray.remote(_RunnerActor).options(
            num_cpus=options.cpus_per_env_runner,
            max_restarts=0,
            runtime_env={"env_vars": dict(ACTOR_ENV_VARS)},
        )
        self._env_ref, self._policy_ref = ray.put(env), ray.put(policy)
        self.restarts = 0
        self._actors: list[Any] = []
        try:
            self._launch()
        except BaseException:
            self.close()
            raise

    def _launch(self) -> None:
        """Starts every runner afresh and reads the spaces and first observations."""
        self._restarts_of = [0] * self.spec.count
        self._actors = [self._start(index) for index in range(self.spec.count)]
        described = ray.get([actor.describe.remote() for actor in self._actors])
        self.observation_space, self.action_space = described[0][:2]
        self.observations = [obs for _, _, obs in described]

    def _start(self, index: int) -> Any:
        spec = self.spec
        seed = runner_seed(spec.seed, index, spec.num_envs, self._restarts_of[index])
        return self._actor_class.remote(self._env_ref, spec, seed, self._policy_ref)

    def check_policy(self, policy: Policy) -> None:
        """Raises ``ValueError`` for another policy than the runners were started with."""
        if policy is not self.policy:
            raise ValueError(
                "Env runners sample with the act function they were started with; got "
                f"another one ({policy!r})."
            )

    def submit(self, index: int, params: Any, num_steps: int, key: jax.Array) -> Any:
        """Runner ``index`` samples ``num_steps`` with ``params`` (an object ref); its ref."""
        key_data = np.asarray(jax.random.key_data(key))
        impl = str(jax.random.key_impl(key))
        return self._actors[index].sample.remote(params, num_steps, key_data, impl)

    def replace(self, index: int, error: BaseException) -> None:
        """Kills runner ``index`` and starts a fresh one in its place.

        Raises:
          RuntimeError: past ``max_env_runner_restarts``, from ``error``.
        """
        limit = self._options.max_env_runner_restarts
        if self.restarts >= limit:
            raise RuntimeError(
                f"Env runner {index} failed and the run has replaced failed runners "
                f"{self.restarts} times, the most max_env_runner_restarts={limit} allows: "
                f"{type(error).__name__}: {error}"
            ) from error
        self.restarts += 1
        self._restarts_of[index] += 1
        ray.kill(self._actors[index], no_restart=True)
        self._actors[index] = self._start(index)

    def actor_pids(self) -> list[int]:
        """The runners' process ids, by index."""
        return ray.get([actor.pid.remote() for actor in self._actors])

    def rebuild(self, env_config: Mapping[str, Any], seed: int) -> None:
        """Replaces every runner by one with ``env_config`` and ``seed`` (the old ones are
        stopped first: the new ones take their CPUs)."""
        self._stop_actors()
        self.spec = dataclasses.replace(self.spec, env_config=dict(env_config), seed=seed)
        self._launch()

    def _stop_actors(self) -> None:
        """Closes the runners' environments (a few seconds at most: ``"async"`` ones have
        processes of their own) and kills the actors."""
        closing = [actor.close.remote() for actor in self._actors]
        ray.wait(closing, num_returns=len(closing), timeout=CLOSE_TIMEOUT_S)
        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        self._actors = []

    def close(self) -> None:
        """Stops the runners, and shuts Ray down if this pool's run started it."""
        self._stop_actors()
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
            self._owns_ray = False


FAILURES = (ray.exceptions.RayActorError, ray.exceptions.RayTaskError)
"""A runner's process died, or its environment (or policy) raised."""


class _RemoteRunners:
    """What both kinds share: spaces, state, metrics and close over a :class:`RunnerPool`."""

    def __init__(self, pool: RunnerPool) -> None:
        self.pool = pool
        self._waited = 0.0

    @property
    def observation_space(self) -> gym.Space:
        return self.pool.observation_space

    @property
    def action_space(self) -> gym.Space:
        return self.pool.action_space

    def rebuild(self, env_config: Mapping[str, Any], seed: int) -> None:
        """New environments with ``env_config`` in fresh runners seeded from ``seed`` (an env
        config schedule's change); what was in flight is dropped."""
        self.pool.rebuild(env_config, seed)

    def get_state(self) -> dict[str, Any]:
        """The counts only: remote runners start fresh environments on resume."""
        spec = self.pool.spec
        return {"remote": True, "num_env_runners": spec.count, "num_envs": spec.num_envs}

    def set_state(self, state: dict[str, Any]) -> None:
        """Nothing: remote runners start fresh environments on resume."""
        del state

    def actor_pids(self) -> list[int]:
        """The runners' process ids, by index (for tests and monitoring)."""
        return self.pool.actor_pids()

    def metrics(self) -> dict[str, float]:
        """``num_env_runner_restarts`` (over the run) and ``env_runners/wait_s``: seconds
        the learner waited for rollouts in the last ``sample``."""
        return {
            "num_env_runner_restarts": float(self.pool.restarts),
            "env_runners/wait_s": self._waited,
        }

    def close(self) -> None:
        self.pool.close()

    def _get(self, ref: Any, index: int, resubmit: Callable[[int], Any]) -> Any:
        """Runner ``index``'s result, replacing it (and asking again) while it fails."""
        while True:
            try:
                return ray.get(ref)
            except FAILURES as error:
                self.pool.replace(index, error)
                ref = resubmit(index)


@final
class SyncRayRunners(_RemoteRunners):
    """One rollout from every runner per :meth:`sample`, concatenated (``N = count *
    num_envs`` environments)."""

    @property
    def num_envs(self) -> int:
        spec = self.pool.spec
        return spec.count * spec.num_envs

    @property
    def observations(self) -> np.ndarray:
        return np.concatenate(self.pool.observations, axis=0)

    def sample(self, policy: Policy, params: Any, num_steps: int, key: jax.Array) -> Rollout:
        """``num_steps`` steps of every runner with ``params``, sent once.

        Returns:
          A :class:`Rollout` of ``[T, count * num_envs]`` host arrays.
        """
        self.pool.check_policy(policy)
        start = time.perf_counter()
        params_ref = ray.put(jax.device_get(params))

        def submit(index: int) -> Any:
            return self.pool.submit(index, params_ref, num_steps, runner_key(key, index))

        refs = [submit(index) for index in range(self.pool.spec.count)]
        parts = [self._get(ref, index, submit) for index, ref in enumerate(refs)]
        self._waited = time.perf_counter() - start
        return concatenate_rollouts(parts)


@final
class AsyncRayRunners(_RemoteRunners):
    """The first fragment ready per :meth:`sample` (``N = num_envs`` environments of one
    runner); every runner keeps sampling meanwhile."""

    def __init__(self, pool: RunnerPool) -> None:
        super().__init__(pool)
        self._version = 0  # params published so far
        self._pending: dict[Any, tuple[int, int]] = {}  # ref -> (runner, params version)
        self._lag = 0

    @property
    def num_envs(self) -> int:
        return self.pool.spec.num_envs

    def rebuild(self, env_config: Mapping[str, Any], seed: int) -> None:
        self._pending.clear()
        super().rebuild(env_config, seed)

    @property
    def observations(self) -> np.ndarray:
        return self.pool.observations[0]

    def sample(self, policy: Policy, params: Any, num_steps: int, key: jax.Array) -> Rollout:
        """Publishes ``params`` and returns the first fragment ready, of ``num_steps``
        steps; that runner samples its next fragment with ``params`` meanwhile.

        Returns:
          A :class:`Rollout` of ``[T, num_envs]`` host arrays, collected with the params
          of ``env_runners/policy_lag`` calls ago (0 for the first fragments).
        """
        self.pool.check_policy(policy)
        start = time.perf_counter()
        self._version += 1
        params_ref = ray.put(jax.device_get(params))

        def submit(index: int) -> Any:
            ref = self.pool.submit(index, params_ref, num_steps, runner_key(key, index))
            self._pending[ref] = (index, self._version)
            return ref

        if not self._pending:
            for index in range(self.pool.spec.count):
                submit(index)
        while True:
            [ready], _ = ray.wait(list(self._pending), num_returns=1)
            index, version = self._pending.pop(ready)
            try:
                fragment = ray.get(ready)
            except FAILURES as error:
                self.pool.replace(index, error)  # the partial fragment is dropped
                submit(index)
                continue
            submit(index)
            self._lag = self._version - version
            self._waited = time.perf_counter() - start
            return fragment

    def metrics(self) -> dict[str, float]:
        """As :meth:`_RemoteRunners.metrics`, with ``env_runners/policy_lag``: updates
        between the params the last fragment was collected with and the learner's."""
        return {**super().metrics(), "env_runners/policy_lag": float(self._lag)}
