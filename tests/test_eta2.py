"""The η² term T = E[Σ_l g_l g_lᵀ] (dynamics.eta2, core.shadows) against independent routes.

The reference is plain Monte Carlo written here from scratch: θ drawn from the law (not summed
over atoms), scores s = b + C z with C the symmetric root of Q (not the estimator's principal
root) and Mθ on the hidden token, g = jax.grad of the per-sample loss
(core.observables.sample_loss) in the scores (not the estimator's closed form). A check passes
when |a − b| ≤ Z·√(se_a² + se_b²) entrywise, Z = 4 (3–6 entries per check: a false alarm
≲ 1e-3); the checks are shown to fail when a control's exact mean is wrong, when a shadow's mean
is compared with T where they differ, and when a control is dropped at a symmetric state. Tiny
shapes (H ≤ 3, L = 5, the estimator at n ≤ 4096); the error-bar check over seeds is slow.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from headspec.core.attention import BayesSoftmax, Softmax, Softmax1
from headspec.core.latent import Discrete
from headspec.core.model import Model
from headspec.core.observables import BaseSamples, sample_loss
from headspec.core.shadows import independent_eta2, symmetric_eta2
from headspec.dynamics.eta2 import RiskGradient, ScoreSamples, eta2_term, risk_gradient
from headspec.dynamics.problem import DriftProblem, Exact, OrderParameters

Z = 4.0
L = 5
LAW = Discrete([[2.0, 0.0], [0.0, 2.0], [-1.5, 1.0]], [0.5, 0.3, 0.2])  # F = 2, J = 3
ACTIVATIONS = {"softmax": Softmax(), "softmax1": Softmax1(), "bayes": BayesSoftmax()}


def state(H: int, activation, rho: float = 0.1):
    """A generic (M, Q, b): heads neither identical nor orthogonal, Q ≻ MMᵀ (correlation rho)."""
    M = np.array([[1.2, 0.3], [0.2, 1.0], [0.6, 0.6]])[:H]  # (H, F)
    S = 0.3 * ((1 - rho) * np.eye(H) + rho * np.ones((H, H)))  # (H, H)
    b = np.array([0.1, -0.2, 0.0])[:H] + activation.default_bias(H, L)  # (H,)
    return jnp.asarray(M), jnp.asarray(M @ M.T + S), jnp.asarray(b)


def _direct_T(M, C, b, activation, key, n: int):
    """Plain MC from jax.grad of the loss in the scores: {name: (mean, s.e.)} (H, H) each, for
    T ("full") and its two shadows on the same draws: "symmetric" — every head given the heads'
    mean score; "independent" — head h's scores N(b_h, Q_hh) independently across heads (the
    hidden token's + (Mθ)_h, θ shared by the heads)."""
    H = M.shape[0]
    k_theta, k_z = jax.random.split(key)
    theta = LAW.sample(k_theta, (n,))  # (n, F)
    z = jax.random.normal(k_z, (n, H, L), jnp.float64)  # (n, H, L)
    hidden = jnp.zeros(L).at[0].set(1.0)  # (L,): the hidden token is l = 0
    shift = b[None, :, None] + (theta @ M.T)[:, :, None] * hidden  # (n, H, L)
    s = jnp.einsum("hk,nkl->nhl", C, z) + shift  # (n, H, L)
    scores = {
        "full": s,
        "symmetric": jnp.broadcast_to(s.mean(1, keepdims=True), s.shape),  # (n, H, L)
        "independent": jnp.sqrt(jnp.sum(C**2, 1))[None, :, None] * z + shift,  # (n, H, L)
    }
    grad = jax.vmap(jax.grad(lambda s: sample_loss(s, activation)))
    out = {}
    for name, x in scores.items():
        g = grad(x)  # (n, H, L)
        T = jnp.einsum("nhl,nkl->nhk", g, g)  # (n, H, H)
        out[name] = (T.mean(0), T.std(0) / np.sqrt(n))  # (H, H) ×2
    return out


_direct_jit = eqx.filter_jit(_direct_T)


def direct(M, Q, b, activation, key, n: int) -> dict:
    """:func:`_direct_T` with the symmetric root C = V √Λ Vᵀ of Q (singular Q allowed)."""
    lam, V = np.linalg.eigh(np.asarray(Q))
    C = jnp.asarray((V * np.sqrt(np.maximum(lam, 0.0))) @ V.T)  # (H, H), C Cᵀ = Q
    out = _direct_jit(M, C, b, activation, key, n)
    return {k: tuple(np.asarray(x) for x in v) for k, v in out.items()}


