"""The D → ∞ theory of SPEC §5–§6 (the ODE of headspec.dynamics.ode, its initial states in
headspec.dynamics.initial, ``solve`` in headspec.conventions.runs), checked against independent
references.

Every statistical tolerance is a multiple of a Monte-Carlo standard error that the test computes
(4 s.e. for agreement; > 6 s.e. to show that a check has power), plus, where stated, a
deterministic allowance. Shapes are reused so that JAX compiles each function few times.

- Bayes-softmax optimum (§6): the η-linear drift vanishes there (and not at perturbed states),
  and the drift's risk is the Bayes risk of the posterior on the same base samples.
- One softmax head on a spike law: the drift equals plain finite-D SGD increments (D = 4000).
- ``drift_and_jacobian`` against central finite differences; its refusal at singular Q − MMᵀ.
- Symmetric and perturbed initial states, and the exact law of the perturbed initial state.
- Sobol and plain Monte-Carlo base samples agree within their standard errors.
- The ``headspec theory`` command refuses malformed input with exit code 2.
- ``solve`` started at the Bayes-softmax optimum records the Bayes risk at t = 0.
"""

from __future__ import annotations

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

from headspec.apps.cli import app
from headspec.conventions.config import TheoryConfig, load_config
from headspec.conventions.runs import solve
from headspec.core.attention import BayesSoftmax, Softmax, loss_finite, predict
from headspec.core.latent import Discrete, FlippedSpike, Gaussian, Spike
from headspec.core.linalg import bartlett
from headspec.core.observables import BaseSamples
from headspec.core.task import Task, sample_batch
from headspec.dynamics.bayes import constructed_bayes_softmax, posterior
from headspec.dynamics.initial import perturbed_state
from headspec.dynamics.ode import (
    DriftProblem,
    OrderParameters,
    drift_and_jacobian,
    flatten,
    unflatten,
)
from helpers import cli_output

L = 6  # tokens per sequence in every test (one compilation per law shape)


def _drift(state, act, law, base, lr=1.0, lr_b=None, eta2=True):
    """The sampled drift on ``base`` (one compiled program per shapes and activation)."""
    return DriftProblem.sampled(act, law, base, lr, lr_b, eta2).drift(state)


