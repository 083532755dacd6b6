"""rl8's trainer parity: env configs per step and per run (domain randomization) and the
memory statistics each step reports."""

import gymnasium as gym
import pytest

import jaxlearner as jl

PENDULUM = gym.make("Pendulum-v1")
TINY_PPO = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1, "hidden_sizes": (8,)}


def _ppo_trainer(env="Pendulum-v1", **kwargs):
    learner = jl.algorithms.ppo(PENDULUM.observation_space, PENDULUM.action_space, TINY_PPO)
    return jl.Trainer(learner, env, num_envs=2, progress=False, **kwargs)


def _gravity(trainer):
    return [env.unwrapped.g for env in trainer.engine.runner.envs.envs]


def test_a_step_with_a_new_env_config_rebuilds_the_envs_without_recompiling():
    trainer = _ppo_trainer(env_config={"g": 10.0})
    trainer.step()
    assert _gravity(trainer) == [10.0, 10.0]
    stats = trainer.step(env_config={"g": 2.0})
    assert _gravity(trainer) == [2.0, 2.0]
    assert stats["time_compile_s"] == 0.0  # neither the policy nor the update compiled again
    runner = trainer.engine.runner
    trainer.step(env_config={"g": 2.0})  # the same config: the same envs, episodes go on
    assert trainer.engine.runner is runner
    # Evaluation follows the training envs' config unless told otherwise.
    trainer.eval(episodes=2)
    trainer.eval(env_config={"g": 1.0}, episodes=2)


def test_run_follows_an_env_config_schedule_and_an_eval_env_config():
    trainer = _ppo_trainer()
    seen, evaluated = [], []

    def gravity(counters):
        return {"g": 5.0 + counters.iteration}

    def record(stats):
        seen.append(_gravity(trainer)[0])

    def eval_gravity(counters):
        evaluated.append(counters.iteration)
        return {"g": 3.0}

    trainer.run(
        [jl.MaxIterations(3)],
        on_iteration=record,
        env_config=gravity,
        eval_env_config=eval_gravity,
        eval_every_iterations=2,
    )
    assert seen == [5.0, 6.0, 7.0]  # read before each step, from the counters so far
    assert evaluated == [2]
    trainer.step()  # after run, the schedule is gone: the envs stay as they are
    assert _gravity(trainer)[0] == 7.0


def test_envs_whose_spaces_change_are_refused_and_the_old_ones_kept():
    cartpole = gym.make("CartPole-v1")
    learner = jl.algorithms.ppo(cartpole.observation_space, cartpole.action_space, TINY_PPO)

    def make(kind="cartpole"):
        return gym.make({"cartpole": "CartPole-v1", "acrobot": "Acrobot-v1"}[kind])

    trainer = jl.Trainer(learner, make, num_envs=2, progress=False)
    trainer.step()
    with pytest.raises(ValueError, match="observation_space"):
        trainer.step(env_config={"kind": "acrobot"})
    trainer.step()  # still on CartPole
    with pytest.raises(TypeError, match="env_config must be a mapping"):
        trainer.run([jl.MaxIterations(1)], env_config=3)
    with pytest.raises(TypeError, match="must return a mapping"):
        trainer.step(env_config=lambda counters: "acrobot")


def test_each_step_reports_memory_and_the_replay_size():
    learner = jl.algorithms.sac(
        PENDULUM.observation_space,
        PENDULUM.action_space,
        {
            "num_steps_sampled_before_learning_starts": 16,
            "hidden_sizes": (8,),
            "train_batch_size": 8,
        },
    )
    trainer = jl.Trainer(learner, "Pendulum-v1", num_envs=2, progress=False)
    sizes = [trainer.step()["memory/replay_size"] for _ in range(3)]
    rows = trainer.engine.runner.num_envs * trainer.engine.algorithm.config.rollout_fragment_length
    assert sizes == [rows, 2 * rows, 3 * rows]
    stats = trainer.step()
    assert stats["memory/host_rss_bytes"] > 10e6  # a JAX process holds tens of MB
    assert "memory/replay_size" not in _ppo_trainer().step()  # no replay buffer