def zmax(a, se_a, b, se_b) -> float:
    return float(np.max(np.abs(np.asarray(a) - b) / np.sqrt(np.asarray(se_a) ** 2 + se_b**2)))


# ------------------------------------------------------------- (a) the estimator vs direct MC
N_DIRECT = 2**16


@pytest.fixture(scope="module")
def softmax3():
    """H = 3 softmax at the generic state: exact ∇R, the estimator (RQMC, n = 4096, every
    control) and direct MC of T."""
    act = Softmax()
    M, Q, b = state(3, act)
    grad = risk_gradient(M, Q, b, Model(act, LAW, L))
    est = eta2_term(M, Q, b, Model(act, LAW, L), ScoreSamples.rqmc(1, L, 3, 4096), grad=grad)
    ref = direct(M, Q, b, act, jax.random.key(7), 2 * N_DIRECT)["full"]
    return M, Q, b, act, grad, est, ref


def test_estimator_matches_direct_monte_carlo(softmax3):
    *_, est, (ref, ref_se) = softmax3
    assert zmax(est.mean, est.se, ref, ref_se) < Z


def test_a_wrong_control_mean_is_caught(softmax3):
    """With ∇R off by 10 % the controls' means are wrong and the same comparison fails."""
    M, Q, b, act, grad, _, (ref, ref_se) = softmax3
    wrong = RiskGradient(*(1.1 * x for x in grad))
    bad = eta2_term(M, Q, b, Model(act, LAW, L), ScoreSamples.rqmc(1, L, 3, 4096), grad=wrong)
    assert zmax(bad.mean, bad.se, ref, ref_se) > Z


@pytest.mark.slow  # the unit tier keeps the full estimator's check above
def test_every_control_subset_is_unbiased(softmax3):
    """No control, each one alone, on plain MC points: unbiased (vs direct MC), and every
    control lowers the error bar on the same points."""
    M, Q, b, act, grad, _, (ref, ref_se) = softmax3
    smp = ScoreSamples.mc(jax.random.key(2), L, 3, 4096)
    plain = eta2_term(M, Q, b, Model(act, LAW, L), smp, controls=())
    assert zmax(plain.mean, plain.se, ref, ref_se) < Z
    for c in ("gradient", "symmetric", "independent"):
        e = eta2_term(M, Q, b, Model(act, LAW, L), smp, grad=grad, controls=(c,))
        assert zmax(e.mean, e.se, ref, ref_se) < Z, c
        assert np.all(np.asarray(e.se) < np.asarray(plain.se)), c


# ------------------------------------------------------------- (b) the shadows' exact means
@pytest.mark.slow  # three activations × 2 shadows of MC; the unit tier keeps the two below
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_shadow_means_match_their_monte_carlo(name):
    act = ACTIVATIONS[name]
    M, Q, b = state(2, act, rho=0.4)
    mc = direct(M, Q, b, act, jax.random.key(11), N_DIRECT)
    t = float(symmetric_eta2(M, Q, b, Model(act, LAW, L)))
    T = independent_eta2(M, Q, b, Model(act, LAW, L))
    assert zmax(t, 0.0, *mc["symmetric"]) < Z
    assert zmax(T, 0.0, *mc["independent"]) < Z
    # power: neither shadow's mean is T here (heads distinct, correlated: rho = 0.4)
    assert zmax(t, 0.0, *mc["full"]) > Z
    assert zmax(T, 0.0, *mc["full"]) > Z


def test_independent_shadow_is_T_for_orthogonal_heads():
    """M's rows orthogonal, Q diagonal: the independent shadow is T itself (θ stays shared)."""
    act = Softmax1()
    M = jnp.array([[1.5, 0.0], [0.0, 1.1]])
    Q, b = M @ M.T + 0.2 * jnp.eye(2), jnp.full(2, act.default_bias(2, L))
    T = independent_eta2(M, Q, b, Model(act, LAW, L))
    assert zmax(T, 0.0, *direct(M, Q, b, act, jax.random.key(3), N_DIRECT)["full"]) < Z


