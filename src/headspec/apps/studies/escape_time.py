"""Study ``escape_time``: the saddle theory's escape-time law against SGD and the ODE.

Setup, routes and cost: the study's TOML (``recipes/escape_time.toml``); the t_esc definitions
and statistics: :mod:`headspec.apps.studies.escape`. Claims: the slope of median t_esc against
ln D in SGD, and the paired slope of the head-cyclic ODE, each equal to 1/(2λ) within
``slope_k`` combined standard errors; measured beside them: λ, the slopes from D ≥ 10³, the
paired SGD slope and the plain ODE route (whose samples break the head symmetry). Writes
``escape_time.json`` (every number) beside the report.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from headspec.apps.experiments.base import Context, Run
from headspec.apps.experiments.claims import Claim, Tolerance, value_se
from headspec.apps.experiments.params import Count, Positive, RecipeParams
from headspec.apps.experiments.registry import study
from headspec.apps.studies import escape


class Params(RecipeParams):
    sim_dims: list[Count] = Field(description="D of the SGD runs")
    sim_seeds: list[Count] = Field(description="seeds of the SGD run at each D of sim_dims")
    ode_dims: list[Count] = Field(description="D of the ODE runs (their initial law)")
    ode_seeds: Count = Field(16, description="seeds of each ODE run")
    T_sim: Positive = Field(60.0, description="SGD horizon")
    T_ode: Positive = Field(75.0, description="ODE horizon")
    record_dt: Positive = Field(0.25, description="record spacing (T/dt + 1 points)")
    ode_n: Count = Field(1024, description="drift samples of the plain ODE route")
    odec_n: Count = Field(512, description="drift samples (× H) of the head-cyclic ODE route")
    rate_n: Count = Field(4096, description="samples (× H) of the fixed point's Jacobian")
    local_times: list[Positive] = Field(description="times of λ along the symmetric trajectory")
    slope_k: Positive = Field(3.0, description="tolerance of a slope, in combined s.e.")


ROUTES = {
    "sim": "SGD, reduced engine",
    "ode": "ODE, plain drift samples",
    "odec": "ODE, head-cyclic drift samples",
}


def _points(T: float, dt: float) -> int:  # the script's grid (spacing ≈ dt): the docs' runs
    return round(T / dt) + 1


def runs(ctx: Context) -> list[Run]:
    p = ctx.params
    sim = [
        Run(
            f"sim_D{D}",
            "simulate",
            {
                "task.D": D,
                "seeds": S,
                "train.T": p.T_sim,
                "record.points": _points(p.T_sim, p.record_dt),
                "train.engine": "reduced",
                "train.dtype": "float64",
            },
        )
        for D, S in zip(p.sim_dims, p.sim_seeds, strict=True)
    ]
    ode = [
        {
            "task.D": D,
            "seeds": p.ode_seeds,
            "train.T": p.T_ode,
            "record.points": _points(p.T_ode, p.record_dt),
        }
        for D in p.ode_dims
    ]
    plain = [
        Run(f"ode_D{D}", "theory", {**o, "theory.n": p.ode_n, "theory.head_cyclic": False})
        for D, o in zip(p.ode_dims, ode, strict=True)
    ]
    cyc = [
        Run(f"odec_D{D}", "theory", {**o, "theory.n": p.odec_n, "theory.head_cyclic": True})
        for D, o in zip(p.ode_dims, ode, strict=True)
    ]
    T = max(p.local_times)  # the symmetric trajectory (both heads alike) for the local rates
    sym = Run(
        "symmetric",
        "theory",
        {
            "task.D": 1000,
            "seeds": 1,
            "train.T": T,
            "record.points": round(T / min(p.local_times)),  # t = 5, 10, …: the local times
            "theory.init": {"kind": "symmetric"},
            "theory.n": p.rate_n,
        },
    )
    return [*sim, *plain, *cyc, sym]


def _local_rates(ctx: Context, ds, problem) -> dict:
    from headspec.dynamics.problem import OrderParameters

    out = {"t": [], "lambda": [], "lambda_se": []}
    for t in ctx.params.local_times:
        s = ds.isel(seed=0).sel(t=t, method="nearest")
        state = OrderParameters(*(np.asarray(s[v].values) for v in ("M", "Q", "b")))
        r = escape.head_difference_rate(problem, state, ds.sizes["head"])
        out["t"].append(float(s.t))
        out["lambda"].append(r["lambda"])
        out["lambda_se"].append(r["lambda_se"])
    return out


@study("escape_time", "escape_time.toml", Params, plan=runs)
def run(ctx: Context):
    """The saddle theory's escape time t_esc ≈ const + ln(D)/(2λ) against SGD and the ODE."""
    p = ctx.params
    done = ctx.runs(runs(ctx))
    rate, problem = escape.rate_of(ctx, p.rate_n, "rate")
    own, _ = escape.rate_of(ctx, p.odec_n, "rate_odec")
    local = _local_rates(ctx, done["symmetric"], problem)
    pred = escape.predicted_slope(rate["lambda"], rate["lambda_se"])
    pred_own = escape.predicted_slope(own["lambda"], own["lambda_se"])
    rng = np.random.default_rng(0)
    rows, per_seed = {}, {}
    for kind, dims in (("sim", p.sim_dims), ("ode", p.ode_dims), ("odec", p.ode_dims)):
        for D in dims:
            ds = done[f"{kind}_D{D}"]
            esc = escape.of_dataset(ds)
            per_seed[kind, D] = esc["dM"]
            rows.setdefault(kind, []).append(
                {
                    "D": D,
                    "seeds": ds.sizes["seed"],
                    **{k: escape.summary(v, rng) for k, v in esc.items()},
                }
            )
    fits = {
        f"{k}/{lab}": escape.median_fit(rows[k], dmin)
        for k in ROUTES
        for lab, dmin in (("all", 0), ("D>=1e3", 1000))
    }
    paired = {
        k: escape.paired_slope(dims, [per_seed[k, D] for D in dims])
        for k, dims in (("sim", p.sim_dims), ("odec", p.ode_dims))
    }
    _claims(ctx, rate, pred, pred_own, fits, paired)
    _table(ctx, rows)
    _figure(ctx, rows, pred)
    from headspec.conventions.io import write_json_atomic

    write_json_atomic(
        ctx.outdir / "escape_time.json",
        escape.plain(
            {
                "rate": rate,
                "rate_odec": own,
                "local_rates": local,
                "predicted_slope": pred,
                "predicted_slope_odec": pred_own,
                "rows": rows,
                "fits": fits,
                "paired": paired,
            }
        ),
    )


