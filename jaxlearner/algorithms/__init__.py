"""Built-in algorithms: PPO, DQN and SAC, each a recipe around the generic Learner.

Each algorithm is a typed config plus a ``build(observation_space,
action_space, config) -> Algorithm`` function; the shorthand
``jl.algorithms.ppo(...)`` (``dqn``, ``sac``) returns just the :class:`~jaxlearner.Learner`.
A built-in learner carries a JSON recipe, so :func:`algorithm_for` can
recover its act and postprocess functions, and a checkpoint can rebuild it.

Example:
  >>> import gymnasium as gym, jax, jaxlearner as jl
  >>> env = gym.make("CartPole-v1")
  >>> learner = jl.algorithms.ppo(env.observation_space, env.action_space)
  >>> algorithm = jl.algorithms.algorithm_for(learner)
  >>> algorithm.name
  'ppo'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium

from jaxlearner.algorithms import dqn as _dqn
from jaxlearner.algorithms import ppo as _ppo
from jaxlearner.algorithms import sac as _sac
from jaxlearner.algorithms.algorithm import Algorithm
from jaxlearner.algorithms.config import config_from_json
from jaxlearner.algorithms.dqn import DQNConfig, dqn, dqn_loss
from jaxlearner.algorithms.ppo import PPOConfig, ppo, ppo_loss
from jaxlearner.algorithms.sac import SACConfig, sac, sac_loss
from jaxlearner.learner import Learner
from jaxlearner.registry import register_recipe
from jaxlearner.spaces import space_from_json

BUILDERS: dict[str, Callable[..., Algorithm]] = {
    "ppo": _ppo.build,
    "dqn": _dqn.build,
    "sac": _sac.build,
}
CONFIGS: dict[str, type] = {"ppo": PPOConfig, "dqn": DQNConfig, "sac": SACConfig}


def build(
    name: str,
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    config: Any = None,
) -> Algorithm:
    """The built-in algorithm ``name`` for two spaces.

    Raises:
      ValueError: for an unknown name (the valid ones are listed).
    """
    if name not in BUILDERS:
        raise ValueError(f"Unknown algorithm {name!r}; built-in algorithms: {sorted(BUILDERS)}.")
    return BUILDERS[name](observation_space, action_space, config)


def from_recipe(recipe: dict[str, Any]) -> Algorithm:
    """The built-in algorithm a learner's JSON recipe describes (a fresh learner inside).

    Raises:
      ValueError: when the recipe names no built-in algorithm.
    """
    name = recipe.get("algorithm")
    if name not in BUILDERS:
        raise ValueError(
            f"The recipe names algorithm {name!r}, which is not built in; built-in algorithms: "
            f"{sorted(BUILDERS)}."
        )
    return build(
        name,
        space_from_json(recipe["observation_space"]),
        space_from_json(recipe["action_space"]),
        config_from_json(CONFIGS[name], recipe["config"]),
    )


def algorithm_for(learner: Learner) -> Algorithm:
    """The :class:`Algorithm` of a built-in learner, around that same learner.

    Raises:
      ValueError: when the learner was not built by a built-in algorithm.
    """
    recipe = learner.recipe
    if not recipe or recipe.get("algorithm") not in BUILDERS:
        raise ValueError(
            "This learner has no built-in algorithm recipe; pass the Algorithm explicitly "
            f"(built-in algorithms: {sorted(BUILDERS)})."
        )
    return from_recipe(recipe).with_learner(learner)


for _name in BUILDERS:
    register_recipe(_name, lambda recipe: from_recipe(recipe).learner, replace=True)


__all__ = [
    "Algorithm",
    "DQNConfig",
    "PPOConfig",
    "SACConfig",
    "algorithm_for",
    "build",
    "dqn",
    "dqn_loss",
    "from_recipe",
    "ppo",
    "ppo_loss",
    "sac",
    "sac_loss",
]
