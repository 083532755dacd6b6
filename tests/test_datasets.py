"""Datasets: the folder format's round trip, checks on bad input, recording, Minari."""

import json
import sys

import gymnasium as gym
import jax
import numpy as np
import pytest

import jaxlearner as jl
from jaxlearner.algorithms.networks.spaces import space_to_json
from jaxlearner.training.offline.datasets import (
    EPISODES_FILE,
    METADATA_FILE,
    Dataset,
    check_dataset_spaces,
    load_dataset,
    record_episodes,
    save_dataset,
)

CARTPOLE = gym.make("CartPole-v1")
OBS = space_to_json(CARTPOLE.observation_space)
ACTIONS = space_to_json(CARTPOLE.action_space)


def columns(num_rows=6, ends=(2, 5), seed=0):
    rng = np.random.default_rng(seed)
    episode_ends = np.zeros(num_rows, bool)
    episode_ends[list(ends)] = True
    terminated = episode_ends.copy()
    terminated[ends[-1]] = False
    return {
        "obs": rng.normal(size=(num_rows, 4)),  # float64, narrowed to float32
        "actions": rng.integers(0, 2, num_rows),  # int64, narrowed to int32
        "rewards": np.ones(num_rows),
        "terminated": terminated,
        "truncated": episode_ends & ~terminated,
        "next_obs": rng.normal(size=(num_rows, 4)),
        "episode_ends": episode_ends,
    }


def test_a_dataset_round_trips_through_its_folder(tmp_path):
    dataset = Dataset(columns(), OBS, ACTIONS, "CartPole-v1", {"note": "by hand"})
    assert dataset.columns["obs"].dtype == np.float32
    assert dataset.columns["actions"].dtype == np.int32
    assert dataset.num_steps == 6 and dataset.num_episodes == 2
    np.testing.assert_array_equal(dataset.episode_returns(), [3.0, 3.0])
    save_dataset(dataset, tmp_path / "data")
    loaded = load_dataset(tmp_path / "data")
    assert loaded.columns.keys() == dataset.columns.keys()
    for name, column in dataset.columns.items():
        assert loaded.columns[name].dtype == column.dtype
        np.testing.assert_array_equal(loaded.columns[name], column)
    assert (loaded.observation_space, loaded.action_space) == (OBS, ACTIONS)
    assert loaded.env == "CartPole-v1" and loaded.source == {"note": "by hand"}
    assert loaded.spaces() == (CARTPOLE.observation_space, CARTPOLE.action_space)
    metadata = json.loads((tmp_path / "data" / METADATA_FILE).read_text())
    assert metadata["format"] == "jaxlearner-episodes" and metadata["num_steps"] == 6


def test_a_dataset_is_never_overwritten(tmp_path):
    dataset = Dataset(columns(), OBS, ACTIONS)
    save_dataset(dataset, tmp_path)
    before = (tmp_path / EPISODES_FILE).read_bytes()
    with pytest.raises(FileExistsError, match="datasets are never overwritten"):
        save_dataset(Dataset(columns(seed=1), OBS, ACTIONS), tmp_path)
    assert (tmp_path / EPISODES_FILE).read_bytes() == before


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.pop("next_obs"), r"missing \['next_obs'\]"),
        (lambda c: c.update(rewards=np.ones(5)), "columns need the same positive length"),
        (lambda c: c.update(obs=np.zeros((6, 3))), r"obs have shape \(3,\) per step, but"),
        (lambda c: c.update(actions=np.full(6, 2)), r"actions range over \[2, 2\], outside"),
        (lambda c: c.update(actions=np.zeros(6)), "actions are float32, but its action space"),
        (lambda c: c["episode_ends"].__setitem__(5, False), "last row ends no episode"),
        (lambda c: c["terminated"].__setitem__(0, True), "terminated or truncated step that"),
    ],
)
def test_bad_columns_are_refused_with_what_is_wrong(change, message):
    bad = columns()
    change(bad)
    with pytest.raises(ValueError, match=message):
        Dataset(bad, OBS, ACTIONS)


