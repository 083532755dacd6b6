"""What DQN and SAC share: replay rows, the replay update loop, training intensity, the algorithm.

Both algorithms store the same row in their replay buffer, built by
:func:`replay_transitions` from a ``[T, N]`` rollout:

==============  ==============  ======================================================
column          shape, dtype    meaning
==============  ==============  ======================================================
``obs``         ``[*obs]``      the observation the action was taken in
``actions``     ``[*action]``   the action trained on (int32 index or float32 vector)
``rewards``     float32         ``sum_{k<m} gamma^k r[t + k]``, the window's rewards
``next_obs``    ``[*obs]``      the observation to bootstrap from, ``m`` steps later
``discounts``   float32         ``gamma^m``, or 0 when the window ended in a termination
``mask``        float32         1 for a real transition, 0 for a reset-only step
==============  ==============  ======================================================

so every target is ``rewards + discounts * V(next_obs)``, for any window
length ``m``. The window of row ``t`` covers at most ``n_step`` steps and is
cut short by an episode end (terminated or truncated: a truncated window
bootstraps on the episode's final observation) and by the end of the rollout:
the last rows of each rollout hold shorter windows, which are still correct
targets, with fewer real rewards. Collect rollouts several times longer than
``n_step`` to keep most windows whole.

Rows are never dropped, so shapes stay static (one compilation) and the buffer
sees ``T * N`` rows per rollout; rows of reset-only steps (gymnasium's
``NEXT_STEP`` autoreset, ``valid`` False) get ``mask`` 0, and the losses
average over ``mask``. The :class:`~jaxlearner.training.env_runner.EnvRunner`'s own
environments autoreset in the same step, so there all rows are valid.

Training from the buffer is written once, here, for the
:func:`~jaxlearner.Trainer` and :mod:`jaxlearner.anakin.train` alike:
:func:`replay_init` decides the buffer's kind (uniform, or prioritized when the
algorithm has ``prioritized_replay``) and :func:`replay_add` and
:func:`replay_from_arrays` follow it; :func:`make_replay_updates` is the
compiled "sample, then update" loop (with prioritized replay it also feeds the
importance weights to the loss and writes the new priorities back);
:mod:`~jaxlearner.algorithms.replay.update_rate` says how many updates an
iteration runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np

from jaxlearner.algorithms.algorithm import (
    MODULE_ID,
    ActFn,
    Experience,
    OffPolicyAlgorithm,
    PrioritizedReplay,
    TDErrorsFn,
    algorithm_fields,
)
from jaxlearner.algorithms.networks.spaces import zero_observation
from jaxlearner.algorithms.replay import frame_stack, prioritized_replay, replay_buffer
from jaxlearner.algorithms.replay.off_policy_config import OffPolicyFields, check_frame_stack
from jaxlearner.algorithms.trajectories.normalization import normalization_for, normalized_loss
from jaxlearner.algorithms.trajectories.returns import n_step_rewards
from jaxlearner.core.context import LossContext, LossFn
from jaxlearner.core.learner import Learner
from jaxlearner.core.metrics import last_update_metrics
from jaxlearner.core.module_spec import ModuleSpec
from jaxlearner.core.state import LearnerState, ModuleState
from jaxlearner.types import Batch, Metrics


def off_policy_algorithm(
    name: str,
    learner: Learner,
    config: OffPolicyFields,
    acts: tuple[ActFn, ActFn],
    action_dtype: Any,
    td_errors: TDErrorsFn,
) -> OffPolicyAlgorithm:
    """DQN's or SAC's algorithm: ``acts = (explore, exploit)`` and the replay its config asks.

    Rows are :func:`replay_transitions` of ``action_dtype`` actions (raw observations and
    rewards); ``td_errors(module, batch, key)`` sets the priorities when
    ``config.prioritized_replay``, and is unused otherwise. With the config's
    normalization on, the act functions see observations normalized with the module's
    statistics, and ``td_errors`` the batch normalized as the loss sees it
    (:func:`~jaxlearner.algorithms.trajectories.normalization.normalized_loss`).
    """
    norm = normalization_for(config, config.gamma)
    explore, exploit = acts
    if norm.enabled:
        explore = lambda module, obs, key: acts[0](module, norm.observation(module.extra, obs), key)
        exploit = lambda module, obs, key: acts[1](module, norm.observation(module.extra, obs), key)
        raw_td_errors = td_errors
        td_errors = lambda module, batch, key: raw_td_errors(
            module, norm.batch(module.extra, batch), key
        )
    prioritized = None
    if config.prioritized_replay:
        prioritized = PrioritizedReplay(
            alpha=config.prioritized_replay_alpha,
            beta=config.prioritized_replay_beta,
            eps=config.prioritized_replay_eps,
            td_errors=td_errors,
        )

    def rollout_steps(num_envs: int) -> int:
        norm.check_num_envs(f"{type(config).__name__}", num_envs)
        return config.rollout_fragment_length

    return OffPolicyAlgorithm(
        **algorithm_fields(name, learner, config, (explore, exploit)),
        rollout_steps=rollout_steps,
        transitions=lambda experience: replay_transitions(
            experience, config.n_step, config.gamma, action_dtype
        ),
        replay_capacity=config.replay_buffer_capacity,
        train_batch_size=config.train_batch_size,
        learning_starts=config.num_steps_sampled_before_learning_starts,
        updates_per_step=updates_per_step(config.training_intensity, config.train_batch_size),
        prioritized_replay=prioritized,
        frame_stack=config.replay_frame_stack,
    )


def replay_module_spec(
    model: Any, loss: LossFn, observation_space: Any, config: OffPolicyFields, **options: Any
) -> ModuleSpec:
    """DQN's or SAC's module: ``loss`` and what both specs add to it.

    The loss sees batches normalized as the config asks (observations sampled raw from
    the buffer, :func:`~jaxlearner.algorithms.trajectories.normalization.normalized_loss`),
    the module's observers update the normalization statistics, the params are initialized
    from the batch's ``obs`` and the metrics ``qf_max`` and ``qf_min`` are reduced by max and
    min. ``options`` are the rest of the :class:`~jaxlearner.ModuleSpec` (optimizers,
    hyperparams, additional updates).
    """
    check_frame_stack(type(config).__name__, config, observation_space)
    norm = normalization_for(config, config.gamma)
    return ModuleSpec(
        model,
        normalized_loss(loss, norm),
        init_input=lambda batch: batch["obs"],
        metric_reductions={"qf_max": "max", "qf_min": "min"},
        observers=norm.observers(observation_space),
        **options,
    )


def replay_transitions(
    experience: Experience, n_step: int, gamma: float, action_dtype: Any
) -> Batch:
    """A ``[T, N]`` rollout as ``T * N`` replay rows (see the module docstring).

    Args:
      experience: ``[T, N, ...]`` arrays ``obs``, ``actions``, ``rewards``,
        ``terminated``, ``truncated``, ``next_obs`` and ``valid``; other keys
        (act extras) are ignored.
      n_step: the longest window, a positive Python int (static).
      gamma: the discount in ``[0, 1]``.
      action_dtype: the dtype actions are stored in (int32 or float32).

    Returns:
      ``{"obs", "actions", "rewards", "next_obs", "discounts", "mask"}``, each
      ``[T * N, ...]`` in time-major order (row ``t * N + n`` is step ``t`` of
      environment ``n``).

    Example:
      >>> experience = {"obs": jnp.zeros((3, 1, 2)), "next_obs": jnp.ones((3, 1, 2)),
      ...               "actions": jnp.zeros((3, 1), jnp.int32), "rewards": jnp.ones((3, 1)),
      ...               "terminated": jnp.zeros((3, 1), bool),
      ...               "truncated": jnp.zeros((3, 1), bool), "valid": jnp.ones((3, 1), bool)}
      >>> rows = replay_transitions(experience, n_step=2, gamma=0.5, action_dtype=jnp.int32)
      >>> rows["rewards"].tolist(), rows["discounts"].tolist()   # the last window is cut
      ([1.5, 1.5, 1.0], [0.25, 0.25, 0.5])
    """
    rewards = jnp.asarray(experience["rewards"], jnp.float32)
    steps, envs = rewards.shape
    window = n_step_rewards(
        rewards, experience["terminated"], experience["truncated"], n_step, gamma
    )
    next_obs = jnp.asarray(experience["next_obs"])
    if n_step > 1:
        # Row t bootstraps on the next observation of the window's last step.
        next_obs = next_obs[window.bootstrap_index, jnp.arange(envs)[None, :]]
    rows = {
        "obs": jnp.asarray(experience["obs"]),
        "actions": jnp.asarray(experience["actions"]).astype(action_dtype),
        "rewards": window.rewards.astype(jnp.float32),
        "next_obs": next_obs,
        "discounts": window.discount_t.astype(jnp.float32),
        "mask": jnp.asarray(experience["valid"]).astype(jnp.float32),
    }
    return jax.tree.map(lambda x: x.reshape(steps * envs, *x.shape[2:]), rows)


def replay_layout(
    observation_space: Any,
    action_shape: tuple[int, ...],
    action_dtype: Any,
    prioritized: bool = False,
) -> dict[str, jax.ShapeDtypeStruct]:
    """The trailing shapes and dtypes of :func:`replay_transitions`' rows (a batch layout),
    plus the importance ``weights`` the replay loop adds to a batch when ``prioritized``."""
    obs = zero_observation(observation_space)
    row = jax.ShapeDtypeStruct((), np.float32)
    observation = jax.ShapeDtypeStruct(obs.shape, obs.dtype)
    layout = {
        "obs": observation,
        "actions": jax.ShapeDtypeStruct(action_shape, np.dtype(action_dtype)),
        "rewards": row,
        "next_obs": observation,
        "discounts": row,
        "mask": row,
    }
    if prioritized:
        layout["weights"] = row
    return layout


def updates_per_step(training_intensity: float | None, train_batch_size: int) -> float:
    """Gradient updates per env step for RLlib's ``training_intensity``.

    ``training_intensity`` is the ratio of rows replayed (trained on) to env
    steps sampled, so each update of ``train_batch_size`` rows accounts for
    ``train_batch_size / training_intensity`` env steps. ``None`` is one update
    per env step: RLlib's "natural" intensity for one environment stepped one
    step per iteration (its ``rollout_fragment_length="auto"`` with
    ``n_step=1``).
    """
    if training_intensity is None:
        return 1.0
    return float(training_intensity) / train_batch_size


Buffer: TypeAlias = (
    replay_buffer.ReplayBuffer
    | prioritized_replay.PrioritizedReplayBuffer
    | frame_stack.FramedReplay
)
"""An off-policy algorithm's replay buffer, of the kind :func:`replay_init_for` chose."""


