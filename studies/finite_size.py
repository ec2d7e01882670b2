"""Finite-size study with the diffusion engine: time to specialise over D = 10² … 10⁹ (issue 16).

The escape-time study's setup (studies/escape_time.py: two softmax heads, L = 10, atoms 2.5·e₁ and
2.5·e₂ with p = 0.6/0.4, η = 3): the heads go together to the common phase, a saddle of the ODE,
and leave it along its head-difference mode (λ = 0.147 ± 0.004), so that
t_esc ≈ const + ln(D)/(2λ). The exact reduced engine reaches D = 10⁵ there (27 min for 16 seeds);
the diffusion engine costs the same at every D, so the law can be followed to D = 10⁹.

For D = 10², 10³, 10⁴, 10⁶, 10⁸, 10⁹: 16 seeds with ``train.engine = "diffusion"`` (Heun,
dt = 0.1, diffusion.n = 2048 Sobol samples made head-cyclic at every D, so that the only head
asymmetry is the finite-D one), T = 50 + 3.4 ln(D/100) rounded up to 5, recorded every 0.5.
t_esc as in the escape study (first time after the key cosine reached 0.95 that
|M₀ − M₁| ≥ 0.5; censored at the horizon); per D the median with a
bootstrap s.e., the mean ± s.e., the spread (s.d.) and the 10/90 % quantiles; the slope of t_esc
against ln D by weighted least squares on the medians, beside the saddle theory's 1/(2λ) and the
reduced engine's medians at D = 10²…10⁵ (from studies/out/escape_time.json when present).

Outputs: studies/out/finite_size.{json,md,png}; runs cached in studies/out/cache/fs_*.npz.

    nice -n 5 .venv/bin/python studies/finite_size.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

import headspec as hs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from escape_time import escape_times, summary, wls

OUT = Path(__file__).resolve().parent / "out"
CACHE = OUT / "cache"
A, P, LR, H, L, DT_REC = 2.5, 0.6, 3.0, 2, 10, 0.5
DS = (10**2, 10**3, 10**4, 10**6, 10**8, 10**9)
SEEDS = 16
N_BASE = 2048


def horizon(D: int) -> float:
    """T per D: the escape study's t_esc ≈ 25 + 3.4·ln(D/100), plus room for the late seeds."""
    return float(np.ceil((50 + 3.4 * np.log(D / 100)) / 5) * 5)


def overrides(D: int) -> list[str]:
    law = f"task.latent={{kind='discrete', atoms=[[{A}, 0.0], [0.0, {A}]], probs=[{P}, {1 - P}]}}"
    return [
        law, f"task.L={L}", f"task.D={D}", f"model.H={H}", "model.activation='softmax'",
        f"train.lr={LR}", f"train.T={horizon(D)}", f"seeds={SEEDS}", "record.grid='linear'",
        f"record.points={round(horizon(D) / DT_REC)}", "record.n_mc=16", "train.engine='diffusion'",
        "train.dtype='float64'", f"diffusion.n={N_BASE}", "diffusion.head_cyclic=true",
    ]  # fmt: skip


def run(D: int) -> dict:
    path = CACHE / f"fs_D{D}_S{SEEDS}_T{horizon(D):g}_n{N_BASE}.npz"
    if path.exists():
        z = np.load(path)
        return {k: z[k] for k in z.files}
    t0 = time.time()
    ds = hs.simulate(hs.load_config(hs.SimulateConfig, overrides=overrides(D)))
    out = {
        "t": ds.t.values,
        "M": ds.M.transpose("seed", "t", "head", "feature").values,
        "Q": ds.Q.transpose("seed", "t", ...).values,
        "risk": ds.risk.values,
        "wall_s": np.array(time.time() - t0),
    }
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez(path, **out)
    print(f"D = {D:.0e}: {float(out['wall_s']):.0f} s", flush=True)
    return out


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for D in DS:
        tr = run(D)
        te = escape_times(tr)["dM"]
        fin = te[np.isfinite(te)]
        row = {
            "D": D,
            "T": horizon(D),
            "wall_s": float(tr["wall_s"]),
            **summary(te, horizon(D), rng),
        }
        row["q10"], row["q90"] = (float(np.quantile(fin, q)) for q in (0.1, 0.9))
        rows.append(row)
        print(
            D, {k: row[k] for k in ("median", "median_se", "mean", "sd", "n_censored")}, flush=True
        )
    lnD = np.log([r["D"] for r in rows])
    med = np.array([r["median"] for r in rows])
    se = np.array([r["median_se"] for r in rows])
    fit = wls(lnD, med, se)
    res = {"setup": {"A": A, "P": P, "lr": LR, "H": H, "L": L, "seeds": SEEDS,
                     "T": "50 + 3.4 ln(D/100), rounded up to 5",
                     "diffusion.n": N_BASE, "head_cyclic": True, "dt": 0.1, "solver": "heun"},
           "rows": rows, "fit_median": fit}  # fmt: skip
    esc = OUT / "escape_time.json"
    if esc.exists():
        e = json.loads(esc.read_text())
        res["predicted_slope"] = e["predicted_slope"]
        res["predicted_slope_se"] = e["predicted_slope_se"]
        res["reduced"] = [
            {"D": r["D"], "median": r["dM"]["median"], "median_se": r["dM"]["median_se"]}
            for r in e["rows"]["sim"]
        ]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "finite_size.json").write_text(json.dumps(res, indent=1))
    plot(res)
    print("slope", fit, "predicted", res.get("predicted_slope"), res.get("predicted_slope_se"))


def plot(res: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    rows = res["rows"]
    D = np.array([r["D"] for r in rows], float)
    for r in rows:
        v = np.asarray(r["values"], float)
        v = v[np.isfinite(v)]
        ax.plot(np.full(v.size, r["D"]) * np.exp(np.random.default_rng(0).normal(0, 0.06, v.size)),
                v, ".", color="0.75", ms=3, zorder=1)  # fmt: skip
    med = np.array([r["median"] for r in rows])
    se = np.array([r["median_se"] for r in rows])
    ax.errorbar(D, med, 2 * se, fmt="o", color="C0", label="diffusion engine: median ± 2 s.e.")
    if "reduced" in res:
        rd = res["reduced"]
        ax.errorbar([r["D"] for r in rd], [r["median"] for r in rd],
                    [2 * r["median_se"] for r in rd], fmt="s", mfc="none", color="C3",
                    label="exact reduced engine (escape study)")  # fmt: skip
    f = res["fit_median"]
    x = np.geomspace(D.min(), D.max())
    ax.plot(x, f["intercept"] + f["slope"] * np.log(x), color="C0", lw=1,
            label=f"fit: slope {f['slope']:.2f} ± {f['slope_se']:.2f}")  # fmt: skip
    if "predicted_slope" in res:
        p = res["predicted_slope"]
        mid = np.log(np.sqrt(D.min() * D.max()))
        y0 = f["intercept"] + f["slope"] * mid
        pse = res["predicted_slope_se"]
        ax.plot(x, y0 + p * (np.log(x) - mid), "k--", lw=1,
                label=f"saddle theory 1/(2λ) = {p:.2f} ± {pse:.2f}")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("D")
    ax.set_ylabel("time to specialise t_esc")
    ax.set_title("Leaving the common phase: t_esc vs ln D (grey: each seed)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "finite_size.png", dpi=120)


if __name__ == "__main__":
    main()
