"""The η² term T = E[Σ_l g_l g_lᵀ] of the D → ∞ drift: error and cost of its estimators.

Run:  .venv/bin/python benchmarks/bench_eta2.py [--quick] [--reps 12] [--json out.json]

E1's setting (softmax, H = 3, L = 10, latent Discrete(3·I₃, p = .5/.3/.2), η = η_b = 3) at three
states (two with ``--quick``):

- ``plateau``: E1's common phase as the ODE reaches it from a D = 10⁴ random start at t = 30
  (heads nearly equal, along E[θ]: eig Q ≈ 0.005, 0.005, 8.9);
- ``specialised``: head h mostly on atom h, M = diag(3.6, 3.3, 3.0) + small off-diagonal
  parts (0.2–0.35), Q = MMᵀ + 0.2 I (head correlations 0.13–0.21);
- ``orthogonal`` (not with ``--quick``): M = diag(3.6, 3.3, 3.0), Q = MMᵀ + 0.2 I. Q is
  diagonal, so the independent shadow *is* the integrand and that control makes the estimate
  exact (as the symmetric one does for identical heads); its err then only says that the
  estimate and the reference agree.

Estimators of T, each run ``reps`` times with independent randomisation:

- ``baseline``: what ``problem.Exact`` does today — plain MC over ``BaseSamples.draw`` at
  n = 8192 (ν, ξ sampled, g by jax.grad, exact over atoms), s.e. from the samples' spread;
- ``rqmc``: dynamics.eta2 (closed-form g, only the scores sampled) on 8 independently scrambled
  Sobol sequences of 1024 points (n = 8192), no control; ``rqmc+gradient``, ``+symmetric``,
  ``+independent``: with one control variate; ``rqmc+all``: with the three.

Columns: ``err`` = rms over the reps of ‖η² (T̂ − T)‖_F / ‖drift‖ (the drift (dM, dQ, db) flat,
its η-linear part from the exact ∇R, T from the reference); ``se`` = the mean reported
‖η² se‖_F / ‖drift‖ (≈ err when the error bar is honest); ``ms`` = median wall time of one call
(∇R given: the exact drift computes it anyway; computing it costs ``∇R ms``, in the header);
``err×``/``cost×`` = the baseline's error / this error and this time / the baseline's. The
reference is RQMC with every control at 16 × 2^15 points (its own relative s.e. in the header),
checked against plain MC at 2^20 points (max |z| over T's entries).

Measured 2026-12-01 on the project's 2-core machine (shared, nice 19; ratios from one run are
what to read), ``--reps 12``:

    state        ‖drift‖  ‖η²T‖    ∇R ms   reference s.e. / ‖drift‖ (vs MC 2^20: max |z|)
    plateau      8.4e-2   8.5e-2   34.9    1.5e-5  (0.75)
    specialised  3.4e-1   1.9e-2   26.5    2.8e-5  (1.71)
    orthogonal   3.6e-1   1.6e-2   25.4    7.5e-8  (1.80)

                       plateau                      specialised               orthogonal
    method             err     se      ms   err×    err     se      ms   err×  err     err×
    baseline (MC)      9.7e-3  9.1e-3  30.0    1    8.7e-4  8.3e-4  24.4  1    7.5e-4     1
    rqmc               4.2e-3  3.6e-3  15.5  2.3    7.7e-4  7.1e-4  15.9  1.1  5.0e-4   1.5
    rqmc+gradient      9.9e-4  1.1e-3  21.1  9.8    2.5e-4  2.7e-4  20.3  3.5  2.5e-4   3.0
    rqmc+symmetric     3.3e-4  3.0e-4  15.5   29    7.8e-4  7.1e-4  14.8  1.1  5.0e-4   1.5
    rqmc+independent   4.2e-3  3.8e-3  31.0  2.3    3.6e-4  3.8e-4  30.6  2.4  1.5e-10  5e6
    rqmc+all           9.0e-5  1.0e-4  41.6  107    2.2e-4  2.1e-4  36.2  4.0  1.5e-10  5e6

(cost× of rqmc+all: 1.39, 1.48, 1.37 — and the exact drift computes ∇R anyway.) At E1's plateau
every control at n = 8192 costs 1.4× today's MC and removes 99 % of its error (107×; MC would
need ~10⁴× the points); the symmetric shadow does most of it, at no extra cost. Where heads are
specialised but correlated (0.13–0.21) the gain is 4× (the η² term is then 5 % of the drift:
an error of 2e-4 of ‖drift‖); with orthogonal heads the independent shadow makes it exact (its
se there, 7.5e-8, is the bound on the shadow quadrature's error that se includes). The
error bars are honest (se ≈ err in every row).
"""

