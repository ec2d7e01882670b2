"""E2 — order (SPEC §7): heads pick up features in decreasing order of Var θ_f; the time to
specialise grows like log D.

Both parts from simulations (exact reduced engine; log-D runs at D ≥ ``logd_diffusion_from`` on the
diffusion engine, whose cost does not grow with D): the order beside the ODE started from each
seed's exact initial state (:meth:`Context.paired`); the log-D law from several seeds per D (one
:meth:`Context.runs` call: in parallel on a cluster), fitted as t_spec = a + b·ln D and set beside
the saddle theory's slope 1/(2λ), λ the leading unstable rate of the common phase's fixed point
(:func:`headspec.dynamics.saddles.saddle_at`, as ``headspec saddles``).
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field

from headspec.apps.experiments.base import Context, Run, finite_mean_se, first_crossing, fmt
from headspec.apps.experiments.claims import Claim, Tolerance
from headspec.apps.experiments.params import Cosine, Count, Positive, RecipeParams
from headspec.apps.experiments.registry import recipe
from headspec.conventions import results
from headspec.conventions.runs import law_of
from headspec.core.stats import censored_median, weighted_line
from headspec.dynamics import analysis


class Params(RecipeParams):
    """E2's parameters (``[experiment]`` of ``e2_order.toml``; the log-D task: ``[logd]``)."""

    pickup_cos: Cosine = Field(description="a feature is picked up at this |cos| with some head")
    seeds: Count = Field(description="seeds of the order run")
    dims: list[Annotated[int, Field(ge=2)]] = Field(min_length=2, description="the log-D law's D")
    logd_seeds: Count = Field(description="seeds per D of the log-D law")
    logd_T: Positive = Field(description="horizon of the log-D runs (censored beyond)")
    logd_dt: Positive = Field(description="record spacing of the log-D runs")
    logd_diffusion_from: Annotated[int, Field(ge=2)] | None = Field(
        None, description="D from which the log-D runs take the diffusion engine (None: never)"
    )
    logd_diffusion_n: Count = Field(
        1024, description="base samples of the diffusion engine's exact drift (diffusion.n)"
    )
    spec_cos: Cosine = Field(description="specialised: a head's cosine with the mean below this")
    saddle_n: Count = Field(description="Sobol base samples of the saddle's Jacobian")
    consistency_k: Positive = Field(description="|slope − 1/(2λ)| ≤ this × combined s.e.")


def _order_run(p) -> list[Run]:
    return [Run("order", "simulate", {"seeds": p.seeds})]


def plan(ctx: Context) -> list[Run]:
    return [*ctx.paired_plan(_order_run(ctx.params)), *_logd_plan(ctx)]


@recipe("E2", "e2_order.toml", Params, plan=plan)
def run(ctx: Context):
    """Order of feature pick-up (simulation and ODE) and the log-D law of specialisation."""
    p = ctx.params
    sim, ode, dev = ctx.paired(_order_run(p))["order"]
    var = np.diag(np.asarray(law_of(sim).cov(), float))  # Var θ_f (law given by var or cov)
    order = np.argsort(-var)
    picks_sim, picks_ode = _pickups(sim, p.pickup_cos), _pickups(ode, p.pickup_cos)
    _order_claim(ctx, sim, var, order, picks_sim, picks_ode, dev)
    dims, times, T, example = _logd_runs(ctx)
    fit = _logd_fit(ctx, dims, times, T, example)
    _figure(ctx, sim, ode, var, order, dims, times, fit)


# ------------------------------------------------------------------------------- order
def _pickups(ds, level: float) -> np.ndarray:
    """(F, S): first t at which some head has |cos| ≥ level with feature f (NaN: never)."""
    t = ds.t.values
    out = []
    for f in range(ds.sizes["feature"]):
        c = np.abs(ds.cos.values[:, :, :, f]).max(-1)  # (S, T)
        out.append([first_crossing(t, c[s], level) for s in range(c.shape[0])])
    return np.asarray(out)


