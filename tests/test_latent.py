"""Latent laws (headspec.core.latent): moments, sampling, and log Λ against independent
computations; the PSD square root (headspec.core.linalg)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from headspec.core.latent import Discrete, FlippedSpike, Gaussian, LatentLaw, Spike
from headspec.core.linalg import psd_root

LAWS = {
    "spike": Spike([1.5, -0.5]),
    "flipped": FlippedSpike([2.0, 1.0]),
    "discrete": Discrete([[2.0, 0.0], [0.0, 1.0], [-1.0, -1.0]], [0.5, 0.3, 0.2]),
    "gaussian": Gaussian([0.5, -1.0], cov=[[1.0, 0.3], [0.3, 0.5]]),
    "gaussian_singular": Gaussian([0.0, 1.0], var=[2.0, 0.0]),
}


@pytest.mark.parametrize("name", LAWS)
def test_sample_moments_match_mean_and_cov(name, key):
    law: LatentLaw = LAWS[name]
    n = 200_000
    th = np.asarray(law.sample(key, (n,)))  # (n, F)
    assert th.shape == (n, law.F)
    mean, cov = np.asarray(law.mean()), np.asarray(law.cov())
    se_mean = np.sqrt(np.diag(cov) / n)
    assert np.all(np.abs(th.mean(0) - mean) <= 5 * se_mean + 1e-12)
    # standard error of the sample covariance entries ~ sqrt(E x²y² / n): use the 4th moments
    c = th - mean
    emp = c.T @ c / n
    se_cov = np.sqrt(((c[:, :, None] * c[:, None, :]) ** 2).mean(0) / n)
    assert np.all(np.abs(emp - cov) <= 5 * se_cov + 1e-12)


def test_discrete_frequencies_match_probs(key):
    law = LAWS["discrete"]
    n = 100_000
    idx = np.asarray(law.sample_index(key, (n,)))
    freq = np.bincount(idx, minlength=law.J) / n
    p = np.asarray(law.probs)
    assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n))


@pytest.mark.parametrize("name", ["spike", "flipped", "discrete"])
def test_discrete_log_lambda_equals_direct_sum(name):
    law = LAWS[name]
    rng = np.random.default_rng(0)
    nu = rng.normal(size=(7, law.F)) * 3
    got = np.asarray(law.log_lambda(jnp.asarray(nu)))
    atoms, probs = np.asarray(law.atoms), np.asarray(law.probs)
    for i in range(nu.shape[0]):
        total = 0.0
        for a, p in zip(atoms, probs, strict=True):
            total += p * math.exp(sum(a[f] * nu[i, f] for f in range(law.F)) - 0.5 * sum(a * a))
        assert got[i] == pytest.approx(math.log(total), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("name", ["gaussian", "gaussian_singular"])
def test_gaussian_log_lambda_matches_monte_carlo_over_theta(name, key):
    law = LAWS[name]
    n = 400_000
    th = law.sample(key, (n,))  # (n, F)
    for nu in ([0.0, 0.0], [1.0, -0.5], [-0.7, 1.2]):
        nu = jnp.asarray(nu)
        vals = np.asarray(jnp.exp(th @ nu - 0.5 * jnp.sum(th**2, -1)))  # (n,)
        mc, se = vals.mean(), vals.std(ddof=1) / np.sqrt(n)
        exact = float(jnp.exp(law.log_lambda(nu)))
        assert abs(mc - exact) <= 4 * se, (nu, mc, se, exact)
        assert se / exact < 0.01  # the test has power


def test_log_lambda_stable_for_huge_arguments():
    nu = jnp.array([[1e3, -1e3], [1e6, 0.0]])
    for law in LAWS.values():
        assert bool(jnp.all(jnp.isfinite(law.log_lambda(nu))))


def test_scaled_laws():
    assert isinstance(LAWS["spike"].scaled(2.0), Spike)
    assert isinstance(LAWS["flipped"].scaled(2.0), FlippedSpike)
    np.testing.assert_allclose(LAWS["discrete"].scaled(3.0).atoms, 3.0 * LAWS["discrete"].atoms)
    g = LAWS["gaussian"].scaled(2.0)
    np.testing.assert_allclose(g.mean(), 2.0 * LAWS["gaussian"].mean())
    np.testing.assert_allclose(g.cov(), 4.0 * LAWS["gaussian"].cov())
    z = LAWS["discrete"].scaled(0.0)
    np.testing.assert_allclose(z.log_lambda(jnp.ones((3, 2))), 0.0)  # no signal: Λ ≡ 1


def test_flipped_spike_has_zero_mean():
    np.testing.assert_allclose(LAWS["flipped"].mean(), 0.0)
    np.testing.assert_allclose(LAWS["flipped"].cov(), np.outer([2.0, 1.0], [2.0, 1.0]))


def test_psd_root_tolerates_singular_matrices():
    a = np.array([1.0, 2.0, -1.0])
    S = jnp.asarray(np.outer(a, a))  # rank 1
    R = psd_root(S)
    np.testing.assert_allclose(R @ R.T, S, atol=1e-12)
    assert np.linalg.matrix_rank(np.asarray(R), tol=1e-8) == 1
    assert psd_root(jnp.zeros((0, 0))).shape == (0, 0)


def test_laws_are_pytrees_usable_under_jit():
    f = jax.jit(lambda law, nu: law.log_lambda(nu))
    for law in LAWS.values():
        np.testing.assert_allclose(f(law, jnp.ones((2, 2))), law.log_lambda(jnp.ones((2, 2))))


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="atoms"):
        Discrete([1.0, 2.0])
    with pytest.raises(ValueError, match="probs"):
        Discrete([[1.0], [2.0]], [1.0])
    with pytest.raises(ValueError, match="cov"):
        Gaussian([0.0, 0.0], cov=[[1.0]])
