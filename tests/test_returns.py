"""GAE, n-step returns and V-trace: hand-derived values, loop references, with and without jit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import int32_constants, maybe_jit

from jaxlearner.algorithms.trajectories.returns import (
    BACKWARD_UNROLL,
    gae,
    n_step_returns,
    n_step_rewards,
    vtrace,
)

# Two [T=4] columns, gamma = lambda = 0.5 (so gamma * lambda = 0.25).
# Column 0: one episode, no ends; v_t[t] = v_tm1[t + 1] and v_t[3] = 3 bootstraps the rollout end.
# Column 1: terminated at t=1 (v_t[1] = 100 must be ignored), truncated at t=2 (v_t[2] = 6 is the
# final observation's value), a new episode at t=3 bootstrapping on v_t[3] = 8.
R_T = [[1.0, 1.0], [0.0, 1.0], [2.0, 1.0], [1.0, 1.0]]
V_TM1 = [[0.5, 2.0], [1.0, 4.0], [0.0, 1.0], [2.0, 0.0]]
V_T = [[1.0, 4.0], [0.0, 100.0], [2.0, 6.0], [3.0, 8.0]]
TERMINATED = [[False, False], [False, True], [False, False], [False, False]]
TRUNCATED = [[False, False], [False, False], [False, True], [False, False]]


def test_gae_hand_derived(jit):
    advantages, targets = maybe_jit(gae, jit)(
        *map(np.asarray, (R_T, V_TM1, V_T, TERMINATED, TRUNCATED)), 0.5, 0.5
    )
    # delta = r + 0.5 * (1 - terminated) * v_t - v_tm1.
    # Column 0: delta = [1 + 0.5 - 0.5, 0 + 0 - 1, 2 + 1 - 0, 1 + 1.5 - 2] = [1, -1, 3, 0.5];
    #   A3 = 0.5, A2 = 3 + 0.25 * 0.5 = 3.125, A1 = -1 + 0.25 * 3.125 = -0.21875,
    #   A0 = 1 + 0.25 * -0.21875 = 0.9453125.
    # Column 1: delta = [1 + 2 - 2, 1 + 0 - 4, 1 + 3 - 1, 1 + 4 - 0] = [1, -3, 3, 5];
    #   A3 = 5, A2 = 3 (truncated: trace cut), A1 = -3 (terminated: trace cut),
    #   A0 = 1 + 0.25 * -3 = 0.25.
    expected = np.asarray([[0.9453125, 0.25], [-0.21875, -3.0], [3.125, 3.0], [0.5, 5.0]])
    np.testing.assert_allclose(advantages, expected, rtol=1e-6)
    np.testing.assert_allclose(targets, expected + np.asarray(V_TM1), rtol=1e-6)
    assert advantages.dtype == jnp.float32


def discounted_returns(r_t, v_t, terminated, truncated, gamma):
    """Monte-Carlo returns by a Python loop: sum rewards to the episode's end, bootstrap unless
    it terminated (truncations and the rollout's end bootstrap on v_t)."""
    horizon, batch = r_t.shape
    returns = np.zeros_like(r_t)
    for b in range(batch):
        for t in range(horizon):
            total, discount = 0.0, 1.0
            for k in range(t, horizon):
                total += discount * r_t[k, b]
                discount *= gamma
                if terminated[k, b]:
                    break
                if truncated[k, b] or k == horizon - 1:
                    total += discount * v_t[k, b]
                    break
            returns[t, b] = total
    return returns


def gae_loop(r_t, v_tm1, v_t, terminated, truncated, gamma, lambda_):
    """GAE by a Python loop over time, in float64."""
    advantages = np.zeros_like(r_t)
    next_advantage = np.zeros(r_t.shape[1])
    for t in reversed(range(r_t.shape[0])):
        delta = r_t[t] + gamma * (1 - terminated[t]) * v_t[t] - v_tm1[t]
        done = terminated[t] | truncated[t]
        next_advantage = delta + gamma * lambda_ * (1 - done) * next_advantage
        advantages[t] = next_advantage
    return advantages


def random_rollout(seed=0, horizon=12, batch=5):
    rng = np.random.default_rng(seed)
    r_t = rng.normal(size=(horizon, batch))
    v_tm1 = rng.normal(size=(horizon, batch))
    v_t = rng.normal(size=(horizon, batch))
    terminated = rng.random((horizon, batch)) < 0.15
    truncated = ~terminated & (rng.random((horizon, batch)) < 0.15)
    return r_t, v_tm1, v_t, terminated, truncated


@pytest.mark.parametrize("lambda_", [0.0, 0.7, 0.95, 1.0])
def test_gae_matches_a_loop(jit, lambda_):
    rollout = random_rollout()
    advantages, _ = maybe_jit(gae, jit)(*(x.astype(np.float32) for x in rollout), 0.9, lambda_)
    np.testing.assert_allclose(advantages, gae_loop(*rollout, 0.9, lambda_), rtol=1e-4, atol=1e-5)


def test_gae_lambda_one_gives_discounted_monte_carlo_returns(jit):
    r_t, v_tm1, v_t, terminated, truncated = random_rollout(seed=1)
    # The values telescope away only when consistent: inside an episode, the next observation's
    # value is the next row's v_tm1. At truncations and the rollout's end v_t stays free.
    continues = ~(terminated | truncated)[:-1]
    v_t[:-1] = np.where(continues, v_tm1[1:], v_t[:-1])
    _, targets = maybe_jit(gae, jit)(r_t, v_tm1, v_t, terminated, truncated, 0.9, 1.0)
    expected = discounted_returns(r_t, v_t, terminated, truncated, 0.9)
    np.testing.assert_allclose(targets, expected, rtol=1e-4, atol=1e-5)


def test_gae_lambda_zero_gives_one_step_td_errors(jit):
    r_t, v_tm1, v_t, terminated, truncated = random_rollout(seed=2)
    advantages, targets = maybe_jit(gae, jit)(r_t, v_tm1, v_t, terminated, truncated, 0.9, 0.0)
    td_target = r_t + 0.9 * (1 - terminated) * v_t
    np.testing.assert_allclose(targets, td_target, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(advantages, td_target - v_tm1, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("horizon", [15, 40])
def test_backward_scans_match_the_loops_around_the_unroll(jit, horizon):
    # On GPU and TPU the backward scans take BACKWARD_UNROLL steps per loop iteration: 15
    # steps are unrolled whole, 40 are two iterations and a remainder; the values stay the
    # loops' on every platform.
    rollout = random_rollout(seed=horizon, horizon=horizon, batch=3)
    inputs = [x.astype(np.float32) for x in rollout]
    advantages, _ = maybe_jit(gae, jit)(*inputs, 0.9, 0.8)
    np.testing.assert_allclose(advantages, gae_loop(*rollout, 0.9, 0.8), rtol=1e-4, atol=1e-5)
    r_t, v_tm1, v_t, terminated, truncated = inputs
    fn = lambda *a: vtrace(*a, lambda_=0.8)
    vtrace_inputs = (v_tm1, v_t, r_t, 0.9 * (1 - terminated), 0.3 * r_t)
    vs, _ = maybe_jit(fn, jit)(*vtrace_inputs, truncated)
    expected_vs, _ = vtrace_reference(*vtrace_inputs, truncated, 0.8, 1.0, 1.0)
    np.testing.assert_allclose(vs, expected_vs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("platform", ["cpu", "cuda", "tpu"])
def test_backward_scans_unroll_on_gpu_and_tpu_only(platform):
    # Lowered for each platform here, without its device: the backward loop's trip count
    # is in the program, 40 steps on the CPU, 40 // BACKWARD_UNROLL iterations elsewhere.
    inputs = [x.astype(np.float32) for x in random_rollout(seed=1, horizon=40, batch=3)]
    r_t, v_tm1, v_t, terminated, truncated = inputs
    vtrace_inputs = (v_tm1, v_t, r_t, 0.9 * (1 - terminated), 0.3 * r_t, truncated)
    assert 1 < 40 // BACKWARD_UNROLL < 39
    rolled, unrolled = "40", str(40 // BACKWARD_UNROLL)
    trips, other = (rolled, unrolled) if platform == "cpu" else (unrolled, rolled)
    for fn, args in (
        (lambda *a: gae(*a, 0.9, 0.8), inputs),
        (lambda *a: vtrace(*a, lambda_=0.8), vtrace_inputs),
    ):
        text = jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,)).as_text()
        scalars = int32_constants(text)
        assert text.count("stablehlo.while") == 1
        assert trips in scalars and other not in scalars, (platform, sorted(scalars))


def test_gae_traced_coefficients_compile_once():
    rollout = [x.astype(np.float32) for x in random_rollout()]
    traces = []

    def counted(gamma, lambda_):
        traces.append(None)
        return gae(*rollout, gamma, lambda_)

    compiled = jax.jit(counted)
    first, _ = compiled(0.99, 0.95)
    second, _ = compiled(0.9, 0.5)
    assert len(traces) == 1
    np.testing.assert_allclose(second, gae_loop(*random_rollout(), 0.9, 0.5), 1e-4, 1e-5)
    assert not np.allclose(first, second)


def test_gae_stops_target_gradients():
    rollout = [x.astype(np.float32) for x in random_rollout()]

    def loss(v_tm1, stop):
        advantages, targets = gae(rollout[0], v_tm1, *rollout[2:], 0.9, 0.9, stop)
        return jnp.sum(advantages) + jnp.sum(targets)

    assert not np.any(jax.grad(loss)(rollout[1], True))
    assert np.any(jax.grad(loss)(rollout[1], False))


def test_gae_validation():
    ones = np.ones((3, 2))
    with pytest.raises(ValueError, match=r"same \[T, B\].*'v_t': \(3, 1\)"):
        gae(ones, ones, np.ones((3, 1)), ones, ones, 0.9, 0.9)
    with pytest.raises(ValueError, match="gamma must lie in \\[0, 1\\]; got 1.5"):
        gae(ones, ones, ones, ones, ones, 1.5, 0.9)
    with pytest.raises(ValueError, match="lambda_ must be a scalar; got shape \\(2,\\)"):
        gae(ones, ones, ones, ones, ones, 0.9, np.ones(2))
    with pytest.raises(ValueError, match="same \\[T, B\\]"):
        gae(1.0, 1.0, 1.0, False, False, 0.9, 0.9)
    empty = np.ones((0, 2))
    with pytest.raises(ValueError, match="with T >= 1"):
        gae(empty, empty, empty, empty, empty, 0.9, 0.9)


# One [T=5] column, n = 3, gamma = 0.5, v_t = [10, 20, 30, 40, 50];
# terminated at t=1, truncated at t=3.
N_STEP_R = [1.0, 2.0, 3.0, 4.0, 5.0]
N_STEP_V = [10.0, 20.0, 30.0, 40.0, 50.0]
N_STEP_TERMINATED = [False, True, False, False, False]
N_STEP_TRUNCATED = [False, False, False, True, False]


def test_n_step_hand_derived(jit):
    columns = [np.asarray(x)[:, None] for x in (N_STEP_R, N_STEP_TERMINATED, N_STEP_TRUNCATED)]
    rewards, discount, index = maybe_jit(lambda *a: n_step_rewards(*a, 3, 0.5), jit)(*columns)
    # t0: steps 0, 1 (terminated at 1): 1 + 0.5 * 2 = 2, no bootstrap.
    # t1: step 1 (terminated): 2, no bootstrap.
    # t2: steps 2, 3 (truncated at 3): 3 + 0.5 * 4 = 5, bootstrap 0.25 * v_t[3].
    # t3: step 3 (truncated): 4, bootstrap 0.5 * v_t[3].
    # t4: step 4 (rollout end): 5, bootstrap 0.5 * v_t[4].
    np.testing.assert_allclose(rewards[:, 0], [2.0, 2.0, 5.0, 4.0, 5.0])
    np.testing.assert_allclose(discount[:, 0], [0.0, 0.0, 0.25, 0.5, 0.5])
    np.testing.assert_array_equal(index[:, 0], [1, 1, 3, 3, 4])
    returns = maybe_jit(lambda r, v, te, tr: n_step_returns(r, v, te, tr, 3, 0.5), jit)(
        columns[0], np.asarray(N_STEP_V)[:, None], columns[1], columns[2]
    )
    # 2, 2, 5 + 0.25 * 40, 4 + 0.5 * 40, 5 + 0.5 * 50.
    np.testing.assert_allclose(returns[:, 0], [2.0, 2.0, 15.0, 24.0, 30.0])


def test_n_step_without_episode_ends_hand_derived(jit):
    # r = 1 everywhere, v_t = [2, 4, 6, 8, 10], n = 3, gamma = 0.5:
    # t0..t2: 1 + 0.5 + 0.25 = 1.75 plus 0.125 * v_t[t + 2] = 0.75, 1.0, 1.25;
    # t3: 1 + 0.5 = 1.5 plus 0.25 * 10; t4: 1 plus 0.5 * 10.
    no = np.zeros((5, 1), bool)
    v_t = np.asarray([2.0, 4.0, 6.0, 8.0, 10.0])[:, None]
    returns = maybe_jit(lambda v: n_step_returns(np.ones((5, 1)), v, no, no, 3, 0.5), jit)(v_t)
    np.testing.assert_allclose(returns[:, 0], [2.5, 2.75, 3.0, 4.0, 6.0])


def n_step_loop(r_t, v_t, terminated, truncated, n, gamma):
    """n-step returns by a Python loop, in float64."""
    horizon, batch = r_t.shape
    returns = np.zeros_like(r_t)
    for b in range(batch):
        for t in range(horizon):
            total, discount = 0.0, 1.0
            for k in range(t, min(t + n, horizon)):
                total += discount * r_t[k, b]
                discount *= gamma
                if terminated[k, b]:
                    break
                if truncated[k, b] or k == min(t + n, horizon) - 1:
                    total += discount * v_t[k, b]
                    break
            returns[t, b] = total
    return returns


@pytest.mark.parametrize("n", [1, 3, 8])
def test_n_step_returns_match_a_loop(jit, n):
    r_t, _, v_t, terminated, truncated = random_rollout(seed=3, horizon=7)
    fn = maybe_jit(lambda *a: n_step_returns(*a, n, 0.9), jit)
    returns = fn(r_t, v_t, terminated, truncated)
    expected = n_step_loop(r_t, v_t, terminated, truncated, n, 0.9)
    np.testing.assert_allclose(returns, expected, rtol=1e-4, atol=1e-5)


def test_one_step_returns_equal_gae_lambda_zero_targets(jit):
    r_t, v_tm1, v_t, terminated, truncated = random_rollout(seed=4)
    one_step = maybe_jit(lambda *a: n_step_returns(*a, 1, 0.9), jit)(
        r_t, v_t, terminated, truncated
    )
    _, targets = gae(r_t, v_tm1, v_t, terminated, truncated, 0.9, 0.0)
    np.testing.assert_allclose(one_step, targets, rtol=1e-5, atol=1e-6)


def test_n_step_validation():
    ones = np.ones((3, 2))
    with pytest.raises(ValueError, match="n must be a positive int; got 0"):
        n_step_rewards(ones, ones, ones, 0, 0.9)
    with pytest.raises(ValueError, match="n must be a positive int; got 2.0"):
        n_step_rewards(ones, ones, ones, 2.0, 0.9)
    with pytest.raises(ValueError, match=r"n_step_returns: every input.*'v_t': \(2, 3\)"):
        n_step_returns(ones, np.ones((2, 3)), ones, ones, 2, 0.9)
    with pytest.raises(ValueError, match="gamma must lie in"):
        n_step_returns(ones, ones, ones, ones, 2, -0.1)


# V-trace on two [T=3] columns.
# Column 0: one episode, gamma = 0.5, v_t[t] = v_tm1[t + 1], v_t[2] = 4 bootstraps the rollout end,
#   rho = [2, 0.5, 1].
# Column 1: truncated at t=0 (v_t[0] = 6 is the final observation's value), terminated at t=1
#   (discount 0; v_t[1] = 100 must be ignored), rho = [0.5, 3, 0.25].
VT_V_TM1 = [[1.0, 2.0], [2.0, 4.0], [3.0, 1.0]]
VT_V_T = [[2.0, 6.0], [3.0, 100.0], [4.0, 3.0]]
VT_R_T = [[1.0, 1.0], [1.0, 2.0], [2.0, 0.0]]
VT_DISCOUNT = [[0.5, 0.5], [0.5, 0.0], [0.5, 0.5]]
VT_RHOS = [[2.0, 0.5], [0.5, 3.0], [1.0, 0.25]]
VT_TRUNCATED = [[False, True], [False, False], [False, False]]


def vtrace_inputs():
    return (
        *map(np.asarray, (VT_V_TM1, VT_V_T, VT_R_T, VT_DISCOUNT)),
        np.log(np.asarray(VT_RHOS)),
        np.asarray(VT_TRUNCATED),
    )


def test_vtrace_hand_derived(jit):
    vs, pg_advantages = maybe_jit(vtrace, jit)(*vtrace_inputs())
    # Defaults: rho_bar = min(1, rho), c = min(1, rho), pg rho = min(1, rho).
    # TD errors r + discount * v_t - v_tm1:
    #   column 0: [1 + 1 - 1, 1 + 1.5 - 2, 2 + 2 - 3] = [1, 0.5, 1];
    #   column 1: [1 + 3 - 2, 2 + 0 - 4, 0 + 1.5 - 1] = [2, -2, 0.5].
    # Column 0: rho_bar = c = [1, 0.5, 1]; rho_bar * TD = [1, 0.25, 1].
    #   e2 = 1, e1 = 0.25 + 0.5 * 0.5 * 1 = 0.5, e0 = 1 + 0.5 * 1 * 0.5 = 1.25;
    #   vs = e + v_tm1 = [2.25, 2.5, 4].
    #   q = [1 + 0.5 * vs1, 1 + 0.5 * vs2, 2 + 0.5 * v_t2] = [2.25, 3, 4];
    #   pg = [1 * (2.25 - 1), 0.5 * (3 - 2), 1 * (4 - 3)] = [1.25, 0.5, 1].
    # Column 1: rho_bar = c = [0.5, 1, 0.25]; rho_bar * TD = [1, -2, 0.125].
    #   e2 = 0.125, e1 = -2 (discount 0), e0 = 1 (truncated: trace cut); vs = [3, 2, 1.125].
    #   q = [1 + 0.5 * v_t0 (truncated), 2 + 0, 0 + 0.5 * v_t2] = [4, 2, 1.5];
    #   pg = [0.5 * (4 - 2), 1 * (2 - 4), 0.25 * (1.5 - 1)] = [1, -2, 0.125].
    np.testing.assert_allclose(vs, [[2.25, 3.0], [2.5, 2.0], [4.0, 1.125]], rtol=1e-6)
    np.testing.assert_allclose(pg_advantages, [[1.25, 1.0], [0.5, -2.0], [1.0, 0.125]], rtol=1e-6)
    assert vs.dtype == pg_advantages.dtype == jnp.float32


def test_vtrace_lambda_and_thresholds_hand_derived(jit):
    fn = lambda *a: vtrace(*a, lambda_=0.5, clip_rho_threshold=2.0, clip_pg_rho_threshold=1.0)
    vs, pg_advantages = maybe_jit(fn, jit)(*vtrace_inputs())
    # rho_bar = min(2, rho), c = 0.5 * min(1, rho), pg rho = min(1, rho).
    # Column 0: rho_bar = [2, 0.5, 1], c = [0.5, 0.25, 0.5]; rho_bar * TD = [2, 0.25, 1].
    #   e2 = 1, e1 = 0.25 + 0.5 * 0.25 * 1 = 0.375, e0 = 2 + 0.5 * 0.5 * 0.375 = 2.09375;
    #   vs = [3.09375, 2.375, 4].
    #   q0 = 1 + 0.5 * (0.5 * vs1 + 0.5 * v_tm1[1]) = 1 + 0.5 * (1.1875 + 1) = 2.09375,
    #   q1 = 1 + 0.5 * (0.5 * 4 + 0.5 * 3) = 2.75, q2 = 2 + 0.5 * 4 = 4;
    #   pg = [1 * 1.09375, 0.5 * 0.75, 1 * 1] = [1.09375, 0.375, 1].
    # Column 1: rho_bar = [0.5, 2, 0.25]; rho_bar * TD = [1, -4, 0.125];
    #   e = [1, -4, 0.125] (every trace cut); vs = [3, 0, 1.125]; pg as before: [1, -2, 0.125].
    np.testing.assert_allclose(vs, [[3.09375, 3.0], [2.375, 0.0], [4.0, 1.125]], rtol=1e-6)
    np.testing.assert_allclose(
        pg_advantages, [[1.09375, 1.0], [0.375, -2.0], [1.0, 0.125]], rtol=1e-6
    )


def vtrace_reference(v_tm1, v_t, r_t, discount_t, log_rhos, truncated, lambda_, clip_rho, clip_pg):
    """V-trace by the paper's sum (Espeholt et al. 2018, eq. 1), a Python loop in float64:
    vs = V(x_s) + sum_{t >= s} (prod_{i=s}^{t-1} discount_i c_i) rho_bar_t TD_t, stopping after a
    truncation; pg = rho_pg_s (r_s + discount_s q_bootstrap_s - V(x_s))."""
    shape = v_tm1.shape
    columns = [
        np.reshape(x, (shape[0], -1)).astype(np.float64)
        for x in (v_tm1, v_t, r_t, discount_t, log_rhos, truncated)
    ]
    v_tm1, v_t, r_t, discount_t, log_rhos, truncated = columns
    rhos = np.exp(log_rhos)
    rho_bar = rhos if clip_rho is None else np.minimum(clip_rho, rhos)
    rho_pg = rhos if clip_pg is None else np.minimum(clip_pg, rhos)
    cs = lambda_ * np.minimum(1.0, rhos)
    horizon, batch = v_tm1.shape
    vs, pg = np.zeros_like(v_tm1), np.zeros_like(v_tm1)
    for b in range(batch):
        for s in range(horizon):
            total, weight = v_tm1[s, b], 1.0
            for t in range(s, horizon):
                td = r_t[t, b] + discount_t[t, b] * v_t[t, b] - v_tm1[t, b]
                total += weight * rho_bar[t, b] * td
                if truncated[t, b]:
                    break
                weight *= discount_t[t, b] * cs[t, b]
            vs[s, b] = total
        for s in range(horizon):
            if s == horizon - 1 or truncated[s, b]:
                bootstrap = v_t[s, b]
            else:
                bootstrap = lambda_ * vs[s + 1, b] + (1 - lambda_) * v_tm1[s + 1, b]
            q = r_t[s, b] + discount_t[s, b] * bootstrap
            pg[s, b] = rho_pg[s, b] * (q - v_tm1[s, b])
    return vs.reshape(shape), pg.reshape(shape)


@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (12, 5), (6, 2, 3)])
@pytest.mark.parametrize(
    "lambda_, clip_rho, clip_pg",
    [(1.0, 1.0, 1.0), (0.9, 2.0, 1.0), (0.5, None, None), (0.0, 1.0, 0.5)],
)
def test_vtrace_matches_the_papers_definition(jit, shape, lambda_, clip_rho, clip_pg):
    rng = np.random.default_rng(sum(shape))
    v_tm1, v_t, r_t, log_rhos = (rng.normal(size=shape) for _ in range(4))
    terminated = rng.random(shape) < 0.15
    truncated = ~terminated & (rng.random(shape) < 0.15)
    discount_t = 0.9 * (1 - terminated)
    inputs = [x.astype(np.float32) for x in (v_tm1, v_t, r_t, discount_t, log_rhos)]
    fn = lambda *a: vtrace(
        *a, lambda_=lambda_, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg
    )
    vs, pg_advantages = maybe_jit(fn, jit)(*inputs, truncated)
    expected_vs, expected_pg = vtrace_reference(*inputs, truncated, lambda_, clip_rho, clip_pg)
    assert vs.shape == pg_advantages.shape == shape
    np.testing.assert_allclose(vs, expected_vs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pg_advantages, expected_pg, rtol=1e-4, atol=1e-5)


def consistent_rollout(seed):
    """A random rollout whose values agree: inside an episode v_t[t] = v_tm1[t + 1]."""
    r_t, v_tm1, v_t, terminated, truncated = random_rollout(seed=seed)
    continues = ~(terminated | truncated)[:-1]
    v_t[:-1] = np.where(continues, v_tm1[1:], v_t[:-1])
    return r_t, v_tm1, v_t, terminated, truncated


@pytest.mark.parametrize("lambda_", [1.0, 0.7, 0.0])
def test_on_policy_vtrace_is_gae(jit, lambda_):
    r_t, v_tm1, v_t, terminated, truncated = consistent_rollout(seed=5)
    # rho = 1: rho_bar = 1 and c = lambda_, so V-trace is TD(lambda_) with GAE's episode ends.
    fn = lambda *a: vtrace(*a, lambda_=lambda_)
    vs, pg_advantages = maybe_jit(fn, jit)(
        v_tm1, v_t, r_t, 0.9 * (1 - terminated), np.zeros_like(r_t), truncated
    )
    advantages, targets = gae(r_t, v_tm1, v_t, terminated, truncated, 0.9, lambda_)
    np.testing.assert_allclose(vs, targets, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pg_advantages, advantages, rtol=1e-4, atol=1e-5)


def test_on_policy_vtrace_lambda_one_is_the_monte_carlo_and_long_n_step_return(jit):
    r_t, v_tm1, v_t, terminated, truncated = consistent_rollout(seed=6)
    vs, _ = maybe_jit(vtrace, jit)(
        v_tm1, v_t, r_t, 0.9 * (1 - terminated), np.zeros_like(r_t), truncated
    )
    horizon = r_t.shape[0]
    np.testing.assert_allclose(
        vs, n_step_returns(r_t, v_t, terminated, truncated, horizon, 0.9), rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(
        vs, discounted_returns(r_t, v_t, terminated, truncated, 0.9), rtol=1e-4, atol=1e-5
    )


def test_vtrace_traced_coefficients_compile_once():
    inputs = vtrace_inputs()
    traces = []

    def counted(lambda_, clip_rho, clip_pg):
        traces.append(None)
        return vtrace(
            *inputs, lambda_=lambda_, clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg
        )

    compiled = jax.jit(counted)
    compiled(1.0, 1.0, 1.0)
    second = compiled(0.5, 2.0, 1.0)
    assert len(traces) == 1
    np.testing.assert_allclose(second.vs[:, 0], [3.09375, 2.375, 4.0], rtol=1e-6)


def test_vtrace_stops_target_gradients():
    v_tm1, *rest = vtrace_inputs()

    def loss(v_tm1, log_rhos, stop):
        out = vtrace(v_tm1, *rest[:3], log_rhos, rest[4], stop_target_gradients=stop)
        return jnp.sum(out.vs) + jnp.sum(out.pg_advantages)

    for argnum in (0, 1):
        assert not np.any(jax.grad(loss, argnum)(v_tm1, rest[3], True))
        assert np.any(jax.grad(loss, argnum)(v_tm1, rest[3], False))


def test_vtrace_validation():
    ones = np.ones((3, 2))
    with pytest.raises(ValueError, match=r"vtrace: every input.*'log_rhos': \(3, 1\)"):
        vtrace(ones, ones, ones, ones, np.ones((3, 1)))
    with pytest.raises(ValueError, match=r"vtrace: every input.*'truncated': \(2, 2\)"):
        vtrace(ones, ones, ones, ones, ones, np.zeros((2, 2), bool))
    with pytest.raises(ValueError, match="vtrace: every input"):
        vtrace(1.0, 1.0, 1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match=r"lambda_ must lie in \[0, 1\]; got 1.5"):
        vtrace(ones, ones, ones, ones, ones, lambda_=1.5)
    with pytest.raises(ValueError, match="clip_rho_threshold must be positive .*; got 0.0"):
        vtrace(ones, ones, ones, ones, ones, clip_rho_threshold=0.0)
    with pytest.raises(ValueError, match="clip_pg_rho_threshold must be positive .*; got -1"):
        vtrace(ones, ones, ones, ones, ones, clip_pg_rho_threshold=-1)
    with pytest.raises(ValueError, match=r"clip_rho_threshold must be a scalar or None; got shape"):
        vtrace(ones, ones, ones, ones, ones, clip_rho_threshold=np.ones(2))
