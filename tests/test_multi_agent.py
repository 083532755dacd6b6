"""Multi-agent PPO on PettingZoo parallel envs: mapping, runner, trainer, checkpoints, learning."""

from __future__ import annotations

import functools
import logging
from typing import ClassVar

import gymnasium as gym
import jax
import numpy as np
import pytest
from helpers import ListWriter, assert_same_stats, interrupted_and_resumed, tree_equal
from pettingzoo import ParallelEnv
from pettingzoo.test import parallel_api_test

import jaxlearner as jl
from jaxlearner.algorithms.multi_agent_ppo import multi_agent_ppo, policies_of
from jaxlearner.training.multi_agent.env import GridSpread, make_parallel_envs
from jaxlearner.training.multi_agent.runner import MultiAgentEnvRunner
from jaxlearner.training.multi_agent.trainer import (
    MultiAgentTrainer,
    agent_groups,
    load_policy,
    policy_spaces,
)

AGENTS = ["agent_0", "agent_1"]
INDEPENDENT = {"agent_0": "p0", "agent_1": "p1"}
SMALL = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 2, "hidden_sizes": (16,)}


def small_trainer(mapping=INDEPENDENT, config=SMALL, seed=0, **options):
    spaces = policy_spaces(GridSpread, mapping, options.get("env_config"))
    learner = multi_agent_ppo(spaces, config)
    return MultiAgentTrainer(learner, GridSpread, mapping, num_envs=2, seed=seed, **options)


def random_policy(modules, obs, key):
    """Uniform GridSpread actions for every policy's agents."""
    keys = jax.random.split(key, len(obs))
    return {
        m: (jax.random.randint(k, obs[m].shape[:1], 0, 5), {})
        for k, m in zip(keys, sorted(obs), strict=True)
    }


# GridSpread


def test_grid_spread_passes_pettingzoo_parallel_api_test():
    parallel_api_test(GridSpread(), num_cycles=60)
    parallel_api_test(GridSpread(n_agents=3, size=6, agent_indicator=True), num_cycles=60)


def test_grid_spread_rewards_and_observations_by_hand():
    env = GridSpread(size=5, collision_penalty=0.5)
    env.reset(seed=0)
    env._landmarks = np.array([[0, 0], [4, 4]])
    env._positions = np.array([[1, 0], [1, 1]])
    # agent_0 moves left onto landmark (0, 0); agent_1 moves down onto (1, 0): no collision.
    obs, rewards, terminated, truncated, _ = env.step({"agent_0": 1, "agent_1": 3})
    # Landmark (0,0): closest agent at distance 0; landmark (4,4): agent_1 at (1,0) is 3+4=7
    # away, agent_0 at (0,0) 8: min 7. team = -(0 + 7) / 2 / (5 - 1) = -0.875.
    assert rewards == {"agent_0": -0.875, "agent_1": -0.875}
    assert terminated == {"agent_0": False, "agent_1": False}
    assert truncated == {"agent_0": False, "agent_1": False}
    # agent_0 at (0,0): own (0,0); landmarks (0,0), (4,4); other (1,0); all / 4.
    np.testing.assert_allclose(obs["agent_0"], [0, 0, 0, 0, 1, 1, 0.25, 0])
    # agent_0 stays, agent_1 moves left onto it: both lose the collision penalty.
    _, rewards, *_ = env.step({"agent_0": 0, "agent_1": 1})
    assert rewards == {"agent_0": -1.5, "agent_1": -1.5}  # -(0 + 8) / 2 / 4 - 0.5


def test_grid_spread_truncates_after_max_cycles_and_indicates_agents():
    env = GridSpread(max_cycles=3, agent_indicator=True)
    obs, _ = env.reset(seed=1)
    np.testing.assert_array_equal(obs["agent_1"][-2:], [0, 1])
    for _ in range(2):
        *_, truncated, _ = env.step({"agent_0": 0, "agent_1": 0})
        assert not any(truncated.values()) and env.agents == AGENTS
    *_, truncated, _ = env.step({"agent_0": 0, "agent_1": 0})
    assert truncated == {"agent_0": True, "agent_1": True} and env.agents == []


