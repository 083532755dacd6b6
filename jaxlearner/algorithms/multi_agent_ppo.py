"""Multi-agent PPO: one learner holding several PPO modules, one per policy.

RLlib's multi-agent PPO trains several RLModules in one multi-module
Learner; here that is one :class:`~jaxlearner.Learner` whose module specs are
PPO modules (:func:`~jaxlearner.algorithms.ppo.ppo_module`), one per policy
id, each with its own spaces, params and optimizer state, all updated by one
jitted ``learner.update(state, {policy_id: batch, ...})``. Which policies get
gradient steps is the learner's ``modules_to_train`` (RLlib's
``policies_to_train``); the others act but stay as they are.

One :class:`~jaxlearner.algorithms.PPOConfig` serves every policy: its
module-level fields (model, learning rate, loss coefficients) build each
module, its learner-level fields (``minibatch_size``, ``num_epochs``,
``shuffle``) the learner, and ``train_batch_size`` counts env steps per
training iteration (each env step gives one row per agent to its policy).
``policy_configs`` overrides module-level fields per policy (RLlib's
``algorithm_config_overrides_per_module``): a different learning rate,
entropy coefficient or network for one policy; the shared fields
(:data:`SHARED_FIELDS`) stay one value for the whole learner.

The learner carries a JSON recipe (``"algorithm": "multi_agent_ppo"``, the
config, each policy's spaces and the policies to train), so a checkpoint
rebuilds it with :func:`jaxlearner.restore`. Which agents act with which
policy is the driver's concern: see
:func:`~jaxlearner.training.multi_agent.MultiAgentTrainer`.

Example:
  >>> import gymnasium as gym, jax, jaxlearner as jl
  >>> obs, act = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3)
  >>> learner = jl.algorithms.multi_agent_ppo(
  ...     {"blue": (obs, act), "red": (obs, act)}, {"minibatch_size": 64},
  ...     policies_to_train={"blue"})
  >>> sorted(learner.modules_to_train)
  ['blue']
  >>> state = learner.init(jax.random.key(0))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

import gymnasium

from jaxlearner.algorithms.algorithm import OnPolicyAlgorithm
from jaxlearner.algorithms.config import config_from_json, config_to_json, make_config
from jaxlearner.algorithms.networks.spaces import space_from_json, space_to_json
from jaxlearner.algorithms.ppo import PPOConfig, make_algorithm, ppo_module
from jaxlearner.core.learner import Learner
from jaxlearner.core.registry import register_recipe

ALGORITHM = "multi_agent_ppo"
"""The name in the learner's recipe (and the recipe registry)."""

PolicySpaces = Mapping[str, tuple[gymnasium.Space, gymnasium.Space]]
"""``{policy_id: (observation_space, action_space)}``."""

SHARED_FIELDS: tuple[str, ...] = (
    "train_batch_size",
    "minibatch_size",
    "num_epochs",
    "shuffle",
    "num_envs_per_env_runner",
    "use_lstm",
)
"""PPOConfig fields that belong to the learner or the run, not to one policy: a
``policy_configs`` entry may not change them."""


def multi_agent_ppo(
    policies: PolicySpaces,
    config: PPOConfig | Mapping[str, Any] | None = None,
    policies_to_train: Collection[str] | None = None,
    policy_configs: Mapping[str, Mapping[str, Any]] | None = None,
) -> Learner:
    """A :class:`~jaxlearner.Learner` of one PPO module per policy.

    Args:
      policies: ``{policy_id: (observation_space, action_space)}``, one entry
        per policy (module); agents that share a policy share its spaces. The
        trainer's ``policy_spaces(env, policy_mapping_fn)`` reads them from a
        PettingZoo environment.
      config: a :class:`~jaxlearner.algorithms.PPOConfig` (or a dict of its
        fields) shared by every policy.
      policies_to_train: the policy ids that get gradient steps (``None``: all).
      policy_configs: ``{policy_id: {field: value}}``, PPOConfig fields that
        differ for that policy from ``config`` (``None``: none differ). The
        fields in :data:`SHARED_FIELDS` cannot differ.

    Returns:
      The learner; it knows its batch layout (``learner.init(key)`` needs no
      sample batch) and carries its recipe.

    Raises:
      ValueError: for no policies, a policy id that is not a non-empty string,
        ``policies_to_train`` or ``policy_configs`` naming an unknown policy
        (the valid ids are listed), a ``policy_configs`` entry that changes a
        shared field or names no PPOConfig field, or invalid config values.
      TypeError: for an entry that is not a pair of gymnasium spaces, or
        unsupported spaces.

    Example:
      >>> import gymnasium as gym, jax, jaxlearner as jl
      >>> obs, act = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3)
      >>> learner = jl.algorithms.multi_agent_ppo(
      ...     {"blue": (obs, act), "red": (obs, act)}, {"minibatch_size": 64},
      ...     policy_configs={"red": {"lr": 1e-4, "hidden_sizes": (32,)}})
      >>> params = learner.init(jax.random.key(0)).modules
      >>> [params[p].params["params"]["actor"]["encoder"]["mlp"]["dense_0"]["kernel"].shape
      ...  for p in ("blue", "red")]
      [(4, 256), (4, 32)]
    """
    config = make_config(PPOConfig, config)
    if config.use_lstm:
        raise ValueError(
            "multi_agent_ppo has feed-forward policies only; got use_lstm=True. The "
            "multi-agent runner does not carry recurrent state: use use_lstm=False."
        )
    policies = _check_policies(policies)
    trained = _check_policies_to_train(policies_to_train, tuple(policies))
    overrides = _check_policy_configs(policy_configs, config, tuple(policies))
    modules = {}
    layouts = {}
    for policy_id, (observation_space, action_space) in policies.items():
        modules[policy_id], layouts[policy_id] = ppo_module(
            observation_space, action_space, _policy_config(config, overrides, policy_id)
        )
    return Learner(
        modules,
        minibatch_size=config.minibatch_size,
        num_epochs=config.num_epochs,
        shuffle=config.shuffle,
        modules_to_train=trained,
        batch_layout=layouts,
        recipe=_recipe(policies, config, trained, overrides),
    )


