"""Recipes: the one registry of algorithms and of the learners saved in checkpoints.

A learner may carry a recipe, ``Learner(..., recipe={"algorithm": name, ...})``:
a JSON-serialisable description of everything needed to build it again
(hyperparameters, layer sizes, ...; no functions). The checkpoint module
saves that description beside the arrays, and :func:`jaxlearner.restore`
rebuilds the learner through the builder registered under ``name`` before it
restores the state, so a checkpoint can be evaluated without the training
script.

The registry maps each name to a builder ``recipe -> Learner``, registered
once. Your own recipes are plain functions (:func:`register_recipe`). The
built-in algorithms (PPO, DQN, SAC) register an :class:`AlgorithmRecipe`: a
builder that also knows its config type, how to build the whole
:data:`~jaxlearner.algorithms.Algorithm` from two spaces and a config, and how
to wrap an existing learner in its algorithm. ``jl.algorithms.build``,
``jl.algorithms.algorithm_for``, the :class:`~jaxlearner.Trainer` and the
command line find them here (:func:`algorithm_recipe`, :func:`algorithm_names`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeAlias, runtime_checkable

from jaxlearner.core.learner import Learner
from jaxlearner.errors import ReadableKeyError

RecipeBuilder: TypeAlias = Callable[[dict[str, Any]], Learner]
"""``builder(recipe) -> Learner``; ``recipe`` is the whole dict, ``"algorithm"`` included."""


@runtime_checkable
class AlgorithmRecipe(Protocol):
    """A recipe builder that also builds an algorithm: what the built-in algorithms register.

    :class:`~jaxlearner.algorithms.builtin.BuiltinAlgorithm` is the built-in
    one. (The registry imports no algorithm, so algorithms are typed ``Any`` here.)

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


_BUILDERS: dict[str, RecipeBuilder] = {}


def register_recipe(name: str, builder: RecipeBuilder, *, replace: bool = False) -> None:
    """Registers the builder that rebuilds learners whose recipe names ``name``.

    Args:
      name: the algorithm name, as in ``recipe["algorithm"]``.
      builder: ``builder(recipe) -> jl.Learner``. It gets a fresh copy of the
        whole recipe and should return a learner carrying the same recipe, so
        its checkpoints can be restored in turn. An :class:`AlgorithmRecipe`
        (as the built-in algorithms register) also serves
        ``jl.algorithms.build``, ``jl.algorithms.algorithm_for`` and the
        :class:`~jaxlearner.Trainer`.
      replace: allow replacing a builder registered earlier under ``name``.

    Raises:
      TypeError: when ``name`` is not a non-empty string or ``builder`` is not
        callable.
      ValueError: when ``name`` is registered already and ``replace`` is false.

    Example:
      >>> def build_regression(recipe):
      ...     spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(recipe["learning_rate"]))
      ...     return jl.Learner({"policy": spec}, recipe=recipe)
      >>> jl.register_recipe("regression", build_regression)          # doctest: +SKIP
      >>> learner = jl.learner_from_recipe({"algorithm": "regression", "learning_rate": 0.1})
      ... # doctest: +SKIP
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_recipe needs a non-empty string name; got {name!r}.")
    if not callable(builder):
        raise TypeError(
            f"register_recipe({name!r}, builder): builder must be callable recipe -> "
            f"jl.Learner; got {type(builder).__name__} {builder!r}."
        )
    if name in _BUILDERS and not replace:
        raise ValueError(
            f"A recipe builder is registered already under {name!r}; pass replace=True to "
            "replace it."
        )
    _BUILDERS[name] = builder


def registered_recipes() -> tuple[str, ...]:
    """The registered algorithm names, sorted, the built-in algorithms included.

    Example:
      >>> "regression" in jl.registered_recipes()                     # doctest: +SKIP
      True
    """
    _register_builtins()
    return tuple(sorted(_BUILDERS))


def algorithm_names() -> tuple[str, ...]:
    """The names registered with an :class:`AlgorithmRecipe` (``"dqn"``, ``"ppo"``, ...), sorted.

    Example:
      >>> jl.registry.algorithm_names()                               # doctest: +SKIP
      ('dqn', 'ppo', 'sac')
    """
    _register_builtins()
    return tuple(sorted(n for n, b in _BUILDERS.items() if isinstance(b, AlgorithmRecipe)))


def algorithm_recipe(name: str) -> AlgorithmRecipe:
    """The :class:`AlgorithmRecipe` registered under ``name``.

    Raises:
      ValueError: when ``name`` is not registered, or registered with a plain
        builder that makes learners only; the algorithm names are listed.

    Example:
      >>> recipe = jl.registry.algorithm_recipe("ppo")                 # doctest: +SKIP
      >>> algorithm = recipe.build(env.observation_space, env.action_space)  # doctest: +SKIP
    """
    _register_builtins()
    builder = _BUILDERS.get(name)
    if not isinstance(builder, AlgorithmRecipe):
        plain = " (its recipe builder makes learners only)" if builder is not None else ""
        raise ValueError(
            f"Unknown algorithm {name!r}{plain}; built-in algorithms: {list(algorithm_names())}."
        )
    return builder


def _register_builtins() -> None:
    # A lazy import: the built-in algorithms register themselves when imported, and the
    # registry must not depend on them (nor on gymnasium) at import time.
    import jaxlearner.algorithms  # noqa: F401


def learner_from_recipe(recipe: Mapping[str, Any]) -> Learner:
    """Builds a learner from its recipe with the builder registered for its algorithm.

    Args:
      recipe: ``{"algorithm": name, ...}``, as ``learner.recipe`` returns it
        (and as checkpoints store it).

    Returns:
      A new, uninitialised :class:`~jaxlearner.Learner` (restore a state into
      it, or ``init`` it).

    Raises:
      TypeError: when ``recipe`` is not a JSON-serialisable mapping with a
        string ``"algorithm"``, or the builder returns something else than a
        learner.
      KeyError: when no builder is registered for the algorithm; the message
        lists the registered names.

    Example:
      >>> learner = jl.learner_from_recipe({"algorithm": "regression", "learning_rate": 0.1})
      ... # doctest: +SKIP
    """
    if not isinstance(recipe, Mapping):
        raise TypeError(
            f"A recipe is a mapping {{'algorithm': name, ...}}; got {type(recipe).__name__} "
            f"{recipe!r}."
        )
    name = recipe.get("algorithm")
    if not isinstance(name, str) or not name:
        raise TypeError(
            f"A recipe needs a non-empty string 'algorithm' entry naming its builder; got "
            f"{name!r} in {dict(recipe)!r}."
        )
    if name not in _BUILDERS:
        _register_builtins()
    if name not in _BUILDERS:
        raise ReadableKeyError(
            f"No recipe builder is registered for algorithm {name!r}; registered: "
            f"{list(registered_recipes())}. Import the module that registers it, or call "
            f"jl.register_recipe({name!r}, builder)."
        )
    try:
        # A JSON round trip gives the builder its own copy, exactly as a checkpoint would.
        fresh = json.loads(json.dumps(dict(recipe)))
    except (TypeError, ValueError) as error:
        raise TypeError(f"Recipe {dict(recipe)!r} is not JSON-serialisable: {error}.") from None
    learner = _BUILDERS[name](fresh)
    if not isinstance(learner, Learner):
        raise TypeError(
            f"The recipe builder for {name!r} returned {type(learner).__name__}; it must "
            "return a jl.Learner."
        )
    return learner
