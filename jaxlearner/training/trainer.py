"""Trainer: a built-in algorithm's learner on gymnasium envs, as a
:class:`~jaxlearner.training.driver.Driver` over an :class:`EnvEngine`.

An iteration of :class:`EnvEngine` is short enough to read and copy: it collects
experience with an :class:`~jaxlearner.training.env_runner.EnvRunner` and calls the
jitted update; its evaluation runs whole episodes with the deterministic policy. What
happens to each rollout depends on the algorithm's kind (a
:mod:`~jaxlearner.training.feeds` feed, chosen once): on-policy algorithms (PPO) train
once on each rollout; off-policy ones (DQN, SAC) store transitions in a device replay
buffer and run a compiled sample-and-update loop.

Every iteration's learner metrics are fetched from the device once, flattened
(``"default_policy/total_loss"``) and merged with the counters and episode statistics
into one flat row, which ``trainer.step()`` returns, keeps in ``trainer.history`` and
sends to the writers.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
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
from jaxlearner.core.learner import Learner
from jaxlearner.core.placement import DevicesLike
from jaxlearner.core.state import LearnerState, ModuleState
from jaxlearner.training.compile_ahead import compile_first_update
from jaxlearner.training.driver import (
    EVAL_EPISODES,
    Driver,
    Iteration,
    RestoredRun,
    Saved,
    check_eval_episodes,
    check_iterations_per_step,
)
from jaxlearner.training.env_runner import EnvLike, EnvRunner, evaluate
from jaxlearner.training.env_runners import EnvRunnersConfig
from jaxlearner.training.feeds import make_feed
from jaxlearner.training.memory_stats import memory_stats
from jaxlearner.training.outputs.loggers import Writer, flatten_metrics
from jaxlearner.training.outputs.run_config import describe_env, run_config
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


def Trainer(
    learner: Learner | Algorithm,
    env: EnvLike,
    *,
    num_envs: int = 8,
    vectorization: Literal["sync", "async"] = "sync",
    env_config: Mapping[str, Any] | None = None,
    eval_episodes: int = EVAL_EPISODES,
    seed: int = 0,
    devices: DevicesLike = None,
    writers: Sequence[Writer] = (),
    progress: bool | None = None,
    state: LearnerState | None = None,
    compile_ahead: bool = True,
    num_env_runners: int = 0,
    env_runners: EnvRunnersConfig | None = None,
    iterations_per_step: int = 1,
) -> Driver[EnvEngine]:
    """Trains a built-in algorithm on a gymnasium environment.

    Returns a :class:`~jaxlearner.training.driver.Driver` (``step``, ``eval``, ``run``,
    ``save``, ``restore``, ``close``, ``counters``, ``history``, ``state``) over an
    :class:`EnvEngine` (``trainer.engine``: its ``algorithm``, ``runner`` and ``buffer``).
    ``trainer.step(env_config=...)`` rebuilds the training envs with a new config from that
    step on; ``trainer.eval(env_config=..., deterministic=..., episodes=...)``;
    ``trainer.run(..., env_config=schedule, eval_env_config=...)`` (:meth:`EnvEngine.iterate`
    and :meth:`EnvEngine.evaluate` say more). A step's row holds ``iteration``,
    ``env_steps`` (lifetime), ``episodes``, ``num_episodes`` (this iteration),
    ``env_steps_per_s``, ``time_this_iter_s``, ``time_compile_s``, ``time_total_s``,
    ``episode_return_mean`` / ``_min`` / ``_max`` and ``episode_len_mean`` over the last
    100 episodes, the learner's metrics flattened (``"default_policy/total_loss"``,
    ``"__all__/num_grad_steps"``, ...), and
    :func:`~jaxlearner.training.memory_stats.memory_stats` (``"memory/..."``).

    Args:
      learner: a learner from ``jl.algorithms.ppo/dqn/sac(...)`` (its
        algorithm is derived from it: :func:`~jaxlearner.algorithms.algorithm_for`),
        or an :class:`~jaxlearner.algorithms.OnPolicyAlgorithm` or
        :class:`~jaxlearner.algorithms.OffPolicyAlgorithm`.
      env: a gymnasium id, an env instance, a factory or a vector env.
      num_envs: sub-environments stepped together.
      vectorization: ``"sync"`` or ``"async"``.
      env_config: keyword arguments for ``gymnasium.make`` or the factory.
      eval_episodes: episodes per evaluation (one per evaluation env).
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
      iterations_per_step: iterations (one rollout and what the algorithm learns from it
        each) in one ``step``, recorded as one row, as
        :func:`~jaxlearner.anakin.AnakinTrainer`'s: for an off-policy algorithm of one-step
        rollouts, a row per env step costs more than the step (RLlib's
        ``min_sample_timesteps_per_iteration``). The iterations are those of steps of one:
        the same keys, rollouts and updates. The row's counts and episode statistics cover
        them all, its learner metrics are the last update's; stop conditions, evaluations
        and checkpoints fall between steps.

    Returns:
      The trainer, a :class:`~jaxlearner.training.driver.Driver` over an :class:`EnvEngine`.

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
      >>> trainer.engine.runner.num_envs                              # doctest: +SKIP
      8
    """
    init_key, key = jax.random.split(jax.random.key(seed))
    engine = EnvEngine(
        learner,
        env,
        num_envs=num_envs,
        vectorization=vectorization,
        env_config=env_config,
        eval_episodes=eval_episodes,
        seed=seed,
        devices=devices,
        compile_ahead=compile_ahead,
        num_env_runners=num_env_runners,
        env_runners=env_runners,
        init_key=init_key,
        key=key,
        iterations_per_step=iterations_per_step,
    )
    placed = engine.learner
    # learner.init places its state; a state given from elsewhere is placed here.
    start = placed.init(init_key) if state is None else placed.placement.put(state)
    config = run_config(
        placed,
        env=describe_env(env),
        num_envs=num_envs if num_env_runners else engine.runner.num_envs,
        seed=seed,
        eval_episodes=eval_episodes,
        vectorization=vectorization,
        **({"num_env_runners": num_env_runners} if num_env_runners else {}),
        **({"iterations_per_step": iterations_per_step} if iterations_per_step != 1 else {}),
    )
    counters = TrainerCounters()
    return Driver(engine, start, counters, writers=writers, progress=progress, config=config)


@final
class EnvEngine:
    """A :func:`Trainer`'s engine: gymnasium envs (or Ray runners of them) and the
    algorithm's feed.

    Made by :func:`Trainer`, whose arguments it takes (less the driver's ``writers``,
    ``progress`` and ``state``), with the keys ``init_key`` (the learner's init, the
    compile-ahead) and ``key`` (the engine's own, split at each use).

    Attributes:
      algorithm: the algorithm being trained (its learner, act functions and config).
      learner: the learner being trained, the algorithm's.
      runner: the training env runner (an :class:`~jaxlearner.training.env_runner.EnvRunner`,
        or the Ray runners of ``num_env_runners > 0``).
      env_steps_per_iteration: env steps one ``step`` collects: the rollout length times
        the envs times ``iterations_per_step``.
    """

    owner = "Trainer"
    counters_key = "trainer"

    def __init__(
        self,
        learner: Learner | Algorithm,
        env: EnvLike,
        *,
        num_envs: int,
        vectorization: Literal["sync", "async"],
        env_config: Mapping[str, Any] | None,
        eval_episodes: int,
        seed: int,
        devices: DevicesLike,
        compile_ahead: bool,
        num_env_runners: int,
        env_runners: EnvRunnersConfig | None,
        init_key: jax.Array,
        key: jax.Array,
        iterations_per_step: int = 1,
    ) -> None:
        check_iterations_per_step(iterations_per_step)
        offline = isinstance(learner, OfflineAlgorithm)
        algorithm = learner if isinstance(learner, Algorithm) or offline else algorithm_for(learner)
        if not isinstance(algorithm, Algorithm):  # an offline algorithm collects nothing
            raise TypeError(
                f"{algorithm.name} trains on a recorded dataset, not on its own experience; use "
                "jl.OfflineTrainer(learner, dataset)."
            )
        if devices is not None:
            algorithm = algorithm.with_learner(algorithm.learner.on(devices))
        self.algorithm = algorithm
        self.learner: Learner = algorithm.learner
        check_eval_episodes(eval_episodes)
        self._env, self._env_config = env, dict(env_config or {})
        self._vectorization = vectorization
        self._remote = (num_env_runners, env_runners)
        runner = self.runner = self._make_runner(num_envs, self._env_config, seed)
        try:
            self._rollout_steps = algorithm.rollout_steps(runner.num_envs)
        except ValueError:
            runner.close()  # Ray runners' processes end with the error
            raise
        self._iterations_per_step = iterations_per_step
        self.env_steps_per_iteration = self._rollout_steps * runner.num_envs * iterations_per_step
        self._feed = make_feed(algorithm)
        self._key = key
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

    @property
    def buffer(self) -> Buffer | None:
        """The replay buffer of an off-policy algorithm (``None`` before the first step)."""
        return self._feed.buffer

    def _make_runner(self, num_envs: int, env_config: dict[str, Any], seed: int) -> Any:
        """The training runner (local or Ray's), its spaces checked against the learner's."""
        count, options = self._remote
        runner = make_training_runner(
            self.algorithm,
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

    def _module_state(self, state: LearnerState) -> ModuleState:
        return self.learner.placement.get(state).modules[self.algorithm.module_id]

    def _behaviour_module(self, state: LearnerState) -> ModuleState:
        """The module to collect with: the current one with the params of ``policy_lag``
        updates ago (fewer in the first iterations)."""
        module = self._module_state(state)
        if self._behaviour_params.maxlen == 1:
            return module
        # A copy, so that a learner donating its state cannot free the params kept here.
        self._behaviour_params.append(jax.tree.map(jax.numpy.copy, module.params))
        return module.replace(params=self._behaviour_params[0])

    def iterate(
        self,
        state: LearnerState,
        counters: TrainerCounters,
        env_config: EnvConfig | None = None,
    ) -> tuple[LearnerState, Iteration]:
        """Collects one rollout (with the params of ``policy_lag`` updates ago, for an
        on-policy algorithm that has one) and learns from it, ``iterations_per_step`` times.

        Args:
          state: the learner state.
          counters: the run's counters (the episodes are counted here).
          env_config: the training envs' config from this step on (a mapping, or a
            schedule ``config(counters)``; ``None``: as it is). A config that differs
            rebuilds the sub-environments with it (gymnasium envs take their settings when
            made) and resets them, so the episodes in flight end uncounted; nothing
            recompiles, and the spaces must stay the same.

        Raises:
          TypeError: for an ``env_config`` that is neither a mapping nor a callable.
          ValueError: when the reconfigured envs' spaces differ from the learner's.
        """
        self._reconfigure(env_config, counters)
        env_steps, episodes, metrics = 0, 0, None
        for _ in range(self._iterations_per_step):
            self._key, sample_key, update_key = _split_in_three(self._key)
            module = self._behaviour_module(state)
            rollout = self.runner.sample(
                self.algorithm.explore, module, self._rollout_steps, sample_key
            )
            before = counters.env_steps + env_steps
            if self._feed.updates(before, rollout.env_steps):
                self._wait_for_compile_ahead()
            state, learned = self._feed.learn(
                state, module, rollout.experience(), rollout.env_steps, before, update_key
            )
            metrics = learned if learned else metrics
            counters.count(rollout)
            env_steps += rollout.env_steps
            episodes += len(rollout.episode_returns)
        learner_metrics = flatten_metrics(jax.device_get(metrics)) if metrics else {}
        counts = {"episodes": float(counters.episodes), "num_episodes": float(episodes)}
        stats = {
            **episode_stats(counters),
            **learner_metrics,
            **memory_stats(self._feed.buffer),
            **runner_metrics(self.runner),
        }
        return state, Iteration(env_steps, counts, stats, iterations=self._iterations_per_step)

    def _reconfigure(self, env_config: EnvConfig | None, counters: TrainerCounters) -> None:
        """Rebuilds the training envs when ``env_config`` (resolved) differs from theirs."""
        if env_config is None:
            return
        config = dict(resolve_env_config(env_config, counters))
        if config == self._env_config:
            return
        seed = self._seed + 20_000 + counters.iteration
        if not isinstance(self.runner, EnvRunner):  # Ray runners: new actors, same pool
            try:
                self.runner.rebuild(config, seed)  # type: ignore[attr-defined]
                self._check_spaces(self.runner)
            except Exception:  # the envs' own error, or other spaces: the old envs again
                self.runner.rebuild(self._env_config, seed)  # type: ignore[attr-defined]
                raise
            self._env_config = config
            return
        runner = self._make_runner(self.runner.num_envs, config, seed)
        runner.share_compiled(self.runner)
        self.runner.close()
        self.runner, self._env_config = runner, config

    def run_options(
        self, env_config: EnvConfig | None = None, eval_env_config: EnvConfig | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``run``'s ``env_config`` (the training envs' config for each step: a mapping, or
        a schedule ``config(counters)`` read before each step, domain randomization over the
        run) and ``eval_env_config`` (the evaluation envs', default the training envs').

        Raises:
          TypeError: for a config that is neither a mapping nor a callable.
        """
        for name, value in (("env_config", env_config), ("eval_env_config", eval_env_config)):
            check_env_config(name, value)
        step = {} if env_config is None else {"env_config": env_config}
        evaluation = {} if eval_env_config is None else {"env_config": eval_env_config}
        return step, evaluation

    def evaluate(
        self,
        state: LearnerState,
        counters: TrainerCounters,
        env_config: EnvConfig | None = None,
        deterministic: bool = True,
        episodes: int | None = None,
    ) -> dict[str, float]:
        """Runs one whole episode in each of ``episodes`` separate evaluation envs, reset
        with ``seed + 10_000 + iteration`` (fresh episodes each time, never the training
        envs' seeds).

        Args:
          state: the learner state.
          counters: the run's counters.
          env_config: keyword arguments for the evaluation envs, or a schedule
            ``config(counters)`` (default: the training envs' config).
          deterministic: act with the deterministic policy (else explore).
          episodes: evaluation episodes (default ``eval_episodes``).

        Returns:
          ``{"return_mean", "return_min", "return_max", "length_mean", "episodes"}``.
        """
        count = self._eval_episodes if episodes is None else episodes
        check_env_config("env_config", env_config)
        config = (
            self._env_config
            if env_config is None
            else dict(resolve_env_config(env_config, counters))
        )
        cache_key = repr((sorted(config.items()), count))
        if cache_key not in self._eval_runners:
            if len(self._eval_runners) >= EVAL_RUNNERS_KEPT:  # a schedule makes new ones
                self._eval_runners.pop(next(iter(self._eval_runners))).close()
            self._eval_runners[cache_key] = EnvRunner(
                self._env, num_envs=count, vectorization=self._vectorization, env_config=config
            )
        policy = self.algorithm.exploit if deterministic else self.algorithm.explore
        self._key, eval_key = jax.random.split(self._key)
        runner = self._eval_runners[cache_key]
        module = self._module_state(state)
        return evaluate(
            runner, policy, module, eval_key, seed=self._seed + 10_000 + counters.iteration
        )

    def saved(self, state: LearnerState) -> Saved:
        """The learner state; the env state, the replay buffer's JSON; the key, the buffer and
        the lagged behaviour params as arrays."""
        feed_extra, feed_arrays = self._feed.save()
        arrays = {"key": jax.random.key_data(self._key), **feed_arrays}
        if self._behaviour_params:
            arrays["behaviour_params"] = list(self._behaviour_params)
        extra = {"runner": self.runner.get_state(), **feed_extra}
        return Saved(state, extra, arrays)

    def restored(self, state: LearnerState, run: RestoredRun) -> LearnerState:
        """Takes back the envs' state, the key, the replay buffer and the behaviour params."""
        restore_runner(self.runner, run.extra["runner"])
        self._key = jax.random.wrap_key_data(jax.numpy.asarray(run.arrays["key"]))
        self._feed.restore(run.extra, run.arrays)
        self._behaviour_params.clear()
        self._behaviour_params.extend(run.arrays.get("behaviour_params", []))
        return run.state

    def _wait_for_compile_ahead(self) -> None:
        """Waits for the first update's compilation on its thread, if it is still running."""
        if self._ahead is not None:
            self._ahead.wait()
            self._ahead = None

    def close(self) -> None:
        """Closes the environments (after the compile-ahead thread, if it still runs)."""
        self._wait_for_compile_ahead()
        self.runner.close()
        for runner in self._eval_runners.values():
            runner.close()


@jax.jit
def _split_in_three(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``jax.random.split(key, 3)`` as three arrays in one dispatch (unpacked eagerly, the
    split and the three slices are four)."""
    first, second, third = jax.random.split(key, 3)
    return first, second, third
