"""Gymnasium spaces as JSON, so a built-in learner can be rebuilt from a checkpoint.

Supported: ``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``, the
spaces the built-in models accept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np

SUPPORTED: tuple[str, ...] = ("Box", "Discrete", "MultiDiscrete", "MultiBinary")


def space_to_json(space: gymnasium.Space) -> dict[str, Any]:
    """A JSON-serialisable description of ``space``.

    Raises:
      TypeError: for a space type not in :data:`SUPPORTED`.

    Example:
      >>> space_to_json(gymnasium.spaces.Discrete(2))
      {'type': 'Discrete', 'n': 2, 'start': 0}
    """
    spaces = gymnasium.spaces
    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "low": _bounds_to_json(space.low),
            "high": _bounds_to_json(space.high),
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": np.asarray(space.nvec).tolist(),
            "start": np.asarray(space.start).tolist(),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    raise TypeError(f"Cannot describe {space!r} as JSON; supported spaces: {SUPPORTED}.")


def _bounds_to_json(values: np.ndarray) -> list[Any]:
    """Bounds as JSON: infinite ones as the strings ``"inf"``/``"-inf"`` (JSON has no inf)."""
    flat = np.asarray(values, np.float64)
    encoded = [float(x) if np.isfinite(x) else str(float(x)) for x in flat.ravel()]
    return np.asarray(encoded, object).reshape(flat.shape).tolist()


def space_from_json(description: dict[str, Any]) -> gymnasium.Space:
    """The space :func:`space_to_json` described.

    Raises:
      ValueError: for an unknown ``"type"``.
    """
    kind = description.get("type")
    spaces = gymnasium.spaces
    if kind == "Box":
        dtype = np.dtype(description["dtype"])
        return spaces.Box(
            np.asarray(description["low"], dtype),
            np.asarray(description["high"], dtype),
            tuple(description["shape"]),
            dtype,
        )
    if kind == "Discrete":
        return spaces.Discrete(description["n"], start=description.get("start", 0))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(
            description["nvec"], dtype=description["dtype"], start=description["start"]
        )
    if kind == "MultiBinary":
        return spaces.MultiBinary(description["n"])
    raise ValueError(f"Unknown space type {kind!r}; supported: {SUPPORTED}.")


def check_recipe_spaces(
    recipe: Mapping[str, Any] | None,
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
) -> None:
    """Raises unless an environment's spaces are those a learner's recipe was built for.

    A recipe without spaces (or no recipe) accepts any.

    Raises:
      ValueError: naming the space that differs, the environment's and the recipe's.

    Example:
      >>> check_recipe_spaces(learner.recipe, env.observation_space, env.action_space)
      ... # doctest: +SKIP
    """
    recipe = recipe or {}
    for name, space in (("observation_space", observation_space), ("action_space", action_space)):
        if name in recipe and space_to_json(space) != recipe[name]:
            raise ValueError(
                f"The environment's {name} {space} differs from the one the learner was built "
                f"for ({recipe[name]}); build the learner from this environment's spaces."
            )


def is_discrete(space: gymnasium.Space) -> bool:
    """Whether actions in ``space`` are integers."""
    return isinstance(
        space,
        gymnasium.spaces.Discrete | gymnasium.spaces.MultiDiscrete | gymnasium.spaces.MultiBinary,
    )


def bounds(space: gymnasium.Space) -> tuple[np.ndarray, np.ndarray] | None:
    """``(low, high)`` of a ``Box`` as float32 arrays, else ``None``."""
    if isinstance(space, gymnasium.spaces.Box):
        return np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)
    return None


def zero_observation(space: gymnasium.Space) -> np.ndarray:
    """One observation of zeros with the dtype the env runner will deliver."""
    dtype = np.dtype(space.dtype) if space.dtype is not None else np.dtype(np.float32)
    if dtype == np.float64:
        dtype = np.dtype(np.float32)
    if dtype == np.int64:
        dtype = np.dtype(np.int32)
    return np.zeros(space.shape, dtype)
