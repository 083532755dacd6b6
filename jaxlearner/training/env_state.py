"""Environment state as JSON: the plain-data attributes of an env (and its wrappers).

The runners (:class:`~jaxlearner.training.env_runner.EnvRunner` and the
multi-agent runner) save their environments' state in a checkpoint's JSON
metadata so a resumed run continues exactly: numbers, strings, numpy arrays
and numpy random generators are captured; anything else (a physics engine's
handle, a renderer) is not, and such envs restart from their reset.

Example:
  >>> import gymnasium as gym
  >>> env = gym.make("CartPole-v1").unwrapped
  >>> _ = env.reset(seed=0)
  >>> saved = plain_attributes(env)
  >>> _ = env.step(0)
  >>> set_plain_attributes(env, saved)   # back to the state after the reset
"""

from __future__ import annotations

from typing import Any

import numpy as np


def plain_attributes(obj: Any) -> dict[str, Any]:
    """``obj``'s attributes that are plain data, JSON-encoded."""
    captured = {}
    for name, value in vars(obj).items():
        if isinstance(value, np.random.Generator):
            captured[name] = {"__generator__": value.bit_generator.state}
        elif value is None or isinstance(value, bool | int | float | str):
            captured[name] = {"__value__": value}
        elif isinstance(value, np.ndarray | np.number | np.bool_) and value.dtype != object:
            captured[name] = encode_array(value)
    return captured


def set_plain_attributes(obj: Any, attributes: dict[str, Any]) -> None:
    """Sets on ``obj`` the attributes :func:`plain_attributes` encoded (generators in place)."""
    for name, encoded in attributes.items():
        if "__generator__" in encoded:
            current = vars(obj).get(name)
            if not isinstance(current, np.random.Generator):
                current = np.random.Generator(np.random.PCG64())
                setattr(obj, name, current)
            current.bit_generator.state = encoded["__generator__"]
        elif "__value__" in encoded:
            setattr(obj, name, encoded["__value__"])
        else:
            value = decode_array(encoded)
            setattr(obj, name, value[()] if encoded.get("scalar") else value)


def encode_array(array: Any) -> dict[str, Any]:
    """An array (or scalar) as JSON: its values, dtype and shape."""
    array = np.asarray(array)
    return {
        "__array__": array.ravel().tolist(),
        "dtype": str(array.dtype),
        "shape": list(array.shape),
        "scalar": array.ndim == 0,
    }


def decode_array(encoded: dict[str, Any]) -> np.ndarray:
    """The array :func:`encode_array` encoded."""
    return np.asarray(encoded["__array__"], encoded["dtype"]).reshape(encoded["shape"])
