"""The config fields DQN, SAC and TD3 share, checked once (each config class keeps its own)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from jaxlearner.algorithms.config import (
    check_activation,
    check_choice,
    check_fraction,
    check_layers,
    check_non_negative_int,
    check_optional_positive,
    check_positive_int,
    check_schedule,
)
from jaxlearner.algorithms.trajectories.normalization import check_normalization_config
from jaxlearner.core.optimizer import CLIP_MODES
from jaxlearner.core.schedules import ScheduleLike

TD_ERROR_LOSSES: tuple[str, ...] = ("huber", "mse")
"""``td_error_loss_fn`` values: Huber with delta 1 (``0.5 x^2`` inside ``|x| < 1``) or ``x^2``."""


class OffPolicyFields(Protocol):
    """The config fields DQN's, SAC's and TD3's configs share, with RLlib's flat names.

    Each config class declares them itself (no inheritance: saved recipes and
    ``key=value`` overrides name them flat); :func:`check_off_policy_config`
    checks them once for both. ``tau`` is a constant or a schedule (frozen
    with :func:`~jaxlearner.algorithms.config.freeze_schedule` first).
    """

    gamma: float
    tau: ScheduleLike
    train_batch_size: int
    replay_buffer_capacity: int
    num_steps_sampled_before_learning_starts: int
    training_intensity: float | None
    rollout_fragment_length: int
    n_step: int
    hidden_sizes: Sequence[int]
    activation: str
    td_error_loss_fn: str
    grad_clip: float | None
    grad_clip_by: str
    prioritized_replay: bool
    prioritized_replay_alpha: float
    prioritized_replay_beta: float
    prioritized_replay_eps: float
    replay_frame_stack: int | None


def check_off_policy_config(owner: str, config: OffPolicyFields) -> None:
    """Checks the fields of :class:`OffPolicyFields`, for the DQN, SAC and TD3 configs.

    Args:
      owner: the config's class name, which starts each message
        (``"DQNConfig.gamma must be ..."``).
      config: the config, its schedules already frozen.

    Raises:
      ValueError: naming the field, the value received and what is expected:
        ``gamma`` in ``[0, 1]``; ``tau`` in ``(0, 1]`` or a schedule; positive
        ints ``train_batch_size``, ``replay_buffer_capacity`` (at least
        ``train_batch_size``), ``rollout_fragment_length`` and ``n_step``; an
        int ``num_steps_sampled_before_learning_starts >= 0``; ``None`` or
        positive ``training_intensity`` and ``grad_clip``; ``td_error_loss_fn``
        in :data:`TD_ERROR_LOSSES`, ``grad_clip_by`` in ``CLIP_MODES``;
        ``hidden_sizes`` positive ints; a known ``activation``; the
        prioritized replay fields (:func:`check_prioritized_replay_config`); the
        normalization fields the config keeps
        (:func:`~jaxlearner.algorithms.trajectories.normalization.check_normalization_config`);
        ``replay_frame_stack`` ``None`` or an int ``>= 2``.
      TypeError: for a ``tau`` that is neither a number nor a schedule.

    Example:
      >>> check_off_policy_config("DQNConfig", DQNConfig())        # doctest: +SKIP
    """
    check_prioritized_replay_config(owner, config)
    check_normalization_config(owner, config)
    stack = config.replay_frame_stack
    if stack is not None and (isinstance(stack, bool) or not isinstance(stack, int) or stack < 2):
        raise ValueError(
            f"{owner}.replay_frame_stack must be None or an int >= 2 (the frames stacked on "
            f"the observations' last axis); got {stack!r}."
        )
    check_schedule(owner, tau=config.tau)
    check_fraction(owner, gamma=config.gamma)
    if isinstance(config.tau, int | float) and not 0 < config.tau <= 1:
        raise ValueError(f"{owner}.tau must lie in (0, 1]; got {config.tau!r}.")
    check_positive_int(
        owner,
        train_batch_size=config.train_batch_size,
        replay_buffer_capacity=config.replay_buffer_capacity,
        rollout_fragment_length=config.rollout_fragment_length,
        n_step=config.n_step,
    )
    check_non_negative_int(
        owner,
        num_steps_sampled_before_learning_starts=config.num_steps_sampled_before_learning_starts,
    )
    check_optional_positive(
        owner, training_intensity=config.training_intensity, grad_clip=config.grad_clip
    )
    check_choice(owner, "td_error_loss_fn", config.td_error_loss_fn, TD_ERROR_LOSSES)
    check_choice(owner, "grad_clip_by", config.grad_clip_by, CLIP_MODES)
    check_layers(owner, hidden_sizes=config.hidden_sizes)
    check_activation(owner, activation=config.activation)
    if config.replay_buffer_capacity < config.train_batch_size:
        raise ValueError(
            f"{owner}.replay_buffer_capacity ({config.replay_buffer_capacity}) is smaller "
            f"than train_batch_size ({config.train_batch_size})."
        )


def check_prioritized_replay_config(owner: str, config: Any) -> None:
    """Checks a config's ``prioritized_replay`` fields (DQN's and SAC's).

    Raises:
      ValueError: unless ``prioritized_replay`` is a bool, ``prioritized_replay_alpha``
        and ``prioritized_replay_beta`` numbers in ``[0, 1]`` and
        ``prioritized_replay_eps`` a number ``>= 0``.
    """
    if not isinstance(config.prioritized_replay, bool):
        raise ValueError(
            f"{owner}.prioritized_replay must be True or False; got {config.prioritized_replay!r}."
        )
    for name, high in (("alpha", 1.0), ("beta", 1.0), ("eps", math.inf)):
        value = getattr(config, f"prioritized_replay_{name}")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not 0 <= value <= high
        ):
            valid = "a number >= 0" if high == math.inf else "a number in [0, 1]"
            raise ValueError(f"{owner}.prioritized_replay_{name} must be {valid}; got {value!r}.")


def check_frame_stack(owner: str, config: OffPolicyFields, observation_space: Any) -> None:
    """Raises ``ValueError`` unless ``replay_frame_stack`` is ``None`` or the last axis of
    ``observation_space`` (a ``Box`` of frames, each at least one axis, stacked last)."""
    stack = config.replay_frame_stack
    if stack is None:
        return
    shape = getattr(observation_space, "shape", None)
    if not shape or len(shape) < 2 or shape[-1] != stack:
        raise ValueError(
            f"{owner}.replay_frame_stack={stack} needs observations of frames stacked on the "
            f"last axis, shape [..., {stack}]; the observation space is {observation_space}."
        )
