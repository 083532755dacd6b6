"""Anakin: rollouts of pure-JAX environments and learner updates in one compiled function.

The Anakin architecture of Hessel et al. 2021 ("Podracer architectures for
scalable reinforcement learning", https://arxiv.org/abs/2104.06272): when the
environment is itself a JAX function, acting, learning and evaluating fit in
one XLA program, and a whole training run becomes a pure function
``train(key) -> (final_state, metrics)`` that ``jax.vmap`` turns into many
independent agents (seeds, hyperparameters) trained in one call; see
:mod:`jaxlearner.anakin.sweeps` for the helpers that do so over devices.

One training iteration, for a built-in :data:`~jaxlearner.algorithms.Algorithm`
and an :class:`~jaxlearner.anakin.envs.Environment`:

1. a rollout: ``algorithm.rollout_steps(num_envs)`` steps of ``num_envs``
   vmapped environments with ``algorithm.explore``, as a ``lax.scan`` (a
   recurrent algorithm's state is carried from step to step and from one
   iteration to the next, and reset where an episode starts);
2. an :class:`~jaxlearner.algorithms.OnPolicyAlgorithm` (PPO):
   ``algorithm.postprocess`` and one learner ``update``; an
   :class:`~jaxlearner.algorithms.OffPolicyAlgorithm` (DQN, SAC): the
   rollout's ``algorithm.transitions`` go into a device replay buffer, then
   ``updates_per_step x`` (steps collected) updates on batches sampled from it
   (:func:`~jaxlearner.algorithms.replay.off_policy.make_replay_updates`, the
   :func:`~jaxlearner.Trainer`'s loop too). Before the first iteration, the
   iterations in which the Trainer would only collect (fewer than
   ``learning_starts`` env steps so far) run in ``init``;
3. every ``eval_interval`` iterations a deterministic evaluation with
   ``algorithm.exploit``: the first episode of each of ``eval_envs`` fresh
   environments (unless ``AnakinConfig(evaluate=False)``, which leaves the
   evaluation out of the compiled program).

The learner update is the very same pure function the
:class:`~jaxlearner.Learner` jits (``learner.update_fn``); the rollout and
the evaluation come from :mod:`jaxlearner.anakin.rollouts`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import NamedTuple, Protocol, TypeAlias

import jax
import jax.numpy as jnp

from jaxlearner.algorithms.algorithm import Algorithm
from jaxlearner.algorithms.networks.spaces import check_recipe_spaces
from jaxlearner.anakin.envs.environment import Environment
from jaxlearner.anakin.iteration import (
    AnakinState,
    Metrics,
    make_iterate,
    make_learning,
    rollout_with_memory,
)
from jaxlearner.anakin.rollouts import EvaluateFn, initial_memory, make_evaluate
from jaxlearner.core.hyperparams import check_constant, with_hyperparams
from jaxlearner.core.one_at_a_time import one_at_a_time
from jaxlearner.core.packing import packed_scan

one_agent_at_a_time = one_at_a_time
"""Runs the learner's init once per key under ``jax.vmap`` on the CPU.

