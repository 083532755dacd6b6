"""The command line's offline side: recording a run's episodes, reading ``--dataset``.

:func:`record_run` is ``jaxlearner record RUN``: it restores a checkpoint of a
``jaxlearner train`` run, records episodes of its policy and writes them as a
dataset folder (:mod:`jaxlearner.training.offline.datasets`). :func:`read_dataset`
reads what ``jaxlearner train --dataset`` names, and :func:`check_offline_dataset`
checks it against the algorithm and the environment before anything is built
further. Each raises ``ValueError`` (or ``FileNotFoundError``, ``FileExistsError``,
``ImportError``) with a message the command prints as one line.

Example:
  >>> dataset = record_run(
  ...     "runs/ppo/checkpoints", "CartPole-v1", 15, 20, "data/cartpole")  # doctest: +SKIP
  >>> read_dataset("minari:me/cartpole-v0").num_episodes  # doctest: +SKIP
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

from jaxlearner.algorithms import algorithm_for
from jaxlearner.algorithms.algorithm import OfflineAlgorithm
from jaxlearner.algorithms.offline import fit_batch
from jaxlearner.checkpoint.rebuild import restore
from jaxlearner.training.env_runner import make_vector_env
from jaxlearner.training.offline.datasets import (
    EPISODES_FILE,
    METADATA_FILE,
    Dataset,
    check_dataset_spaces,
    load_dataset,
    record_episodes,
    save_dataset,
)

MINARI_PREFIX = "minari:"
"""``--dataset minari:ID`` names a Minari dataset stored locally (an id or a folder)."""


def record_run(
    checkpoints: str | os.PathLike[str],
    env: str,
    step: int,
    episodes: int,
    out: str | os.PathLike[str],
    *,
    explore: bool = False,
    num_envs: int = 8,
    seed: int = 0,
    source: dict[str, Any] | None = None,
) -> Dataset:
    """Records ``episodes`` episodes of a checkpoint's policy in ``env`` into the folder ``out``.

    Args:
      checkpoints: the checkpoint folder (a run's ``checkpoints``).
      env: the gymnasium id to act in.
      step: the checkpoint step to restore.
      episodes: episodes to record.
      out: the dataset folder; it must hold no dataset yet.
      explore: act with the sampling policy instead of the deterministic one.
      num_envs: sub-environments stepped together.
      seed: seeds the environments and the policy's key.
      source: JSON stored with the dataset, besides the step and the policy.

    Returns:
      The dataset written.

    Raises:
      FileExistsError: when ``out`` holds a dataset already (checked first).
    """
    folder = pathlib.Path(out)
    check_no_dataset(folder)
    learner, state = restore(checkpoints, step)
    algorithm = algorithm_for(learner)
    policy = "explore" if explore else "exploit"
    dataset = record_episodes(
        getattr(algorithm, policy),
        state.modules[algorithm.module_id],
        env,
        episodes,
        num_envs=num_envs,
        seed=seed,
        source={**(source or {}), "checkpoint_step": step, "policy": policy, "seed": seed},
    )
    save_dataset(dataset, folder)
    return dataset


def check_no_dataset(folder: pathlib.Path) -> None:
    """Raises ``FileExistsError`` when ``folder`` holds a dataset's files already."""
    if (folder / METADATA_FILE).exists() or (folder / EPISODES_FILE).exists():
        raise FileExistsError(f"{folder} holds a dataset already; datasets are never overwritten")


def read_dataset(text: str) -> Dataset:
    """The dataset ``--dataset`` names: a dataset folder, or ``minari:ID`` (id or folder).

    Raises:
      FileNotFoundError, ValueError, TypeError, ImportError: see
        :func:`~jaxlearner.training.offline.datasets.load_dataset` and
        :func:`~jaxlearner.training.offline.minari_datasets.load_minari`.
    """
    if text.startswith(MINARI_PREFIX):
        from jaxlearner.training.offline.minari_datasets import load_minari

        return load_minari(text.removeprefix(MINARI_PREFIX))
    return load_dataset(text)


def check_offline_dataset(algorithm: Any, dataset: Dataset | None, env: str) -> None:
    """Raises unless an offline algorithm has a dataset that fits it and ``env``, and an
    algorithm that collects its own experience has none.

    Raises:
      ValueError: naming what is missing or what differs.
    """
    name = algorithm.name
    if not isinstance(algorithm, OfflineAlgorithm):
        if dataset is not None:
            raise ValueError(f"--dataset is for offline algorithms (bc, marwil); {name} is not one")
        return
    if dataset is None:
        raise ValueError(
            f"{name} trains on a dataset: give --dataset DIR (record one with "
            "'jaxlearner record RUN --episodes N --out DIR')"
        )
    envs = make_vector_env(env)
    try:
        check_dataset_spaces(dataset, envs.single_observation_space, envs.single_action_space)
    finally:
        envs.close()
    fit_batch(algorithm, dataset.num_steps)  # a dataset smaller than a batch is one batch
