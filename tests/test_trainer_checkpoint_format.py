"""What each trainer's ``save`` writes beside the learner state: the checkpoint format on disk.

Checkpoints already on disk must keep restoring, so the names and structure of a
trainer's extra JSON (``"trainer"``, ``"history"``, ``"runner"``, ...) and extra
arrays (``"key"``, ``"buffer"``, ``"behaviour_params"``, ``"history"``) are held here as
literals, as the trainers wrote them before they shared their bookkeeping. The history
became arrays later (``{"keys", "length"}`` in the JSON, ``values`` and ``present`` arrays);
steps with the JSON list before it still restore (tests/test_checkpoint_fixtures.py).
"""

import json

import gymnasium as gym
import jax
import numpy as np

import jaxlearner as jl
from jaxlearner.algorithms.multi_agent_ppo import multi_agent_ppo
from jaxlearner.training.history import from_columns
from jaxlearner.training.multi_agent.env import GridSpread
from jaxlearner.training.multi_agent.trainer import MultiAgentTrainer, policy_spaces
from jaxlearner.training.offline.datasets import record_episodes

CARTPOLE = gym.make("CartPole-v1")
TINY = {"hidden_sizes": (4,)}

# The counters of jl.Trainer and jl.OfflineTrainer under "trainer", as JSON reads them back.
TRAINER_COUNTERS = {
    "iteration": "int",
    "env_steps": "int",
    "episodes": "int",
    "time_total_s": "float",
    "recent_returns": ["float"],
    "recent_lengths": ["int"],
}
RUNNER_KEYS = ["obs", "resetting", "returns", "lengths", "first", "carry", "env_state_exact"]


def structure(value):
    """JSON's shape: dicts by key, a list by its first element, anything else by type name."""
    if isinstance(value, dict):
        return {key: structure(item) for key, item in value.items()}
    if isinstance(value, list):
        return [structure(item) for item in value[:1]]
    return type(value).__name__


def saved(trainer, directory):
    """``(extra, extra_arrays)`` of the step ``trainer.save`` writes, as read back from disk."""
    with jl.CheckpointManager(directory, async_save=False) as checkpoint:
        step = trainer.save(checkpoint)
        assert step == trainer.counters.iteration
        assert checkpoint.metadata(step)["metrics"] == trainer.history[-1]
        return checkpoint.restore_extra(step)


def as_json(value):
    return json.loads(json.dumps(value))


def assert_history(extra, arrays, trainer):
    """The history as arrays: its keys and length in the JSON, one row per iteration."""
    keys = list(dict.fromkeys(key for entry in trainer.history for key in entry))
    assert extra["history"] == {"keys": keys, "length": len(trainer.history)}
    assert sorted(arrays["history"]) == ["present", "values"]
    values, present = arrays["history"]["values"], arrays["history"]["present"]
    assert values.dtype == np.float64 and present.dtype == np.bool_
    assert values.shape == present.shape == (len(trainer.history), len(keys))
    assert from_columns(keys, values, present) == trainer.history  # as they were


def assert_key(arrays):
    assert np.asarray(arrays["key"]).shape == (2,) and arrays["key"].dtype == np.uint32


