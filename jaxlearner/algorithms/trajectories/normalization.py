"""Observation and reward normalization: running statistics that learn from experience.

SB3's ``VecNormalize`` (and RLlib's ``MeanStdFilter`` connector) as state in the learner,
on the experience seam (:class:`~jaxlearner.Observer`): the statistics are arrays in
``ModuleState.extra``, so checkpoints, devices and vmapped seeds carry them with no further
code, and they change only when a driver observes collected experience. Evaluation,
``jaxlearner eval``, ``record`` and ``--video`` act with the restored state and observe
nothing, so they use the statistics frozen.

* **Observations** (``norm_obs``): a running mean and variance per feature over every
  valid observed step (:func:`merge_moments`, Chan et al.'s parallel update, so one batch
  of ``n`` rows gives what ``n`` batches of one give), and the model sees
  ``clip((obs - mean) / sqrt(var + 1e-8), -clip_obs, clip_obs)``.
* **Rewards** (``norm_reward``): each environment's running discounted return
  ``R_t = gamma * R_{t-1} + r_t`` (reset to 0 after an episode ends, as SB3 does), its
  variance tracked as above, and the learner sees ``clip(r / sqrt(var + 1e-8),
  -clip_reward, clip_reward)``: a scale, no shift. The running return is one number per
  environment, so the statistics are built for ``num_envs_per_env_runner`` environments
  (RLlib's name), and experience from another number of environments is refused.

On a mesh the observers see the global batch, so the sums and counts are global: N devices
give what one device gives (moments merge by sums and counts, never by averaging means).

Example: the statistics of a ``Box(4)`` observation and a scalar reward, for 2 envs.
  >>> import gymnasium, jax, jax.numpy as jnp
  >>> from jaxlearner.algorithms.trajectories.normalization import Normalization
  >>> norm = Normalization(observations=True, rewards=True, gamma=0.99, num_envs=2)
  >>> observers = norm.observers(gymnasium.spaces.Box(-1.0, 1.0, (4,)))
  >>> extra = {o.name: o.init({}) for o in observers}
  >>> experience = {"obs": jnp.arange(24.0).reshape(3, 2, 4), "rewards": jnp.ones((3, 2)),
  ...               "terminated": jnp.zeros((3, 2), bool), "truncated": jnp.zeros((3, 2), bool),
  ...               "valid": jnp.ones((3, 2), bool)}
  >>> extra = {o.name: o.update(extra[o.name], experience) for o in observers}
  >>> extra["obs_moments"].mean.tolist(), float(extra["obs_moments"].count)
  ([10.0, 11.0, 12.0, 13.0], 6.0)
  >>> norm.observation(extra, jnp.full((4,), 10.0)).shape
  (4,)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
from flax import struct

from jaxlearner.core.observers import Observer
from jaxlearner.types import Batch, Experience, PyTree

OBS_MOMENTS = "obs_moments"
"""The name of the observation statistics in ``ModuleState.extra``."""
RETURN_MOMENTS = "return_moments"
"""The name of the reward scale's statistics in ``ModuleState.extra``."""
NORMALIZED_OBS = "normalized_obs"
"""The act functions' extra holding the observation as they normalized it (on-policy)."""
EPSILON = 1e-8
"""Added to the variance before its square root, as SB3's ``VecNormalize``."""


@struct.dataclass
class RunningMoments:
    """Running mean and variance of a feature vector, merged batch by batch.

    Attributes:
      mean: ``[*shape]`` float32.
      var: ``[*shape]`` float32, the population variance (1 before any data).
      count: float32 scalar, the number of rows merged.
    """

    mean: jax.Array
    var: jax.Array
    count: jax.Array


@struct.dataclass
class ReturnMoments:
    """What reward scaling keeps: each environment's running discounted return and the
    moments of those returns.

    Attributes:
      returns: ``[num_envs]`` float32, ``R`` after the last observed step of each env.
      moments: :class:`RunningMoments` of the returns (scalar ``mean``/``var``).
    """

    returns: jax.Array
    moments: RunningMoments


