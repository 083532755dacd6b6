"""Checkpoints that survive upgrades: each format's committed fixture restores on every run.

``tests/fixtures/checkpoints/format<N>/`` holds a tiny PPO trainer checkpoint written by
``tests/fixtures/checkpoints/make_fixture.py`` with the jaxlearner of format N, and
``expected.json``: what must come back. A new format adds its own fixture and keeps these;
a format this jaxlearner no longer reads must be refused with the documented message
(naming the format and the release that saved it), never misread.
"""

import json
import pathlib
import shutil

import gymnasium as gym
import jax
import numpy as np
import pytest

import jaxlearner as jl
from jaxlearner.checkpoint.metadata import FORMAT_VERSION

FIXTURES = sorted(pathlib.Path(__file__).parent.joinpath("fixtures", "checkpoints").glob("format*"))


def _copy(fixture, tmp_path):
    """The fixture's checkpoints, copied: restoring must not touch the committed files."""
    target = tmp_path / fixture.name
    shutil.copytree(fixture / "checkpoints", target)
    return target, json.loads((fixture / "expected.json").read_text())


def _assert_params(params, expected):
    leaves = {
        jax.tree_util.keystr(path): np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
    }
    assert sorted(leaves) == sorted(expected)
    for path, want in expected.items():
        leaf = leaves[path]
        assert list(leaf.shape) == want["shape"] and str(leaf.dtype) == want["dtype"], path
        assert float(leaf.astype(np.float64).sum()) == want["sum"], path
        assert leaf.reshape(-1)[:4].astype(np.float64).tolist() == want["first"], path


def test_there_is_a_fixture_of_the_current_format():
    assert f"format{FORMAT_VERSION}" in [fixture.name for fixture in FIXTURES]


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda path: path.name)
def test_a_committed_checkpoint_restores_bit_exactly(fixture, tmp_path):
    directory, expected = _copy(fixture, tmp_path)
    if expected["format_version"] != FORMAT_VERSION:  # a format no longer read: refused
        with pytest.raises(ValueError, match=f"checkpoint format {expected['format_version']}"):
            jl.restore(directory)
        return
    learner, state = jl.restore(directory)
    _assert_params(state.modules["default_policy"].params, expected["params"])
    assert learner.recipe["algorithm"] == expected["algorithm"]


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda path: path.name)
def test_a_committed_trainer_checkpoint_resumes(fixture, tmp_path):
    directory, expected = _copy(fixture, tmp_path)
    if expected["format_version"] != FORMAT_VERSION:
        pytest.skip("a format this jaxlearner refuses (the test above checks the message)")
    env = gym.make(expected["env"])
    learner = jl.algorithms.ppo(env.observation_space, env.action_space, expected["config"])
    trainer = jl.Trainer(learner, expected["env"], num_envs=expected["num_envs"], progress=False)
    with jl.CheckpointManager(directory) as checkpoint:
        trainer.restore(checkpoint)
    counters = trainer.counters
    assert (counters.iteration, counters.env_steps) == tuple(expected["counters"].values())
    assert json.loads(json.dumps(trainer.history, default=float)) == expected["history"]
    _assert_params(trainer.state.modules["default_policy"].params, expected["params"])
    stats = trainer.step()  # and it trains on
    assert stats["iteration"] == expected["counters"]["iteration"] + 1


def test_restoring_leaves_the_committed_files_as_they_are(tmp_path):
    fixture = FIXTURES[-1]
    before = {p: p.read_bytes() for p in fixture.rglob("*") if p.is_file()}
    directory, _ = _copy(fixture, tmp_path)
    jl.restore(directory)
    assert {p: p.read_bytes() for p in fixture.rglob("*") if p.is_file()} == before
