"""A run's config, logged once beside its metrics (rl8 logs it to MLflow as params, as here).

:func:`run_config` gathers what a trainer runs with: the algorithm and its resolved
config (every field, defaults included, from the learner's recipe), the learner's
settings and the trainer's own. Each trainer hands it once, when it is made, to every
writer that takes a config (a :class:`ConfigWriter`, with ``log_config``: MLflow's
:class:`~jaxlearner.training.outputs.loggers.MLflowWriter`, which logs
:func:`flatten_config`'s ``{"config/lr": "0.0003", ...}`` as params).

Example:
  >>> flatten_config({"algorithm": "ppo", "config": {"lr": 3e-4, "hidden_sizes": [64, 64]}})
  {'algorithm': 'ppo', 'config/lr': '0.0003', 'config/hidden_sizes': '[64, 64]'}
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from jaxlearner.core.learner import Learner

LEARNER_SETTINGS = ("minibatch_size", "num_epochs", "shuffle", "drop_last", "skip_nonfinite")
"""The learner's settings in a run's config (beside ``modules_to_train``)."""


@runtime_checkable
class ConfigWriter(Protocol):
    """A writer that also takes the run's config: once, before the first iteration.

    Trainers call ``log_config`` with :func:`run_config` on each of their writers that
    has it; a writer without it (the console, JSON lines) receives metrics only.
    """

    def log_config(self, config: Mapping[str, Any]) -> None: ...


def run_config(learner: Learner, **trainer: Any) -> dict[str, Any]:
    """The config of a run: the algorithm, its resolved config, the learner's and the
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
      >>> config = run_config(jl.algorithms.ppo(obs_space, act_space), num_envs=8)
      ... # doctest: +SKIP
      >>> config["config"]["train_batch_size"], config["trainer"]["num_envs"]  # doctest: +SKIP
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
    """An environment in a run's config: its id, or the name of its factory or class."""
    if isinstance(env, str | os.PathLike):
        return os.fspath(env)
    return getattr(env, "__qualname__", None) or type(env).__qualname__


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as flat ``{"a/b": text}`` (MLflow's params): strings as they are,
    anything else as JSON (``[64, 64]``, ``true``, ``null``), or its ``str`` where JSON has
    no form.

    Example:
      >>> flatten_config({"trainer": {"seed": 0, "env": "CartPole-v1"}, "shuffle": True})
      {'trainer/seed': '0', 'trainer/env': 'CartPole-v1', 'shuffle': 'true'}
    """
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_config(value, f"{name}/"))
        elif isinstance(value, str):
            flat[name] = value
        else:
            flat[name] = json.dumps(value, default=str)
    return flat
