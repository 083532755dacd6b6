"""Policy mapping: which policy (learner module) acts for each of a multi-agent env's agents.

RLlib's ``policy_mapping_fn``: a function ``agent_id -> policy_id`` (or a
dict). :func:`agent_groups` turns it into ``{policy_id: [agent_id, ...]}``,
checked against the env's agents and the learner's policies;
:func:`policy_spaces` reads each policy's spaces from the env, to build the
learner with (:func:`~jaxlearner.algorithms.multi_agent_ppo`).

Example:
  >>> agent_groups(["a", "b", "c"], {"a": "left", "b": "right", "c": "right"})
  {'left': ['a'], 'right': ['b', 'c']}
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeAlias

from jaxlearner.training.multi_agent.env import ParallelEnvFactory, make_parallel_envs

PolicyMapping: TypeAlias = Callable[[str], str] | Mapping[str, str]
"""``policy_mapping_fn(agent_id) -> policy_id``, or a dict ``{agent_id: policy_id}``."""


def agent_groups(
    possible_agents: Sequence[str],
    policy_mapping: PolicyMapping,
    policy_ids: Collection[str] | None = None,
) -> dict[str, list[str]]:
    """``{policy_id: [agent_id, ...]}``: the agents each policy acts for, checked.

    Args:
      possible_agents: the env's agents.
      policy_mapping: a function ``agent_id -> policy_id`` or a dict.
      policy_ids: the valid policy ids (the learner's modules), or ``None``
        to accept any string.

    Returns:
      The groups, in the order of the policies' first agents; agents in
      ``possible_agents`` order.

    Raises:
      KeyError: when a dict names agents the env does not have, or leaves out
        some of its agents (both listed with the env's agents).
      ValueError: when the mapping gives a policy id that is not one of
        ``policy_ids`` (the valid ones are listed), or not a string, or the
        function raises for an agent.
      TypeError: when the mapping is neither callable nor a dict.

    Example:
      >>> agent_groups(["a", "b", "c"], lambda agent: "shared")
      {'shared': ['a', 'b', 'c']}
    """
    agents = list(possible_agents)
    if isinstance(policy_mapping, Mapping):
        unknown = [agent for agent in policy_mapping if agent not in agents]
        missing = [agent for agent in agents if agent not in policy_mapping]
        if unknown or missing:
            raise KeyError(
                f"The policy mapping names unknown agent id(s) {unknown} and leaves out "
                f"{missing}; the env's agents are {agents}."
            )
        mapping_fn = policy_mapping.__getitem__
    elif callable(policy_mapping):
        mapping_fn = policy_mapping
    else:
        raise TypeError(
            "policy_mapping_fn must be a function agent_id -> policy_id or a dict; got "
            f"{type(policy_mapping).__name__}."
        )
    groups: dict[str, list[str]] = {}
    for agent in agents:
        try:
            policy_id = mapping_fn(agent)
        except Exception as error:
            raise ValueError(
                f"policy_mapping_fn raised {type(error).__name__}: {error} for agent {agent!r}; "
                f"it must map every one of the env's agents {agents}."
            ) from error
        if not isinstance(policy_id, str) or (
            policy_ids is not None and policy_id not in policy_ids
        ):
            valid = "any string" if policy_ids is None else f"one of {list(policy_ids)}"
            raise ValueError(
                f"policy_mapping_fn maps agent {agent!r} to {policy_id!r}, which is not a "
                f"policy of the learner; valid policy ids: {valid}."
            )
        groups.setdefault(policy_id, []).append(agent)
    return groups


def policy_spaces(
    env: ParallelEnvFactory,
    policy_mapping: PolicyMapping,
    env_config: Mapping[str, Any] | None = None,
) -> dict[str, tuple[Any, Any]]:
    """``{policy_id: (observation_space, action_space)}`` for a mapping of an env's agents.

    The argument :func:`~jaxlearner.algorithms.multi_agent_ppo` takes.

    Raises:
      ValueError: when agents mapped to one policy have different spaces, or
        as :func:`agent_groups`.

    Example:
      >>> from jaxlearner.training.multi_agent.env import GridSpread
      >>> policy_spaces(GridSpread, lambda agent: "shared")
      {'shared': (Box(-1.0, 1.0, (8,), float32), Discrete(5))}
    """
    probe = make_parallel_envs(env, 1, env_config)[0]
    try:
        groups = agent_groups(probe.possible_agents, policy_mapping)
        spaces = {}
        for policy_id, agents in groups.items():
            first = (probe.observation_space(agents[0]), probe.action_space(agents[0]))
            for agent in agents[1:]:
                other = (probe.observation_space(agent), probe.action_space(agent))
                if other != first:
                    raise ValueError(
                        f"Agents {agents[0]!r} and {agent!r} share policy {policy_id!r} but "
                        f"have different spaces: {first} and {other}."
                    )
            spaces[policy_id] = first
        return spaces
    finally:
        probe.close()


def check_agent_spaces(
    env: Any, groups: Mapping[str, list[str]], policies: Mapping[str, tuple[Any, Any]]
) -> None:
    """Checks every agent's spaces are those its policy was built for.

    Args:
      env: a ``ParallelEnv``.
      groups: ``{policy_id: [agent_id, ...]}`` (see :func:`agent_groups`).
      policies: ``{policy_id: (observation_space, action_space)}``.

    Raises:
      ValueError: naming the agent, its spaces and the policy's.

    Example:
      >>> from jaxlearner.training.multi_agent.env import GridSpread
      >>> check_agent_spaces(GridSpread(), {"shared": ["agent_0"]},
      ...                    policy_spaces(GridSpread, lambda agent: "shared"))
    """
    for policy_id, agents in groups.items():
        observation_space, action_space = policies[policy_id]
        for agent in agents:
            got = (env.observation_space(agent), env.action_space(agent))
            if got != (observation_space, action_space):
                raise ValueError(
                    f"Agent {agent!r} has spaces {got}, but policy {policy_id!r} was built for "
                    f"{(observation_space, action_space)}; build the learner with "
                    "policy_spaces(env, policy_mapping_fn)."
                )