from __future__ import annotations

import argparse
import json
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.attention import Softmax
from headspec.core.latent import Discrete
from headspec.core.model import Model
from headspec.core.observables import BaseSamples
from headspec.core.stats import sample_mean_se
from headspec.dynamics.eta2 import CONTROLS, ScoreSamples, eta2_term, risk_gradient
from headspec.dynamics.problem import OrderParameters, expect_terms, per_sample_terms

jax.config.update("jax_enable_x64", True)  # as inside headspec's entry points

LAW = Discrete(3.0 * np.eye(3), [0.5, 0.3, 0.2])
H, L, ETA, N = 3, 10, 3.0, 8192
ACT = Softmax()
# E1's plateau: the ODE (head-cyclic MC drift, n = 2048·3, RK2, dt = 0.05) from a D = 10⁴ start
# (k_h ~ N(0, 0.01 I_D)) at t = 30
PLATEAU_M = [[1.28166319, 0.92070204, 0.57195693],
             [1.26630734, 0.93678023, 0.57855510],
             [1.27584462, 0.92497963, 0.57616265]]  # fmt: skip
PLATEAU_Q = [[2.97148309, 2.96587873, 2.96572476],
             [2.96587873, 2.97018671, 2.96492889],
             [2.96572476, 2.96492889, 2.96954903]]  # fmt: skip
METHODS = ("baseline", "rqmc", "rqmc+gradient", "rqmc+symmetric", "rqmc+independent", "rqmc+all")


def states(quick: bool = False) -> dict:
    Mo = np.diag([3.6, 3.3, 3.0])
    Ms = Mo + np.array([[0.0, 0.3, 0.2], [0.25, 0.0, 0.3], [0.2, 0.35, 0.0]])
    out = {
        "plateau": (np.array(PLATEAU_M), np.array(PLATEAU_Q), np.zeros(H)),
        "specialised": (Ms, Ms @ Ms.T + 0.2 * np.eye(H), np.zeros(H)),
    }
    if not quick:
        out["orthogonal"] = (Mo, Mo @ Mo.T + 0.2 * np.eye(H), np.zeros(H))
    return {k: tuple(jnp.asarray(x, jnp.float64) for x in v) for k, v in out.items()}


@eqx.filter_jit
def _baseline(state: OrderParameters, base: BaseSamples):
    """Today's η² term in problem.Exact: mean and s.e. of Σ_l g_l g_lᵀ on ``base`` (H, H) ×2."""
    g_g = expect_terms(state, ACT, LAW, base, per_sample_terms).g_g  # (n, H, H)
    return sample_mean_se(g_g)


def drift_norm(M, Q, g, T) -> float:
    """‖(dM, dQ, db)‖ with the exact η-linear part and η² T."""
    G = g.R_Q + g.R_Q.T
    X = g.R_M @ M.T + G @ Q  # (H, H)
    parts = (-ETA * (g.R_M + G @ M), -ETA * (X + X.T) + ETA**2 * T, -ETA * g.R_b)
    return float(np.sqrt(sum(np.sum(np.asarray(p) ** 2) for p in parts)))


def estimator(method: str, M, Q, b, g):
    """seed ↦ (T̂, se) for ``method``, and the samples' maker (outside the timed call)."""
    if method == "baseline":

        def make(seed):
            return BaseSamples.draw(jax.random.key(seed), LAW, L, H, N)

        def run(base):
            return _baseline(OrderParameters(M, Q, b), base)

    else:
        _, _, c = method.partition("+")
        controls = CONTROLS if c == "all" else ((c,) if c else ())

        def make(seed):
            return ScoreSamples.rqmc(seed, L, H, N, replicates=8)

        def run(smp):
            e = eta2_term(M, Q, b, Model(ACT, LAW, L), smp, grad=g, controls=controls)
            return e.mean, e.se

    return make, run


