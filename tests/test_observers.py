"""The experience seam: observers' state, updated from collected experience by every driver."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import maybe_jit, mse_loss, regression_batch, tree_equal

import jaxlearner as jl
from jaxlearner import anakin, envs
from jaxlearner.algorithms.multi_agent_ppo import multi_agent_ppo
from jaxlearner.training.multi_agent.env import GridSpread
from jaxlearner.training.multi_agent.trainer import MultiAgentTrainer, policy_spaces
from jaxlearner.training.offline.datasets import record_episodes

CARTPOLE = gym.make("CartPole-v1")
TINY_PPO = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1, "hidden_sizes": (8,)}
TINY_DQN = {
    "num_steps_sampled_before_learning_starts": 32,
    "rollout_fragment_length": 4,
    "train_batch_size": 16,
    "hidden_sizes": (8,),
}


def step_counter(name="observed_steps"):
    """A test-only observer: valid steps observed and calls made, as int32 counts."""

    def init(params):
        del params
        return {"steps": jnp.zeros((), jnp.int32), "calls": jnp.zeros((), jnp.int32)}

    def update(state, experience):
        steps = experience["valid"].sum(dtype=jnp.int32)
        return {"steps": state["steps"] + steps, "calls": state["calls"] + 1}

    return jl.Observer(name, init, update)


def obs_moments():
    """A test-only observer: count, sum and sum of squares of valid CartPole observations."""

    def init(params):
        del params
        return {"count": jnp.zeros(()), "sum": jnp.zeros(4), "squares": jnp.zeros(4)}

    def update(state, experience):
        valid = experience["valid"].astype(jnp.float32)[..., None]  # [T, N, 1]
        obs = experience["obs"]
        return {
            "count": state["count"] + valid.sum(),
            "sum": state["sum"] + (obs * valid).sum((0, 1)),
            "squares": state["squares"] + (obs**2 * valid).sum((0, 1)),
        }

    return jl.Observer("moments", init, update)


def with_observers(algorithm, *observers):
    """The algorithm around a learner whose module also has ``observers``."""
    learner = algorithm.learner
    spec = learner.specs[algorithm.module_id]
    spec = dataclasses.replace(spec, observers=observers)
    return algorithm.with_learner(learner.replace(modules={algorithm.module_id: spec}))


def counted(state, module_id="default_policy", name="observed_steps"):
    counts = jax.device_get(state.modules[module_id].extra[name])
    return int(counts["steps"]), int(counts["calls"])


# The pure functions


@pytest.mark.parametrize("use_jit", [True, False])
def test_make_observe_folds_each_batch_into_its_own_state(use_jit):
    observe = maybe_jit(jl.make_observe(step_counter(), obs_moments()), use_jit)
    module = jl.ModuleState(
        params={},
        opt_states={},
        extra={
            "observed_steps": step_counter().init({}),
            "moments": obs_moments().init({}),
            "other": jnp.ones(2),
        },
        hyperparams={},
        grad_steps=jnp.int32(0),
        env_steps=jnp.int32(0),
    )
    rng = np.random.default_rng(0)
    batches = [rng.normal(size=(5, 3, 4)).astype(np.float32) for _ in range(2)]
    valids = [rng.random((5, 3)) < 0.7 for _ in range(2)]
    for obs, valid in zip(batches, valids, strict=True):
        module = observe(module, {"obs": obs, "valid": valid})
    # The reference: numpy over the valid rows of both batches, concatenated.
    rows = np.concatenate([obs[valid] for obs, valid in zip(batches, valids, strict=True)])
    moments = module.extra["moments"]
    assert int(module.extra["observed_steps"]["steps"]) == len(rows)
    assert int(module.extra["observed_steps"]["calls"]) == 2
    np.testing.assert_allclose(moments["sum"], rows.sum(0), rtol=1e-5)
    np.testing.assert_allclose(moments["squares"], (rows**2).sum(0), rtol=1e-5)
    np.testing.assert_array_equal(module.extra["other"], np.ones(2))


def test_make_observe_without_observers_is_the_identity():
    module = object()
    assert jl.make_observe()(module, {}) is module


def test_observers_vmap_over_seeds():
    observe = jax.vmap(jl.make_observe(obs_moments()))
    init = obs_moments().init({})
    module = jl.ModuleState({}, {}, {"moments": init}, {}, jnp.int32(0), jnp.int32(0))
    modules = jax.tree.map(lambda x: jnp.stack([x, x]), module)
    obs = np.stack([np.zeros((2, 2, 4)), np.ones((2, 2, 4))]).astype(np.float32)
    out = observe(modules, {"obs": obs, "valid": np.ones((2, 2, 2), bool)})
    np.testing.assert_array_equal(out.extra["moments"]["sum"], [[0.0] * 4, [4.0] * 4])


# Bad input


def test_bad_observers_are_refused_with_the_reason():
    with pytest.raises(TypeError, match="non-empty string"):
        jl.Observer("", lambda p: 0, lambda s, e: s)
    with pytest.raises(TypeError, match="update must be callable"):
        jl.Observer("x", lambda p: 0, "not a function")
    model = jax.tree_util.Partial  # any object with init/apply will not do: use a real model
    del model
    import flax.linen as nn

    with pytest.raises(TypeError, match="expected jl.Observer"):
        jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1), observers=[lambda: None])
    with pytest.raises(TypeError, match="sequence of jl.Observer"):
        jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1), observers=step_counter())
    with pytest.raises(ValueError, match="used twice"):
        jl.ModuleSpec(
            nn.Dense(1), mse_loss, optax.sgd(0.1), observers=[step_counter(), step_counter()]
        )
    clash = jl.ModuleSpec(
        nn.Dense(1),
        mse_loss,
        optax.sgd(0.1),
        additional_updates=[jl.polyak_update(0.5)],
        observers=[step_counter("target_params")],
    )
    learner = jl.Learner({"m": clash}, sample_batch={"m": regression_batch(8)})
    with pytest.raises(
        ValueError, match="would overwrite the module's extra state 'target_params'"
    ):
        learner.init(jax.random.key(0))


def test_learner_observe_refuses_an_unknown_module_and_skips_modules_without_observers():
    import flax.linen as nn

    plain = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1))
    learner = jl.Learner({"m": plain}, sample_batch={"m": regression_batch(8)})
    state = learner.init(jax.random.key(0))
    with pytest.raises(KeyError, match="unknown module"):
        learner.observe(state, {"other": {"valid": np.ones((2, 2), bool)}})
    assert learner.observe(state, {"m": {"valid": np.ones((2, 2), bool)}}) is state


# The learner's observe: jitted once, the same on 8 devices as on 1


def moments_learner(devices=None, traces=None):
    import flax.linen as nn

    observer = obs_moments()
    if traces is not None:

        def update(state, experience):
            traces.append(1)
            return obs_moments().update(state, experience)

        observer = jl.Observer("moments", observer.init, update)
    spec = jl.ModuleSpec(nn.Dense(1), mse_loss, optax.sgd(0.1), observers=[observer])
    return jl.Learner({"m": spec}, sample_batch={"m": regression_batch(8)}, devices=devices)


def test_learner_observe_compiles_once_and_keeps_the_rest_of_the_state():
    traces = []
    learner = moments_learner(traces=traces)
    state = learner.init(jax.random.key(0))
    rng = np.random.default_rng(1)
    for _ in range(3):
        experience = {
            "obs": rng.normal(size=(4, 8, 4)).astype(np.float32),
            "valid": np.ones((4, 8), bool),
        }
        new = learner.observe(state, {"m": experience})
        assert tree_equal(new.modules["m"].params, state.modules["m"].params)
        state = new
    assert len(traces) == 1
    assert float(state.modules["m"].extra["moments"]["count"]) == 96.0


def test_eight_devices_observe_what_one_device_observes():
    assert len(jax.devices()) == 8
    rng = np.random.default_rng(2)
    experiences = [
        {
            "obs": rng.normal(size=(4, 8, 4)).astype(np.float32),
            "valid": rng.random((4, 8)) < 0.8,
        }
        for _ in range(3)
    ]
    results = []
    for devices in (None, "all"):
        learner = moments_learner(devices)
        state = learner.init(jax.random.key(0))
        for experience in experiences:
            state = learner.observe(state, {"m": experience})
        results.append(jax.device_get(state.modules["m"].extra["moments"]))
    one, many = results
    for name in ("count", "sum", "squares"):
        np.testing.assert_allclose(many[name], one[name], rtol=1e-6)


# Every driver observes every collected step, once per collected batch


def test_the_trainer_observes_each_rollout_before_postprocessing_it():
    algorithm = jl.algorithms.build(
        "ppo", CARTPOLE.observation_space, CARTPOLE.action_space, TINY_PPO
    )
    algorithm = with_observers(algorithm, step_counter())
    seen, original = [], algorithm.postprocess

    def postprocess(module, experience):
        jax.debug.callback(seen.append, module.extra["observed_steps"]["steps"])
        return original(module, experience)

    algorithm = dataclasses.replace(algorithm, postprocess=postprocess)
    trainer = jl.Trainer(algorithm, "CartPole-v1", num_envs=4, progress=False)
    for _ in range(3):
        trainer.step()
    jax.effects_barrier()
    assert counted(trainer.state) == (trainer.counters.env_steps, 3)
    # postprocess saw the statistics with its own rollout already in them
    assert [int(s) for s in seen] == [64, 128, 192]


def test_the_replay_trainer_observes_steps_before_learning_starts_too():
    algorithm = jl.algorithms.build(
        "dqn", CARTPOLE.observation_space, CARTPOLE.action_space, TINY_DQN
    )
    trainer = jl.Trainer(with_observers(algorithm, step_counter()), "CartPole-v1", num_envs=2)
    # 8 env steps an iteration; learning starts at 32: the first 3 iterations only collect.
    stats = [trainer.step() for _ in range(6)]
    assert ["default_policy/total_loss" in s for s in stats] == [False] * 3 + [True] * 3
    assert counted(trainer.state) == (trainer.counters.env_steps, 6)
    assert trainer.counters.env_steps == 48


def test_a_trainer_checkpoint_restores_the_observed_state_bit_exactly(tmp_path):
    algorithm = jl.algorithms.build(
        "ppo", CARTPOLE.observation_space, CARTPOLE.action_space, TINY_PPO
    )
    algorithm = with_observers(algorithm, step_counter(), obs_moments())
    trainer = jl.Trainer(algorithm, "CartPole-v1", num_envs=4, progress=False)
    trainer.step()
    trainer.step()
    checkpoint = jl.CheckpointManager(tmp_path / "ckpt")
    trainer.save(checkpoint)
    checkpoint.wait_until_finished()
    other = jl.Trainer(algorithm, "CartPole-v1", num_envs=4, progress=False, seed=5)
    other.restore(checkpoint)
    assert tree_equal(
        other.state.modules["default_policy"].extra, trainer.state.modules["default_policy"].extra
    )
    checkpoint.close()


@pytest.mark.parametrize(
    ("name", "config", "iterations"),
    [("ppo", TINY_PPO, 3), ("dqn", TINY_DQN, 3)],
)
def test_anakin_observes_every_iteration_and_the_warm_up(name, config, iterations):
    env = envs.make("CartPole-v1")
    algorithm = jl.algorithms.build(name, env.observation_space, env.action_space, config)
    algorithm = with_observers(algorithm, step_counter())
    run = anakin.AnakinConfig(num_envs=4, num_iterations=iterations, evaluate=False)
    state, _ = jax.jit(anakin.make_train(algorithm, env, run))(jax.random.key(0))
    steps, calls = counted(state.learner)
    assert steps == int(state.env_steps)
    per_iteration = algorithm.rollout_steps(4) * 4
    assert calls == steps // per_iteration


def test_anakin_keeps_one_set_of_statistics_per_seed():
    env = envs.make("CartPole-v1")
    algorithm = jl.algorithms.build("ppo", env.observation_space, env.action_space, TINY_PPO)
    algorithm = with_observers(algorithm, obs_moments())
    run = anakin.AnakinConfig(num_envs=4, num_iterations=2, evaluate=False)
    train = jax.jit(jax.vmap(anakin.make_train(algorithm, env, run)))
    state, _ = train(jax.random.split(jax.random.key(0), 3))
    moments = jax.device_get(state.learner.modules["default_policy"].extra["moments"])
    assert moments["count"].tolist() == [128.0] * 3
    assert len({tuple(row) for row in moments["sum"].round(4).tolist()}) == 3  # seeds differ


def test_the_multi_agent_trainer_observes_each_trained_policys_batch():
    mapping = {"agent_0": "p0", "agent_1": "p1"}
    config = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1, "hidden_sizes": (8,)}
    learner = multi_agent_ppo(policy_spaces(GridSpread, mapping), config)
    specs = {
        m: dataclasses.replace(s, observers=[step_counter()]) for m, s in learner.specs.items()
    }
    learner = learner.replace(modules=specs)
    trainer = MultiAgentTrainer(learner, GridSpread, mapping, num_envs=2, progress=False)
    trainer.step()
    trainer.step()
    for policy in ("p0", "p1"):
        assert counted(trainer.state, policy) == (trainer.counters.agent_steps[policy], 2)


def test_the_offline_trainer_observes_its_dataset_once():
    algorithm = jl.algorithms.build(
        "bc",
        CARTPOLE.observation_space,
        CARTPOLE.action_space,
        {"hidden_sizes": (8,), "train_batch_size": 16},
    )
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    dataset = record_episodes(algorithm.explore, module, "CartPole-v1", 3, num_envs=3, seed=1)
    algorithm = with_observers(algorithm, step_counter(), obs_moments())
    trainer = jl.OfflineTrainer(algorithm, dataset, eval_episodes=1, progress=False)
    assert counted(trainer.state) == (dataset.num_steps, 1)
    sums = trainer.state.modules["default_policy"].extra["moments"]["sum"]
    np.testing.assert_allclose(sums, dataset.columns["obs"].sum(0), rtol=1e-5)
    trainer.step()
    assert counted(trainer.state) == (dataset.num_steps, 1)
