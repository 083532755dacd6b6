"""AnakinTrainer: the trainers' driver over one compiled Anakin run.

:func:`~jaxlearner.anakin.train.make_anakin` makes a whole training run one pure
function; :class:`AnakinEngine` runs it in blocks of ``iterations_per_step``
iterations, each block one compiled call, so that a run over a pure-JAX
environment (``"gymnax:Breakout-MinAtar"``) gets what a gymnasium run gets from
:func:`~jaxlearner.Trainer`: the same :class:`~jaxlearner.training.driver.Driver`
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
from collections.abc import Sequence
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
from jaxlearner.training.driver import (
    Driver,
    Iteration,
    RestoredRun,
    Saved,
    check_eval_episodes,
    check_iterations_per_step,
    no_run_options,
)
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


def AnakinTrainer(
    algorithm: Algorithm,
    env: Environment | str,
    *,
    num_envs: int = 16,
    iterations_per_step: int = 1,
    eval_episodes: int = 16,
    seed: int = 0,
    writers: Sequence[Writer] = (),
    progress: bool | None = None,
) -> Driver[AnakinEngine]:
    """Trains a built-in algorithm on a pure-JAX environment, one compiled block per step.

    Returns a :class:`~jaxlearner.training.driver.Driver` over an :class:`AnakinEngine`;
    its ``state`` is the whole :class:`~jaxlearner.anakin.AnakinState` of the run (learner,
    environments, key, replay buffer).

    Args:
      algorithm: an on- or off-policy algorithm (``jl.algorithms.build(...)``) built for
        the environment's spaces.
      env: a pure-JAX :class:`~jaxlearner.anakin.envs.Environment`, or an id that
        :func:`jaxlearner.anakin.envs.make` takes (``"CartPole-v1"``,
        ``"gymnax:Breakout-MinAtar"``).
      num_envs: environments stepped together (vmapped).
      iterations_per_step: Anakin iterations in one step, one compiled call and one
        row of the history. Stop conditions, evaluations, a stop request and
        checkpoints fall between steps; ``run``'s ``max_iterations`` and
        ``eval_every_iterations`` count steps.
      eval_episodes: fresh environments per evaluation, one whole episode each.
      seed: seeds the learner's init, the environments and the run's key.
      writers: metric writers (console, JSON lines, TensorBoard, MLflow).
      progress: show a progress bar in ``run``; ``None`` shows one on a terminal.

    Returns:
      The trainer, a :class:`~jaxlearner.training.driver.Driver` over an
      :class:`AnakinEngine`.

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
    check_eval_episodes(eval_episodes)
    check_iterations_per_step(iterations_per_step)
    if type(seed) is not int:
        raise TypeError(f"AnakinTrainer's seed must be an int; got {seed!r}.")
    env_id = env if isinstance(env, str) else type(env).__name__
    env = make_env(env) if isinstance(env, str) else env
    engine = AnakinEngine(algorithm, env, num_envs, iterations_per_step, eval_episodes, seed)
    start: AnakinState = engine.init(jax.random.key(seed))
    settings = {"num_envs": num_envs, "seed": seed, "eval_episodes": eval_episodes}
    config = run_config(algorithm.learner, env=env_id, **settings)
    counters = AnakinCounters(env_steps=int(start.env_steps))  # an off-policy warm-up's
    return Driver(engine, start, counters, writers=writers, progress=progress, config=config)