def algorithms_for(learner: Learner) -> dict[str, OnPolicyAlgorithm]:
    """Each policy's :class:`~jaxlearner.algorithms.OnPolicyAlgorithm` around ``learner``.

    All share the one learner; each acts with, and postprocesses for, its own
    module (``algorithm.module_id``). Nothing is built but the functions.

    Raises:
      ValueError: when ``learner`` was not made by :func:`multi_agent_ppo`.

    Example:
      >>> algorithms = algorithms_for(learner)                           # doctest: +SKIP
      >>> algorithms["blue"].explore(state.modules["blue"], obs, key)    # doctest: +SKIP
    """
    policies, config, overrides = _parse(learner.recipe)
    return {
        policy_id: make_algorithm(
            learner, action_space, _policy_config(config, overrides, policy_id), policy_id
        )
        for policy_id, (_, action_space) in policies.items()
    }


def policies_of(learner: Learner) -> dict[str, tuple[gymnasium.Space, gymnasium.Space]]:
    """``{policy_id: (observation_space, action_space)}`` of a :func:`multi_agent_ppo` learner.

    Raises:
      ValueError: when ``learner`` was not made by :func:`multi_agent_ppo`.

    Example:
      >>> policies_of(learner)["blue"]                                   # doctest: +SKIP
      (Box(-1.0, 1.0, (4,), float32), Discrete(3))
    """
    return _parse(learner.recipe)[0]


def with_policies_to_train(learner: Learner, policies_to_train: Collection[str]) -> Learner:
    """The same learner training only ``policies_to_train`` (its recipe says so too).

    Raises:
      ValueError: for an unknown policy id (the valid ones are listed), or a
        learner not made by :func:`multi_agent_ppo`.

    Example:
      >>> learner = with_policies_to_train(learner, {"red"})            # doctest: +SKIP
    """
    policies, config, overrides = _parse(learner.recipe)
    trained = _check_policies_to_train(policies_to_train, tuple(policies))
    return learner.replace(
        modules_to_train=trained, recipe=_recipe(policies, config, trained, overrides)
    )


def learner_from_recipe(recipe: dict[str, Any]) -> Learner:
    """The learner a ``multi_agent_ppo`` recipe describes (the registered recipe builder)."""
    policies, config, overrides = _parse(recipe)
    return multi_agent_ppo(policies, config, recipe.get("policies_to_train"), overrides)


register_recipe(ALGORITHM, learner_from_recipe, replace=True)


def _recipe(
    policies: PolicySpaces,
    config: PPOConfig,
    trained: frozenset[str] | None,
    overrides: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    recipe_overrides = {
        policy_id: {
            field: value
            for field, value in config_to_json(_policy_config(config, overrides, policy_id)).items()
            if field in fields
        }
        for policy_id, fields in overrides.items()
    }
    return {
        "algorithm": ALGORITHM,
        "config": config_to_json(config),
        "policies": {
            policy_id: {
                "observation_space": space_to_json(observation_space),
                "action_space": space_to_json(action_space),
            }
            for policy_id, (observation_space, action_space) in policies.items()
        },
        "policies_to_train": None if trained is None else sorted(trained),
        "policy_configs": recipe_overrides,
    }


def _parse(
    recipe: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], PPOConfig, dict[str, dict[str, Any]]]:
    """``(policies, shared config, {policy_id: overrides})``; recipes written before
    ``policy_configs`` existed have none."""
    if not recipe or recipe.get("algorithm") != ALGORITHM:
        found = None if not recipe else recipe.get("algorithm")
        raise ValueError(
            f"This learner was not made by jl.algorithms.multi_agent_ppo (its recipe's algorithm "
            f"is {found!r}, expected {ALGORITHM!r})."
        )
    missing = sorted({"config", "policies"} - set(recipe))
    if missing:
        raise ValueError(f"The {ALGORITHM!r} recipe lacks {missing}; got {dict(recipe)!r}.")
    policies = {
        policy_id: (
            space_from_json(spaces["observation_space"]),
            space_from_json(spaces["action_space"]),
        )
        for policy_id, spaces in recipe["policies"].items()
    }
    config = config_from_json(PPOConfig, recipe["config"])
    overrides = {}
    for policy_id, fields in (recipe.get("policy_configs") or {}).items():
        # Read through the whole config, so JSON lists become the fields' tuples.
        policy_config = config_from_json(PPOConfig, {**recipe["config"], **fields})
        overrides[policy_id] = {field: getattr(policy_config, field) for field in fields}
    return policies, config, overrides


