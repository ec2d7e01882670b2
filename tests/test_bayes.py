"""Bayes-optimal prediction: posterior, constructed Bayes-softmax optimum, and Bayes risk."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import multivariate_normal

from headspec.core.attention import BayesSoftmax, Heads, Softmax, Softmax1, Uniform, Zero
from headspec.core.exact import Quadrature
from headspec.core.latent import Discrete, FlippedSpike, Gaussian, Spike
from headspec.core.stats import MCEstimate
from headspec.core.task import Task, project, sample_batch
from headspec.dynamics.bayes import (
    Posterior,
    bayes_predict,
    bayes_risk,
    constructed_bayes_softmax,
    estimate_risks,
    exact_risk_of,
    posterior,
)
from helpers import covering

DISCRETE_LAWS = {
    "one_hot_unequal": Discrete([[2.0, 0.0], [0.0, 2.0]], [0.7, 0.3]),
    "flipped_spike": FlippedSpike([1.5, 0.5]),
    "three_atoms_mixed_norms": Discrete([[3.0, 0.0], [0.0, 1.0], [-1.0, -2.0]], [0.2, 0.5, 0.3]),
    "iso_pm": Discrete([[2, 0], [-2, 0], [0, 2], [0, -2]]),
}


@pytest.mark.parametrize(
    ("name", "route"), covering(DISCRETE_LAWS, ["projected", "finite"], ids=lambda n, r: f"{n}-{r}")
)  # README tier: each law once, each route twice (helpers.covering)
def test_constructed_bayes_softmax_attains_bayes_risk_on_same_samples(name, route, key):
    law = DISCRETE_LAWS[name]
    n = 20_000 if route == "projected" else 1_000
    est, s = estimate_risks(
        key,
        law,
        L=8,
        predictors={"bayes": Posterior(law), "constructed": constructed_bayes_softmax(law)},
        n=n,
        route=route,
        D=200,
        return_samples=True,
    )
    np.testing.assert_allclose(s["constructed"], s["bayes"], rtol=1e-10, atol=1e-13)
    assert est["bayes"].mean > 0.01  # a non-trivial risk, so equality is informative


@pytest.mark.parametrize(
    "name", ["one_hot_unequal", "flipped_spike", "three_atoms_mixed_norms", "iso_pm"]
)
def test_exact_bayes_risk_agrees_with_monte_carlo(name, key):
    """R_B of a discrete law without sampling (the quadrature of its constructed Bayes-softmax)
    against the Monte-Carlo posterior risk on 2¹⁷ sequences, and a softmax head's exact risk
    against its Monte-Carlo risk on the same samples: within 3 s.e. each (the quadrature's own
    error, ~1e-8, is far below the s.e. ≈ 1e-3). Two independent routes: the posterior's
    Monte Carlo never builds heads, the quadrature never samples."""
    law = DISCRETE_LAWS[name]
    head = Heads(M=law.atoms[:1], b=jnp.zeros(1), activation=Softmax())  # one atom's head
    est = estimate_risks(key, law, L=8, predictors={"bayes": Posterior(law), "head": head},
                         n=2**17)  # fmt: skip
    for pred, mc in ((Posterior(law), est["bayes"]), (head, est["head"])):
        exact = exact_risk_of(pred, law, L=8)
        assert abs(exact - mc.mean) < 3 * mc.se, (type(pred).__name__, exact, mc)
    assert exact_risk_of(Posterior(law), law, 8) < est["head"].mean  # R_B below the one head


def test_exact_risk_of_closed_forms_and_where_there_is_none():
    """ŷ = 0 and uniform attention in closed form (equal to their per-sample losses, which do not
    vary); no exact route for a Gaussian law's posterior (no finite Bayes-softmax) nor for
    four Bayes-softmax heads with a full-rank Q (beyond the multi-head quadrature and the
    low-rank route): None, not a wrong number."""
    law = DISCRETE_LAWS["one_hot_unequal"]
    est = estimate_risks(jax.random.key(0), law, L=8, n=1000,
                         predictors={"zero": Zero(), "uniform": Uniform()})  # fmt: skip
    assert exact_risk_of(Zero(), law, 8) == est["zero"].mean == 0.5
    assert exact_risk_of(Uniform(), law, 8) == pytest.approx(est["uniform"].mean, abs=1e-15)
    gaussian = Gaussian([1.0, 0.0], var=[1.0, 0.25])
    assert exact_risk_of(Posterior(gaussian), gaussian, 8) is None
    iso = DISCRETE_LAWS["iso_pm"]
    full_rank = Heads(M=iso.atoms, Q=iso.atoms @ iso.atoms.T + np.eye(4), activation=BayesSoftmax())
    assert exact_risk_of(full_rank, iso, 8) is None


def test_the_low_rank_route_agrees_with_the_multi_head_quadrature():
    """Bayes-softmax risks by two independent quadratures: the multi-head moments (n_bayes^{H−1},
    differentiable) and the low-rank route (scores m + Bz on a grid in z ∈ R^r), at the
    constructed Bayes-softmax of two and three atoms (r = 2): within 1e-10 (measured 3e-12 and
    9e-12)."""
    from headspec.core.exact import _exact_risk, _low_rank_nodes, _low_rank_risk
    from headspec.core.model import Model
    from headspec.core.precision import float64_context

    for name in ("one_hot_unequal", "three_atoms_mixed_norms"):
        law = DISCRETE_LAWS[name]
        pred = constructed_bayes_softmax(law)
        model = Model(pred.activation, law, 8)
        with float64_context():
            M, Q, b = (jnp.asarray(x, jnp.float64) for x in (pred.M, pred.Q, pred.b))
            B, n_z = _low_rank_nodes(M, Q, law, Quadrature())
            low = _low_rank_risk(M, Q, b, jnp.asarray(B), model=model, quad=Quadrature(), n_z=n_z)
            multi = _exact_risk(M, Q, b, model, Quadrature())
        np.testing.assert_allclose(np.asarray(low[1]), np.asarray(multi[1]), atol=1e-10)


@pytest.mark.parametrize("route", ["projected", "finite"])
def test_one_softmax_head_is_bayes_optimal_for_a_spike(route, key):
    a = jnp.array([1.2, -0.8])
    law = Spike(a)
    head = Heads(M=a[None, :], b=jnp.zeros(1), activation=Softmax())
    _, s = estimate_risks(
        key,
        law,
        L=6,
        predictors={"bayes": Posterior(law), "head": head},
        n=5_000 if route == "projected" else 1_000,
        route=route,
        D=150,
        return_samples=True,
    )
    np.testing.assert_allclose(s["head"], s["bayes"], rtol=1e-10, atol=1e-13)


def test_bayes_risk_is_below_other_predictors(key):
    law = DISCRETE_LAWS["one_hot_unequal"]
    rng = np.random.default_rng(0)
    preds = {
        "bayes": Posterior(law),
        "mean_head": Heads(M=law.mean()[None, :]),
        "random_softmax1": Heads(M=rng.normal(size=(3, 2)), b=-np.ones(3), activation=Softmax1()),
        "uniform": Uniform(),
        "zero": Zero(),
    }
    _, s = estimate_risks(key, law, L=10, predictors=preds, n=50_000, return_samples=True)
    for name in preds:
        if name == "bayes":
            continue
        d = MCEstimate.of(s[name] - s["bayes"])
        assert d.mean > 5 * d.se, (name, d)


def test_posterior_matches_full_gaussian_likelihoods(key):
    """P(ε = l | X) from ν against exact D-dimensional densities summed over atoms (scipy)."""
    law = DISCRETE_LAWS["three_atoms_mixed_norms"]
    task = Task.create(key, law, L=4, D=6)
    b = sample_batch(jax.random.key(1), task, 5)
    X = np.asarray(b.X)
    Ks = np.asarray(task.Kstar)
    atoms, probs = np.asarray(law.atoms), np.asarray(law.probs)
    P = np.asarray(posterior(law, project(task, b.X)))
    for i in range(X.shape[0]):
        like = np.zeros(task.L)
        for l in range(task.L):  # hidden token at l
            for a, p in zip(atoms, probs, strict=True):
                mu = Ks @ a / np.sqrt(task.D)
                logp = multivariate_normal.logpdf(X[i, l], mean=mu) + sum(
                    multivariate_normal.logpdf(X[i, m], mean=np.zeros(task.D))
                    for m in range(task.L)
                    if m != l
                )
                like[l] += p * np.exp(logp)
        np.testing.assert_allclose(P[i], like / like.sum(), rtol=1e-9)
    yhat = np.asarray(bayes_predict(task, b.X))
    np.testing.assert_allclose(yhat, np.einsum("nl,nld->nd", P, X), rtol=1e-12)


@pytest.mark.parametrize(
    ("law", "strong"),
    [
        (Spike([1.0]), 12.0),
        (DISCRETE_LAWS["one_hot_unequal"], 12.0),
        (Gaussian([0.5, 0.0], var=[1.0, 0.25]), 60.0),  # R_B ~ 1/c²: small |θ| stays likely
    ],
    ids=["spike", "discrete", "gaussian"],
)
def test_bayes_risk_decreases_with_signal_strength(law, strong, key):
    L = 10
    scales = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]
    n = 40_000
    samples = []
    for c in scales:  # common random numbers: same key at every scale
        _, s = estimate_risks(
            key, law.scaled(c), L, {"b": Posterior(law.scaled(c))}, n=n, return_samples=True
        )
        samples.append(s["b"])
    # no signal: posterior uniform, R_B = ½(1 − 1/L) exactly
    np.testing.assert_allclose(samples[0], 0.5 * (1 - 1 / L), rtol=1e-12)
    for lo, hi in itertools.pairwise(samples):
        d = MCEstimate.of(lo - hi)
        if hi.mean() > 1e-3:
            assert d.mean > 3 * d.se, d  # strictly lower risk at the larger scale
        else:  # both already ~0: no increase
            assert d.mean > -3 * d.se - 1e-12, d
    far = bayes_risk(key, law.scaled(strong), L, n=20_000)
    assert far.mean < 2e-3, far


@pytest.mark.slow  # test tier: a law/statistical, cluster or physics test (docs/tests.md)
@pytest.mark.parametrize(
    "law",
    [DISCRETE_LAWS["one_hot_unequal"], Gaussian([1.0, 0.0], var=[1.0, 0.5])],
    ids=["discrete", "gaussian"],
)
def test_finite_d_bayes_risk_agrees_with_projected_route(law, key):
    D, L = 2000, 10
    proj = bayes_risk(jax.random.key(1), law, L, n=100_000)
    fin = bayes_risk(jax.random.key(2), law, L, n=6_000, route="finite", D=D)
    tol = 4 * np.hypot(proj.se, fin.se) + 0.2 / np.sqrt(D)
    assert abs(proj.mean - fin.mean) < tol, (proj, fin, tol)
    # and the zero predictor's finite-D risk (1 + E|θ|²/D)/2 is resolved: the test has power
    z = estimate_risks(key, law, L, {"z": Zero()}, n=2_000, route="finite", D=D)["z"]
    assert abs(z.mean - 0.5) < 5 * z.se + 1e-3


def test_constructed_optimum_refuses_continuous_laws():
    with pytest.raises(ValueError, match="discrete"):
        constructed_bayes_softmax(Gaussian([0.0]))


def test_estimate_risks_validates_arguments(key):
    law = Spike([1.0])
    with pytest.raises(ValueError, match="route"):
        estimate_risks(key, law, 4, {"z": Zero()}, n=10, route="bogus")
    with pytest.raises(ValueError, match="needs D"):
        estimate_risks(key, law, 4, {"z": Zero()}, n=10, route="finite")
    with pytest.raises(ValueError, match="predictor"):
        estimate_risks(key, law, 4, {}, n=10)
