"""The diffusion engine (issue 16): its drift and noise against independent routes.

- the mean increment is the ODE's drift (per-sample route vs the contracted route);
- the noise covariance C(X) from base samples vs the covariance of real SGD increments: many
  single exact SGD steps (reduced engine, D = 10⁶) from one state;
- with the noise switched off (D huge) the engine follows the ODE from the same initial state,
  with Euler's error O(dt) (halving dt halves it);
- the same seed starts from the same initial overlaps as the reduced engine;
- the law of the runs vs the exact reduced engine: a small version here; D = 10³ and 10⁴ with 64
  seeds and the power check (noise C × 2 rejected) in studies/diffusion_vs_reduced.py (slow test).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from headspec.core.attention import Softmax, Softmax1
from headspec.core.latent import Discrete, Gaussian
from headspec.core.model import Model
from headspec.core.observables import BaseSamples
from headspec.core.precision import float64_context
from headspec.core.schedules import Constant
from headspec.dynamics import ode
from headspec.dynamics.engines import DiffusionEngine, ReducedEngine, seed_keys
from headspec.dynamics.engines.base import SGDState
from headspec.dynamics.engines.reduced import overlaps
from headspec.dynamics.eta2 import ScoreSamples
from headspec.dynamics.noise import (
    flat_sym,
    gram_rest,
    increment_moments,
    sym_size,
    unflat_sym,
)
from helpers import softmax_engine

LAW = Discrete([[2.5, 0.0], [0.0, 2.5]], [0.6, 0.4])


def _state(H=2):
    M = jnp.array([[1.0, 0.6], [0.3, 0.9]])[:H]
    Q = jnp.array([[1.86, 0.94], [0.94, 1.30]])[:H, :H]  # MMᵀ + [[0.5, 0.1], [0.1, 0.4]]
    return ode.OrderParameters(M, Q, jnp.array([0.2, -0.1])[:H])


def test_flat_sym_round_trip():
    with float64_context():
        st = _state()
        x = flat_sym(st)
        assert x.shape == (sym_size(2, 2),) == (9,)
        back = unflat_sym(x, 2, 2)
        for a, b in zip(back, st, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("law", [LAW, Gaussian([0.5, 0.0], [[1.0, 0.2], [0.2, 0.5]])])
def test_mean_increment_is_the_ode_drift(law):
    """Per-sample ψ averaged (noise module) = the contracted drift (ode.vector_field)."""
    with float64_context():
        base = BaseSamples.draw(jax.random.key(3), law, L=6, H=2, n=2048)
        st = _state()
        problem = ode.DriftProblem.sampled(Softmax1(), law, base, 1.5, 0.7)
        m = jax.jit(lambda s: increment_moments(s, problem))(st)
        f = jax.jit(lambda s: flat_sym(problem.field_at(s)))(st)
        np.testing.assert_allclose(np.asarray(m.mean), np.asarray(f), rtol=1e-10, atol=1e-12)
        R = np.asarray(m.root)
        np.testing.assert_allclose(R, R.T, atol=1e-12)


def _moments(key, n, D, exact, L=10, lr=3.0, gram_key=None):
    """Increment moments at ``_state()`` on n Sobol samples (scrambled by ``key``), with the
    finite-D Gram parts at D (None: D → ∞), the mean sampled or exact (control variate)."""
    base = BaseSamples.sobol(key, LAW, L, 2, n)
    gk = jax.random.key(100 + key if gram_key is None else gram_key)
    gram = None if D is None else gram_rest(gk, n, L, D, LAW.F + 2)
    if exact:
        method = ode.Exact(base, scores=ScoreSamples.rqmc(key, L, 2, n), cyclic=True)
        problem = ode.DriftProblem(Model(Softmax(), LAW, L), lr, lr, method)
    else:
        problem = ode.DriftProblem.sampled(Softmax(), LAW, base, lr)
    return increment_moments(_state(), problem, gram=gram)


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
@pytest.mark.parametrize(("D", "gain_M", "gain_Q"), [(100, 3, 3), (10_000, 50, 5)])
def test_exact_mean_is_the_sampled_mean_without_its_error(D, gain_M, gain_Q):
    """The exact mean (exact D → ∞ drift + the finite-D correction with its control variate) and
    the sampled mean are two routes to E ψ_D. The exact one on 2048 Sobol samples agrees with the
    sampled one on 2¹⁷ plain Monte-Carlo samples within 4 of the latter's standard errors (a
    control of the wrong mean — E rest = I instead of (D − s)/D·I — is off by up to 12 of them at
    D = 100)
    (√(diag C / n), C the increments' covariance: conservative, as discrete laws are averaged
    exactly over their atoms). Over 8 independent sets of 2048 Sobol samples the exact route's
    spread is smaller than the sampled route's by at least ``gain``: for M, whose error is only
    the correction's, O(1/(D√n)) against O(1/√n) (measured ~10× at D = 100, 400–1800× at
    D = 10⁴); for Q, where the η² term's score points (n of them) limit it, ~8–20× (the
    bounds leave room for the spread of 8-set standard deviations). The covariance is ψ_D's
    own in both, the same to round-off for the same samples."""
    with float64_context():
        ref = _moments_mc(2**17, D)
        samp = [_moments(k, 2048, D, False) for k in range(8)]
        exct = [_moments(k, 2048, D, True) for k in range(8)]
    ms = np.array([np.asarray(m.mean) for m in samp])  # (8, d)
    me = np.array([np.asarray(m.mean) for m in exct])  # (8, d)
    root = np.asarray(ref.root)
    se = np.sqrt(np.diag(root @ root.T) / 2**17)  # (d,)
    moves = slice(0, 7)  # M (4) and Q (3); softmax's db is 0 (Σ_l g_l = 0) in both routes
    z = (np.asarray(ref.mean) - me[0])[moves] / se[moves]
    assert np.all(np.abs(z) < 4), z
    gain = ms.std(0, ddof=1)[moves] / me.std(0, ddof=1)[moves]
    assert np.all(gain[:4] > gain_M) and np.all(gain[4:] > gain_Q), gain
    for a, b in zip(samp, exct, strict=True):
        np.testing.assert_allclose(np.asarray(a.root), np.asarray(b.root), rtol=1e-9, atol=1e-12)


def test_exact_drift_with_fresh_samples_is_refused():
    """diffusion.drift = "exact" has no sampling noise for resample to take out: the config
    names both fields and the fix; the engine refuses the pair too. Bayes-softmax with H ≥ 4
    is out of the exact quadrature's reach, as for theory.method. With another engine the field
    is unused and left out of the dump (the config's hash is the default's)."""
    from headspec.conventions.config import SimulateConfig, load_config
    from headspec.conventions.config.base import ConfigError

    over = ["train.engine='diffusion'", "task.D=1000", "diffusion.drift='exact'",
            "diffusion.resample=true", "diffusion.sampler='mc'"]  # fmt: skip
    with pytest.raises(ConfigError, match=r"diffusion\.resample = false.*drift = \"sampled\""):
        load_config(SimulateConfig, overrides=over)
    over = ["train.engine='diffusion'", "task.D=1000", "diffusion.drift='exact'",
            "model.activation='bayes_softmax'", "model.H=4"]  # fmt: skip
    with pytest.raises(ConfigError, match=r"model\.H = 4.*fix: use diffusion\.drift = \"sampled\""):
        load_config(SimulateConfig, overrides=over)
    plain = load_config(SimulateConfig, overrides=["task.D=1000"]).model_dump(mode="json")
    unused = load_config(SimulateConfig, overrides=["task.D=1000", "diffusion.drift='exact'"])
    assert unused.model_dump(mode="json") == plain
    base = BaseSamples.sobol(0, LAW, 10, 2, 64)
    with pytest.raises(ValueError, match="fixed samples"):
        _engine(1000, 0.1, base, 1.0, resample=True, exact=ode.Exact(base))


def test_eta2_score_points_are_their_own_setting():
    """diffusion.eta2_n sets the exact drift's η² score points apart from the base samples n
    (default: n, and then left out of the dump: older configs keep their hashes); given
    without the exact drift it is refused, naming the field and the fix."""
    from headspec.conventions import build
    from headspec.conventions.config import SimulateConfig, load_config
    from headspec.conventions.config.base import ConfigError

    over = ["train.engine='diffusion'", "task.D=1000", "diffusion.drift='exact'", "diffusion.n=64"]
    plain = load_config(SimulateConfig, overrides=over)
    assert "eta2_n" not in plain.model_dump(mode="json")["diffusion"]
    assert build.engine(plain).exact.scores.n == 64
    more = load_config(SimulateConfig, overrides=[*over, "diffusion.eta2_n=256"])
    assert more.model_dump(mode="json")["diffusion"]["eta2_n"] == 256
    assert build.engine(more).exact.scores.n == 256
    assert build.engine(more).base.n == 64
    with pytest.raises(ConfigError, match=r"diffusion\.eta2_n = 256.*fix: remove"):
        load_config(SimulateConfig, overrides=["task.D=1000", "diffusion.eta2_n=256"])


def _moments_mc(n, D, L=10, lr=3.0):
    """Sampled moments at ``_state()`` on n plain Monte-Carlo samples (independent of Sobol's)."""
    base = BaseSamples.draw(jax.random.key(77), LAW, L, 2, n)
    gram = gram_rest(jax.random.key(78), n, L, D, LAW.F + 2)
    return increment_moments(
        _state(), ode.DriftProblem.sampled(Softmax(), LAW, base, lr), gram=gram
    )


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_exact_mean_control_variate_has_mean_zero():
    """The first-order Gram term J·(G − G₀) is a control of mean 0 that takes the Wishart draws'
    effect out of the correction: at D = 10⁴, two independent Gram draws on the same base samples
    move the exact mean by < 5 % of what they move the sampled one (measured 1 %; without the
    control it would be ~100 %). At D → ∞ the exact mean is the exact drift itself."""
    with float64_context():
        e1, e2 = (np.asarray(_moments(0, 1024, 10_000, True, gram_key=k).mean) for k in (1, 2))
        s1, s2 = (np.asarray(_moments(0, 1024, 10_000, False, gram_key=k).mean) for k in (1, 2))
        inf = _moments(0, 1024, None, True)
        base = BaseSamples.sobol(0, LAW, 10, 2, 1024)
        method = ode.Exact(base, scores=ScoreSamples.rqmc(0, 10, 2, 1024), cyclic=True)
        f = ode.DriftProblem(Model(Softmax(), LAW, 10), 3.0, 3.0, method).vector_field(_state())
    assert np.linalg.norm(e1 - e2) < 0.05 * np.linalg.norm(s1 - s2)
    np.testing.assert_allclose(np.asarray(inf.mean), np.asarray(flat_sym(f)), rtol=1e-9,
                               atol=1e-12)  # fmt: skip


def _sgd_increments(st, law, L, D, lr, n_steps, key):
    """D·(X' − X) for n_steps independent single exact SGD steps (reduced engine) from X."""
    H, F = st.M.shape
    eng = softmax_engine(ReducedEngine, law, L, D, H, lr)
    W = jnp.linalg.cholesky(D * (st.Q - st.M @ st.M.T))  # (H, H) lower-triangular
    keys0 = jnp.concatenate([jnp.sqrt(D) * st.M, W], axis=1)  # (H, F + H)
    frame = jnp.eye(F, F + H)

    def one(k):
        rnd = eng.randoms(k, frame)
        fr, K, b, _ = eng.step(frame, keys0, st.b, rnd, 0.0)
        M, Q = overlaps(SGDState(fr[None], K[None], b[None], jnp.zeros(1, jnp.int64)), D)
        new = ode.OrderParameters(M[0], Q[0], b)
        return D * (flat_sym(new) - flat_sym(st))

    return jax.jit(jax.vmap(one))(jax.random.split(key, n_steps))  # (n_steps, d)


def _compare_with_sgd(psi, m, m2):
    """z-scores of the SGD increments' variance along 21 directions and of their mean against
    the moments ``m`` (``m2``: the same from independent base samples, for the estimate's own
    spread; 2 % floor)."""
    C, C2 = np.asarray(m.root @ m.root.T), np.asarray(m2.root @ m2.root.T)
    d = C.shape[0]
    U = np.concatenate([np.eye(d), np.random.default_rng(0).normal(size=(12, d))])
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    z_var = []
    for u in U:
        proj = psi @ u
        dev2 = (proj - proj.mean()) ** 2
        v_sgd, se_sgd = dev2.mean(), dev2.std(ddof=1) / np.sqrt(dev2.size)
        v_c, v_c2 = u @ C @ u, u @ C2 @ u
        if v_c < 1e-12 and v_sgd < 1e-10:  # softmax biases never move
            continue
        se_c = abs(v_c - v_c2) / np.sqrt(2) + 0.02 * v_c
        z_var.append((v_sgd - v_c) / np.hypot(se_sgd, se_c))
    se = psi.std(0, ddof=1) / np.sqrt(psi.shape[0])
    moves = se > 0
    f, f2 = np.asarray(m.mean)[moves], np.asarray(m2.mean)[moves]
    z_mean = (psi.mean(0)[moves] - f) / np.hypot(se[moves], np.abs(f - f2) / np.sqrt(2))
    return np.array(z_var), z_mean


@pytest.mark.slow  # test tier: a law/statistical, cluster or physics test (docs/tests.md)
def test_increment_moments_are_those_of_real_sgd_steps():
    """Mean and covariance of ψ from base samples (with the finite-D Gram matrix) vs 40 000 real
    single exact SGD steps (reduced engine) from one state, at D = 100, where the D → ∞ moments
    are off by several s.e.: every z-score (19 variances along directions, 7 mean entries) within 4,
    and the same comparison rejects the D → ∞ moments (the check can fail)."""
    with float64_context():
        st, L, D, lr = _state(), 6, 100, 1.5
        psi = np.asarray(_sgd_increments(st, LAW, L, D, lr, 40_000, jax.random.key(11)))
        assert np.all(np.isfinite(psi))
        s = LAW.F + 2

        @functools.partial(jax.jit, static_argnums=1)
        def mom(key, finite):
            base = BaseSamples.draw(key, LAW, L=L, H=2, n=8192)
            gram = gram_rest(jax.random.fold_in(key, 1), 8192, L, D, s) if finite else None
            return increment_moments(st, ode.DriftProblem.sampled(Softmax(), LAW, base, lr),
                                     gram=gram)  # fmt: skip

        k1, k2 = jax.random.key(4), jax.random.key(5)
        z_var, z_mean = _compare_with_sgd(psi, mom(k1, True), mom(k2, True))
        zi_var, zi_mean = _compare_with_sgd(psi, mom(k1, False), mom(k2, False))
    assert z_var.size == 19 and z_mean.size == 7  # 9 axes and 12 directions, less 2 biases
    assert np.all(np.abs(z_var) < 4) and np.all(np.abs(z_mean) < 4), (z_var, z_mean)
    assert np.max(np.abs(zi_mean)) > 4 and np.max(np.abs(zi_var)) > 4, (zi_var, zi_mean)


def _engine(D, dt, base, T, law=LAW, H=2, L=10, lr=3.0, **kw):
    return softmax_engine(DiffusionEngine, law, L, D, H, lr, base=base, dt=dt, horizon=T, **kw)


@pytest.mark.slow  # test tier: a law/statistical, cluster or physics test (docs/tests.md)
@pytest.mark.parametrize(
    ("solver", "order"), [pytest.param("euler", 1, marks=pytest.mark.slow), ("heun", 2)]
)
def test_without_noise_it_follows_the_ode(solver, order):
    """D = 10¹⁵ (noise 3·10⁻⁸): the engine is a deterministic scheme for the ODE. From the same
    initial state, the risk at t = 6 differs from the adaptive ODE's by an error that shrinks like
    dt (Euler) or dt² (Heun) when dt is halved."""
    with float64_context():
        base = BaseSamples.sobol(0, LAW, 10, 2, 512)
        rbase = BaseSamples.draw(jax.random.key(5), LAW, 10, 2, 2048)
        keys = seed_keys(np.arange(2))
        D, T = 10**15, 6.0
        errs = []
        for dt in (0.4, 0.2):
            eng = _engine(D, dt, base, T, solver=solver)
            st0 = eng.init(keys, 0.3, 0.0, jnp.float64)
            st = eng.advance(st0, keys["train"], jnp.int64(0), jnp.int64(int(T * D)))
            r = np.asarray(eng.observe(st, rbase).risk)
            y0 = ode.OrderParameters(st0.M, st0.Q, st0.b)
            problem = ode.DriftProblem.sampled(Softmax(), LAW, base, 3.0)
            obs, *_ = ode.integrate(y0, np.array([0.0, T]), problem, rbase, Constant(),
                                      solver=ode.Solver(rtol=1e-10, atol=1e-12))  # fmt: skip
            errs.append(r - obs[-1].risk)
    e1, e2 = np.abs(errs[0]), np.abs(errs[1])
    assert np.all(e1 > 1e-7), e1  # a visible discretisation error …
    np.testing.assert_allclose(e1 / e2, 2.0**order, rtol=0.3)  # … of the solver's order


def test_same_seed_same_initial_overlaps_as_the_reduced_engine():
    with float64_context():
        keys = seed_keys(np.arange(3))
        base = BaseSamples.draw(jax.random.key(0), LAW, 10, 2, 16)
        st = _engine(1000, 0.1, base, 1.0).init(keys, 0.1, 0.0, jnp.float64)
        lr = jnp.asarray(3.0)
        red = softmax_engine(ReducedEngine, LAW, 10, 1000, 2, lr)
        M, Q = overlaps(red.init(keys, 0.1, 0.0, jnp.float64), 1000)
        np.testing.assert_allclose(np.asarray(st.M), np.asarray(M), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(st.Q), np.asarray(Q), rtol=1e-12)


@pytest.mark.slow  # test tier: a law/statistical, cluster or physics test (docs/tests.md)
def test_brownian_path_does_not_depend_on_the_grid():
    """One segment 0 → 2 or two segments 0 → 1 → 2 (steps aligned): the same state."""
    with float64_context():
        base = BaseSamples.sobol(0, LAW, 10, 2, 256)
        eng = _engine(1000, 0.1, base, 2.0)
        keys = seed_keys(np.arange(2))
        st0 = eng.init(keys, 0.1, 0.0, jnp.float64)
        a = eng.advance(st0, keys["train"], jnp.int64(0), jnp.int64(2000))
        b = eng.advance(st0, keys["train"], jnp.int64(0), jnp.int64(1000))
        b = eng.advance(b, keys["train"], jnp.int64(1000), jnp.int64(1000))
        np.testing.assert_allclose(np.asarray(a.M), np.asarray(b.M), rtol=1e-9, atol=1e-12)


@pytest.mark.slow  # test tier: a law/statistical, cluster or physics test (docs/tests.md)
@pytest.mark.parametrize("orbit", [1, 2])
def test_resampled_noise_subtracts_the_sampling_noise_of_the_mean(orbit):
    """With fresh samples at every step, increment_moments(resampled = D·dt) returns the root of
    C − D·dt·V, V the covariance of the estimated mean over redraws. Independent route: the
    empirical covariance of the mean over R = 400 redraws of n = 64 samples (orbit 2: 32 draws,
    head-cyclic). A discrete law: its atoms are exact, so V is below C/n — a plain C/n would be
    off. Tolerance on tr V: 4 s.e. of an empirical covariance's trace, √(2 tr(V²)/(R − 1))."""
    with float64_context():
        st, act, R, n, r = _state(), Softmax(), 400, 64, 10.0
        base0 = _base(jax.random.key(0), n, orbit)
        R0 = np.asarray(increment_moments(st, ode.DriftProblem.sampled(act, LAW, base0, 3.0)).root)
        C = R0 @ R0  # (d, d) the root is symmetric

        @jax.jit
        @jax.vmap
        def one(key):
            base = _base(key, n, orbit)
            problem = ode.DriftProblem.sampled(act, LAW, base, 3.0)
            full = increment_moments(st, problem)
            less = increment_moments(st, problem, resampled=r, orbit=orbit)
            return full.mean, (full.root @ full.root - less.root @ less.root) / r  # (d,), (d, d)

        means, Vs = map(np.asarray, one(jax.random.split(jax.random.key(1), R)))
        V_emp = np.cov(means.T)  # (d, d) over redraws
        V_est = np.mean(Vs, axis=0)  # (d, d) the formula, averaged over the redraws
        se = np.sqrt(2 * np.trace(V_emp @ V_emp) / (R - 1))
        assert abs(np.trace(V_est) - np.trace(V_emp)) < 4 * se, (np.trace(V_est), np.trace(V_emp))
        # the exact atoms: V below C/n0 (n0 = n/orbit independent draws; the copies of a draw
        # are correlated, so n0, not n, bounds the variance of their mean)
        assert np.trace(V_est) < 0.9 * np.trace(C) / (n // orbit)
        np.testing.assert_allclose(V_est, V_emp, atol=4 * se)


def _base(key, n, orbit):
    base = BaseSamples.draw(key, LAW, L=10, H=2, n=n // orbit)
    return base.head_cyclic() if orbit > 1 else base


@pytest.mark.slow  # test tier: a law/statistical, cluster or physics test (docs/tests.md)
@pytest.mark.parametrize(
    "fresh",
    [
        pytest.param(False, id="fixed-samples"),
        pytest.param(True, id="fresh-samples"),
        pytest.param("exact", id="exact-drift"),
    ],
)
def test_law_against_the_reduced_engine_small(fresh):
    """32 seeds at D = 1000, t = 4 (H = 2 softmax heads, η = 3): the mean and variance over seeds
    of every entry of M and Q agree with the exact reduced engine (Welch / Brown–Forsythe,
    Bonferroni at family-wise level 0.01). At t = 4 the seeds' spread is mostly SGD noise (4–5×
    the initial σ0/√D = 0.003 in M), so the variances test the noise (power: the slow study).
    Fresh samples (diffusion.resample): n = 128 ≥ D·dt = 100, so up to 78 % of the noise is each
    step's sampling error of the drift, and the injected noise only the rest. The exact drift
    (diffusion.drift = "exact"): fixed samples, n = 256."""
    from headspec.conventions.config import SimulateConfig, load_config
    from headspec.conventions.runs import simulate

    common = [
        "task.latent={kind='discrete', atoms=[[2.5, 0.0], [0.0, 2.5]], probs=[0.6, 0.4]}",
        "task.L=10", "task.D=1000", "model.H=2", "train.lr=3.0", "train.T=4.0", "seeds=32",
        "record.grid='linear'", "record.points=2", "record.n_mc=64", "train.dtype='float64'",
    ]  # fmt: skip
    common += {
        True: ["diffusion.resample=true", "diffusion.sampler='mc'", "diffusion.n=128"],
        False: ["diffusion.n=512"],
        "exact": ["diffusion.drift='exact'", "diffusion.n=256"],
    }[fresh]
    res = {}
    for engine in ("reduced", "diffusion"):
        cfg = load_config(SimulateConfig, overrides=[*common, f"train.engine='{engine}'"])
        res[engine] = simulate(cfg).isel(t=-1)
    pm, pv = [], []
    for v in ("M", "Q"):
        a = res["reduced"][v].values.reshape(32, -1)
        b = res["diffusion"][v].values.reshape(32, -1)
        for j in range(a.shape[1]):
            pm.append(stats.ttest_ind(a[:, j], b[:, j], equal_var=False).pvalue)
            pv.append(stats.levene(a[:, j], b[:, j], center="median").pvalue)
    m = len(pm)
    assert min(pm) * m > 0.01 and min(pv) * m > 0.01, (min(pm), min(pv), m)
    # and the spread is mostly noise: the initial spread of M (σ0/√D) is > 3× smaller
    sd = res["diffusion"]["M"].values.reshape(32, -1).std(0)
    assert np.all(sd > 3 * 0.1 / np.sqrt(1000)), sd


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_cli_simulate_with_the_diffusion_engine(tmp_path):
    """`headspec simulate --engine diffusion` at D = 10⁹: a result of the shared schema that
    records the engine's base samples, loads back, and whose seeds have separated by O(1/√D)."""
    from typer.testing import CliRunner

    from headspec.apps.cli import app
    from headspec.conventions import results

    out = tmp_path / "d.nc"
    res = CliRunner().invoke(app, [
        "simulate", "--engine", "diffusion", "--D", "1000000000", "--T", "1", "--seeds", "2",
        "--H", "2", "--L", "5", "--set", "diffusion.n=256", "--set", "record.n_mc=64",
        "-o", str(out),
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "t = 1 / 1" in " ".join(res.output.split())  # the bar counts t, not 10⁹ steps
    ds = results.load(out)
    assert ds.attrs["engine"] == "diffusion" and ds.attrs["head_cyclic"] == 0  # exact: none
    assert results.config_of(ds)["diffusion"]["drift"] == "exact"  # the default, auto
    assert ds.attrs["n_drift"] == 256 and ds.attrs["dt"] == 0.1
    M = ds.M.isel(t=-1).values  # (seed, head, feature)
    spread = np.abs(M[0] - M[1]).max()
    assert 0 < spread < 1e-2, spread  # O(1/√D) = 3·10⁻⁵ times growth, not O(1)


@pytest.mark.slow
def test_the_law_test_detects_a_wrong_noise():
    """Power of the variance comparison: 64 seeds at D = 1000 to t = 4 (H = 2 softmax heads,
    η = 3). The pooled log-ratio of the seed variances of M and Q (diffusion / reduced) is
    consistent with 0 for the right noise and rejects the noise C × 2 (noise_factor √2), each at
    4 s.e. (s.e. of a log-variance ratio √(2/(S−1) · 2) per quantity, pooled over the 8
    quantities as if independent: conservative, they are positively correlated)."""
    from headspec.conventions.config import SimulateConfig, load_config
    from headspec.conventions.runs import simulate

    S = 64
    common = [
        "task.latent={kind='discrete', atoms=[[2.5, 0.0], [0.0, 2.5]], probs=[0.6, 0.4]}",
        "task.L=10", "task.D=1000", "model.H=2", "train.lr=3.0", "train.T=4.0", f"seeds={S}",
        "record.grid='linear'", "record.points=2", "record.n_mc=64", "train.dtype='float64'",
        "diffusion.drift='sampled'", "diffusion.n=512",  # the noise is tested, not the mean;
    ]  # fmt: skip
    # the sampled mean compiles 2–4× faster than the default exact one (this test: 34 s cold
    # against 143 s, 2026-12-05)

    def spread(engine, factor=1.0):
        over = [*common, f"train.engine='{engine}'", f"diffusion.noise_factor={float(factor)!r}"]
        ds = simulate(load_config(SimulateConfig, overrides=over)).isel(t=-1)
        x = np.concatenate([ds[v].values.reshape(S, -1) for v in ("M", "Q")], axis=1)
        return np.log(x.var(0, ddof=1))  # (8,)

    ref = spread("reduced")
    se = np.sqrt(2 * 2 / (S - 1) / ref.size)
    right = (spread("diffusion") - ref).mean()
    wrong = (spread("diffusion", np.sqrt(2.0)) - ref).mean()
    assert abs(right) < 4 * se, (right, se)
    assert wrong > 4 * se and abs(wrong - np.log(2.0)) < 4 * se, (wrong, se)


def test_auto_drift_is_exact_where_it_reaches_and_old_results_read_as_sampled():
    """diffusion.drift = "auto" (the default) resolves to exact with n = 1024, and to sampled
    with n = 8192 where exact cannot go (resample; Bayes-softmax with H ≥ 4) or for another
    engine (then left out of the dump, as before); a diffusion run's dump names its drift and
    round-trips. A result recorded before auto (no drift in its config) had the sampled mean:
    it is read so (as the reproduction's reuse check reads it): it equals a run asking for
    sampled, not one taking the default."""
    import json

    import xarray as xr

    from headspec.conventions import results
    from headspec.conventions.config import SimulateConfig, load_config

    def opts(*over):
        c = load_config(SimulateConfig, overrides=["task.D=1000", *over])
        assert SimulateConfig.model_validate_json(c.model_dump_json()) == c  # round trip
        return json.loads(c.model_dump_json())["diffusion"]

    diff = "train.engine='diffusion'"
    assert opts(diff)["drift"] == "exact" and opts(diff)["n"] == 1024
    assert opts(diff, "diffusion.n=4096")["n"] == 4096
    fresh = opts(diff, "diffusion.resample=true", "diffusion.sampler='mc'", "diffusion.n=1000")
    assert fresh["drift"] == "sampled"
    bayes = opts(diff, "model.activation='bayes_softmax'", "model.H=4")
    assert (bayes["drift"], bayes["n"]) == ("sampled", 8192)
    assert "drift" not in opts() and opts()["n"] == 8192  # the full engine: as before auto
    sampled = load_config(SimulateConfig, overrides=["task.D=1000", diff, "diffusion.n=8192",
                                                     "diffusion.drift='sampled'"])  # fmt: skip
    old = json.loads(sampled.model_dump_json())
    old["diffusion"].pop("drift")  # how such a run was recorded before auto
    ds = xr.Dataset(attrs={"kind": "simulation", "config_json": json.dumps(old)})
    assert results.config_of(ds)["diffusion"]["drift"] == "sampled"
    stored = SimulateConfig.model_validate(results.config_of(ds))
    assert stored == sampled
    default = load_config(SimulateConfig, overrides=["task.D=1000", diff, "diffusion.n=8192"])
    assert stored != default  # the default (exact) is another run