def initial_moments(shape: tuple[int, ...]) -> RunningMoments:
    """Moments before any data: mean 0, variance 1 (normalizing is then the identity up to
    ``EPSILON``), count 0."""
    return RunningMoments(
        jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.zeros((), jnp.float32)
    )


def merge_moments(old: RunningMoments, x: jax.Array, valid: jax.Array) -> RunningMoments:
    """``old`` merged with the valid rows of ``x`` (Chan et al.'s parallel update); pure.

    Args:
      old: the moments so far, ``mean``/``var`` of shape ``[*shape]``.
      x: ``[*lead, *shape]`` values (cast to float32).
      valid: ``[*lead]`` bool or 0/1 weights; rows with 0 are left out.

    Returns:
      The moments of the old rows and the new ones together; ``old`` itself when no row
      is valid. With ``old.count == 0`` they are the batch's own mean and population
      variance, so merging batches one by one equals numpy's over their concatenation.
    """
    lead = valid.ndim
    axes = tuple(range(lead))
    w = valid.astype(jnp.float32).reshape(valid.shape + (1,) * (x.ndim - lead))
    x = x.astype(jnp.float32)
    n = w.sum()
    safe_n = jnp.maximum(n, 1.0)
    mean = (x * w).sum(axes) / safe_n
    var = (((x - mean) ** 2) * w).sum(axes) / safe_n
    total = old.count + n
    safe_total = jnp.maximum(total, 1.0)
    delta = mean - old.mean
    new_mean = old.mean + delta * n / safe_total
    m2 = old.var * old.count + var * n + delta**2 * old.count * n / safe_total
    new_var = jnp.where(total > 0, m2 / safe_total, old.var)
    return RunningMoments(new_mean, new_var, total)


def discounted_returns(
    returns: jax.Array, experience: Experience, gamma: float
) -> tuple[jax.Array, jax.Array]:
    """Each env's running discounted return through the ``[T, N]`` experience, as SB3's
    ``VecNormalize``: ``R_t = gamma * R_{t-1} + r_t``, then ``R = 0`` after a step that
    ends the episode (terminated or truncated); padding steps (``valid`` false) change
    nothing.

    Args:
      returns: ``[N]`` the running returns before the batch.
      experience: ``rewards``, ``terminated``, ``truncated`` and ``valid``, each ``[T, N]``.
      gamma: the discount.

    Returns:
      ``(returns [N] after the batch, R_t [T, N] at each step)``.
    """
    done = jnp.logical_or(experience["terminated"], experience["truncated"])

    def step(carry: jax.Array, inputs: tuple) -> tuple[jax.Array, jax.Array]:
        reward, ended, valid = inputs
        value = jnp.where(valid, gamma * carry + reward, carry)
        return jnp.where(valid & ended, 0.0, value), value

    inputs = (experience["rewards"].astype(jnp.float32), done, experience["valid"])
    return jax.lax.scan(step, returns.astype(jnp.float32), inputs)


