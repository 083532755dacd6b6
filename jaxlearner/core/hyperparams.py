"""Traced hyperparameters in a learner state: write one, and the next updates use it.

Two kinds of coefficients live in a :class:`~jaxlearner.LearnerState` as
float32 leaves:

* a module's own coefficients, ``module_state.hyperparams`` (PPO's
  ``entropy_coeff`` and ``clip_param``, DQN's ``epsilon``), read by the loss
  as ``ctx.hyperparams[name]``;
* the hyperparameters its optimizers were built with through
  ``optax.inject_hyperparams`` (``learning_rate``, Adam's ``eps``, ...), in the
  optimizer states, possibly inside an ``optax.MaskedState``.

At every step the update reads a *constant* back from the state and
recomputes only the *scheduled* ones from the counters. So writing a value
into the state changes the training that follows without recompiling, and a
value written inside ``jax.vmap`` gives each agent its own: a sweep over
learning rates or entropy coefficients is one compiled program.
:func:`with_hyperparams` writes values; :func:`check_constant` tells in Python
whether the learner would overwrite them with a schedule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxlearner.core.learner import Learner
from jaxlearner.core.schedules import as_schedule
from jaxlearner.core.state import LearnerState, ModuleState
from jaxlearner.errors import ReadableKeyError

_InjectState = optax.InjectStatefulHyperparamsState


def hyperparam_names(state: LearnerState, module_id: str) -> tuple[str, ...]:
    """The names :func:`with_hyperparams` accepts for one module, sorted.

    The module's coefficients by name; each injected optimizer hyperparameter
    as ``"name/optimizer"`` (e.g. ``"learning_rate/default"``, the key its
    metric has) and, shared by all optimizers that have it, as ``"name"``.

    Raises:
      KeyError: for an unknown module id.

    Example:
      >>> hyperparam_names(state, "default_policy")[:3]  # doctest: +SKIP
      ('b1', 'b1/default', 'b2')
    """
    module = _module(state, module_id)
    names = set(module.hyperparams)
    for optimizer, opt_state in module.opt_states.items():
        for node in _inject_states(opt_state):
            names.update(node.hyperparams)
            names.update(f"{name}/{optimizer}" for name in node.hyperparams)
    return tuple(sorted(names))


def with_hyperparams(
    state: LearnerState,
    module_id: str,
    values: Mapping[str, jax.typing.ArrayLike] | None = None,
    /,
    **named: jax.typing.ArrayLike,
) -> LearnerState:
    """A copy of ``state`` with some of a module's hyperparameters set.

    Pure and traceable: inside ``jax.vmap`` each value may be a different
    scalar per agent. A name is looked up first among the module's own
    coefficients (``module_state.hyperparams``), then among its optimizers'
    injected hyperparameters: ``"learning_rate"`` sets the learning rate of
    every optimizer of the module, ``"learning_rate/critic"`` only the
    ``critic`` optimizer's.

    A value is used from the next update on if the learner treats it as a
    constant; a scheduled one is recomputed from the counters at every step
    and the written value is lost (see :func:`check_constant`).

    Args:
      state: a learner state.
      module_id: the module whose hyperparameters to set.
      values: ``{name: scalar}``, for names that are not Python identifiers
        (``"learning_rate/critic"``).
      **named: ``name=scalar`` pairs.

    Returns:
      The new state; other leaves are the same arrays.

    Raises:
      KeyError: for an unknown module or hyperparameter (the valid names are listed).
      ValueError: for a value that is not a scalar.

    Example:
      >>> import gymnasium as gym, jax, jaxlearner as jl
      >>> env = gym.make("CartPole-v1")
      >>> learner = jl.algorithms.ppo(env.observation_space, env.action_space)
      >>> state = learner.init(jax.random.key(0))
      >>> state = with_hyperparams(state, "default_policy", learning_rate=1e-3,
      ...                          entropy_coeff=0.25)
      >>> float(state.modules["default_policy"].hyperparams["entropy_coeff"])
      0.25
    """
    updates = {**dict(values or {}), **named}
    module = _module(state, module_id)
    valid = hyperparam_names(state, module_id)
    coefficients = dict(module.hyperparams)
    opt_states = dict(module.opt_states)
    for name, value in updates.items():
        if jnp.shape(value) != ():
            raise ValueError(
                f"Hyperparameter {name!r} of module {module_id!r} must be a scalar; got shape "
                f"{jnp.shape(value)} (inside jax.vmap, pass one value per agent)."
            )
        if name in coefficients:
            coefficients[name] = jnp.asarray(value, coefficients[name].dtype)
            continue
        base, _, only = name.partition("/")
        targets = [o for o in opt_states if not only or o == only]
        found = False
        for optimizer in targets:
            new_state, changed = _set_injected(opt_states[optimizer], base, value)
            opt_states[optimizer] = new_state
            found |= changed
        if not found:
            raise ReadableKeyError(
                f"Module {module_id!r} has no hyperparameter {name!r}; valid names: {list(valid)}."
            )
    new_module = module.replace(hyperparams=coefficients, opt_states=opt_states)
    return state.replace(modules={**state.modules, module_id: new_module})


def check_constant(learner: Learner, module_id: str, names: Iterable[str]) -> None:
    """Raises unless each named hyperparameter is a constant the update reads from the state.

    Call it in Python before writing values with :func:`with_hyperparams`
    in a sweep: a scheduled hyperparameter is recomputed at every step, so a
    value written into the state would have no effect.

    Args:
      learner: the learner whose specs define the hyperparameters.
      module_id: the module.
      names: hyperparameter names as :func:`with_hyperparams` takes them.

    Raises:
      KeyError: for an unknown module or hyperparameter name.
      ValueError: for a scheduled hyperparameter (make it a constant in the
        algorithm's config to sweep it).

    Example:
      >>> check_constant(learner, "default_policy", ["learning_rate"])  # doctest: +SKIP
    """
    specs = learner.specs
    if module_id not in specs:
        raise ReadableKeyError(f"No module {module_id!r}; modules: {list(specs)}.")
    spec = specs[module_id]
    for name in names:
        if name in spec.hyperparams:
            candidates = {name: spec.hyperparams[name]}
        else:
            base, _, only = name.partition("/")
            candidates = {
                f"{base}/{optimizer}": config.scheduled[base]
                for optimizer, config in spec.named_optimizers.items()
                if (not only or optimizer == only) and base in config.scheduled
            }
            built = [o for o, c in spec.named_optimizers.items() if not c.is_factory]
            if not candidates and not built:
                raise ReadableKeyError(
                    f"Module {module_id!r} has no constant or scheduled hyperparameter {name!r}; "
                    f"its coefficients are {sorted(spec.hyperparams)} and its optimizers inject "
                    f"{sorted({k for c in spec.named_optimizers.values() for k in c.scheduled})}."
                )
        for label, value in candidates.items():
            if as_schedule(value, label) is not None:
                raise ValueError(
                    f"Hyperparameter {label!r} of module {module_id!r} is scheduled ({value!r}): "
                    "the update recomputes it at every step, so a value written into the state "
                    "would be lost. Make it a constant in the config to sweep it."
                )


def _module(state: LearnerState, module_id: str) -> ModuleState:
    if not isinstance(state, LearnerState):
        raise TypeError(f"Expected a jl.LearnerState; got {type(state).__name__}.")
    if module_id not in state.modules:
        raise ReadableKeyError(f"No module {module_id!r}; modules: {list(state.modules)}.")
    return state.modules[module_id]


def _is_inject(node: Any) -> bool:
    return isinstance(node, _InjectState)


def _inject_states(opt_state: Any) -> list[Any]:
    return [n for n in jax.tree.leaves(opt_state, is_leaf=_is_inject) if _is_inject(n)]


def _set_injected(opt_state: Any, name: str, value: jax.typing.ArrayLike) -> tuple[Any, bool]:
    """``opt_state`` with every injected ``name`` set to ``value``; whether any was found."""
    found = False

    def set_value(node: Any) -> Any:
        nonlocal found
        if not _is_inject(node) or name not in node.hyperparams:
            return node
        found = True
        stored = node.hyperparams[name]
        values = {**node.hyperparams, name: jnp.asarray(value, jnp.result_type(stored))}
        return node._replace(hyperparams=values)

    return jax.tree.map(set_value, opt_state, is_leaf=_is_inject), found