See :func:`~jaxlearner.core.one_at_a_time.one_at_a_time`.
"""

Hyperparams: TypeAlias = Mapping[str, jax.typing.ArrayLike]
"""``{name: scalar}`` as :func:`~jaxlearner.core.hyperparams.with_hyperparams` takes it."""


@dataclasses.dataclass(frozen=True)
class AnakinConfig:
    """The static shape of an Anakin run: changing a field recompiles it.

    Attributes:
      num_envs: environments each agent steps together (vmapped).
      num_iterations: training iterations per ``run`` (and per ``train``).
      eval_interval: iterations between deterministic evaluations, a divisor
        of ``num_iterations``; ``None`` evaluates once, after the last.
      eval_envs: fresh environments per evaluation; each runs one whole
        episode (its first), so short episodes are not over-represented.
      evaluate: whether ``run`` evaluates. ``False`` leaves the evaluation out
        of the compiled program (about a sixth of the HLO of PPO on CartPole,
        and of its compile time) and its ``eval/`` metrics out of the results;
        :attr:`Anakin.evaluate` can still evaluate a module on its own.
    """

    num_envs: int = 16
    num_iterations: int = 100
    eval_interval: int | None = None
    eval_envs: int = 16
    evaluate: bool = True

    def __post_init__(self) -> None:
        for name in ("num_envs", "num_iterations", "eval_envs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"AnakinConfig.{name} must be a positive int; got {value!r}.")
        if not isinstance(self.evaluate, bool):
            raise TypeError(f"AnakinConfig.evaluate must be a bool; got {self.evaluate!r}.")
        interval = self.eval_interval
        if interval is None:
            return
        if not self.evaluate:
            raise ValueError(
                f"AnakinConfig.eval_interval ({interval!r}) needs evaluate=True; with "
                "evaluate=False leave it None."
            )
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(
                f"AnakinConfig.eval_interval must be a positive int or None; got {interval!r}."
            )
        if self.num_iterations % interval:
            divisors = [
                d for d in range(1, self.num_iterations + 1) if self.num_iterations % d == 0
            ]
            raise ValueError(
                f"AnakinConfig.eval_interval ({interval}) must divide num_iterations "
                f"({self.num_iterations}); divisors: {divisors}."
            )

    @property
    def num_evals(self) -> int:
        """Evaluations per run (0 with ``evaluate=False``)."""
        if not self.evaluate:
            return 0
        return self.num_iterations // (self.eval_interval or self.num_iterations)


class InitFn(Protocol):
    """``init(key, hyperparams=None) -> state``: a fresh :class:`AnakinState` for one agent,
    with each ``{name: scalar}`` of ``hyperparams`` written into its learner state."""

    def __call__(self, key: jax.Array, hyperparams: Hyperparams | None = None) -> AnakinState: ...


class RunFn(Protocol):
    """``run(state) -> (state, metrics)``: every iteration from ``state``, one ``lax.scan``;
    metrics ``{name: [num_iterations]}`` and ``{"eval/...": [num_evaluations]}``."""

    def __call__(self, state: AnakinState) -> tuple[AnakinState, Metrics]: ...


class TrainFn(Protocol):
    """``train(key, hyperparams=None) -> (state, metrics)``: ``init`` then ``run``, pure, so
    ``jax.jit`` and ``jax.vmap`` over keys (seeds) and hyperparameters apply."""

    def __call__(
        self, key: jax.Array, hyperparams: Hyperparams | None = None
    ) -> tuple[AnakinState, Metrics]: ...


class Anakin(NamedTuple):
    """The pure functions of an Anakin run (as optax pairs ``init`` and ``update``).

    Attributes:
      init: ``init(key, hyperparams=None) -> state``: the learner's init, the
        hyperparameters written into it, fresh environments, and for an
        off-policy algorithm a replay buffer filled up to ``learning_starts``.
      run: ``run(state) -> (state, metrics)``: ``num_iterations`` iterations.
      evaluate: ``evaluate(module_state, key) -> {"return_mean", "return_min",
        "return_max", "length_mean"}`` (float32 scalars): the first episode of
        each of ``eval_envs`` fresh environments with the deterministic policy.
      train: ``train(key, hyperparams=None) -> run(init(key, hyperparams))``.
    """

    init: InitFn
    run: RunFn
    evaluate: EvaluateFn
    train: TrainFn


def make_train(algorithm: Algorithm, env: Environment, config: AnakinConfig) -> TrainFn:
    """A pure ``train(key, hyperparams=None) -> (final_state, metrics)``; see :func:`make_anakin`.

    Example:
      >>> import jax, jaxlearner as jl
      >>> from jaxlearner import anakin, envs
      >>> env = envs.make("CartPole-v1")
      >>> ppo = jl.algorithms.build("ppo", env.observation_space, env.action_space,
      ...     {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1,
      ...      "hidden_sizes": (8,)})
      >>> train = anakin.make_train(ppo, env, anakin.AnakinConfig(num_envs=4,
      ...     num_iterations=2, eval_envs=2))
      >>> state, metrics = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), 3))
      >>> metrics["episode_return_mean"].shape, metrics["eval/return_mean"].shape
      ((3, 2), (3, 1))
    """
    return make_anakin(algorithm, env, config).train


def make_anakin(algorithm: Algorithm, env: Environment, config: AnakinConfig) -> Anakin:
    """Builds the pure init, run, evaluate and train functions of an Anakin run.

    Nothing is jitted here: wrap the outermost call (``jax.jit(train)``,
    ``jax.jit(jax.vmap(train))``, or :func:`jaxlearner.anakin.sweeps.train_agents`).

    ``hyperparams`` (``{"learning_rate": lr, "entropy_coeff": c}``) are written
    into the learner state after its init with
    :func:`~jaxlearner.core.hyperparams.with_hyperparams`; inside ``jax.vmap`` each
    agent gets its own. Their names are checked (and refused when the learner
    schedules them) in Python, when ``train`` or ``init`` is traced.

    Metrics of ``run`` (and ``train``), a flat dict; ``I = num_iterations``,
    ``E = num_evals``:

    * per iteration, ``[I]``: ``env_steps`` (int32, lifetime), ``iteration``,
      ``num_episodes`` (episodes finished in the iteration's rollout),
      ``episode_return_mean`` and ``episode_length_mean`` (over those; NaN
      when none finished), and the learner's metrics of the iteration's last
      update flattened (``"default_policy/total_loss"``,
      ``"__all__/num_grad_steps"``, ...);
    * per evaluation, ``[E]``: ``eval/return_mean``, ``eval/return_min``,
      ``eval/return_max``, ``eval/length_mean``, ``eval/env_steps`` and
      ``eval/iteration`` (when it ran); none with ``config.evaluate=False``.

    Args:
      algorithm: a built-in algorithm (``jl.algorithms.build(...)``), whose
        spaces are the environment's.
      env: a pure-JAX environment (``jaxlearner.anakin.envs.make("CartPole-v1")``, a
        gymnax adapter).
      config: the run's static shape.

    Returns:
      An :class:`Anakin` of pure functions.

    Raises:
      TypeError: for an algorithm or environment of the wrong kind.
      ValueError: when the spaces differ from the algorithm's, or the
        rollout or the off-policy update count does not fit ``num_envs``.
    """
    _check_inputs(algorithm, env, config)
    module_id = algorithm.module_id
    learner = algorithm.learner
    num_envs = config.num_envs
    rollout_steps = algorithm.rollout_steps(num_envs)
    steps_per_iteration = rollout_steps * num_envs
    rollout = rollout_with_memory(algorithm, env, num_envs, rollout_steps)
    evaluate = make_evaluate(algorithm, env, config.eval_envs)
    learn, prepare = make_learning(algorithm, env, num_envs, rollout_steps)
    interval = config.eval_interval or config.num_iterations
    init_learner = one_agent_at_a_time(learner.init)

    def init(key: jax.Array, hyperparams: Hyperparams | None = None) -> AnakinState:
        learner_key, env_key, key = jax.random.split(key, 3)
        learner_state = init_learner(learner_key)
        if hyperparams:
            check_constant(learner, module_id, hyperparams)
            learner_state = with_hyperparams(learner_state, module_id, hyperparams)
        env_states, obs = jax.vmap(env.reset)(jax.random.split(env_key, num_envs))
        state = AnakinState(
            learner=learner_state,
            env_states=env_states,
            obs=obs,
            key=key,
            iteration=jnp.zeros((), jnp.int32),
            env_steps=jnp.zeros((), jnp.int32),
            memory=initial_memory(algorithm, num_envs),
        )
        return prepare(state)

    iterate = make_iterate(algorithm, rollout, learn, steps_per_iteration)

    def evaluate_block(state: AnakinState, _: None) -> tuple[AnakinState, tuple[Metrics, Metrics]]:
        state, metrics = packed_scan(iterate, state, length=interval)
        key, eval_key = jax.random.split(state.key)
        results = evaluate(state.learner.modules[module_id], eval_key)
        evaluation = {f"eval/{name}": value for name, value in results.items()}
        evaluation["eval/env_steps"] = state.env_steps
        evaluation["eval/iteration"] = state.iteration
        return state.replace(key=key), (metrics, evaluation)

    def run(state: AnakinState) -> tuple[AnakinState, Metrics]:
        if not config.evaluate:  # static: no evaluation in the compiled program
            return packed_scan(iterate, state, length=config.num_iterations)
        state, (metrics, evaluation) = jax.lax.scan(
            evaluate_block, state, None, length=config.num_evals
        )
        metrics = jax.tree.map(lambda x: x.reshape(config.num_iterations, *x.shape[2:]), metrics)
        return state, {**metrics, **evaluation}

    def train(
        key: jax.Array, hyperparams: Hyperparams | None = None
    ) -> tuple[AnakinState, Metrics]:
        return run(init(key, hyperparams))

    return Anakin(init=init, run=run, evaluate=evaluate, train=train)


def _check_inputs(algorithm: Algorithm, env: Environment, config: AnakinConfig) -> None:
    if not isinstance(algorithm, Algorithm):
        raise TypeError(
            "make_anakin needs a jl.algorithms.OnPolicyAlgorithm or OffPolicyAlgorithm "
            f"(jl.algorithms.build(...)); got {type(algorithm).__name__}."
        )
    if not isinstance(env, Environment):
        raise TypeError(
            "make_anakin needs a pure-JAX environment (jl.envs.make(...) or the gymnax "
            f"adapter); got {type(env).__name__}."
        )
    if not isinstance(config, AnakinConfig):
        raise TypeError(f"make_anakin needs an AnakinConfig; got {type(config).__name__}.")
    if getattr(algorithm, "policy_lag", 0):
        raise ValueError(
            f"make_anakin collects with the current params; policy_lag={algorithm.policy_lag} "
            "is the Trainer's (jl.Trainer). Use policy_lag=0 here."
        )
    check_recipe_spaces(algorithm.learner.recipe, env.observation_space, env.action_space)