@dataclasses.dataclass(frozen=True)
class Normalization:
    """What an algorithm normalizes, and the functions that do it; a static value.

    Attributes:
      observations: keep running observation moments and normalize observations.
      rewards: keep the discounted return's moments and scale rewards by its std.
      clip_obs: normalized observations are clipped to ``[-clip_obs, clip_obs]``.
      clip_reward: scaled rewards are clipped to ``[-clip_reward, clip_reward]``.
      gamma: the discount of the running return.
      num_envs: environments whose returns are kept (only with ``rewards``).

    Example:
      >>> norm = Normalization(observations=True)
      >>> [o.name for o in norm.observers(gymnasium.spaces.Box(-1.0, 1.0, (3,)))]
      ['obs_moments']
    """

    observations: bool = False
    rewards: bool = False
    clip_obs: float = 10.0
    clip_reward: float = 10.0
    gamma: float = 0.99
    num_envs: int = 1

    @property
    def enabled(self) -> bool:
        """Whether anything is normalized."""
        return self.observations or self.rewards

    def observers(self, observation_space: gymnasium.Space) -> tuple[Observer, ...]:
        """The observers that keep the statistics (none when nothing is normalized).

        Raises:
          ValueError: for normalized observations from a space that is not a ``Box``,
            naming the space.
        """
        observers = []
        if self.observations:
            if not isinstance(observation_space, gymnasium.spaces.Box):
                raise ValueError(
                    f"norm_obs normalizes Box observations feature by feature; the observation "
                    f"space is {observation_space}. Set norm_obs=False (or flatten the "
                    "observations into a Box with gymnasium.wrappers.FlattenObservation)."
                )
            shape = tuple(int(d) for d in observation_space.shape)
            init = lambda params: initial_moments(shape)
            observers.append(Observer(OBS_MOMENTS, init, self._observe_observations))
        if self.rewards:
            observers.append(Observer(RETURN_MOMENTS, self._init_returns, self._observe_returns))
        return tuple(observers)

    def _observe_observations(self, moments: RunningMoments, experience: Experience):
        return merge_moments(moments, experience["obs"], experience["valid"])

    def _init_returns(self, params: PyTree) -> ReturnMoments:
        return ReturnMoments(jnp.zeros((self.num_envs,), jnp.float32), initial_moments(()))

    def _observe_returns(self, state: ReturnMoments, experience: Experience) -> ReturnMoments:
        envs = experience["rewards"].shape[1]
        if envs != self.num_envs:
            raise ValueError(
                f"norm_reward keeps one running return per environment, for "
                f"num_envs_per_env_runner={self.num_envs}; this experience comes from {envs} "
                f"environments. Set num_envs_per_env_runner={envs}."
            )
        returns, values = discounted_returns(state.returns, experience, self.gamma)
        return ReturnMoments(returns, merge_moments(state.moments, values, experience["valid"]))

    def check_num_envs(self, owner: str, num_envs: int) -> None:
        """Refuses a driver's number of environments that the reward statistics are not
        built for (called where a driver asks for its rollout length).

        Raises:
          ValueError: with ``rewards`` on and ``num_envs != self.num_envs``, naming both.
        """
        if self.rewards and num_envs != self.num_envs:
            raise ValueError(
                f"{owner}.norm_reward keeps one running return per environment and was built "
                f"for num_envs_per_env_runner={self.num_envs}, but {num_envs} environments "
                f"are stepped; set num_envs_per_env_runner={num_envs}."
            )

    def observation(self, extra: Mapping[str, Any], obs: jax.Array) -> jax.Array:
        """``obs`` (any leading axes) normalized with the statistics in ``extra``, or as given
        when observations are not normalized."""
        if not self.observations:
            return obs
        moments: RunningMoments = extra[OBS_MOMENTS]
        scaled = (obs.astype(jnp.float32) - moments.mean) / jnp.sqrt(moments.var + EPSILON)
        return jnp.clip(scaled, -self.clip_obs, self.clip_obs)

    def reward(self, extra: Mapping[str, Any], rewards: jax.Array) -> jax.Array:
        """``rewards`` divided by the running return's std and clipped, or as given."""
        if not self.rewards:
            return rewards
        moments: RunningMoments = extra[RETURN_MOMENTS].moments
        scaled = rewards / jnp.sqrt(moments.var + EPSILON)
        return jnp.clip(scaled, -self.clip_reward, self.clip_reward)

    def act_extras(self, normalized_obs: jax.Array) -> dict[str, jax.Array]:
        """The extras an on-policy act function returns beside its own: the observation as
        it normalized it (none when observations are not normalized)."""
        return {NORMALIZED_OBS: normalized_obs} if self.observations else {}

    def experience(self, extra: Mapping[str, Any], experience: Experience) -> Experience:
        """On-policy experience for postprocessing: ``obs`` and ``next_obs`` normalized and
        ``rewards`` scaled with one set of statistics, those that already include this batch
        (brax's PPO), so every value a return or advantage is built from sees its input
        normalized alike; the act function's own normalization stays in its
        ``normalized_obs`` extra (:data:`NORMALIZED_OBS`), for a loss whose first ratio
        should be 1 (SB3's rollout buffer keeps what the policy acted on).

        Why one set: the act normalized with the statistics before this batch, so its
        values ``vf_preds`` and a ``next_obs`` normalized with the new statistics are
        two functions of the state. With several environments stepping in lockstep the
        statistics move far between two batches (each holds the same stretch of every
        episode), and advantages built from the two broke PPO on Acrobot with 16
        environments (issue 54).
        """
        return self.batch(extra, experience)

    def batch(
        self,
        extra: Mapping[str, Any],
        batch: Batch,
        obs_keys: tuple[str, ...] = ("obs", "next_obs"),
    ) -> Batch:
        """A batch (or experience) with its ``obs_keys`` normalized and ``rewards`` scaled;
        keys it lacks are left out of it, the rest kept."""
        if not self.enabled:
            return batch
        out = dict(batch)
        for key in obs_keys:
            if key in out:
                out[key] = self.observation(extra, out[key])
        if "rewards" in out:
            out["rewards"] = self.reward(extra, out["rewards"])
        return out


