"""AnakinTrainer: the Trainer's step / eval / run / save / restore over compiled Anakin blocks."""

import jax
import numpy as np
import pytest

import jaxlearner as jl
from jaxlearner import anakin
from jaxlearner.anakin.trainer import AnakinCounters

PPO = {"train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1, "hidden_sizes": (8,)}
DQN = {
    "train_batch_size": 16,
    "hidden_sizes": (8,),
    "rollout_fragment_length": 4,
    "num_steps_sampled_before_learning_starts": 32,
    "replay_buffer_capacity": 256,
}


def _trainer(name="ppo", config=PPO, **kwargs):
    env = anakin.envs.make("CartPole-v1")
    algorithm = jl.algorithms.build(name, env.observation_space, env.action_space, config)
    return anakin.AnakinTrainer(algorithm, env, num_envs=4, progress=False, **kwargs)


def test_a_step_runs_its_block_of_iterations_and_records_one_row():
    trainer = _trainer(iterations_per_step=3)
    assert trainer.env_steps_per_iteration == 3 * 64
    rows = trainer.run(
        [jl.MaxEnvSteps(3 * 3 * 64)], steps_per_eval=2 * 3 * 64, evaluate_at_end=True
    )
    assert rows == trainer.history and len(rows) == 3
    assert [r["iteration"] for r in rows] == [3, 6, 9]
    assert [r["env_steps"] for r in rows] == [192, 384, 576]
    assert ["eval/return_mean" in r for r in rows] == [False, True, True]  # at the end too
    assert trainer.counters.iteration == 9 and trainer.counters.env_steps == 576
    assert {"default_policy/total_loss", "episode_return_mean", "num_episodes"} <= set(rows[-1])
    assert sum(r["num_episodes"] for r in rows) == rows[-1]["episodes"] > 0


def test_eval_runs_whole_episodes_and_leaves_training_as_it_was():
    one, other = _trainer(), _trainer()
    one.step()
    other.step()
    results = one.eval()
    assert set(results) == {"return_mean", "return_min", "return_max", "length_mean", "episodes"}
    assert results["episodes"] == 16 and results["return_min"] <= results["return_mean"]
    assert one.eval() == results  # seeded by the iteration, not by the training key
    one.step()
    other.step()
    same = jax.tree.map(np.array_equal, one.state.learner.modules, other.state.learner.modules)
    assert all(jax.tree.leaves(same))


def test_recent_episodes_are_counted_over_whole_iterations():
    counters = AnakinCounters()
    counters.count(0.0, float("nan"), float("nan"))
    assert counters.episode_stats() == {} and counters.episodes == 0
    counters.count(60.0, 10.0, 20.0)
    counters.count(50.0, 30.0, 40.0)
    assert counters.episode_stats() == pytest.approx(
        {"episode_return_mean": (600 + 1500) / 110, "episode_len_mean": (1200 + 2000) / 110}
    )
    counters.count(100.0, 5.0, 5.0)  # 100 episodes alone: older iterations drop out
    assert counters.recent == [[500.0, 500.0, 100.0]] and counters.episodes == 210


@pytest.mark.parametrize(("name", "config"), [("ppo", PPO), ("dqn", DQN)], ids=["ppo", "dqn"])
def test_a_restored_run_continues_exactly_as_the_straight_run(name, config, tmp_path):
    straight = _trainer(name, config, iterations_per_step=2)
    straight.step()
    straight.step()
    with jl.CheckpointManager(tmp_path / "run") as checkpoint:
        assert straight.save(checkpoint) == 4
        checkpoint.wait_until_finished()
        saved_history = list(straight.history)
        straight.step()  # the straight run goes on; the saved step is read back below
        straight.step()
        resumed = _trainer(name, config, iterations_per_step=2, seed=7)  # state all restored
        resumed.restore(checkpoint)
    assert resumed.counters.iteration == 4 and resumed.history == saved_history
    resumed.step()
    resumed.step()
    timing = ("env_steps_per_s", "time_this_iter_s", "time_compile_s", "time_total_s")

    def without_timing(rows):
        return [{k: v for k, v in r.items() if k not in timing} for r in rows]

    assert without_timing(resumed.history) == without_timing(straight.history)
    assert all(map(np.array_equal, _arrays(resumed.state), _arrays(straight.state)))


def _arrays(state):
    """The state's leaves as plain arrays (typed keys as their data)."""
    typed = jax.dtypes.prng_key
    return [
        np.asarray(jax.random.key_data(x) if jax.numpy.issubdtype(x.dtype, typed) else x)
        for x in jax.tree.leaves(state)
    ]


def test_a_step_of_another_shape_is_refused(tmp_path):
    trainer = _trainer()
    trainer.step()
    with jl.CheckpointManager(tmp_path / "run") as checkpoint:
        trainer.save(checkpoint)
        checkpoint.wait_until_finished()
        env = anakin.envs.make("CartPole-v1")
        algorithm = jl.algorithms.build("ppo", env.observation_space, env.action_space, PPO)
        other = anakin.AnakinTrainer(algorithm, env, num_envs=8, progress=False)
        with pytest.raises(
            ValueError, match=r"state\.env_states\.\S+ is float32\[4\]; this run's is float32\[8\]"
        ):
            other.restore(checkpoint)


def test_bad_arguments_are_refused_before_compiling():
    with pytest.raises(ValueError, match="iterations_per_step must be a positive int; got 0"):
        _trainer(iterations_per_step=0)
    with pytest.raises(ValueError, match="eval_episodes must be a positive int"):
        _trainer(eval_episodes=0)
    with pytest.raises(KeyError, match="Unknown environment id 'CartPole-v0'"):
        env = anakin.envs.make("CartPole-v1")
        algorithm = jl.algorithms.build("ppo", env.observation_space, env.action_space, PPO)
        anakin.AnakinTrainer(algorithm, "CartPole-v0")
