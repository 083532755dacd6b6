"""APPO: config validation, the loss by hand and against GAE, lagged collection, checkpoints."""

import dataclasses
import time

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same_stats, interrupted_and_resumed, maybe_jit, tree_equal

import jaxlearner as jl
from jaxlearner.algorithms.appo import APPOConfig, appo_loss
from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec
from jaxlearner.algorithms.trajectories.returns import gae
from jaxlearner.cli import main
from jaxlearner.training.env_runner import EnvRunner

CARTPOLE = gym.make("CartPole-v1")
CATEGORICAL = DistributionSpec("categorical", (2,))
SMALL = {
    "rollout_fragment_length": 8,
    "train_batch_size": 64,
    "minibatch_size": 32,
    "num_epochs": 2,
    "hidden_sizes": (16,),
}
# Learns CartPole-v1 reliably with stale experience (seeds 0-3 reach 500 within 60k env steps).
LEARNING = {
    "lr": 1e-3,
    "rollout_fragment_length": 32,
    "train_batch_size": 512,
    "minibatch_size": 128,
    "num_epochs": 8,
    "hidden_sizes": (64, 64),
    "lambda_": 0.95,
    "clip_param": 0.2,
    "vf_loss_coeff": 1.0,
    "policy_lag": 2,
}


def small_trainer(seed=7, **config):
    algorithm = jl.algorithms.build(
        "appo", CARTPOLE.observation_space, CARTPOLE.action_space, {**SMALL, **config}
    )
    return jl.Trainer(algorithm, "CartPole-v1", num_envs=4, seed=seed, progress=False)


@pytest.mark.parametrize(
    "config, message",
    [
        ({"gamma": 1.5}, r"APPOConfig.gamma must be a number in \[0, 1\]; got 1.5"),
        ({"tau": -0.1}, r"APPOConfig.tau must be a number in \[0, 1\]"),
        ({"vtrace_clip_rho_threshold": 0.0}, "vtrace_clip_rho_threshold must be a positive"),
        ({"policy_lag": -1}, r"policy_lag must be an int >= 0; got -1"),
        ({"policy_lag": 1.5}, r"policy_lag must be an int >= 0; got 1.5"),
        ({"rollout_fragment_length": 0}, "rollout_fragment_length must be a positive int"),
        (
            {"train_batch_size": 120},
            r"train_batch_size \(120\) must be a multiple of rollout_fragment_length \(50\)",
        ),
        (
            {"minibatch_size": 70},
            r"minibatch_size \(70\) must be a multiple of rollout_fragment_length \(50\)",
        ),
        ({"minibatch_size": 1000}, r"minibatch_size \(1000\) exceeds train_batch_size \(500\)"),
        ({"grad_clip_by": "max"}, r"grad_clip_by must be one of .*; got 'max'"),
        ({"kl_coeff": -1.0}, "APPOConfig.kl_coeff must be >= 0 and finite; got -1.0"),
        ({"vf_loss_coeff": float("nan")}, "APPOConfig.vf_loss_coeff must be >= 0 and finite"),
        ({"head_hidden_sizes": (8, 0)}, r"APPOConfig.head_hidden_sizes must be a sequence"),
        ({"head_activation": "Relu"}, r"APPOConfig.head_activation must be one of \['elu'"),
    ],
)
def test_config_validation(config, message):
    with pytest.raises(ValueError, match=message):
        APPOConfig(**config)


def test_unknown_fields_are_refused_and_rollouts_are_whole_sequences():
    with pytest.raises(ValueError, match=r"Unknown APPOConfig field\(s\) \['clip'\]"):
        jl.algorithms.appo(CARTPOLE.observation_space, CARTPOLE.action_space, {"clip": 0.1})
    algorithm = jl.algorithms.build("appo", CARTPOLE.observation_space, CARTPOLE.action_space)
    # train_batch_size 500 in sequences of 50: exact where 500 splits into whole sequences...
    assert algorithm.rollout_steps(10) == 50 and algorithm.rollout_steps(5) == 100
    # ...else the fewest whole sequences per env that make 500: ceil(500 / (N * 50)) * 50.
    assert algorithm.rollout_steps(3) == 200  # ceil(3.33) = 4 sequences, 600 env steps
    assert algorithm.rollout_steps(4) == 150  # 125 would cut a sequence: 3, 600 env steps
    assert algorithm.rollout_steps(8) == 100  # the Trainer's default: 2 sequences, 800
    assert algorithm.rollout_steps(64) == 50  # one sequence each, 3200 >= 500
    normalized = jl.algorithms.build(
        "appo", CARTPOLE.observation_space, CARTPOLE.action_space, {"norm_reward": True}
    )
    with pytest.raises(ValueError, match="num_envs_per_env_runner=1, but 8 environments"):
        normalized.rollout_steps(8)  # the reward statistics are built for one environment