def test_grid_spread_and_env_factories_refuse_bad_input():
    with pytest.raises(ValueError, match="n_agents must be an int >= 1; got 0"):
        GridSpread(n_agents=0)
    with pytest.raises(ValueError, match="size 2 gives 4 cells"):
        GridSpread(n_agents=3, size=2)
    with pytest.raises(TypeError, match="pass its class|new pettingzoo.ParallelEnv per call"):
        make_parallel_envs(GridSpread(), 2)
    env = GridSpread()
    with pytest.raises(TypeError, match="same instance twice"):
        make_parallel_envs(lambda: env, 2)
    with pytest.raises(TypeError, match="Expected a pettingzoo.ParallelEnv; got Discrete"):
        make_parallel_envs(lambda: gym.spaces.Discrete(2), 1)


# Policy mapping


def test_agent_groups_from_a_function_or_a_dict():
    assert agent_groups(AGENTS, lambda agent: "shared") == {"shared": AGENTS}
    assert agent_groups(AGENTS, INDEPENDENT, ("p0", "p1")) == {
        "p0": ["agent_0"],
        "p1": ["agent_1"],
    }


@pytest.mark.parametrize(
    ("mapping", "error", "message"),
    [
        (
            {"agent_0": "p0", "agent_1": "p1", "agent_7": "p0"},
            KeyError,
            r"unknown agent id\(s\) \['agent_7'\] and leaves out \[\]; the env's agents are "
            r"\['agent_0', 'agent_1'\]",
        ),
        ({"agent_0": "p0"}, KeyError, r"leaves out \['agent_1'\]"),
        (
            lambda agent: "p9",
            ValueError,
            r"maps agent 'agent_0' to 'p9'.*valid policy ids: one of \['p0', 'p1'\]",
        ),
        ({"agent_0": 0, "agent_1": "p1"}, ValueError, "maps agent 'agent_0' to 0"),
        (
            lambda agent: {"agent_0": "p0"}[agent],
            ValueError,
            "raised KeyError: 'agent_1' for agent 'agent_1'",
        ),
        ("p0", TypeError, "must be a function agent_id -> policy_id or a dict; got str"),
    ],
)
def test_agent_groups_name_what_is_wrong(mapping, error, message):
    with pytest.raises(error, match=message):
        agent_groups(AGENTS, mapping, ("p0", "p1"))


def _no_compilation(monkeypatch):
    """Fails the test if the trainer initialises the learner (compiles) or makes its envs
    before refusing its input."""

    def refuse(*args, **kwargs):
        raise AssertionError("initialised before the input was checked")

    monkeypatch.setattr(jl.Learner, "init", refuse)
    monkeypatch.setattr(MultiAgentEnvRunner, "__init__", refuse)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"policy_mapping_fn": {"agent_0": "p0", "agent_1": "p1", "ghost": "p1"}},
            KeyError,
            r"unknown agent id\(s\) \['ghost'\].*the env's agents are \['agent_0', 'agent_1'\]",
        ),
        (
            {"policy_mapping_fn": lambda agent: "main"},
            ValueError,
            r"maps agent 'agent_0' to 'main'.*valid policy ids: one of \['p0', 'p1'\]",
        ),
        (
            {"policies_to_train": {"p2"}},
            ValueError,
            r"unknown policy id\(s\) \['p2'\]; policies: \['p0', 'p1'\]",
        ),
        (
            {"policy_mapping_fn": lambda agent: "p0", "policies_to_train": {"p1"}},
            ValueError,
            r"policies_to_train names \['p1'\], to which no agent maps; the mapped policies "
            r"are \['p0'\]",
        ),
        (
            {"env_config": {"agent_indicator": True}},
            ValueError,
            r"Agent 'agent_0' has spaces \(Box\(-1.0, 1.0, \(10,\), float32\).*policy 'p0' was "
            r"built for \(Box\(-1.0, 1.0, \(8,\), float32\)",
        ),
        ({"num_envs": 3}, ValueError, "train_batch_size 64 does not split over 3 environments"),
        ({"eval_episodes": 0}, ValueError, "eval_episodes must be a positive int; got 0"),
    ],
)
def test_bad_input_is_refused_before_anything_compiles(monkeypatch, options, error, message):
    learner = multi_agent_ppo(policy_spaces(GridSpread, INDEPENDENT), SMALL)
    options = {"policy_mapping_fn": INDEPENDENT, "num_envs": 2, **options}
    _no_compilation(monkeypatch)
    with pytest.raises(error, match=message):
        MultiAgentTrainer(learner, GridSpread, **options)


