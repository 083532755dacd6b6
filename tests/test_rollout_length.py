"""What a longer rollout compiles: nothing more, whatever ``train_batch_size`` is.

One environment of 4,096 steps (RL Zoo's rows with ``n_envs: 1``) used to compile for minutes:
the rollout's extras were stacked with ``jnp.stack`` of ``T`` device arrays, a concatenation of
``T`` operands compiled once per extra, whose compile time grows faster than ``T``. The tests
read which programs compile and how large they are, never how long they take.
"""

import gymnasium as gym
import jax
from helpers import CompileCounter

import jaxlearner as jl
from jaxlearner.training.env_runner import EnvRunner
from jaxlearner.training.rollout import experience_shapes

ACROBOT = gym.make("Acrobot-v1")
NORMALIZED = {"norm_obs": True, "norm_reward": True, "num_envs_per_env_runner": 1}


def ppo(train_batch_size):
    config = {**NORMALIZED, "train_batch_size": train_batch_size, "minibatch_size": 16}
    return jl.algorithms.build("ppo", ACROBOT.observation_space, ACROBOT.action_space, config)


def test_a_longer_rollout_compiles_only_its_key_split():
    algorithm = ppo(32)
    module = algorithm.learner.init(jax.random.key(0)).modules["default_policy"]
    runner = EnvRunner("Acrobot-v1", num_envs=1, seed=0)
    runner.sample(algorithm.explore, module, 8, jax.random.key(1))  # the act compiles here
    with CompileCounter() as compiled:
        rollout = runner.sample(algorithm.explore, module, 300, jax.random.key(2))
    runner.close()
    assert rollout.extras["logp"].shape == (300, 1)
    # The key split takes its count as a static argument; it is the same small program.
    assert {name for name, _ in compiled.events} <= {"jit(_split_key_data)"}, compiled.events


def lowered_lines(function, *args):
    return len(jax.jit(function).lower(*args).as_text().splitlines())


def test_the_postprocess_and_the_update_are_programs_of_one_size_for_any_batch():
    # jax.random.permutation sorts in rounds, ceil(3 ln(n) / ln(2^32)) of them: 1 round up to
    # 1,625 rows, 2 up to 2.6 million; 2,048 and 65,536 rows take the same 2.
    sizes = []
    for steps in (2048, 65536):
        algorithm = ppo(steps)
        learner = algorithm.learner
        state = learner.init(jax.random.key(0))
        module = state.modules["default_policy"]
        runner = EnvRunner("Acrobot-v1", num_envs=1, seed=0)
        experience = experience_shapes(algorithm.explore, module, runner.observations, steps)
        runner.close()
        batch = jax.eval_shape(algorithm.postprocess, module, experience)
        update = learner.update_fn
        counted = {"default_policy": jax.ShapeDtypeStruct((), "int32")}
        sizes.append(
            (
                lowered_lines(algorithm.postprocess, module, experience),
                lowered_lines(update, state, {"default_policy": batch}, counted),
            )
        )
    assert sizes[0] == sizes[1], sizes