def lookup_context(old_logits, kl_coeff=0.3):
    """A model that is a table: ``obs[:, 0]`` indexes ``params["logits"]`` and ``["values"]``."""

    def apply(params, obs):
        index = obs[:, 0].astype(jnp.int32)
        return params["logits"][index], params["values"][index]

    hyperparams = {
        "gamma": 0.5,
        "lambda_": 1.0,
        "vtrace_clip_rho_threshold": 1.0,
        "vtrace_clip_pg_rho_threshold": 1.0,
        "clip_param": 0.2,
        "vf_loss_coeff": 0.5,
        "entropy_coeff": 0.1,
    }
    return jl.LossContext(
        module_id="p",
        apply=apply,
        key=jax.random.key(0),
        extra={
            "old_params": {"logits": old_logits, "values": jnp.zeros(4)},
            "kl_coeff": jnp.asarray(kl_coeff),
        },
        hyperparams={k: jnp.asarray(v) for k, v in hyperparams.items()},
        counters={},
    )


def test_appo_loss_matches_a_hand_computation(jit):
    # Row 0 is one sequence of two steps: states 0 -> 1 -> 2, actions [0, 1], rewards [1, 1],
    # no episode end; gamma = 0.5, lambda = 1. Row 1 (state 3) is masked out entirely.
    # Behaviour mu(a|x) = [.25, .75]; old policy pi_old: state 0 [.5, .5], state 1 [.25, .75]
    # -> rho = pi_old / mu = [.5 / .25, .75 / .75] = [2, 1]; rho_bar = c = pg rho = [1, 1].
    # Current policy uniform: ratio r = pi / pi_old = [.5 / .5, .5 / .75] = [1, 2/3].
    # Values (current params) V = [1, 2, 4] for states [0, 1, 2].
    # TD: [1 + .5 * 2 - 1, 1 + .5 * 4 - 2] = [1, 1]; vs[1] = 2 + 1 = 3 (last step: no trace);
    # vs[0] = 1 + 1 + .5 * 1 * (3 - 2) = 2.5.
    # Advantages: q[0] = 1 + .5 * vs[1] = 2.5 -> A[0] = 1 * (2.5 - 1) = 1.5;
    # q[1] = 1 + .5 * V(2) = 3 -> A[1] = 3 - 2 = 1.
    # Surrogates: min(1 * 1.5, 1 * 1.5) = 1.5; min(2/3 * 1, clip(2/3, .8, 1.2) * 1) = 2/3.
    # Value loss .5 * mean((1 - 2.5)^2, (2 - 3)^2) = .5 * 3.25 / 2 = .8125.
    # Entropy log 2; KL(pi_old || pi) = [0, .25 log(.25 / .5) + .75 log(.75 / .5)].
    kl1 = 0.25 * np.log(0.5) + 0.75 * np.log(1.5)
    policy_loss = -(1.5 + 2 / 3) / 2
    total = policy_loss + 0.5 * 0.8125 - 0.1 * np.log(2) + 0.3 * kl1 / 2
    batch = {
        "obs": jnp.asarray([[[0.0], [1.0]], [[3.0], [3.0]]]),
        "next_obs": jnp.asarray([[[1.0], [2.0]], [[3.0], [3.0]]]),
        "actions": jnp.asarray([[0, 1], [0, 0]]),
        "logp": jnp.log(jnp.asarray([[0.25, 0.75], [0.01, 0.01]])),
        "rewards": jnp.asarray([[1.0, 1.0], [100.0, 100.0]]),
        "terminated": jnp.zeros((2, 2)),
        "truncated": jnp.zeros((2, 2)),
        "mask": jnp.asarray([[1.0, 1.0], [0.0, 0.0]]),
    }
    params = {"logits": jnp.zeros((4, 2)), "values": jnp.asarray([1.0, 2.0, 4.0, 50.0])}
    old_logits = jnp.log(jnp.asarray([[0.5, 0.5], [0.25, 0.75], [0.5, 0.5], [0.9, 0.1]]))
    ctx = lookup_context(old_logits)
    loss = appo_loss(CATEGORICAL, use_kl_loss=True)
    value, metrics = maybe_jit(lambda p, b: loss(p, b, ctx), jit)(params, batch)
    np.testing.assert_allclose(value, total, rtol=1e-5)
    np.testing.assert_allclose(metrics["policy_loss"], policy_loss, rtol=1e-5)
    np.testing.assert_allclose(metrics["vf_loss"], 0.8125, rtol=1e-6)
    np.testing.assert_allclose(metrics["entropy"], np.log(2), rtol=1e-6)
    np.testing.assert_allclose(metrics["mean_kl"], kl1 / 2, rtol=1e-5)
    np.testing.assert_allclose(metrics["clip_fraction"], 0.5)
    np.testing.assert_allclose(metrics["mean_rho"], 1.5, rtol=1e-6)
    np.testing.assert_allclose(metrics["mean_abs_log_rho"], np.log(2) / 2, rtol=1e-6)
    no_kl, _ = appo_loss(CATEGORICAL, use_kl_loss=False)(params, batch, ctx)
    np.testing.assert_allclose(no_kl, total - 0.3 * kl1 / 2, rtol=1e-5)
    # A termination at step 0 cuts the trace and the bootstrap: vs[0] = 1 + (1 - 1) = 1, A[0] = 0.
    ended = {**batch, "terminated": jnp.asarray([[1.0, 0.0], [0.0, 0.0]])}
    _, metrics = loss(params, ended, ctx)
    np.testing.assert_allclose(metrics["vf_loss"], 0.5 * (0.0 + 1.0) / 2, rtol=1e-6)
    np.testing.assert_allclose(metrics["policy_loss"], -(0.0 + 2 / 3) / 2, rtol=1e-5)