def replay_init_for(algorithm: OffPolicyAlgorithm, experience: Any) -> Buffer:
    """:func:`replay_init` shaped for the rows ``algorithm.transitions`` makes of ``experience``
    (arrays, or ``jax.ShapeDtypeStruct`` s: only their shapes are read).

    With ``algorithm.frame_stack`` the buffer is a
    :class:`~jaxlearner.algorithms.replay.frame_stack.FramedReplay`: its rows point into a
    store of frames sized for the rollout's environments.

    Raises:
      ValueError: when ``algorithm.frame_stack`` is not the observations' last axis.

    Example:
      >>> buffer = replay_init_for(sac, rollout.experience())      # doctest: +SKIP
    """
    obs = experience["obs"]
    frames = None
    if algorithm.frame_stack is not None:
        if len(obs.shape) < 4 or obs.shape[-1] != algorithm.frame_stack:
            raise ValueError(
                f"{algorithm.name}: replay_frame_stack={algorithm.frame_stack} needs "
                f"observations [T, N, ..., {algorithm.frame_stack}] (frames stacked on the last "
                f"axis); the rollout's are {tuple(obs.shape)}."
            )
        frames = frame_stack.frame_store_init(
            obs.shape[2:-1], obs.dtype, obs.shape[-1], obs.shape[1], algorithm.replay_capacity
        )
        experience = jax.eval_shape(frame_stack.encode, frames, experience)[1]
    rows = jax.eval_shape(algorithm.transitions, experience)
    buffer = replay_init(algorithm, jax.tree.map(lambda x: np.zeros(x.shape[1:], x.dtype), rows))
    return buffer if frames is None else frame_stack.FramedReplay(replay=buffer, frames=frames)


