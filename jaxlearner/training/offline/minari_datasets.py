"""Minari datasets stored locally, read as a :class:`~jaxlearner.training.offline.datasets.Dataset`.

The only module that imports ``minari`` (the ``minari`` extra: ``pip install
'jaxlearner[minari]'``, which brings its HDF5 storage). Nothing is downloaded:
a dataset id is looked up under ``MINARI_DATASETS_PATH`` (default
``~/.minari/datasets``), and a folder is read directly. Minari stores each
episode's ``T + 1`` observations beside its ``T`` actions; here step ``t``
gets ``obs = observations[t]`` and ``next_obs = observations[t + 1]``, and the
last step of every episode ends it.

Example:
  >>> dataset = load_minari("me/cartpole-v0")              # doctest: +SKIP
  >>> learner = jl.algorithms.bc(*dataset.spaces())           # doctest: +SKIP
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import numpy as np

from jaxlearner.algorithms.networks.spaces import space_to_json
from jaxlearner.training.offline.datasets import COLUMNS, Dataset

EXTRA_HINT = "pip install 'jaxlearner[minari]'"


def _minari() -> Any:
    try:
        import minari
    except ImportError as error:
        raise ImportError(f"Reading Minari datasets needs minari: {EXTRA_HINT}.") from error
    return minari


def load_minari(dataset: str | os.PathLike[str]) -> Dataset:
    """A locally stored Minari dataset as a jaxlearner :class:`Dataset`.

    Args:
      dataset: a Minari dataset id (``"namespace/name-v0"``) stored under
        ``MINARI_DATASETS_PATH``, or the path of a dataset's folder (the one
        holding ``data/``, or ``data/`` itself).

    Returns:
      The dataset with Minari's spaces and, where Minari recorded one, the
      environment id; ``source`` names the Minari dataset.

    Raises:
      ImportError: when minari is not installed.
      FileNotFoundError: when the id is not stored locally (it is never downloaded).
      TypeError: for spaces jaxlearner's models do not take (``Dict``, ``Tuple``, ...).
      ValueError: when the episodes do not fit the spaces (see :class:`Dataset`).

    Example:
      >>> dataset = load_minari("/data/minari/me/cartpole-v0")  # doctest: +SKIP
    """
    minari = _minari()
    path = pathlib.Path(dataset)
    folder = path / "data" if (path / "data" / "metadata.json").is_file() else path
    if (folder / "metadata.json").is_file():
        source = minari.MinariDataset(folder)
    else:
        local = minari.list_local_datasets()
        if str(dataset) not in local:
            raise FileNotFoundError(
                f"No Minari dataset {str(dataset)!r} is stored locally (looked under "
                f"MINARI_DATASETS_PATH={os.environ.get('MINARI_DATASETS_PATH', '~/.minari')}; "
                f"local datasets: {sorted(local)}). jaxlearner never downloads: run "
                "'minari download ID' yourself, or pass the dataset's folder."
            )
        source = minari.load_dataset(str(dataset), download=False)
    observation_space = space_to_json(source.observation_space)
    action_space = space_to_json(source.action_space)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in COLUMNS}
    for episode in source.iterate_episodes():
        observations = np.asarray(episode.observations)
        steps = len(episode.rewards)
        ends = np.zeros(steps, bool)
        ends[-1] = True
        for name, value in (
            ("obs", observations[:-1]),
            ("actions", np.asarray(episode.actions)),
            ("rewards", np.asarray(episode.rewards)),
            ("terminated", np.asarray(episode.terminations)),
            ("truncated", np.asarray(episode.truncations)),
            ("next_obs", observations[1:]),
            ("episode_ends", ends),
        ):
            parts[name].append(value)
    if not parts["rewards"]:
        raise ValueError(f"The Minari dataset {str(dataset)!r} holds no episodes.")
    spec = source.spec
    env = getattr(spec.env_spec, "id", None) if spec.env_spec is not None else None
    return Dataset(
        {name: np.concatenate(values) for name, values in parts.items()},
        observation_space,
        action_space,
        env,
        {"minari": spec.dataset_id, "total_episodes": int(source.total_episodes)},
    )
