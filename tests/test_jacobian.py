"""The drift's Jacobian by Price's theorem (headspec.dynamics.jacobian), the first piece of the
saddle-to-saddle theory: it agrees with the derivative of the common-random-number drift where
both exist, and it stays finite where heads coincide or keys lie in span(K*), so the classic fixed
points can be classified: one softmax head at its optimum and the constructed Bayes-softmax
optimum are stable (no unstable mode); tests/test_fixed_points.py shows the common phase of E1
to be a saddle whose unstable mode separates the heads.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from headspec.conventions.config import TheoryConfig, load_config
from headspec.conventions.runs import solve
from headspec.core.attention import BayesSoftmax, Softmax, Softmax1
from headspec.core.latent import Discrete, Spike
from headspec.core.observables import BaseSamples
from headspec.dynamics.bayes import constructed_bayes_softmax
from headspec.dynamics.jacobian import drift_jacobian, modes
from headspec.dynamics.ode import DriftProblem, OrderParameters, drift_and_jacobian

LAW = Discrete([[2.0, 0.0], [0.0, 2.0]], [0.6, 0.4])
GENERIC = OrderParameters(  # Q − MMᵀ positive definite: both Jacobians exist
    M=jnp.array([[0.5, 0.2], [0.1, 0.6]]),
    Q=jnp.array([[0.6, 0.1], [0.1, 0.7]]),
    b=jnp.array([0.1, -0.2]),
)


def _rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b)))


@pytest.mark.parametrize("act", [Softmax(), Softmax1(), BayesSoftmax()], ids=lambda a: a.name)
def test_price_jacobian_equals_the_derivative_of_the_drift(act):
    """Two estimators of one matrix on the same 4096 Sobol samples: the Price-theorem Jacobian and
    jax.jacfwd through C^{1/2}. They differ by Monte-Carlo noise only: tolerance 3× the Price
    estimate's own standard error (relative, Frobenius). The drifts are the same integrand."""
    base = BaseSamples.sobol(0, LAW, 10, 2, 2**12)
    problem = DriftProblem.sampled(act, LAW, base)
    jac = drift_jacobian(problem, GENERIC)
    F_ad, J_ad = drift_and_jacobian(problem, GENERIC)
    assert np.allclose(jac.F, F_ad, rtol=0, atol=1e-12)
    rel_se = float(np.linalg.norm(jac.J_se) / np.linalg.norm(jac.J))
    assert _rel(jac.J, J_ad) < 3 * rel_se, (_rel(jac.J, J_ad), rel_se)


@pytest.mark.slow
def test_price_and_ad_jacobians_converge_together():
    """Their difference is noise, not bias: 16× more samples shrink it (expected ×0.25 for
    Monte Carlo, measured 0.35 for softmax-1; bound 0.6)."""
    errs = []
    for m in (10, 14):
        base = BaseSamples.sobol(0, LAW, 10, 2, 2**m)
        problem = DriftProblem.sampled(Softmax1(), LAW, base)
        jac = drift_jacobian(problem, GENERIC)
        errs.append(_rel(jac.J, drift_and_jacobian(problem, GENERIC)[1]))
    assert errs[1] < 0.6 * errs[0], errs


def _unstable(jac, H, F, sigma=3.0):
    """Modes whose real part exceeds ``sigma`` times its standard error (delta method)."""
    return [m for m in modes(jac, H, F) if not m.zero and m.eigenvalue.real > sigma * m.se]


