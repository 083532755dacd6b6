"""A run's parameters, logged once beside its metrics (rl8 logs them to MLflow, as here).

:func:`run_params` gathers what a trainer runs with: the algorithm and its resolved
config (every field, defaults included, from the learner's recipe), the learner's
settings and the trainer's own. Each trainer hands them once, when it is made, to
every writer that takes parameters (a :class:`ParamsWriter`, such as
:class:`~jaxlearner.training.outputs.loggers.MLflowWriter`), which
:func:`flatten_params` turns into ``{"config/lr": "0.0003", ...}`` strings.

Example:
  >>> flatten_params({"algorithm": "ppo", "config": {"lr": 3e-4, "hidden_sizes": [64, 64]}})
  {'algorithm': 'ppo', 'config/lr': '0.0003', 'config/hidden_sizes': '[64, 64]'}
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from jaxlearner.core.learner import Learner

LEARNER_SETTINGS = ("minibatch_size", "num_epochs", "shuffle", "skip_nonfinite")
"""The learner's settings among a run's parameters (beside ``modules_to_train``)."""


@runtime_checkable
class ParamsWriter(Protocol):
    """A writer that also takes the run's parameters: once, before the first iteration.

    Trainers call ``write_params`` on each of their writers that has it; a writer without
    it (the console, JSON lines) receives metrics only.
    """

    def write_params(self, params: Mapping[str, Any]) -> None: ...


def run_params(learner: Learner, **trainer: Any) -> dict[str, Any]:
    """The parameters of a run: the algorithm, its resolved config, the learner's and the
    trainer's settings.

    Args:
      learner: the learner trained; a built-in one's recipe gives ``"algorithm"`` and
        ``"config"`` (every field of its typed config).
      **trainer: the trainer's own settings (``env``, ``num_envs``, ``seed``, ...),
        as JSON values.

    Returns:
      ``{"algorithm", "config", "learner", "trainer"}``; ``algorithm`` is ``None`` and
      ``config`` empty for a learner without a recipe.

    Example:
      >>> params = run_params(jl.algorithms.ppo(obs_space, act_space), num_envs=8)
      ... # doctest: +SKIP
      >>> params["config"]["train_batch_size"], params["trainer"]["num_envs"]  # doctest: +SKIP
      (4000, 8)
    """
    recipe = learner.recipe or {}
    settings = {name: getattr(learner.config, name) for name in LEARNER_SETTINGS}
    return {
        "algorithm": recipe.get("algorithm"),
        "config": dict(recipe.get("config") or {}),
        "learner": {**settings, "modules_to_train": sorted(learner.modules_to_train)},
        "trainer": dict(trainer),
    }


def describe_env(env: object) -> str:
    """An environment as a parameter: its id, or the name of its factory or class."""
    if isinstance(env, str | os.PathLike):
        return os.fspath(env)
    return getattr(env, "__qualname__", None) or type(env).__qualname__


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested parameters as flat ``{"a/b": text}``: strings as they are, anything else as
    JSON (``[64, 64]``, ``true``, ``null``), or its ``str`` where JSON has no form.

    Example:
      >>> flatten_params({"trainer": {"seed": 0, "env": "CartPole-v1"}, "shuffle": True})
      {'trainer/seed': '0', 'trainer/env': 'CartPole-v1', 'shuffle': 'true'}
    """
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, f"{name}/"))
        elif isinstance(value, str):
            flat[name] = value
        else:
            flat[name] = json.dumps(value, default=str)
    return flat
