"""Algorithms by kind: what a built-in algorithm adds around its learner.

A :class:`~jaxlearner.Learner` only trains on batches. To collect those
batches from an environment a training loop also needs to know how to act
and how to turn experience into training batches, and that differs by kind:

* an :class:`OnPolicyAlgorithm` (PPO) turns each rollout into one batch
  (``postprocess``) and trains on it once;
* an :class:`OffPolicyAlgorithm` (DQN, SAC) turns each rollout into replay
  rows (``transitions``), stores them in a replay buffer and trains on
  batches sampled from it (:func:`~jaxlearner.algorithms.replay.off_policy.make_replay_updates`);
* an :class:`OfflineAlgorithm` (BC, MARWIL) collects nothing: it turns a
  dataset of recorded episodes into rows once (``rows``) and trains on
  batches drawn from them (:func:`~jaxlearner.algorithms.offline.make_offline_updates`),
  acting in an environment only to be evaluated.

Both are final frozen values of pure functions around one learner; the
:func:`~jaxlearner.Trainer`, :mod:`jaxlearner.anakin.train` and the command line
choose what to do by the kind, once, and your own loop can too.
:data:`Algorithm` is either kind.

Example:
  >>> import gymnasium as gym, jaxlearner as jl
  >>> env = gym.make("CartPole-v1")
  >>> algorithm = jl.algorithms.build("dqn", env.observation_space, env.action_space)
  >>> isinstance(algorithm, jl.algorithms.OffPolicyAlgorithm), algorithm.train_batch_size
  (True, 32)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias, TypeVar, final

import jax

from jaxlearner.core.learner import Learner
from jaxlearner.core.state import ModuleState
from jaxlearner.types import Batch, Experience

MODULE_ID = "default_policy"
"""The one module of a built-in algorithm's learner (RLlib's ``DEFAULT_MODULE_ID``)."""

ActFn: TypeAlias = Callable[
    [ModuleState, jax.Array, jax.Array], tuple[jax.Array, Mapping[str, Any]]
]
"""``act(module_state, obs [N, ...], key) -> (env_actions [N, ...], extras {name: [N, ...]})``.

``extras["actions"]``, when present, is the action to train on where it differs
from the one sent to the environment (e.g. before clipping to a ``Box``).
"""


RecurrentActFn: TypeAlias = Callable[
    [ModuleState, Any, jax.Array, jax.Array, jax.Array],
    tuple[jax.Array, Mapping[str, Any], Any],
]
"""``act(module_state, carry, obs [N, ...], is_first [N], key) -> (env_actions, extras, carry)``.

