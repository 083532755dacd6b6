"""One Anakin training iteration: a rollout, its observation, then learning by kind.

What :func:`~jaxlearner.anakin.train.make_anakin` scans over: :func:`make_iterate` builds
the ``lax.scan`` body that carries an :class:`AnakinState` from one iteration to the next
(a rollout with ``algorithm.explore``, the module's observers folded over it, then the
algorithm kind's learning), and :func:`make_learning` picks the learning by the kind: an
on-policy ``postprocess`` and one update, or replay with its warm-up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
from flax import struct

from jaxlearner.algorithms.algorithm import (
    Algorithm,
    Experience,
    OffPolicyAlgorithm,
    OnPolicyAlgorithm,
    RecurrentAct,
)
from jaxlearner.algorithms.replay import off_policy, update_rate
from jaxlearner.anakin.envs.environment import Environment, EnvState
from jaxlearner.anakin.rollouts import (
    Memory,
    RecurrentRolloutFn,
    RolloutFn,
    make_recurrent_rollout,
    make_rollout,
)
from jaxlearner.core.metrics import iter_metrics
from jaxlearner.core.observers import make_observe, observe_modules
from jaxlearner.core.state import LearnerState, ModuleState

Metrics: TypeAlias = dict[str, jax.Array]
"""Flat ``{name: array}``; see :func:`~jaxlearner.anakin.train.make_anakin` for the names
and shapes."""


@struct.dataclass
class AnakinState:
    """Everything one agent's training carries from one iteration to the next.

    Attributes:
      learner: the :class:`~jaxlearner.LearnerState`.
      env_states: the ``num_envs`` environments' states, leaves ``[N, ...]``.
      obs: ``[N, ...]`` the observations to act in next.
      key: the run's PRNG key (the learner's own key drives its updates).
      iteration: int32, training iterations done.
      env_steps: int32, env steps collected (all environments together).
      buffer: the replay buffer of an off-policy algorithm, else ``None``.
      memory: a recurrent algorithm's state in each environment, else ``None``.
    """

    learner: LearnerState
    env_states: EnvState
    obs: jax.Array
    key: jax.Array
    iteration: jax.Array
    env_steps: jax.Array
    buffer: off_policy.Buffer | None = None
    memory: Memory | None = None


Buffer: TypeAlias = off_policy.Buffer | None
"""An off-policy run's replay buffer; ``None`` on-policy."""


LearnFn: TypeAlias = Callable[
    [LearnerState, Buffer, ModuleState, Experience, jax.Array, jax.Array],
    tuple[LearnerState, Buffer, Any],
]
"""``learn(learner_state, buffer, module_state, experience, key, env_steps) ->
(learner_state, buffer, learner_metrics)``: an iteration's learning after its rollout."""


def rollout_with_memory(
    algorithm: Algorithm, env: Environment, num_envs: int, num_steps: int
) -> RecurrentRolloutFn:
    """The rollout, with the memory passed through (``None``) for a feed-forward algorithm."""
    if isinstance(algorithm.explore, RecurrentAct):
        return make_recurrent_rollout(algorithm, env, num_envs, num_steps)
    rollout = make_rollout(algorithm, env, num_envs, num_steps)

    def with_memory(module, env_states, obs, memory, key):
        env_states, obs, experience, episodes = rollout(module, env_states, obs, key)
        return env_states, obs, memory, experience, episodes

    return with_memory


def make_learning(
    algorithm: Algorithm, env: Environment, num_envs: int, rollout_steps: int
) -> tuple[LearnFn, Callable[[AnakinState], AnakinState]]:
    """What the algorithm's kind adds: the iteration's learning, and the end of ``init``."""
    steps_per_iteration = num_envs * rollout_steps
    match algorithm:
        case OnPolicyAlgorithm():
            return _on_policy_learn(algorithm), lambda state: state
        case OffPolicyAlgorithm():
            if algorithm.frame_stack is not None:
                raise ValueError(
                    f"{algorithm.name}: replay_frame_stack={algorithm.frame_stack} is for the "
                    "Trainer's gymnasium environments (it checks every stored frame on the "
                    "host); anakin stores observations as they are: set replay_frame_stack=None."
                )
            rollout = make_rollout(algorithm, env, num_envs, rollout_steps)
            updates = update_rate.updates_per_iteration(algorithm, steps_per_iteration)
            return _replay_learn(algorithm, updates), lambda state: _warm_up(
                algorithm, rollout, state, steps_per_iteration
            )