def _ordered(picks: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Per seed: every feature picked up, strictly later than the one of next larger variance."""
    p = picks[order]  # (F, S) in decreasing variance
    return np.all(np.isfinite(p), 0) & np.all(np.diff(p, axis=0) > 0, 0)


def _order_claim(ctx, sim, var, order, picks_sim, picks_ode, dev) -> None:
    p = ctx.params
    D = int(results.config_of(sim)["task"]["D"])
    ok_sim, ok_ode = _ordered(picks_sim, order), _ordered(picks_ode, order)
    gaps = np.diff(picks_sim[order], axis=0)  # (F−1, S) time between successive pick-ups
    gm = [finite_mean_se(g[np.isfinite(g)]) for g in gaps]

    def row(picks):
        return " < ".join(
            f"{fmt(m)} ± {fmt(s, 2)}" for m, s in (finite_mean_se(picks[f]) for f in order)
        )

    why = ("the order must hold in every seed of both the simulation and the ODE, and each gap "
           "between successive pick-ups must exceed 3 s.e. of its seed mean")  # fmt: skip
    ordered = [
        Claim(f"E2.order.{k}", f"ordered in every seed ({k})", f"seeds ({k}) in which every "
              "feature is picked up, strictly after the one of next larger variance", ok.sum(),
              0.0, Tolerance("at_least", ok.size, why=why), unit=f"of {ok.size} seeds")
        for k, ok in (("sim", ok_sim), ("ode", ok_ode))
    ]  # fmt: skip
    later = [
        Claim(f"E2.order.gap{i + 1}", f"feature {order[i + 1]} later than feature {order[i]}",
              "time between their pick-ups, simulation seed mean", m, s,
              Tolerance("above", 0.0, k=3, why=why))
        for i, (m, s) in enumerate(gm)
    ]  # fmt: skip
    ctx.claim(Claim(
        "E2.order",
        "Heads pick up features in decreasing order of Var θ_f; later features take longer",
        f"first t where some head has |cos| ≥ {p.pickup_cos} with feature f, in decreasing "
        f"Var θ_f = {', '.join(fmt(var[f]) for f in order)} (mean ± s.e.; D = {D}, "
        f"{sim.sizes['seed']} seeds; ODE from each seed's initial state)",
        detail=f"pick-up times: simulation {row(picks_sim)}; ODE {row(picks_ode)}. ODE vs "
        f"simulation over the run: risk {100 * dev['risk']['max_dev']:.1f} %, |Δcos| "
        f"{dev['cos']['max_dev']:.3f}",
        all_of=(*ordered, *later),
    ))  # fmt: skip


# ------------------------------------------------------------------------------- log D
def _logd_plan(ctx: Context) -> list[Run]:
    """One simulation per D of ``dims`` (the diffusion engine from ``logd_diffusion_from``, with
    its exact drift: its cost per unit t does not grow with D, and its mean's error on the
    common-phase plateau — O(1/(D√n)) from the samples, ~4e-4 of dQ/dt from the η² term's score
    points — is far below what 16–32 seeds resolve)."""
    p = ctx.params
    T = float(p.logd_T)
    big = p.logd_diffusion_from

    def engine(D):
        if big is None or D < big:
            return {}
        return {"train.engine": "diffusion", "diffusion.drift": "exact",
                "diffusion.n": p.logd_diffusion_n}  # fmt: skip

    return [
        Run(f"logD_{int(D)}", "simulate",
            {"task.D": int(D), "seeds": p.logd_seeds, "train.T": T,
             "record.grid": "linear", "record.points": round(T / p.logd_dt),
             "record.n_mc": 64, **engine(D)},
            extra=ctx.spec.get("logd", {}))
        for D in p.dims
    ]  # fmt: skip


def _logd_runs(ctx: Context):
    """One simulation per D (all in one :meth:`Context.runs` call) → dims, per-D times (+inf:
    censored at T), T and the largest D's result (whose common phase gives the saddle)."""
    p = ctx.params
    dims = [int(d) for d in p.dims]
    T = float(p.logd_T)
    out = ctx.runs(_logd_plan(ctx))
    times = []
    for D in dims:
        ds = out[f"logD_{D}"]
        ts = analysis.specialisation_times(ds.t.values, ds.Q.values, p.spec_cos)  # (S, H)
        common = analysis.unspecialised(ds.Q.values, p.spec_cos).any(-1)
        first = np.nanmin(np.where(np.isnan(ts), np.inf, ts), axis=1)  # +inf: censored at T
        times.append(np.where(common, first, np.nan))  # NaN: never reached the common phase
    return dims, times, T, out[f"logD_{dims[-1]}"]


def predicted_slope(ds, seed_index: int, n: int, together_cos: float = 0.99) -> dict | None:
    """1/(2λ) ± s.e. from the saddle theory: the common phase of one seed (its flattest grid
    point, risk per decade of t, while every head is within ``together_cos`` of the heads' mean)
    polished into a fixed point with :func:`headspec.dynamics.saddles.saddle_at` (head-cyclic
    drift samples, full drift), λ its leading unstable rate (s.e. by the delta method). None
    when the heads are never together or the fixed point has no unstable mode."""
    from headspec.conventions import build
    from headspec.conventions.runs import config_model
    from headspec.dynamics.problem import OrderParameters
    from headspec.dynamics.saddles import saddle_at

    one = ds.isel(seed=seed_index)
    t, r = one.t.values, one.risk.values
    ok = (t > 0) & analysis.unspecialised(one.Q.values, together_cos)
    if ok.sum() < 2:
        return None
    lt = np.log10(np.where(t > 0, t, np.nan))
    slope = np.abs(np.gradient(r[t > 0], lt[t > 0]))
    slope = np.concatenate([np.full(int((t <= 0).sum()), np.inf), slope])
    k = int(np.argmin(np.where(ok, slope, np.inf)))
    cfg = config_model(ds)
    law = cfg.task.latent.build()
    problem = build.analysis_problem(cfg, law, ds.sizes["head"], n, cyclic=True)
    state = OrderParameters(*(one[v].values[k] for v in ("M", "Q", "b")))
    s = saddle_at(state, problem)
    if not s.unstable:
        return None
    lam, se = float(s.unstable[0].eigenvalue.real), float(np.nan_to_num(s.unstable[0].se))
    return {"lambda": lam, "lambda_se": se, "slope": 1 / (2 * lam),
            "slope_se": se / (2 * lam**2), "risk": s.risk, "t": float(t[k])}  # fmt: skip


def _logd_fit(ctx: Context, dims, times, T, example) -> dict:
    p = ctx.params
    rng = np.random.default_rng(0)
    stats = [censored_median(np.asarray(x, float), rng) for x in times]
    med = np.array([m for m, _ in stats])
    se = np.array([s for _, s in stats])
    ok = np.isfinite(med) & np.isfinite(se) & (se > 0)
    lnD = np.log(np.asarray(dims, float))
    fit = weighted_line(lnD[ok], med[ok], se[ok]) if ok.sum() >= 3 else None
    pred = predicted_slope(example, 0, int(p.saddle_n))
    cens = [int(np.isinf(x).sum()) for x in times]
    per_d = ", ".join(f"D = {d}: {fmt(m)} ± {fmt(s, 2)}" + (f" ({c} censored)" if c else "")
                      for d, m, s, c in zip(dims, med, se, cens, strict=True))  # fmt: skip
    nan = float("nan")
    b, bse = (fit.slope, fit.slope_se_scaled) if fit is not None else (nan, nan)
    slope, slope_se = (pred["slope"], pred["slope_se"]) if pred is not None else (nan, nan)
    comb = float(np.hypot(bse, slope_se))
    detail = f"medians {per_d}"
    if fit is None:
        detail = f"too few D with a median ({per_d})"
    elif pred is None:
        detail += "; no saddle prediction (no unstable common phase found)"
    else:
        detail += (f"; χ²/dof {fmt(fit.chi2_dof, 2)}; saddle theory 1/(2λ) = "
                   f"{fmt(slope)} ± {fmt(slope_se, 2)} (λ = {pred['lambda']:.4f} ± "
                   f"{pred['lambda_se']:.4f})")  # fmt: skip
    why = (
        f"b > 3 s.e. (growth), and |b − 1/(2λ)| ≤ {p.consistency_k} × √(s.e.(b)² + "
        "s.e.(1/(2λ))²) (consistency at ≈ 95 %; s.e.(b) inflated by √(χ²/dof) when > 1)"
    )
    ctx.claim(Claim(
        "E2.log_d",
        "The time to specialise grows like log D, with the saddle theory's slope 1/(2λ)",
        f"first head's specialisation time (cos < {p.spec_cos} with the heads' mean, after "
        f"the common phase; censored at T = {fmt(T)}), median over {p.logd_seeds} seeds "
        "per D with a bootstrap s.e.; weighted least squares t_spec = a + b·ln D (natural log) "
        "on the medians; λ the leading unstable eigenvalue of the common phase's fixed point",
        detail=detail,
        all_of=(
            Claim("E2.log_d.growth", "grows", "slope b per unit ln D", b, bse,
                  Tolerance("above", 0.0, k=3, why=why)),
            Claim("E2.log_d.saddle", "at the saddle theory's slope", "b − 1/(2λ), s.e. combined",
                  b - slope, comb, Tolerance("within", 0.0, k=p.consistency_k, why=why)),
        ),
    ))  # fmt: skip
    return {"fit": fit, "pred": pred, "med": med, "se": se}


# ------------------------------------------------------------------------------- figure
def _figure(ctx: Context, sim, ode, var, order, dims, times, res) -> None:
    from matplotlib.figure import Figure

    p = ctx.params
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    a1, a2 = fig.subplots(1, 2)
    t = sim.t.values
    pos = t > 0
    for i, f in enumerate(order):
        for ds, ls, who in ((sim, "-", "sim"), (ode, "--", "ODE")):
            c = np.abs(ds.cos.values[:, :, :, f]).max(-1).mean(0)
            a1.plot(t[pos], c[pos], ls, color=f"C{i}", lw=2 if who == "sim" else 1.5,
                    label=f"{who}: feature {f} (Var θ = {fmt(var[f])})")  # fmt: skip
    a1.set_xscale("log")
    a1.set_xlabel("t")
    a1.set_ylabel("max over heads |cos(k_h, k*_f)|, mean over seeds")
    a1.axhline(p.pickup_cos, color="0.5", ls=":")
    a1.legend(fontsize="x-small")
    D = int(results.config_of(sim)["task"]["D"])
    a1.set_title(f"order of pick-up: simulation (D = {D}) vs ODE", fontsize="medium")
    for d, x in zip(dims, times, strict=True):
        x = np.asarray(x, float)
        fin = x[np.isfinite(x)]
        jit = np.exp(np.random.default_rng(0).normal(0, 0.05, fin.size))
        a2.plot(d * jit, fin, ".", color="0.6", ms=4)
    a2.plot([], [], ".", color="0.6", label="seeds")
    ok = np.isfinite(res["med"])
    a2.errorbar(np.asarray(dims)[ok], res["med"][ok], 2 * np.nan_to_num(res["se"][ok]), fmt="o",
                color="C0", label="median ± 2 s.e.")  # fmt: skip
    dd = np.geomspace(min(dims), max(dims), 50)
    fit, pred = res["fit"], res["pred"]
    if fit is not None:
        b_se = fmt(fit.slope_se_scaled, 2)
        a2.plot(dd, fit.intercept + fit.slope * np.log(dd), "C0-",
                label=f"fit: {fmt(fit.slope)} ± {b_se} · ln D")  # fmt: skip
        if pred is not None:
            mid = np.log(np.sqrt(min(dims) * max(dims)))
            y0 = fit.intercept + fit.slope * mid
            a2.plot(dd, y0 + pred["slope"] * (np.log(dd) - mid), "k--",
                    label=f"saddle theory 1/(2λ) = {fmt(pred['slope'])}")  # fmt: skip
    a2.set_xscale("log")
    a2.set_xlabel("D")
    a2.set_ylabel("first specialisation time")
    a2.legend(fontsize="x-small")
    a2.set_title("time to specialise vs D (simulation)", fontsize="medium")
    ctx.figure(fig, "order_and_logD")