def test_too_few_rows_for_a_minibatch_is_refused_before_compiling(monkeypatch):
    learner = multi_agent_ppo(policy_spaces(GridSpread, INDEPENDENT), SMALL)
    # 64 env steps give each one-agent policy 64 rows, fewer than a minibatch of 128.
    learner = learner.replace(minibatch_size=128)
    _no_compilation(monkeypatch)
    with pytest.raises(ValueError, match=r"Policy 'p0' gets 64 rows.*minibatch_size=128"):
        MultiAgentTrainer(learner, GridSpread, INDEPENDENT, num_envs=2)


def test_a_learner_not_made_for_several_agents_is_refused():
    learner = jl.algorithms.ppo(gym.spaces.Box(-1, 1, (8,)), gym.spaces.Discrete(5))
    with pytest.raises(ValueError, match="not made by jl.algorithms.multi_agent_ppo"):
        MultiAgentTrainer(learner, GridSpread, lambda agent: "default_policy")


def test_recurrent_policies_are_refused_when_the_learner_is_built():
    spaces = {"p": (gym.spaces.Box(-1, 1, (8,)), gym.spaces.Discrete(5))}
    with pytest.raises(ValueError, match="feed-forward policies only; got use_lstm=True"):
        jl.algorithms.multi_agent_ppo(spaces, {"use_lstm": True, "minibatch_size": 120})


def test_policy_spaces_refuses_agents_of_one_policy_with_different_spaces():
    class Mixed(GridSpread):
        def action_space(self, agent):
            return gym.spaces.Discrete(5 if agent == "agent_0" else 4)

    assert set(policy_spaces(Mixed, INDEPENDENT)) == {"p0", "p1"}
    with pytest.raises(ValueError, match="'agent_0' and 'agent_1' share policy 'shared'"):
        policy_spaces(Mixed, lambda agent: "shared")


# The multi-module learner


def test_multi_agent_ppo_validates_policies_and_rebuilds_from_its_recipe():
    box, discrete = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)
    learner = multi_agent_ppo(
        {"a": (box, discrete), "b": (box, gym.spaces.Discrete(4))}, SMALL, policies_to_train={"a"}
    )
    assert learner.module_ids == ("a", "b") and learner.modules_to_train == {"a"}
    rebuilt = jl.learner_from_recipe(learner.recipe)
    assert rebuilt.recipe == learner.recipe and rebuilt.modules_to_train == {"a"}
    assert policies_of(rebuilt)["b"] == (box, gym.spaces.Discrete(4))
    with pytest.raises(ValueError, match="non-empty mapping"):
        multi_agent_ppo({})
    with pytest.raises(TypeError, match="Policy 'a': expected a pair"):
        multi_agent_ppo({"a": box})
    with pytest.raises(TypeError, match=r"did you mean \{'a'\}"):
        multi_agent_ppo({"a": (box, discrete)}, policies_to_train="a")
    with pytest.raises(ValueError, match="policies_to_train is empty"):
        multi_agent_ppo({"a": (box, discrete)}, policies_to_train=())


def test_each_policy_trains_with_its_own_config_and_keeps_it_in_the_recipe(tmp_path):
    # RLlib's per-module config overrides: p1 learns nothing (lr 0) on a network of its own.
    spaces = policy_spaces(GridSpread, INDEPENDENT)
    overrides = {"p1": {"lr": 0.0, "hidden_sizes": (8, 8), "entropy_coeff": 0.05}}
    learner = multi_agent_ppo(spaces, SMALL, policy_configs=overrides)
    trainer = MultiAgentTrainer(learner, GridSpread, INDEPENDENT, num_envs=2)
    kernel = lambda m: trainer.state.modules[m].params["params"]["actor"]["encoder"]["mlp"]
    assert kernel("p0")["dense_0"]["kernel"].shape == (*spaces["p0"][0].shape, 16)
    assert sorted(kernel("p1")) == ["dense_0", "dense_1"]
    before = jax.device_get(trainer.state.modules)
    stats = trainer.step()
    after = jax.device_get(trainer.state.modules)
    assert tree_equal(after["p1"].params, before["p1"].params)
    assert not tree_equal(after["p0"].params, before["p0"].params)
    assert float(after["p1"].hyperparams["entropy_coeff"]) == pytest.approx(0.05)
    assert float(after["p0"].hyperparams["entropy_coeff"]) == 0.0
    assert "p1/total_loss" in stats
    assert learner.recipe["policy_configs"] == {
        "p1": {"lr": 0.0, "hidden_sizes": [8, 8], "entropy_coeff": 0.05}
    }
    with jl.CheckpointManager(tmp_path, async_save=False) as checkpoint:
        trainer.save(checkpoint)
    restored, state = jl.restore(tmp_path)
    assert restored.recipe == learner.recipe and tree_equal(state, trainer.state)