def replay_store(algorithm: OffPolicyAlgorithm, buffer: Buffer, experience: Experience) -> Buffer:
    """Adds a ``[T, N]`` rollout's ``algorithm.transitions`` to a buffer of
    :func:`replay_init_for`, its frames first where the buffer keeps them apart."""
    if not isinstance(buffer, frame_stack.FramedReplay):
        return replay_add(buffer, algorithm.transitions(experience))
    frames, experience = frame_stack.encode(buffer.frames, experience)
    return frame_stack.FramedReplay(
        replay=replay_add(buffer.replay, algorithm.transitions(experience)), frames=frames
    )


def replay_init(algorithm: OffPolicyAlgorithm, example: Batch) -> Buffer:
    """The empty replay buffer of the algorithm's kind, shaped for one replay row.

    The one place that decides the kind: a
    :class:`~jaxlearner.algorithms.replay.prioritized_replay.PrioritizedReplayBuffer`
    (with the algorithm's ``alpha`` and ``eps``) when
    ``algorithm.prioritized_replay`` is set, else a uniform
    :class:`~jaxlearner.algorithms.replay.replay_buffer.ReplayBuffer`.

    Args:
      algorithm: supplies ``replay_capacity`` and ``prioritized_replay``.
      example: one replay row (no leading axis), e.g. row 0 of ``transitions``.
    """
    options = algorithm.prioritized_replay
    if options is None:
        return replay_buffer.replay_buffer_init(example, algorithm.replay_capacity)
    return prioritized_replay.prioritized_replay_init(
        example, algorithm.replay_capacity, options.alpha, options.eps
    )


