"""The base samples' drift error on the common-phase plateau (issue 16: why the D = 10⁴ law test
of Q's means fails with any affordable number of base samples).

Setup: the law-test problem of studies/diffusion_vs_reduced.py (two softmax heads, atoms 2.5·e₁,
2.5·e₂ with p = 0.6/0.4, η = 3), at L = 10 and, for contrast, L = 4. The state: the symmetric
ODE's at t = 15 (the plateau). There the drift f (the ODE's, and the diffusion engine's mean
increment) is estimated on 4 independent scrambled-Sobol sets of n head-cyclic base samples and
compared with 2¹⁹ samples; printed: |f| and the RMS error per coordinate (M row-major, the upper
triangle of Q, b). At D = 10⁴ the seed mean of Q resolves its drift to ~0.1 %; the error below is
~20× that at n = 8192 and falls only as n^{-1/2} (the integrand is rough: Sobol gains little).

    nice -n 5 .venv/bin/python studies/drift_error.py     # ~1 min; writes out/drift_error.json
"""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import headspec as hs
from headspec.conventions import build, runs
from headspec.core.observables import BaseSamples
from headspec.dynamics.noise import increment_moments
from headspec.dynamics.ode import DriftProblem, OrderParameters

OUT = Path(__file__).resolve().parent / "out"
LAW = "task.latent={kind='discrete', atoms=[[2.5, 0.0], [0.0, 2.5]], probs=[0.6, 0.4]}"


def main() -> dict:
    report = {}
    for L in (10, 4):
        over = [LAW, f"task.L={L}", "task.D=10000", "model.H=2", "train.lr=3.0", "train.T=15",
                "seeds=1", "record.points=5", "theory.n=65536",
                "theory.init={kind='symmetric'}"]  # fmt: skip
        cfg = hs.load_config(hs.TheoryConfig, overrides=over)
        st = runs.solve(cfg).isel(seed=0, t=-1)
        X = OrderParameters(*(jnp.asarray(st[v].values) for v in ("M", "Q", "b")))
        law, act, H = cfg.task.latent.build(), build.activation(cfg.model), cfg.model.H

        def drift(base, X=X, act=act, law=law):
            problem = DriftProblem.sampled(act, law, base, 3.0)
            return np.asarray(increment_moments(X, problem).mean)  # (d,)

        ref = drift(BaseSamples.sobol(99, law, L, H, 2**19))
        row = {"abs_drift": np.abs(ref).tolist(), "Q": st.Q.values.tolist()}
        for n in (8192, 32768):
            errs = np.array([drift(BaseSamples.sobol(s, law, L, H, n).head_cyclic()) - ref
                             for s in range(4)])  # fmt: skip
            rms = np.sqrt((errs**2).mean(0))
            q = slice(H * law.F, H * law.F + H * (H + 1) // 2)  # the Q coordinates
            row[f"n={n}"] = {"rms_error": rms.tolist(),
                             "rel_error_dQ": float(np.median(rms[q] / np.abs(ref[q])))}  # fmt: skip
            print(
                f"L = {L}, n = {n}: relative RMS error of dQ/dt {row[f'n={n}']['rel_error_dQ']:.3f}"
            )
        report[f"L={L}"] = row
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "drift_error.json").write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
