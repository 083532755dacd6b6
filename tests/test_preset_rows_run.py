"""Every preset row runs: two iterations of its algorithm on its real environment.

``test_presets.py`` builds each row from its environment's spaces; this steps the environment
too, so a row whose wrappers, observation layout, normalization or replay settings do not fit
the environment fails here in seconds rather than an hour into a run. Each row keeps its config
as written but for the sizes that only set how long an iteration takes (the rollout, the
minibatch, the replay buffer and its warm-up), so that both iterations update. A row whose
environment needs an extra that is not installed is skipped, naming the extra.
"""

import dataclasses
import math

import gymnasium
import jax
import pytest

import jaxlearner as jl
from jaxlearner import anakin
from jaxlearner.algorithms.builtin import algorithm_recipe
from jaxlearner.algorithms.presets import PRESETS
from jaxlearner.algorithms.presets.preset import ANY_ATARI, ANY_MINATAR
from jaxlearner.training.atari import make_env
from jaxlearner.training.offline.datasets import record_episodes

GAMES = {ANY_ATARI: "ALE/Pong-v5", ANY_MINATAR: "gymnax:Breakout-MinAtar"}
"""The game each pattern row runs on."""
OFFLINE_ENV = "CartPole-v1"


def quick_sizes(row, num_envs):
    """The row's sizes for a two-iteration run in which both iterations update."""
    config = row.config
    fields = {
        field.name for field in dataclasses.fields(algorithm_recipe(row.algorithm).config_type)
    }
    if "rollout_fragment_length" in fields and "minibatch_size" in fields:  # APPO's rows
        return {"train_batch_size": num_envs * config.get("rollout_fragment_length", 50)}
    if "minibatch_size" in fields:  # minibatch epochs on each rollout: PPO's, PQN's
        steps = num_envs * 8
        return {"train_batch_size": steps, "minibatch_size": min(config["minibatch_size"], steps)}
    if "replay_buffer_capacity" in fields:  # the off-policy algorithms' rows
        batch = min(config.get("train_batch_size", 32), 32)
        return {
            "num_steps_sampled_before_learning_starts": 0,
            "train_batch_size": batch,
            "replay_buffer_capacity": 1000,
            "rollout_fragment_length": min(config.get("rollout_fragment_length", 1), 16),
        }
    return {"train_batch_size": min(config["train_batch_size"], 64)}  # offline: dataset rows


def spaces_or_skip(env_id):
    """The environment's spaces, or a skip naming the missing extra."""
    if env_id.startswith("gymnax:"):
        pytest.importorskip("gymnax", reason="the gymnax extra is not installed")
        env = anakin.envs.make(env_id)
        return env.observation_space, env.action_space
    try:
        env = make_env(env_id)
    except (gymnasium.error.DependencyNotInstalled, ImportError) as error:
        pytest.skip(f"{env_id} needs an extra that is not installed: {error}")
    spaces = env.observation_space, env.action_space
    env.close()
    return spaces


def learned(history):
    """The finite losses of the history's last row (an update ran in it)."""
    last = history[-1]
    losses = {k: v for k, v in last.items() if k.endswith("total_loss")}
    assert losses and all(math.isfinite(v) for v in losses.values()), last
    return losses


def row_params():
    params = []
    for row in PRESETS:
        pixels = row.env_id in (ANY_ATARI, ANY_MINATAR)
        # Convolutions run slower at -O0 than they compile faster (tests/conftest.py).
        marks = [pytest.mark.full_optimization] if pixels else []
        params.append(pytest.param(row, id=row.name, marks=marks))
    return params


@pytest.mark.parametrize("row", row_params())
def test_every_row_runs_two_iterations_on_its_environment(row):
    offline = row.algorithm in ("bc", "marwil")
    env_id = OFFLINE_ENV if offline else GAMES.get(row.env_id, row.env_id)
    observation_space, action_space = spaces_or_skip(env_id)
    num_envs = min(row.num_envs, 16)
    config = {**row.config, **quick_sizes(row, num_envs)}
    if "num_envs_per_env_runner" in config:
        config["num_envs_per_env_runner"] = num_envs
    recipe = algorithm_recipe(row.algorithm)
    algorithm = recipe.build(observation_space, action_space, recipe.config_type(**config))
    if offline:
        module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
        dataset = record_episodes(algorithm.explore, module, env_id, 4, num_envs=2, seed=1)
        trainer = jl.OfflineTrainer(algorithm, dataset, eval_episodes=1, progress=False)
    elif env_id.startswith("gymnax:"):
        trainer = anakin.AnakinTrainer(algorithm, env_id, num_envs=num_envs, progress=False)
    else:
        trainer = jl.Trainer(algorithm, env_id, num_envs=num_envs, progress=False)
    try:
        for _ in range(2):
            trainer.step()
        assert trainer.counters.iteration == 2
        learned(trainer.history)
    finally:
        trainer.close()
