"""Stacked frames kept once per frame: exact round trips from real rollouts, mismatches
counted, one trace, memory, and a framed DQN training exactly as an unframed one."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.wrappers import FrameStackObservation, TimeLimit, TransformObservation
from helpers import assert_same_stats, interrupted_and_resumed, maybe_jit, tree_equal

import jaxlearner as jl
from jaxlearner.algorithms.replay import frame_stack
from jaxlearner.algorithms.replay.off_policy import replay_init_for
from jaxlearner.training.env_runner import EnvRunner

# This module's tests run convolutions, which -O0 slows more than it saves (tests/conftest.py).
pytestmark = pytest.mark.full_optimization

STACK = 4


class Frames(gym.Env):
    """Random 5x3 uint8 frames; an episode ends (terminated) with probability 0.1 a step."""

    observation_space = gym.spaces.Box(0, 255, (5, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._frame(), {}

    def step(self, action):
        terminated = bool(self.np_random.random() < 0.1)
        return self._frame(), float(action), terminated, False, {}

    def _frame(self):
        return self.np_random.integers(0, 4, (5, 3), dtype=np.uint8)


def stacked_frames(max_steps=7):
    """Frames stacked on the last axis (reset-padded), cut at ``max_steps`` (truncated)."""
    env = FrameStackObservation(TimeLimit(Frames(), max_steps), STACK)
    space = gym.spaces.Box(0, 255, (5, 3, STACK), np.uint8)
    return TransformObservation(env, lambda obs: np.moveaxis(obs, 0, -1), space)


def random_policy(params, obs, key):
    return jax.random.randint(key, obs.shape[:1], 0, 2), {}


def rollouts(count, steps=6, envs=3, seed=0):
    runner = EnvRunner(stacked_frames, num_envs=envs, seed=seed)
    key = jax.random.key(seed)
    out = []
    for _ in range(count):
        key, sample_key = jax.random.split(key)
        out.append(runner.sample(random_policy, None, steps, sample_key).experience())
    return out


def test_real_rollouts_round_trip_exactly(jit):
    """Every stored observation and next observation decodes to its pixels, across rollouts
    (the first slots of a rollout point into the previous one), episode starts (padding) and
    time limits (the final observation), with and without jit."""
    experiences = rollouts(5)
    assert sum(e["truncated"].sum() for e in experiences) > 0  # the final observations count
    assert sum(e["terminated"].sum() for e in experiences) > 0
    encode = maybe_jit(frame_stack.encode, jit)
    decode = maybe_jit(frame_stack.decode, jit)
    store = frame_stack.frame_store_init((5, 3), jnp.uint8, STACK, num_envs=3, capacity=60)
    for experience in experiences:
        store, slots = encode(store, experience)
        assert slots["obs"].shape == (6, 3, STACK) and slots["obs"].dtype == jnp.int32
        np.testing.assert_array_equal(decode(store, slots["obs"]), experience["obs"])
        np.testing.assert_array_equal(decode(store, slots["next_obs"]), experience["next_obs"])
        assert tree_equal(
            {k: v for k, v in slots.items() if k not in ("obs", "next_obs")},
            {k: v for k, v in experience.items() if k not in ("obs", "next_obs")},
        )
    assert int(store.mismatches) == 0


def test_rows_outlive_none_of_their_frames():
    """Rows still in a full buffer decode exactly after the ring wraps many times: a
    capacity of 18 transitions (one rollout) with 40 rollouts added."""
    store = frame_stack.frame_store_init((5, 3), jnp.uint8, STACK, num_envs=3, capacity=18)
    encode = jax.jit(frame_stack.encode)
    for experience in rollouts(40, seed=1):
        store, slots = encode(store, experience)
    np.testing.assert_array_equal(frame_stack.decode(store, slots["obs"]), experience["obs"])
    np.testing.assert_array_equal(
        frame_stack.decode(store, slots["next_obs"]), experience["next_obs"]
    )
    # Each rollout's first observations were matched against the previous rollout's last
    # frames, read after this rollout's frames were written: none of them was overwritten.
    assert int(store.mismatches) == 0


def test_a_rollout_larger_than_the_capacity_is_refused():
    store = frame_stack.frame_store_init((5, 3), jnp.uint8, STACK, num_envs=3, capacity=17)
    with pytest.raises(ValueError, match=r"18 transitions \(6 steps x 3 environments\), more "):
        frame_stack.encode(store, rollouts(1)[0])


def test_observations_that_are_not_stacks_are_counted():
    """Random pixels in every slot: each valid transition is a mismatch; invalid ones not."""
    experience = rollouts(1)[0]
    rng = np.random.default_rng(0)
    noisy = {**experience, "obs": rng.integers(0, 255, experience["obs"].shape, np.uint8)}
    noisy["valid"] = experience["valid"].copy()
    noisy["valid"][0] = False  # the first step's three transitions
    store = frame_stack.frame_store_init((5, 3), jnp.uint8, STACK, num_envs=3, capacity=60)
    store, encoded = frame_stack.encode(store, noisy)
    assert int(store.mismatches) == noisy["valid"].sum() == 15
    assert not np.asarray(encoded["valid"]).any()  # stored, but never trained on


def test_encode_traces_once():
    store = frame_stack.frame_store_init((5, 3), jnp.uint8, STACK, num_envs=3, capacity=60)
    traces = []

    @jax.jit
    def encode(store, experience):
        traces.append(1)
        return frame_stack.encode(store, experience)

    for experience in rollouts(3):
        store, _ = encode(store, experience)
    assert len(traces) == 1


def test_bad_shapes_are_refused():
    store = frame_stack.frame_store_init((5, 3), jnp.uint8, STACK, num_envs=3, capacity=60)
    experience = rollouts(1)[0]
    with pytest.raises(ValueError, match=r"obs has shape \(6, 3, 5, 3, 4\) and dtype float32"):
        frame_stack.encode(store, {**experience, "obs": experience["obs"].astype(np.float32)})
    with pytest.raises(ValueError, match="3 environments"):
        frame_stack.encode(store, jax.tree.map(lambda x: x[:, :2], experience))
    with pytest.raises(ValueError, match="stack must be an int >= 2; got 1"):
        frame_stack.frame_store_init((5, 3), jnp.uint8, 1, num_envs=3, capacity=60)


ATARI = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)


def atari_experience(envs=1, steps=4):
    obs = jax.ShapeDtypeStruct((steps, envs, 84, 84, 4), jnp.uint8)
    flag = jax.ShapeDtypeStruct((steps, envs), jnp.bool_)
    return {
        "obs": obs,
        "next_obs": obs,
        "actions": jax.ShapeDtypeStruct((steps, envs), jnp.int32),
        "rewards": jax.ShapeDtypeStruct((steps, envs), jnp.float32),
        "terminated": flag,
        "truncated": flag,
        "valid": flag,
    }


@pytest.mark.parametrize("prioritized", [False, True])
def test_a_100k_atari_buffer_fits_in_a_quarter_of_the_plain_one(prioritized):
    """The buffer RL Zoo's Atari DQN keeps (100k transitions of 84x84x4 uint8): under 1.45 GB
    (14,144 bytes of frames per transition and small columns), against 5.6 GB for rows kept
    as they are. Shapes only (eval_shape): nothing is allocated."""

    def nbytes(frame_stack_value):
        config = {
            "replay_buffer_capacity": 100_000,
            "replay_frame_stack": frame_stack_value,
            "prioritized_replay": prioritized,
            "hidden_sizes": (8,),
        }
        algorithm = jl.algorithms.build("dqn", ATARI, gym.spaces.Discrete(4), config)
        buffer = jax.eval_shape(lambda: replay_init_for(algorithm, atari_experience()))
        return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(buffer))

    framed, plain = nbytes(4), nbytes(None)
    assert plain > 5.6e9
    assert framed < 1.45e9
    assert framed < plain / 3.9


def framed_trainer(seed=3, stack=STACK, prioritized=False):
    config = {
        "replay_frame_stack": stack,
        "prioritized_replay": prioritized,
        "replay_buffer_capacity": 64,
        "num_steps_sampled_before_learning_starts": 32,
        "train_batch_size": 16,
        "hidden_sizes": (16,),
        "rollout_fragment_length": 4,
    }
    space = stacked_frames().observation_space
    algorithm = jl.algorithms.build("dqn", space, gym.spaces.Discrete(2), config)
    return jl.Trainer(algorithm, env=stacked_frames, num_envs=2, seed=seed)


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_a_checkpoint_round_trips_the_frames(tmp_path, prioritized):
    """Saved and restored mid-run, a framed buffer (frames, slots, the carried last
    observations, priorities) continues as the uninterrupted run; an unframed DQN refuses it."""
    make = lambda seed=3: framed_trainer(seed, prioritized=prioritized)
    straight = make()
    expected = [straight.step() for _ in range(14)]
    interrupted, resumed = interrupted_and_resumed(make, tmp_path / "ckpt", 10)
    assert isinstance(resumed.engine.buffer, frame_stack.FramedReplay)
    assert tree_equal(resumed.engine.buffer, interrupted.engine.buffer)
    assert_same_stats(expected[10:], [resumed.step() for _ in range(4)])
    assert tree_equal(resumed.engine.buffer, straight.engine.buffer)
    unframed = framed_trainer(stack=None, prioritized=prioritized)
    with (
        jl.CheckpointManager(tmp_path / "ckpt") as checkpoint,
        pytest.raises(ValueError, match="keeps stacked frames apart but dqn has replay_frame"),
    ):
        unframed.restore(checkpoint)


def test_a_resume_that_restarts_the_environments_leaves_out_one_step_each(tmp_path, monkeypatch):
    """Environments that cannot be restored exactly restart on resume: the first step of each
    after it joins a saved observation to a new episode, is stored as not valid, and is
    tolerated (one per environment); training goes on."""
    monkeypatch.setattr("jaxlearner.training.env_runner.restore_layers", lambda envs, saved: None)
    _, resumed = interrupted_and_resumed(framed_trainer, tmp_path / "ckpt", 10)
    for _ in range(6):
        metrics = resumed.step()
    assert int(resumed.engine.buffer.frames.mismatches) == 2  # two environments
    assert np.isfinite(metrics["default_policy/total_loss"])


def test_a_trainer_refuses_observations_that_are_not_frame_stacks():
    """Four unrelated frames per observation: the first rollout stops the run, saying why."""

    def unstacked():
        env = TimeLimit(Frames(), 50)
        space = gym.spaces.Box(0, 255, (5, 3, STACK), np.uint8)
        frames = lambda obs: np.stack([obs, 3 - obs, obs // 2, np.ones_like(obs)], -1)
        return TransformObservation(env, frames, space)

    config = {"replay_frame_stack": STACK, "hidden_sizes": (8,), "rollout_fragment_length": 4}
    space = gym.spaces.Box(0, 255, (5, 3, STACK), np.uint8)
    algorithm = jl.algorithms.build("dqn", space, gym.spaces.Discrete(2), config)
    trainer = jl.Trainer(algorithm, env=unstacked, num_envs=2, seed=0)
    with pytest.raises(ValueError, match="8 transitions held observations that are not stacks"):
        trainer.step()


def test_a_framed_dqn_trains_exactly_as_an_unframed_one():
    """The Trainer with replay_frame_stack=4 gives the same metrics, bit for bit, as with
    observations stored as they are: same rows sampled, decoded to the same pixels."""
    space = stacked_frames().observation_space
    results = []
    for stack in (STACK, None):
        config = {
            "replay_frame_stack": stack,
            "replay_buffer_capacity": 64,
            "num_steps_sampled_before_learning_starts": 32,
            "train_batch_size": 16,
            "hidden_sizes": (16,),
            "rollout_fragment_length": 4,
        }
        algorithm = jl.algorithms.build("dqn", space, gym.spaces.Discrete(2), config)
        trainer = jl.Trainer(algorithm, env=stacked_frames, num_envs=2, seed=3)
        metrics = [trainer.step() for _ in range(30)]
        clocks = ("time", "per_s", "memory")  # measured, not computed
        kept = [{k: v for k, v in m.items() if not any(c in k for c in clocks)} for m in metrics]
        results.append(kept[-5:])
        assert isinstance(trainer.engine.buffer, frame_stack.FramedReplay) == (stack is not None)
        trainer.close()
    assert any("loss" in name for name in results[0][0])
    assert tree_equal(*jax.tree.map(np.asarray, results))


def test_a_wrong_frame_stack_is_refused():
    config = {"replay_frame_stack": 3, "hidden_sizes": (8,)}
    with pytest.raises(ValueError, match=r"replay_frame_stack=3 needs .* shape \[\.\.\., 3\]"):
        jl.algorithms.build("dqn", ATARI, gym.spaces.Discrete(4), config)
    with pytest.raises(ValueError, match="replay_frame_stack must be None or an int >= 2"):
        jl.algorithms.DQNConfig(replay_frame_stack=1)
    with pytest.raises(ValueError, match="replay_frame_stack must be None or an int >= 2"):
        jl.algorithms.SACConfig(replay_frame_stack=True)
