"""The algorithm registry, and BuiltinAlgorithm: a built-in algorithm's entry in it.

The core's one recipe registry (:mod:`jaxlearner.core.registry`) maps names to
builders ``recipe -> Learner``. An algorithm registers an
:class:`AlgorithmRecipe` there instead: a builder that also knows its config
type, how to build the whole :data:`~jaxlearner.algorithms.AnyAlgorithm` from
two spaces and a config, and how to wrap an existing learner in its algorithm.
``jl.algorithms.build``, ``jl.algorithms.algorithm_for``, the
:func:`~jaxlearner.Trainer` and the command line find them here
(:func:`algorithm_recipe`, :func:`algorithm_names`). Your own algorithm
registers with :func:`register_algorithm`.

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

Each algorithm module defines one (``ppo.RECIPE``, ...) and ends with one
:func:`register_builtin` line, which registers it where it is defined and
makes the module's ``build`` function and its named constructor
(``ppo(...)``) with their own docstrings and signatures. Importing
:mod:`jaxlearner.algorithms` so registers them all; nothing keeps a list of
them.
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeAlias, TypeVar, final, runtime_checkable

import gymnasium

from jaxlearner.algorithms.algorithm import MODULE_ID, AnyAlgorithm
from jaxlearner.algorithms.config import config_from_json, config_to_json, make_config
from jaxlearner.algorithms.networks.spaces import space_from_json, space_to_json
from jaxlearner.core.learner import Learner
from jaxlearner.core.module_spec import ModuleSpec
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


def single_module_learner(
    name: str,
    observation_space: gymnasium.Space,
    action_space: gymnasium.Space,
    config: Any,
    spec: ModuleSpec,
    layout: Mapping[str, Any],
    *,
    minibatch_size: int | None = None,
    num_epochs: int = 1,
    shuffle: bool = False,
) -> Learner:
    """A built-in algorithm's learner: one module, ``"default_policy"``, its batch layout and
    the JSON recipe (:func:`recipe_json`) that rebuilds it.

    By default each ``update`` is one gradient step on the whole batch (the off-policy and
    offline algorithms); PPO and APPO pass their minibatches, epochs and shuffling.

    Example:
      >>> learner = single_module_learner("dqn", obs_space, act_space, config, spec, layout)
      ... # doctest: +SKIP
    """
    return Learner(
        {MODULE_ID: spec},
        minibatch_size=minibatch_size,
        num_epochs=num_epochs,
        shuffle=shuffle,
        batch_layout={MODULE_ID: layout},
        recipe=recipe_json(name, observation_space, action_space, config),
    )


@final
@dataclasses.dataclass(frozen=True)
class BuiltinAlgorithm:
    """A built-in algorithm: its name, config type and how to make its learner and algorithm.

    An :class:`AlgorithmRecipe`: calling it with a recipe rebuilds the learner,
    so it serves as a recipe builder too (:func:`register_builtin` registers it).

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

    def learner_doc(self, details: str = "", env_id: str = "CartPole-v1", config: str = "") -> str:
        """Its named constructor's docstring (``ppo``'s, ...), for :func:`register_builtin`.

        Every built-in learner has one module, ``"default_policy"``, and knows its
        batch layout; the docstring says so, adds ``details`` and ends with an
        example that builds the learner for ``env_id`` and initializes it.

        Args:
          details: what else the learner does, as sentences (``""``: nothing).
          env_id: the example's environment.
          config: the example's config argument as written (``'{"lr": 3e-4}'``), or ``""``.

        Example:
          >>> print(RECIPE.learner_doc(config='{"lr": 3e-4}'))     # doctest: +SKIP
          A PPO :class:`~jaxlearner.Learner` for the two spaces.
          ...
        """
        name = self.name
        article = "An" if name[0] in "aeiou" else "A"
        about = (
            'The learner has one module, ``"default_policy"``, and knows its batch layout, so '
            f"``learner.init(key)`` needs no sample batch. {details}"
        )
        call = f"  >>> learner = jl.algorithms.{name}(env.observation_space, env.action_space"
        if config and len(call) + len(config) > 96:  # as it would be written by hand: wrapped
            call += f",\n  ...{' ' * (call.index('(') - 4)}{config}"
        elif config:
            call += f", {config}"
        return "\n".join(
            [
                f"{article} {name.upper()} :class:`~jaxlearner.Learner` for the two spaces.",
                "",
                textwrap.fill(about.strip(), 74, break_on_hyphens=False, break_long_words=False),
                "",
                "Example:",
                "  >>> import gymnasium as gym, jax, jaxlearner as jl",
                f'  >>> env = gym.make("{env_id}")',
                f"{call})",
                "  >>> state = learner.init(jax.random.key(0))",
            ]
        )


AlgorithmT = TypeVar("AlgorithmT", covariant=True)


class BuildFunction(Protocol[AlgorithmT]):
    """A module's ``build(observation_space, action_space, config=None)``: the whole algorithm."""

    def __call__(
        self, observation_space: gymnasium.Space, action_space: gymnasium.Space, config: Any = None
    ) -> AlgorithmT: ...


class LearnerFunction(Protocol):
    """A named constructor, ``ppo(observation_space, action_space, config=None)``: the learner."""

    def __call__(
        self, observation_space: gymnasium.Space, action_space: gymnasium.Space, config: Any = None
    ) -> Learner: ...


