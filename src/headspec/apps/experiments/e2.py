"""E2 — order (SPEC §7): heads pick up features in decreasing order of Var θ_f; the time to
specialise grows like log D."""

from __future__ import annotations

import numpy as np

from headspec.apps.experiments.base import Context, _first_crossing, _fmt, _mean_se
from headspec.conventions.runs import law_of
from headspec.dynamics import analysis


def run(ctx: Context):
    """Order of feature pick-up (theory) and the fit of the specialisation time against log D."""
    from matplotlib.figure import Figure

    p = ctx.params
    th = ctx.theory("order", f"seeds={p['seeds']}")
    t = th.t.values
    var = np.diag(np.asarray(law_of(th).cov()))  # Var θ_f of the law (given by var or cov)
    picks = []
    for f in range(th.sizes["feature"]):
        c = np.abs(th.cos.values[:, :, :, f]).max(-1)  # (S, T)
        picks.append([_first_crossing(t, c[s], p["pickup_cos"]) for s in range(c.shape[0])])
    picks = np.asarray(picks)  # (F, S)
    order = np.argsort(-var)
    pm = [_mean_se(picks[f]) for f in order]
    ok = all(np.all(picks[order[i]] < picks[order[i + 1]]) for i in range(len(order) - 1))
    ctx.claim(
        "Heads pick up features in decreasing order of Var θ_f",
        f"first t where some head has |cos| ≥ {p['pickup_cos']} with feature f (Var = "
        + ", ".join(_fmt(var[f]) for f in order)
        + ")",
        " < ".join(f"{_fmt(m)} ± {_fmt(s, 2)}" for m, s in pm),
        bool(ok),
    )
    logd = ctx.spec.get("logd", {})
    dims = list(p["dims"])
    times = []
    for D in dims:
        ds = ctx.theory(f"logD_{D}", f"task.D={D}", f"seeds={p['seeds']}",
                        "train.T=" + str(max(600.0, float(ctx.config["train"]["T"]))),
                        extra=logd)  # fmt: skip
        ts = analysis.specialisation_times(ds.t.values, ds.Q.values, 0.95)
        times.append(np.nanmin(np.where(np.isnan(ts), np.inf, ts), axis=1))
    times = np.asarray(times)  # (nD, S)
    x = np.log10(np.repeat(dims, times.shape[1]))
    y = times.ravel()
    good = np.isfinite(y)
    if good.sum() >= 3:
        coef, cov = np.polyfit(x[good], y[good], 1, cov=True)
        slope, se = float(coef[0]), float(np.sqrt(cov[0, 0]))
        pred = np.polyval(coef, x[good])
        r2 = 1 - np.sum((y[good] - pred) ** 2) / np.sum((y[good] - y[good].mean()) ** 2)
    else:
        slope = se = r2 = float("nan")
    ctx.claim(
        "Later features take longer, and the time to specialise grows like log D",
        "fit t_spec = a + b·log10 D over D = " + ", ".join(str(d) for d in dims),
        f"b = {_fmt(slope)} ± {_fmt(se, 2)} per decade, R² = {_fmt(r2)}",
        bool(np.isfinite(slope) and slope > 3 * se and r2 >= 0.8),
        "theory from the exact finite-D initial law at each D",
    )
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    a1, a2 = fig.subplots(1, 2)
    for f in order:
        c = np.abs(th.cos.values[:, :, :, f]).max(-1).mean(0)
        a1.plot(t[t > 0], c[t > 0], lw=2, label=f"feature {f} (Var θ = {_fmt(var[f])})")
    a1.set_xscale("log")
    a1.set_xlabel("t")
    a1.set_ylabel("max over heads |cos(k_h, k*_f)|")
    a1.axhline(p["pickup_cos"], color="0.5", ls=":")
    a1.legend(fontsize="small")
    a1.set_title("order of feature pick-up (theory, mean over seeds)", fontsize="medium")
    a2.plot(np.repeat(dims, times.shape[1]), y, "o", alpha=0.6, label="seeds")
    if np.isfinite(slope):
        dd = np.geomspace(min(dims), max(dims), 50)
        a2.plot(dd, np.polyval(coef, np.log10(dd)), "k--", label=f"{_fmt(slope)}·log10 D + a")
    a2.set_xscale("log")
    a2.set_xlabel("D")
    a2.set_ylabel("first specialisation time")
    a2.legend(fontsize="small")
    a2.set_title("time to specialise vs D", fontsize="medium")
    ctx.figure(fig, "order_and_logD")
