"""Helpers shared by the algorithms' typed configs."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import optax

from jaxlearner.algorithms.networks.encoders import (
    ACTIVATIONS,
    CONV_PADDINGS,
    check_conv_filters,
)
from jaxlearner.core.optimizer import CLIP_MODES, NEGATIVE_RATE, Optimizer
from jaxlearner.core.schedules import ScheduleLike, as_schedule, check_not_negative

ConfigT = TypeVar("ConfigT")


def make_config(cls: type[ConfigT], config: ConfigT | Mapping[str, Any] | None) -> ConfigT:
    """``cls()`` for ``None``, the config itself, or ``cls(**mapping)`` with unknown keys refused.

    Raises:
      ValueError: on a key that is not a field, listing the valid names.
      TypeError: on anything else than ``None``, a ``cls`` or a mapping.
    """
    if config is None:
        return cls()
    if isinstance(config, cls):
        return config
    if isinstance(config, Mapping):
        valid = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(config) - set(valid))
        if unknown:
            raise ValueError(
                f"Unknown {cls.__name__} field(s) {unknown}; valid names: {sorted(valid)}."
            )
        return cls(**config)
    raise TypeError(
        f"config must be a {cls.__name__}, a mapping of its fields or None; got "
        f"{type(config).__name__}."
    )


def config_to_json(config: Any) -> dict[str, Any]:
    """A config as JSON-serialisable values (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"Config value {value!r} is not JSON-serialisable.")


def config_from_json(cls: type[ConfigT], values: Mapping[str, Any]) -> ConfigT:
    """The config :func:`config_to_json` wrote (lists of numbers become tuples where the
    default is a tuple)."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    converted = {
        name: tuple(value)
        if isinstance(defaults.get(name), tuple) and isinstance(value, list)
        else value
        for name, value in values.items()
    }
    return make_config(cls, converted)


def parse_overrides(cls: type[ConfigT], items: Sequence[str]) -> dict[str, Any]:
    """``["lr=1e-3", "hidden_sizes=[64,64]"]`` -> ``{"lr": 0.001, "hidden_sizes": (64, 64)}``.

    Values are parsed as JSON (numbers, lists, booleans, ``null``); Python's
    ``True``, ``False`` and ``None`` are read as JSON's ``true``, ``false`` and
    ``null``; anything else is the plain string.

    Raises:
      ValueError: for an item without ``=`` or an unknown key (valid names listed).
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"Config overrides look like key=value; got {item!r}.")
        if key not in fields:
            raise ValueError(
                f"Unknown {cls.__name__} field {key!r}; valid names: {sorted(fields)}."
            )
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = {"True": True, "False": False, "None": None}.get(text.strip(), text)
        if isinstance(fields[key].default, tuple) and isinstance(value, list):
            value = tuple(value)
        overrides[key] = value
    return overrides


def _is_finite_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def check_positive(owner: str, **values: Any) -> None:
    """Raises ``ValueError`` unless each value is a positive finite number."""
    for name, value in values.items():
        if not _is_finite_number(value) or value <= 0:
            raise ValueError(f"{owner}.{name} must be a positive number; got {value!r}.")


def check_non_negative(owner: str, **values: Any) -> None:
    """Raises ``ValueError`` unless each value is a finite number ``>= 0`` (NaN is refused)."""
    for name, value in values.items():
        if not _is_finite_number(value) or value < 0:
            raise ValueError(f"{owner}.{name} must be >= 0 and finite; got {value!r}.")


def check_optional_positive(owner: str, **values: Any) -> None:
    """Raises ``ValueError`` unless each value is ``None`` or a positive finite number."""
    for name, value in values.items():
        if value is not None and (not _is_finite_number(value) or value <= 0):
            raise ValueError(f"{owner}.{name} must be a positive number or None; got {value!r}.")


