"""Action distributions against scipy, closed forms and Monte Carlo, with and without jit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import maybe_jit
from scipy import integrate, special, stats

from jaxlearner.algorithms.networks.distribution_spec import DistributionSpec, make_distribution
from jaxlearner.algorithms.networks.distributions import (
    Categorical,
    DiagGaussian,
    MultiCategorical,
    TanhGaussian,
)

LOGITS = np.asarray([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]], np.float32)
OTHER_LOGITS = np.asarray([[1.0, 0.0, -1.0], [2.0, -2.0, 0.5]], np.float32)


def call(method, *args, use_jit):
    """Calls ``dist.method(*args)`` through jit (the distribution as a pytree argument) or not."""
    return maybe_jit(lambda dist, *rest: getattr(dist, method)(*rest), use_jit)(*args)


def test_categorical_matches_scipy(jit):
    dist, other = Categorical(jnp.asarray(LOGITS)), Categorical(jnp.asarray(OTHER_LOGITS))
    p, q = special.softmax(LOGITS.astype(np.float64), -1), special.softmax(OTHER_LOGITS, -1)
    actions = np.asarray([2, 1])
    np.testing.assert_allclose(
        call("log_prob", dist, actions, use_jit=jit), np.log(p[[0, 1], actions]), rtol=1e-5
    )
    np.testing.assert_allclose(call("entropy", dist, use_jit=jit), stats.entropy(p, axis=-1), 1e-5)
    np.testing.assert_allclose(call("kl", dist, other, use_jit=jit), stats.entropy(p, q, axis=-1))
    np.testing.assert_array_equal(call("mode", dist, use_jit=jit), [2, 0])


def test_categorical_uniform_by_hand(jit):
    # Uniform over 4 actions: log p = -log 4, entropy = log 4, KL to itself = 0.
    dist = Categorical(jnp.zeros(4))
    assert float(call("log_prob", dist, 3, use_jit=jit)) == pytest.approx(-np.log(4), rel=1e-6)
    assert float(call("entropy", dist, use_jit=jit)) == pytest.approx(np.log(4), rel=1e-6)
    assert float(call("kl", dist, dist, use_jit=jit)) == pytest.approx(0.0, abs=1e-7)


def test_categorical_sample_frequencies(jit):
    dist = Categorical(jnp.broadcast_to(jnp.asarray(LOGITS[0]), (20_000, 3)))
    samples, log_probs = call("sample_and_log_prob", dist, jax.random.key(0), use_jit=jit)
    assert samples.shape == (20_000,) and samples.dtype == jnp.int32
    frequencies = np.bincount(np.asarray(samples), minlength=3) / 20_000
    # Binomial standard error <= sqrt(0.25 / 20000) = 0.0035; allow ~4 of them.
    np.testing.assert_allclose(frequencies, special.softmax(LOGITS[0]), atol=0.015)
    np.testing.assert_allclose(log_probs, dist.log_prob(samples))


def test_categorical_masked_logits_stay_finite(jit):
    # Action 1 masked out: p = [1/2, 0, 1/2], entropy log 2; KL to uniform over 3 = log 3 - log 2.
    dist = Categorical(jnp.asarray([0.0, -jnp.inf, 0.0]))
    uniform = Categorical(jnp.zeros(3))
    assert float(call("entropy", dist, use_jit=jit)) == pytest.approx(np.log(2), rel=1e-6)
    kl = float(call("kl", dist, uniform, use_jit=jit))
    assert kl == pytest.approx(np.log(3) - np.log(2), rel=1e-5)
    samples = dist.sample(jax.random.key(1)) if not jit else jax.jit(dist.sample)(jax.random.key(1))
    assert int(samples) != 1
    grad = jax.grad(lambda logits: Categorical(logits).entropy())(dist.logits)
    assert np.isfinite(np.asarray(grad)).all()


def test_multi_categorical_sums_components(jit):
    sizes = (2, 3)
    flat = np.asarray([[0.3, -0.2, 1.0, 0.0, -1.0]], np.float32)
    other_flat = np.asarray([[0.0, 0.0, 0.5, 0.5, 0.5]], np.float32)
    dist = maybe_jit(lambda x: MultiCategorical.from_flat(x, sizes), jit)(flat)
    other = MultiCategorical.from_flat(other_flat, sizes)
    p1, p2 = special.softmax(flat[0, :2]), special.softmax(flat[0, 2:])
    q1, q2 = special.softmax(other_flat[0, :2]), special.softmax(other_flat[0, 2:])
    log_prob = call("log_prob", dist, np.asarray([[1, 0]]), use_jit=jit)
    np.testing.assert_allclose(log_prob, [np.log(p1[1]) + np.log(p2[0])], rtol=1e-5)
    entropy = call("entropy", dist, use_jit=jit)
    np.testing.assert_allclose(entropy, [stats.entropy(p1) + stats.entropy(p2)], rtol=1e-5)
    kl = call("kl", dist, other, use_jit=jit)
    np.testing.assert_allclose(kl, [stats.entropy(p1, q1) + stats.entropy(p2, q2)], rtol=1e-5)
    np.testing.assert_array_equal(call("mode", dist, use_jit=jit), [[0, 0]])
    sample = call("sample", dist, jax.random.key(0), use_jit=jit)
    assert sample.shape == (1, 2) and sample.dtype == jnp.int32
    assert 0 <= int(sample[0, 0]) < 2 and 0 <= int(sample[0, 1]) < 3


def test_multi_categorical_validation():
    with pytest.raises(ValueError, match=r"do not split into sizes \(2, 3\); the last axis must"):
        MultiCategorical.from_flat(jnp.zeros(4), (2, 3))
    dist = MultiCategorical.from_flat(jnp.zeros(5), (2, 3))
    with pytest.raises(ValueError, match=r"expects actions \[\.\.\., 2\]"):
        dist.log_prob(jnp.zeros(3, jnp.int32))
    with pytest.raises(TypeError, match="needs another MultiCategorical; got Categorical"):
        dist.kl(Categorical(jnp.zeros(2)))


MEAN = np.asarray([[0.5, -1.0], [0.0, 2.0]], np.float32)
LOG_STD = np.asarray([[0.1, -0.5], [0.0, 0.3]], np.float32)


def test_diag_gaussian_matches_scipy(jit):
    dist = DiagGaussian(jnp.asarray(MEAN), jnp.asarray(LOG_STD))
    x = np.asarray([[0.0, 0.0], [1.0, 1.5]], np.float32)
    std = np.exp(LOG_STD.astype(np.float64))
    expected = stats.norm.logpdf(x, MEAN, std).sum(-1)
    np.testing.assert_allclose(call("log_prob", dist, x, use_jit=jit), expected, rtol=1e-5)
    expected_entropy = stats.norm.entropy(MEAN, std).sum(-1)
    np.testing.assert_allclose(call("entropy", dist, use_jit=jit), expected_entropy, rtol=1e-5)
    np.testing.assert_array_equal(call("mode", dist, use_jit=jit), MEAN)


def test_diag_gaussian_kl_closed_form_and_monte_carlo(jit):
    p = DiagGaussian(jnp.asarray(MEAN), jnp.asarray(LOG_STD))
    q = DiagGaussian(jnp.zeros(2), jnp.asarray([0.2, -0.1]))
    kl = np.asarray(call("kl", p, q, use_jit=jit))
    # Row 1 by hand, per dimension log(s_q/s_p) + (s_p^2 + (m_p - m_q)^2) / (2 s_q^2) - 1/2:
    # d0: (0.2 - 0) + (1 + 0) / (2 e^0.4) - 0.5; d1: (-0.1 - 0.3) + (e^0.6 + 4) / (2 e^-0.2) - 0.5.
    row1 = 0.2 + 1 / (2 * np.exp(0.4)) - 0.5 + (-0.4) + (np.exp(0.6) + 4) / (2 * np.exp(-0.2)) - 0.5
    assert kl[1] == pytest.approx(row1, rel=1e-5)
    # Monte Carlo: E_p[log p(x) - log q(x)] over 100k samples per row (standard error < 0.01).
    big = DiagGaussian(jnp.broadcast_to(p.mean, (100_000, 2, 2)), p.log_std)
    samples = big.sample(jax.random.key(3))
    estimate = np.mean(np.asarray(big.log_prob(samples) - q.log_prob(samples)), axis=0)
    np.testing.assert_allclose(estimate, kl, atol=0.03)


def test_diag_gaussian_state_independent_log_std_broadcasts(jit):
    dist = DiagGaussian(jnp.zeros((5, 3)), jnp.zeros(3))
    samples, log_probs = call("sample_and_log_prob", dist, jax.random.key(0), use_jit=jit)
    assert samples.shape == (5, 3) and log_probs.shape == (5,)
    # Standard normal in 3 dims: entropy 3 * 0.5 * log(2 pi e).
    np.testing.assert_allclose(dist.entropy(), np.full(5, 1.5 * np.log(2 * np.pi * np.e)), 1e-6)
    np.testing.assert_allclose(log_probs, stats.norm.logpdf(np.asarray(samples)).sum(-1), 1e-5)


def test_diag_gaussian_sample_moments():
    dist = DiagGaussian(jnp.broadcast_to(jnp.asarray([1.0, -2.0]), (50_000, 2)), jnp.log(0.5))
    samples = np.asarray(dist.sample(jax.random.key(0)))
    # Standard errors: 0.5 / sqrt(5e4) = 0.0022 for the mean.
    np.testing.assert_allclose(samples.mean(0), [1.0, -2.0], atol=0.01)
    np.testing.assert_allclose(samples.std(0), [0.5, 0.5], atol=0.01)


def tanh_log_prob_reference(y, mean, std, low=-1.0, high=1.0):
    """Change of variables in float64 with scipy: log N(u) - log(1 - tanh(u)^2) - log(scale)."""
    scale, shift = (high - low) / 2, (high + low) / 2
    u = np.arctanh((np.asarray(y, np.float64) - shift) / scale)
    return (stats.norm.logpdf(u, mean, std) - np.log1p(-(np.tanh(u) ** 2)) - np.log(scale)).sum(-1)


def test_tanh_gaussian_log_prob_matches_change_of_variables(jit):
    low, high = np.asarray([-2.0, 0.0]), np.asarray([2.0, 10.0])
    dist = TanhGaussian(
        jnp.asarray(MEAN), jnp.asarray(LOG_STD), jnp.asarray(low), jnp.asarray(high)
    )
    y = np.asarray([[0.5, 3.0], [-1.9, 9.0]], np.float32)
    expected = tanh_log_prob_reference(y, MEAN, np.exp(LOG_STD), low, high)
    np.testing.assert_allclose(call("log_prob", dist, y, use_jit=jit), expected, rtol=1e-4)
    np.testing.assert_allclose(
        call("mode", dist, use_jit=jit), np.tanh(MEAN) * (high - low) / 2 + (high + low) / 2, 1e-6
    )


def test_tanh_gaussian_sample_and_log_prob_from_pre_tanh_sample(jit):
    dist = TanhGaussian(jnp.asarray(MEAN), jnp.asarray(LOG_STD))
    y, log_prob = call("sample_and_log_prob", dist, jax.random.key(0), use_jit=jit)
    assert y.shape == (2, 2) and log_prob.shape == (2,)
    expected = tanh_log_prob_reference(y, MEAN, np.exp(LOG_STD))
    np.testing.assert_allclose(log_prob, expected, rtol=1e-3)
    np.testing.assert_array_equal(y, call("sample", dist, jax.random.key(0), use_jit=jit))


def test_tanh_gaussian_log_prob_is_stable_where_tanh_saturates(jit):
    # u ~ N(20, 0.1): tanh(u) rounds to 1 in float32, but the pre-tanh path is exact:
    # log p = log N(u) - 2 (log 2 - u - softplus(-2u)) ~= log N(u) - 2 log 2 + 2u.
    dist = TanhGaussian(jnp.asarray([20.0]), jnp.log(jnp.asarray([0.1])))
    y, log_prob = call("sample_and_log_prob", dist, jax.random.key(0), use_jit=jit)
    assert float(y[0]) == 1.0
    u = 20.0 + 0.1 * float(jax.random.normal(jax.random.key(0), (1,))[0])
    expected = stats.norm.logpdf(u, 20.0, 0.1) - 2 * np.log(2) + 2 * u
    assert float(log_prob) == pytest.approx(expected, rel=1e-5)
    # log_prob of an action on the bound clips instead of returning inf or nan.
    assert np.isfinite(float(call("log_prob", dist, jnp.asarray([1.0]), use_jit=jit)))


def test_tanh_gaussian_density_integrates_to_one():
    low, high = np.asarray([1.0]), np.asarray([3.0])
    dist = TanhGaussian(
        jnp.asarray([0.3]), jnp.asarray([-0.2]), jnp.asarray(low), jnp.asarray(high)
    )
    density = jax.jit(lambda y: jnp.exp(dist.log_prob(y[None])))
    total, _ = integrate.quad(
        lambda y: float(density(jnp.float32(y))), 1.0, 3.0, limit=200, epsabs=1e-5, epsrel=1e-5
    )
    assert total == pytest.approx(1.0, abs=1e-3)


def test_tanh_gaussian_entropy(jit):
    dist = TanhGaussian(
        jnp.asarray([0.3]), jnp.asarray([-0.2]), jnp.asarray([1.0]), jnp.asarray([3.0])
    )
    # Without a key: the pre-squash Gaussian's entropy 0.5 log(2 pi e) + log_std.
    base = float(call("entropy", dist, use_jit=jit))
    assert base == pytest.approx(0.5 * np.log(2 * np.pi * np.e) - 0.2, rel=1e-6)
    # With keys: the mean of single-sample estimates approaches -int p log p (numerical).
    keys = jax.random.split(jax.random.key(0), 20_000)
    estimates = maybe_jit(jax.vmap(lambda k: dist.entropy(k)), jit)(keys)
    density = jax.jit(lambda y: jnp.exp(dist.log_prob(y[None])))

    def integrand(y):
        p = float(density(jnp.float32(y)))
        return -p * np.log(p) if p > 0 else 0.0

    exact, _ = integrate.quad(integrand, 1.0, 3.0, limit=200, epsabs=1e-5, epsrel=1e-5)
    # The estimate's std is below 1 here; 20k samples give a standard error below 0.01.
    assert float(np.mean(estimates)) == pytest.approx(exact, abs=0.03)
    # Scale (3 - 1) / 2 = 1, so the squash alone changes the entropy, and it can only lower it.
    assert exact < base


def test_tanh_gaussian_kl_equals_base_gaussian_kl(jit):
    # KL is invariant under a shared bijection: Monte Carlo over squashed samples agrees.
    low, high = jnp.asarray([0.0, -1.0]), jnp.asarray([2.0, 1.0])
    p = TanhGaussian(jnp.asarray([0.2, -0.5]), jnp.asarray([-0.3, 0.1]), low, high)
    q = TanhGaussian(jnp.asarray([0.0, 0.0]), jnp.asarray([0.0, 0.0]), low, high)
    kl = float(call("kl", p, q, use_jit=jit))
    assert kl == pytest.approx(float(p.base.kl(q.base)), rel=1e-6)
    big = TanhGaussian(jnp.broadcast_to(p.mean, (100_000, 2)), p.log_std, low, high)
    y, log_p = big.sample_and_log_prob(jax.random.key(1))
    estimate = float(jnp.mean(log_p - q.log_prob(y)))
    assert estimate == pytest.approx(kl, abs=0.02)


def test_kl_needs_the_same_distribution_type():
    with pytest.raises(TypeError, match="DiagGaussian.kl needs another DiagGaussian"):
        DiagGaussian(jnp.zeros(2), jnp.zeros(2)).kl(Categorical(jnp.zeros(2)))


def test_make_distribution_splits_flat_inputs(jit):
    inputs = jnp.arange(6.0).reshape(1, 6) / 10
    spec = DistributionSpec("diag_gaussian", (3,))
    gaussian = maybe_jit(lambda x: make_distribution(spec, x), jit)(inputs)
    assert isinstance(gaussian, DiagGaussian)
    np.testing.assert_allclose(gaussian.mean, [[0.0, 0.1, 0.2]])
    np.testing.assert_allclose(gaussian.log_std, [[0.3, 0.4, 0.5]])
    spec = DistributionSpec("tanh_gaussian", (3,), low=(0, 0, 0), high=(1, 2, 3))
    squashed = make_distribution(spec, inputs)
    np.testing.assert_allclose(squashed.high, [1.0, 2.0, 3.0])
    multi = make_distribution(DistributionSpec("multi_categorical", (2, 4)), inputs)
    assert [x.shape for x in multi.logits] == [(1, 2), (1, 4)]
    categorical = make_distribution(DistributionSpec("categorical", (6,)), inputs)
    assert isinstance(categorical, Categorical)
    assert spec.num_inputs == 6 and spec.action_shape == (3,) and not spec.is_discrete


def test_distribution_spec_validation():
    with pytest.raises(ValueError, match="kind must be one of"):
        DistributionSpec("beta", (2,))
    with pytest.raises(ValueError, match="tuple of positive ints; got \\(0,\\)"):
        DistributionSpec("categorical", (0,))
    with pytest.raises(ValueError, match=r"takes one size \(\(n,\) or \(action_dim,\)\)"):
        DistributionSpec("diag_gaussian", (2, 3))
    with pytest.raises(ValueError, match="low/high apply only to 'tanh_gaussian'"):
        DistributionSpec("diag_gaussian", (1,), low=(0.0,), high=(1.0,))
    with pytest.raises(ValueError, match="finite with low < high"):
        DistributionSpec("tanh_gaussian", (1,), low=(1.0,), high=(1.0,))
    with pytest.raises(ValueError, match=r"expects inputs \[\.\.\., 4\]; got shape \(3,\)"):
        make_distribution(DistributionSpec("diag_gaussian", (2,)), jnp.zeros(3))
