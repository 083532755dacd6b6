"""OfflineTrainer: an offline algorithm (BC, MARWIL) on a recorded dataset, as a
:class:`~jaxlearner.training.driver.Driver` over an :class:`OfflineEngine`.

The offline counterpart of :func:`~jaxlearner.Trainer`: the same driver (``step``,
``eval``, ``run``, ``save``, ``restore``, ``history``, ``counters``), so stop conditions,
writers and the command line work alike. The dataset's steps become the algorithm's rows
once, on the device; each step runs one compiled loop of gradient updates on batches
drawn from them (:func:`~jaxlearner.algorithms.offline.make_offline_updates`); each
evaluation plays whole episodes in the environment with the deterministic policy.
``env_steps`` counts the dataset rows trained on (as RLlib counts rows read from a
dataset), so ``MaxEnvSteps`` and ``steps_per_eval`` are in rows.

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
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, final

import jax
import numpy as np

from jaxlearner.algorithms import algorithm_for
from jaxlearner.algorithms.algorithm import OfflineAlgorithm
from jaxlearner.algorithms.offline import fit_batch, make_offline_updates, updates_per_iteration
from jaxlearner.core.learner import Learner
from jaxlearner.core.placement import DevicesLike
from jaxlearner.core.state import LearnerState
from jaxlearner.errors import SmallDatasetWarning
from jaxlearner.training.driver import (
    EVAL_EPISODES,
    Driver,
    Iteration,
    RestoredRun,
    Saved,
    check_eval_episodes,
    no_run_options,
)
from jaxlearner.training.env_runner import EnvLike, EnvRunner, evaluate
from jaxlearner.training.offline.datasets import Dataset, check_dataset_spaces, load_dataset
from jaxlearner.training.outputs.loggers import Writer, flatten_metrics
from jaxlearner.training.outputs.run_config import describe_env, run_config
from jaxlearner.training.trainer_counters import TrainerCounters


def OfflineTrainer(
    learner: Learner | OfflineAlgorithm,
    dataset: Dataset | str | os.PathLike[str],
    env: EnvLike | None = None,
    *,
    env_config: Mapping[str, Any] | None = None,
    eval_episodes: int = EVAL_EPISODES,
    seed: int = 0,
    devices: DevicesLike = None,
    writers: Sequence[Writer] = (),
    progress: bool | None = None,
    state: LearnerState | None = None,
) -> Driver[OfflineEngine]:
    """Trains an offline algorithm on a dataset; evaluates it in a gymnasium environment.

    Returns a :class:`~jaxlearner.training.driver.Driver` over an :class:`OfflineEngine`
    (``trainer.engine``: its ``algorithm``, ``dataset`` and ``rows_per_iteration``). A step
    is ``OfflineEngine.rows_per_iteration`` rows in gradient updates of one batch each;
    its row holds ``iteration``, ``env_steps`` (rows trained on, lifetime),
    ``env_steps_per_s`` (rows per second), ``time_this_iter_s``, ``time_compile_s``,
    ``time_total_s`` and the learner's metrics of the last update, flattened. No episodes
    are played in training, so the episode counters stay empty.
    ``trainer.eval(deterministic=...)`` plays one whole episode in each evaluation env.

    Args:
      learner: a learner from ``jl.algorithms.bc/marwil(...)`` (its algorithm
        is derived from it) or an :class:`~jaxlearner.algorithms.OfflineAlgorithm`.
      dataset: a :class:`~jaxlearner.training.offline.datasets.Dataset` or a dataset folder.
      env: the evaluation environment (an id, an env factory, ...); default: the
        dataset's ``env``.
      env_config: keyword arguments for ``gymnasium.make`` or the factory.
      eval_episodes: episodes per evaluation (one per evaluation env).
      seed: seeds the learner's init, the batches drawn and the evaluations.
      devices: as for :func:`~jaxlearner.Trainer`.
      writers: metric writers.
      progress: show a progress bar; ``None`` shows one on a terminal.
      state: a learner state to start from instead of ``learner.init``.

    Returns:
      The trainer, a :class:`~jaxlearner.training.driver.Driver` over an
      :class:`OfflineEngine`.

    Raises:
      TypeError: for an algorithm that is not offline.
      ValueError: when the dataset's spaces differ from the learner's or the
        environment's, or the dataset has no ``env`` and none is given.

    Warns:
      SmallDatasetWarning: when the dataset holds fewer rows than
        ``train_batch_size``: each update then trains on every row
        (:func:`~jaxlearner.algorithms.offline.fit_batch`), and the engine's
        ``algorithm`` says how many.

    Example:
      >>> dataset = jl.load_dataset("data/cartpole")                      # doctest: +SKIP
      >>> learner = jl.algorithms.marwil(*dataset.spaces(), {"beta": 0.5})  # doctest: +SKIP
      >>> trainer = jl.OfflineTrainer(learner, dataset, eval_episodes=5)   # doctest: +SKIP
      >>> trainer.step()["default_policy/policy_loss"]                     # doctest: +SKIP
    """
    engine = OfflineEngine(
        learner,
        dataset,
        env,
        env_config=env_config,
        eval_episodes=eval_episodes,
        seed=seed,
        devices=devices,
    )
    start = engine.initial_state(state)
    config = run_config(
        engine.learner,
        env=describe_env(engine.env),
        seed=seed,
        eval_episodes=eval_episodes,
        dataset_rows=engine.dataset.num_steps,
        train_batch_size=engine.algorithm.train_batch_size,
    )
    counters = TrainerCounters()
    return Driver(engine, start, counters, writers=writers, progress=progress, config=config)


@final
class OfflineEngine:
    """An :func:`OfflineTrainer`'s engine: the dataset's rows on the device, one compiled
    loop of updates per iteration, an evaluation env runner.

    Made by :func:`OfflineTrainer`, whose arguments it takes (less the driver's
    ``writers``, ``progress`` and ``state``); everything is checked before anything
    compiles.

    Attributes:
      algorithm: the algorithm (its ``train_batch_size`` fitted to a small dataset).
      learner: the learner being trained, the algorithm's.
      dataset: the dataset trained on.
      env: the evaluation environment.
      rows_per_iteration: rows trained on per step: updates times ``train_batch_size``
        (also ``env_steps_per_iteration``: rows count as env steps).
    """

    owner = "OfflineTrainer"
    counters_key = "trainer"

    def __init__(
        self,
        learner: Learner | OfflineAlgorithm,
        dataset: Dataset | str | os.PathLike[str],
        env: EnvLike | None,
        *,
        env_config: Mapping[str, Any] | None,
        eval_episodes: int,
        seed: int,
        devices: DevicesLike,
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
        check_eval_episodes(eval_episodes)
        self.dataset = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
        recipe = algorithm.learner.recipe or {}
        check_dataset_spaces(
            self.dataset,
            recipe.get("observation_space"),
            recipe.get("action_space"),
            against="the learner",
        )
        env = self.dataset.env if env is None else env
        if env is None:
            raise ValueError(
                "The dataset names no environment to evaluate in; pass env= (a gymnasium id or "
                "an env factory)."
            )
        self.env = env
        self._eval_runner = EnvRunner(env, num_envs=eval_episodes, env_config=env_config)
        check_dataset_spaces(
            self.dataset, self._eval_runner.observation_space, self._eval_runner.action_space
        )
        algorithm = self.algorithm = _fit_batch(algorithm, self.dataset.num_steps)
        self.learner: Learner = algorithm.learner
        updates = updates_per_iteration(algorithm, self.dataset.num_steps)
        self.rows_per_iteration = self.env_steps_per_iteration = (
            updates * algorithm.train_batch_size
        )
        self._seed = seed
        self._init_key, self._key = jax.random.split(jax.random.key(seed))
        self._updates = jax.jit(
            make_offline_updates(algorithm, self.dataset.num_steps), donate_argnums=0
        )
        self._rows = algorithm.learner.placement.put(jax.jit(algorithm.rows)(self.dataset.columns))

    def initial_state(self, state: LearnerState | None) -> LearnerState:
        """The state to start from, with the rows on the device checked against it.

        A state of its own (``state=None``) sees the whole dataset once, as one
        environment's stream, in its observers.
        """
        algorithm, learner = self.algorithm, self.learner
        if state is None:
            state = learner.init(self._init_key)
            experience = _as_experience(self.dataset.columns)
            state = learner.observe(state, {algorithm.module_id: experience})
        else:
            state = learner.placement.put(state)
        first = jax.tree.map(lambda column: column[: algorithm.train_batch_size], self._rows)
        learner.validate(state, {algorithm.module_id: first})
        return state

    def iterate(
        self, state: LearnerState, counters: TrainerCounters
    ) -> tuple[LearnerState, Iteration]:
        """``rows_per_iteration`` rows in gradient updates of one batch each."""
        self._key, update_key = jax.random.split(self._key)
        state, metrics = self._updates(state, self._rows, update_key)
        return state, Iteration(
            self.rows_per_iteration, {}, flatten_metrics(jax.device_get(metrics))
        )

    def run_options(self, **options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """None: ``run`` takes no options of its own here."""
        return no_run_options(self.owner, options)

    def evaluate(
        self, state: LearnerState, counters: TrainerCounters, deterministic: bool = True
    ) -> dict[str, float]:
        """One whole episode in each evaluation env, from a fresh reset (``seed + 10_000 +
        iteration``).

        Returns:
          ``{"return_mean", "return_min", "return_max", "length_mean", "episodes"}``.
        """
        policy = self.algorithm.exploit if deterministic else self.algorithm.explore
        self._key, eval_key = jax.random.split(self._key)
        module = self.learner.placement.get(state).modules[self.algorithm.module_id]
        seed = self._seed + 10_000 + counters.iteration
        return evaluate(self._eval_runner, policy, module, eval_key, seed=seed)

    def saved(self, state: LearnerState) -> Saved:
        """The learner state, the key, and the seed and the dataset's size and source (the
        dataset is not copied)."""
        extra = {
            "seed": self._seed,
            "dataset": {
                "num_steps": self.dataset.num_steps,
                "num_episodes": self.dataset.num_episodes,
                "env": self.dataset.env,
                "source": dict(self.dataset.source),
            },
        }
        return Saved(state, extra, {"key": jax.random.key_data(self._key)})

    def restored(self, state: LearnerState, run: RestoredRun) -> LearnerState:
        """Takes back the key and the seed (evaluations reset from it).

        Raises:
          ValueError: for a step trained on a dataset of another size, naming both sizes.
        """
        saved_rows = run.extra.get("dataset", {}).get("num_steps")
        if saved_rows is not None and saved_rows != self.dataset.num_steps:
            raise ValueError(
                f"The checkpoint was trained on a dataset of {saved_rows} steps; this one holds "
                f"{self.dataset.num_steps}. Resume with the same dataset."
            )
        self._key = jax.random.wrap_key_data(np.asarray(run.arrays["key"]))
        self._seed = int(run.extra.get("seed", self._seed))
        return run.state

    def close(self) -> None:
        """Closes the evaluation environments."""
        self._eval_runner.close()


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