@final
class AnakinEngine:
    """An :func:`AnakinTrainer`'s engine: the compiled Anakin block and evaluation.

    Args:
      algorithm: as :func:`AnakinTrainer`'s.
      env: the environment (made).
      num_envs: environments stepped together.
      iterations_per_step: Anakin iterations per compiled block.
      eval_episodes: fresh environments per evaluation.
      seed: the run's seed (evaluations' keys fold it with the iteration).

    Attributes:
      algorithm: the algorithm being trained.
      learner: its learner.
      init: the compiled ``init(key) -> AnakinState``.
      env_steps_per_iteration: env steps one block collects, its iterations' rollouts
        together.
    """

    owner = "AnakinTrainer"
    counters_key = "trainer"

    def __init__(
        self,
        algorithm: Algorithm,
        env: Environment,
        num_envs: int,
        iterations_per_step: int,
        eval_episodes: int,
        seed: int,
    ) -> None:
        config = AnakinConfig(
            num_envs=num_envs,
            num_iterations=iterations_per_step,
            eval_envs=eval_episodes,
            evaluate=False,
        )
        anakin = make_anakin(algorithm, env, config)
        self.algorithm, self.learner, self._seed = algorithm, algorithm.learner, seed
        self._steps_per_iteration = algorithm.rollout_steps(num_envs) * num_envs
        self.env_steps_per_iteration = self._steps_per_iteration * iterations_per_step
        self.init = jax.jit(anakin.init)
        self._run = jax.jit(anakin.run, donate_argnums=0)
        self._evaluate = jax.jit(anakin.evaluate)
        self._eval_episodes = eval_episodes

    def iterate(
        self, state: AnakinState, counters: AnakinCounters
    ) -> tuple[AnakinState, Iteration]:
        """``iterations_per_step`` iterations in one compiled call, recorded as one row.

        The row's stats after the timing ones: ``episode_return_mean`` and
        ``episode_len_mean`` over the recent iterations' episodes, and the learner's metrics
        of the block's last update.
        """
        state, metrics = self._run(state)
        metrics = jax.device_get(metrics)
        episodes = np.asarray(metrics["num_episodes"])
        for i in np.flatnonzero(episodes):  # iterations without episodes only count
            counters.count(
                float(episodes[i]),
                float(metrics["episode_return_mean"][i]),
                float(metrics["episode_length_mean"][i]),
            )
        counts = {"episodes": float(counters.episodes), "num_episodes": float(episodes.sum())}
        stats = counters.episode_stats()
        stats.update({name: float(values[-1]) for name, values in metrics.items() if "/" in name})
        steps = self._steps_per_iteration * len(episodes)
        return state, Iteration(steps, counts, stats, iterations=len(episodes))

    def run_options(self, **options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """None: ``run`` takes no options of its own here."""
        return no_run_options(self.owner, options)

    def evaluate(self, state: AnakinState, counters: AnakinCounters) -> dict[str, float]:
        """One whole episode in each of ``eval_episodes`` fresh environments, deterministic.

        The environments' seeds depend on the run's seed and the iteration only (never the
        training environments'), so evaluating leaves the training run as it was.

        Returns:
          ``{"return_mean", "return_min", "return_max", "length_mean", "episodes"}``.
        """
        key = jax.random.fold_in(jax.random.key(self._seed + 10_000), counters.iteration)
        module = state.learner.modules[self.algorithm.module_id]
        results = {k: float(v) for k, v in jax.device_get(self._evaluate(module, key)).items()}
        results["episodes"] = float(self._eval_episodes)
        return results

    def saved(self, state: AnakinState) -> Saved:
        """The learner state as a learner checkpoint; the environments, observations, key,
        replay buffer and recurrent memory as extra arrays."""
        rest = state.replace(learner=None)
        leaves = [np.asarray(stored_leaf(leaf)) for leaf in jax.tree.leaves(rest)]
        arrays = {"anakin": {str(i): leaf for i, leaf in enumerate(leaves)}}
        extra = {"anakin": {"leaves": len(leaves)}}
        return Saved(state.learner, extra, arrays)

    def restored(self, state: AnakinState, run: RestoredRun) -> AnakinState:
        """The saved run, each array checked against ``state``'s.

        Raises:
          ValueError: for a step saved by another kind of trainer or a run of another shape
            (its count of run arrays, or an array's shape or dtype).
        """
        paths, treedef = jax.tree_util.tree_flatten_with_path(state.replace(learner=None))
        saved_count = run.extra.get("anakin", {}).get("leaves")
        if saved_count != len(paths):
            raise ValueError(
                f"This checkpoint step was not saved by an AnakinTrainer of this run's shape "
                f"(it holds {saved_count} run arrays, this run has {len(paths)})."
            )
        saved = run.arrays["anakin"]
        leaves = [
            _loaded(saved[str(i)], like, jax.tree_util.keystr(path))
            for i, (path, like) in enumerate(paths)
        ]
        return jax.tree.unflatten(treedef, leaves).replace(learner=run.state)

    def close(self) -> None:
        """Nothing to close: the environments are arrays."""


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
