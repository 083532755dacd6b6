"""Built-in algorithms: PPO, APPO, DQN, SAC, BC and MARWIL, recipes around the generic Learner.

Each algorithm is a typed config plus a
:class:`~jaxlearner.algorithms.builtin.BuiltinAlgorithm` entry (``ppo.RECIPE``,
...) that registers itself in the algorithm registry
(:mod:`jaxlearner.algorithms.builtin`, over the one recipe registry of
:mod:`jaxlearner.core.registry`) where it is defined; it makes its learner, its
algorithm, or the algorithm around an existing learner. An
algorithm that collects its own experience is of one of two kinds: an
:class:`OnPolicyAlgorithm` (PPO, APPO) or an :class:`OffPolicyAlgorithm` (DQN, SAC);
:data:`Algorithm` is either. An :class:`OfflineAlgorithm` (BC, MARWIL) trains
on a recorded dataset instead (``jl.OfflineTrainer``).
:func:`multi_agent_ppo` makes one learner of several PPO policies for
``jl.MultiAgentTrainer``.

:func:`preset` gives tuned settings for an algorithm on an environment (RL Zoo's, and a
few tuned here; :mod:`jaxlearner.algorithms.presets` lists them and how SB3's names map
to ours).

The shorthand ``jl.algorithms.ppo(...)`` (``dqn``, ``sac``) returns just the
:class:`~jaxlearner.Learner`; :func:`build` returns the whole algorithm. A
built-in learner carries a JSON recipe, so :func:`algorithm_for` can derive
its act and postprocess (or transitions) functions from the learner itself,
and a checkpoint can rebuild it.

Example:
  >>> import gymnasium as gym, jax, jaxlearner as jl
  >>> env = gym.make("CartPole-v1")
  >>> learner = jl.algorithms.ppo(env.observation_space, env.action_space)
  >>> algorithm = jl.algorithms.algorithm_for(learner)
  >>> algorithm.name, algorithm.learner is learner
  ('ppo', True)
"""

from __future__ import annotations

from typing import Any

import gymnasium

from jaxlearner.algorithms.algorithm import (
    Algorithm,
    AnyAlgorithm,
    OfflineAlgorithm,
    OffPolicyAlgorithm,
    OnPolicyAlgorithm,
    PrioritizedReplay,
    RecurrentAct,
)
from jaxlearner.algorithms.appo import APPOConfig, appo, appo_loss
from jaxlearner.algorithms.bc import BCConfig, bc, bc_loss
from jaxlearner.algorithms.builtin import (
    AlgorithmRecipe,
    BuiltinAlgorithm,
    algorithm_names,
    algorithm_recipe,
    register_algorithm,
)
from jaxlearner.algorithms.dqn import DQNConfig, dqn, dqn_loss
from jaxlearner.algorithms.marwil import MARWILConfig, marwil, marwil_loss
from jaxlearner.algorithms.multi_agent_ppo import multi_agent_ppo
from jaxlearner.algorithms.ppo import PPOConfig, ppo, ppo_loss
from jaxlearner.algorithms.pqn import PQNConfig, pqn, pqn_loss
from jaxlearner.algorithms.presets import Preset, preset, preset_names
from jaxlearner.algorithms.sac import SACConfig, sac, sac_loss
from jaxlearner.algorithms.td3 import TD3Config, td3, td3_loss
from jaxlearner.core.learner import Learner
from jaxlearner.core.registry import learner_from_recipe


def build(
    name: str,
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    config: Any = None,
) -> AnyAlgorithm:
    """The algorithm ``name`` for two spaces, with a fresh learner.

    Args:
      name: ``"ppo"``, ``"dqn"``, ``"sac"``, ``"bc"``, ``"marwil"`` (or an algorithm
        recipe you registered).
      observation_space: one environment's observation space.
      action_space: one environment's action space.
      config: the algorithm's typed config, a dict of its fields, or ``None``.

    Raises:
      ValueError: for an unknown name (the valid ones are listed), unknown
        config fields or invalid values.

    Example:
      >>> algorithm = jl.algorithms.build("dqn", env.observation_space, env.action_space,
      ...                                 {"train_batch_size": 64})  # doctest: +SKIP
    """
    return algorithm_recipe(name).build(observation_space, action_space, config)


def from_recipe(recipe: dict[str, Any]) -> AnyAlgorithm:
    """The algorithm a learner's JSON recipe describes, around a fresh learner.

    Raises:
      ValueError: when the recipe names no algorithm recipe.
    """
    entry = algorithm_recipe(recipe.get("algorithm"))
    return entry.algorithm_for(learner_from_recipe(recipe))


def algorithm_for(learner: Learner) -> AnyAlgorithm:
    """The algorithm of a built-in learner, around that same learner.

    The act and postprocess (or transitions) functions apply the learner's
    own model, with the config read from its recipe: no model or learner is
    built.

    Raises:
      ValueError: when the learner was not built by a registered algorithm recipe.

    Example:
      >>> algorithm = jl.algorithms.algorithm_for(jl.algorithms.ppo(obs_space, act_space))
      ... # doctest: +SKIP
    """
    recipe = learner.recipe or {}
    if recipe.get("algorithm") not in algorithm_names():
        raise ValueError(
            "This learner has no built-in algorithm recipe; pass the Algorithm explicitly "
            f"(built-in algorithms: {list(algorithm_names())})."
        )
    return algorithm_recipe(recipe["algorithm"]).algorithm_for(learner)


__all__ = [
    "APPOConfig",
    "Algorithm",
    "AlgorithmRecipe",
    "AnyAlgorithm",
    "BCConfig",
    "BuiltinAlgorithm",
    "DQNConfig",
    "MARWILConfig",
    "OffPolicyAlgorithm",
    "OfflineAlgorithm",
    "OnPolicyAlgorithm",
    "PPOConfig",
    "PQNConfig",
    "Preset",
    "PrioritizedReplay",
    "RecurrentAct",
    "SACConfig",
    "TD3Config",
    "algorithm_for",
    "algorithm_names",
    "algorithm_recipe",
    "appo",
    "appo_loss",
    "bc",
    "bc_loss",
    "build",
    "dqn",
    "dqn_loss",
    "from_recipe",
    "marwil",
    "marwil_loss",
    "multi_agent_ppo",
    "ppo",
    "ppo_loss",
    "pqn",
    "pqn_loss",
    "preset",
    "preset_names",
    "register_algorithm",
    "sac",
    "sac_loss",
    "td3",
    "td3_loss",
]