def _on_policy_learn(algorithm: OnPolicyAlgorithm) -> LearnFn:
    """Postprocess the rollout, then one learner update on it."""
    module_id, update_fn = algorithm.module_id, algorithm.learner.update_fn

    def learn(learner_state, buffer, module, experience, key, env_steps):
        del key
        batch = algorithm.postprocess(module, experience)
        learner_state, metrics = update_fn(
            learner_state, {module_id: batch}, {module_id: env_steps}
        )
        return learner_state, buffer, metrics

    return learn


def _replay_learn(algorithm: OffPolicyAlgorithm, updates: int) -> LearnFn:
    """Add the rollout's transitions to the buffer, then ``updates`` updates sampled from it."""
    replay_updates = off_policy.make_replay_updates(algorithm)

    def learn(learner_state, buffer, module, experience, key, env_steps):
        del module
        buffer = off_policy.replay_store(algorithm, buffer, experience)
        keys = jax.random.split(key, updates)
        learner_state, buffer, metrics = replay_updates(learner_state, buffer, keys, env_steps)
        return learner_state, buffer, metrics

    return learn


def _observer(algorithm: Algorithm) -> Callable[[LearnerState, Experience], LearnerState]:
    """``observe(learner_state, experience) -> learner_state``: the rollout folded into the
    module's observed state (:mod:`jaxlearner.core.observers`), as every driver does."""
    module_id = algorithm.module_id
    observes = {module_id: make_observe(*algorithm.learner.specs[module_id].observers)}
    return lambda state, experience: observe_modules(observes, state, {module_id: experience})


def make_iterate(
    algorithm: Algorithm, rollout: RecurrentRolloutFn, learn: LearnFn, steps_per_iteration: int
) -> Callable[[AnakinState, None], tuple[AnakinState, Metrics]]:
    """One training iteration as a ``lax.scan`` body: a rollout, its observation (the
    module's observers), then the learning."""
    module_id, observe = algorithm.module_id, _observer(algorithm)

    def iterate(state: AnakinState, _: None) -> tuple[AnakinState, Metrics]:
        key, rollout_key, update_key = jax.random.split(state.key, 3)
        env_states, obs, memory, experience, episodes = rollout(
            state.learner.modules[module_id], state.env_states, state.obs, state.memory, rollout_key
        )
        steps = jnp.int32(steps_per_iteration)
        learner_state = observe(state.learner, experience)
        learner_state, buffer, learner_metrics = learn(
            learner_state,
            state.buffer,
            learner_state.modules[module_id],
            experience,
            update_key,
            steps,
        )
        state = state.replace(
            learner=learner_state,
            env_states=env_states,
            obs=obs,
            key=key,
            iteration=state.iteration + 1,
            env_steps=state.env_steps + steps,
            buffer=buffer,
            memory=memory,
        )
        metrics = {
            "env_steps": state.env_steps,
            "iteration": state.iteration,
            **episodes,
            **dict(iter_metrics(learner_metrics)),
        }
        return state, metrics

    return iterate


def _warm_up(
    algorithm: OffPolicyAlgorithm, rollout: RolloutFn, state: AnakinState, steps: int
) -> AnakinState:
    """A fresh replay buffer, filled by the iterations that would not update yet.

    The :func:`~jaxlearner.Trainer` updates in an iteration once its env
    steps so far reach ``learning_starts``
    (:func:`~jaxlearner.algorithms.replay.update_rate.updates_due`); the iterations
    before that only collect, and run here.
    """
    module = state.learner.modules[algorithm.module_id]
    experience = jax.eval_shape(lambda: rollout(module, state.env_states, state.obs, state.key)[2])
    buffer = off_policy.replay_init_for(algorithm, experience)
    warmup = update_rate.warmup_iterations(algorithm, steps)
    observe = _observer(algorithm)

    def collect(carry: tuple, key: jax.Array) -> tuple[tuple, None]:
        learner_state, env_states, obs, buffer = carry
        module = learner_state.modules[algorithm.module_id]  # with the observers' state so far
        env_states, obs, experience, _ = rollout(module, env_states, obs, key)
        learner_state = observe(learner_state, experience)
        buffer = off_policy.replay_store(algorithm, buffer, experience)
        return (learner_state, env_states, obs, buffer), None

    key, warmup_key = jax.random.split(state.key)
    (learner_state, env_states, obs, buffer), _ = jax.lax.scan(
        collect,
        (state.learner, state.env_states, state.obs, buffer),
        jax.random.split(warmup_key, warmup),
    )
    return state.replace(
        learner=learner_state,
        env_states=env_states,
        obs=obs,
        key=key,
        env_steps=jnp.int32(warmup * steps),
        buffer=buffer,
    )
