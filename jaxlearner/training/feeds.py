"""Feeds: how the Trainer turns each rollout into learner updates, one per algorithm kind.

Both feeds first fold the rollout into the module's observed state (:func:`observe`, the
experience seam of :mod:`jaxlearner.core.observers`). An :class:`OnPolicyFeed` then
postprocesses the rollout and updates once on it.
A :class:`ReplayFeed` adds the rollout's transitions to a device replay
buffer and runs the updates due (none before ``learning_starts`` env steps,
then ``updates_per_step`` per env step) with the compiled sample-then-update
loop of :func:`~jaxlearner.algorithms.replay.off_policy.make_replay_updates`, the
same one :mod:`jaxlearner.anakin.train` compiles into its run. A feed keeps what
must survive a checkpoint (the buffer, the fraction of an update carried
over) and gives it to :meth:`~jaxlearner.Driver.save`.

Example:
  >>> feed = make_feed(jl.algorithms.algorithm_for(learner))          # doctest: +SKIP
  >>> state, metrics = feed.learn(state, module_state, experience, env_steps=256,
  ...                             env_steps_before=0, key=key)          # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, final

import jax
import numpy as np

from jaxlearner.algorithms.algorithm import (
    Algorithm,
    Experience,
    OffPolicyAlgorithm,
    OnPolicyAlgorithm,
)
from jaxlearner.algorithms.replay.frame_stack import FramedReplay
from jaxlearner.algorithms.replay.off_policy import (
    Buffer,
    make_replay_updates,
    replay_from_arrays,
    replay_init_for,
    replay_store,
)
from jaxlearner.algorithms.replay.update_rate import first_updates, updates_due
from jaxlearner.core.packing import FlatLayout, concatenate, split_on_host
from jaxlearner.core.state import LearnerState, ModuleState


class Feed(Protocol):
    """What the :func:`~jaxlearner.Trainer` does with a rollout, and saves of it."""

    @property
    def buffer(self) -> Buffer | None:
        """The replay buffer (``None`` on-policy, and before the first rollout)."""
        ...

    def learn(
        self,
        state: LearnerState,
        module: ModuleState,
        experience: Experience,
        env_steps: int,
        env_steps_before: int,
        key: jax.Array,
    ) -> tuple[LearnerState, Any]:
        """Trains on one rollout of ``env_steps`` steps, collected with ``module`` after
        ``env_steps_before`` steps; returns the new state and the learner's metrics (or
        ``None`` when no update ran)."""
        ...

    def updates(self, env_steps_before: int, env_steps: int) -> bool:
        """Whether :meth:`learn` on a rollout of ``env_steps`` after ``env_steps_before`` runs
        the update (the program :meth:`compile_ahead` prepares)."""
        ...

    def compile_ahead(
        self, state: LearnerState, module: ModuleState, experience: Experience, env_steps: int
    ) -> None:
        """Compiles what the first :meth:`learn` that updates will run, from the shapes of its
        inputs (``jax.ShapeDtypeStruct``; rollouts of ``env_steps`` env steps): JAX keeps
        the programs, so that call does not compile them
        (:mod:`jaxlearner.training.compile_ahead` runs this on a thread)."""
        ...

    def save(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(json, arrays)`` to save beside the learner state."""
        ...

    def restore(self, saved: Mapping[str, Any], arrays: Mapping[str, Any]) -> None:
        """Takes back what :meth:`save` gave."""
        ...


def make_feed(algorithm: Algorithm) -> Feed:
    """The feed of the algorithm's kind.

    Raises:
      TypeError: for anything else than an on- or off-policy algorithm.
    """
    match algorithm:
        case OnPolicyAlgorithm():
            return OnPolicyFeed(algorithm)
        case OffPolicyAlgorithm():
            return ReplayFeed(algorithm)
    raise TypeError(
        "The Trainer needs a jl.algorithms.OnPolicyAlgorithm or OffPolicyAlgorithm; got "
        f"{type(algorithm).__name__}."
    )


def observe(
    algorithm: Algorithm, state: LearnerState, module: ModuleState, experience: Experience
) -> tuple[LearnerState, ModuleState]:
    """The rollout folded into the module's observed state, before anything else sees it.

    Returns:
      ``(state, module)``: the learner state after
      :meth:`~jaxlearner.Learner.observe`, and the module the rollout was collected with
      (``policy_lag`` params) holding the observers' new state, for postprocessing.
    """
    module_id, learner = algorithm.module_id, algorithm.learner
    observers = learner.specs[module_id].observers
    if not observers:
        return state, module
    state = learner.observe(state, {module_id: experience})
    observed = learner.placement.get(state).modules[module_id].extra
    extra = {**module.extra, **{o.name: observed[o.name] for o in observers}}
    return state, module.replace(extra=extra)


