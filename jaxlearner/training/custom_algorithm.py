"""Your own learner in the Trainer: act and postprocess functions, no recipe to write.

RLlib trains a custom ``Learner`` from episodes with ``update_from_episodes``,
turning them into a batch with learner connectors. Here the same three pieces
are plain functions around your :class:`~jaxlearner.Learner`:

* ``explore(module_state, obs [N, ...], key) -> (actions [N, ...], extras)``
  acts in ``N`` environments (``extras``: ``{name: [N, ...]}`` kept with the
  experience, e.g. log-probabilities; ``{}`` for none);
* ``postprocess(module_state, experience) -> batch``: the rollout's
  ``[T, N, ...]`` arrays (``obs``, ``actions``, ``rewards``, ``terminated``,
  ``truncated``, ``next_obs``, ``valid`` and the extras; the episodes of the
  rollout, back to back per environment) as the batch your loss trains on
  (RLlib's learner connector pipeline), pure and jitted by the trainer;
* ``exploit``, the act function for evaluation (default ``explore``).

:func:`custom_algorithm` checks them and returns an
:class:`~jaxlearner.algorithms.OnPolicyAlgorithm`, which
:func:`~jaxlearner.Trainer` runs as it runs PPO: the loop, stop conditions,
evaluation, writers, checkpoints.

Example:
  >>> algorithm = jl.custom_algorithm(learner, explore=sample, postprocess=returns_to_go,
  ...                                 rollout_steps=64)                # doctest: +SKIP
  >>> trainer = jl.Trainer(algorithm, "CartPole-v1", num_envs=4)       # doctest: +SKIP
  >>> trainer.run([jl.MaxIterations(10)])                              # doctest: +SKIP
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import jax

from jaxlearner.algorithms.algorithm import (
    ActFn,
    OnPolicyAlgorithm,
    PostprocessFn,
    RecurrentAct,
)
from jaxlearner.core.learner import Learner
from jaxlearner.core.state import ModuleState
from jaxlearner.types import Batch, Experience

CUSTOM_NAME = "custom"
"""The default name of a custom algorithm (in error messages and the run's config)."""


def _check_function(name: str, fn: object, arguments: str) -> None:
    """Raises ``TypeError`` unless ``fn`` is callable with ``arguments`` (comma-separated)."""
    count = arguments.count(",") + 1
    if not callable(fn):
        raise TypeError(
            f"custom_algorithm: {name} must be a function {name}({arguments}); got "
            f"{type(fn).__name__}."
        )
    try:
        inspect.signature(fn).bind(*range(count))
    except TypeError as error:
        raise TypeError(
            f"custom_algorithm: {name} must take {count} positional arguments "
            f"{name}({arguments}); {fn!r} does not ({error})."
        ) from None
    except ValueError:  # a builtin without a signature: trust it
        pass


def _checked_act(name: str, act: ActFn | RecurrentAct | None) -> ActFn | RecurrentAct:
    """``act``, checked now and, for a plain act function, its result checked when traced."""
    if isinstance(act, RecurrentAct):
        return act
    _check_function(name, act, "module_state, obs, key")
    assert act is not None

    def checked(module: ModuleState, obs: jax.Array, key: jax.Array) -> tuple[jax.Array, Any]:
        result = act(module, obs, key)
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Mapping)):
            raise TypeError(
                f"custom_algorithm: {name} must return (actions [N, ...], extras "
                f"{{name: [N, ...]}}), extras {{}} for none; got {type(result).__name__}."
            )
        return result

    return checked


def _checked_postprocess(postprocess: PostprocessFn) -> PostprocessFn:
    _check_function("postprocess", postprocess, "module_state, experience")

    def checked(module: ModuleState, experience: Experience) -> Batch:
        batch = postprocess(module, experience)
        if not isinstance(batch, Mapping):
            raise TypeError(
                "custom_algorithm: postprocess must return the batch your loss trains on, a "
                f"mapping {{name: [rows, ...]}}; got {type(batch).__name__}."
            )
        return batch

    return checked