def test_one_softmax_head_at_its_optimum_has_no_unstable_mode():
    """k = K*a (Q − MMᵀ = 0, where the square root's derivative is infinite): the η-linear drift
    vanishes within its standard errors, the Jacobian is finite, the bias is an exact zero mode
    (it has no effect on one softmax head) and no other mode grows."""
    law = Spike([2.0])
    base = BaseSamples.sobol(0, law, 10, 1, 2**13)
    at = OrderParameters(M=jnp.array([[2.0]]), Q=jnp.array([[4.0]]), b=jnp.zeros(1))
    jac = drift_jacobian(DriftProblem.sampled(Softmax(), law, base, eta2=False), at,
                         keep_samples=True)  # fmt: skip
    assert np.all(np.isfinite(jac.J))
    assert np.all(np.abs(jac.F) <= 3 * jac.F_se + 1e-12)
    ms = modes(jac, 1, 1)
    zero = [m for m in ms if m.zero]
    assert len(zero) == 1 and abs(zero[0].vector[-1]) > 0.999  # the bias direction
    assert not _unstable(jac, 1, 1)
    assert max(m.eigenvalue.real for m in ms if not m.zero) < 0  # strictly stable otherwise


def test_constructed_bayes_softmax_optimum_is_a_stable_fixed_point():
    """The Bayes-optimal Bayes-softmax of a three-atom law (keys in span(K*)): a fixed point of
    the η-linear drift within standard errors, a zero mode for the common bias shift, and no
    unstable mode."""
    law = Discrete([[2.0, 0.0], [0.0, 2.0], [-2.0, 0.0]], [0.5, 0.3, 0.2])
    h = constructed_bayes_softmax(law)
    base = BaseSamples.sobol(0, law, 10, 3, 2**12)
    jac = drift_jacobian(
        DriftProblem.sampled(BayesSoftmax(), law, base, eta2=False),
        OrderParameters(h.M, h.Q, h.b),
        keep_samples=True,
    )
    assert np.all(np.isfinite(jac.J))
    assert np.all(np.abs(jac.F) <= 3 * jac.F_se + 1e-12)
    zero = [m for m in modes(jac, 3, 2) if m.zero]
    assert len(zero) == 1
    b_part = zero[0].vector[-3:]
    assert np.allclose(b_part, b_part[0]) and abs(b_part[0]) > 0.5  # all biases shift together
    assert not _unstable(jac, 3, 2)


@pytest.mark.slow
def test_e2_growth_rates_order_the_features_by_variance():
    """E2's law (Gaussian, mean 0, Var = 6, 2; four softmax-1 heads, η = 2): heads started
    identical stay at M = 0 under the ODE. At t = 5 the Jacobian there has unstable modes along
    feature 1 growing faster than every mode along feature 2 (difference > 5 combined s.e.): the
    predicted order of pick-up, which E2 measures (feature 1 first). Measured: head-difference
    rates 0.256 ± 0.009 (feature 1) and 0.085 ± 0.004 (feature 2), ratio 3.0 = 6/2."""
    from headspec.core.latent import Gaussian

    cfg = load_config(TheoryConfig, overrides=[
        'task.latent={kind="gaussian", mean=[0.0, 0.0], var=[6.0, 2.0]}', "model.H=4",
        'model.activation="softmax1"', "train.lr=2.0", "train.T=5",
        'theory.init={kind="symmetric"}', "theory.n=1024", "record.points=4",
        "record.n_mc=256"])  # fmt: skip
    s = solve(cfg).isel(seed=0, t=-1)
    st = OrderParameters(*(jnp.asarray(s[v].values) for v in ("M", "Q", "b")))
    law = Gaussian([0.0, 0.0], var=[6.0, 2.0])
    base = BaseSamples.sobol(0, law, 10, 4, 2**11)
    jac = drift_jacobian(DriftProblem.sampled(Softmax1(), law, base, 2.0), st, keep_samples=True)
    grow = [m for m in modes(jac, 4, 2) if not m.zero and m.eigenvalue.real > 5 * m.se]
    f1 = [m for m in grow if m.feature_weights[0] > 0.9]
    f2 = [m for m in grow if m.feature_weights[1] > 0.9]
    assert f1 and f2 and grow[0] is f1[0]
    gap = f1[0].eigenvalue.real - f2[0].eigenvalue.real
    assert gap > 5 * np.hypot(f1[0].se, f2[0].se), (f1[0], f2[0])
