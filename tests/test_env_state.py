"""Environment state as JSON (jaxlearner.training.env_state)."""

import json

import gymnasium as gym
import numpy as np

from jaxlearner.training.env_state import (
    decode_array,
    encode_array,
    plain_attributes,
    set_plain_attributes,
)


def test_arrays_and_scalars_round_trip_through_json():
    for value in (np.arange(6, dtype=np.int16).reshape(2, 3), np.float32(1.5), np.array(True)):
        encoded = json.loads(json.dumps(encode_array(value)))
        decoded = decode_array(encoded)
        assert decoded.dtype == np.asarray(value).dtype
        np.testing.assert_array_equal(decoded, value)


def test_an_env_continues_exactly_from_its_saved_attributes():
    env = gym.make("CartPole-v1").unwrapped
    env.reset(seed=3)
    saved = json.loads(json.dumps(plain_attributes(env)))
    first = [env.step(1)[0] for _ in range(5)] + [env.reset()[0]]
    set_plain_attributes(env, saved)
    again = [env.step(1)[0] for _ in range(5)] + [env.reset()[0]]  # reset draws from np_random
    np.testing.assert_array_equal(np.stack(first), np.stack(again))
    assert "__generator__" in saved["_np_random"]  # gymnasium keeps its generator there


def test_stacked_frames_continue_exactly_from_their_saved_attributes():
    """FrameStackObservation keeps its frames in a deque: captured, a stacked env continues
    with the same stacks (without it the first stack after a restore mixes two episodes)."""
    env = gym.wrappers.FrameStackObservation(gym.make("CartPole-v1"), 4)
    env.reset(seed=3)
    env.step(0)
    layers = [env, env.env, env.env.env, env.unwrapped]
    saved = json.loads(json.dumps([plain_attributes(layer) for layer in layers]))
    assert "__deque__" in saved[0]["obs_queue"]
    first = [env.step(1)[0] for _ in range(3)]
    env.reset(seed=9)
    for layer, attributes in zip(layers, saved, strict=True):
        set_plain_attributes(layer, attributes)
    again = [env.step(1)[0] for _ in range(3)]
    np.testing.assert_array_equal(np.stack(first), np.stack(again))
