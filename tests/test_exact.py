"""The exact D → ∞ risk (headspec.core.exact): against Monte Carlo, its gradient, its convergence.

Monte-Carlo checks draw n from a pilot's standard deviation so that the standard error is
``SE_FAST`` (``SE_SLOW`` in the slow grid), and pass when |exact − MC| ≤ 3 s.e. (the quadrature's
own error, ≤ 1e-8 here, is negligible next to it). The fast tests use small shapes that share
compiled programs; the full grid (H ∈ {1, 2, 4}, L ∈ {4, 10}, every activation and law, the
E1 setting with H = 3) is marked slow.
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from headspec.core.attention import BayesSoftmax, Softmax, Softmax1
from headspec.core.exact import Quadrature, exact_risk
from headspec.core.latent import Discrete, FlippedSpike, Gaussian, Spike
from headspec.core.model import Model
from headspec.core.observables import BaseSamples, population_risk
from headspec.dynamics.bayes import bayes_risk, constructed_bayes_softmax

SE_FAST = 4e-4
SE_SLOW = 1.5e-4
CHUNK = 2**15
MAX_CHUNKS = 128  # at most 2^22 samples per check (then the s.e. is what it is)
MC_KEY = jax.random.key(20260401)


@jax.jit
def _mc_chunk(M, Q, b, act, law, base):
    return population_risk(M, Q, b, act, law, base)


def mc_risk(M, Q, b, act, law, L, se, seed=0):
    """Monte-Carlo R with n chosen from a pilot so that its standard error is about ``se``."""
    H = M.shape[0]

    def chunk(i):
        key = jax.random.fold_in(jax.random.fold_in(MC_KEY, seed), i)
        base = BaseSamples.draw(key, law, L, H, CHUNK)
        r = _mc_chunk(M, Q, b, act, law, base)
        return float(r.mean), float(r.se) ** 2 * CHUNK  # mean, variance per sample

    pilot = chunk(0)
    k = min(MAX_CHUNKS, max(1, math.ceil(pilot[1] / se**2 / CHUNK)))
    parts = [pilot] + [chunk(i) for i in range(1, k)]
    mean = float(np.mean([p[0] for p in parts]))
    var = float(np.mean([p[1] for p in parts]))
    return mean, math.sqrt(var / (k * CHUNK))


def assert_mc(M, Q, b, act, law, L, se=SE_FAST, seed=0, quad=Quadrature()):
    exact = float(exact_risk(M, Q, b, Model(act, law, L), quad).mean)
    mean, s = mc_risk(M, Q, b, act, law, L, se, seed)
    assert abs(exact - mean) <= 3 * s, f"exact {exact:.6f}, MC {mean:.6f} ± {s:.1e}"
    return exact


# ---------------------------------------------------------------------------- states
E1_LAW = Discrete(3.0 * np.eye(3), [0.5, 0.3, 0.2])


def random_start(H, F, seed=0, sigma=0.1):
    """Small keys: Q ≈ σ² I, M ≈ σ² N(0, 1)/… (the SPEC §4 initialisation at large D)."""
    rng = np.random.default_rng(seed)
    M = sigma * rng.normal(size=(H, F)) * 0.1
    return jnp.asarray(M), jnp.asarray(M @ M.T + sigma**2 * np.eye(H)), jnp.zeros(H)


def common_phase(H, direction, scale=1.0, perp=0.5, b=0.0):
    """All heads equal, along ``direction``: Q = (|m|² + perp) 11ᵀ is singular for H ≥ 2."""
    m = scale * np.asarray(direction, float)
    M = np.tile(m, (H, 1))
    return jnp.asarray(M), jnp.asarray(np.full((H, H), m @ m + perp)), jnp.full(H, b)


def grouped(rows, perp=0.3, b=0.0):
    """Heads given by their rows of M; heads with equal rows are identical (shared Q entries)."""
    M = np.asarray(rows, float)
    same = np.all(np.isclose(M[:, None], M[None]), -1)
    Q = M @ M.T + perp * same
    return jnp.asarray(M), jnp.asarray(Q), jnp.full(len(M), b)


# ------------------------------------------------------------------ fast: against Monte Carlo
def test_one_softmax_head_on_the_spike():
    law = Spike([2.0])
    M, Q, b = jnp.array([[2.0]]), jnp.array([[4.0]]), jnp.zeros(1)
    assert_mc(M, Q, b, Softmax(), law, 10)


LAW2 = Discrete([[2.0, 0.0], [0.0, 2.0]], [0.6, 0.4])  # the fast tests' shared shapes


def test_random_start_discrete_softmax1_L4():
    M, Q, b = random_start(2, 2)
    b = jnp.full(2, Softmax1().default_bias(2, 4))  # total mass 1 at k = 0
    r = assert_mc(M, Q, b, Softmax1(), LAW2, 4)
    assert abs(r - 0.5 * (1 - 1 / 4)) < 5e-3  # nearly uniform attention


def test_common_phase_gaussian_softmax_singular_Q():
    law = Gaussian([1.0, 0.5], var=[1.0, 0.3])
    M, Q, b = common_phase(2, [1.0, 0.5])
    assert np.linalg.matrix_rank(np.asarray(Q)) == 1
    assert_mc(M, Q, b, Softmax(), law, 10)


def test_specialised_flipped_spike_softmax1():
    law = FlippedSpike([2.0, 1.0])
    M, Q, b = grouped([[2.0, 1.0], [-2.0, -1.0]], b=-1.0)
    assert_mc(M, Q, b, Softmax1(), law, 10)


def test_constructed_bayes_softmax_is_bayes_optimal():
    """SPEC §6: the constructed Bayes-softmax (Q = AAᵀ singular) attains R_B, exactly computed."""
    law = FlippedSpike([2.0, 1.0])
    heads = constructed_bayes_softmax(law)
    exact = float(exact_risk(heads.M, heads.Q, heads.b, Model(heads.activation, law, 10)).mean)
    est = bayes_risk(jax.random.key(3), law, 10, n=2**18)
    assert abs(exact - est.mean) <= 3 * est.se, (exact, est)
    # an optimum: the η-linear drift of SPEC §5 vanishes there (Q = MMᵀ singular, ∇R ≠ 0)
    R = lambda *x: exact_risk(*x, Model(heads.activation, law, 10)).mean  # noqa: E731
    RM, RQ, Rb = jax.grad(R, (0, 1, 2))(heads.M, heads.Q, heads.b)
    G = RQ + RQ.T
    X = RM @ heads.M.T + G @ heads.Q
    assert float(jnp.abs(RM).max()) > 0.01
    for d in (RM + G @ heads.M, X + X.T, Rb):
        assert float(jnp.abs(d).max()) < 1e-10


# ------------------------------------------------------------------------ fast: the gradient
def _flat_grad_check(M, Q, b, act, law, L, eps=1e-4):
    R = jax.jit(lambda M, Q, b: exact_risk(M, Q, b, Model(act, law, L)).mean)
    G = jax.grad(lambda *x: exact_risk(*x, Model(act, law, L)).mean, (0, 1, 2))(M, Q, b)
    for k, x in enumerate((M, Q, b)):
        for idx in np.ndindex(x.shape):
            e = jnp.zeros_like(x).at[idx].set(eps)
            args_p = [M, Q, b]
            args_m = [M, Q, b]
            args_p[k] = x + e
            args_m[k] = x - e
            fd = (float(R(*args_p)) - float(R(*args_m))) / (2 * eps)
            assert abs(float(G[k][idx]) - fd) < 1e-8 + 1e-6 * abs(fd), (k, idx, G[k][idx], fd)
    return G


def test_gradient_matches_central_differences_interior():
    law = LAW2
    M = jnp.array([[1.0, 0.3], [0.2, 0.8]])
    Q = M @ M.T + jnp.array([[0.5, 0.1], [0.1, 0.4]])
    b = jnp.array([-0.5, -0.8])
    G = _flat_grad_check(M, Q, b, Softmax1(), law, 4)
    assert float(jnp.abs(G[1] - G[1].T).max()) < 1e-12  # Q's entries enter symmetrically


def test_gradient_finite_and_consistent_at_singular_Q():
    """Identical heads: Q singular, √Q not differentiable, R and its gradient are smooth."""
    M, Q, b = common_phase(2, [0.6, 0.4], scale=2.0, perp=0.3, b=-1.0)
    R = lambda *x: exact_risk(*x, Model(Softmax1(), LAW2, 4)).mean  # noqa: E731
    G = jax.grad(R, (0, 1, 2))(M, Q, b)
    assert all(bool(jnp.isfinite(g).all()) for g in G)
    # identical heads get identical gradients
    assert float(jnp.abs(G[0][0] - G[0][1]).max()) < 1e-12
    assert abs(float(G[2][0] - G[2][1])) < 1e-12
    # along a direction that keeps the heads identical (and Q PSD): central differences
    dM = jnp.array([[0.3, -0.2], [0.3, -0.2]])
    dQ = dM @ M.T + M @ dM.T
    db = jnp.array([0.1, 0.1])
    eps = 1e-4
    fd = R(M + eps * dM, Q + eps * dQ, b + eps * db) - R(M - eps * dM, Q - eps * dQ, b - eps * db)
    an = sum(jnp.sum(g * d) for g, d in zip(G, (dM, dQ, db), strict=True))
    assert abs(float(fd) / (2 * eps) - float(an)) < 1e-8


# ------------------------------------------------------------------ fast: self-convergence
def test_self_convergence_to_1e9():
    law = FlippedSpike([2.5])
    M, Q, b = jnp.array([[2.0]]), jnp.array([[5.0]]), jnp.zeros(1)
    ns = (24, 48, 64, 128)
    r = [
        float(exact_risk(M, Q, b, Model(Softmax1(), law, 10), Quadrature(n_w=n, n_s=n)).mean)
        for n in ns
    ]
    errs = [abs(x - r[-1]) for x in r[:-1]]
    assert all(a > b for a, b in itertools.pairwise(errs)), errs
    assert errs[-1] < 2e-9, errs


def test_rejects_what_it_cannot_do():
    M, Q, b = jnp.ones((1, 1)), jnp.ones((1, 1)), jnp.zeros(1)
    with pytest.raises(ValueError, match="L must be"):
        exact_risk(M, Q, b, Model(Softmax(), Spike([1.0]), 1))


# ----------------------------------------------------------------------- slow: the full grid
LAWS = {
    "discrete": Discrete([[2.0, 0.0], [0.0, 2.0], [-1.0, 1.0]], [0.5, 0.3, 0.2]),
    "flipped": FlippedSpike([2.0, 1.0]),
    "gaussian": Gaussian([1.0, 0.5], var=[1.0, 0.3]),
}
ACTIVATIONS = {
    "softmax": Softmax(),
    "softmax1": Softmax1(),
    "softmax_sum": Softmax(aggregation="sum"),
    "softmax1_mean": Softmax1(aggregation="mean"),
    "bayes": BayesSoftmax(),
}


def _states(H):
    d = [2.0, 1.0]
    yield "random", random_start(H, 2, seed=H)
    yield "common", common_phase(H, d, scale=1.0)
    if H >= 2:
        rows = [[2.0, 1.0]] * (H - 1) + [[-2.0, -1.0]]  # uneven split (H−1 : 1)
        yield "uneven", grouped(rows, b=-0.5)
        rng = np.random.default_rng(H)
        M = rng.normal(size=(H, 2)) * 1.5
        yield "generic", (jnp.asarray(M), jnp.asarray(M @ M.T + 0.5 * np.eye(H)), jnp.zeros(H))


def _grid():
    """Every (law, activation, L, H): the slow tier (CI) runs one L = 4 case per (law,
    activation), H = 2 and 1 in turn, plus one H = 4 case (16 cases, ~4 min on 2 cores; L = 10 is
    in CI through test_e1_states_against_monte_carlo); the other 74 are marked ``exhaustive`` too
    (`pytest -m exhaustive`: the whole grid, ~1 h, each case 7–180 s at MC n = 2^22)."""
    rotation = [(4, 2), (4, 1)]
    keep = {("gaussian", "softmax1", 4, 4)}
    pairs = [(law, act) for law in LAWS for act in ACTIVATIONS]
    keep |= {(law, act, *rotation[i % 2]) for i, (law, act) in enumerate(pairs)}
    for law, act in pairs:
        for L in (4, 10):
            for H in (1, 2, 4):
                marks = [pytest.mark.slow]
                if (law, act, L, H) not in keep:
                    marks.append(pytest.mark.exhaustive)
                yield pytest.param(law, act, L, H, marks=marks, id=f"{law}-{act}-{L}-{H}")


@pytest.mark.parametrize(("law", "act", "L", "H"), list(_grid()))
def test_grid_against_monte_carlo(law, act, L, H):
    if act == "bayes" and H == 4:
        pytest.skip("Bayes-softmax with H = 4: n_bayes³ nodes, covered for H = 3 below")
    for i, (_, (M, Q, b)) in enumerate(_states(H)):
        assert_mc(M, Q, b, ACTIVATIONS[act], LAWS[law], L, se=SE_SLOW, seed=i)


@pytest.mark.slow
@pytest.mark.parametrize("act", ["softmax", "softmax1"])
def test_e1_states_against_monte_carlo(act):
    """E1: H = 3, L = 10, atoms 3e_f with p = .5/.3/.2: common phase and specialised heads."""
    mean = np.asarray(E1_LAW.mean())
    common = common_phase(3, mean / np.linalg.norm(mean), scale=2.0, perp=0.5)
    spec = grouped(3.0 * np.eye(3) + 0.2, perp=0.3)
    for i, (M, Q, b) in enumerate((common, spec)):
        assert_mc(M, Q, b, ACTIVATIONS[act], E1_LAW, 10, se=SE_SLOW, seed=i)


@pytest.mark.slow
def test_e1_bayes_risk_exact():
    heads = constructed_bayes_softmax(E1_LAW)
    exact = float(exact_risk(heads.M, heads.Q, heads.b, Model(heads.activation, E1_LAW, 10)).mean)
    est = bayes_risk(jax.random.key(7), E1_LAW, 10, n=2**21)
    assert abs(exact - est.mean) <= 3 * est.se, (exact, est)


@pytest.mark.slow
@pytest.mark.parametrize("act", ["softmax", "softmax1", "bayes"])
def test_hessian_finite_and_consistent_at_singular_Q(act):
    """Second derivatives (the drift's Jacobian) at identical heads: finite, and equal to
    central differences of the gradient."""
    law = Discrete([[2.0, 0.0], [0.0, 2.0]], [0.6, 0.4])
    M, Q, b = common_phase(2, [0.6, 0.4], scale=2.0, perp=0.3)
    grad = jax.grad(lambda *x: exact_risk(*x, Model(ACTIVATIONS[act], law, 10)).mean, (0, 1, 2))
    hess = jax.jacfwd(grad, (0, 1, 2))(M, Q, b)
    assert all(bool(jnp.isfinite(h).all()) for row in hess for h in row)
    d = (jnp.array([[0.3, -0.2], [0.3, -0.2]]), None, jnp.array([0.1, -0.1]))
    d = (d[0], d[0] @ M.T + M @ d[0].T, d[2])
    eps = 1e-4
    gp = grad(*(x + eps * v for x, v in zip((M, Q, b), d, strict=True)))
    gm = grad(*(x - eps * v for x, v in zip((M, Q, b), d, strict=True)))
    for i in range(3):
        hv = sum(jnp.tensordot(hess[i][j], d[j], d[j].ndim) for j in range(3))
        fd = (gp[i] - gm[i]) / (2 * eps)
        assert float(jnp.abs(hv - fd).max()) < 1e-5 * (1 + float(jnp.abs(fd).max()))


FLOOR_FALL = 1e-11  # below it the errors need not fall further


@pytest.mark.slow
@pytest.mark.parametrize("act, H", [("softmax", 2), ("softmax1", 3), ("bayes", 2), ("bayes", 3)])
def test_self_convergence_larger(act, H):
    """Errors against a finer reference fall with the nodes, to ≲ 1e-9 at the defaults, until
    they reach the floor of round-off and of the pair rule's coarser grids for small spreads
    (FLOOR_FALL: softmax H = 2 gave 1.6e-12, then 3.7e-12 at the defaults)."""
    M, Q, b = grouped([[2.0, 1.0], [-2.0, -1.0], [1.0, 2.0]][:H], b=-0.5)
    Q = Q + 0.2 * jnp.eye(H)
    law = LAWS["discrete"]
    if act == "bayes":
        nodes = [(48, 24), (64, 32), (128, 64), (192, 96)]  # (n_w_bayes, n_bayes)
        quads = [Quadrature(n_w_bayes=a, n_bayes=b) for a, b in nodes]
    else:
        nodes = [(24, 48), (32, 96), (48, 160), (96, 320)]  # (n_w, n_s); the default third
        quads = [Quadrature(n_w=a, n_s=b) for a, b in nodes]
    r = [float(exact_risk(M, Q, b, Model(ACTIVATIONS[act], law, 10), q).mean) for q in quads]
    errs = [abs(x - r[-1]) for x in r[:-1]]
    assert all(a > b or a < FLOOR_FALL for a, b in itertools.pairwise(errs)), errs
    assert errs[-1] < 1e-9, errs


def test_states_share_one_compiled_program():
    """One compiled program serves every state of the same shapes."""
    from headspec.core import exact as ex

    law = LAW2
    before = ex._exact_risk._cached._cache_size()
    for s in (0.5, 1.0, 2.0):
        M, Q, b = common_phase(2, [0.6, 0.4], scale=s)
        exact_risk(M, Q, b, Model(Softmax1(), law, 4))
    assert ex._exact_risk._cached._cache_size() - before <= 1


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_vmap_over_states_keeps_each_state_on_its_own_branch():
    """vmap over states (seeds) gives the looped values, risk and gradient, and the quadrature's
    branch on each token's score spread stays a lax.cond: a select would evaluate both branches
    for every state (what the diffusion engine's seeds once paid; quadrature.per_token)."""
    law = LAW2
    states = [common_phase(2, [0.6, 0.4], scale=0.5), grouped([[1.0, 0.2], [0.1, 1.3]])]
    M, Q, b = (jnp.stack(x) for x in zip(*states, strict=True))  # (2, …): one singular Q
    risk = lambda M, Q, b: exact_risk(M, Q, b, Model(Softmax(), law, 4)).mean  # noqa: E731
    both = jax.jit(jax.vmap(jax.value_and_grad(risk, argnums=(0, 1))))
    r, (gM, gQ) = both(M, Q, b)
    for i, s in enumerate(states):
        ri, (gMi, gQi) = jax.value_and_grad(risk, argnums=(0, 1))(*s)
        np.testing.assert_allclose(r[i], ri, rtol=1e-12)
        np.testing.assert_allclose(gM[i], gMi, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(gQ[i], gQi, rtol=1e-10, atol=1e-14)
    one = str(jax.make_jaxpr(risk)(*states[0])).count("cond[")
    batched = str(jax.make_jaxpr(jax.vmap(risk))(M, Q, b)).count("cond[")
    assert batched == one > 0  # every branch survives batching