# ---------------------------------------------------- (c) exact at an exactly symmetric state
@pytest.mark.parametrize("name", ["softmax", "bayes"])
def test_symmetric_control_is_exact_at_a_symmetric_state(name):
    """Identical heads (singular Q): the shadow is the integrand, the estimate the exact t."""
    act = ACTIVATIONS[name]
    m = jnp.array([1.0, 0.7])
    M, Q, b = jnp.stack([m, m]), jnp.full((2, 2), m @ m), jnp.zeros(2)
    t = float(symmetric_eta2(M, Q, b, Model(act, LAW, L)))
    smp = ScoreSamples.rqmc(5, L, 2, 1024)
    est = eta2_term(M, Q, b, Model(act, LAW, L), smp, controls=("symmetric",))
    np.testing.assert_allclose(np.asarray(est.mean), t, rtol=1e-10)
    # no sampling error left: the s.e. is the bound on the exact mean's quadrature error alone
    # (mean_tol 1e-8 × 0.1 × β = 1)
    assert float(np.max(est.se)) < 1.01e-9
    # without the control the same points carry a sampling error
    plain = eta2_term(M, Q, b, Model(act, LAW, L), smp, controls=())
    assert np.max(np.abs(np.asarray(plain.mean) - t)) > 1e-6 * t
    # and t is T (direct MC)
    assert zmax(t, 0.0, *direct(M, Q, b, act, jax.random.key(9), N_DIRECT)["full"]) < Z


# ------------------------------------------------------------------- (d) an honest error bar
@pytest.mark.slow
@pytest.mark.parametrize("controls", [(), ("gradient", "symmetric", "independent")])
@pytest.mark.parametrize("kind", ["rqmc", "mc"])
def test_reported_se_matches_the_spread_over_seeds(kind, controls):
    """Over 24 independent randomisations the spread of the estimates is the mean reported s.e.
    (within 2× per entry, 25 % pooled). For plain RQMC, the s.e. the same points would report
    if taken as i.i.d. (their spread / √n) fails it: ≈ 3× too large (measured: spread/se
    0.7–1.0 entrywise, spread/naive 0.24–0.38)."""
    act = Softmax()
    M, Q, b = state(3, act)
    grad = risk_gradient(M, Q, b, Model(act, LAW, L))
    ests, ses, naive = [], [], []
    for seed in range(24):
        if kind == "rqmc":
            smp = ScoreSamples.rqmc(100 + seed, L, 3, 4096)
        else:
            smp = ScoreSamples.mc(jax.random.key(100 + seed), L, 3, 4096)
        e = eta2_term(M, Q, b, Model(act, LAW, L), smp, grad=grad, controls=controls)
        ests.append(np.asarray(e.mean))
        ses.append(np.asarray(e.se))
        if kind == "rqmc" and not controls:
            iid = ScoreSamples(z=smp.z, iid=True)
            naive.append(np.asarray(eta2_term(M, Q, b, Model(act, LAW, L), iid, controls=()).se))
    iu = np.triu_indices(3)
    spread = np.std(ests, axis=0, ddof=1)[iu]  # (6,)
    reported = np.mean(ses, axis=0)[iu]  # (6,)
    ratio = spread / reported
    assert np.all((ratio > 0.5) & (ratio < 2.0)), ratio
    # pooled over the entries: within 25 % (24 seeds × 6 entries, correlated)
    assert 0.75 < np.sqrt(np.mean(spread**2) / np.mean(reported**2)) < 1.33
    if naive:
        assert np.sqrt(np.mean(spread**2) / np.mean(np.mean(naive, axis=0)[iu] ** 2)) < 0.5


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_the_error_bar_stays_honest_with_many_controls_per_sample():
    """With H = 6 heads the gradient control alone is 56 controls; at n = 128 score points (16
    per replicate) the in-sample regression fits the replicates' own noise, and the replicates'
    spread then understated the error 2.4× (measured; at H = 16, n = 1024 — the default n — 2.5×,
    with |z| up to 14). Each replicate's spread is now taken with β from the other replicates
    (cross-fitted; the mean keeps the full β): rms error / mean reported s.e. 1.11 here. Bound
    1.6: 8 seeds × 21 entries (correlated) estimate that ratio to ≈ ±20 %."""
    act = Softmax()
    H = 6
    rng = np.random.default_rng(0)
    M = np.tile([[1.3, 0.6]], (H, 1)) + 0.05 * rng.normal(size=(H, 2))
    Q = M @ M.T + 0.05 * np.eye(H) + 0.01 * np.diag(rng.uniform(size=H))
    M, Q, b = jnp.asarray(M), jnp.asarray(Q), jnp.zeros(H)
    model = Model(act, Discrete([[3.0, 0.0], [0.0, 3.0]], [0.7, 0.3]), L)
    grad = risk_gradient(M, Q, b, model)
    controls = ("gradient", "symmetric")
    ref = eta2_term(M, Q, b, model, ScoreSamples.rqmc(999, L, H, 2**14, 16), grad=grad,
                    controls=controls)  # fmt: skip
    err2, se2 = [], []
    for seed in range(8):
        e = eta2_term(M, Q, b, model, ScoreSamples.rqmc(100 + seed, L, H, 128), grad=grad,
                      controls=controls)  # fmt: skip
        err2.append(np.sum((np.asarray(e.mean) - np.asarray(ref.mean)) ** 2))
        se2.append(np.sum(np.asarray(e.se) ** 2))
    assert np.sqrt(np.mean(err2) / np.mean(se2)) < 1.6


