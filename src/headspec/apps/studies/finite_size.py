"""Study ``finite_size``: the time to leave the common phase from D = 10² to 10⁹ with the
diffusion engine, beside the saddle theory's 1/(2λ).

Setup and cost: the study's TOML (``recipes/finite_size.toml``); t_esc and its statistics:
:mod:`headspec.apps.studies.escape`. Claim: the slope of median t_esc against ln D equals
1/(2λ) within ``slope_k`` combined standard errors; measured beside it: the spread over seeds at
the smallest and the largest D. Writes ``finite_size.json`` (every number) beside the report.
"""

from __future__ import annotations

import json

import numpy as np
from pydantic import Field

from headspec.apps.experiments.base import Context, Run
from headspec.apps.experiments.claims import Claim, value_se
from headspec.apps.experiments.params import Count, Positive, RecipeParams
from headspec.apps.experiments.registry import study
from headspec.apps.studies import escape
from headspec.conventions import results


class Params(RecipeParams):
    dims: list[Count] = Field(description="D of the runs")
    seeds: Count = Field(16, description="seeds per D")
    T_base: Positive = Field(50.0, description="horizon at D = 100")
    T_per_lnD: float = Field(3.4, ge=0, description="horizon added per unit ln(D/100)")
    record_dt: Positive = Field(0.5, description="record spacing")
    rate_n: Count = Field(4096, description="samples (× H) of the fixed point's Jacobian")
    slope_k: Positive = Field(3.0, description="tolerance of the slope, in combined s.e.")


def horizon(p: Params, D: int) -> float:
    """T at ``D``: T_base + T_per_lnD·ln(D/100), rounded up to a multiple of 5."""
    return float(np.ceil((p.T_base + p.T_per_lnD * np.log(D / 100)) / 5) * 5)


def runs(ctx: Context) -> list[Run]:
    p = ctx.params
    return [
        Run(
            f"D{D}",
            "simulate",
            {
                "task.D": D,
                "seeds": p.seeds,
                "train.T": horizon(p, D),
                "record.points": round(horizon(p, D) / p.record_dt),
            },
        )
        for D in p.dims
    ]


@study("finite_size", "finite_size.toml", Params, plan=runs)
def run(ctx: Context):
    """t_esc from D = 10² to 10⁹ with the diffusion engine, beside the saddle theory's 1/(2λ)."""
    p = ctx.params
    done = ctx.runs(runs(ctx))
    rate, _ = escape.rate_of(ctx, p.rate_n, "rate")
    pred = escape.predicted_slope(rate["lambda"], rate["lambda_se"])
    rng = np.random.default_rng(0)
    rows = []
    for D in p.dims:
        ds = done[f"D{D}"]
        te = escape.of_dataset(ds)["dM"]
        rows.append(
            {
                "D": D,
                "T": horizon(p, D),
                "seconds": float(ds.attrs.get(results.COMPUTE_SECONDS, 0)),
                **escape.summary(te, rng),
                "values": te.tolist(),
            }
        )
    fit = escape.log_d_slope(
        [r["D"] for r in rows], [r["median"] for r in rows], [r["median_se"] for r in rows]
    )
    ctx.claim(
        escape.slope_claim(
            f"{ctx.id}.slope",
            f"With the diffusion engine from D = {escape.power(min(p.dims))} to "
            f"{escape.power(max(p.dims))}, t_esc grows like ln(D)/(2λ)",
            fit,
            pred,
            p.slope_k,
            "from a weighted line through the per-D medians' bootstrap s.e.; the seeds' shared "
            "start correlates the medians across D, which it ignores (χ²/dof in the detail)",
        )
    )
    lo, hi = min(rows, key=lambda r: r["D"]), max(rows, key=lambda r: r["D"])
    for key, r in (("spread_low", lo), ("spread_high", hi)):
        ctx.claim(
            Claim(
                f"{ctx.id}.{key}",
                f"Spread of t_esc over seeds at D = {escape.power(r['D'])}",
                "s.d. of t_esc over the escaped seeds",
                r["sd"],
                detail=f"{r['n']} seeds, {r['n_censored']} censored",
            )
        )
    _table(ctx, rows)
    reduced = _reduced(ctx)
    from headspec.conventions.io import write_json_atomic

    write_json_atomic(
        ctx.outdir / "finite_size.json",
        escape.plain(
            {
                "rate": rate,
                "predicted_slope": pred,
                "rows": rows,
                "fit_median": fit,
                "reduced": reduced,
            }
        ),
    )
    _figure(ctx, rows, fit, pred, reduced)


