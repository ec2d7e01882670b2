"""The exact risk R(M, Q, b) and its gradient: accuracy vs nodes, and cost against Monte Carlo.

Run:  .venv/bin/python benchmarks/bench_exact.py [--reps 20] [--mc-chunks 64] [--json out.json]

E1's setting (softmax, H = 3, L = 10, atoms 3·e_f with p = .5/.3/.2) at three states:

- ``common``: all heads equal along K*E[θ] (M_h = c·E[θ]/|E[θ]|, Q = c² 11ᵀ, singular), with c
  the key norm of the best single head (the common phase's fixed point is within cos 0.996);
- ``specialised``: head h on atom h (M = diag(3.6, 3.3, 3.0), Q = MMᵀ + 0.1 I);
- ``large``: the same with larger keys (M = diag(5.3, 5.0, 4.7) + 0.3, Q = MMᵀ + 0.5 I,
  Q_hh ≈ 28–32), where the score grids' spacing 14√Q_hh/n_s limits the accuracy.

For each: the reference (the finest quadrature, its own convergence shown against the next one)
cross-checked by Monte Carlo at n = mc_chunks · 2^16; then, for node counts (n_w, n_s), the
error of R, of ∇R (max over M, Q, b) and of the η-linear drift of SPEC §5 (rms error / rms
drift), and the wall time per call of ``jax.jit(jax.value_and_grad(exact_risk))``, measured in
the same run as today's Monte-Carlo ``population_risk`` at n = 8192: its value, its value +
gradient by ``jax.jacfwd`` (the gradient that works today: reverse mode fails in ``psd_root``'s
JVP), and, for scale, value + reverse-mode gradient with a Cholesky root of Q − MMᵀ + 1e-10 I;
and the η-linear drift as the sampled method estimates it (``problem.expect_terms`` with
``mean_terms``: E[g νᵀ], E[g λᵀ], E[g] at n = 8192).
Timings are medians of ``reps`` calls, interleaved.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.attention import Softmax, loss_projected
from headspec.core.exact import Quadrature, exact_risk
from headspec.core.latent import Discrete
from headspec.core.model import Model
from headspec.core.observables import BaseSamples, population_risk, token_projections
from headspec.dynamics.problem import OrderParameters, expect_terms, mean_terms

jax.config.update("jax_enable_x64", True)  # as inside headspec's entry points

LAW = Discrete(3.0 * np.eye(3), [0.5, 0.3, 0.2])
L, H = 10, 3
ACT = Softmax()
NODES = ((32, 48), (48, 64), (48, 96), (48, 128), (48, 160), (64, 128), (64, 192))  # (n_w, n_s)
REFERENCE = Quadrature(n_w=192, n_s=256)
CHECK = Quadrature(n_w=160, n_s=224)


def states():
    mean = np.asarray(LAW.mean())
    c = 1.7570  # |k| of the best single softmax head on this law (BFGS on the exact risk)
    m = c * mean / np.linalg.norm(mean)
    common = (np.tile(m, (H, 1)), np.full((H, H), m @ m), np.zeros(H))
    Ms = np.diag([3.6, 3.3, 3.0])
    spec = (Ms, Ms @ Ms.T + 0.1 * np.eye(H), np.zeros(H))
    Ml = np.diag([5.3, 5.0, 4.7]) + 0.3  # larger keys: Q_hh ≈ 28–32
    large = (Ml, Ml @ Ml.T + 0.5 * np.eye(H), np.zeros(H))
    named = (("common", common), ("specialised", spec), ("large", large))
    return {k: tuple(jnp.asarray(x) for x in v) for k, v in named}


def drift(M, Q, grads):
    """The η-linear drift of SPEC §5 (η = η_b = 1) from ∇R: flat (H·F + H² + H,)."""
    RM, RQ, Rb = grads
    G = RQ + RQ.T
    dM = -(RM + G @ M)
    X = RM @ M.T + G @ Q
    return jnp.concatenate([dM.ravel(), (-(X + X.T)).ravel(), (-Rb).ravel()])


def exact_vg(quad):
    f = lambda M, Q, b: exact_risk(M, Q, b, Model(ACT, LAW, L), quad).mean  # noqa: E731
    return jax.jit(jax.value_and_grad(f, (0, 1, 2)))


def mc_functions():
    def value(M, Q, b, base):
        return population_risk(M, Q, b, ACT, LAW, base).mean

    def value_chol(M, Q, b, base):  # a reverse-differentiable root, for the cost of reverse mode
        S = jnp.linalg.cholesky(Q - M @ M.T + 1e-10 * jnp.eye(H))
        losses = LAW.expect(lambda th: _per_sample_losses_root(M, S, b, th, base), base.theta)
        return losses.mean()

    def ode_drift(M, Q, b, base):  # today's η-linear drift estimate, flat like drift()
        st = OrderParameters(M, Q, b)
        t = expect_terms(st, ACT, LAW, base, mean_terms)
        g_nu, g_lam, g_sum = t.g_nu, t.g_lam, t.g_sum
        return jnp.concatenate([-g_nu.ravel(), -(g_lam + g_lam.T).ravel(), -g_sum.ravel()])

    return {
        "mc ode drift (η-linear, today)": jax.jit(ode_drift),
        "mc value": jax.jit(value),
        "mc value+jacfwd (today)": jax.jit(
            lambda *a: (value(*a), jax.jacfwd(value, (0, 1, 2))(*a))
        ),
        "mc value+grad (reverse, Cholesky root)": jax.jit(
            jax.value_and_grad(value_chol, (0, 1, 2))
        ),
    }


def _per_sample_losses_root(M, S, b, theta, base):
    """Today's per-sample losses (observables._per_sample_losses) with a given root S."""
    _, lam = token_projections(M, S, theta, base)
    W = ACT.token_weights(lam + b[:, None])  # (n, L)
    return loss_projected(W, jnp.zeros(W.shape[0], jnp.int32))  # (n,)