def _claims(ctx: Context, rate, pred, pred_own, fits, paired) -> None:
    p, cid = ctx.params, ctx.id
    fp = rate["fixed_point"]
    ctx.claim(
        Claim(
            f"{cid}.rate",
            "The common phase is a saddle: its head-difference mode grows",
            "λ, the leading head-difference eigenvalue of the drift's Jacobian there",
            rate["lambda"],
            rate["lambda_se"],
            Tolerance("above", 0.0, k=p.slope_k, why="a growth rate clearly above 0"),
            detail=f"fixed point risk "
            f"{fp['risk']:.4f}, is_fixed {fp['is_fixed']}, leading of all modes: "
            f"{rate['is_leading']}; predicted slope 1/(2λ) = {value_se(*pred)}",
        )
    )
    ctx.claim(
        escape.slope_claim(
            f"{cid}.slope.sim",
            "In SGD, t_esc grows like ln(D)/(2λ)",
            fits["sim/all"],
            pred,
            p.slope_k,
            "from a weighted line through the per-D medians' bootstrap s.e.",
        )
    )
    ctx.claim(
        escape.slope_claim(
            f"{cid}.slope.odec",
            "In the head-cyclic ODE from the finite-D initial "
            "law, t_esc grows like ln(D)/(2λ) (paired slope; λ of its own samples)",
            paired["odec"] and {**paired["odec"], "Ds": list(p.ode_dims)},
            pred_own,
            p.slope_k,
            "over seeds: each seed's least-squares slope against ln D",
        )
    )
    for key, text, f in (
        ("sim_1e3", "SGD, D ≥ 10³", fits["sim/D>=1e3"]),
        ("sim_paired", "SGD, paired over seeds", paired["sim"]),
        (
            "ode",
            "plain ODE route (its samples break the head symmetry at "
            "O(1/√n), so it need not follow the law)",
            fits["ode/all"],
        ),
    ):
        f = f or {"slope": np.nan, "slope_se": np.nan}
        ctx.claim(
            Claim(
                f"{cid}.slope.{key}",
                f"Slope of t_esc against ln D: {text}",
                "fitted slope",
                f["slope"],
                f["slope_se"],
                detail=f"predicted 1/(2λ) = {value_se(*pred)}; D = {f.get('Ds', '—')}",
            )
        )


def _cell(r: dict | None, stat: str) -> str:
    if r is None or not np.isfinite(r["dM"][stat]):
        return "—"
    x = r["dM"]
    se = x["se"] if stat == "mean" else x["median_se"]
    cens = f" ({x['n_censored']} cens.)" if stat == "mean" and x["n_censored"] else ""
    return value_se(x[stat], se) + cens


def _table(ctx: Context, rows: dict) -> None:
    by = {k: {r["D"]: r for r in v} for k, v in rows.items()}
    ctx.outcome.table_header = (
        "D",
        "SGD seeds",
        "SGD median",
        "SGD mean",
        "ODE mean",
        "ODE-cyclic mean",
        "ODE-cyclic median",
    )
    ctx.outcome.table = [
        (
            escape.power(D),
            by["sim"][D]["seeds"] if D in by["sim"] else "—",
            _cell(by["sim"].get(D), "median"),
            _cell(by["sim"].get(D), "mean"),
            _cell(by["ode"].get(D), "mean"),
            _cell(by["odec"].get(D), "mean"),
            _cell(by["odec"].get(D), "median"),
        )
        for D in sorted(set().union(*by.values()))
    ]


def _figure(ctx: Context, rows: dict, pred) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    style = {"sim": ("o", "C0", "full"), "ode": ("s", "C1", "none"), "odec": ("D", "C2", "none")}
    for kind, label in ROUTES.items():
        rs = [r for r in rows[kind] if np.isfinite(r["dM"]["median"])]
        if rs:
            m, c, fill = style[kind]
            ax.errorbar(
                np.log([r["D"] for r in rs]),
                [r["dM"]["median"] for r in rs],
                [r["dM"]["median_se"] for r in rs],
                fmt=m,
                color=c,
                mfc=fill if fill == "none" else c,
                capsize=3,
                label=f"{label}: median",
            )
    sim = [r for r in rows["sim"] if np.isfinite(r["dM"]["median"])]
    if sim:
        x, y = np.log([r["D"] for r in sim]), np.array([r["dM"]["median"] for r in sim])
        xs = np.linspace(x.min() - 0.5, np.log(max(r["D"] for r in rows["odec"])) + 0.5, 2)
        ax.plot(
            xs,
            y.mean() + pred[0] * (xs - x.mean()),
            "k--",
            label=f"1/(2λ) = {pred[0]:.2f} (through the SGD medians)",
        )
    ax.set(
        xlabel="ln D",
        ylabel="t_esc (|M₀ − M₁| = 0.5)",
        title="Escape from the common phase (two softmax heads)",
    )
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    ctx.figure(fig, "t_esc")
