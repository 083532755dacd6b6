"""Environment state as JSON: the plain-data attributes of an env (and its wrappers).

The runners (:class:`~jaxlearner.training.env_runner.EnvRunner` and the
multi-agent runner) save their environments' state in a checkpoint's JSON
metadata so a resumed run continues exactly: numbers, strings, numpy arrays,
deques of numpy arrays (``FrameStackObservation``'s frames) and numpy random
generators are captured; anything else (a physics engine's handle, a renderer)
is not, and such envs restart from their reset.

Example:
  >>> import gymnasium as gym
  >>> env = gym.make("CartPole-v1").unwrapped
  >>> _ = env.reset(seed=0)
  >>> saved = plain_attributes(env)
  >>> _ = env.step(0)
  >>> set_plain_attributes(env, saved)   # back to the state after the reset
"""

from __future__ import annotations

from collections import deque
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
        elif _plain_array(value):
            captured[name] = encode_array(value)
        elif isinstance(value, deque) and all(_plain_array(item) for item in value):
            captured[name] = {"__deque__": [encode_array(x) for x in value], "maxlen": value.maxlen}
    return captured


def _plain_array(value: Any) -> bool:
    return isinstance(value, np.ndarray | np.number | np.bool_) and value.dtype != object


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
        elif "__deque__" in encoded:
            items = [decode_array(x) for x in encoded["__deque__"]]
            setattr(obj, name, deque(items, maxlen=encoded["maxlen"]))
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


def capture_layers(envs: list[list[Any]]) -> list[list[dict[str, Any]]]:
    """:func:`plain_attributes` of every layer (wrappers, outermost first, then the base env)
    of every sub-environment."""
    return [[plain_attributes(layer) for layer in layers] for layers in envs]


def restore_layers(envs: list[list[Any]], saved: list[list[dict[str, Any]]] | None) -> None:
    """Sets what :func:`capture_layers` captured back (nothing when ``saved`` is empty).

    Raises:
      ValueError: when a sub-environment's layers are not the captured ones.
    """
    if not saved:
        return
    for layers, saved_layers in zip(envs, saved, strict=True):
        if len(layers) != len(saved_layers):
            raise ValueError(
                f"The saved environment had {len(saved_layers)} wrapper layers; this one has "
                f"{len(layers)} ({[type(layer).__name__ for layer in layers]})."
            )
        for layer, attributes in zip(layers, saved_layers, strict=True):
            set_plain_attributes(layer, attributes)