@pytest.mark.parametrize(
    ("policy_configs", "error", "message"),
    [
        (
            {"p9": {"lr": 1.0}},
            ValueError,
            r"unknown policy id\(s\) \['p9'\]; policies: \['p0', 'p1'\]",
        ),
        (
            {"p1": {"learning_rate": 1.0}},
            ValueError,
            r"unknown PPOConfig field\(s\) \['learning_rate'\]",
        ),
        ({"p1": {"minibatch_size": 16}}, ValueError, r"changes \['minibatch_size'\], which all"),
        ({"p1": {"gamma": 2.0}}, ValueError, r"policy_configs\['p1'\]: .*gamma"),
        ({"p1": 0.1}, TypeError, r"policy_configs\['p1'\] must be a mapping"),
        ([("p1", {})], TypeError, "policy_configs must be None or a mapping"),
    ],
)
def test_bad_policy_configs_are_refused_when_the_learner_is_built(policy_configs, error, message):
    with pytest.raises(error, match=message):
        multi_agent_ppo(
            policy_spaces(GridSpread, INDEPENDENT), SMALL, policy_configs=policy_configs
        )


# The runner


def test_runner_rows_are_copy_major_and_transitions_keep_final_observations():
    groups = {"shared": AGENTS}
    runner = MultiAgentEnvRunner(GridSpread, groups, num_envs=3, env_config={"max_cycles": 5})
    first = [dict(obs) for obs in runner._obs]
    rollout = runner.sample(random_policy, {}, 12, jax.random.key(0))
    experience = rollout.experience["shared"]
    assert experience["obs"].shape == (12, 6, 8) and experience["rewards"].shape == (12, 6)
    for i in range(3):
        for j, agent in enumerate(AGENTS):
            np.testing.assert_array_equal(experience["obs"][0, 2 * i + j], first[i][agent])
    # Episodes of 5 steps: truncated at steps 4 and 9, where the next observation is the
    # final one, not the reset's.
    assert np.flatnonzero(experience["truncated"][:, 0]).tolist() == [4, 9]
    for t in range(11):
        continues = np.array_equal(experience["next_obs"][t], experience["obs"][t + 1])
        assert continues == (t not in (4, 9))
    assert experience["valid"].all() and rollout.env_steps == 36
    assert rollout.agent_steps == {"shared": 72}
    assert len(rollout.episode_returns) == 6 and rollout.episode_lengths == [5] * 6
    episode = rollout.episode_returns[0]
    np.testing.assert_allclose(episode["agent_0"], experience["rewards"][:5, 0].sum(), rtol=1e-6)


