"""Atari through ale-py, with the DeepMind preprocessing from gymnasium's own wrappers.

The one module where ale-py enters. Every ``ALE/...`` id that jaxlearner makes an
environment of (the :func:`~jaxlearner.Trainer`, ``jaxlearner train``, ``eval`` and
``record``) is built by :func:`make_atari`:

* ``gymnasium.make(id, frameskip=1)``: ALE v5 with its own frame skip off (the wrapper
  below skips frames); v5's sticky actions (``repeat_action_probability=0.25``) and its
  108,000-frame episode limit are kept;
* ``AtariPreprocessing``: up to 30 no-op actions after each reset, the action repeated on 4
  frames with the last two max-pooled, 84x84 grayscale, uint8;
* :class:`FireReset` in games that wait for FIRE to start (Breakout launches each ball on
  FIRE): FIRE is pressed after each reset and each lost life, as SB3's ``AtariWrapper`` does
  (its ``FireResetEnv``); otherwise a policy that never chose FIRE would stand still until the
  frame limit;
* ``FrameStackObservation`` of 4 (an episode's first observation padded with its reset
  frame), moved to the last axis: observations ``[84, 84, 4]`` uint8, as the CNN encoder
  and the replay's frame store (``replay_frame_stack=4``) take them.

The environment plays whole games, so episode returns are game scores. What DeepMind's
agents learn from is set apart by :class:`AtariSignals`, which the
:class:`~jaxlearner.training.env_runner.EnvRunner` applies to the rollout's columns only:
rewards clipped to their sign, and a lost life ends the episode for learning (the step is
``terminated``: no bootstrapping past it) while the game goes on.

Example:
  >>> env = make_atari("ALE/Pong-v5")                    # doctest: +SKIP
  >>> env.observation_space.shape                        # doctest: +SKIP
  (84, 84, 4)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

NAMESPACE = "ALE/"
"""The prefix of the ids :func:`make_atari` builds."""

INSTALL = 'pip install "jaxlearner[atari]"'


def is_atari(env: Any) -> bool:
    """Whether ``env`` is an ``ALE/...`` id (the Atari games of ale-py)."""
    return isinstance(env, str) and env.startswith(NAMESPACE)


def register_ale(env_id: str) -> None:
    """Registers ale-py's environments with gymnasium.

    Raises:
      ImportError: ``ALE/Pong-v5 needs ale-py, which is not installed: pip install
        "jaxlearner[atari]"`` (or opencv, which gymnasium's ``AtariPreprocessing`` needs).
    """
    try:
        import ale_py
    except ImportError:
        raise ImportError(f"{env_id} needs ale-py, which is not installed: {INSTALL}") from None
    try:
        import cv2  # noqa: F401  (gymnasium's AtariPreprocessing resizes with it)
    except ImportError:
        raise ImportError(
            f"{env_id} needs opencv-python-headless, which is not installed: {INSTALL}"
        ) from None
    gym.register_envs(ale_py)


def make_atari(
    env_id: str,
    *,
    frame_stack: int = 4,
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: int = 84,
    fire_reset: bool = True,
    **make_kwargs: Any,
) -> gym.Env:
    """An ``ALE/...`` game with the DeepMind preprocessing (see the module docstring).

    Args:
      env_id: an ``ALE/`` id, e.g. ``"ALE/Breakout-v5"``.
      frame_stack: frames per observation, stacked on the last axis.
      noop_max: the most no-op actions after a reset.
      frame_skip: frames each action is repeated on (the last two max-pooled).
      screen_size: the observations' height and width.
      fire_reset: press FIRE after each reset and lost life (:class:`FireReset`) in games
        whose action 1 is FIRE; other games are left as they are.
      make_kwargs: passed to ``gymnasium.make`` (``render_mode``,
        ``repeat_action_probability``, ``full_action_space``, ...); not ``frameskip``.

    Returns:
      The environment; observations ``[screen_size, screen_size, frame_stack]`` uint8.

    Raises:
      ImportError: without ale-py or opencv (naming the extra).
      ValueError: for a ``frameskip`` in ``make_kwargs``.

    Example:
      >>> env = make_atari("ALE/Breakout-v5", render_mode="rgb_array")   # doctest: +SKIP
    """
    if "frameskip" in make_kwargs:
        raise ValueError(
            f"make_atari: frameskip={make_kwargs['frameskip']!r} is not taken; frames are "
            f"skipped by AtariPreprocessing (frame_skip={frame_skip}), so ALE's own is 1."
        )
    register_ale(env_id)
    env = gym.make(env_id, frameskip=1, **make_kwargs)
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size
    )
    if fire_reset and FireReset.applies(env):
        env = FireReset(env)
    env = gym.wrappers.FrameStackObservation(env, frame_stack)
    space = gym.spaces.Box(0, 255, (screen_size, screen_size, frame_stack), np.uint8)
    return gym.wrappers.TransformObservation(env, _channels_last, space)


def make_env(env_id: str, **config: Any) -> gym.Env:
    """``gymnasium.make(env_id, **config)``, or :func:`make_atari` for an ``ALE/`` id."""
    return make_atari(env_id, **config) if is_atari(env_id) else gym.make(env_id, **config)


def _channels_last(obs: np.ndarray) -> np.ndarray:
    """``[S, H, W]`` stacked frames as ``[H, W, S]`` (a module function: it is pickled)."""
    return np.moveaxis(obs, 0, -1)


FIRE = 1
"""ALE's FIRE action, where a game has one (its action 1)."""


class FireReset(gym.Wrapper):
    """Presses FIRE after each reset and each lost life, in games that wait for it.

    Breakout (and other games) start a ball or a life only on FIRE; SB3's ``AtariWrapper``
    presses it on reset (``FireResetEnv``) and, since its episodes end at each lost life,
    after every life. Here the game plays on after a lost life, so the step that loses one is
    followed by FIRE within the same step (its reward added; the lost life stays in the
    step's ``info["lives"]`` for :class:`AtariSignals`). The reset's FIRE reward is dropped,
    as SB3 drops it. The FIRE steps pass through the frame skip below, like any action.

    FIRE is pressed for ``presses`` steps: with ALE v5's sticky actions each frame repeats
    the previous action with probability 0.25, so one step of 4 frames misses FIRE with
    probability 0.25^4 (0.4%), and a game that misses it waits for FIRE until its time limit
    (27,000 steps; 3% of always-NOOP Breakout games); two steps miss it with 0.25^8.

    Example:
      >>> env = FireReset(make_atari("ALE/Breakout-v5", fire_reset=False))  # doctest: +SKIP
    """

    def __init__(self, env: gym.Env, presses: int = 2) -> None:
        if not self.applies(env):
            raise ValueError(
                f"FireReset needs a game whose action {FIRE} is FIRE; "
                f"{env.spec.id if env.spec else env} has {self._meanings(env)}."
            )
        if isinstance(presses, bool) or not isinstance(presses, int) or presses < 1:
            raise ValueError(f"FireReset: presses must be an int >= 1; got {presses!r}.")
        super().__init__(env)
        self._lives = 0
        self._presses = presses

    @staticmethod
    def _meanings(env: gym.Env) -> list[str]:
        meanings = getattr(env.unwrapped, "get_action_meanings", None)
        return list(meanings()) if callable(meanings) else []

    @classmethod
    def applies(cls, env: gym.Env) -> bool:
        """Whether the game's action 1 is FIRE (and it has at least three actions, as SB3
        checks)."""
        meanings = cls._meanings(env)
        return len(meanings) >= 3 and meanings[FIRE] == "FIRE"

    def _fire(self) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """FIRE for ``presses`` steps (fewer if the game ends); their rewards summed."""
        total = 0.0
        for _ in range(self._presses):
            obs, reward, terminated, truncated, info = self.env.step(FIRE)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """The game's reset, then FIRE (reset again should FIRE end it)."""
        obs, info = self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self._fire()
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        self._lives = info.get("lives", 0)
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """The action, then FIRE when it lost a life and the game goes on."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = info.get("lives", self._lives)
        if lives < self._lives and not (terminated or truncated):
            obs, more, terminated, truncated, fired = self._fire()
            reward += more
            info = {**fired, "lives": min(lives, fired.get("lives", lives))}
        self._lives = info.get("lives", lives)
        return obs, reward, terminated, truncated, info


class AtariSignals:
    """What the agent learns from, set apart from the game's own episode (numpy, host side).

    Rewards are clipped to their sign; a step that loses a life (ale-py's ``lives`` in the
    step's info went down) is ``terminated`` for learning. The environment is not reset: the
    episode, its return and its length stay the game's.

    Example:
      >>> signals = AtariSignals()
      >>> signals.reset({"lives": np.array([3, 3])})
      >>> rewards, terminated = signals(
      ...     np.array([4.0, -2.0]), np.zeros(2, bool), np.zeros(2, bool),
      ...     {"lives": np.array([3, 2])})
      >>> rewards.tolist(), terminated.tolist()
      ([1.0, -1.0], [False, True])
    """

    def __init__(self) -> None:
        self._lives: np.ndarray | None = None

    def reset(self, infos: Mapping[str, Any]) -> None:
        """Starts counting lives from a reset's infos (unknown without ``lives``)."""
        lives = infos.get("lives")
        self._lives = None if lives is None else np.array(lives)

    def __call__(
        self,
        rewards: np.ndarray,
        terminated: np.ndarray,
        done: np.ndarray,
        infos: Mapping[str, Any],
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(rewards, terminated)`` to learn from, for one step of ``N`` environments.

        Args:
          rewards: ``[N]`` the game's rewards.
          terminated: ``[N]`` the game's terminations.
          done: ``[N]`` the game's episode ends (terminated or truncated): after one, the
            infos are the next episode's reset's, so no life counts as lost.
          infos: the vector env's step infos.
        """
        lives = infos.get("lives")
        lost = np.zeros_like(terminated)
        if lives is not None and self._lives is not None:
            lost = (np.asarray(lives) < self._lives) & ~done
        self._lives = None if lives is None else np.array(lives)
        return np.sign(rewards), terminated | lost