def replay_add(buffer: Buffer, rows: Batch) -> Buffer:
    """Adds ``[M]`` rows to either kind of buffer (new prioritized rows get the max priority)."""
    if isinstance(buffer, prioritized_replay.PrioritizedReplayBuffer):
        return prioritized_replay.add(buffer, rows)
    return replay_buffer.add(buffer, rows)


def replay_from_arrays(algorithm: OffPolicyAlgorithm, arrays: Mapping[str, Any]) -> Buffer:
    """A buffer from its saved fields (nested dicts of arrays, as a checkpoint returns them).

    Raises:
      ValueError: when the saved buffer's kind is not the algorithm's.
    """
    framed = "frames" in arrays
    if framed != (algorithm.frame_stack is not None):
        raise ValueError(
            f"The saved replay buffer {'keeps' if framed else 'does not keep'} stacked frames "
            f"apart but {algorithm.name} has replay_frame_stack={algorithm.frame_stack}; "
            "restore it with the config it was saved with."
        )
    if framed:
        frames = frame_stack.FrameStore(**{k: jnp.asarray(v) for k, v in arrays["frames"].items()})
        unframed = _replay_from_arrays(algorithm, arrays["replay"])
        return frame_stack.FramedReplay(replay=unframed, frames=frames)
    return _replay_from_arrays(algorithm, arrays)


def _replay_from_arrays(algorithm: OffPolicyAlgorithm, arrays: Mapping[str, Any]) -> Buffer:
    """:func:`replay_from_arrays` of a uniform or prioritized buffer."""
    prioritized = "sum_tree" in arrays
    if prioritized != (algorithm.prioritized_replay is not None):
        saved, wanted = ("prioritized", "uniform") if prioritized else ("uniform", "prioritized")
        raise ValueError(
            f"The saved replay buffer is {saved} but {algorithm.name} is configured for "
            f"{wanted} replay (prioritized_replay={not prioritized}); restore it with the "
            "config it was saved with."
        )
    if not prioritized:
        return replay_buffer.ReplayBuffer(**arrays)
    fields = {name: jnp.asarray(value) for name, value in arrays.items() if name != "replay"}
    return prioritized_replay.PrioritizedReplayBuffer(
        replay=replay_buffer.ReplayBuffer(**arrays["replay"]), **fields
    )


class ReplayUpdatesFn(Protocol):
    """``replay_updates(state, buffer, keys [U], env_steps) -> (state, buffer, metrics)``."""

    def __call__(
        self,
        learner_state: LearnerState,
        buffer: Buffer,
        keys: jax.Array,
        env_steps: jax.typing.ArrayLike,
    ) -> tuple[LearnerState, Buffer, Metrics]: ...