class Relay(ParallelEnv):
    """Two agents: ``early`` is done after 2 steps, ``late`` after 4; reward 1 per step."""

    metadata: ClassVar[dict] = {"name": "relay_v0"}

    def __init__(self):
        self.possible_agents = ["early", "late"]
        self.agents = []
        self._steps = 0

    def observation_space(self, agent):
        return gym.spaces.Box(0, 10, (1,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def _obs(self):
        return {a: np.array([self._steps], np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        self._steps = 0
        self.agents = list(self.possible_agents)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents)
        self._steps += 1
        live = list(self.agents)
        obs = self._obs()
        terminated = {a: (a == "early" and self._steps == 2) or self._steps == 4 for a in live}
        self.agents = [a for a in live if not terminated[a]]
        return obs, dict.fromkeys(live, 1.0), terminated, dict.fromkeys(live, False), {}


def test_runner_masks_agents_that_are_done_before_the_episode_ends():
    runner = MultiAgentEnvRunner(Relay, {"p": ["early", "late"]}, num_envs=1)

    def policy(modules, obs, key):
        return {"p": (np.zeros(obs["p"].shape[0], np.int32), {})}

    rollout = runner.sample(policy, {}, 5, jax.random.key(0))
    experience = rollout.experience["p"]
    # Columns: early, late. early is live for steps 0-1, late for 0-3; step 4 is a new episode.
    np.testing.assert_array_equal(experience["valid"][:, 0], [1, 1, 0, 0, 1])
    np.testing.assert_array_equal(experience["valid"][:, 1], [1, 1, 1, 1, 1])
    np.testing.assert_array_equal(experience["terminated"][:, 0], [0, 1, 0, 0, 0])
    np.testing.assert_array_equal(experience["terminated"][:, 1], [0, 0, 0, 1, 0])
    np.testing.assert_array_equal(experience["rewards"][:, 0], [1, 1, 0, 0, 1])
    np.testing.assert_array_equal(experience["obs"][2:4, 0, 0], [0, 0])  # zeros when not live
    assert rollout.episode_returns == [{"early": 2.0, "late": 4.0}]
    assert rollout.episode_lengths == [4] and rollout.agent_steps == {"p": 8}


# The trainer


def test_a_step_reports_metrics_per_policy_and_per_agent():
    trainer = small_trainer(config={**SMALL, "train_batch_size": 100, "minibatch_size": 50})
    stats = trainer.step()
    for policy in ("p0", "p1"):
        for name in ("total_loss", "policy_loss", "vf_loss", "entropy", "num_grad_steps"):
            assert np.isfinite(stats[f"{policy}/{name}"])
        # 2 copies x 50 steps x 1 agent = 100 rows per policy: 2 minibatches of 50, 2 epochs.
        assert stats[f"{policy}/num_grad_steps"] == 4
    assert stats["env_steps"] == 100 and stats["agent_steps"] == 200
    # As RLlib counts them: each policy its agent steps, "__all__" the env steps taken.
    assert stats["__all__/num_env_steps_trained"] == 100
    assert stats["__all__/num_agent_steps_trained"] == 200
    # 50 steps per copy of 25-step episodes in 2 copies: 4 episodes.
    assert stats["num_episodes"] == 4
    for agent in AGENTS:
        assert f"agent_episode_return_mean/{agent}" in stats
    assert stats["module_episode_return_mean/p0"] == stats["agent_episode_return_mean/agent_0"]
    assert trainer.history == [stats]
    evaluation = trainer.eval(episodes=2)
    assert evaluation["episodes"] == 2 and evaluation["length_mean"] == 25
    assert set(evaluation) >= {"return_mean", "agent_return_mean/agent_0"}
    # run: evaluations join the stats as "eval/..."; a stop condition ends it.
    ran = trainer.run(jl.RewardBound(-1e9, key="episode_return_mean"), steps_per_eval=1)
    assert len(ran) == 1 and ran[0]["iteration"] == 2 and ran[0]["eval/episodes"] == 10
    assert trainer.history[-1] == ran[0]
    # No stop condition: until a stop request (here after the first iteration).
    endless = trainer.run(on_iteration=lambda stats: trainer.request_stop())
    assert len(endless) == 1 and trainer.stop_requested


def test_a_shared_policy_trains_on_every_agents_rows():
    trainer = small_trainer(mapping=lambda agent: "shared")
    assert trainer.engine.groups == {"shared": AGENTS}
    stats = trainer.step()
    # 2 copies x 32 steps x 2 agents = 128 rows: 4 minibatches of 32, 2 epochs.
    assert stats["shared/num_grad_steps"] == 8
    assert stats["shared/num_env_steps_trained"] == 128
    assert stats["shared/num_env_steps_trained"] == 2 * stats["env_steps"]
    assert stats["shared/num_agent_steps_trained"] == 128
    assert stats["__all__/num_env_steps_trained"] == stats["env_steps"] == 64
    assert stats["num_episodes"] == 2  # one 25-step episode per copy
    assert stats["module_episode_return_mean/shared"] == np.mean(
        [stats[f"agent_episode_return_mean/{agent}"] for agent in AGENTS]
    )


def test_policies_not_trained_act_but_keep_their_state():
    trainer = small_trainer(policies_to_train={"p0"})
    assert trainer.engine.policies_to_train == ("p0",)
    assert trainer.learner.modules_to_train == {"p0"}
    assert trainer.learner.recipe["policies_to_train"] == ["p0"]
    before = jax.device_get(trainer.state.modules)
    for _ in range(2):
        stats = trainer.step()
    after = jax.device_get(trainer.state.modules)
    assert tree_equal(after["p1"], before["p1"])
    assert not tree_equal(after["p0"].params, before["p0"].params)
    assert "p0/total_loss" in stats and not any(k.startswith("p1/") for k in stats)
    assert stats["agent_episode_return_mean/agent_1"] == stats["agent_episode_return_mean/agent_0"]


def test_run_writes_evaluations_and_ends_after_a_requested_stop():
    writer = ListWriter()
    trainer = small_trainer(writers=[writer], eval_episodes=2)
    stop_at_two = lambda stats: trainer.request_stop() if stats["iteration"] == 2 else None
    ran = trainer.run(jl.MaxEnvSteps(10_000), steps_per_eval=64, on_iteration=stop_at_two)
    assert [s["iteration"] for s in ran] == [1, 2] and trainer.stop_requested
    evaluations = [(step, row) for step, row in writer.rows if "eval/return_mean" in row]
    assert [step for step, _ in evaluations] == [1, 2]
    assert evaluations[1][1]["iteration"] == 2 and evaluations[1][1]["env_steps"] == 128
    again = trainer.run(max_iterations=1)  # a new run starts afresh
    assert [s["iteration"] for s in again] == [3] and not trainer.stop_requested


def test_steps_after_the_first_compile_nothing(caplog):
    trainer = small_trainer()
    trainer.step()
    trainer.eval(episodes=2)
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        trainer.step()
        trainer.step()
        trainer.eval(episodes=2)
    compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert compiled == []


def test_a_pettingzoo_classic_env_with_discrete_observations_trains():
    from pettingzoo.classic import rps_v2

    # Rock-paper-scissors, zero-sum: 15-step episodes, Discrete(4) observations (the other's
    # last move) and Discrete(3) actions.
    mapping = {"player_0": "a", "player_1": "b"}
    config = {"train_batch_size": 30, "minibatch_size": 30, "num_epochs": 1, "hidden_sizes": (8,)}
    learner = multi_agent_ppo(policy_spaces(rps_v2.parallel_env, mapping), config)
    trainer = MultiAgentTrainer(learner, rps_v2.parallel_env, mapping, num_envs=2)
    stats = trainer.step()
    assert stats["num_episodes"] == 2 and stats["episode_len_mean"] == 15
    assert stats["episode_return_mean"] == 0.0  # the two players' returns cancel
    assert (
        stats["agent_episode_return_mean/player_0"] == -stats["agent_episode_return_mean/player_1"]
    )
    assert np.isfinite(stats["a/total_loss"]) and np.isfinite(stats["b/total_loss"])


# Checkpoints


def test_an_interrupted_run_resumes_exactly(tmp_path):
    make = functools.partial(small_trainer)
    interrupted, resumed = interrupted_and_resumed(make, tmp_path, steps=2)
    assert tree_equal(resumed.state, interrupted.state)
    assert resumed.counters == interrupted.counters
    assert_same_stats(interrupted.history, resumed.history)
    expected = [interrupted.step() for _ in range(2)]
    assert_same_stats(expected, [resumed.step() for _ in range(2)])
    assert tree_equal(resumed.state, interrupted.state)


def test_a_checkpoint_restores_without_the_script_and_per_policy(tmp_path):
    trainer = small_trainer(policies_to_train={"p0"})
    trainer.step()
    with jl.CheckpointManager(tmp_path, async_save=False) as checkpoint:
        trainer.save(checkpoint)
        metadata = checkpoint.metadata()
        assert metadata["modules"]["p0"]["trained"] and not metadata["modules"]["p1"]["trained"]
        assert metadata["extra"]["groups"] == {"p0": ["agent_0"], "p1": ["agent_1"]}
        learner, state = jl.restore(tmp_path)
        assert learner.recipe == trainer.learner.recipe
        assert tree_equal(state, trainer.state)
        # One saved policy into another slot of a fresh trainer (another seed, other params).
        fresh = small_trainer(seed=5)
        load_policy(fresh, checkpoint, "p0", into="p1")
        assert tree_equal(fresh.state.modules["p1"], trainer.state.modules["p0"])
        assert not tree_equal(fresh.state.modules["p0"], trainer.state.modules["p0"])
        with pytest.raises(KeyError, match=r"no policy 'p7'; policies: \['p0', 'p1'\]"):
            load_policy(fresh, checkpoint, "p7")
        # A policy of other observations (the agent indicator adds two features) does not fit.
        shared = small_trainer(mapping=lambda agent: "shared", env_config={"agent_indicator": True})
        with pytest.raises(KeyError, match=r"This learner has no policy 'p0'"):
            load_policy(shared, checkpoint, "p0")
        with pytest.raises(ValueError, match="'p0' does not fit policy 'shared'"):
            load_policy(shared, checkpoint, "p0", into="shared")
        # A whole trainer restores only into a learner of the same policies.
        with pytest.raises((KeyError, ValueError), match="p0"):
            shared.restore(checkpoint)


# Learning


LEARNING = {
    "lr": 1e-3,
    "gamma": 0.95,
    "lambda_": 0.95,
    "train_batch_size": 1000,
    "minibatch_size": 250,
    "num_epochs": 6,
    "hidden_sizes": (64, 64),
    "entropy_coeff": 0.01,
    "vf_clip_param": 100.0,
    "use_kl_loss": False,
}


def random_baseline(env_config, episodes=40):
    """The mean team return of uniformly random actions, over ``episodes`` episodes."""
    runner = MultiAgentEnvRunner(
        GridSpread, {"all": AGENTS}, num_envs=episodes, env_config=env_config, seed=123
    )
    rollout = runner.sample(random_policy, {}, 25, jax.random.key(123))
    assert len(rollout.episode_returns) == episodes
    return float(np.mean([sum(r.values()) for r in rollout.episode_returns]))


def learn(mapping, env_config, iterations):
    learner = multi_agent_ppo(policy_spaces(GridSpread, mapping, env_config), LEARNING)
    trainer = MultiAgentTrainer(
        learner, GridSpread, mapping, num_envs=8, env_config=env_config, eval_episodes=40
    )
    trainer.run(max_iterations=iterations)
    return trainer.eval()["return_mean"]


@pytest.mark.slow
def test_two_independent_policies_learn_to_cover_the_landmarks():
    baseline = random_baseline({})
    learned = learn(INDEPENDENT, {}, iterations=30)
    print(f"random {baseline:.2f}, independent PPO {learned:.2f}")
    # Random play scores about -29.6 (the mean distances and collisions of random walks); two
    # policies that each go to a landmark of their own score about -2. 30 iterations of
    # 1000 env steps reach -2.5 to -3.5 here.
    assert baseline < -25.0
    assert learned > baseline + 15.0


@pytest.mark.slow
def test_a_shared_policy_learns_to_cover_the_landmarks():
    # One policy for both agents: the agent indicator lets it send them to different
    # landmarks. It learns more slowly than two policies (they must first break symmetry):
    # about -15 after 40 iterations here, -9 after 80.
    env_config = {"agent_indicator": True}
    baseline = random_baseline(env_config)
    learned = learn(lambda agent: "shared", env_config, iterations=40)
    print(f"random {baseline:.2f}, shared-policy PPO {learned:.2f}")
    assert baseline < -25.0
    assert learned > baseline + 8.0


def test_docs_block_runs(tmp_path):
    from helpers import doc_block

    page, block = doc_block("multi-agent")  # docs/guides/multi_agent.md
    block = block.replace("tempfile.mkdtemp()", f"tempfile.mkdtemp(dir={str(tmp_path)!r})")
    namespace = {}
    exec(compile(block, f"{page.name} multi-agent", "exec"), namespace)
    exec(compile(block, f"{page.name} multi-agent", "exec"), namespace)  # twice: a new folder
    assert len(list(tmp_path.iterdir())) == 2
    trainer = namespace["trainer"]
    assert "blue/total_loss" in namespace["stats"] and "red/total_loss" not in namespace["stats"]
    assert tree_equal(trainer.state.modules["red"].params, trainer.state.modules["blue"].params)