# ------------------------------------------------- (e) the exact drift's η² term (problem.Exact)
@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_the_exact_drift_takes_its_eta2_term_from_the_estimator():
    """problem.Exact with ``scores``: dM and the η-linear dQ as without them, the η² term the
    estimator's (∇R passed on); it agrees with the ``base`` route (plain Sobol over the law)
    within Z s.e. and its s.e. is ≥ 5× smaller (a Drift still on the base route fails that)."""
    act, eta = Softmax(), 2.0
    M, Q, b = state(3, act)
    st = OrderParameters(M, Q, b)
    scores = ScoreSamples.rqmc(1, L, 3, 4096)
    base = BaseSamples.sobol(0, LAW, L, 3, 4096)
    via_base = DriftProblem(Model(act, LAW, L), eta, method=Exact(base)).drift(st)
    via_scores = DriftProblem(Model(act, LAW, L), eta, method=Exact(base, scores=scores)).drift(st)
    np.testing.assert_array_equal(np.asarray(via_scores.dM), np.asarray(via_base.dM))
    lin = DriftProblem(Model(act, LAW, L), eta, method=Exact(base), eta2=False).drift(st).dQ
    T = eta2_term(
        M, Q, b, Model(act, LAW, L), scores, grad=risk_gradient(M, Q, b, Model(act, LAW, L))
    )
    np.testing.assert_allclose(via_scores.dQ, lin + eta**2 * T.mean, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(via_scores.dQ_se, eta**2 * T.se, rtol=1e-10, atol=1e-15)
    assert zmax(via_scores.dQ, via_scores.dQ_se, via_base.dQ, via_base.dQ_se) < Z
    assert float(np.max(via_scores.dQ_se)) < float(np.max(via_base.dQ_se)) / 5


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_heads_alike_stay_alike_under_the_cyclic_exact_vector_field():
    """Heads alike in distribution (same M rows, exchangeable Q = c11ᵀ + εI): with ``cyclic``
    the estimate is averaged over the heads' relabellings, so the ODE's field moves every head
    alike (to round-off), as head-cyclic base samples do; one estimate alone breaks that at its
    error's size (power: measured 1.7e-5 here)."""
    act = Softmax()
    m = jnp.array([1.0, 0.7])
    M, Q, b = jnp.stack([m, m, m]), jnp.full((3, 3), m @ m) + 1e-3 * jnp.eye(3), jnp.zeros(3)
    st, base = OrderParameters(M, Q, b), BaseSamples.sobol(0, LAW, L, 3, 1024)
    scores = ScoreSamples.rqmc(2, L, 3, 1024)

    def spread(method):
        f = DriftProblem(Model(act, LAW, L), 3.0, method=method).vector_field(st)
        iu = np.triu_indices(3, 1)
        return max(float(np.ptp(f.M, axis=0).max()), float(np.ptp(np.diag(f.Q))),
                   float(np.ptp(np.asarray(f.Q)[iu])))  # fmt: skip

    assert spread(Exact(base, scores=scores, cyclic=True)) < 1e-11
    assert spread(Exact(base, scores=scores)) > 1e-7