def check_positive_int(owner: str, **values: Any) -> None:
    """Raises ``ValueError`` unless each value is a positive int."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{owner}.{name} must be a positive int; got {value!r}.")


def check_non_negative_int(owner: str, **values: Any) -> None:
    """Raises ``ValueError`` unless each value is an int ``>= 0``."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{owner}.{name} must be a non-negative int; got {value!r}.")


def check_minibatch_size(config: Any) -> None:
    """Raises ``ValueError`` when a frozen config's ``minibatch_size`` (``None``: the whole
    batch) exceeds its ``train_batch_size`` (PPO's, APPO's, PQN's)."""
    minibatch, batch = config.minibatch_size, config.train_batch_size
    if minibatch is not None and minibatch > batch:
        raise ValueError(
            f"{type(config).__name__}.minibatch_size ({minibatch}) exceeds train_batch_size "
            f"({batch})."
        )


def steps_per_env(name: str, train_batch_size: int, num_envs: int) -> int:
    """The rollout's steps per environment for a batch of ``train_batch_size`` env steps
    collected by ``num_envs`` environments (PPO's, PQN's ``rollout_steps``).

    Raises:
      ValueError: when the batch does not split over the environments.

    Example:
      >>> steps_per_env("PPO", 2048, 8)
      256
    """
    if train_batch_size % num_envs:
        raise ValueError(
            f"{name}'s train_batch_size {train_batch_size} does not split over {num_envs} "
            "environments; use a multiple of num_envs."
        )
    return train_batch_size // num_envs


def check_bool(owner: str, **values: Any) -> None:
    """Raises ``TypeError`` unless each value is ``True`` or ``False``."""
    for name, value in values.items():
        if not isinstance(value, bool):
            raise TypeError(f"{owner}.{name} must be True or False; got {value!r}.")


def check_choice(owner: str, name: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raises ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{owner}.{name} must be one of {choices}; got {value!r}.")


def check_layers(owner: str, **values: Any) -> None:
    """Raises ``ValueError`` unless each value is a sequence of positive ints (``()`` allowed)."""
    for name, value in values.items():
        if (
            isinstance(value, str | bytes)
            or not isinstance(value, Sequence)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in value)
        ):
            raise ValueError(
                f"{owner}.{name} must be a sequence of positive ints (units per layer), "
                f"e.g. (64, 64); got {value!r}."
            )


def check_activation(owner: str, **values: Any) -> None:
    """Raises ``ValueError`` unless each value names an activation of the MLPs."""
    for name, value in values.items():
        if value not in ACTIVATIONS:
            raise ValueError(f"{owner}.{name} must be one of {sorted(ACTIVATIONS)}; got {value!r}.")