PARTS: dict[str, str] = {
    "OnPolicyAlgorithm": "learner, act and postprocess",
    "OffPolicyAlgorithm": "learner, act functions, transitions",
    "OfflineAlgorithm": "learner, act and rows",
}
"""What each algorithm kind holds, for ``build``'s summary line (:func:`register_builtin`)."""


def register_builtin(
    recipe: BuiltinAlgorithm,
    returns: type[AlgorithmT],
    *,
    doc: str,
    parts: str | None = None,
    action_space: str = (
        "one environment's action space (``Discrete``, ``MultiDiscrete``, ``MultiBinary`` "
        "or 1-D ``Box``)."
    ),
    type_error: str = "on unsupported spaces.",
) -> tuple[BuildFunction[AlgorithmT], LearnerFunction]:
    """Registers a built-in algorithm and makes its module's ``build`` and named constructor.

    The two functions call ``recipe.build`` and ``recipe.learner``. Each gets
    its name, its module (``recipe.make_learner``'s), a signature naming the
    config type (``inspect.signature``, ``help``) and a docstring: ``build``'s
    is written from ``parts``, ``action_space`` and ``type_error``, the
    constructor's is ``doc``.

    Args:
      recipe: the algorithm's entry; its name names the constructor (``"ppo"``
        makes ``ppo``). It is registered, replacing an earlier registration (a
        reloaded module registers again).
      returns: the algorithm kind ``build`` returns (``OnPolicyAlgorithm``, ...).
      doc: the constructor's docstring, indented as in the module, e.g. from
        :meth:`BuiltinAlgorithm.learner_doc`.
      parts: what the algorithm holds, for ``build``'s summary line; by default
        the kind's (:data:`PARTS`, ``"learner, act and postprocess"`` for an
        ``OnPolicyAlgorithm``).
      action_space: the ``action_space`` argument's description in ``build``'s docstring.
      type_error: when ``build`` raises ``TypeError``, for its docstring.

    Returns:
      ``(build, constructor)``.

    Raises:
      TypeError: when ``recipe`` is not an algorithm recipe.

    Example:
      >>> RECIPE = BuiltinAlgorithm(
      ...     "ppo", PPOConfig, make_learner, make_algorithm)             # doctest: +SKIP
      >>> build, ppo = register_builtin(
      ...     RECIPE, OnPolicyAlgorithm, doc=RECIPE.learner_doc())      # doctest: +SKIP
    """
    register_algorithm(recipe, replace=True)

    def build(
        observation_space: gymnasium.Space, action_space: gymnasium.Space, config: Any = None
    ) -> AlgorithmT:
        return recipe.build(observation_space, action_space, config)

    def constructor(
        observation_space: gymnasium.Space, action_space: gymnasium.Space, config: Any = None
    ) -> Learner:
        return recipe.learner(observation_space, action_space, config)

    parts = PARTS.get(returns.__name__, "learner") if parts is None else parts
    build_doc = _build_doc(recipe, returns, parts, action_space, type_error)
    _describe(build, "build", recipe, returns, build_doc)
    _describe(constructor, recipe.name, recipe, Learner, inspect.cleandoc(doc))
    return build, constructor


def _build_doc(
    recipe: BuiltinAlgorithm, returns: type, parts: str, action_space: str, type_error: str
) -> str:
    def entry(text: str) -> str:  # an Args or Raises entry, wrapped as written by hand
        return textwrap.fill(
            text, 78, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False
        )

    config = recipe.config_type.__name__
    article = "an" if config[0] in "AEIOU" else "a"
    summary = f"{recipe.name.upper()}'s :class:`~jaxlearner.algorithms.{returns.__name__}`"
    return "\n".join(
        [
            f"{summary} ({parts}).",  # one line, as a summary is
            "",
            "Args:",
            entry("observation_space: one environment's observation space."),
            entry(f"action_space: {action_space}"),
            entry(f"config: {article} :class:`{config}`, a dict of its fields, or ``None``."),
            "",
            "Raises:",
            entry("ValueError: on unknown config fields (valid names listed) or invalid values."),
            entry(f"TypeError: {type_error}"),
            "",
            "Example:",
            "  >>> algorithm = jl.algorithms.build(",
            f'  ...     "{recipe.name}", env.observation_space, env.action_space)'
            "  # doctest: +SKIP",
        ]
    )


def _describe(
    function: Callable, name: str, recipe: BuiltinAlgorithm, returns: type, doc: str
) -> None:
    """Gives ``function`` its name, module, docstring and a signature naming the config type."""
    config = recipe.config_type | dict[str, Any] | None
    function.__name__ = function.__qualname__ = name
    function.__module__ = recipe.make_learner.__module__
    function.__doc__ = doc
    function.__annotations__ = {
        "observation_space": gymnasium.Space,
        "action_space": gymnasium.Space,
        "config": config,
        "return": returns,
    }
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    function.__signature__ = inspect.Signature(
        [
            inspect.Parameter("observation_space", kind, annotation=gymnasium.Space),
            inspect.Parameter("action_space", kind, annotation=gymnasium.Space),
            inspect.Parameter("config", kind, default=None, annotation=config),
        ],
        return_annotation=returns,
    )