def _rollout_steps(steps: int | Callable[[int], int]) -> Callable[[int], int]:
    if callable(steps):

        def checked(num_envs: int) -> int:
            value = steps(num_envs)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"custom_algorithm: rollout_steps({num_envs}) must give an int >= 1; got "
                    f"{value!r}."
                )
            return value

        return checked
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(
            "custom_algorithm: rollout_steps must be an int >= 1 (steps per environment per "
            f"iteration) or a function num_envs -> int; got {steps!r}."
        )
    return lambda num_envs: steps


def _module_id(learner: Learner, module_id: str | None) -> str:
    ids = learner.module_ids
    if module_id is None:
        if len(ids) != 1:
            raise ValueError(
                f"custom_algorithm: the learner has modules {list(ids)}; pass module_id= to "
                "choose the one that acts and trains."
            )
        return ids[0]
    if module_id not in ids:
        raise ValueError(
            f"custom_algorithm: module_id {module_id!r} is not one of the learner's modules "
            f"{list(ids)}."
        )
    return module_id


def custom_algorithm(
    learner: Learner,
    *,
    explore: ActFn | RecurrentAct,
    postprocess: PostprocessFn,
    rollout_steps: int | Callable[[int], int],
    exploit: ActFn | RecurrentAct | None = None,
    module_id: str | None = None,
    name: str = CUSTOM_NAME,
) -> OnPolicyAlgorithm:
    """An on-policy algorithm from your learner and functions, for :func:`~jaxlearner.Trainer`.

    Each training iteration collects ``rollout_steps`` steps in every environment with
    ``explore``, turns them into one batch with ``postprocess`` (jitted) and runs
    one ``learner.update`` on it (RLlib's ``update_from_episodes`` with a learner
    connector).

    Args:
      learner: your :class:`~jaxlearner.Learner` (its batch layout is what
        ``postprocess`` must return).
      explore: ``explore(module_state, obs [N, ...], key) -> (actions [N, ...], extras)``,
        ``extras`` a mapping (``{}`` for none), or a
        :class:`~jaxlearner.algorithms.RecurrentAct`.
      postprocess: ``postprocess(module_state, experience [T, N, ...]) -> batch``, pure.
      rollout_steps: steps per environment per iteration, or ``num_envs -> steps``.
      exploit: the act function for evaluation (default ``explore``).
      module_id: the module that acts and trains (default: the learner's only one).
      name: the algorithm's name in messages.

    Returns:
      An :class:`~jaxlearner.algorithms.OnPolicyAlgorithm` to pass to ``jl.Trainer``.

    Raises:
      TypeError: for a learner that is not a ``jl.Learner``, a function that is not
        callable with the arguments above; when traced (before compiling), an act
        function that does not return ``(actions, extras)`` or a postprocess that
        does not return a mapping.
      ValueError: for ``rollout_steps`` below 1, or a ``module_id`` the learner lacks
        (or none given for a learner of several modules).

    Example:
      >>> def sample(module, obs, key):                                  # doctest: +SKIP
      ...     logits = Policy().apply(module.params, obs)
      ...     return jax.random.categorical(key, logits), {}
      >>> algorithm = jl.custom_algorithm(learner, explore=sample, postprocess=to_batch,
      ...                                 rollout_steps=64)                # doctest: +SKIP
    """
    if not isinstance(learner, Learner):
        raise TypeError(
            f"custom_algorithm needs a jl.Learner; got {type(learner).__name__}. A built-in "
            "algorithm's learner needs no functions: pass it to jl.Trainer as it is."
        )
    explore = _checked_act("explore", explore)
    exploit = explore if exploit is None else _checked_act("exploit", exploit)
    return OnPolicyAlgorithm(
        name=name,
        module_id=_module_id(learner, module_id),
        learner=learner,
        config=None,
        explore=explore,
        exploit=exploit,
        rollout_steps=_rollout_steps(rollout_steps),
        postprocess=_checked_postprocess(postprocess),
    )