def check_fraction(owner: str, **values: Any) -> None:
    """Raises ``ValueError`` unless each value is a number in ``[0, 1]``."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ValueError(f"{owner}.{name} must be a number in [0, 1]; got {value!r}.")


def check_schedule(owner: str, **values: Any) -> None:
    """Raises for values that are no constant, optax schedule or piecewise list."""
    for name, value in values.items():
        try:
            as_schedule(value, f"{owner}.{name}")
        except (TypeError, ValueError) as error:
            raise type(error)(str(error)) from None


def check_learning_rates(owner: str, **rates: Any) -> None:
    """Raises for a learning rate that is no schedule (as :func:`check_schedule`) or is
    negative: a constant, any point of a piecewise list, a schedule's value at count 0.

    Example:
      >>> check_learning_rates("SACConfig", critic_lr=-3e-4)
      Traceback (most recent call last):
      ...
      ValueError: SACConfig.critic_lr must be >= 0 (optax steps against the gradient already: a negative rate climbs the loss); got -0.0003.
    """  # noqa: E501
    check_schedule(owner, **rates)
    for name, rate in rates.items():
        check_not_negative(rate, f"{owner}.{name}", NEGATIVE_RATE)


def freeze_schedule(value: Any) -> Any:
    """A piecewise list ``[[t, v], ...]`` as nested tuples (hashable, equal after JSON)."""
    if isinstance(value, list | tuple) and all(isinstance(p, list | tuple) for p in value):
        return tuple(tuple(point) for point in value)
    return value


def freeze_schedules(config: Any, *names: str) -> None:
    """Replaces each named field of a frozen ``config`` by :func:`freeze_schedule` of it."""
    for name in names:
        object.__setattr__(config, name, freeze_schedule(getattr(config, name)))


def check_policy_network_config(config: Any) -> None:
    """Checks and normalises the fields of an actor(-critic) MLP and its optimizer's clipping.

    For the configs of PPO, APPO, MARWIL and BC, each of which keeps these
    fields itself, with RLlib's flat names: ``grad_clip_by``, ``hidden_sizes``,
    ``head_hidden_sizes``, ``activation``, ``head_activation``, ``conv_padding`` and
    ``conv_filters`` (stored as tuples of triples).
    The layer sizes are stored as tuples (hashable, equal after JSON).

    Args:
      config: a frozen config dataclass; its class name starts each message.

    Raises:
      ValueError: naming the field, the value received and the valid values:
        ``grad_clip_by`` in ``CLIP_MODES``, layer sizes as positive ints, known
        activations, ``conv_padding`` in ``CONV_PADDINGS``, ``conv_filters`` ``None`` or
        ``(out_channels, kernel, stride)`` triples (``()``: no convolution).

    Example:
      >>> check_policy_network_config(PPOConfig())  # doctest: +SKIP
    """
    owner = type(config).__name__
    check_choice(owner, "grad_clip_by", config.grad_clip_by, CLIP_MODES)
    check_layers(
        owner, hidden_sizes=config.hidden_sizes, head_hidden_sizes=config.head_hidden_sizes
    )
    check_activation(owner, activation=config.activation, head_activation=config.head_activation)
    check_conv_config(config)
    object.__setattr__(config, "hidden_sizes", tuple(config.hidden_sizes))
    object.__setattr__(config, "head_hidden_sizes", tuple(config.head_hidden_sizes))


def check_conv_config(config: Any) -> None:
    """Checks a frozen config's CNN fields, ``conv_padding`` and ``conv_filters``, and stores
    the filters as tuples of ``(out_channels, kernel, stride)`` triples.

    Raises:
      ValueError: naming the field, the value received and the valid values.
    """
    owner = type(config).__name__
    check_choice(owner, "conv_padding", config.conv_padding, CONV_PADDINGS)
    filters = check_conv_filters(config.conv_filters, f"{owner}.conv_filters")
    object.__setattr__(config, "conv_filters", filters)


def check_offline_batch_config(config: Any) -> None:
    """Checks the batching fields of the offline configs (MARWIL's and BC's).

    Raises:
      ValueError: unless ``train_batch_size`` is a positive int and
        ``dataset_num_iters_per_learner`` ``None`` or a positive int.
    """
    owner = type(config).__name__
    check_positive_int(owner, train_batch_size=config.train_batch_size)
    if config.dataset_num_iters_per_learner is not None:
        iterations = config.dataset_num_iters_per_learner
        check_positive_int(owner, dataset_num_iters_per_learner=iterations)


def config_adam(
    config: Any, learning_rate: ScheduleLike | None = None, **hyperparams: Any
) -> Optimizer:
    """Adam at ``learning_rate`` (the config's ``lr`` by default), clipped as the config's
    ``grad_clip`` and ``grad_clip_by`` say (RLlib's names); ``hyperparams`` go to Adam
    (DQN's ``eps``).

    Example:
      >>> optimizer = config_adam(PPOConfig(grad_clip=0.5))           # doctest: +SKIP
      >>> critic = config_adam(sac_config, sac_config.critic_lr)      # doctest: +SKIP
    """
    return Optimizer(
        optax.adam,
        learning_rate=config.lr if learning_rate is None else learning_rate,
        grad_clip=config.grad_clip,
        grad_clip_by=config.grad_clip_by,
        hyperparams=hyperparams,
    )
