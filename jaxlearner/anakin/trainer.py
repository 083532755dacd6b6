"""AnakinTrainer: the Trainer's step / eval / run / save / restore over one compiled Anakin run.

:func:`~jaxlearner.anakin.train.make_anakin` makes a whole training run one pure
function; :class:`AnakinTrainer` drives it in blocks of ``iterations_per_step``
iterations, each block one compiled call, so that a run over a pure-JAX
environment (``"gymnax:Breakout-MinAtar"``) gets what a gymnasium run gets from
:class:`~jaxlearner.Trainer`: the same :class:`~jaxlearner.training.run_book.RunBook`
(counters, a history row per step, the writers, stop conditions, the evaluation
cadence, a stop request honoured between blocks) and checkpoints that
resume exactly. ``jaxlearner train ALGO --env gymnax:NAME`` runs one.

The whole :class:`~jaxlearner.anakin.AnakinState` is saved: the learner state as a
learner checkpoint, and the environments' states, observations, the run's key, the
replay buffer and a recurrent memory as extra arrays, so a restored run's next blocks
equal those of the run it continues, bit for bit.

A step's row holds ``iteration`` (Anakin iterations so far), ``env_steps`` (lifetime),
``episodes``, ``num_episodes`` (ended in the step), ``episode_return_mean`` and
``episode_len_mean`` (over the last :data:`RECENT_EPISODES` episodes or more: whole
iterations are kept, since the compiled rollout returns each iteration's mean),
``env_steps_per_s``, ``time_this_iter_s`` (the step's seconds), ``time_compile_s`` and
``time_total_s``, and the learner's metrics of the step's last update
(``"default_policy/total_loss"``, ...). One row per step, not per iteration: an iteration
of one env step (DQN on one environment) would otherwise write a row per env step.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any, final

import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.algorithms.algorithm import Algorithm
from jaxlearner.anakin.envs import make as make_env
from jaxlearner.anakin.envs.environment import Environment
from jaxlearner.anakin.iteration import AnakinState
from jaxlearner.anakin.train import AnakinConfig, make_anakin
from jaxlearner.checkpoint.leaves import is_key, stored_leaf
from jaxlearner.checkpoint.manager import CheckpointManager
from jaxlearner.training import run_book
from jaxlearner.training.compile_clock import Stopwatch
from jaxlearner.training.outputs.loggers import Writer
from jaxlearner.training.outputs.run_config import run_config

RECENT_EPISODES = 100
"""Episodes (at least) behind ``episode_return_mean``, as the Trainer's window."""


@dataclasses.dataclass
class AnakinCounters:
    """The run's progress, saved with checkpoints (JSON).

    Attributes:
      iteration: Anakin iterations done (a rollout and its learning each).
      env_steps: env steps collected over the run's lifetime.
      episodes: episodes ended in training rollouts.
      time_total_s: seconds spent in ``step`` and ``eval``.
      recent: ``[return_sum, length_sum, episodes]`` of the last iterations that ended
        episodes, as few as hold :data:`RECENT_EPISODES`.
    """

    iteration: int = 0
    env_steps: int = 0
    episodes: int = 0
    time_total_s: float = 0.0
    recent: list[list[float]] = dataclasses.field(default_factory=list)

    def count(self, episodes: float, return_mean: float, length_mean: float) -> None:
        """Counts the ``episodes`` episodes one iteration ended, with these means."""
        if not episodes:
            return
        self.episodes += int(episodes)
        self.recent.append([return_mean * episodes, length_mean * episodes, episodes])
        while len(self.recent) > 1 and sum(r[2] for r in self.recent[1:]) >= RECENT_EPISODES:
            self.recent.pop(0)

    def episode_stats(self) -> dict[str, float]:
        """``episode_return_mean`` and ``episode_len_mean`` over ``recent`` (none before
        an episode ended)."""
        if not self.recent:
            return {}
        returns, lengths, count = (sum(column) for column in zip(*self.recent, strict=True))
        return {"episode_return_mean": returns / count, "episode_len_mean": lengths / count}