def test_loading_names_what_is_missing_or_foreign(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a jaxlearner dataset: it has no dataset"):
        load_dataset(tmp_path)
    save_dataset(Dataset(columns(), OBS, ACTIONS), tmp_path / "data")
    metadata = json.loads((tmp_path / "data" / METADATA_FILE).read_text())
    metadata["version"] = 7
    (tmp_path / "data" / METADATA_FILE).write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match="version 7; this jaxlearner reads 'jaxlearner-episodes'"):
        load_dataset(tmp_path / "data")


def test_spaces_that_differ_are_named():
    dataset = Dataset(columns(), OBS, ACTIONS)
    check_dataset_spaces(dataset, CARTPOLE.observation_space, CARTPOLE.action_space)
    with pytest.raises(ValueError, match=r"dataset's action_space Discrete\(2\) differs from"):
        check_dataset_spaces(dataset, None, gym.spaces.Discrete(3), against="the learner")


def test_recording_keeps_whole_episodes_of_the_policy():
    algorithm = jl.algorithms.build(
        "bc", CARTPOLE.observation_space, CARTPOLE.action_space, {"hidden_sizes": (8,)}
    )
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    dataset = record_episodes(
        algorithm.explore, module, "CartPole-v1", 5, num_envs=2, seed=3, source={"x": 1}
    )
    cols = dataset.columns
    assert dataset.num_episodes == 5 and dataset.env == "CartPole-v1"
    assert dataset.source == {"x": 1}
    ends = np.flatnonzero(cols["episode_ends"])
    assert ends[-1] == dataset.num_steps - 1
    assert np.all(cols["terminated"][ends] | cols["truncated"][ends])
    # CartPole pays 1 a step, so each return is its episode's length.
    lengths = np.diff(ends, prepend=-1)
    np.testing.assert_array_equal(dataset.episode_returns(), lengths)
    # Within an episode each step starts where the last one led.
    inside = np.flatnonzero(~cols["episode_ends"])
    np.testing.assert_array_equal(cols["next_obs"][inside], cols["obs"][inside + 1])
    # The same seed records the same episodes.
    again = record_episodes(algorithm.explore, module, "CartPole-v1", 5, num_envs=2, seed=3)
    np.testing.assert_array_equal(again.columns["actions"], cols["actions"])
    with pytest.raises(ValueError, match="num_episodes must be a positive int; got 0"):
        record_episodes(algorithm.explore, module, "CartPole-v1", 0)


def test_a_local_minari_dataset_reads_as_a_dataset(tmp_path, monkeypatch):
    minari = pytest.importorskip("minari", reason="the minari extra is not installed")
    pytest.importorskip("h5py", reason="minari's HDF5 storage (minari[hdf5]) is not installed")
    from jaxlearner.training.offline.minari_datasets import load_minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    env = minari.DataCollector(gym.make("CartPole-v1"))
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    episodes = 0
    while episodes < 3:
        _, _, terminated, truncated, _ = env.step(int(rng.integers(2)))
        if terminated or truncated:
            env.reset()
            episodes += 1
    with pytest.warns(UserWarning):  # minari asks for an author, a description, ...
        created = env.create_dataset("test/cartpole/random-v0", algorithm_name="random")
    for source in ("test/cartpole/random-v0", tmp_path / "minari/test/cartpole/random-v0"):
        dataset = load_minari(source)
        assert dataset.num_episodes == 3 and dataset.num_steps == created.total_steps
        assert dataset.env == "CartPole-v1"
        assert dataset.spaces() == (CARTPOLE.observation_space, CARTPOLE.action_space)
        first = next(iter(created.iterate_episodes()))
        np.testing.assert_array_equal(dataset.columns["obs"][: len(first)], first.observations[:-1])
        np.testing.assert_array_equal(
            dataset.columns["next_obs"][: len(first)], first.observations[1:]
        )
        assert dataset.columns["episode_ends"][len(first) - 1]
        assert dataset.columns["terminated"].sum() == 3
    with pytest.raises(FileNotFoundError, match="never downloads"):
        load_minari("test/cartpole/expert-v0")


def test_without_minari_reading_one_says_what_to_install(monkeypatch):
    from jaxlearner.training.offline.minari_datasets import load_minari

    monkeypatch.setitem(sys.modules, "minari", None)  # as if not installed
    with pytest.raises(ImportError, match=r"needs minari: pip install 'jaxlearner\[minari\]'"):
        load_minari("cartpole/expert-v0")