def make_replay_updates(algorithm: OffPolicyAlgorithm) -> ReplayUpdatesFn:
    """The pure "sample a batch, then update" loop of an off-policy algorithm.

    ``U = keys.shape[0]`` updates run as one ``lax.scan``; update ``u`` trains
    on ``train_batch_size`` rows sampled from ``buffer`` with ``keys[u]``.
    ``env_steps`` (int32 scalar), the env steps collected since the previous
    call, are counted once, by the first update, so epsilon schedules and
    target-network periods run over sampled env steps. ``U`` is static (a new
    ``U`` compiles again); nothing is jitted here.

    With a prioritized buffer each update samples by priority, passes the
    importance weights as ``batch["weights"]`` and, before the gradient step,
    sets the sampled rows' priorities to ``|algorithm.prioritized_replay.td_errors|``
    of the module as it is then: the TD errors that step trains on. Those are
    computed by a second forward pass rather than returned by the loss, since
    metrics are scalars (:mod:`jaxlearner.core.metrics`). A uniform buffer
    comes back unchanged.

    Args:
      algorithm: supplies ``learner.update_fn``, ``module_id``,
        ``train_batch_size`` and ``prioritized_replay``.

    Returns:
      ``replay_updates(learner_state, buffer, keys [U], env_steps) ->
      (learner_state, buffer, metrics)`` with the metrics of the last update (and
      ``nonfinite`` the largest over all of them).

    Example:
      >>> replay_updates = jax.jit(make_replay_updates(algorithm), donate_argnums=(0, 1))
      ... # doctest: +SKIP
      >>> state, buffer, metrics = replay_updates(
      ...     state, buffer, jax.random.split(key, 4), np.int32(32))  # doctest: +SKIP
    """
    update_fn = algorithm.learner.update_fn
    module_id, batch_size = algorithm.module_id, algorithm.train_batch_size
    options = algorithm.prioritized_replay

    def sample(state: LearnerState, buffer: Buffer, key: jax.Array) -> tuple[Batch, Buffer]:
        if isinstance(buffer, frame_stack.FramedReplay):
            decode = lambda rows: frame_stack.decode_rows(buffer.frames, rows)
            batch, replay = sample_rows(state, buffer.replay, key, decode)
            return batch, buffer.replace(replay=replay)
        return sample_rows(state, buffer, key, lambda rows: rows)

    def sample_rows(
        state: LearnerState, buffer: Buffer, key: jax.Array, decode: Any
    ) -> tuple[Batch, Buffer]:
        if not isinstance(buffer, prioritized_replay.PrioritizedReplayBuffer):
            return decode(replay_buffer.sample(buffer, key, batch_size)), buffer
        if options is None:
            raise ValueError(
                f"{algorithm.name} got a prioritized replay buffer but has no prioritized_replay "
                "options; build the buffer with off_policy.replay_init(algorithm, example)."
            )
        rows, indices, weights = prioritized_replay.sample(buffer, key, batch_size, options.beta)
        rows = decode(rows)
        batch = {**rows, "weights": weights}
        # Sampling uses `key` itself; a key folded from it drives what td_errors samples.
        td_key = jax.random.fold_in(key, 1)
        td_errors = options.td_errors(state.modules[module_id], batch, td_key)
        # Reset-only rows (mask 0) have no TD error; they keep only eps.
        priorities = jax.lax.stop_gradient(jnp.abs(td_errors) * rows["mask"])
        return batch, prioritized_replay.update_priorities(buffer, indices, priorities)

    def replay_updates(
        learner_state: LearnerState,
        buffer: Buffer,
        keys: jax.Array,
        env_steps: jax.typing.ArrayLike,
    ) -> tuple[LearnerState, Buffer, Metrics]:
        def one_update(
            carry: tuple[LearnerState, Buffer], inputs: tuple[jax.Array, jax.Array]
        ) -> tuple[tuple[LearnerState, Buffer], Metrics]:
            state, buffer = carry
            index, key = inputs
            batch, buffer = sample(state, buffer, key)
            counted = jnp.where(index == 0, env_steps, 0).astype(jnp.int32)
            state, metrics = update_fn(state, {module_id: batch}, {module_id: counted})
            return (state, buffer), metrics

        indices = jnp.arange(keys.shape[0])
        (learner_state, buffer), stacked = jax.lax.scan(
            one_update, (learner_state, buffer), (indices, keys)
        )
        return learner_state, buffer, last_update_metrics(stacked)

    return replay_updates


def module_context(apply: Any, module: ModuleState, key: jax.Array) -> LossContext:
    """The loss context of the default module's state outside an update: for the TD errors
    that set prioritized replay's priorities (SAC's, TD3's), computed as their losses do."""
    return LossContext(
        module_id=MODULE_ID,
        apply=apply,
        key=key,
        extra=module.extra,
        hyperparams=module.hyperparams,
        counters=module.counters,
    )


def masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
    """``sum(x * mask) / max(sum(mask), 1)`` over all axes."""
    return (x * mask).sum() / jnp.maximum(mask.sum(), 1.0)


def td_error_loss(td_error: jax.Array, kind: str) -> jax.Array:
    """Elementwise ``huber`` (delta 1) or ``mse`` (squared error) loss of TD errors."""
    if kind == "huber":
        magnitude = jnp.abs(td_error)
        return jnp.where(magnitude < 1.0, 0.5 * td_error**2, magnitude - 0.5)
    return td_error**2
