"""Datasets of recorded episodes: the folder format, recording a policy, loading and checking.

A dataset folder holds two files:

* ``episodes.npz``: the steps of whole episodes back to back, ``N`` rows
  (``numpy.savez``, read without pickle):

  ================  ===============  ============================================
  column            shape, dtype     meaning
  ================  ===============  ============================================
  ``obs``           ``[N, *obs]``    the observation the action was taken in
  ``actions``       ``[N, *act]``    the action the environment received
  ``rewards``       ``[N]`` float32  the reward of the step
  ``terminated``    ``[N]`` bool     the step ended its episode in a terminal state
  ``truncated``     ``[N]`` bool     the step ended its episode by truncation
  ``next_obs``      ``[N, *obs]``    the observation the step led to (the final
                                     observation at an episode's end)
  ``episode_ends``  ``[N]`` bool     the step is its episode's last stored step
  ================  ===============  ============================================

* ``dataset.json``: ``{"format": "jaxlearner-episodes", "version": 1,
  "observation_space": ..., "action_space": ..., "env": ..., "num_steps": N,
  "num_episodes": E, "source": {...}}``, the spaces as
  :func:`~jaxlearner.algorithms.networks.spaces.space_to_json` writes them.

:func:`record_episodes` runs a policy with an
:class:`~jaxlearner.training.env_runner.EnvRunner` and returns a
:class:`Dataset`; :func:`save_dataset` writes one (never over an existing
dataset); :func:`load_dataset` reads and checks one, and
:func:`check_dataset_spaces` compares its spaces with a learner's or an
environment's, so a mismatch is reported before anything compiles. Minari
datasets are read by :mod:`jaxlearner.training.offline.minari_datasets`.

Example:
  >>> dataset = record_episodes(
  ...     algorithm.exploit, state.modules["default_policy"], "CartPole-v1", 20)  # doctest: +SKIP
  >>> save_dataset(dataset, "data/cartpole")                             # doctest: +SKIP
  >>> load_dataset("data/cartpole").num_episodes                         # doctest: +SKIP
  20
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any, final

import jax
import numpy as np

from jaxlearner.algorithms.algorithm import ActFn
from jaxlearner.algorithms.networks.spaces import space_from_json, space_to_json
from jaxlearner.core.state import ModuleState
from jaxlearner.files import write_atomic
from jaxlearner.training.env_runner import EnvLike, EnvRunner

FORMAT = "jaxlearner-episodes"
VERSION = 1
EPISODES_FILE = "episodes.npz"
METADATA_FILE = "dataset.json"
COLUMNS: tuple[str, ...] = (
    "obs",
    "actions",
    "rewards",
    "terminated",
    "truncated",
    "next_obs",
    "episode_ends",
)


@final
@dataclasses.dataclass(frozen=True)
class Dataset:
    """Whole episodes back to back, as numpy columns, and the spaces they live in.

    Attributes:
      columns: ``{name: [N, ...]}`` for each name in :data:`COLUMNS`
        (observations float64 narrowed to float32, integer actions as int32).
      observation_space: the observation space as JSON (``space_to_json``).
      action_space: the action space as JSON.
      env: the gymnasium id the episodes came from, or ``None``.
      source: free-form JSON on where the episodes came from (run, checkpoint, policy).

    Raises:
      ValueError: when a column is missing, the columns' lengths differ, a
        shape or value does not fit the spaces, or the last row ends no episode.

    Example:
      >>> dataset = Dataset(columns, space_to_json(env.observation_space),
      ...                   space_to_json(env.action_space), "CartPole-v1")  # doctest: +SKIP
    """

    columns: Mapping[str, np.ndarray]
    observation_space: Mapping[str, Any]
    action_space: Mapping[str, Any]
    env: str | None = None
    source: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        columns = _normalized(self.columns)
        _check_columns(columns, self.observation_space, self.action_space)
        object.__setattr__(self, "columns", columns)
        object.__setattr__(self, "observation_space", dict(self.observation_space))
        object.__setattr__(self, "action_space", dict(self.action_space))
        object.__setattr__(self, "source", dict(self.source))

    @property
    def num_steps(self) -> int:
        """Rows ``N``."""
        return int(self.columns["rewards"].shape[0])

    @property
    def num_episodes(self) -> int:
        """Episodes ``E``."""
        return int(self.columns["episode_ends"].sum())

    def episode_returns(self) -> np.ndarray:
        """``[E]`` the undiscounted return of each episode, in order."""
        ends = np.flatnonzero(self.columns["episode_ends"])
        sums = np.cumsum(self.columns["rewards"], dtype=np.float64)[ends]
        return np.diff(sums, prepend=0.0)

    def spaces(self) -> tuple[Any, Any]:
        """``(observation_space, action_space)`` as gymnasium spaces."""
        return space_from_json(dict(self.observation_space)), space_from_json(
            dict(self.action_space)
        )


def _normalized(columns: Mapping[str, Any]) -> dict[str, np.ndarray]:
    missing = [name for name in COLUMNS if name not in columns]
    if missing:
        raise ValueError(
            f"A dataset needs the columns {list(COLUMNS)}; missing {missing} (got "
            f"{sorted(columns)})."
        )
    out = {name: np.asarray(columns[name]) for name in COLUMNS}
    for name in ("obs", "next_obs", "actions"):
        if out[name].dtype == np.float64:
            out[name] = out[name].astype(np.float32)
        elif out[name].dtype == np.int64:
            out[name] = out[name].astype(np.int32)
    out["rewards"] = out["rewards"].astype(np.float32)
    for name in ("terminated", "truncated", "episode_ends"):
        out[name] = out[name].astype(bool)
    return out


def _check_columns(
    columns: Mapping[str, np.ndarray],
    observation_space: Mapping[str, Any],
    action_space: Mapping[str, Any],
) -> None:
    lengths = {name: int(np.shape(v)[0]) if np.ndim(v) else 0 for name, v in columns.items()}
    if len(set(lengths.values())) != 1 or lengths["rewards"] == 0:
        raise ValueError(f"A dataset's columns need the same positive length; got {lengths}.")
    obs_shape = tuple(_shape_of(observation_space))
    for name in ("obs", "next_obs"):
        if columns[name].shape[1:] != obs_shape:
            raise ValueError(
                f"The dataset's {name} have shape {columns[name].shape[1:]} per step, but its "
                f"observation space {observation_space} has shape {obs_shape}."
            )
    action_shape = tuple(_shape_of(action_space))
    actions = columns["actions"]
    if actions.shape[1:] != action_shape:
        raise ValueError(
            f"The dataset's actions have shape {actions.shape[1:]} per step, but its action "
            f"space {action_space} has shape {action_shape}."
        )
    kind = action_space.get("type")
    if kind in ("Discrete", "MultiDiscrete", "MultiBinary"):
        if not np.issubdtype(actions.dtype, np.integer):
            raise ValueError(
                f"The dataset's actions are {actions.dtype}, but its action space {kind} takes "
                "integers."
            )
        low, high = _integer_bounds(action_space)
        if actions.size and (actions.min() < low.min() or np.any(actions > high)):
            raise ValueError(
                f"The dataset's actions range over [{actions.min()}, {actions.max()}], outside "
                f"its action space {action_space}."
            )
    if not columns["episode_ends"][-1]:
        raise ValueError("The dataset's last row ends no episode (episode_ends[-1] is False).")
    done = columns["terminated"] | columns["truncated"]
    if np.any(done & ~columns["episode_ends"]):
        raise ValueError(
            "The dataset has a terminated or truncated step that does not end its episode "
            "(episode_ends is False there)."
        )


def _shape_of(space: Mapping[str, Any]) -> tuple[int, ...]:
    kind = space.get("type")
    if kind == "Box":
        return tuple(space["shape"])
    if kind == "Discrete":
        return ()
    if kind == "MultiDiscrete":
        return np.shape(space["nvec"])
    if kind == "MultiBinary":
        n = space["n"]
        return tuple(n) if isinstance(n, list) else (n,)
    raise ValueError(f"Unknown space type {kind!r} in {space}.")


def _integer_bounds(space: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    kind = space["type"]
    if kind == "Discrete":
        start = np.asarray(space.get("start", 0))
        return start, start + space["n"] - 1
    if kind == "MultiDiscrete":
        start = np.asarray(space["start"])
        return start, start + np.asarray(space["nvec"]) - 1
    return np.zeros(()), np.ones(())


def check_dataset_spaces(
    dataset: Dataset,
    observation_space: Mapping[str, Any] | Any,
    action_space: Mapping[str, Any] | Any,
    against: str = "the environment",
) -> None:
    """Raises unless the dataset's spaces are the given ones (JSON or gymnasium spaces).

    Args:
      dataset: the dataset.
      observation_space: a space or its JSON (``None`` skips the check).
      action_space: a space or its JSON (``None`` skips the check).
      against: what the spaces belong to, for the message (``"the learner"``).

    Raises:
      ValueError: naming the space that differs, the dataset's and the other.

    Example:
      >>> check_dataset_spaces(dataset, env.observation_space, env.action_space)
      ... # doctest: +SKIP
    """
    for name, mine, other in (
        ("observation_space", dataset.observation_space, observation_space),
        ("action_space", dataset.action_space, action_space),
    ):
        if other is None:
            continue
        theirs = other if isinstance(other, Mapping) else space_to_json(other)
        if dict(theirs) != dict(mine):
            raise ValueError(
                f"The dataset's {name} {_describe(mine)} differs from {against}'s "
                f"{_describe(theirs)}; record the dataset in this environment, or build the "
                "learner from the dataset's spaces (dataset.spaces())."
            )


def _describe(space: Mapping[str, Any]) -> str:
    try:
        return str(space_from_json(dict(space)))
    except (KeyError, TypeError, ValueError):
        return str(dict(space))


def save_dataset(dataset: Dataset, path: str | os.PathLike[str]) -> pathlib.Path:
    """Writes ``dataset`` into the folder ``path`` (made if missing), never over files.

    Returns:
      The folder.

    Raises:
      FileExistsError: when ``path`` already holds a file of a dataset.

    Example:
      >>> save_dataset(dataset, "data/cartpole")  # doctest: +SKIP
      PosixPath('data/cartpole')
    """
    folder = pathlib.Path(path)
    for name in (EPISODES_FILE, METADATA_FILE):
        if (folder / name).exists():
            raise FileExistsError(
                f"{folder / name} exists; datasets are never overwritten. Choose a new folder "
                "or delete the old dataset first."
            )
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f".{EPISODES_FILE}.partial"
    with open(temporary, "wb") as handle:
        np.savez(handle, **dataset.columns)
    temporary.rename(folder / EPISODES_FILE)
    metadata = {
        "format": FORMAT,
        "version": VERSION,
        "observation_space": dataset.observation_space,
        "action_space": dataset.action_space,
        "env": dataset.env,
        "num_steps": dataset.num_steps,
        "num_episodes": dataset.num_episodes,
        "source": dataset.source,
    }
    write_atomic(folder / METADATA_FILE, json.dumps(metadata, indent=2) + "\n")
    return folder


def load_dataset(path: str | os.PathLike[str]) -> Dataset:
    """Reads and checks the dataset in the folder ``path`` (see the module docstring).

    Raises:
      FileNotFoundError: when the folder lacks ``episodes.npz`` or ``dataset.json``.
      ValueError: for another format or version, or columns that do not fit the
        recorded spaces (see :class:`Dataset`).

    Example:
      >>> dataset = load_dataset("data/cartpole")  # doctest: +SKIP
      >>> dataset.num_steps, dataset.spaces()      # doctest: +SKIP
    """
    folder = pathlib.Path(path)
    for name in (METADATA_FILE, EPISODES_FILE):
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"{folder} is not a jaxlearner dataset: it has no {name} (record one with "
                "'jaxlearner record RUN --episodes N --out DIR')."
            )
    metadata = json.loads((folder / METADATA_FILE).read_text())
    if metadata.get("format") != FORMAT or metadata.get("version") != VERSION:
        raise ValueError(
            f"{folder / METADATA_FILE} is format {metadata.get('format')!r} version "
            f"{metadata.get('version')!r}; this jaxlearner reads {FORMAT!r} version {VERSION}."
        )
    with np.load(folder / EPISODES_FILE, allow_pickle=False) as arrays:
        columns = {name: arrays[name] for name in arrays.files}
    return Dataset(
        columns,
        metadata["observation_space"],
        metadata["action_space"],
        metadata.get("env"),
        metadata.get("source", {}),
    )


def record_episodes(
    act: ActFn,
    module: ModuleState,
    env: EnvLike,
    num_episodes: int,
    *,
    num_envs: int = 8,
    seed: int = 0,
    env_config: Mapping[str, Any] | None = None,
    source: Mapping[str, Any] | None = None,
    max_steps: int = 10_000_000,
) -> Dataset:
    """Records ``num_episodes`` whole episodes of the policy ``act`` in ``env``.

    Each of ``num_envs`` sub-environments records its first
    ``ceil(num_episodes / num_envs)`` episodes (so short episodes are not
    favoured by finishing first); the dataset holds the first
    ``num_episodes`` of those, ordered by sub-environment, then time.

    Args:
      act: ``act(module, obs, key) -> (env_actions, extras)``, e.g. an
        algorithm's ``exploit`` (deterministic) or ``explore``.
      module: the module state the policy reads.
      env: a gymnasium id, an env factory, ... (see
        :func:`~jaxlearner.training.env_runner.make_vector_env`).
      num_episodes: episodes to record.
      num_envs: sub-environments stepped together.
      seed: seeds the environments' reset and the policy's key.
      env_config: keyword arguments for ``gymnasium.make`` or the factory.
      source: JSON stored with the dataset (where the policy came from).
      max_steps: a bound on steps per sub-environment, against episodes that never end.

    Returns:
      A :class:`Dataset` whose ``env`` is ``env`` when it is an id.

    Raises:
      ValueError: for a ``num_episodes`` that is not a positive int.
      RuntimeError: when the episodes have not finished within ``max_steps``.

    Example:
      >>> algorithm = jl.algorithms.algorithm_for(learner)                    # doctest: +SKIP
      >>> dataset = record_episodes(algorithm.exploit, state.modules["default_policy"],
      ...                           "CartPole-v1", 20)                        # doctest: +SKIP
    """
    if isinstance(num_episodes, bool) or not isinstance(num_episodes, int) or num_episodes < 1:
        raise ValueError(f"num_episodes must be a positive int; got {num_episodes!r}.")
    num_envs = min(num_envs, num_episodes)
    quota = -(-num_episodes // num_envs)
    runner = EnvRunner(env, num_envs=num_envs, env_config=env_config, seed=seed)
    try:
        episodes = _collect(runner, act, module, quota, jax.random.key(seed), max_steps)
        observation_space = space_to_json(runner.observation_space)
        action_space = space_to_json(runner.action_space)
    finally:
        runner.close()
    ordered = [episode for env_episodes in episodes for episode in env_episodes][:num_episodes]
    columns = {name: np.concatenate([e[name] for e in ordered]) for name in COLUMNS}
    return Dataset(
        columns,
        observation_space,
        action_space,
        env if isinstance(env, str) else None,
        dict(source or {}),
    )


def _collect(
    runner: EnvRunner, act: ActFn, module: ModuleState, quota: int, key: jax.Array, max_steps: int
) -> list[list[dict[str, np.ndarray]]]:
    """Each sub-environment's first ``quota`` episodes, as dicts of columns."""
    n = runner.num_envs
    episodes: list[list[dict[str, np.ndarray]]] = [[] for _ in range(n)]
    partial: list[list[dict[str, np.ndarray]]] = [[] for _ in range(n)]
    steps = 0
    while any(len(done) < quota for done in episodes):
        if steps >= max_steps:
            raise RuntimeError(f"Recording did not finish {quota} episodes in {max_steps} steps.")
        key, sample_key = jax.random.split(key)
        rollout = runner.sample(act, module, 64, sample_key)
        steps += 64
        ends = rollout.terminated | rollout.truncated
        for i in range(n):
            if len(episodes[i]) >= quota:
                continue
            for t in np.flatnonzero(rollout.valid[:, i]):
                partial[i].append(
                    {
                        "obs": rollout.obs[t, i],
                        "actions": rollout.actions[t, i],
                        "rewards": rollout.rewards[t, i],
                        "terminated": rollout.terminated[t, i],
                        "truncated": rollout.truncated[t, i],
                        "next_obs": rollout.next_obs[t, i],
                        "episode_ends": ends[t, i],
                    }
                )
                if ends[t, i] and len(episodes[i]) < quota:
                    episodes[i].append(
                        {name: np.stack([row[name] for row in partial[i]]) for name in COLUMNS}
                    )
                    partial[i] = []
    return episodes