def _table(ctx: Context, rows: list[dict]) -> None:
    """Per D: horizon, median and mean t_esc, spread, quantiles, censored seeds, wall time."""
    ctx.outcome.table_header = (
        "D",
        "T",
        "median t_esc",
        "mean t_esc",
        "s.d.",
        "10–90 %",
        "censored",
        "wall (s)",
    )
    ctx.outcome.table = [
        (
            escape.power(r["D"]),
            f"{r['T']:g}",
            value_se(r["median"], r["median_se"]),
            value_se(r["mean"], r["se"]),
            f"{r['sd']:.2f}",
            f"{r['q10']:.1f}–{r['q90']:.1f}",
            f"{r['n_censored']}/{r['n']}",
            f"{r['seconds']:.0f}",
        )
        for r in rows
    ]


def _reduced(ctx: Context) -> list[dict]:
    """The reduced engine's medians from the escape-time study's report beside this one
    (``../escape_time/escape_time.json``), when it is there."""
    path = ctx.outdir.parent / "escape_time" / "escape_time.json"
    if not path.exists():
        return []
    rows = json.loads(path.read_text())["rows"]["sim"]
    return [
        {"D": r["D"], "median": r["dM"]["median"], "median_se": r["dM"]["median_se"]}
        for r in rows
        if r["dM"]["median"] is not None and r["dM"]["median_se"] is not None  # JSON null: NaN
    ]


def _figure(ctx: Context, rows, fit, pred, reduced) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    jitter = np.random.default_rng(0)
    for r in rows:  # every seed, in grey
        v = np.asarray(r["values"], float)
        v = v[np.isfinite(v)]
        ax.plot(r["D"] * np.exp(jitter.normal(0, 0.06, v.size)), v, ".", color="0.75", ms=3)
    D = np.array([r["D"] for r in rows], float)
    ax.errorbar(
        D,
        [r["median"] for r in rows],
        [2 * r["median_se"] for r in rows],
        fmt="o",
        color="C0",
        label="diffusion engine: median ± 2 s.e.",
    )
    if reduced:
        ax.errorbar(
            [r["D"] for r in reduced],
            [r["median"] for r in reduced],
            [2 * r["median_se"] for r in reduced],
            fmt="s",
            mfc="none",
            color="C3",
            label="exact reduced engine (escape-time study)",
        )
    if fit is not None:
        x = np.geomspace(D.min(), D.max())
        ax.plot(
            x,
            fit["intercept"] + fit["slope"] * np.log(x),
            color="C0",
            lw=1,
            label=f"fit: slope {value_se(fit['slope'], fit['slope_se'])}",
        )
        mid = np.log(np.sqrt(D.min() * D.max()))
        y0 = fit["intercept"] + fit["slope"] * mid
        ax.plot(
            x,
            y0 + pred[0] * (np.log(x) - mid),
            "k--",
            lw=1,
            label=f"saddle theory 1/(2λ) = {value_se(*pred)}",
        )
    ax.set_xscale("log")
    ax.set(
        xlabel="D",
        ylabel="time to specialise t_esc",
        title="Leaving the common phase: t_esc against ln D (grey: each seed)",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    ctx.figure(fig, "t_esc")
