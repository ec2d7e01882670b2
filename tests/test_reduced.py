"""The reduced engine (headspec.dynamics.engines.reduced) has the law of the full engine (it is
exact, not an approximation).

Two-sample tests per quantity (Welch's t-test for the means, Brown–Forsythe/Levene for the
variances) at a Bonferroni-corrected level: with ~50 tests per activation and p > 1e-4 each, a
correct engine passes with probability > 99.5 %; the seeds are fixed, so the outcome is
reproducible. Summaries are invariant under permuting the heads (sorted over heads per seed).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from headspec.conventions import build
from headspec.conventions.config import SimulateConfig, load_config
from headspec.conventions.runs import simulate
from headspec.core.linalg import bartlett
from headspec.dynamics.engines import seed_keys
from headspec.dynamics.engines.reduced import overlaps

P_MIN = 1e-4
LAW = 'task.latent={kind="discrete", atoms=[[2.5, 0.0], [0.0, 2.5]], probs=[0.7, 0.3]}'


def _summaries(ds):
    """Per-seed permutation-invariant summaries at the final time: name → (S,) arrays."""
    last = ds.isel(t=-1)
    M, Q, b = last.M.values, last.Q.values, last.b.values  # (S, H, F), (S, H, H), (S, H)
    H = M.shape[1]
    iu = np.triu_indices(H, 1)
    out = {"risk": last.risk.values}
    for f in range(M.shape[2]):
        for k, v in enumerate(np.sort(M[:, :, f], axis=1).T):
            out[f"M[:, {f}] sorted #{k}"] = v
    for k, v in enumerate(np.sort(np.einsum("shh->sh", Q), axis=1).T):
        out[f"Q diag sorted #{k}"] = v
    for k, v in enumerate(np.sort(Q[:, iu[0], iu[1]], axis=1).T):
        out[f"Q off-diag sorted #{k}"] = v
    for k, v in enumerate(np.sort(b, axis=1).T):
        out[f"b sorted #{k}"] = v
    return out


def _same_law(a: dict, b: dict):
    bad = []
    for name in a:
        x, y = a[name], b[name]
        if np.std(x) == 0 and np.std(y) == 0:  # e.g. softmax biases never move
            assert np.allclose(x, y), name
            continue
        p_mean = stats.ttest_ind(x, y, equal_var=False).pvalue
        p_var = stats.levene(x, y, center="median").pvalue
        if min(p_mean, p_var) < P_MIN:
            bad.append((name, p_mean, p_var, x.mean(), y.mean(), x.std(), y.std()))
    return bad


def _run(engine, activation, D, T, seeds, seed=0, law=LAW, extra=()):
    cfg = load_config(
        SimulateConfig,
        overrides=[law, *extra, f"task.D={D}", "task.L=6", "model.H=3",
                   f'model.activation="{activation}"', f"train.T={T}", f"seeds={seeds}",
                   f"seed={seed}", f'train.engine="{engine}"', "record.points=2",
                   "record.n_test=0", "record.n_mc=512", 'train.dtype="float64"'],
    )  # fmt: skip
    return simulate(cfg)


# softmax in the default suite; the other two with -m slow (default-suite time budget)
_SLOW = pytest.mark.slow


@pytest.mark.slow  # test tier: a law/statistical, cluster or physics test (docs/tests.md)
@pytest.mark.parametrize(
    "activation",
    ["softmax", pytest.param("softmax1", marks=_SLOW), pytest.param("bayes_softmax", marks=_SLOW)],
)
def test_reduced_engine_has_the_law_of_the_full_engine(activation):
    """D = 40, H = 3, L = 6, F = 2, atoms 2.5e₁ (p = 0.7), 2.5e₂; t = 20; 400 seeds per engine
    (disjoint seed ranges, so the two samples are independent)."""
    full = _summaries(_run("full", activation, D=40, T=20.0, seeds=400, seed=0))
    red = _summaries(_run("reduced", activation, D=40, T=20.0, seeds=400, seed=10_000))
    bad = _same_law(full, red)
    assert not bad, bad
    # the test has power: the risk moved far from its initial value ½(1 − 1/L) ≈ 0.417
    assert full["risk"].mean() < 0.36


@pytest.mark.slow  # test tier: a law/statistical, cluster or physics test (docs/tests.md)
def test_reduced_engine_with_batches_and_a_gaussian_law():
    """B = 2 sequences per step, a correlated Gaussian latent law, float64, 300 seeds each."""
    law = 'task.latent={kind="gaussian", mean=[1.0, 0.5], cov=[[1.0, 0.3], [0.3, 0.5]]}'
    kw = {"law": law, "extra": ["train.batch=2"]}
    full = _summaries(_run("full", "softmax1", D=40, T=10.0, seeds=300, seed=0, **kw))
    red = _summaries(_run("reduced", "softmax1", D=40, T=10.0, seeds=300, seed=10_000, **kw))
    assert not _same_law(full, red)


@pytest.mark.slow  # a law test (power of the two-sample test): 800 runs, ~30 s
def test_two_sample_test_detects_a_different_law():
    """Power check of the same machinery: a run with another learning rate is told apart."""
    a = _summaries(_run("full", "softmax", D=40, T=20.0, seeds=400, seed=0))
    cfg_b = _run("reduced", "softmax", D=40, T=14.0, seeds=400, seed=10_000)  # less training
    assert _same_law(a, _summaries(cfg_b))


@pytest.mark.slow
def test_reduced_engine_matches_full_engine_at_d2000():
    full = _summaries(_run("full", "softmax", D=2000, T=2.0, seeds=64, seed=0))
    red = _summaries(_run("reduced", "softmax", D=2000, T=2.0, seeds=64, seed=10_000))
    assert not _same_law(full, red)


def test_initial_state_has_the_law_of_the_full_engine():
    """M(0), Q(0) of the reduced representation vs D-dimensional keys k_h ~ N(0, σ0² I_D);
    D = 30, H = 3, F = 2, σ0 = 0.5, 4000 seeds each."""
    D, H, sigma0, S = 30, 3, 0.5, 4000  # F = 2 (LAW)
    overrides = [LAW, f"task.D={D}", "task.L=6", f"model.H={H}", f"model.sigma0={sigma0}",
                 f"seeds={S}", 'train.dtype="float64"']  # fmt: skip
    cfg = load_config(SimulateConfig, overrides=overrides)
    b0 = build.initial_bias(cfg.model, cfg.task.L)
    st = build.engine(cfg).init(seed_keys(np.arange(S)), cfg.model.sigma0, b0, jnp.float64)
    U = st.frame  # (S, D, F)
    M_full = np.einsum("shd,sdf->shf", st.keys, U) / np.sqrt(D)
    Q_full = np.einsum("shd,skd->shk", st.keys, st.keys) / D
    keys = jax.vmap(lambda s: jax.random.key(s))(jnp.arange(S) + 50_000)
    red_cfg = load_config(SimulateConfig, overrides=[*overrides, 'train.engine="reduced"'])
    rs = build.engine(red_cfg).init({"init": keys}, sigma0, 0.0, jnp.float64)
    M_red, Q_red = (np.asarray(x) for x in overlaps(rs, D))
    pairs = {
        "M": (M_full.reshape(S, -1), M_red.reshape(S, -1)),
        "Q": (Q_full.reshape(S, -1), Q_red.reshape(S, -1)),
    }
    for name, (x, y) in pairs.items():
        for j in range(x.shape[1]):
            ks = stats.ks_2samp(x[:, j], y[:, j]).pvalue
            assert ks > P_MIN, (name, j, ks)
    # and the exact moments: E Q_hh = σ0², Var Q_hh = 2σ0⁴/D
    qd = np.einsum("shh->sh", Q_red).ravel()
    assert abs(qd.mean() - sigma0**2) < 5 * np.sqrt(2 * sigma0**4 / D / qd.size)
    assert abs(qd.var() / (2 * sigma0**4 / D) - 1) < 0.1


def test_reduced_engine_is_refused_when_d_is_too_small():
    with pytest.raises(Exception, match=r"needs task\.D"):
        load_config(SimulateConfig, overrides=['train.engine="reduced"', "task.D=12"])


@pytest.mark.slow  # test tier: a law/statistical, cluster or physics test (docs/tests.md)
def test_bartlett_factor_has_the_wishart_law():
    dof, n, S = 9, 4, 20_000
    keys = jax.random.split(jax.random.key(3), S)
    T = jax.vmap(lambda k: bartlett(k, dof, n))(keys)
    W = np.asarray(jnp.einsum("sij,skj->sik", T, T))
    np.testing.assert_allclose(W.mean(0), dof * np.eye(n), atol=5 * np.sqrt(2 * dof / S) * 1.5)
    assert np.allclose(np.triu(np.asarray(T[0]), 1), 0.0)
    # Var W_ii = 2·dof, Var W_ij = dof
    assert abs(W[:, 1, 1].var() / (2 * dof) - 1) < 0.06
    assert abs(W[:, 0, 2].var() / dof - 1) < 0.06


@pytest.mark.parametrize("dof", [2.5, 7.0, 100.0, 1e4, 1e6])
def test_chi2_sampler_has_the_chi2_law(dof):
    """headspec.core.linalg.chi2 (Marsaglia–Tsang with a rejection loop, float32 draws): a
    Kolmogorov–Smirnov test against χ²(dof) on 40,000 draws passes at p > 1e-4 (five dofs: a
    correct sampler fails with probability < 5·10⁻⁴); at dof = 2.5 about 5 % of the candidates
    are rejected, so the redraw loop is exercised. Power: the same test rejects χ²(1.03·dof)
    (dof ≥ 100: the shift is 0.3 … 30 standard deviations) or χ²(dof + 1) (small dof)."""
    from headspec.core.linalg import chi2

    x = np.asarray(chi2(jax.random.key(7), dof, (40_000,)))
    assert stats.kstest(x, stats.chi2(dof).cdf).pvalue > P_MIN
    wrong = 1.03 * dof if dof >= 100 else dof + 1
    if dof < 1e4:  # at 10⁴ and above the shift is too large to need a test; below, show power
        assert stats.kstest(x, stats.chi2(wrong).cdf).pvalue < P_MIN


def test_reduced_step_keeps_the_gram_matrix_exactly():
    """The re-basis of a step (Cholesky of the orthogonal parts' Gram matrix in float64) changes
    no inner product: over 256 steps from a random start, k_h·k_h' and k_h·u_f computed from the
    new coordinates equal those of the updated keys before the re-basis to 1e-12 (relative), and
    the feature directions stay the first F basis vectors."""
    cfg = load_config(SimulateConfig, overrides=[LAW, "task.D=1000", "task.L=6", "model.H=3",
                      'train.engine="reduced"', 'train.dtype="float64"'])  # fmt: skip
    eng = build.engine(cfg)
    keys = seed_keys(np.arange(1))
    st = eng.init(keys, 1.0, 0.0, jnp.float64)
    frame, C, b = st.frame[0], st.keys[0], st.b[0]

    @jax.jit
    def check(C, b, rnd):
        BL = rnd.T.shape[-1]
        z = rnd.z.at[jnp.arange(eng.B), rnd.eps, : frame.shape[0]].add(rnd.theta)
        X = jnp.concatenate([z, rnd.T], axis=-1)
        y = X[jnp.arange(eng.B), rnd.eps]

        def loss(K, b, X=X, y=y):
            from headspec.core.attention import loss_finite, predict

            return jnp.sum(loss_finite(predict(K, b, X, eng.activation, eng.D), y, eng.D))

        K_new, _, _ = eng.sgd_update(loss, jnp.pad(C, ((0, 0), (0, BL))), b, 0.0)
        frame2, C2, b2, _ = eng.step(frame, C, b, rnd, 0.0)
        G_before = K_new @ K_new.T
        err = jnp.abs(C2 @ C2.T - G_before).max() / jnp.abs(G_before).max()
        same = jnp.all(frame2 == frame) & jnp.all(
            C2[:, : frame.shape[0]] == K_new[:, : frame.shape[0]]
        )
        return C2, b2, err, same

    draw = eqx.filter_jit(eng.randoms_block)
    worst = 0.0
    for j in range(256 // eng.block):
        rnds = draw(jax.random.key(5 + j), frame)
        for i in range(eng.block):
            C, b, err, same = check(C, b, jax.tree.map(lambda x, i=i: x[i], rnds))
            assert bool(same)
            worst = max(worst, float(err))
    assert worst < 1e-12, worst


def test_reduced_chunking_with_block_draws():
    """Random numbers are drawn per block of steps aligned to multiples of the block size, so
    splitting a run at a step inside a block (10, 45) gives the same trajectory as one piece."""
    cfg = load_config(SimulateConfig, overrides=[LAW, "task.D=500", "task.L=6", "model.H=3",
                      'train.engine="reduced"', 'train.dtype="float64"'])  # fmt: skip
    eng = build.engine(cfg)
    keys = seed_keys(np.arange(2))
    st = eng.init(keys, 1.0, 0.0, jnp.float64)
    one = eng.advance(st, keys["train"], jnp.int64(0), jnp.int64(100))
    a = eng.advance(st, keys["train"], jnp.int64(0), jnp.int64(10))
    a = eng.advance(a, keys["train"], jnp.int64(10), jnp.int64(35))
    two = eng.advance(a, keys["train"], jnp.int64(45), jnp.int64(55))
    np.testing.assert_array_equal(np.asarray(one.keys), np.asarray(two.keys))
    np.testing.assert_array_equal(np.asarray(one.b), np.asarray(two.b))