``is_first`` is true where an episode starts at this step: the act function
zeroes that environment's carry before using it.
"""

PostprocessFn: TypeAlias = Callable[[ModuleState, Experience], Batch]
"""``postprocess(module_state, experience [T, N, ...]) -> batch [T * N, ...]``, pure."""

TransitionsFn: TypeAlias = Callable[[Experience], Batch]
"""``transitions(experience [T, N, ...]) -> replay rows [T * N, ...]``, pure."""

RowsFn: TypeAlias = Callable[[Mapping[str, jax.Array]], Batch]
"""``rows(episodes) -> rows [N, ...]``: a dataset's ``[N]`` steps (whole episodes back to back:
``obs``, ``actions``, ``rewards``, ``terminated``, ``truncated``, ``next_obs``,
``episode_ends``) as the rows the loss trains on, pure."""

TDErrorsFn: TypeAlias = Callable[[ModuleState, Batch, jax.Array], jax.Array]
"""``td_errors(module_state, batch [B, ...], key) -> [B]``: each row's TD error as the loss
computes it (``key`` for losses that sample, e.g. SAC's next actions)."""


AlgorithmT = TypeVar("AlgorithmT")


def _with_learner(self: AlgorithmT, learner: Learner) -> AlgorithmT:
    """The same algorithm around another learner of the same model (restored, re-placed).

    Each algorithm kind's ``with_learner`` method.
    """
    return dataclasses.replace(self, learner=learner)  # type: ignore[type-var]


@final
@dataclasses.dataclass(frozen=True)
class PrioritizedReplay:
    """Proportional prioritized replay (Schaul et al. 2016) for an off-policy algorithm.

    The replay loop (:func:`~jaxlearner.algorithms.replay.off_policy.make_replay_updates`)
    samples rows with probability ``p_i^alpha / sum_k p_k^alpha``, adds their
    importance weights to the batch as ``batch["weights"]`` (the loss
    multiplies each row's TD loss by it) and, before the update changes the
    params, sets each sampled row's priority to ``|td_errors(module, batch, key)| + eps``,
    the TD error the update trains on (the paper's Algorithm 1, RLlib's
    ``update_priorities``).

    Attributes:
      alpha: the priority exponent in ``[0, 1]``.
      beta: the importance-weight exponent in ``[0, 1]``, constant over training.
      eps: added to every priority, ``>= 0``.
      td_errors: the per-row TD errors of a batch under a module state.
    """

    alpha: float
    beta: float
    eps: float
    td_errors: TDErrorsFn


@final
@dataclasses.dataclass(frozen=True)
class RecurrentAct:
    """A recurrent act function and its initial state: what a loop needs to act with memory.

    An algorithm with a recurrent model (PPO with ``use_lstm``) has
    ``RecurrentAct`` values as its ``explore`` and ``exploit``. A loop keeps one
    carry per environment across steps (and iterations), starting from
    ``initial_carry(num_envs)``, and passes ``is_first`` (true at an
    episode's first step, e.g. after a reset) so the carry is reset there; the
    :class:`~jaxlearner.training.env_runner.EnvRunner` does this for any
    ``RecurrentAct``. The act function returns, among its extras, the carry it
    was given (``state_in``) and ``is_first``, so ``postprocess`` can replay
    the rollout's sequences from their stored initial states.

    Attributes:
      act: see :data:`RecurrentActFn`.
      initial_carry: ``initial_carry(num_envs) -> carry``, leaves ``[num_envs, ...]``.

    Example:
      >>> algorithm = jl.algorithms.build("ppo", obs_space, act_space, {"use_lstm": True})
      ... # doctest: +SKIP
      >>> carry = algorithm.explore.initial_carry(8)                      # doctest: +SKIP
      >>> actions, extras, carry = algorithm.explore(module, carry, obs, is_first, key)
      ... # doctest: +SKIP
    """

    act: RecurrentActFn
    initial_carry: Callable[[int], Any]

    def __call__(
        self, module: ModuleState, carry: Any, obs: jax.Array, is_first: jax.Array, key: jax.Array
    ) -> tuple[jax.Array, Mapping[str, Any], Any]:
        return self.act(module, carry, obs, is_first, key)


@final
@dataclasses.dataclass(frozen=True)
class OnPolicyAlgorithm:
    """An on-policy algorithm: trains once on each rollout, as ``postprocess`` shapes it.

    Attributes:
      name: the algorithm's name (``"ppo"``), as in its learner's recipe.
      module_id: the learner's (single) module.
      learner: the learner.
      config: the algorithm's typed config.
      explore: the act function for collecting experience (sampling); a
        :class:`RecurrentAct` for a recurrent model.
      exploit: the deterministic act function for evaluation (a
        :class:`RecurrentAct` for a recurrent model).
      rollout_steps: steps per sub-environment per training iteration, for
        the given number of environments: ``rollout_steps(num_envs)``.
      postprocess: ``(module_state, experience) -> batch`` of ``[T * N, ...]``
        rows (e.g. GAE advantages), or of ``[S, max_seq_len, ...]`` sequences
        for a recurrent model, pure.
      policy_lag: collect each rollout with the module state of this many
        updates ago (0: the current one), to train on stale experience as an
        asynchronous learner would (APPO's V-trace corrects for it). The
        :func:`~jaxlearner.Trainer` keeps the last ``policy_lag + 1`` states.

    Raises:
      ValueError: for a ``policy_lag`` that is not an int >= 0.
    """

    name: str
    module_id: str
    learner: Learner
    config: Any
    explore: ActFn | RecurrentAct
    exploit: ActFn | RecurrentAct
    rollout_steps: Callable[[int], int]
    postprocess: PostprocessFn
    policy_lag: int = 0

    def __post_init__(self) -> None:
        lag = self.policy_lag
        if isinstance(lag, bool) or not isinstance(lag, int) or lag < 0:
            raise ValueError(f"policy_lag must be an int >= 0; got {self.policy_lag!r}.")

    with_learner = _with_learner


@final
@dataclasses.dataclass(frozen=True)
class OffPolicyAlgorithm:
    """An off-policy algorithm: stores ``transitions`` in a replay buffer and samples from it.

    Attributes:
      name: the algorithm's name (``"dqn"``, ``"sac"``), as in its learner's recipe.
      module_id: the learner's (single) module.
      learner: the learner; each ``update`` is one gradient step on a sampled batch.
      config: the algorithm's typed config.
      explore: the act function for collecting experience (epsilon-greedy, sampling).
      exploit: the deterministic act function for evaluation.
      rollout_steps: steps per sub-environment per training iteration, for
        the given number of environments: ``rollout_steps(num_envs)``.
      transitions: ``experience -> {name: [T * N, ...]}`` rows for the replay
        buffer, pure.
      replay_capacity: the replay buffer's size in transitions.
      train_batch_size: rows sampled per gradient update.
      learning_starts: env steps collected before training.
      updates_per_step: ``update`` calls per env step collected (RLlib's
        training intensity divided by the batch size).
      prioritized_replay: a :class:`PrioritizedReplay` to sample by priority,
        or ``None`` (the default) for uniform replay.
      frame_stack: the frames stacked on the observations' last axis, kept once per
        frame in the buffer (:mod:`~jaxlearner.algorithms.replay.frame_stack`), or
        ``None`` (the default) to store observations as they are.

    Raises:
      ValueError: for a capacity, batch size or update rate that is not positive,
        a negative ``learning_starts`` or a ``frame_stack`` below 2.
    """

    name: str
    module_id: str
    learner: Learner
    config: Any
    explore: ActFn
    exploit: ActFn
    rollout_steps: Callable[[int], int]
    transitions: TransitionsFn
    replay_capacity: int
    train_batch_size: int
    learning_starts: int
    updates_per_step: float
    prioritized_replay: PrioritizedReplay | None = None
    frame_stack: int | None = None

    def __post_init__(self) -> None:
        if self.frame_stack is not None and (
            isinstance(self.frame_stack, bool)
            or not isinstance(self.frame_stack, int)
            or self.frame_stack < 2
        ):
            raise ValueError(
                f"Off-policy algorithm {self.name!r}: frame_stack must be None or an int >= 2; "
                f"got {self.frame_stack!r}."
            )
        if self.replay_capacity <= 0 or self.train_batch_size <= 0 or self.updates_per_step <= 0:
            raise ValueError(
                f"Off-policy algorithm {self.name!r} needs a positive replay_capacity, "
                f"train_batch_size and updates_per_step; got {self.replay_capacity}, "
                f"{self.train_batch_size} and {self.updates_per_step}."
            )
        if self.learning_starts < 0:
            raise ValueError(
                f"Off-policy algorithm {self.name!r}: learning_starts must be >= 0; got "
                f"{self.learning_starts}."
            )

    with_learner = _with_learner


@final
@dataclasses.dataclass(frozen=True)
class OfflineAlgorithm:
    """An offline algorithm: trains on rows of a recorded dataset, never on its own experience.

    Attributes:
      name: the algorithm's name (``"bc"``, ``"marwil"``), as in its learner's recipe.
      module_id: the learner's (single) module.
      learner: the learner; each ``update`` is one gradient step on one batch of rows.
      config: the algorithm's typed config.
      explore: the sampling act function (evaluation with ``deterministic=False``).
      exploit: the deterministic act function for evaluation.
      rows: see :data:`RowsFn`; run once per dataset.
      train_batch_size: rows per gradient update.
      updates_per_iteration: updates per training iteration, or ``None`` for
        one pass over the rows (RLlib's ``dataset_num_iters_per_learner``).

    Raises:
      ValueError: for a ``train_batch_size`` or ``updates_per_iteration`` that is
        not a positive int.
    """

    name: str
    module_id: str
    learner: Learner
    config: Any
    explore: ActFn
    exploit: ActFn
    rows: RowsFn
    train_batch_size: int
    updates_per_iteration: int | None = None

    def __post_init__(self) -> None:
        counts = {"train_batch_size": self.train_batch_size}
        if self.updates_per_iteration is not None:
            counts["updates_per_iteration"] = self.updates_per_iteration
        for field, value in counts.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"Offline algorithm {self.name!r}: {field} must be a positive int; got "
                    f"{value!r}."
                )

    with_learner = _with_learner


