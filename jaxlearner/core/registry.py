"""Recipes: the one registry of the learners saved in checkpoints, and how to rebuild them.

A learner may carry a recipe, ``Learner(..., recipe={"algorithm": name, ...})``:
a JSON-serialisable description of everything needed to build it again
(hyperparameters, layer sizes, ...; no functions). The checkpoint module
saves that description beside the arrays, and :func:`jaxlearner.restore`
rebuilds the learner through the builder registered under ``name`` before it
restores the state, so a checkpoint can be evaluated without the training
script.

The registry maps each name to a builder ``recipe -> Learner``, registered
once. Your own recipes are plain functions (:func:`register_recipe`). The
built-in algorithms register richer builders into the same registry
(:mod:`jaxlearner.algorithms.builtin`): the core knows none of them and
imports no algorithm. They register themselves when
:mod:`jaxlearner.algorithms` is imported; ``import jaxlearner`` adds a
:func:`register_recipe_loader` that does so the first time the registry is
asked for a name it lacks, so ``jl.restore`` and ``jl.learner_from_recipe``
rebuild a built-in learner in a fresh process.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from jaxlearner.core.learner import Learner
from jaxlearner.errors import ReadableKeyError

RecipeBuilder: TypeAlias = Callable[[dict[str, Any]], Learner]
"""``builder(recipe) -> Learner``; ``recipe`` is the whole dict, ``"algorithm"`` included."""

RecipeLoader: TypeAlias = Callable[[], object]
"""``loader()``: registers recipes (typically by importing the modules that register them)."""


_BUILDERS: dict[str, RecipeBuilder] = {}
_LOADERS: list[RecipeLoader] = []


def register_recipe(name: str, builder: RecipeBuilder, *, replace: bool = False) -> None:
    """Registers the builder that rebuilds learners whose recipe names ``name``.

    Args:
      name: the algorithm name, as in ``recipe["algorithm"]``.
      builder: ``builder(recipe) -> jl.Learner``. It gets a fresh copy of the
        whole recipe and should return a learner carrying the same recipe, so
        its checkpoints can be restored in turn. An
        :class:`~jaxlearner.algorithms.builtin.AlgorithmRecipe` (as the
        built-in algorithms register) also serves
        ``jl.algorithms.build``, ``jl.algorithms.algorithm_for`` and the
        :func:`~jaxlearner.Trainer`.
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


def register_recipe_loader(loader: RecipeLoader) -> None:
    """Adds a loader the registry calls before it lists its names or misses one.

    A loader registers recipes on demand, so that a package can offer recipes
    without importing them up front: ``import jaxlearner`` adds one that
    imports :mod:`jaxlearner.algorithms` (whose built-in algorithms register
    themselves), which keeps ``import jaxlearner`` free of gymnasium until a
    recipe is needed. Loaders run every time they are needed, so they should
    be cheap when they have run once (``importlib.import_module`` is); the
    same loader is added once.

    Args:
      loader: ``loader()``, called with no arguments; its result is ignored.

    Raises:
      TypeError: when ``loader`` is not callable.

    Example:
      >>> import importlib
      >>> register_recipe_loader(lambda: importlib.import_module("my_recipes"))  # doctest: +SKIP
    """
    if not callable(loader):
        raise TypeError(
            f"register_recipe_loader needs a callable loader(); got {type(loader).__name__} "
            f"{loader!r}."
        )
    if loader not in _LOADERS:
        _LOADERS.append(loader)


def recipe_builders() -> Mapping[str, RecipeBuilder]:
    """A read-only view of every registered builder by name, the loaders' included.

    Example:
      >>> sorted(recipe_builders())                                    # doctest: +SKIP
      ['appo', 'bc', 'dqn', 'marwil', 'multi_agent_ppo', 'ppo', 'regression', 'sac']
    """
    _load()
    return types.MappingProxyType(_BUILDERS)


def registered_recipes() -> tuple[str, ...]:
    """The registered algorithm names, sorted, the built-in algorithms included.

    Example:
      >>> "regression" in jl.registered_recipes()                     # doctest: +SKIP
      True
    """
    return tuple(sorted(recipe_builders()))


def _load() -> None:
    for loader in tuple(_LOADERS):
        loader()


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
        _load()
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