def _components(d) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, value, standard error) of each drift component, as numpy arrays."""
    return [
        ("dM", np.asarray(d.dM), np.asarray(d.dM_se)),
        ("dQ", np.asarray(d.dQ), np.asarray(d.dQ_se)),
        ("db", np.asarray(d.db), np.asarray(d.db_se)),
    ]


# ============================================================================ 1. Bayes optimum
LAWS = {
    "unequal-probs": Discrete([[2.0, 0.0], [0.0, 2.0]], [0.6, 0.4]),
    "flipped-spike": FlippedSpike([2.0]),
    "three-atoms": Discrete([[2.0, 0.0], [0.0, 1.5], [-1.5, -1.5]], [0.5, 0.3, 0.2]),
}
N_BAYES = 2**13


def _optimum(law) -> OrderParameters:
    """SPEC §6: one head per atom, M = atoms, Q = atoms·atomsᵀ, b = log p − |a|²/2."""
    h = constructed_bayes_softmax(law)
    A = np.asarray(law.atoms)
    np.testing.assert_allclose(np.asarray(h.M), A, rtol=0, atol=0)
    np.testing.assert_allclose(np.asarray(h.Q), A @ A.T, rtol=0, atol=1e-15)
    b = np.log(np.asarray(law.probs)) - 0.5 * np.sum(A**2, axis=1)
    np.testing.assert_allclose(np.asarray(h.b), b, rtol=0, atol=1e-15)
    return OrderParameters(h.M, h.Q, h.b)


def _posterior_risk(law, base: BaseSamples) -> float:
    """R_B on the base samples: P_l ∝ Λ(ν_l), ν = base.nu + θ on token 0, exact over atoms."""
    total = 0.0
    target = np.eye(L)[0]
    for a, p in zip(np.asarray(law.atoms), np.asarray(law.probs), strict=True):
        nu = np.asarray(base.nu).copy()  # (n, L, F)
        nu[:, 0, :] += a
        P = np.asarray(posterior(law, jnp.asarray(nu)))  # (n, L)
        total += p * np.mean(0.5 * np.sum((P - target) ** 2, axis=-1))
    return float(total)


@pytest.mark.parametrize("name", list(LAWS))
def test_bayes_softmax_optimum_is_a_fixed_point_of_the_linear_drift(name):
    law = LAWS[name]
    act = BayesSoftmax(aggregation="sum")
    base = BaseSamples.draw(jax.random.key(11), law, L, law.J, N_BAYES)
    opt = _optimum(law)

    d = _drift(opt, act, law, base, lr=1.0, eta2=False)
    for comp, val, se in _components(d):
        assert np.all(se > 0), (comp, se)
        z = np.abs(val) / se
        assert z.max() < 4.0, f"{name}: {comp} = {val} is {z.max():.1f} s.e. from 0 at the optimum"

    # Power: the same check fails away from the optimum. A common shift of all biases is
    # invisible to the joint softmax, so one head's bias is moved.
    perturbed = {
        "b[0] + 0.5": OrderParameters(opt.M, opt.Q, opt.b.at[0].add(0.5)),
        "0.8·keys": OrderParameters(0.8 * opt.M, 0.64 * opt.Q, opt.b),
    }
    for label, st in perturbed.items():
        dp = _drift(st, act, law, base, lr=1.0, eta2=False)
        zmax = max(float((np.abs(v) / s).max()) for _, v, s in _components(dp))
        assert zmax > 6.0, f"{name}, {label}: largest drift component only {zmax:.1f} s.e."

    # The drift's risk is the Bayes risk of the posterior on the SAME base samples.
    rb = _posterior_risk(law, base)
    assert abs(float(d.R) - rb) < 1e-10, (float(d.R), rb)


# ============================================================================ 2. finite-D SGD
D_FD = 4000
N_FD_CHUNK = 1024
N_FD_CHUNKS = 12


@pytest.mark.slow  # a law test (SGD increments' means); XLA's default opt.: 16 s, not 59 s at -O0
def test_drift_matches_finite_d_sgd_increments_for_one_softmax_head():
    """One SGD step (B = 1) changes k by Δk = −η∇_kℓ and b by Δb = −(η_b/D)∂_bℓ, so
    ΔM = Δk·k*/D, ΔQ = (2k·Δk + |Δk|²)/D; with D steps per unit time t:

        dM/dt = −η E[∇_kℓ·k*],  dQ/dt = −2η E[∇_kℓ·k] + η² E|∇_kℓ|²,  db/dt = −η_b E[∂_bℓ].

    Compared with ``drift`` at M = 0.7, Q = 1 (a key part orthogonal to k*), b = 0, η = 0.5.

    Allowance for finite D: the projections (λ, ν) have exactly the D → ∞ law at any D (the
    tokens are Gaussian); only the Gram matrix XXᵀ/D differs from I, by mean-zero O(1/√D)
    fluctuations nearly independent of (λ, ν), so the *mean* increments differ by O(1/D)
    (measured: ≈ 0.3/D in dM/dt, 0.2/D in dQ/dt for D = 20…200). Allowance: 2/D = 5e-4, on
    top of 4 combined s.e. (≈ 4e-3 for dM/dt ≈ 0.058, 6.5e-3 for dQ/dt ≈ 0.015, whose η² term
    is ≈ 0.010: a missing term or factor is detected).

    The finite-D samples are float32 (sampling speed); the rounding error of a per-sample
    gradient is ~1e-6 relative, far below the standard errors.
    """
    law, lr = Spike([1.5]), 0.5
    act = Softmax()
    M, Q, b = jnp.array([[0.7]]), jnp.array([[1.0]]), jnp.zeros(1)

    task = Task.create(jax.random.key(3), law, L, D_FD, dtype=jnp.float32)
    K = task.keys_from_overlaps(M, Q, jax.random.key(4))  # (1, D)
    np.testing.assert_allclose(np.asarray(K @ task.Kstar / D_FD), [[0.7]], atol=1e-5)
    np.testing.assert_allclose(np.asarray(K @ K.T / D_FD), [[1.0]], atol=1e-5)
    k, kstar, b32 = K[0], task.Kstar[:, 0], b.astype(jnp.float32)

    def ell(k, b, X, y):  # exact finite-D loss |ŷ − y|²/(2D) of one sequence
        return loss_finite(predict(k[None, :], b, X, act), y)

    grad = jax.grad(ell, argnums=(0, 1))

    @jax.jit
    def chunk(key):
        batch = sample_batch(key, task, N_FD_CHUNK)
        gk, gb = jax.vmap(grad, in_axes=(None, None, 0, 0))(k, b32, batch.X, batch.y)
        dM = -lr * gk @ kstar
        dQ = -2 * lr * gk @ k + lr**2 * jnp.sum(gk * gk, axis=-1)
        db = -lr * gb[:, 0]
        return jnp.stack([dM, dQ, db], axis=-1)  # (chunk, 3)

    x = np.concatenate(
        [np.asarray(chunk(jax.random.fold_in(jax.random.key(7), i))) for i in range(N_FD_CHUNKS)]
    ).astype(np.float64)  # (n, 3)
    sim = x.mean(0)
    sim_se = x.std(0, ddof=1) / math.sqrt(x.shape[0])

    d = _drift(OrderParameters(M, Q, b), act, law, BaseSamples.sobol(0, law, L, 1, 2**16), lr=lr)
    th = np.array([float(d.dM[0, 0]), float(d.dQ[0, 0])])
    th_se = np.array([float(d.dM_se[0, 0]), float(d.dQ_se[0, 0])])
    assert th[0] > 0.03 and th[1] > 0.01, th  # the compared quantities are not trivially 0

    tol = 4 * np.sqrt(sim_se[:2] ** 2 + th_se**2) + 2.0 / D_FD
    assert np.all(np.abs(sim[:2] - th) <= tol), (sim[:2], th, tol)
    # One softmax head is invariant to its bias: db/dt = 0 exactly, in both descriptions.
    assert abs(sim[2]) < 1e-6 and abs(float(d.db[0])) < 1e-12, (sim[2], d.db)


# ============================================================================ 3. Jacobian
N_JAC = 512  # one sample size for every Jacobian test (shared eager-op compilations)


def _random_state(key, H, F) -> OrderParameters:
    """A state with Q − MMᵀ positive definite and distinct eigenvalues."""
    k1, k2, k3 = jax.random.split(key, 3)
    M = 0.6 * jax.random.normal(k1, (H, F))
    A = 0.5 * jax.random.normal(k2, (H, H))
    Q = M @ M.T + A @ A.T + 0.2 * jnp.eye(H)
    return OrderParameters(M, Q, 0.3 * jax.random.normal(k3, (H,)))


def test_jacobian_equals_central_finite_differences():
    """Central differences with step h: truncation ~h²|f'''| ≈ 1e-10 and round-off
    ~1e-16|f|/h ≈ 1e-11 (the CRN vector field is smooth, analytic in (M, Q, b) where
    Q − MMᵀ is positive definite with distinct eigenvalues); tolerance 1e-7."""
    H, F, lr = 2, 2, 0.7
    law = LAWS["unequal-probs"]
    act = Softmax()
    base = BaseSamples.draw(jax.random.key(5), law, L, H, N_JAC)
    st = _random_state(jax.random.key(6), H, F)
    assert float(jnp.linalg.eigvalsh(st.Q - st.M @ st.M.T).min()) > 0.1

    problem = DriftProblem.sampled(act, law, base, lr)
    f0, J = drift_and_jacobian(problem, st)
    vf = jax.jit(lambda x: flatten(problem.field_at(unflatten(x, H, F))))
    x = flatten(st)
    np.testing.assert_allclose(np.asarray(f0), np.asarray(vf(x)), rtol=0, atol=1e-13)

    h = 1e-5
    J_fd = np.stack(
        [
            (np.asarray(vf(x.at[i].add(h))) - np.asarray(vf(x.at[i].add(-h)))) / (2 * h)
            for i in range(x.size)
        ],
        axis=1,
    )
    J = np.asarray(J)
    assert J.shape == (x.size, x.size)
    assert np.abs(J).max() > 0.01  # a non-trivial Jacobian
    np.testing.assert_allclose(J, J_fd, rtol=0, atol=1e-7 * (1 + np.abs(J).max()))


def test_jacobian_refuses_singular_schur_complement():
    law = LAWS["unequal-probs"]
    act = BayesSoftmax(aggregation="sum")
    base = BaseSamples.draw(jax.random.key(5), law, L, law.J, N_JAC)
    with pytest.raises(ValueError, match="jitter"):
        drift_and_jacobian(DriftProblem.sampled(act, law, base), _optimum(law))


def test_jacobian_with_jitter_is_finite_at_the_optimum():
    law = LAWS["unequal-probs"]
    act = BayesSoftmax(aggregation="sum")
    base = BaseSamples.draw(jax.random.key(5), law, L, law.J, N_JAC)
    f, J = drift_and_jacobian(DriftProblem.sampled(act, law, base), _optimum(law), jitter=1e-6)
    assert np.all(np.isfinite(np.asarray(f)))
    assert np.all(np.isfinite(np.asarray(J)))


def test_jacobian_is_finite_at_the_symmetric_state():
    law = LAWS["unequal-probs"]
    base = BaseSamples.draw(jax.random.key(5), law, L, 2, N_JAC)
    st = OrderParameters(jnp.zeros((2, 2)), 0.01 * jnp.eye(2), jnp.zeros(2))
    f, J = drift_and_jacobian(DriftProblem.sampled(Softmax(), law, base), st)
    assert np.all(np.isfinite(np.asarray(f)))
    assert np.all(np.isfinite(np.asarray(J)))


# ============================================================================ 4. symmetry
# Shared by tests 4 and 8: same activation, H, law, L, theory.n, sampler and one seed, so the
# solver's jitted segment compiles once.
SOLVE_BASE = [
    "model.H=2",
    'model.activation="bayes_softmax"',
    f"task.L={L}",
    "theory.n=512",
    'record.grid="linear"',
]


def _solve(*overrides: str):
    return solve(load_config(TheoryConfig, overrides=[*SOLVE_BASE, *overrides]))


def test_symmetric_init_keeps_heads_identical():
    ds = _solve('theory.init={kind="symmetric"}', "train.T=5.0", "record.points=2")
    M, Q = ds.M.values[0], ds.Q.values[0]  # (t, H, F), (t, H, H)
    assert np.abs(M[-1]).max() > 1e-2  # the heads did move
    assert np.abs(M[:, 0] - M[:, 1]).max() < 1e-10
    assert abs(Q[:, 0, 0] - Q[:, 1, 1]).max() < 1e-10
    assert abs(Q[:, 0, 1] - Q[:, 1, 0]).max() < 1e-10


def test_perturbed_init_differs_between_seeds():
    qmc = ('theory.method="qmc"', "train.T=5.0", "record.points=2")  # the initial state is the
    # same whatever the drift's route; qmc compiles in a fraction of the exact route's time
    a = _solve("seed=0", *qmc)
    b = _solve("seed=1", *qmc)
    for v in ("M", "Q"):
        x, y = a[v].values[0], b[v].values[0]  # (t, …)
        assert np.all(np.isfinite(x)) and np.all(np.isfinite(y))
        assert np.abs(x[0] - y[0]).max() > 1e-4, v  # initial perturbations O(σ0/√D) ≈ 3e-3
        assert np.abs(x[-1] - y[-1]).max() > 1e-4, v
    # and within one seed the two heads are not identical (the perturbation breaks symmetry)
    assert np.abs(a.M.values[0, 0, 0] - a.M.values[0, 0, 1]).max() > 1e-4


# ============================================================================ 5. initial law
def _mean_se(x: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of i.i.d. per-draw values x (n,)."""
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size))


def _overlap_stats(M: np.ndarray, Q: np.ndarray, sigma0: float) -> dict[str, np.ndarray]:
    """Per-draw averages over exchangeable entries: M (n, H, F), Q (n, H, H) → {name: (n,)}."""
    H = Q.shape[-1]
    diag = np.einsum("nhh->nh", Q)  # (n, H)
    iu = np.triu_indices(H, 1)
    off = Q[:, iu[0], iu[1]]  # (n, H(H−1)/2)
    return {
        "M mean": M.mean((1, 2)),
        "M second moment": (M**2).mean((1, 2)),
        "Q_hh mean": diag.mean(1),
        "Q_hh variance": ((diag - sigma0**2) ** 2).mean(1),
        "Q_hh' mean": off.mean(1),
        "Q_hh' second moment": (off**2).mean(1),
        "M_hf² Q_hh": (M**2 * diag[:, :, None]).mean((1, 2)),
    }


def test_perturbed_state_has_the_law_of_finite_d_initial_overlaps():
    """k_h ~ N(0, σ0² I_D): M_hf = k_h·k*_f/D ~ N(0, σ0²/D); Q_hh = |k_h|²/D = σ0² χ²_D/D, so
    E Q_hh = σ0², Var Q_hh = 2σ0⁴/D; Q_hh' (h ≠ h') has mean 0 and variance σ0⁴/D; and
    E[M_hf² Q_hh] = (D + 2)σ0⁴/D² (ties Q to M: it would be σ0⁴/D if Q ignored MMᵀ)."""
    n, D, H, F, s0 = 2000, 30, 3, 2, 0.5
    keys = jax.random.split(jax.random.key(21), n)
    st = jax.vmap(lambda k: perturbed_state(k, H, F, D, s0, 0.25))(keys)
    Mp, Qp = np.asarray(st.M), np.asarray(st.Q)
    assert np.all(np.asarray(st.b) == 0.25)
    np.testing.assert_allclose(Qp, np.swapaxes(Qp, 1, 2), atol=1e-15)

    rng = np.random.default_rng(22)
    U, _ = np.linalg.qr(rng.standard_normal((D, F)))  # (D, F) orthonormal; K* = √D U
    K = s0 * rng.standard_normal((n, H, D))  # explicit keys
    Me = K @ U * math.sqrt(D) / D  # (n, H, F)
    Qe = K @ np.swapaxes(K, 1, 2) / D  # (n, H, H)

    theory = {
        "M mean": 0.0,
        "M second moment": s0**2 / D,
        "Q_hh mean": s0**2,
        "Q_hh variance": 2 * s0**4 / D,
        "Q_hh' mean": 0.0,
        "Q_hh' second moment": s0**4 / D,
        "M_hf² Q_hh": (D + 2) * s0**4 / D**2,
    }
    sp, se_ = _overlap_stats(Mp, Qp, s0), _overlap_stats(Me, Qe, s0)
    for name, want in theory.items():
        mp, ep = _mean_se(sp[name])
        me, ee = _mean_se(se_[name])
        assert abs(mp - want) < 4 * ep, (name, "perturbed_state", mp, want, ep)
        assert abs(me - want) < 4 * ee, (name, "explicit keys", me, want, ee)
        assert abs(mp - me) < 4 * math.hypot(ep, ee), (name, mp, me)


def _wishart(key, dof: int, H: int):
    """W = T Tᵀ ~ Wishart(dof, I_H) from the Bartlett factor T (H, H)."""
    T = bartlett(key, dof, H)  # (H, H)
    return T @ T.T  # (H, H)


def test_bartlett_wishart_moments():
    """W ~ Wishart(ν, I_H): E W = ν I, Var W_ii = 2ν, Var W_ij = ν (i ≠ j)."""
    n, dof, H = 4000, 5, 3
    W = np.asarray(
        jax.vmap(lambda k: _wishart(k, dof, H))(jax.random.split(jax.random.key(31), n))
    )  # (n, H, H)
    np.testing.assert_allclose(W, np.swapaxes(W, 1, 2), atol=1e-12)
    assert np.all(np.linalg.eigvalsh(W) > 0)
    for i in range(H):
        for j in range(i, H):
            m, s = _mean_se(W[:, i, j])
            want = dof if i == j else 0.0
            assert abs(m - want) < 4 * s, (i, j, m, want, s)
            v, sv = _mean_se((W[:, i, j] - want) ** 2)
            want_v = 2 * dof if i == j else dof
            assert abs(v - want_v) < 4 * sv, (i, j, "variance", v, want_v, sv)


# ============================================================================ 6. Sobol vs MC
@pytest.mark.parametrize(
    "law",
    [LAWS["unequal-probs"], Gaussian([1.0, -0.5], cov=[[1.0, 0.4], [0.4, 0.5]])],
    ids=["discrete", "gaussian"],
)
def test_sobol_and_plain_mc_drifts_agree(law):
    H, n = 2, 4096
    st = _random_state(jax.random.key(8), H, law.F)
    act = Softmax()
    sob = BaseSamples.sobol(3, law, L, H, n)
    mc = BaseSamples.draw(jax.random.key(9), law, L, H, n)
    assert sob.n == n and sob.nu.shape == mc.nu.shape and sob.xi.shape == mc.xi.shape
    ds, dm = _drift(st, act, law, sob, lr=1.0), _drift(st, act, law, mc, lr=1.0)
    rows = [*_components(ds), ("R", np.asarray(ds.R), np.asarray(ds.R_se))]
    rows_mc = [*_components(dm), ("R", np.asarray(dm.R), np.asarray(dm.R_se))]
    for (name, a, sa), (_, b, sb) in zip(rows, rows_mc, strict=True):
        tol = 4 * np.sqrt(sa**2 + sb**2)
        assert np.all(np.abs(a - b) <= tol), (name, a, b, tol)
    assert float(ds.R_se) > 0 and abs(float(ds.R) - 0.3) < 0.3  # a sensible risk


# ============================================================================ 7. CLI
runner = CliRunner()


REFUSALS = {
    "given-not-psd": (
        ["--H", "1", "--set", 'theory.init={kind="given", M=[[1.0, 0.0]], Q=[[0.5]]}'],
        ["theory.init", "positive semi-definite"],
    ),
    "given-M-shape": (
        ["--H", "2", "--set",
         'theory.init={kind="given", M=[[1.0, 0.0]], Q=[[2.0, 0.0], [0.0, 2.0]]}'],
        ["theory.init.M", "2×2"],
    ),
    "given-Q-asymmetric": (
        ["--H", "2", "--set",
         'theory.init={kind="given", M=[[0.0, 0.0], [0.0, 0.0]], Q=[[1.0, 0.5], [0.0, 1.0]]}'],
        ["theory.init.Q", "not symmetric"],
    ),
    "rtol-negative": (["--set", "theory.rtol=-1"], ["theory.rtol", "> 0"]),
    "atol-zero": (["--set", "theory.atol=0"], ["theory.atol", "> 0"]),
    "sampler-x": (["--set", 'theory.sampler="x"'], ["theory.sampler", "sobol"]),
    "init-from-missing": (["--init-from", "{tmp}/missing.nc"], ["missing.nc", "does not exist"]),
    "init-from-text": (["--init-from", "{tmp}/notes.nc"], ["notes.nc", "not a readable netCDF"]),
    "init-from-foreign-netcdf": (
        ["--init-from", "{tmp}/foreign.nc"],
        ["foreign.nc", "not a headspec result"],
    ),
}  # fmt: skip


def _refuse(case: str, tmp_path: Path) -> str:
    """Run ``headspec theory`` with a malformed input; check the refusal; return its message."""
    import xarray as xr

    (tmp_path / "notes.nc").write_text("not a result\n")
    xr.Dataset({"a": ("x", np.arange(3.0))}).to_netcdf(tmp_path / "foreign.nc", engine="h5netcdf")
    before = set(tmp_path.iterdir())
    args, expect = REFUSALS[case]
    out = tmp_path / "theory.nc"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args] + ["--out", str(out)]
    result = runner.invoke(app, ["theory", *argv])
    text = cli_output(result)
    assert result.exit_code == 2, (result.exit_code, text, result.exception)
    assert "Traceback" not in text, text
    for s in expect:
        assert s in text, f"{s!r} not in output:\n{text}"
    if case not in NO_FIX_HINT:
        assert "fix" in text, text
    assert not out.exists()
    assert set(tmp_path.iterdir()) == before  # no output or temporary file left behind
    return text


@pytest.mark.parametrize("case", list(REFUSALS))
def test_theory_cli_refuses_bad_input(case, tmp_path: Path):
    _refuse(case, tmp_path)


NO_FIX_HINT = ("init-from-text", "init-from-foreign-netcdf")


@pytest.mark.parametrize("case", NO_FIX_HINT)
def test_theory_cli_refusal_of_a_foreign_file_names_the_fix(case, tmp_path: Path):
    text = _refuse(case, tmp_path)
    assert "fix" in text, text


# ============================================================================ 8. solve at R_B
def test_solve_from_the_bayes_softmax_optimum_records_the_bayes_risk():
    law = Discrete([[2.0, 0.0], [0.0, 2.0]], [0.6, 0.4])  # the default latent law
    opt = _optimum(law)
    M, Q, b = (np.asarray(x).tolist() for x in opt)
    init = f'theory.init={{kind="given", M={M}, Q={Q}, b={b}}}'
    ds = _solve(init, "train.T=0.5", "record.points=1", "record.n_mc=8192")
    assert ds.attrs["kind"] == "theory" and ds.attrs["init"] == "given"
    np.testing.assert_allclose(ds.M.values[0, 0], np.asarray(opt.M), atol=1e-15)
    np.testing.assert_allclose(ds.Q.values[0, 0], np.asarray(opt.Q), atol=1e-15)
    np.testing.assert_allclose(ds.b.values[0, 0], np.asarray(opt.b), atol=1e-15)
    r, r_se = float(ds.risk.values[0, 0]), float(ds.risk_se.values[0, 0])
    rb, rb_se = float(ds.attrs["bayes_risk"]), float(ds.attrs["bayes_risk_se"])
    assert 0 < r_se < 0.01 and 0 < rb_se < 0.01
    assert abs(r - rb) < 4 * math.hypot(r_se, rb_se), (r, r_se, rb, rb_se)
    # power: the uniform-attention risk ½(1 − 1/L) is far outside that band
    assert abs(0.5 * (1 - 1 / L) - rb) > 20 * math.hypot(r_se, rb_se)


def test_method_auto_resolves_and_exact_is_refused_where_out_of_reach():
    """auto is exact with n = 1024 (the η² term's samples) where the quadrature reaches, an
    explicit n kept; qmc with n = 8192 for Bayes-softmax with H ≥ 4, where an explicit exact is
    a config error that names theory.method and the fix (the quadrature would need ~1e9
    numbers per token law), while H = 3 is accepted. The dump names the resolved method and
    round-trips. A result recorded while auto meant qmc (its dump says "auto") is read as qmc
    at its n, as the reproduction's reuse check reads it: it equals a run asking for qmc, not
    one taking today's default."""
    import json

    import xarray as xr

    from headspec.conventions import results
    from headspec.conventions.config.base import ConfigError

    def opts(*over):
        c = load_config(TheoryConfig, overrides=list(over))
        assert TheoryConfig.model_validate_json(c.model_dump_json()) == c  # round trip
        return json.loads(c.model_dump_json())["theory"]

    assert (opts()["method"], opts()["n"]) == ("exact", 1024)
    assert (opts("theory.n=64")["method"], opts("theory.n=64")["n"]) == ("exact", 64)
    assert (opts('theory.method="qmc"')["method"], opts('theory.method="qmc"')["n"]) == (
        "qmc", 8192)  # fmt: skip
    bayes4 = opts('model.activation="bayes_softmax"', "model.H=4")
    assert (bayes4["method"], bayes4["n"]) == ("qmc", 8192)
    bayes = ['model.activation="bayes_softmax"', 'theory.method="exact"']
    with pytest.raises(ConfigError, match=r"theory\.method.*fix: use theory\.method = \"qmc\""):
        load_config(TheoryConfig, overrides=[*bayes, "model.H=4"])
    assert load_config(TheoryConfig, overrides=[*bayes, "model.H=3"]).theory.method == "exact"

    qmc = load_config(TheoryConfig, overrides=['theory.method="qmc"'])
    old = json.loads(qmc.model_dump_json())
    old["theory"]["method"] = "auto"  # how such a run was recorded before auto meant exact
    ds = xr.Dataset(attrs={"kind": "theory", "config_json": json.dumps(old)})
    stored = TheoryConfig.model_validate(results.config_of(ds))
    assert stored == qmc and stored != load_config(TheoryConfig, overrides=[])