def _policy_config(
    config: PPOConfig, overrides: Mapping[str, Mapping[str, Any]], policy_id: str
) -> PPOConfig:
    """``config`` with ``policy_id``'s overrides, validated as a whole PPOConfig."""
    fields = overrides.get(policy_id)
    return dataclasses.replace(config, **fields) if fields else config


def _check_policy_configs(
    policy_configs: object, config: PPOConfig, policy_ids: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    """The per-policy overrides, each policy's whole config built once to validate it."""
    if policy_configs is None:
        return {}
    if not isinstance(policy_configs, Mapping):
        raise TypeError(
            "policy_configs must be None or a mapping {policy_id: {field: value}}; got "
            f"{type(policy_configs).__name__}."
        )
    unknown = sorted(set(policy_configs) - set(policy_ids))
    if unknown:
        raise ValueError(
            f"policy_configs names unknown policy id(s) {unknown}; policies: {list(policy_ids)}."
        )
    valid = sorted(f.name for f in dataclasses.fields(PPOConfig))
    overrides = {}
    for policy_id, fields in policy_configs.items():
        if not isinstance(fields, Mapping):
            raise TypeError(
                f"policy_configs[{policy_id!r}] must be a mapping of PPOConfig fields; got "
                f"{type(fields).__name__}."
            )
        names = sorted(set(fields) - set(valid))
        if names:
            raise ValueError(
                f"policy_configs[{policy_id!r}] has unknown PPOConfig field(s) {names}; valid "
                f"names: {valid}."
            )
        shared = sorted(f for f in fields if f in SHARED_FIELDS and fields[f] != getattr(config, f))
        if shared:
            raise ValueError(
                f"policy_configs[{policy_id!r}] changes {shared}, which all policies share (one "
                f"learner, one run): set them in the shared config. Per-policy fields are all "
                f"PPOConfig fields but {list(SHARED_FIELDS)}."
            )
        overrides[policy_id] = dict(fields)
        try:
            _policy_config(config, overrides, policy_id)
        except (ValueError, TypeError) as error:
            raise type(error)(f"policy_configs[{policy_id!r}]: {error}") from None
    return overrides


def _check_policies(policies: object) -> dict[str, tuple[gymnasium.Space, gymnasium.Space]]:
    if not isinstance(policies, Mapping) or not policies:
        raise ValueError(
            "policies must be a non-empty mapping {policy_id: (observation_space, "
            f"action_space)}}; got {policies!r}."
        )
    checked = {}
    for policy_id, spaces in policies.items():
        if not isinstance(policy_id, str) or not policy_id:
            raise ValueError(f"A policy id must be a non-empty string; got {policy_id!r}.")
        if (
            not isinstance(spaces, tuple | list)
            or len(spaces) != 2
            or not all(isinstance(space, gymnasium.Space) for space in spaces)
        ):
            raise TypeError(
                f"Policy {policy_id!r}: expected a pair (observation_space, action_space) of "
                f"gymnasium spaces; got {spaces!r}."
            )
        checked[policy_id] = (spaces[0], spaces[1])
    return checked


def _check_policies_to_train(
    policies_to_train: Collection[str] | None, policy_ids: tuple[str, ...]
) -> frozenset[str] | None:
    if policies_to_train is None:
        return None
    if isinstance(policies_to_train, str) or not isinstance(policies_to_train, Collection):
        hint = (
            f" (did you mean {{{policies_to_train!r}}}?)"
            if isinstance(policies_to_train, str)
            else ""
        )
        raise TypeError(
            f"policies_to_train must be None or a collection of policy ids; got "
            f"{policies_to_train!r}{hint}."
        )
    trained = frozenset(policies_to_train)
    unknown = sorted(trained - set(policy_ids))
    if unknown:
        raise ValueError(
            f"policies_to_train names unknown policy id(s) {unknown}; policies: {list(policy_ids)}."
        )
    if not trained:
        raise ValueError(
            f"policies_to_train is empty: nothing would train; policies: {list(policy_ids)}."
        )
    return trained
