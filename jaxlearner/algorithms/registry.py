"""The algorithm registry: recipe builders that also build a whole algorithm.

The core's one recipe registry (:mod:`jaxlearner.core.registry`) maps names to
builders ``recipe -> Learner``. An algorithm registers an
:class:`AlgorithmRecipe` there instead: a builder that also knows its config
type, how to build the whole :data:`~jaxlearner.algorithms.AnyAlgorithm` from
two spaces and a config, and how to wrap an existing learner in its algorithm.
``jl.algorithms.build``, ``jl.algorithms.algorithm_for``, the
:class:`~jaxlearner.Trainer` and the command line find them here
(:func:`algorithm_recipe`, :func:`algorithm_names`).

Each built-in algorithm registers itself where it is defined (the
``register_builtin`` line at the end of ``ppo.py``, ``dqn.py``, ...), so
importing :mod:`jaxlearner.algorithms` registers them all; nothing keeps a
list of them. Your own algorithm registers the same way, with
:func:`register_algorithm`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from jaxlearner.core.learner import Learner
from jaxlearner.core.registry import recipe_builders, register_recipe


@runtime_checkable
class AlgorithmRecipe(Protocol):
    """A recipe builder that also builds an algorithm: what the built-in algorithms register.

    :class:`~jaxlearner.algorithms.builtin.BuiltinAlgorithm` is the built-in
    one.

    Attributes:
      name: the algorithm's name, as in ``recipe["algorithm"]``.
      config_type: its typed config class (the command line parses overrides with it).
    """

    name: str
    config_type: type

    def __call__(self, recipe: dict[str, Any]) -> Learner:
        """The learner a recipe describes."""
        ...

    def build(self, observation_space: Any, action_space: Any, config: Any = None) -> Any:
        """A fresh learner for two spaces and a config, and the algorithm around it."""
        ...

    def algorithm_for(self, learner: Learner) -> Any:
        """The algorithm around an existing learner of this algorithm (no new model)."""
        ...


def register_algorithm(recipe: AlgorithmRecipe, *, replace: bool = False) -> None:
    """Registers an algorithm under ``recipe.name``, for recipes and ``jl.algorithms.build``.

    Args:
      recipe: an :class:`AlgorithmRecipe`, e.g. a
        :class:`~jaxlearner.algorithms.builtin.BuiltinAlgorithm`.
      replace: allow replacing a builder registered earlier under that name.

    Raises:
      TypeError: when ``recipe`` is not an :class:`AlgorithmRecipe`.
      ValueError: when the name is registered already and ``replace`` is false.

    Example:
      >>> register_algorithm(BuiltinAlgorithm("my_pg", MyConfig, make_learner, make_algorithm))
      ... # doctest: +SKIP
      >>> algorithm = jl.algorithms.build("my_pg", obs_space, act_space)  # doctest: +SKIP
    """
    if not isinstance(recipe, AlgorithmRecipe):
        raise TypeError(
            "register_algorithm needs an AlgorithmRecipe (a name, a config_type, and "
            f"__call__, build and algorithm_for methods); got {type(recipe).__name__} "
            f"{recipe!r}. Register a plain recipe builder with jl.register_recipe."
        )
    register_recipe(recipe.name, recipe, replace=replace)


def algorithm_names() -> tuple[str, ...]:
    """The names registered with an :class:`AlgorithmRecipe` (``"dqn"``, ``"ppo"``, ...), sorted.

    Example:
      >>> jl.algorithms.algorithm_names()                             # doctest: +SKIP
      ('appo', 'bc', 'dqn', 'marwil', 'ppo', 'sac')
    """
    builders = recipe_builders()
    return tuple(sorted(n for n, b in builders.items() if isinstance(b, AlgorithmRecipe)))


def algorithm_recipe(name: str) -> AlgorithmRecipe:
    """The :class:`AlgorithmRecipe` registered under ``name``.

    Raises:
      ValueError: when ``name`` is not registered, or registered with a plain
        builder that makes learners only; the algorithm names are listed.

    Example:
      >>> recipe = jl.algorithms.algorithm_recipe("ppo")               # doctest: +SKIP
      >>> algorithm = recipe.build(env.observation_space, env.action_space)  # doctest: +SKIP
    """
    builder = recipe_builders().get(name)
    if not isinstance(builder, AlgorithmRecipe):
        plain = " (its recipe builder makes learners only)" if builder is not None else ""
        raise ValueError(
            f"Unknown algorithm {name!r}{plain}; built-in algorithms: {list(algorithm_names())}."
        )
    return builder