@final
class OnPolicyFeed:
    """Each rollout, postprocessed (jitted), is one batch for one ``learner.update``."""

    buffer = None

    def __init__(self, algorithm: OnPolicyAlgorithm) -> None:
        self._algorithm = algorithm
        self._postprocess = jax.jit(algorithm.postprocess)

    def learn(
        self,
        state: LearnerState,
        module: ModuleState,
        experience: Experience,
        env_steps: int,
        env_steps_before: int,
        key: jax.Array,
    ) -> tuple[LearnerState, Any]:
        del env_steps_before, key
        algorithm = self._algorithm
        state, module = observe(algorithm, state, module, experience)
        batch = self._postprocess(module, experience)
        return algorithm.learner.update(state, {algorithm.module_id: batch}, env_steps=env_steps)

    def updates(self, env_steps_before: int, env_steps: int) -> bool:
        """Always: every rollout is one update."""
        del env_steps_before, env_steps
        return True

    def compile_ahead(
        self, state: LearnerState, module: ModuleState, experience: Experience, env_steps: int
    ) -> None:
        """Compiles the postprocess, then the update, from the shapes of their inputs (see
        :meth:`Feed.compile_ahead`)."""
        lowered = self._postprocess.lower(module, experience)
        lowered.compile()
        batch = {self._algorithm.module_id: lowered.out_info}
        self._algorithm.learner.compile_update(state, batch, env_steps=env_steps)

    def save(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return {}, {}

    def restore(self, saved: Mapping[str, Any], arrays: Mapping[str, Any]) -> None:
        del saved, arrays


@final
class ReplayFeed:
    """Each rollout's transitions go into a replay buffer; the updates due sample from it.

    The buffer is uniform or prioritized as the algorithm says
    (:func:`~jaxlearner.algorithms.replay.off_policy.replay_init`); a prioritized
    buffer is saved with its priorities.

    The buffer is created from the first rollout's rows and placed like the
    learner state. :meth:`learn` returns the last update's metrics on the host (numpy),
    fetched as one array per dtype. The env steps collected since the last update are counted
    by the next one, so a schedule over env steps sees every step once.
    """

    def __init__(self, algorithm: OffPolicyAlgorithm) -> None:
        self._algorithm = algorithm
        replay_updates = make_replay_updates(algorithm)

        def add(buffer: Buffer, experience: Experience) -> Buffer:
            return replay_store(algorithm, buffer, experience)

        def add_and_update(
            state: LearnerState,
            buffer: Buffer,
            experience: Experience,
            key: jax.Array,
            env_steps: jax.Array,
            count: int,
        ) -> tuple[LearnerState, Buffer, Any]:
            keys = jax.random.split(key, count)
            state, buffer, metrics = replay_updates(state, add(buffer, experience), keys, env_steps)
            # The metrics leave as one array per dtype (core/packing.py). Their structure
            # is the last update's whatever ``count`` is, so each trace sets the same layout.
            packed, self._metrics_layout = concatenate((metrics, _frame_mismatches(buffer)))
            return state, buffer, packed

        # One compiled call per iteration (the key split included): with one update per
        # env step and short rollouts, every dispatch counts.
        self._add = jax.jit(add, donate_argnums=0)
        self._add_and_update = jax.jit(
            add_and_update, donate_argnums=(0, 1), static_argnames="count"
        )
        self._metrics_layout: FlatLayout | None = None
        self._buffer: Buffer | None = None
        self._updates_due = 0.0
        self._uncounted_env_steps = 0
        self._tolerated_mismatches = 0  # one per environment restarted by each resume

    @property
    def buffer(self) -> Buffer | None:
        return self._buffer

    def updates(self, env_steps_before: int, env_steps: int) -> bool:
        """Whether updates are due after this rollout (:func:`updates_due`, nothing changed)."""
        count, _ = updates_due(self._algorithm, env_steps_before, env_steps, self._updates_due)
        return count > 0

    def compile_ahead(
        self, state: LearnerState, module: ModuleState, experience: Experience, env_steps: int
    ) -> None:
        """Compiles the add-and-update call of the first iteration with updates (its count from
        :func:`first_updates`, rollouts of ``env_steps`` from the start) from the shapes of
        its inputs, while the warm-up's rollouts are collected (see
        :meth:`Feed.compile_ahead`). Nothing, for a training intensity too low to update
        within 10,000 iterations."""
        del module
        algorithm = self._algorithm
        count = first_updates(algorithm, env_steps)
        if count is None:
            return
        placement = algorithm.learner.placement
        buffer = jax.eval_shape(lambda: replay_init_for(algorithm, experience))
        key = jax.eval_shape(lambda: jax.random.key(0))
        counted = jax.ShapeDtypeStruct((), np.int32)
        args = (placement.shaped(state), placement.shaped(buffer), experience, key, counted)
        self._add_and_update.lower(*args, count=count).compile()

    def learn(
        self,
        state: LearnerState,
        module: ModuleState,
        experience: Experience,
        env_steps: int,
        env_steps_before: int,
        key: jax.Array,
    ) -> tuple[LearnerState, Any]:
        algorithm = self._algorithm
        state, _ = observe(algorithm, state, module, experience)
        first = self._buffer is None
        if self._buffer is None:
            buffer = replay_init_for(algorithm, experience)
            self._buffer = algorithm.learner.placement.put(buffer)
        self._uncounted_env_steps += env_steps
        count, self._updates_due = updates_due(
            algorithm, env_steps_before, env_steps, self._updates_due
        )
        if count == 0:
            self._buffer = self._add(self._buffer, experience)
            if first:  # a wrong replay_frame_stack shows in the first rollout, not at learning
                mismatches = jax.device_get(_frame_mismatches(self._buffer))
                _check_frames(algorithm, mismatches, self._tolerated_mismatches)
            return state, None
        counted = np.int32(self._uncounted_env_steps)
        state, self._buffer, packed = self._add_and_update(
            state, self._buffer, experience, key, counted, count=count
        )
        self._uncounted_env_steps = 0
        assert self._metrics_layout is not None  # set by the trace of the call above
        metrics, mismatches = split_on_host(jax.device_get(packed), self._metrics_layout)
        _check_frames(algorithm, mismatches, self._tolerated_mismatches)
        return state, metrics

    def save(self) -> tuple[dict[str, Any], dict[str, Any]]:
        saved: dict[str, Any] = {
            "updates_due": self._updates_due,
            "uncounted_env_steps": self._uncounted_env_steps,
        }
        if isinstance(self._buffer, FramedReplay):
            saved["tolerated_frame_mismatches"] = self._tolerated_mismatches
        return saved, {} if self._buffer is None else {"buffer": self._buffer}

    def restore(self, saved: Mapping[str, Any], arrays: Mapping[str, Any]) -> None:
        if "buffer" in arrays:
            buffer = replay_from_arrays(self._algorithm, arrays["buffer"])
            self._buffer = self._algorithm.learner.placement.put(buffer)
            if isinstance(buffer, FramedReplay):
                # Environments that cannot be restored exactly restart: the first step of
                # each after the resume is no transition of the environment (masked out).
                restarted = int(buffer.frames.last.shape[0])
                tolerated = int(saved.get("tolerated_frame_mismatches", 0))
                self._tolerated_mismatches = tolerated + restarted
        self._updates_due = float(saved.get("updates_due", 0.0))
        self._uncounted_env_steps = int(saved.get("uncounted_env_steps", 0))


def _frame_mismatches(buffer: Buffer) -> Any:
    """The transitions a framed buffer could not keep as frames (``0`` for other buffers)."""
    return buffer.frames.mismatches if isinstance(buffer, FramedReplay) else np.int32(0)


def _check_frames(algorithm: OffPolicyAlgorithm, mismatches: Any, tolerated: int) -> None:
    """Raises ``ValueError`` when rollouts were not the frame stacks the buffer keeps: more
    transitions that were not than the resumes explain (one per environment each)."""
    if int(mismatches) > tolerated:
        stack = algorithm.frame_stack
        raise ValueError(
            f"{int(mismatches)} transitions held observations that are not stacks of "
            f"{stack} consecutive frames: replay_frame_stack={stack} takes observations whose "
            f"last axis holds an environment's last {stack} frames, oldest first (gymnasium's "
            "FrameStackObservation, moved to the last axis). Set replay_frame_stack to None "
            "to store observations as they are."
        )
