"""OfflineTrainer: step / eval / run of an offline algorithm (BC, MARWIL) on a recorded dataset.

The offline counterpart of :class:`~jaxlearner.Trainer`, with the same
surface (``step``, ``eval``, ``run``, ``save``, ``restore``, ``history``,
``counters``), so stop conditions, writers and the command line work alike.
The dataset's steps become the algorithm's rows once, on the device; each
:meth:`OfflineTrainer.step` runs one compiled loop of gradient updates on
batches drawn from them (:func:`~jaxlearner.algorithms.offline.make_offline_updates`);
:meth:`OfflineTrainer.eval` plays whole episodes in the environment with the
deterministic policy. ``env_steps`` counts the dataset rows trained on (as
RLlib counts rows read from a dataset), so ``MaxEnvSteps`` and
``steps_per_eval`` are in rows.

Everything is checked before anything compiles: the algorithm's kind, the
dataset's spaces against the learner's and the environment's, and one batch of
rows against the learner's batch layout. A dataset of fewer rows than
``train_batch_size`` trains on all its rows in each update, with a
:class:`~jaxlearner.errors.SmallDatasetWarning`.

Example:
  >>> import jaxlearner as jl
  >>> dataset = jl.load_dataset("data/cartpole")                          # doctest: +SKIP
  >>> learner = jl.algorithms.bc(*dataset.spaces(), {"lr": 1e-3})          # doctest: +SKIP
  >>> trainer = jl.OfflineTrainer(learner, dataset)                        # doctest: +SKIP
  >>> history = trainer.run([jl.RewardBound(475.0)], steps_per_eval=50_000)  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, final

import jax
import numpy as np

from jaxlearner.algorithms import algorithm_for
from jaxlearner.algorithms.algorithm import OfflineAlgorithm
from jaxlearner.algorithms.offline import fit_batch, make_offline_updates, updates_per_iteration
from jaxlearner.checkpoint.manager import CheckpointManager
from jaxlearner.core.learner import Learner
from jaxlearner.core.placement import DevicesLike
from jaxlearner.core.state import LearnerState
from jaxlearner.errors import SmallDatasetWarning
from jaxlearner.training import run_book
from jaxlearner.training.compile_clock import Stopwatch
from jaxlearner.training.env_runner import EnvLike, EnvRunner
from jaxlearner.training.offline.datasets import Dataset, check_dataset_spaces, load_dataset
from jaxlearner.training.outputs.loggers import Writer, flatten_metrics
from jaxlearner.training.outputs.run_config import describe_env, run_config
from jaxlearner.training.trainer import TrainerCounters


@final
class OfflineTrainer:
    """Trains an offline algorithm on a dataset; evaluates it in a gymnasium environment.

    Args:
      learner: a learner from ``jl.algorithms.bc/marwil(...)`` (its algorithm
        is derived from it) or an :class:`~jaxlearner.algorithms.OfflineAlgorithm`.
      dataset: a :class:`~jaxlearner.training.offline.datasets.Dataset` or a dataset folder.
      env: the evaluation environment (an id, an env factory, ...); default: the
        dataset's ``env``.
      env_config: keyword arguments for ``gymnasium.make`` or the factory.
      eval_episodes: episodes per :meth:`eval` (one per evaluation env).
      seed: seeds the learner's init, the batches drawn and the evaluations.
      devices: as for :class:`~jaxlearner.Trainer`.
      writers: metric writers.
      progress: show a progress bar; ``None`` shows one on a terminal.
      state: a learner state to start from instead of ``learner.init``.

    Raises:
      TypeError: for an algorithm that is not offline.
      ValueError: when the dataset's spaces differ from the learner's or the
        environment's, or the dataset has no ``env`` and none is given.

    Warns:
      SmallDatasetWarning: when the dataset holds fewer rows than
        ``train_batch_size``: each update then trains on every row
        (:func:`~jaxlearner.algorithms.offline.fit_batch`), and :attr:`algorithm`
        says how many.

    Example:
      >>> dataset = jl.load_dataset("data/cartpole")                      # doctest: +SKIP
      >>> learner = jl.algorithms.marwil(*dataset.spaces(), {"beta": 0.5})  # doctest: +SKIP
      >>> trainer = jl.OfflineTrainer(learner, dataset, eval_episodes=5)   # doctest: +SKIP
      >>> trainer.step()["default_policy/policy_loss"]                     # doctest: +SKIP
    """

    def __init__(
        self,
        learner: Learner | OfflineAlgorithm,
        dataset: Dataset | str | os.PathLike[str],
        env: EnvLike | None = None,
        *,
        env_config: Mapping[str, Any] | None = None,
        eval_episodes: int = run_book.EVAL_EPISODES,
        seed: int = 0,
        devices: DevicesLike = None,
        writers: Sequence[Writer] = (),
        progress: bool | None = None,
        state: LearnerState | None = None,
    ) -> None:
        algorithm = learner if isinstance(learner, OfflineAlgorithm) else None
        if algorithm is None and isinstance(learner, Learner):
            found = algorithm_for(learner)
            algorithm = found if isinstance(found, OfflineAlgorithm) else None
        if algorithm is None:
            name = getattr(learner, "name", None) or type(learner).__name__
            raise TypeError(
                f"OfflineTrainer trains offline algorithms (bc, marwil); got {name}. Train "
                "algorithms that collect their own experience with jl.Trainer."
            )
        if devices is not None:
            algorithm = algorithm.with_learner(algorithm.learner.on(devices))
        self._algorithm = algorithm
        run_book.check_eval_episodes(eval_episodes)
        self._dataset = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
        recipe = self.learner.recipe or {}
        check_dataset_spaces(
            self._dataset,
            recipe.get("observation_space"),
            recipe.get("action_space"),
            against="the learner",
        )
        env = self._dataset.env if env is None else env
        if env is None:
            raise ValueError(
                "The dataset names no environment to evaluate in; pass env= (a gymnasium id or "
                "an env factory)."
            )
        self._eval_runner = EnvRunner(env, num_envs=eval_episodes, env_config=env_config)
        check_dataset_spaces(
            self._dataset, self._eval_runner.observation_space, self._eval_runner.action_space
        )
        algorithm = self._algorithm = _fit_batch(algorithm, self._dataset.num_steps)
        self._updates_count = updates_per_iteration(algorithm, self._dataset.num_steps)
        self._seed = seed
        init_key, self._key = jax.random.split(jax.random.key(seed))
        if state is None:
            # A state of its own sees the whole dataset once, as one environment's stream.
            state = self.learner.init(init_key)
            experience = _as_experience(self._dataset.columns)
            self._state = self.learner.observe(state, {algorithm.module_id: experience})
        else:
            self._state = self.learner.placement.put(state)
        rows = jax.jit(algorithm.rows)(self._dataset.columns)
        first = jax.tree.map(lambda column: column[: algorithm.train_batch_size], rows)
        self.learner.validate(self._state, {algorithm.module_id: first})
        self._rows = self.learner.placement.put(rows)
        self._updates = jax.jit(
            make_offline_updates(algorithm, self._dataset.num_steps), donate_argnums=0
        )
        config = run_config(
            self.learner,
            env=describe_env(env),
            seed=seed,
            eval_episodes=eval_episodes,
            dataset_rows=self._dataset.num_steps,
            train_batch_size=algorithm.train_batch_size,
        )
        self._book = run_book.RunBook(
            TrainerCounters(),
            owner="OfflineTrainer",
            writers=writers,
            progress=progress,
            config=config,
        )

    algorithm = run_book.trainer_algorithm
    learner = run_book.trainer_learner

    @property
    def dataset(self) -> Dataset:
        """The dataset trained on."""
        return self._dataset

    state = run_book.trainer_state

    @property
    def rows_per_iteration(self) -> int:
        """Rows trained on per :meth:`step`: updates times ``train_batch_size``."""
        return self._updates_count * self._algorithm.train_batch_size

    counters = run_book.book_attribute(
        "counters",
        """The run's progress (iterations, seconds and the dataset rows trained on, counted as
        ``env_steps``); no episodes are played, so the episode counters stay empty.""",
    )

    history = run_book.book_attribute(
        "history",
        """Each iteration's stats with the evaluations of :meth:`run` joined (as
        ``"eval/..."``); saved with checkpoints.""",
    )

    request_stop = run_book.trainer_request_stop
    stop_requested = run_book.trainer_stop_requested

    def step(self) -> dict[str, float]:
        """One iteration: :attr:`rows_per_iteration` rows in gradient updates of one batch each.

        Returns:
          A flat dict of ``iteration``, ``env_steps`` (rows trained on, lifetime),
          ``env_steps_per_s`` (rows per second), ``time_this_iter_s``, ``time_total_s`` and the
          learner's metrics of the last update, flattened.
        """
        watch = Stopwatch()
        self._key, update_key = jax.random.split(self._key)
        self._state, metrics = self._updates(self._state, self._rows, update_key)
        learner_metrics = flatten_metrics(jax.device_get(metrics))
        elapsed, compiling = watch.read()
        counters = self.counters
        counters.iteration += 1
        counters.env_steps += self.rows_per_iteration
        counters.time_total_s += elapsed
        stats = {
            **run_book.iteration_stats(counters, self.rows_per_iteration, elapsed, {}, compiling),
            **learner_metrics,
        }
        self._book.record(stats)
        return stats

    def eval(self, deterministic: bool = True) -> dict[str, float]:
        """One whole episode in each evaluation env, from a fresh reset.

        Returns:
          ``{"return_mean", "return_min", "return_max", "length_mean", "episodes"}``.
        """
        start = time.perf_counter()
        policy = self._algorithm.exploit if deterministic else self._algorithm.explore
        self._key, eval_key = jax.random.split(self._key)
        module = self.learner.placement.get(self._state).modules[self._algorithm.module_id]
        return self._book.evaluate(self._eval_runner, policy, module, eval_key, self._seed, start)

    run = run_book.trainer_run

    def save(self, checkpoint: CheckpointManager, metrics: Mapping[str, Any] | None = None) -> int:
        """Saves the learner state, counters, history, key and seed; returns the step (the
        iteration).

        The dataset is not copied: the checkpoint records its size and source.
        """
        extra = {
            "seed": self._seed,
            "dataset": {
                "num_steps": self._dataset.num_steps,
                "num_episodes": self._dataset.num_episodes,
                "env": self._dataset.env,
                "source": dict(self._dataset.source),
            },
        }
        arrays = {"key": jax.random.key_data(self._key)}
        return self._book.save(checkpoint, self._state, self.learner, extra, arrays, metrics)

    def restore(self, checkpoint: CheckpointManager, step: int | None = None) -> None:
        """Continues from a step saved by :meth:`save` (default: the latest).

        Raises:
          ValueError: when the step holds no offline trainer's state, or was
            trained on a dataset of another size.
        """
        restored = self._book.restore(checkpoint, self.learner, step, self._check_dataset)
        self._state = restored.state
        self._key = jax.random.wrap_key_data(np.asarray(restored.arrays["key"]))
        self._seed = int(restored.extra.get("seed", self._seed))  # evaluations reset from it

    def _check_dataset(self, extra: Mapping[str, Any]) -> None:
        saved_rows = extra.get("dataset", {}).get("num_steps")
        if saved_rows is not None and saved_rows != self._dataset.num_steps:
            raise ValueError(
                f"The checkpoint was trained on a dataset of {saved_rows} steps; this one holds "
                f"{self._dataset.num_steps}. Resume with the same dataset."
            )

    def close(self) -> None:
        """Closes the evaluation environments and the writers."""
        self._eval_runner.close()
        self._book.close()


def _fit_batch(algorithm: OfflineAlgorithm, num_rows: int) -> OfflineAlgorithm:
    """:func:`~jaxlearner.algorithms.offline.fit_batch`, warning when it cuts the batch."""
    fitted = fit_batch(algorithm, num_rows)
    if fitted is not algorithm:
        warnings.warn(
            f"The dataset holds {num_rows} rows, fewer than {algorithm.name}'s "
            f"train_batch_size ({algorithm.train_batch_size}): each update trains on all "
            f"{num_rows} rows (set train_batch_size to choose fewer).",
            SmallDatasetWarning,
            stacklevel=3,
        )
    return fitted


def _as_experience(columns: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A dataset's ``[N, ...]`` steps as the experience of one environment, ``[N, 1, ...]``,
    every step valid (what :meth:`~jaxlearner.Learner.observe` takes)."""
    experience = {name: np.expand_dims(column, 1) for name, column in columns.items()}
    experience["valid"] = np.ones(experience["rewards"].shape, bool)
    return experience
