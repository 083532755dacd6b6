"""Every algorithm's library defaults run with the trainers' and the command line's defaults.

A new user's first call: ``jl.algorithms.appo(obs_space, act_space)`` into
``jl.Trainer(learner, "Acrobot-v1")``, or ``jaxlearner train bc`` on a few recorded
episodes. Each algorithm in the registry steps once with nothing but defaults: the
online ones with :class:`~jaxlearner.Trainer` (multi-agent PPO with
:class:`~jaxlearner.MultiAgentTrainer`), the offline ones with
:class:`~jaxlearner.OfflineTrainer` on a dataset smaller than their default batch.
"""

import gymnasium as gym
import jax
import pytest

import jaxlearner as jl
from jaxlearner.cli import DEFAULTS, NO_CACHE_VARIABLE, TrainOptions, main
from jaxlearner.cli.run_settings import build, run_settings
from jaxlearner.core.registry import recipe_builders
from jaxlearner.errors import SmallDatasetWarning
from jaxlearner.training.multi_agent.env import GridSpread
from jaxlearner.training.multi_agent.trainer import MultiAgentTrainer, policy_spaces
from jaxlearner.training.offline.datasets import record_episodes, save_dataset

SCENARIOS = {"appo": "Acrobot-v1"}
"""A new user's first call with another environment than the command line's own."""
ONLINE = {
    name: SCENARIOS.get(name, defaults.env)
    for name, defaults in DEFAULTS.items()
    if not defaults.offline
}
"""Every online algorithm with a command-line default (``jaxlearner.cli.DEFAULTS``)."""
OFFLINE = {name: defaults.env for name, defaults in DEFAULTS.items() if defaults.offline}


def shipped(name):
    """Whether jaxlearner registers ``name`` (other tests register their own recipes)."""
    builder = recipe_builders()[name]
    return getattr(builder, "config_type", builder).__module__.startswith("jaxlearner.")


def test_every_registered_algorithm_is_stepped_here():
    names = {name for name in jl.registered_recipes() if shipped(name)}
    assert names == set(ONLINE) | set(OFFLINE) | {"multi_agent_ppo"}
    assert {name for name in jl.algorithms.algorithm_names() if shipped(name)} == names - {
        "multi_agent_ppo"
    }


@pytest.mark.parametrize("name", sorted(ONLINE))
def test_library_defaults_step_with_the_trainers_defaults(name):
    env = gym.make(ONLINE[name])
    learner = jl.algorithms.build(name, env.observation_space, env.action_space).learner
    trainer = jl.Trainer(learner, ONLINE[name])  # 8 envs
    try:
        stats = trainer.step()
    finally:
        trainer.close()
    assert stats["iteration"] == 1.0 and stats["env_steps"] > 0
    if name == "appo":  # 500 in whole sequences of 50 over 8 envs: 2 each
        assert stats["env_steps"] == 800


def test_multi_agent_ppo_defaults_step_with_the_multi_agent_trainers_defaults():
    shared = lambda agent: "shared"
    learner = jl.algorithms.multi_agent_ppo(policy_spaces(GridSpread, shared))
    trainer = MultiAgentTrainer(learner, GridSpread, shared)
    try:
        stats = trainer.step()
    finally:
        trainer.close()
    assert stats["env_steps"] == 4000  # PPO's train_batch_size over 4 envs


@pytest.fixture(scope="module")
def small_dataset():
    """Twenty CartPole episodes of an untrained policy: a few hundred rows, fewer than 2000."""
    env = gym.make("CartPole-v1")
    algorithm = jl.algorithms.build("bc", env.observation_space, env.action_space)
    module = algorithm.learner.init(jax.random.key(0)).modules[algorithm.module_id]
    return record_episodes(algorithm.explore, module, "CartPole-v1", 20, seed=0)


@pytest.mark.parametrize("name", sorted(OFFLINE))
def test_offline_defaults_step_on_a_dataset_smaller_than_their_batch(name, small_dataset):
    rows = small_dataset.num_steps
    learner = jl.algorithms.build(name, *small_dataset.spaces()).learner
    assert rows < learner.recipe["config"]["train_batch_size"] == 2000  # RLlib's default
    with pytest.warns(SmallDatasetWarning, match=rf"holds {rows} rows, fewer than {name}'s"):
        trainer = jl.OfflineTrainer(learner, small_dataset)
    try:
        stats = trainer.step()
    finally:
        trainer.close()
    assert stats["env_steps"] == rows  # one update on every row


@pytest.mark.parametrize("name", sorted(ONLINE))
def test_the_command_lines_defaults_build_every_online_algorithm(name):
    # Without a preset the library's defaults meet the command line's 8 envs.
    for preset in ("auto", "none"):
        settings = run_settings(TrainOptions(algorithm=name, env=ONLINE[name], preset=preset))
        algorithm = build(settings)
        assert algorithm.rollout_steps(settings.num_envs) > 0


def test_train_bc_on_a_small_dataset_says_so_in_one_line(small_dataset, tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "run"
    save_dataset(small_dataset, data)
    rows = small_dataset.num_steps
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(NO_CACHE_VARIABLE, "1")
        argv = ["train", "bc", "--dataset", str(data), "--preset", "none", "--out", str(out)]
        assert main([*argv, "--max-steps", "1", "--no-progress"]) == 0
    err = capsys.readouterr().err
    notice = [line for line in err.splitlines() if "notice" in line]
    assert notice == [
        f"jaxlearner train: notice: the dataset holds {rows} rows, fewer than bc's "
        f"train_batch_size (2000): each update trains on all {rows} (--config "
        "train_batch_size=N to choose fewer)"
    ], err