def median_ms(fns: dict, reps: int) -> dict:
    """Median wall time (ms) of each zero-argument call, interleaved, after one warm-up."""
    for f in fns.values():
        jax.block_until_ready(f())
    out = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f())
            out[k].append(time.perf_counter() - t0)
    return {k: 1e3 * float(np.median(v)) for k, v in out.items()}


def reference(M, Q, b, g, quick: bool):
    """T by RQMC with every control (16 × 2^15 points; 16 × 2^13 quick), and max |z| against
    plain MC (2^20 points; 2^18 quick) in score space."""
    m = 2**13 if quick else 2**15
    ref = eta2_term(
        M, Q, b, Model(ACT, LAW, L), ScoreSamples.rqmc(987_654, L, H, 16 * m, 16), grad=g
    )
    n_mc = 2**18 if quick else 2**20
    mc = eta2_term(
        M, Q, b, Model(ACT, LAW, L), ScoreSamples.mc(jax.random.key(55), L, H, n_mc), controls=()
    )
    z = np.abs(np.asarray(ref.mean - mc.mean)) / np.sqrt(np.asarray(mc.se**2 + ref.se**2))
    return np.asarray(ref.mean), np.asarray(ref.se), float(z.max())


def run_state(name, M, Q, b, reps: int, reps_time: int, quick: bool) -> dict:
    g = risk_gradient(M, Q, b, Model(ACT, LAW, L))
    T, T_se, z = reference(M, Q, b, g, quick)
    norm = drift_norm(M, Q, g, T)
    rel = ETA**2 / norm
    rows, calls = {}, {"∇R": lambda: risk_gradient(M, Q, b, Model(ACT, LAW, L))}
    for meth in METHODS:
        make, run = estimator(meth, M, Q, b, g)
        errs, ses = [], []
        for r in range(reps):
            mean, se = run(make(1000 * r + 17))
            errs.append(np.sum((np.asarray(mean) - T) ** 2))
            ses.append(np.sqrt(np.sum(np.asarray(se) ** 2)))
        rows[meth] = dict(err=rel * float(np.sqrt(np.mean(errs))), se=rel * float(np.mean(ses)))
        smp = make(5)
        calls[meth] = lambda run=run, smp=smp: run(smp)
    ms = median_ms(calls, reps_time)
    base = rows["baseline"]
    for meth, row in rows.items():
        row.update(ms=ms[meth], gain=base["err"] / row["err"], cost=ms[meth] / ms["baseline"])
    print(
        f"\n== {name}: R = {float(g.R):.5f}, ‖drift‖ = {norm:.3e}, ‖η² T‖ = "
        f"{ETA**2 * np.linalg.norm(T):.3e}, reference s.e. {rel * np.linalg.norm(T_se):.1e} of "
        f"‖drift‖ (vs MC 2^20: max |z| {z:.2f}); ∇R {ms['∇R']:.1f} ms"
    )
    print(f"{'method':18s}{'err':>9s}{'se':>9s}{'ms':>8s}{'err×':>10s}{'cost×':>7s}")
    for meth, row in rows.items():
        print(
            f"{meth:18s}{row['err']:9.1e}{row['se']:9.1e}{row['ms']:8.1f}"
            f"{row['gain']:10.3g}{row['cost']:7.2f}"
        )
    return dict(R=float(g.R), drift_norm=norm, ref_z=z, grad_ms=ms["∇R"], rows=rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=12, help="randomisations per estimator")
    ap.add_argument("--reps-time", type=int, default=9, help="timed calls per estimator")
    ap.add_argument("--quick", action="store_true", help="4 reps, 3 timed calls, smaller ref")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    reps, reps_time = (4, 3) if a.quick else (a.reps, a.reps_time)
    out = {}
    for name, s in states(a.quick).items():
        out[name] = run_state(name, *s, reps, reps_time, a.quick)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
