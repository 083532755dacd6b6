"""BuiltinAlgorithm: a built-in algorithm's entry in the recipe registry.

A built-in learner's recipe is ``{"algorithm": name, "config": {...},
"observation_space": {...}, "action_space": {...}}``: the typed config and
the two spaces as JSON. From those, one :class:`BuiltinAlgorithm` value knows
how to

* make the learner (``learner``; called with a recipe, as any registered
  recipe builder is, it rebuilds the learner a checkpoint saved),
* make the whole algorithm, of any kind (``build``),
* and wrap an existing learner in its algorithm (``algorithm_for``): the act,
  postprocess or transitions functions are derived from that learner's own
  model and the config in its recipe, so no second model or learner is built.

Each algorithm module defines one (``ppo.RECIPE``, ...) and registers it
where it is defined, with
:func:`~jaxlearner.algorithms.registry.register_algorithm`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias, final

import gymnasium

from jaxlearner.algorithms.algorithm import AnyAlgorithm
from jaxlearner.algorithms.config import config_from_json, config_to_json, make_config
from jaxlearner.algorithms.networks.spaces import space_from_json, space_to_json
from jaxlearner.core.learner import Learner

MakeLearner: TypeAlias = Callable[[gymnasium.Space, gymnasium.Space, Any], Learner]
"""``make_learner(observation_space, action_space, config) -> Learner``, ``config`` typed.

The learner carries its :func:`recipe_json`, so a checkpoint can rebuild it.
"""

MakeAlgorithm: TypeAlias = Callable[[Learner, gymnasium.Space, Any], AnyAlgorithm]
"""``make_algorithm(learner, action_space, config) -> Algorithm`` around that very learner.

Reads the model from ``learner.specs[module_id].model``; builds no model or learner.
"""


def recipe_json(
    name: str, observation_space: gymnasium.Space, action_space: gymnasium.Space, config: Any
) -> dict[str, Any]:
    """The JSON recipe of a built-in learner: its algorithm, typed config and spaces.

    Raises:
      TypeError: for a space that has no JSON form (see
        :mod:`jaxlearner.algorithms.networks.spaces`).

    Example:
      >>> recipe_json("ppo", env.observation_space, env.action_space, PPOConfig())
      ... # doctest: +SKIP
      {'algorithm': 'ppo', 'config': {...}, 'observation_space': {...}, 'action_space': {...}}
    """
    return {
        "algorithm": name,
        "config": config_to_json(config),
        "observation_space": space_to_json(observation_space),
        "action_space": space_to_json(action_space),
    }


@final
@dataclasses.dataclass(frozen=True)
class BuiltinAlgorithm:
    """A built-in algorithm: its name, config type and how to make its learner and algorithm.

    An :class:`~jaxlearner.algorithms.registry.AlgorithmRecipe`: calling it with a
    recipe rebuilds the learner, so it serves as a recipe builder too.

    Attributes:
      name: the name in recipes, ``jl.algorithms.build`` and the command line.
      config_type: the typed, frozen config class (``PPOConfig``).
      make_learner: see :data:`MakeLearner`.
      make_algorithm: see :data:`MakeAlgorithm`.

    Example:
      >>> from jaxlearner.algorithms import ppo
      >>> learner = ppo.RECIPE.learner(env.observation_space, env.action_space)  # doctest: +SKIP
      >>> algorithm = ppo.RECIPE.algorithm_for(learner)                          # doctest: +SKIP
      >>> algorithm.learner is learner                                           # doctest: +SKIP
      True
    """

    name: str
    config_type: type
    make_learner: MakeLearner
    make_algorithm: MakeAlgorithm

    def learner(
        self, observation_space: gymnasium.Space, action_space: gymnasium.Space, config: Any = None
    ) -> Learner:
        """The learner for two spaces and a config (a ``config_type``, a dict of its fields or
        ``None``), carrying the JSON recipe that rebuilds it.

        Raises:
          ValueError: on unknown config fields (valid names listed) or invalid values.
          TypeError: on unsupported spaces.
        """
        config = make_config(self.config_type, config)
        return self.make_learner(observation_space, action_space, config)

    def build(
        self, observation_space: gymnasium.Space, action_space: gymnasium.Space, config: Any = None
    ) -> AnyAlgorithm:
        """A fresh learner and the algorithm around it; see :meth:`learner`."""
        config = make_config(self.config_type, config)
        learner = self.learner(observation_space, action_space, config)
        return self.make_algorithm(learner, action_space, config)

    def algorithm_for(self, learner: Learner) -> AnyAlgorithm:
        """The algorithm around ``learner``, from its model and the config in its recipe.

        Raises:
          ValueError: when the learner's recipe is not one of this algorithm.
        """
        _, action_space, config = self.parse(learner.recipe or {})
        return self.make_algorithm(learner, action_space, config)

    def __call__(self, recipe: dict[str, Any]) -> Learner:
        """The learner a recipe describes (a registry's recipe builder)."""
        return self.learner(*self.parse(recipe))

    def parse(self, recipe: Mapping[str, Any]) -> tuple[gymnasium.Space, gymnasium.Space, Any]:
        """``(observation_space, action_space, config)`` from a recipe of this algorithm.

        Raises:
          ValueError: when the recipe names another algorithm or lacks an entry.
        """
        if recipe.get("algorithm") != self.name:
            raise ValueError(
                f"A recipe of algorithm {recipe.get('algorithm')!r} is not one of {self.name!r}."
            )
        missing = sorted({"config", "observation_space", "action_space"} - set(recipe))
        if missing:
            raise ValueError(f"The {self.name!r} recipe lacks {missing}; got {dict(recipe)!r}.")
        return (
            space_from_json(recipe["observation_space"]),
            space_from_json(recipe["action_space"]),
            config_from_json(self.config_type, recipe["config"]),
        )
