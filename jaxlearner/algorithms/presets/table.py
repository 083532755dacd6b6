"""All presets in one table, and the look-ups over it."""

from __future__ import annotations

from typing import Any

from jaxlearner.algorithms.presets import (
    dqn_rows,
    minatar_rows,
    ppo_rows,
    pqn_rows,
    sac_rows,
    td3_rows,
    tuned_rows,
)
from jaxlearner.algorithms.presets.preset import ORIGINS, Origin, Preset, covers

PRESETS: tuple[Preset, ...] = (
    *tuned_rows.ROWS,
    *ppo_rows.ROWS,
    *sac_rows.ROWS,
    *td3_rows.ROWS,
    *dqn_rows.ROWS,
    *minatar_rows.ROWS,
    *pqn_rows.ROWS,
)
"""Every row; one per (algorithm, env_id, origin)."""


def _index(rows: tuple[Preset, ...]) -> dict[tuple[str, str, str], Preset]:
    index: dict[tuple[str, str, str], Preset] = {}
    for row in rows:
        key = (row.algorithm, row.env_id, row.origin)
        if key in index:
            raise ValueError(f"Two preset rows for {key}.")
        index[key] = row
    return index


_INDEX = _index(PRESETS)


def preset_rows(
    algorithm: str | None = None, env_id: str | None = None, origin: Origin | None = None
) -> tuple[Preset, ...]:
    """The rows that match every argument given, in :func:`preset`'s order of preference
    (the ``ALE/*`` rows match every ``ALE/`` id, ``gymnax:*-MinAtar`` every MinAtar game).

    Example:
      >>> [row.env_id for row in preset_rows("sac")][:2]
      ['Pendulum-v1', 'Pendulum-v1']
    """
    rows = [
        row
        for row in PRESETS
        if algorithm in (None, row.algorithm)
        and (env_id is None or covers(row.env_id, env_id))
        and origin in (None, row.origin)
    ]
    return tuple(sorted(rows, key=lambda row: ORIGINS.index(row.origin)))


def preset_names(algorithm: str | None = None) -> tuple[tuple[str, str], ...]:
    """The ``(algorithm, env_id)`` pairs that have a preset, sorted.

    Args:
      algorithm: only this algorithm's pairs (``None``: every algorithm's).

    Raises:
      ValueError: for an algorithm without presets, listing those with some.

    Example:
      >>> ("ppo", "HalfCheetah-v5") in jl.algorithms.preset_names("ppo")  # doctest: +SKIP
      True
    """
    if algorithm is not None:
        _check_algorithm(algorithm)
    return tuple(sorted({(row.algorithm, row.env_id) for row in preset_rows(algorithm)}))


def preset_row(algorithm: str, env_id: str, origin: Origin | None = None) -> Preset:
    """The row :func:`preset` reads: the ``origin``'s, or the first of :data:`ORIGINS` there is.

    Raises:
      ValueError: for an algorithm or environment without a row (or without one of
        ``origin``), listing the valid ones.
    """
    _check_algorithm(algorithm)
    if origin is not None and origin not in ORIGINS:
        raise ValueError(f"Unknown preset origin {origin!r}; valid origins: {list(ORIGINS)}.")
    rows = preset_rows(algorithm, env_id, origin)
    if not rows:
        known = sorted({row.env_id for row in preset_rows(algorithm, origin=origin)})
        which = f"{algorithm} ({origin})" if origin else algorithm
        raise ValueError(f"No {which} preset for {env_id!r}; {which} presets: {known}.")
    return rows[0]


def preset(algorithm: str, env_id: str, origin: Origin | None = None) -> tuple[Any, Preset]:
    """The tuned config for an algorithm on an environment, and how to train with it.

    Where this project tuned a faster row than RL Zoo's (``origin="jaxlearner"``, the
    command line's settings on each algorithm's own environment) that row is used, else RL
    Zoo's, else a published configuration's (MinAtar's); ``origin`` picks one.

    Args:
      algorithm: the algorithm's name (``"ppo"``, ``"sac"``, ``"dqn"``, ...).
      env_id: a gymnasium environment id (MuJoCo rows use ``-v5`` ids).
      origin: ``"rl_zoo3"``, ``"jaxlearner"`` or ``"published"``; ``None`` for the
        preferred row.

    Returns:
      ``(config, row)``: the algorithm's typed config (``PPOConfig``, ...), and the
      :class:`~jaxlearner.algorithms.presets.preset.Preset` with the training settings
      (``num_envs``, ``max_steps``, ``eval_every``), ``source`` and ``notes``.

    Raises:
      ValueError: for an algorithm or environment without a preset (the valid ones are
        listed), or a row with a field the config does not have.

    Example:
      >>> import jaxlearner as jl
      >>> config, row = jl.algorithms.preset("ppo", "CartPole-v1")
      >>> config.train_batch_size, row.num_envs, row.source
      (256, 8, 'rl_zoo3/hyperparams/ppo.yml: CartPole-v1')
      >>> trainer = jl.Trainer(jl.algorithms.build("ppo", obs_space, act_space, config),
      ...                      row.env_id, num_envs=row.num_envs)  # doctest: +SKIP
      >>> trainer.run([jl.MaxEnvSteps(row.max_steps)], steps_per_eval=row.eval_every)
      ... # doctest: +SKIP
    """
    row = preset_row(algorithm, env_id, origin)
    return row.typed_config(), row


def _check_algorithm(algorithm: str) -> None:
    known = sorted({row.algorithm for row in PRESETS})
    if algorithm not in known:
        raise ValueError(
            f"No presets for algorithm {algorithm!r}; algorithms with presets: {known}."
        )
