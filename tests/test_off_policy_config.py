"""The config fields DQN, SAC and TD3 share: declared by each class, checked by one function."""

import dataclasses
import typing

import pytest

from jaxlearner.algorithms.dqn import DQNConfig
from jaxlearner.algorithms.replay.off_policy_config import OffPolicyFields, check_off_policy_config
from jaxlearner.algorithms.sac import SACConfig
from jaxlearner.algorithms.td3 import TD3Config

SHARED = sorted(typing.get_type_hints(OffPolicyFields))


@pytest.mark.parametrize("cls", [DQNConfig, SACConfig, TD3Config])
def test_each_config_declares_every_shared_field_flat(cls):
    # Flat RLlib names on each class (saved recipes and key=value overrides use them).
    names = {field.name for field in dataclasses.fields(cls)}
    assert len(SHARED) == 18
    assert set(SHARED) <= names


BAD_SHARED_VALUES = [
    ("gamma", 1.5, r"gamma must be a number in \[0, 1\]; got 1.5"),
    ("tau", 0.0, r"tau must lie in \(0, 1\]; got 0.0"),
    ("tau", "fast", "'{owner}.tau' must be a number, an optax schedule"),
    ("train_batch_size", 0, "train_batch_size must be a positive int; got 0"),
    ("replay_buffer_capacity", 2.5, "replay_buffer_capacity must be a positive int"),
    ("rollout_fragment_length", True, "rollout_fragment_length must be a positive int"),
    ("n_step", -1, "n_step must be a positive int"),
    ("num_steps_sampled_before_learning_starts", -1, "must be a non-negative int; got -1"),
    ("training_intensity", 0, "training_intensity must be a positive number or None; got 0"),
    ("grad_clip", float("inf"), "grad_clip must be a positive number or None"),
    ("td_error_loss_fn", "l1", r"td_error_loss_fn must be one of \('huber', 'mse'\)"),
    ("grad_clip_by", "max", r"grad_clip_by must be one of \('value', 'norm', 'global_norm'\)"),
    ("hidden_sizes", (64, 0), "hidden_sizes must be a sequence of positive ints"),
    ("hidden_sizes", "64", "hidden_sizes must be a sequence of positive ints"),
    ("activation", "bogus", r"activation must be one of \['elu'"),
    ("prioritized_replay", 1, "prioritized_replay must be True or False; got 1"),
    ("prioritized_replay_alpha", 1.5, r"prioritized_replay_alpha must be a number in \[0, 1\]"),
    ("prioritized_replay_beta", -0.1, r"prioritized_replay_beta must be a number in \[0, 1\]"),
    ("prioritized_replay_eps", -1e-6, "prioritized_replay_eps must be a number >= 0"),
]


@pytest.mark.parametrize("cls", [DQNConfig, SACConfig, TD3Config])
@pytest.mark.parametrize(("name", "value", "message"), BAD_SHARED_VALUES)
def test_both_configs_refuse_a_bad_shared_field_with_their_own_name(cls, name, value, message):
    with pytest.raises((ValueError, TypeError), match=message.replace("{owner}", cls.__name__)):
        cls(**{name: value})
    # The message starts with the class and the field, however it is raised.
    with pytest.raises((ValueError, TypeError), match=rf"{cls.__name__}\.{name}"):
        cls(**{name: value})


@pytest.mark.parametrize("cls", [DQNConfig, SACConfig, TD3Config])
def test_the_buffer_must_hold_a_batch(cls):
    message = r"replay_buffer_capacity \(8\) is smaller than train_batch_size \(16\)"
    with pytest.raises(ValueError, match=rf"{cls.__name__}\.{message}"):
        cls(replay_buffer_capacity=8, train_batch_size=16)


@pytest.mark.parametrize("cls", [DQNConfig, SACConfig, TD3Config])
def test_valid_shared_values_pass_and_are_normalised(cls):
    config = cls(
        tau=[[0, 1.0], [100, 0.1]],
        hidden_sizes=[32, 32],
        training_intensity=None,
        grad_clip=None,
        num_steps_sampled_before_learning_starts=0,
    )
    assert config.tau == ((0, 1.0), (100, 0.1))
    assert config.hidden_sizes == (32, 32)
    check_off_policy_config(cls.__name__, config)


def test_dqn_checks_its_own_head_layers():
    with pytest.raises(ValueError, match="DQNConfig.head_hidden_sizes must be a sequence"):
        DQNConfig(head_hidden_sizes=(0,))
