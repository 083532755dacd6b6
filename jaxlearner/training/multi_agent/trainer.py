"""MultiAgentTrainer: PPO policies trained together on a PettingZoo parallel environment.

RLlib's multi-agent setup, the jaxlearner way. A ``policy_mapping_fn`` maps
each of the env's agents to a policy, a module of one multi-module
:class:`~jaxlearner.Learner` (:func:`~jaxlearner.algorithms.multi_agent_ppo`):
agents mapped to one policy share it (parameter sharing), agents mapped to
policies of their own learn independently. Each iteration

1. steps ``num_envs`` copies of the env, every policy acting once per step,
   in one jitted call, for all its agents in all copies
   (:class:`~jaxlearner.training.multi_agent.runner.MultiAgentEnvRunner`);
2. postprocesses each trained policy's ``[T, N * k]`` experience (GAE along
   each agent's stream), all policies in one jitted call;
3. calls one ``learner.update(state, {policy_id: batch, ...})``; the
   policies not in ``policies_to_train`` act but are not updated. Each
   policy's env-step counters (and ``env_steps`` schedules) count the steps
   of its live agents, RLlib's agent steps.

Everything that can be wrong with the mapping (an agent the env does not
have, a policy the learner does not have, agents of one policy with
different spaces, a policy to train that no agent uses, too few rows for a
minibatch) is reported before anything compiles.

Example:
  >>> import jaxlearner as jl
  >>> from jaxlearner.training.multi_agent.trainer import MultiAgentTrainer, policy_spaces
  >>> from jaxlearner.training.multi_agent.env import GridSpread
  >>> mapping = {"agent_0": "blue", "agent_1": "red"}
  >>> learner = jl.algorithms.multi_agent_ppo(
  ...     policy_spaces(GridSpread, mapping),
  ...     {"train_batch_size": 200, "minibatch_size": 100, "num_epochs": 2})
  >>> trainer = MultiAgentTrainer(learner, GridSpread, mapping, num_envs=2)
  >>> stats = trainer.step()
  >>> sorted(k for k in stats if k.endswith("/total_loss"))
  ['__all__/total_loss', 'blue/total_loss', 'red/total_loss']
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, final

import jax
import numpy as np

from jaxlearner.algorithms.algorithm import ActFn, OnPolicyAlgorithm
from jaxlearner.algorithms.multi_agent_ppo import (
    algorithms_for,
    policies_of,
    with_policies_to_train,
)
from jaxlearner.checkpoint.manager import CheckpointManager
from jaxlearner.core.learner import Learner
from jaxlearner.core.metrics import ALL_MODULES
from jaxlearner.core.registry import learner_from_recipe
from jaxlearner.core.state import LearnerState
from jaxlearner.training.driver import (
    EVAL_EPISODES,
    Driver,
    Iteration,
    RestoredRun,
    Saved,
    check_eval_episodes,
    no_run_options,
)
from jaxlearner.training.evaluation import EVAL_BLOCK, episode_results, first_episodes
from jaxlearner.training.multi_agent.env import ParallelEnvFactory, make_parallel_envs
from jaxlearner.training.multi_agent.policy_mapping import (
    PolicyMapping,
    agent_groups,
    check_agent_spaces,
    policy_spaces,
)
from jaxlearner.training.multi_agent.runner import (
    MultiAgentEnvRunner,
    MultiAgentPolicy,
    MultiAgentRollout,
)
from jaxlearner.training.multi_agent.stats import MultiAgentCounters, episode_stats
from jaxlearner.training.outputs.loggers import Writer, flatten_metrics
from jaxlearner.training.outputs.run_config import describe_env, run_config

__all__ = [
    "MultiAgentCounters",
    "MultiAgentEngine",
    "MultiAgentTrainer",
    "PolicyMapping",
    "agent_groups",
    "load_policy",
    "policy_spaces",
]


def MultiAgentTrainer(
    learner: Learner,
    env: ParallelEnvFactory,
    policy_mapping_fn: PolicyMapping,
    *,
    policies_to_train: Collection[str] | None = None,
    num_envs: int = 4,
    env_config: Mapping[str, Any] | None = None,
    eval_episodes: int = EVAL_EPISODES,
    seed: int = 0,
    writers: Sequence[Writer] = (),
    state: LearnerState | None = None,
    progress: bool | None = None,
) -> Driver[MultiAgentEngine]:
    """Trains the PPO policies of a multi-agent learner on a PettingZoo parallel env.

    Returns a :class:`~jaxlearner.training.driver.Driver` over a :class:`MultiAgentEngine`
    (``trainer.engine``: its ``groups``, ``policies_to_train``, ``algorithms`` and
    ``runner``). A step collects experience with every policy and updates the trained ones;
    its row holds ``iteration``, ``env_steps``, ``agent_steps``, ``episodes``,
    ``num_episodes`` (this iteration), ``env_steps_per_s``, ``time_this_iter_s``,
    ``time_compile_s``, ``time_total_s``; over the last 100 episodes
    ``episode_return_mean`` / ``_min`` / ``_max`` (an episode's return is the sum of its
    agents' returns, as in RLlib), ``episode_len_mean``,
    ``agent_episode_return_mean/<agent_id>`` and ``module_episode_return_mean/<policy_id>``
    (the mean over its agents); and the learner's metrics per policy
    (``"<policy_id>/total_loss"``, ``"<policy_id>/entropy"``, ...,
    ``"__all__/num_grad_steps"``). ``trainer.eval(deterministic=..., episodes=...)`` also
    reports ``agent_return_mean/<agent_id>``; :func:`load_policy` puts a saved policy in.

    Args:
      learner: a learner from :func:`~jaxlearner.algorithms.multi_agent_ppo`.
      env: a class or factory making a new ``pettingzoo.ParallelEnv`` per call.
      policy_mapping_fn: ``agent_id -> policy_id`` (or a dict), for every one
        of the env's ``possible_agents``; agents mapped to one policy share it.
      policies_to_train: the policies that get gradient steps (default: the
        learner's ``modules_to_train`` among the mapped policies); the
        learner is rebuilt to train just these.
      num_envs: env copies stepped together.
      env_config: keyword arguments for the env factory.
      eval_episodes: episodes per evaluation (one per evaluation copy).
      seed: seeds the learner's init, the envs and the trainer's key.
      writers: metric writers (console, JSON lines, TensorBoard, MLflow).
      state: a learner state to start from instead of ``learner.init``.
      progress: show a progress bar in ``run``; ``None`` shows one on a terminal.

    Returns:
      The trainer, a :class:`~jaxlearner.training.driver.Driver` over a
      :class:`MultiAgentEngine`.

    Raises:
      KeyError, ValueError: before anything compiles, for an agent the env
        does not have or a policy the learner does not have (the valid ids
        are listed), agents whose spaces differ from their policy's, a policy
        to train that no agent maps to, a ``train_batch_size`` that does not
        split over ``num_envs``, or fewer rows per policy than a minibatch.

    Example:
      >>> trainer = MultiAgentTrainer(learner, GridSpread,
      ...                             lambda agent: "shared", num_envs=8)  # doctest: +SKIP
      >>> history = trainer.run(max_iterations=50)                        # doctest: +SKIP
    """
    if not isinstance(learner, Learner):
        raise TypeError(
            "MultiAgentTrainer needs a jl.Learner from jl.algorithms.multi_agent_ppo; got "
            f"{type(learner).__name__}."
        )
    init_key, key = jax.random.split(jax.random.key(seed))
    engine = MultiAgentEngine(
        learner,
        env,
        policy_mapping_fn,
        policies_to_train=policies_to_train,
        num_envs=num_envs,
        env_config=env_config,
        eval_episodes=eval_episodes,
        seed=seed,
        key=key,
    )
    learner = engine.learner
    start = learner.init(init_key) if state is None else learner.placement.put(state)
    config = run_config(
        learner, env=describe_env(env), num_envs=num_envs, seed=seed, eval_episodes=eval_episodes
    )
    counters = MultiAgentCounters()
    return Driver(engine, start, counters, writers=writers, progress=progress, config=config)


@final
class MultiAgentEngine:
    """A :func:`MultiAgentTrainer`'s engine: the env copies, every policy's act and
    postprocess, one joint update.

    Made by :func:`MultiAgentTrainer`, whose arguments it takes (less the driver's
    ``writers``, ``progress`` and ``state``), with its own ``key``.

    Attributes:
      learner: the learner being trained (training ``policies_to_train``).
      groups: ``{policy_id: [agent_id, ...]}``, the agents each policy acts for.
      policies_to_train: the policies that get gradient steps.
      algorithms: each mapped policy's act and postprocess functions.
      runner: the runner stepping the ``num_envs`` training env copies.
      env_steps_per_iteration: the rollout length times the copies.
    """

    owner = "MultiAgentTrainer"
    counters_key = "multi_agent_trainer"

    def __init__(
        self,
        learner: Learner,
        env: ParallelEnvFactory,
        policy_mapping_fn: PolicyMapping,
        *,
        policies_to_train: Collection[str] | None,
        num_envs: int,
        env_config: Mapping[str, Any] | None,
        eval_episodes: int,
        seed: int,
        key: jax.Array,
    ) -> None:
        policies = policies_of(learner)
        check_eval_episodes(eval_episodes)
        probe = make_parallel_envs(env, 1, env_config)[0]
        try:
            groups = agent_groups(probe.possible_agents, policy_mapping_fn, learner.module_ids)
            check_agent_spaces(probe, groups, policies)
        finally:
            probe.close()
        if policies_to_train is not None:
            learner = with_policies_to_train(learner, policies_to_train)
            unused = sorted(set(policies_to_train) - set(groups))
            if unused:
                raise ValueError(
                    f"policies_to_train names {unused}, to which no agent maps; the mapped "
                    f"policies are {sorted(groups)}."
                )
        trained = tuple(m for m in groups if m in learner.modules_to_train)
        if not trained:
            raise ValueError(
                f"No policy to train: the learner trains {sorted(learner.modules_to_train)} and "
                f"the agents map to {sorted(groups)}."
            )
        self.learner: Learner = learner
        self.policies_to_train = trained
        self.groups = {m: list(agents) for m, agents in groups.items()}
        self.algorithms = {m: a for m, a in algorithms_for(learner).items() if m in groups}
        any_algorithm = next(iter(self.algorithms.values()))
        self._rollout_steps = any_algorithm.rollout_steps(num_envs)
        self.env_steps_per_iteration = self._rollout_steps * num_envs
        _check_minibatches(learner, groups, trained, self.env_steps_per_iteration)
        self._env, self._env_config = env, dict(env_config or {})
        self.runner = MultiAgentEnvRunner(
            env, groups, num_envs=num_envs, env_config=env_config, seed=seed
        )
        self._explore = _joint_policy({m: a.explore for m, a in self.algorithms.items()})
        self._exploit = _joint_policy({m: a.exploit for m, a in self.algorithms.items()})
        self._postprocess = jax.jit(_joint_postprocess(self.algorithms, trained))
        self._eval_runners: dict[int, MultiAgentEnvRunner] = {}
        self._eval_episodes = eval_episodes
        self._seed = seed
        self._key = key

    def _modules(self, state: LearnerState) -> dict[str, Any]:
        modules = self.learner.placement.get(state).modules
        return {m: modules[m] for m in self.groups}

    def iterate(
        self, state: LearnerState, counters: MultiAgentCounters
    ) -> tuple[LearnerState, Iteration]:
        """Collects experience with every policy and updates the trained ones."""
        self._key, sample_key = jax.random.split(self._key)
        modules = self._modules(state)
        rollout = self.runner.sample(self._explore, modules, self._rollout_steps, sample_key)
        experiences = {m: rollout.experience[m] for m in self.policies_to_train}
        # Each trained policy's batch folded into its observers' state, before postprocessing.
        state = self.learner.observe(state, experiences)
        modules = self._modules(state)
        trained = {m: modules[m] for m in self.policies_to_train}
        batches = self._postprocess(trained, experiences)
        # Each policy counts its agent steps; "__all__" the iteration's env steps, as RLlib's.
        env_steps = {m: rollout.agent_steps[m] for m in self.policies_to_train}
        env_steps[ALL_MODULES] = rollout.env_steps
        state, metrics = self.learner.update(state, batches, env_steps=env_steps)
        learner_metrics = flatten_metrics(jax.device_get(metrics))
        counters.count(rollout)
        counts = {
            "agent_steps": float(sum(counters.agent_steps.values())),
            "episodes": float(counters.episodes),
            "num_episodes": float(len(rollout.episode_returns)),
        }
        stats = {**episode_stats(counters, self.groups), **learner_metrics}
        return state, Iteration(rollout.env_steps, counts, stats)

    def run_options(self, **options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """None: ``run`` takes no options of its own here."""
        return no_run_options(self.owner, options)

    def evaluate(
        self,
        state: LearnerState,
        counters: MultiAgentCounters,
        deterministic: bool = True,
        episodes: int | None = None,
    ) -> dict[str, float]:
        """Runs one whole episode in each of ``episodes`` separate evaluation copies, reset
        with ``seed + 10_000 + iteration``.

        Args:
          state: the learner state.
          counters: the run's counters.
          deterministic: act with every policy's deterministic action (else sample).
          episodes: evaluation episodes (default ``eval_episodes``).

        Returns:
          ``return_mean`` / ``_min`` / ``_max`` (sums over agents),
          ``length_mean``, ``episodes`` and ``agent_return_mean/<agent_id>``.
        """
        count = self._eval_episodes if episodes is None else episodes
        if count not in self._eval_runners:
            self._eval_runners[count] = MultiAgentEnvRunner(
                self._env, self.groups, num_envs=count, env_config=self._env_config
            )
        runner = self._eval_runners[count]
        runner.reset(self._seed + 10_000 + counters.iteration)
        policy = self._exploit if deterministic else self._explore
        modules = self._modules(state)

        def sample() -> MultiAgentRollout:
            self._key, eval_key = jax.random.split(self._key)
            return runner.sample(policy, modules, EVAL_BLOCK, eval_key)

        episodes = first_episodes(sample, count)
        stats = episode_results(
            [sum(returns.values()) for returns, _ in episodes.values()],
            [length for _, length in episodes.values()],
        )
        for agent in (a for agents in self.groups.values() for a in agents):
            values = [returns[agent] for returns, _ in episodes.values() if agent in returns]
            if values:
                stats[f"agent_return_mean/{agent}"] = float(np.mean(values))
        return stats

    def saved(self, state: LearnerState) -> Saved:
        """The learner state (every policy's module), the envs' state, the groups and the key."""
        extra = {"runner": self.runner.get_state(), "groups": self.groups}
        return Saved(state, extra, {"key": jax.random.key_data(self._key)})

    def restored(self, state: LearnerState, run: RestoredRun) -> LearnerState:
        """Takes back the envs' state and the key."""
        self.runner.set_state(run.extra["runner"])
        self._key = jax.random.wrap_key_data(jax.numpy.asarray(run.arrays["key"]))
        return run.state

    def close(self) -> None:
        """Closes the environments."""
        self.runner.close()
        for runner in self._eval_runners.values():
            runner.close()


def load_policy(
    trainer: Driver[MultiAgentEngine],
    checkpoint: CheckpointManager,
    policy_id: str,
    *,
    step: int | None = None,
    into: str | None = None,
) -> None:
    """Replaces one policy's module state in ``trainer.state`` by one saved in a checkpoint.

    The checkpoint may come from another learner (other policies, another
    mapping): it is restored into a learner rebuilt from its own recipe,
    and policy ``policy_id``'s module state (params, optimizer state,
    counters) is put in place of policy ``into`` (default: the same id)
    of the trainer's state. E.g. to start a run from a policy trained
    elsewhere, or to freeze an earlier copy of a policy as an opponent.

    Args:
      trainer: a :func:`MultiAgentTrainer`.
      checkpoint: the checkpoint to read the policy from.
      policy_id: the policy's id in the checkpoint.
      step: the step (default: the latest).
      into: the policy of ``trainer`` to replace (default: ``policy_id``).

    Raises:
      KeyError: when the checkpoint has no policy ``policy_id`` or this
        learner no policy ``into`` (the valid ids are listed).
      ValueError: when the two modules' structures, shapes or dtypes differ.

    Example:
      >>> load_policy(trainer, jl.CheckpointManager("runs/selfplay"), "main",
      ...             into="opponent")                                 # doctest: +SKIP
    """
    learner = trainer.learner
    into = policy_id if into is None else into
    if into not in learner.module_ids:
        raise KeyError(
            f"This learner has no policy {into!r}; policies: {list(learner.module_ids)}."
        )
    metadata = checkpoint.metadata(step)
    if policy_id not in metadata["modules"]:
        raise KeyError(
            f"The checkpoint has no policy {policy_id!r}; policies: {list(metadata['modules'])}."
        )
    saved_learner = learner_from_recipe(metadata["recipe"])
    saved = checkpoint.restore(saved_learner, metadata["step"]).modules[policy_id]
    state = learner.placement.get(trainer.state)
    if _signature(saved) != _signature(state.modules[into]):
        raise ValueError(
            f"The saved policy {policy_id!r} does not fit policy {into!r} of this learner: "
            "their models or optimizers differ (tree structure, shapes or dtypes)."
        )
    state = state.replace(modules={**state.modules, into: saved})
    trainer.state = learner.placement.put(state)


def _signature(tree: Any) -> tuple[Any, list[tuple[tuple[int, ...], Any]]]:
    """A pytree's structure and its leaves' shapes and dtypes."""
    leaves, structure = jax.tree.flatten(tree)
    return structure, [(np.shape(leaf), getattr(leaf, "dtype", None)) for leaf in leaves]


def _check_minibatches(
    learner: Learner, groups: Mapping[str, list[str]], trained: Sequence[str], steps: int
) -> None:
    minibatch_size = learner.config.minibatch_size
    for policy_id in trained:
        rows = steps * len(groups[policy_id])
        if minibatch_size is not None and rows < minibatch_size:
            raise ValueError(
                f"Policy {policy_id!r} gets {rows} rows per iteration ({steps} env steps x "
                f"{len(groups[policy_id])} agents), fewer than minibatch_size={minibatch_size}; "
                "raise train_batch_size or lower minibatch_size."
            )


def _joint_policy(acts: Mapping[str, ActFn]) -> MultiAgentPolicy:
    """One function acting for every policy: ``policy(modules, obs, key) -> {id: out}``."""
    ids = tuple(acts)

    def policy(modules, obs, key):
        keys = jax.random.split(key, len(ids))
        return {m: acts[m](modules[m], obs[m], keys[i]) for i, m in enumerate(ids)}

    return policy


def _joint_postprocess(
    algorithms: Mapping[str, OnPolicyAlgorithm], trained: Sequence[str]
) -> Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]:
    """Every trained policy's postprocess in one function (one jit)."""

    def postprocess(modules, experiences):
        return {m: algorithms[m].postprocess(modules[m], experiences[m]) for m in trained}

    return postprocess