def test_an_on_policy_trainer_with_policy_lag_saves_counters_history_runner_and_behaviour(
    tmp_path,
):
    config = {**TINY, "train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1}
    config.update(rollout_fragment_length=32, policy_lag=1)
    spaces = (CARTPOLE.observation_space, CARTPOLE.action_space)
    algorithm = jl.algorithms.build("appo", *spaces, config)
    trainer = jl.Trainer(algorithm, "CartPole-v1", num_envs=2, progress=False)
    trainer.step()
    trainer.step()
    extra, arrays = saved(trainer, tmp_path)
    assert list(extra) == ["trainer", "history", "runner"]
    assert structure(extra["trainer"]) == TRAINER_COUNTERS
    assert extra["trainer"]["iteration"] == 2 and extra["trainer"]["env_steps"] == 128
    assert_history(extra, arrays, trainer)
    assert list(extra["runner"]) == [*RUNNER_KEYS, "envs"]
    assert extra["runner"] == as_json(trainer.engine.runner.get_state())
    assert sorted(arrays) == ["behaviour_params", "history", "key"]
    assert_key(arrays)
    # The params of the last policy_lag + 1 iterations' starts, each like the module's params.
    params = trainer.state.modules["default_policy"].params
    assert len(arrays["behaviour_params"]) == 2
    for behaviour in arrays["behaviour_params"]:
        assert jax.tree.structure(behaviour) == jax.tree.structure(params)


def test_an_off_policy_trainer_saves_its_replay_feed(tmp_path):
    config = {**TINY, "num_steps_sampled_before_learning_starts": 0}
    config.update(replay_buffer_capacity=100, train_batch_size=8)
    learner = jl.algorithms.dqn(CARTPOLE.observation_space, CARTPOLE.action_space, config)
    trainer = jl.Trainer(learner, "CartPole-v1", num_envs=2, progress=False)
    trainer.step()
    extra, arrays = saved(trainer, tmp_path)
    assert list(extra) == ["trainer", "history", "runner", "updates_due", "uncounted_env_steps"]
    assert structure(extra["trainer"]) == {
        **TRAINER_COUNTERS,
        "recent_returns": [],  # no episode ends in the first iteration's 2 x 4 steps
        "recent_lengths": [],
    }
    assert structure({k: extra[k] for k in ("updates_due", "uncounted_env_steps")}) == {
        "updates_due": "float",
        "uncounted_env_steps": "int",
    }
    assert_history(extra, arrays, trainer)
    assert extra["runner"] == as_json(trainer.engine.runner.get_state())
    assert sorted(arrays) == ["buffer", "history", "key"]
    assert_key(arrays)
    assert sorted(arrays["buffer"]) == ["position", "size", "storage"]


def test_a_multi_agent_trainer_saves_its_counters_under_their_own_name(tmp_path):
    mapping = {"agent_0": "p0", "agent_1": "p1"}
    config = {**TINY, "train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1}
    learner = multi_agent_ppo(policy_spaces(GridSpread, mapping), config)
    trainer = MultiAgentTrainer(learner, GridSpread, mapping, num_envs=2, progress=False)
    trainer.step()
    extra, arrays = saved(trainer, tmp_path)
    assert list(extra) == ["multi_agent_trainer", "history", "runner", "groups"]
    assert structure(extra["multi_agent_trainer"]) == {
        "iteration": "int",
        "env_steps": "int",
        "agent_steps": {"p0": "int", "p1": "int"},
        "episodes": "int",
        "time_total_s": "float",
        "recent_returns": [{"agent_0": "float", "agent_1": "float"}],
        "recent_lengths": ["int"],
    }
    assert_history(extra, arrays, trainer)
    assert list(extra["runner"]) == ["obs", "returns", "seen", "lengths", "envs"]
    assert extra["runner"] == as_json(trainer.engine.runner.get_state())
    assert extra["groups"] == {"p0": ["agent_0"], "p1": ["agent_1"]}
    assert sorted(arrays) == ["history", "key"]
    assert_key(arrays)


def test_an_offline_trainer_saves_its_seed_and_dataset_description(tmp_path):
    spaces = (CARTPOLE.observation_space, CARTPOLE.action_space)
    algorithm = jl.algorithms.build("bc", *spaces, {**TINY, "train_batch_size": 8})
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    dataset = record_episodes(algorithm.explore, module, "CartPole-v1", 2, num_envs=2, seed=1)
    trainer = jl.OfflineTrainer(algorithm, dataset, eval_episodes=1, seed=3, progress=False)
    trainer.step()
    extra, arrays = saved(trainer, tmp_path)
    assert list(extra) == ["trainer", "history", "seed", "dataset"]
    assert structure(extra["trainer"]) == {
        **TRAINER_COUNTERS,
        "recent_returns": [],
        "recent_lengths": [],
    }
    assert_history(extra, arrays, trainer)
    assert extra["seed"] == 3
    assert extra["dataset"] == {
        "num_steps": dataset.num_steps,
        "num_episodes": 2,
        "env": "CartPole-v1",
        "source": as_json(dict(dataset.source)),
    }
    assert sorted(arrays) == ["history", "key"]
    assert_key(arrays)
