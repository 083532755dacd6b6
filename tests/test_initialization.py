"""A learner's initial state is built by a few compiled programs, not one per param shape.

Run eagerly, each zeros-like of an Adam moment and each copy of a target-network leaf
compiled a program of its own for its shape: 16 small compilations for DQN's 256x256
dueling network, seconds of a cold ``jaxlearner train`` on 2 cores.
"""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import CompileCounter, maybe_jit, tree_equal

import jaxlearner as jl
from jaxlearner.core.additional_updates import copy_tree

SPACES = (gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(2))


def dqn_learner(hidden_sizes):
    config = jl.algorithms.DQNConfig(hidden_sizes=hidden_sizes)
    return jl.algorithms.dqn(*SPACES, config)


def test_init_compiles_as_many_programs_for_four_layers_as_for_two():
    # Sizes no other test uses, so no program of these shapes is compiled already.
    with CompileCounter() as two:
        jax.block_until_ready(dqn_learner((37, 41)).init(jax.random.key(0)))
    with CompileCounter() as four:
        jax.block_until_ready(dqn_learner((43, 47, 53, 59)).init(jax.random.key(0)))
    names = {name for name, _ in four.events}
    assert not names & {"jit(broadcast_in_dim)", "jit(copy)", "jit(zeros_like)"}, four.events
    assert four.count <= two.count, (two.events, four.events)


def test_the_initial_target_network_equals_the_params_in_buffers_of_its_own():
    module = dqn_learner((16, 16)).init(jax.random.key(1)).modules["default_policy"]
    target = module.extra["target_params"]
    assert tree_equal(target, module.params)
    pointers = {leaf.unsafe_buffer_pointer() for leaf in jax.tree.leaves(module.params)}
    assert not pointers & {leaf.unsafe_buffer_pointer() for leaf in jax.tree.leaves(target)}


@pytest.mark.parametrize("jit", [True, False])
def test_copy_tree_copies_every_leaf(jit):
    tree = {"w": jnp.arange(6.0).reshape(2, 3), "n": jnp.asarray(3, jnp.int32)}
    copy = maybe_jit(copy_tree, jit)(tree)
    assert tree_equal(copy, tree)
