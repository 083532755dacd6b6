"""One preset: tuned settings for one algorithm on one environment, and where they come from."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

from jaxlearner.algorithms.builtin import algorithm_recipe
from jaxlearner.algorithms.config import make_config

Origin: TypeAlias = Literal["rl_zoo3", "jaxlearner", "published"]
"""Who tuned a row: RL Zoo (``rl_zoo3/hyperparams/*.yml``), this project, or another published
configuration that the row's ``source`` names (a paper's, gymnax-blines')."""

ANY_ATARI = "ALE/*"
"""The ``env_id`` of rows for every Atari game (every ``ALE/`` id), as RL Zoo's ``atari``
entries are."""

ANY_MINATAR = "gymnax:*-MinAtar"
"""The ``env_id`` of rows for every MinAtar game in gymnax (``gymnax:Breakout-MinAtar``, ...)."""


def covers(row_env_id: str, env_id: str) -> bool:
    """Whether a row of ``row_env_id`` is for ``env_id``: the same id, or a pattern's
    (:data:`ANY_ATARI` covers every ``ALE/`` id, :data:`ANY_MINATAR` every MinAtar game).

    Example:
      >>> covers("ALE/*", "ALE/Pong-v5"), covers("CartPole-v1", "ALE/Pong-v5")
      (True, False)
      >>> covers("gymnax:*-MinAtar", "gymnax:Breakout-MinAtar")
      True
    """
    if row_env_id == ANY_MINATAR:
        return env_id.startswith("gymnax:") and env_id.endswith("-MinAtar")
    return row_env_id == env_id or (row_env_id == ANY_ATARI and env_id.startswith("ALE/"))


ORIGINS: tuple[Origin, ...] = ("jaxlearner", "rl_zoo3", "published")
"""The origins, in the order :func:`~jaxlearner.algorithms.presets.preset` prefers them: a row
tuned here exists only where it reached the same goal faster on a CPU than RL Zoo's (its notes
say by how much), so it goes first; rows from other published configurations cover what RL Zoo
does not (MinAtar)."""


@dataclasses.dataclass(frozen=True)
class Preset:
    """Tuned settings for one algorithm on one environment: its config and how to train it.

    Attributes:
      algorithm: the registered algorithm's name (``"ppo"``, ``"sac"``, ...).
      env_id: the gymnasium environment id (RL Zoo's ``-v4`` and ``-v2`` MuJoCo entries
        are given here under gymnasium's ``-v5`` ids), :data:`ANY_ATARI` for every
        Atari game, or :data:`ANY_MINATAR` for every MinAtar game in gymnax.
      config: the algorithm's config fields (its config class's names), read-only.
      num_envs: sub-environments stepped together (SB3's ``n_envs``).
      max_steps: the env-step budget (RL Zoo's ``n_timesteps``); ``lin_`` schedules reach 0
        there.
      eval_every: env steps between evaluations.
      source: the file and entry the numbers come from, e.g.
        ``"rl_zoo3/hyperparams/ppo.yml: HalfCheetah-v4"``.
      notes: what the translation changed or left out, and why.
      origin: ``"rl_zoo3"``, ``"jaxlearner"`` or ``"published"`` (see :data:`ORIGINS`).

    Raises:
      ValueError: for an unknown origin, counts that are not positive ints, or an empty
        algorithm, env id or source.

    Example:
      >>> row = jl.algorithms.presets.preset_rows("ppo", "HalfCheetah-v5")[0]  # doctest: +SKIP
      >>> row.num_envs, row.max_steps, row.config["lr"]                        # doctest: +SKIP
      (1, 1000000, 2.0633e-05)
    """

    algorithm: str
    env_id: str
    config: Mapping[str, Any]
    num_envs: int
    max_steps: int
    eval_every: int
    source: str
    notes: str = ""
    origin: Origin = "rl_zoo3"

    def __post_init__(self) -> None:
        for name in ("algorithm", "env_id", "source"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"Preset.{name} must be a non-empty string; got {value!r}.")
        for name in ("num_envs", "max_steps", "eval_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Preset.{name} must be a positive int; got {value!r}.")
        if self.origin not in ORIGINS:
            raise ValueError(f"Preset.origin must be one of {ORIGINS}; got {self.origin!r}.")
        object.__setattr__(self, "config", types.MappingProxyType(dict(self.config)))

    @property
    def name(self) -> str:
        """``"ALGORITHM/ENV_ID (ORIGIN)"``, as run.json and ``jaxlearner presets`` show it."""
        return f"{self.algorithm}/{self.env_id} ({self.origin})"

    @property
    def schedules(self) -> tuple[str, ...]:
        """The config fields that are schedules over env steps (``((step, value), ...)``)."""
        return tuple(name for name, value in self.config.items() if _is_schedule(value))

    def with_budget(self, max_steps: int) -> Preset:
        """This row trained for ``max_steps`` env steps, as RL Zoo's ``-n`` trains its rows.

        SB3's schedules (``lin_X``, DQN's ``exploration_fraction``) follow the progress
        through the budget, so an RL Zoo row's schedules are stretched or shrunk to the new
        budget (each step of a ``((step, value), ...)`` schedule times
        ``max_steps / self.max_steps``, rounded). Rows tuned here or taken from another
        published configuration write their schedules in env steps, as their sources do, and
        keep them; so does every field that is not a schedule.

        Raises:
          ValueError: for a ``max_steps`` that is not a positive int.

        Example:
          >>> row = jl.algorithms.presets.preset_rows("ppo", "CartPole-v1")[0]  # doctest: +SKIP
          >>> row.with_budget(20_000).config["lr"]                              # doctest: +SKIP
          ((0, 0.001), (20000, 0.0))
        """
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive int; got {max_steps!r}.")
        config = dict(self.config)
        if self.origin == "rl_zoo3":
            factor = max_steps / self.max_steps
            for name in self.schedules:
                config[name] = tuple((round(step * factor), value) for step, value in config[name])
        return dataclasses.replace(self, config=config, max_steps=max_steps)

    def typed_config(self) -> Any:
        """The algorithm's typed config with this row's fields (``Any``: its class varies).

        Raises:
          ValueError: for a field the algorithm's config does not have (the valid names
            are listed) or a value it rejects.
        """
        config_type = algorithm_recipe(self.algorithm).config_type
        return make_config(config_type, dict(self.config))


def _is_schedule(value: Any) -> bool:
    """Whether a config value is a piecewise schedule: two or more ``(step, value)`` pairs
    of numbers."""
    number = (int, float)
    return (
        isinstance(value, tuple | list)
        and len(value) >= 2
        and all(
            isinstance(point, tuple | list)
            and len(point) == 2
            and all(isinstance(x, number) and not isinstance(x, bool) for x in point)
            for point in value
        )
    )