def rollout_batch(config, steps=16, num_envs=3, seed=0):
    """A postprocessed CartPole rollout of a fresh APPO learner, and its state and algorithm."""
    algorithm = jl.algorithms.build(
        "appo", CARTPOLE.observation_space, CARTPOLE.action_space, config
    )
    state = algorithm.learner.init(jax.random.key(seed))
    module = state.modules["default_policy"]
    runner = EnvRunner("CartPole-v1", num_envs=num_envs, seed=seed)
    rollout = runner.sample(algorithm.explore, module, steps, jax.random.key(seed + 1))
    runner.close()
    return algorithm, state, algorithm.postprocess(module, rollout.experience()), rollout


def test_postprocess_cuts_the_rollout_into_sequences_of_one_env(jit):
    config = {**SMALL, "rollout_fragment_length": 4}
    algorithm, state, _, rollout = rollout_batch(config, steps=8, num_envs=3)
    module = state.modules["default_policy"]
    batch = maybe_jit(algorithm.postprocess, jit)(module, rollout.experience())
    # Row k * N + n holds env n's steps 4k .. 4k + 3.
    assert batch["obs"].shape == (6, 4, 4) and batch["mask"].shape == (6, 4)
    np.testing.assert_array_equal(batch["obs"][4], rollout.obs[4:8, 1])
    np.testing.assert_array_equal(batch["next_obs"][2], rollout.next_obs[0:4, 2])
    np.testing.assert_array_equal(batch["rewards"][3], rollout.rewards[4:8, 0])
    np.testing.assert_array_equal(batch["logp"][5], rollout.extras["logp"][4:8, 2])
    assert batch["terminated"].dtype == jnp.float32