def algorithm_fields(
    name: str,
    learner: Learner,
    config: Any,
    acts: tuple[Any, Any],
    module_id: str = MODULE_ID,
) -> dict[str, Any]:
    """The fields every algorithm kind starts with, as keyword arguments.

    Args:
      name: the algorithm's name, as in its learner's recipe.
      learner: the learner.
      config: the algorithm's typed config.
      acts: ``(explore, exploit)``, e.g. from
        :func:`~jaxlearner.algorithms.networks.acting.explore_and_exploit`.
      module_id: the learner's module.

    Example:
      >>> OfflineAlgorithm(**algorithm_fields("bc", learner, config, acts), rows=rows,
      ...                  train_batch_size=256)                       # doctest: +SKIP
    """
    explore, exploit = acts
    return {
        "name": name,
        "module_id": module_id,
        "learner": learner,
        "config": config,
        "explore": explore,
        "exploit": exploit,
    }


Algorithm: TypeAlias = OnPolicyAlgorithm | OffPolicyAlgorithm
"""Either kind of algorithm that collects its own experience; ``isinstance(x, Algorithm)``
and ``match`` tell them apart (an :class:`OfflineAlgorithm` is neither).

Both kinds have ``name``, ``module_id``, ``learner``, ``config``, ``explore``,
``exploit``, ``rollout_steps`` and ``with_learner``.
"""

AnyAlgorithm: TypeAlias = OnPolicyAlgorithm | OffPolicyAlgorithm | OfflineAlgorithm
"""Any algorithm kind, offline included, as the recipe registry builds them. All three have
``name``, ``module_id``, ``learner``, ``config``, ``explore``, ``exploit`` and
``with_learner``."""