@final
class AnakinTrainer:
    """Trains a built-in algorithm on a pure-JAX environment, one compiled block per step.

    Args:
      algorithm: an on- or off-policy algorithm (``jl.algorithms.build(...)``) built for
        the environment's spaces.
      env: a pure-JAX :class:`~jaxlearner.anakin.envs.Environment`, or an id that
        :func:`jaxlearner.anakin.envs.make` takes (``"CartPole-v1"``,
        ``"gymnax:Breakout-MinAtar"``).
      num_envs: environments stepped together (vmapped).
      iterations_per_step: Anakin iterations in one :meth:`step`, one compiled call and one
        row of :attr:`history`. Stop conditions, evaluations, a stop request and
        checkpoints fall between steps; ``run``'s ``max_iterations`` and
        ``eval_every_iterations`` count steps.
      eval_episodes: fresh environments per :meth:`eval`, one whole episode each.
      seed: seeds the learner's init, the environments and the run's key.
      writers: metric writers (console, JSON lines, TensorBoard, MLflow).
      progress: show a progress bar in :meth:`run`; ``None`` shows one on a terminal.

    Raises:
      TypeError: for an algorithm or environment of the wrong kind.
      ValueError: for counts that are not positive ints, spaces that differ from the
        algorithm's, or a rollout that does not fit ``num_envs``.

    Example:
      >>> import jaxlearner as jl
      >>> from jaxlearner import anakin
      >>> env = anakin.envs.make("CartPole-v1")
      >>> ppo = jl.algorithms.build("ppo", env.observation_space, env.action_space,
      ...     {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1,
      ...      "hidden_sizes": (8,)})
      >>> trainer = anakin.AnakinTrainer(ppo, env, num_envs=4, iterations_per_step=2,
      ...     progress=False)
      >>> rows = trainer.run([jl.MaxEnvSteps(256)], steps_per_eval=128)
      >>> len(rows), trainer.counters.iteration, trainer.counters.env_steps
      (2, 4, 256)
    """

    def __init__(
        self,
        algorithm: Algorithm,
        env: Environment | str,
        *,
        num_envs: int = 16,
        iterations_per_step: int = 1,
        eval_episodes: int = 16,
        seed: int = 0,
        writers: Sequence[Writer] = (),
        progress: bool | None = None,
    ) -> None:
        run_book.check_eval_episodes(eval_episodes)
        if type(iterations_per_step) is not int or iterations_per_step < 1:
            raise ValueError(
                f"iterations_per_step must be a positive int; got {iterations_per_step!r}."
            )
        if type(seed) is not int:
            raise TypeError(f"AnakinTrainer's seed must be an int; got {seed!r}.")
        env_id = env if isinstance(env, str) else type(env).__name__
        env = make_env(env) if isinstance(env, str) else env
        config = AnakinConfig(
            num_envs=num_envs,
            num_iterations=iterations_per_step,
            eval_envs=eval_episodes,
            evaluate=False,
        )
        anakin = make_anakin(algorithm, env, config)
        self._algorithm, self._seed = algorithm, seed
        self._steps_per_iteration = algorithm.rollout_steps(num_envs) * num_envs
        self._run = jax.jit(anakin.run, donate_argnums=0)
        self._evaluate = jax.jit(anakin.evaluate)
        self._eval_episodes, self._iterations_per_step = eval_episodes, iterations_per_step
        self._state: AnakinState = jax.jit(anakin.init)(jax.random.key(seed))
        settings = {"num_envs": num_envs, "seed": seed, "eval_episodes": eval_episodes}
        self._book = run_book.RunBook(
            AnakinCounters(),
            owner="AnakinTrainer",
            writers=writers,
            progress=progress,
            config=run_config(algorithm.learner, env=env_id, **settings),
        )
        self.counters.env_steps = int(self._state.env_steps)  # an off-policy warm-up's

    algorithm = run_book.trainer_algorithm
    learner = run_book.trainer_learner

    @property
    def state(self) -> AnakinState:
        """The :class:`~jaxlearner.anakin.AnakinState` of the run (learner, environments, key,
        replay buffer)."""
        return self._state

    counters = run_book.book_attribute(
        "counters",
        """The run's progress (iterations, env steps, episodes, seconds and the recent
        episodes' sums); checkpoints keep it.""",
    )

    history = run_book.book_attribute(
        "history",
        """The dicts :meth:`step` returned, with :meth:`run`'s evaluations joined as
        ``"eval/..."``; stop conditions read it, checkpoints keep it.""",
    )

    request_stop = run_book.trainer_request_stop
    stop_requested = run_book.trainer_stop_requested

    @property
    def env_steps_per_iteration(self) -> int:
        """Env steps one :meth:`step` collects: its iterations' rollouts together (a run
        with ``MaxEnvSteps(n)`` ends at the first multiple of it at or past ``n``)."""
        return self._steps_per_iteration * self._iterations_per_step

    def step(self) -> dict[str, float]:
        """``iterations_per_step`` iterations in one compiled call, recorded as one row.

        Returns:
          The step's row, also appended to :attr:`history` (see the module's docstring
          for the names).

        Raises:
          NonFiniteError: when the last update's loss or params went NaN or infinite (the
            row is recorded first).
        """
        watch = Stopwatch()
        self._state, metrics = self._run(self._state)
        metrics = jax.device_get(metrics)
        elapsed, compiling = watch.read()
        return self._record(metrics, elapsed, compiling)

    def _record(
        self, metrics: Mapping[str, Any], elapsed: float, compiling: float
    ) -> dict[str, float]:
        """Counts a block's iterations and records its row."""
        counters = self.counters
        episodes = np.asarray(metrics["num_episodes"])
        for i in np.flatnonzero(episodes):  # iterations without episodes only count
            counters.count(
                float(episodes[i]),
                float(metrics["episode_return_mean"][i]),
                float(metrics["episode_length_mean"][i]),
            )
        counters.iteration = int(metrics["iteration"][-1])
        counters.env_steps = int(metrics["env_steps"][-1])
        counters.time_total_s += elapsed
        counts = {"episodes": float(counters.episodes), "num_episodes": float(episodes.sum())}
        steps = self._steps_per_iteration * len(episodes)
        stats = run_book.iteration_stats(counters, steps, elapsed, counts, compiling)
        stats.update(counters.episode_stats())
        stats.update({name: float(values[-1]) for name, values in metrics.items() if "/" in name})
        self._book.record(stats)
        return stats

    run = run_book.trainer_run

    def eval(self) -> dict[str, float]:
        """One whole episode in each of ``eval_episodes`` fresh environments, deterministic.

        The environments' seeds depend on the run's seed and the iteration only (never the
        training environments'), so evaluating leaves the training run as it was.

        Returns:
          ``{"return_mean", "return_min", "return_max", "length_mean", "episodes"}``.
        """
        start = time.perf_counter()
        key = jax.random.fold_in(jax.random.key(self._seed + 10_000), self.counters.iteration)
        module = self._state.learner.modules[self._algorithm.module_id]
        results = {k: float(v) for k, v in jax.device_get(self._evaluate(module, key)).items()}
        results["episodes"] = float(self._eval_episodes)
        self.counters.time_total_s += time.perf_counter() - start
        self._book.write_evaluation(results)
        return results

    def save(self, checkpoint: CheckpointManager, metrics: Mapping[str, Any] | None = None) -> int:
        """Saves the whole run: the learner state, counters, history, and the environments,
        observations, key, replay buffer and recurrent memory as extra arrays.

        Returns:
          The step saved (the iteration count).
        """
        state = self._state.replace(learner=None)
        leaves = [np.asarray(stored_leaf(leaf)) for leaf in jax.tree.leaves(state)]
        arrays = {"anakin": {str(i): leaf for i, leaf in enumerate(leaves)}}
        extra = {"anakin": {"leaves": len(leaves)}}
        return self._book.save(
            checkpoint, self._state.learner, self.learner, extra, arrays, metrics
        )

    def restore(self, checkpoint: CheckpointManager, step: int | None = None) -> None:
        """Continues from a step saved by :meth:`save` (default: the latest), exactly.

        Raises:
          ValueError: when the step was not saved by an AnakinTrainer, or by one of another
            shape (environments, buffer).
        """
        paths, treedef = jax.tree_util.tree_flatten_with_path(self._state.replace(learner=None))
        expected = [leaf for _, leaf in paths]

        def check(extra: Mapping[str, Any]) -> None:
            saved = extra.get("anakin", {}).get("leaves")
            if saved != len(expected):
                raise ValueError(
                    f"This checkpoint step was not saved by an AnakinTrainer of this run's shape "
                    f"(it holds {saved} run arrays, this run has {len(expected)})."
                )

        restored = self._book.restore(checkpoint, self.learner, step, check)
        saved = restored.arrays["anakin"]
        leaves = [
            _loaded(saved[str(i)], like, jax.tree_util.keystr(path))
            for i, (path, like) in enumerate(paths)
        ]
        self._state = jax.tree.unflatten(treedef, leaves).replace(learner=restored.state)

    def close(self) -> None:
        """Closes the writers."""
        self._book.close()


def _loaded(saved: Any, like: jax.Array, name: str) -> jax.Array:
    """A saved leaf back as ``like``'s kind of array (a typed key from its data), checked."""
    value = jnp.asarray(saved)
    if is_key(like):
        value = jax.random.wrap_key_data(value, impl=jax.random.key_impl(like))
    if value.shape != like.shape or value.dtype != like.dtype:
        raise ValueError(
            f"The step's state{name} is {value.dtype}{list(value.shape)}; this run's is "
            f"{like.dtype}{list(like.shape)} (another num_envs, config or environment)."
        )
    return value