def test_on_policy_appo_is_a2c_with_gae(jit):
    # With the behaviour, old and current params equal, rho = r = 1: V-trace's targets and
    # advantages are GAE's over each sequence (bootstrapping on its last next observation), the
    # surrogate is the advantage, and the gradient is -mean(A * grad log pi) + the value term.
    lambda_ = 0.8
    config = {**SMALL, "lambda_": lambda_, "gamma": 0.9, "entropy_coeff": 0.0}
    algorithm, state, batch, _ = rollout_batch(config, steps=32, num_envs=2, seed=3)
    assert float(batch["terminated"].sum()) > 0  # the rollout crosses episode ends
    module = state.modules["default_policy"]
    model = algorithm.learner.specs["default_policy"].model
    rows, length = batch["mask"].shape

    def values_and_logp(params):
        obs = batch["obs"].reshape(rows * length, -1)
        dist_inputs, values = model.apply(params, obs)
        next_values = model.apply(params, batch["next_obs"].reshape(rows * length, -1))[1]
        logp = jax.nn.log_softmax(dist_inputs)[jnp.arange(rows * length), batch["actions"].ravel()]
        shape = (rows, length)
        return values.reshape(shape), next_values.reshape(shape), logp.reshape(shape)

    values, next_values, _ = values_and_logp(module.params)
    advantages, targets = (
        x.T
        for x in gae(
            batch["rewards"].T,
            values.T,
            next_values.T,
            batch["terminated"].T,
            batch["truncated"].T,
            0.9,
            lambda_,
        )
    )

    def a2c(params):
        values, _, logp = values_and_logp(params)
        return jnp.mean(-advantages * logp + 0.5 * 0.5 * (values - targets) ** 2)

    ctx = jl.LossContext(
        module_id="default_policy",
        apply=model.apply,
        key=jax.random.key(0),
        extra={**module.extra, "old_params": module.params},
        hyperparams=module.hyperparams,
        counters=module.counters,
    )
    loss = appo_loss(CATEGORICAL, use_kl_loss=False)
    grad, metrics = maybe_jit(jax.grad(lambda p: loss(p, batch, ctx), has_aux=True), jit)(
        module.params
    )
    np.testing.assert_allclose(metrics["mean_abs_log_rho"], 0.0, atol=1e-6)
    np.testing.assert_allclose(metrics["policy_loss"], -advantages.mean(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        metrics["vf_loss"], 0.5 * jnp.mean((values - targets) ** 2), rtol=1e-4
    )
    expected = jax.grad(a2c)(module.params)
    for got, want in zip(jax.tree.leaves(grad), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)


def test_update_compiles_once_and_refreshes_the_old_policy():
    algorithm, state, batch, _ = rollout_batch(SMALL, steps=16, num_envs=4)
    learner = algorithm.learner
    spec = learner.specs["default_policy"]
    traces = []

    def counted(params, batch, ctx):
        traces.append(1)
        return spec.loss(params, batch, ctx)

    learner = learner.replace(modules={"default_policy": dataclasses.replace(spec, loss=counted)})
    traces.clear()
    for _ in range(4):
        state, metrics = learner.update(state, batch, env_steps=64)
        module = state.modules["default_policy"]
        # tau = 1: after each update the old policy is the new params.
        assert tree_equal(module.extra["old_params"], module.params)
    assert len(traces) == 1
    # 4 updates x 2 epochs x 2 minibatches (8 sequences of 8 steps, 32 steps a minibatch).
    assert int(metrics["__all__"]["num_grad_steps"]) == 4 * 2 * 2
    assert np.isfinite(float(metrics["default_policy"]["total_loss"]))


def recorded_behaviour(trainer):
    """Wraps the trainer's runner so each iteration's collecting params are recorded."""
    used = []
    sample = trainer.engine.runner.sample

    def recording(policy, module, *args, **kwargs):
        used.append(jax.tree.map(np.asarray, module.params))
        return sample(policy, module, *args, **kwargs)

    trainer.engine.runner.sample = recording
    return used


@pytest.mark.parametrize("lag", [0, 2])
def test_lagged_collection_uses_the_params_of_lag_updates_ago(lag):
    trainer = small_trainer(policy_lag=lag)
    used = recorded_behaviour(trainer)
    params = [jax.tree.map(np.asarray, trainer.state.modules["default_policy"].params)]
    stats = []
    for _ in range(5):
        stats.append(trainer.step())
        params.append(jax.tree.map(np.asarray, trainer.state.modules["default_policy"].params))
    # Iteration i collects with the params after max(0, i - lag) updates.
    for i, behaviour in enumerate(used):
        assert tree_equal(behaviour, params[max(0, i - lag)]), i
    log_rhos = [s["default_policy/mean_abs_log_rho"] for s in stats]
    if lag == 0:
        assert max(log_rhos) < 1e-5, log_rhos  # on-policy: mu = pi_old
        assert len(trainer.engine._behaviour_params) == 0  # and no params kept
    else:
        # The first update trains on the initial params' experience, as on-policy; then the
        # behaviour policy is older than the old policy and the ratios are not 1.
        assert log_rhos[0] < 1e-5 and min(log_rhos[1:]) > 1e-4, log_rhos


def test_resume_with_a_lag_continues_exactly(tmp_path):
    straight = small_trainer(policy_lag=2)
    expected = [straight.step() for _ in range(5)]
    interrupted, resumed = interrupted_and_resumed(
        lambda seed=7: small_trainer(seed=seed, policy_lag=2), tmp_path / "ckpt", steps=3
    )
    assert tree_equal(
        list(resumed.engine._behaviour_params), list(interrupted.engine._behaviour_params)
    )
    assert_same_stats(expected[3:], [resumed.step() for _ in range(2)])
    assert tree_equal(resumed.state.modules, straight.state.modules)


def test_checkpoint_round_trip_rebuilds_the_learner(tmp_path):
    trainer = small_trainer(head_hidden_sizes=(8,))
    actor = trainer.state.modules["default_policy"].params["params"]["actor"]
    assert actor["head"]["hidden"]["dense_0"]["kernel"].shape == (16, 8)  # encoder 16 -> head 8
    trainer.step()
    with jl.CheckpointManager(tmp_path / "ckpt") as checkpoint:
        trainer.save(checkpoint)
        checkpoint.wait_until_finished()
    learner, state = jl.restore(tmp_path / "ckpt")
    assert learner.recipe["algorithm"] == "appo"
    algorithm = jl.algorithms.algorithm_for(learner)
    assert algorithm.config == trainer.engine.algorithm.config and algorithm.name == "appo"
    assert tree_equal(state.modules, trainer.state.modules)


def test_anakin_refuses_a_lag():
    from jaxlearner import anakin
    from jaxlearner.anakin import envs

    algorithm = jl.algorithms.build(
        "appo", CARTPOLE.observation_space, CARTPOLE.action_space, {**SMALL, "policy_lag": 1}
    )
    with pytest.raises(ValueError, match="policy_lag=1 is the Trainer's"):
        anakin.make_train(algorithm, envs.make("CartPole-v1"), anakin.AnakinConfig(num_envs=8))


def test_the_command_line_trains_and_evaluates_appo(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    argv = ["train", "appo", "--out", str(out), "--max-steps", "1024", "--eval-every", "512"]
    argv += ["--num-envs", "4", "--no-progress", "--config", "train_batch_size=512"]
    argv += ["hidden_sizes=[16]", "num_epochs=1", "policy_lag=1"]
    assert main(argv) == 0
    assert main(["eval", str(out), "--episodes", "2"]) == 0
    assert "appo on CartPole-v1, checkpoint step 2: return" in capsys.readouterr().out


@pytest.mark.slow
def test_appo_learns_cartpole_from_experience_two_updates_old():
    learner = jl.algorithms.appo(CARTPOLE.observation_space, CARTPOLE.action_space, LEARNING)
    trainer = jl.Trainer(learner, "CartPole-v1", num_envs=8, eval_episodes=10, seed=0)
    start = time.perf_counter()
    history = trainer.run([jl.RewardBound(495.0)], steps_per_eval=5120, max_iterations=200)
    seconds = time.perf_counter() - start
    final = trainer.eval()
    rhos = [s["default_policy/mean_abs_log_rho"] for s in history[1:]]
    print(
        f"APPO CartPole (policy_lag=2): {trainer.counters.env_steps} env steps, {seconds:.0f} s, "
        f"eval {final['return_mean']}, mean |log rho| {np.mean(rhos):.3f}"
    )
    assert min(rhos) > 1e-4  # it really trained on stale experience
    assert history[-1]["eval/return_mean"] >= 495.0
    assert final["return_mean"] >= 400.0