HEAD = ("method", "|ΔR|", "|Δ∇R|max", "drift rel", "ms/call", "/jacfwd", "/reverse")


def row(name, dR, dG, dd, t, t_fwd, t_rev):
    return (
        f"{name:42s} {dR:9.1e} {dG:9.1e} {dd:9.1e} {1e3 * t:8.1f} {t / t_fwd:8.3f} {t / t_rev:8.2f}"
    )


def timed(fns: dict, args: dict, reps: int) -> dict:
    """Median wall time (s) per call, calls interleaved across functions."""
    for k, f in fns.items():
        jax.block_until_ready(f(*args[k]))
    out = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f(*args[k]))
            out[k].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in out.items()}


def mc_check(M, Q, b, chunks):
    f = jax.jit(lambda M, Q, b, base: population_risk(M, Q, b, ACT, LAW, base))
    means, vars_ = [], []
    for i in range(chunks):
        base = BaseSamples.draw(jax.random.key(10_000 + i), LAW, L, H, 2**16)
        r = f(M, Q, b, base)
        means.append(float(r.mean))
        vars_.append(float(r.se) ** 2)
    return float(np.mean(means)), float(np.sqrt(np.sum(vars_)) / chunks)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--mc-chunks", type=int, default=64, help="MC cross-check: chunks of 2^16")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    out = {"nodes": list(NODES), "states": {}}
    mc = mc_functions()
    for name, (M, Q, b) in states().items():
        print(f"\n== {name}: R, ∇R and the η-linear drift vs nodes (n_w, n_s)")
        ref_v, ref_g = exact_vg(REFERENCE)(M, Q, b)
        chk_v, chk_g = exact_vg(CHECK)(M, Q, b)
        ref_d = drift(M, Q, ref_g)
        gflat = lambda g: jnp.concatenate([x.ravel() for x in g])  # noqa: E731
        mc_mean, mc_se = mc_check(M, Q, b, a.mc_chunks)
        rms_drift = float(jnp.sqrt(jnp.mean(ref_d**2)))
        d_chk = float(jnp.abs(gflat(chk_g) - gflat(ref_g)).max())
        print(f"reference (192, 256): R = {float(ref_v):.12f}", end="  ")
        print(f"((160, 224): |ΔR| {abs(float(chk_v - ref_v)):.1e}, |Δ∇R| {d_chk:.1e})")
        z = (float(ref_v) - mc_mean) / mc_se
        print(
            f"MC n = {a.mc_chunks}·2^16: R = {mc_mean:.6f} ± {mc_se:.1e} (z = {z:+.2f})", end="; "
        )
        print(f"|∇R|max {float(jnp.abs(gflat(ref_g)).max()):.3e}, drift rms {rms_drift:.3e}")
        fns, args = {}, {}
        for nw, ns in NODES:
            fns[f"exact {nw},{ns}"] = exact_vg(Quadrature(n_w=nw, n_s=ns))
            args[f"exact {nw},{ns}"] = (M, Q, b)
        base = BaseSamples.draw(jax.random.key(1), LAW, L, H, 8192)
        for k, f in mc.items():
            fns[k] = f
            args[k] = (M, Q, b, base)
        times = timed(fns, args, a.reps)
        rows = []
        print(f"{HEAD[0]:42s}" + "".join(f"{h:>9s}" for h in HEAD[1:]))
        t_fwd = times["mc value+jacfwd (today)"]
        t_rev = times["mc value+grad (reverse, Cholesky root)"]
        for nw, ns in NODES:
            v, g = fns[f"exact {nw},{ns}"](M, Q, b)
            dR = abs(float(v - ref_v))
            dG = float(jnp.abs(gflat(g) - gflat(ref_g)).max())
            dd = float(jnp.sqrt(jnp.mean((drift(M, Q, g) - ref_d) ** 2))) / rms_drift
            t = times[f"exact {nw},{ns}"]
            key = f"exact value_and_grad n_w={nw} n_s={ns}"
            rows.append(dict(method=key, dR=dR, dgrad=dG, drift_rel=dd, ms=1e3 * t))
            print(row(key, dR, dG, dd, t, t_fwd, t_rev))
        v_mc, g_mc = fns["mc value+jacfwd (today)"](M, Q, b, base)
        dR = abs(float(v_mc - ref_v))
        dG = float(jnp.abs(gflat(g_mc) - gflat(ref_g)).max())
        dd = float(jnp.sqrt(jnp.mean((drift(M, Q, g_mc) - ref_d) ** 2))) / rms_drift
        d_ode = fns["mc ode drift (η-linear, today)"](M, Q, b, base)
        dd_ode = float(jnp.sqrt(jnp.mean((d_ode - ref_d) ** 2))) / rms_drift
        for k in mc:
            t = times[k]
            acc = (dR, dG, dd) if "jacfwd" in k else (float("nan"),) * 3
            acc = (float("nan"), float("nan"), dd_ode) if "ode" in k else acc
            rows.append(dict(method=k, dR=acc[0], dgrad=acc[1], drift_rel=acc[2], ms=1e3 * t))
            print(row(k + " n=8192", *acc, t, t_fwd, t_rev))
        out["states"][name] = dict(
            R=float(ref_v), mc=[mc_mean, mc_se], drift_rms=rms_drift, rows=rows
        )
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
