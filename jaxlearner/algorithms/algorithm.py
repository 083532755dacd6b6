"""Algorithm: what a built-in algorithm adds around its learner.

A :class:`~jaxlearner.Learner` only trains on batches. To collect those
batches from an environment a trainer also needs to know how to act and how
to turn experience into training batches. An :class:`Algorithm` bundles
these pure functions with the learner; the :class:`~jaxlearner.Trainer` and
the command line use it, and your own loop can too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import jax

from jaxlearner.learner import Learner
from jaxlearner.state import ModuleState
from jaxlearner.types import Batch

ActFn: TypeAlias = Callable[
    [ModuleState, jax.Array, jax.Array], tuple[jax.Array, Mapping[str, Any]]
]
"""``act(module_state, obs [N, ...], key) -> (env_actions [N, ...], extras {name: [N, ...]})``.

``extras["actions"]``, when present, is the action to train on where it differs
from the one sent to the environment (e.g. before clipping to a ``Box``).
"""

Experience: TypeAlias = Mapping[str, jax.Array]
"""A rollout as ``[T, N, ...]`` arrays: ``obs``, ``actions``, ``rewards``,
``terminated``, ``truncated``, ``next_obs``, ``valid`` and the act function's
extras."""

PostprocessFn: TypeAlias = Callable[[ModuleState, Experience], Batch]
"""``postprocess(module_state, experience [T, N, ...]) -> batch [T * N, ...]``, pure."""


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """A built-in algorithm: its learner plus how to act and what to train on.

    Attributes:
      name: ``"ppo"``, ``"dqn"``, ``"sac"``.
      module_id: the learner's (single) module.
      learner: the learner.
      config: the algorithm's typed config.
      explore: the act function for collecting experience (sampling, epsilon-greedy).
      exploit: the deterministic act function for evaluation.
      on_policy: ``True`` trains on each rollout once (``postprocess``);
        ``False`` stores transitions in a replay buffer and samples from it.
      postprocess: on-policy: ``(module_state, experience) -> batch`` of
        ``[T * N, ...]`` rows (e.g. GAE advantages), pure.
      transitions: off-policy: ``experience -> {name: [T * N, ...]}`` rows
        for the replay buffer, pure.
      rollout_steps: steps per sub-environment per training iteration, for
        the given number of environments: ``rollout_steps(num_envs)``.
      replay_capacity: off-policy: the replay buffer's size in transitions.
      train_batch_size: off-policy: rows sampled per gradient update.
      learning_starts: off-policy: env steps collected before training.
      updates_per_step: off-policy: ``update`` calls per env step collected
        (RLlib's training intensity divided by the batch size).
    """

    name: str
    module_id: str
    learner: Learner
    config: Any
    explore: ActFn
    exploit: ActFn
    on_policy: bool
    rollout_steps: Callable[[int], int]
    postprocess: Callable[[ModuleState, Experience], Batch] | None = None
    transitions: Callable[[Experience], Batch] | None = None
    replay_capacity: int = 0
    train_batch_size: int = 0
    learning_starts: int = 0
    updates_per_step: float = 0.0

    def __post_init__(self) -> None:
        if self.on_policy and self.postprocess is None:
            raise ValueError(f"On-policy algorithm {self.name!r} needs a postprocess function.")
        if not self.on_policy and (self.transitions is None or self.replay_capacity <= 0):
            raise ValueError(
                f"Off-policy algorithm {self.name!r} needs transitions and a replay_capacity."
            )

    def with_learner(self, learner: Learner) -> Algorithm:
        """The same algorithm around another learner (e.g. one restored from a checkpoint)."""
        return dataclasses.replace(self, learner=learner)
