"""Trainer: step / eval / run around a built-in algorithm's learner and gymnasium envs.

A thin loop anyone can read and copy: :meth:`Trainer.step` collects
experience with an :class:`~jaxlearner.training.env_runner.EnvRunner` and calls the
jitted update; :meth:`Trainer.eval` runs whole episodes with the deterministic
policy; :meth:`Trainer.run` repeats ``step`` (and ``eval`` every so many env
steps) until a stop condition holds. What happens to each rollout depends on
the algorithm's kind (a :mod:`~jaxlearner.training.feeds` feed, chosen once):
on-policy algorithms (PPO) train once on each rollout; off-policy ones (DQN,
SAC) store transitions in a device replay buffer and run a compiled
sample-and-update loop.

Every iteration's learner metrics are fetched from the device once, flattened
(``"default_policy/total_loss"``) and merged with the trainer's counters and
episode statistics into one flat dict, which is returned, kept in
:attr:`Trainer.history` and sent to the writers.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, final

import jax

from jaxlearner.algorithms import (
    Algorithm,
    OfflineAlgorithm,
    OnPolicyAlgorithm,
    algorithm_for,
)
from jaxlearner.algorithms.networks.spaces import check_recipe_spaces
from jaxlearner.algorithms.replay.off_policy import Buffer
from jaxlearner.checkpoint.manager import CheckpointManager
from jaxlearner.core.learner import Learner
from jaxlearner.core.placement import DevicesLike
from jaxlearner.core.state import LearnerState, ModuleState
from jaxlearner.training import run_book
from jaxlearner.training.compile_ahead import compile_first_update
from jaxlearner.training.compile_clock import Stopwatch
from jaxlearner.training.env_runner import EnvLike, EnvRunner
from jaxlearner.training.env_runners import EnvRunnersConfig
from jaxlearner.training.feeds import make_feed
from jaxlearner.training.memory_stats import memory_stats
from jaxlearner.training.outputs.loggers import Writer, flatten_metrics
from jaxlearner.training.outputs.run_config import describe_env, run_config
from jaxlearner.training.stop_conditions import StopCondition
from jaxlearner.training.trainer_counters import (
    EnvConfig,
    TrainerCounters,
    check_env_config,
    episode_stats,
    resolve_env_config,
)
from jaxlearner.training.training_runner import (
    TrainingRunner,
    make_training_runner,
    restore_runner,
    runner_metrics,
)

EVAL_RUNNERS_KEPT = 4
"""Evaluation env runners kept for reuse, one per (config, episodes); the oldest is closed
when a new config (an ``eval_env_config`` schedule's) needs another."""


@final
class Trainer:
    """Trains a built-in algorithm on a gymnasium environment.

    Args:
      learner: a learner from ``jl.algorithms.ppo/dqn/sac(...)`` (its
        algorithm is derived from it: :func:`~jaxlearner.algorithms.algorithm_for`),
        or an :class:`~jaxlearner.algorithms.OnPolicyAlgorithm` or
        :class:`~jaxlearner.algorithms.OffPolicyAlgorithm`.
      env: a gymnasium id, an env instance, a factory or a vector env.
      num_envs: sub-environments stepped together.
      vectorization: ``"sync"`` or ``"async"``.
      env_config: keyword arguments for ``gymnasium.make`` or the factory.
      eval_episodes: episodes per :meth:`eval` (one per evaluation env).
      seed: seeds the learner's init, the environments and the trainer's key.
      devices: ``None`` (where the learner is placed already: the default
        device unless it was built with ``devices=``), ``"all"`` (every
        device, data-parallel), an int (the first n devices) or a list of
        devices; the learner is re-placed with ``learner.on(devices)``.
      writers: metric writers (console, JSON lines, TensorBoard, MLflow).
      progress: show a progress bar; ``None`` shows one on a terminal.
      state: a learner state to start from instead of ``learner.init``.
      compile_ahead: compile the first update on a thread while the learner initializes
        and the first rollout is collected (:mod:`jaxlearner.training.compile_ahead`);
        the same program, found sooner. ``False`` compiles it when it first runs.
      num_env_runners: ``0`` steps the environments in this process; ``N > 0`` starts
        ``N`` Ray actors of ``num_envs`` environments each
        (:mod:`jaxlearner.training.env_runners`; the ``jaxlearner[ray]`` extra).
      env_runners: how the Ray runners run (:class:`~jaxlearner.EnvRunnersConfig`: CPUs,
        restarts, the cluster, synchronous or not).

    Raises:
      ValueError: when the environment's spaces differ from those the learner
        was built for, or options are invalid.
      ImportError: for ``num_env_runners > 0`` without Ray (naming the extra).

    Example:
      >>> import gymnasium as gym, jaxlearner as jl
      >>> env = gym.make("CartPole-v1")
      >>> learner = jl.algorithms.ppo(env.observation_space, env.action_space)
      >>> trainer = jl.Trainer(learner, "CartPole-v1", num_envs=8)    # doctest: +SKIP
      >>> history = trainer.run([jl.RewardBound(475.0)], steps_per_eval=20_000)  # doctest: +SKIP
    """

    def __init__(
        self,
        learner: Learner | Algorithm,
        env: EnvLike,
        *,
        num_envs: int = 8,
        vectorization: Literal["sync", "async"] = "sync",
        env_config: Mapping[str, Any] | None = None,
        eval_episodes: int = run_book.EVAL_EPISODES,
        seed: int = 0,
        devices: DevicesLike = None,
        writers: Sequence[Writer] = (),
        progress: bool | None = None,
        state: LearnerState | None = None,
        compile_ahead: bool = True,
        num_env_runners: int = 0,
        env_runners: EnvRunnersConfig | None = None,
    ) -> None:
        offline = isinstance(learner, OfflineAlgorithm)
        algorithm = learner if isinstance(learner, Algorithm) or offline else algorithm_for(learner)
        if not isinstance(algorithm, Algorithm):  # an offline algorithm collects nothing
            raise TypeError(
                f"{algorithm.name} trains on a recorded dataset, not on its own experience; use "
                "jl.OfflineTrainer(learner, dataset)."
            )
        if devices is not None:
            algorithm = algorithm.with_learner(algorithm.learner.on(devices))
        self._algorithm = algorithm
        run_book.check_eval_episodes(eval_episodes)
        self._env, self._env_config = env, dict(env_config or {})
        self._vectorization = vectorization
        self._schedules: tuple[EnvConfig | None, EnvConfig | None] = (None, None)
        self._remote = (num_env_runners, env_runners)
        runner = self._runner = self._make_runner(num_envs, self._env_config, seed)
        try:
            self._rollout_steps = algorithm.rollout_steps(runner.num_envs)
        except ValueError:
            runner.close()  # Ray runners' processes end with the error
            raise
        self._feed = make_feed(algorithm)
        init_key, self._key = jax.random.split(jax.random.key(seed))
        self._ahead = (
            compile_first_update(algorithm, self._feed, runner, init_key, self._rollout_steps)
            if compile_ahead
            else None
        )
        lag = algorithm.policy_lag if isinstance(algorithm, OnPolicyAlgorithm) else 0
        # The params of the last lag + 1 iterations' starts; the oldest one collects.
        self._behaviour_params: collections.deque[Any] = collections.deque(maxlen=lag + 1)
        self._eval_episodes = eval_episodes
        self._eval_runners: dict[str, EnvRunner] = {}
        self._seed = seed
        # learner.init places its state; a state given from elsewhere is placed here.
        self._state = (
            self.learner.init(init_key) if state is None else self.learner.placement.put(state)
        )
        config = run_config(
            self.learner,
            env=describe_env(env),
            num_envs=num_envs if num_env_runners else runner.num_envs,
            seed=seed,
            eval_episodes=eval_episodes,
            vectorization=vectorization,
            **({"num_env_runners": num_env_runners} if num_env_runners else {}),
        )
        self._book = run_book.RunBook(
            TrainerCounters(), owner="Trainer", writers=writers, progress=progress, config=config
        )

    algorithm = run_book.trainer_algorithm
    learner = run_book.trainer_learner

    state = run_book.trainer_state

    @property
    def buffer(self) -> Buffer | None:
        """The replay buffer of an off-policy algorithm (``None`` before the first step)."""
        return self._feed.buffer

    @property
    def runner(self) -> TrainingRunner:
        """The training env runner (an :class:`~jaxlearner.training.env_runner.EnvRunner`,
        or the Ray runners of ``num_env_runners > 0``)."""
        return self._runner

    def _make_runner(self, num_envs: int, env_config: dict[str, Any], seed: int) -> Any:
        """The training runner (local or Ray's), its spaces checked against the learner's."""
        count, options = self._remote
        runner = make_training_runner(
            self._algorithm,
            self._env,
            num_envs=num_envs,
            num_env_runners=count,
            options=options,
            vectorization=self._vectorization,
            env_config=env_config,
            seed=seed,
        )
        try:
            self._check_spaces(runner)
        except ValueError:
            runner.close()
            raise
        return runner

    def _check_spaces(self, runner: TrainingRunner) -> None:
        """Raises ``ValueError`` when the runner's spaces differ from the learner's."""
        check_recipe_spaces(self.learner.recipe, runner.observation_space, runner.action_space)

    counters = run_book.book_attribute(
        "counters",
        """The run's progress (iterations, env steps, episodes, seconds, and the returns and
        lengths of the last 100 episodes); checkpoints keep it.""",
    )

    history = run_book.book_attribute(
        "history",
        """The dicts :meth:`step` returned, with :meth:`run`'s evaluations joined as
        ``"eval/..."``; stop conditions such as ``Plateau`` read it, checkpoints keep it.""",
    )

    request_stop = run_book.trainer_request_stop
    stop_requested = run_book.trainer_stop_requested

    def _module_state(self) -> ModuleState:
        state = self.learner.placement.get(self._state)
        return state.modules[self._algorithm.module_id]

    def _behaviour_module(self) -> ModuleState:
        """The module to collect with: the current one with the params of ``policy_lag``
        updates ago (fewer in the first iterations)."""
        module = self._module_state()
        if self._behaviour_params.maxlen == 1:
            return module
        # A copy, so that a learner donating its state cannot free the params kept here.
        self._behaviour_params.append(jax.tree.map(jax.numpy.copy, module.params))
        return module.replace(params=self._behaviour_params[0])

    def step(self, env_config: EnvConfig | None = None) -> dict[str, float]:
        """One iteration: collect experience (with the params of ``policy_lag`` updates ago,
        for an on-policy algorithm that has one), update, log.

        Args:
          env_config: the training envs' config from this step on (a mapping, or a
            schedule ``config(counters)``; ``None``: :meth:`run`'s schedule, else as it
            is). A config that differs rebuilds the sub-environments with it (gymnasium
            envs take their settings when made) and resets them, so the episodes in
            flight end uncounted; nothing recompiles, and the spaces must stay the same.

        Returns:
          A flat dict of ``iteration``, ``env_steps`` (lifetime), ``episodes``,
          ``episode_return_mean`` / ``_min`` / ``_max`` and
          ``episode_len_mean`` over the last 100 episodes, ``num_episodes``
          (this iteration), ``env_steps_per_s``, ``time_this_iter_s``,
          ``time_total_s``, and the learner's metrics flattened
          (``"default_policy/total_loss"``, ``"__all__/num_grad_steps"``, ...), and
          :func:`~jaxlearner.training.memory_stats.memory_stats` (``"memory/..."``).

        Raises:
          TypeError: for an ``env_config`` that is neither a mapping nor a callable.
          ValueError: when the reconfigured envs' spaces differ from the learner's.
        """
        watch = Stopwatch()
        self._reconfigure(self._schedules[0] if env_config is None else env_config)
        self._key, sample_key, update_key = _split_in_three(self._key)
        module = self._behaviour_module()
        rollout = self._runner.sample(
            self._algorithm.explore, module, self._rollout_steps, sample_key
        )
        before = self.counters.env_steps
        if self._feed.updates(before, rollout.env_steps):
            self._wait_for_compile_ahead()
        self._state, metrics = self._feed.learn(
            self._state, module, rollout.experience(), rollout.env_steps, before, update_key
        )
        learner_metrics = flatten_metrics(jax.device_get(metrics)) if metrics else {}
        elapsed, compiling = watch.read()
        counters = self.counters
        counters.count(rollout, elapsed)
        episodes = {
            "episodes": float(counters.episodes),
            "num_episodes": float(len(rollout.episode_returns)),
        }
        stats = {
            **run_book.iteration_stats(counters, rollout.env_steps, elapsed, episodes, compiling),
            **episode_stats(counters),
            **learner_metrics,
            **memory_stats(self._feed.buffer),
            **runner_metrics(self._runner),
        }
        self._book.record(stats)
        return stats

    def _reconfigure(self, env_config: EnvConfig | None) -> None:
        """Rebuilds the training envs when ``env_config`` (resolved) differs from theirs."""
        if env_config is None:
            return
        config = dict(resolve_env_config(env_config, self.counters))
        if config == self._env_config:
            return
        seed = self._seed + 20_000 + self.counters.iteration
        if not isinstance(self._runner, EnvRunner):  # Ray runners: new actors, same pool
            try:
                self._runner.rebuild(config, seed)  # type: ignore[attr-defined]
                self._check_spaces(self._runner)
            except Exception:  # the envs' own error, or other spaces: the old envs again
                self._runner.rebuild(self._env_config, seed)  # type: ignore[attr-defined]
                raise
            self._env_config = config
            return
        runner = self._make_runner(self._runner.num_envs, config, seed)
        runner.share_compiled(self._runner)
        self._runner.close()
        self._runner, self._env_config = runner, config

    def run(
        self,
        stop_conditions: StopCondition | Sequence[StopCondition] = (),
        steps_per_eval: int | None = None,
        max_iterations: int | None = None,
        on_iteration: Callable[[dict[str, float]], None] | None = None,
        evaluate_at_end: bool = False,
        eval_every_iterations: int | None = None,
        env_config: EnvConfig | None = None,
        eval_env_config: EnvConfig | None = None,
    ) -> list[dict[str, float]]:
        """Steps until a stop condition holds; see
        :func:`~jaxlearner.training.run_book.trainer_run` for the arguments they share.

        Args:
          env_config: the training envs' config for each step (a mapping, or a schedule
            ``config(counters)`` read before each step: domain randomization over the run);
            a new config rebuilds the envs at that step (see :meth:`step`).
          eval_env_config: the evaluation envs' config (default: the training envs').

        Example:
          >>> gravity = lambda counters: {"g": 9.0 + counters.iteration % 3}  # doctest: +SKIP
          >>> trainer.run([jl.MaxEnvSteps(50_000)], env_config=gravity)       # doctest: +SKIP
        """
        for name, value in (("env_config", env_config), ("eval_env_config", eval_env_config)):
            check_env_config(name, value)
        self._schedules = (env_config, eval_env_config)
        try:
            return run_book.trainer_run(
                self,
                stop_conditions,
                steps_per_eval,
                max_iterations,
                on_iteration,
                evaluate_at_end,
                eval_every_iterations,
            )
        finally:
            self._schedules = (None, None)

    def eval(
        self,
        env_config: Mapping[str, Any] | None = None,
        deterministic: bool = True,
        episodes: int | None = None,
    ) -> dict[str, float]:
        """Runs one whole episode in each of ``episodes`` separate evaluation envs.

        Args:
          env_config: keyword arguments for the evaluation envs, or a schedule
            ``config(counters)`` (default: :meth:`run`'s ``eval_env_config``, else the
            training envs' config).
          deterministic: act with the deterministic policy (else explore).
          episodes: evaluation episodes (default ``eval_episodes``).

        Returns:
          ``{"return_mean", "return_min", "return_max", "length_mean", "episodes"}``.
        """
        start = time.perf_counter()
        count = self._eval_episodes if episodes is None else episodes
        env_config = self._schedules[1] if env_config is None else env_config
        check_env_config("env_config", env_config)
        config = (
            self._env_config
            if env_config is None
            else dict(resolve_env_config(env_config, self.counters))
        )
        cache_key = repr((sorted(config.items()), count))
        if cache_key not in self._eval_runners:
            if len(self._eval_runners) >= EVAL_RUNNERS_KEPT:  # a schedule makes new ones
                self._eval_runners.pop(next(iter(self._eval_runners))).close()
            self._eval_runners[cache_key] = EnvRunner(
                self._env, num_envs=count, vectorization=self._vectorization, env_config=config
            )
        policy = self._algorithm.exploit if deterministic else self._algorithm.explore
        self._key, eval_key = jax.random.split(self._key)
        runner = self._eval_runners[cache_key]
        module = self._module_state()
        return self._book.evaluate(runner, policy, module, eval_key, self._seed, start)

    def save(self, checkpoint: CheckpointManager, metrics: Mapping[str, Any] | None = None) -> int:
        """Saves everything needed to continue exactly: learner state, counters, env
        state, the trainer's key, the replay buffer, the lagged behaviour params
        and :attr:`history` (which stop conditions such as ``Plateau`` read).

        Args:
          checkpoint: the manager to save with.
          metrics: metrics to rank the step by (default: the last iteration's stats).

        Returns:
          The step saved (the iteration count).

        Example:
          >>> ckpt = jl.CheckpointManager("runs/ppo")                   # doctest: +SKIP
          >>> trainer.save(ckpt)                                         # doctest: +SKIP
        """
        feed_extra, feed_arrays = self._feed.save()
        arrays = {"key": jax.random.key_data(self._key), **feed_arrays}
        if self._behaviour_params:
            arrays["behaviour_params"] = list(self._behaviour_params)
        extra = {"runner": self._runner.get_state(), **feed_extra}
        return self._book.save(checkpoint, self._state, self.learner, extra, arrays, metrics)

    def restore(self, checkpoint: CheckpointManager, step: int | None = None) -> None:
        """Continues from a step saved by :meth:`save` (default: the latest).

        The learner state, counters, history, trainer key, replay buffer and
        the environments' state come back, so the next iterations (and when
        :meth:`run`'s stop conditions hold) equal those of an uninterrupted
        run (for environments whose state the runner can capture; see
        :meth:`~jaxlearner.training.env_runner.EnvRunner.get_state`).

        Raises:
          ValueError: when the step was not saved by a trainer.
        """
        restored = self._book.restore(checkpoint, self.learner, step)
        self._state = restored.state
        restore_runner(self._runner, restored.extra["runner"])
        self._key = jax.random.wrap_key_data(jax.numpy.asarray(restored.arrays["key"]))
        self._feed.restore(restored.extra, restored.arrays)
        self._behaviour_params.clear()
        self._behaviour_params.extend(restored.arrays.get("behaviour_params", []))

    @property
    def env_steps_per_iteration(self) -> int:
        """Env steps one :meth:`step` collects: the rollout length times the envs (a run
        with ``MaxEnvSteps(n)`` ends at the first multiple of it at or past ``n``)."""
        return self._rollout_steps * self._runner.num_envs

    def _wait_for_compile_ahead(self) -> None:
        """Waits for the first update's compilation on its thread, if it is still running."""
        if self._ahead is not None:
            self._ahead.wait()
            self._ahead = None

    def close(self) -> None:
        """Closes the environments and the writers."""
        self._wait_for_compile_ahead()
        self._runner.close()
        for runner in self._eval_runners.values():
            runner.close()
        self._book.close()


@jax.jit
def _split_in_three(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``jax.random.split(key, 3)`` as three arrays in one dispatch (unpacked eagerly, the
    split and the three slices are four)."""
    first, second, third = jax.random.split(key, 3)
    return first, second, third