def normalized_loss(loss: Callable, norm: Normalization) -> Callable:
    """``loss`` on the batch normalized with the module's statistics (``ctx.extra``), for
    replay-based algorithms: their buffers keep raw observations and rewards, normalized
    when a batch is sampled with the statistics of that moment (as SB3 samples through
    ``VecNormalize``), so a stored row never goes stale; ``loss`` itself when nothing is
    normalized.

    Example:
      >>> loss = normalized_loss(dqn_loss(), Normalization(observations=True))
      ... # doctest: +SKIP
    """
    if not norm.enabled:
        return loss

    def normalized(params: PyTree, batch: Batch, ctx: Any) -> Any:
        return loss(params, norm.batch(ctx.extra, batch), ctx)

    return normalized


def check_normalization_config(owner: str, config: Any) -> None:
    """Checks the normalization fields a config keeps: ``norm_obs`` and ``norm_reward``
    bools, ``clip_obs`` and ``clip_reward`` positive numbers, ``num_envs_per_env_runner``
    a positive int (configs without ``norm_reward`` skip what they lack).

    Raises:
      ValueError: naming the field, the value received and what is expected.
    """
    for name in ("norm_obs", "norm_reward"):
        value = getattr(config, name, False)
        if not isinstance(value, bool):
            raise ValueError(f"{owner}.{name} must be True or False; got {value!r}.")
    for name in ("clip_obs", "clip_reward"):
        value = getattr(config, name, 1.0)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ValueError(f"{owner}.{name} must be a positive finite number; got {value!r}.")
    envs = getattr(config, "num_envs_per_env_runner", 1)
    if isinstance(envs, bool) or not isinstance(envs, int) or envs < 1:
        raise ValueError(f"{owner}.num_envs_per_env_runner must be an int >= 1; got {envs!r}.")


def normalization_for(config: Any, gamma: float) -> Normalization:
    """The :class:`Normalization` a config asks for (checked by
    :func:`check_normalization_config`).

    Args:
      config: a config with ``norm_obs`` and ``clip_obs`` (and, for those that scale
        rewards, ``norm_reward``, ``clip_reward`` and ``num_envs_per_env_runner``).
      gamma: the discount of the running return.
    """
    return Normalization(
        observations=bool(getattr(config, "norm_obs", False)),
        rewards=bool(getattr(config, "norm_reward", False)),
        clip_obs=float(getattr(config, "clip_obs", 10.0)),
        clip_reward=float(getattr(config, "clip_reward", 10.0)),
        gamma=float(gamma),
        num_envs=int(getattr(config, "num_envs_per_env_runner", 1)),
    )
