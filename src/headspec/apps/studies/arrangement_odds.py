"""Study ``arrangement_odds``: from random small starts, how often training ends in each
arrangement of the heads (issue 55, SPEC §7 E7) — SGD on the exact reduced engine beside the
diffusion engine at the same D, and the ODE from each SGD seed's initial state.

Per activation and D (setup and cost: its TOML in ``recipes/``): the arrangement each seed ends
in (:func:`~headspec.dynamics.arrangements.arrangements_of`, the map's own labels; an idle head
by E9's census rule), for the three routes. Claims, per activation and D: SGD and the diffusion
engine end in the same law of arrangements — the χ² of their 2 × k table with a permutation
p-value (:func:`~headspec.core.stats.compare_categories`), decided at level ``alpha`` divided by
the number of such tests (Bonferroni over activations × D, the multiple-testing rule). Measured
beside it: the per-seed agreement of the ODE and SGD (the fraction of seeds whose ODE from the
same initial state ends in the same arrangement, ± its binomial s.e.), as a function of D — does
it tend to 1 (the choice is made by the initial state), or not (SGD's noise decides at every D)?
Writes ``arrangement_odds.json`` (every seed's arrangement, every count) beside the report.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from headspec.apps.experiments.base import Context, Run
from headspec.apps.experiments.claims import Claim, Tolerance
from headspec.apps.experiments.e7 import isotropic_latent
from headspec.apps.experiments.params import Cosine, Count, Fraction, Positive, RecipeParams
from headspec.apps.experiments.registry import study
from headspec.core.stats import compare_categories
from headspec.dynamics.arrangements import arrangements_of, resolved, same_arrangement

Activation = Literal["softmax", "softmax1", "bayes_softmax"]
ROUTES = ("sgd", "diffusion", "ode")  # the reduced engine, the diffusion engine, the ODE


class Params(RecipeParams):
    a: Positive = Field(2.5, description="the atoms' size (θ = ±a·e_f)")
    F: Count = Field(2, description="features")
    H: Count = Field(4, description="heads")
    activations: list[Activation] = Field(min_length=1, description="the activations")
    dims: list[Count] = Field(min_length=1, description="D of the runs")
    seeds: Count = Field(64, description="seeds per activation and D")
    T: Positive = Field(600.0, description="horizon")
    points: Count = Field(30, description="recorded points")
    diffusion_engine: bool = Field(True, description="run the diffusion engine beside SGD")
    min_cos: Cosine = Field(0.5, description="a head sits on a pool direction at this cosine …")
    margin: float = Field(0.1, ge=0, description="… beating every other one's by this")
    idle_frac: Fraction = Field(0.25, description="idle: Q_hh below this × the largest")
    alpha: Fraction = Field(0.05, description="level of the family of same-law tests")
    n_perm: Count = Field(10_000, description="relabellings of each permutation test")


def _name(act: str, D: int, route: str = "sgd") -> str:
    return f"{route}_{act}_D{D}"


def _sims(ctx: Context) -> tuple[list[Run], list[Run]]:
    """(the reduced-engine simulations, the diffusion-engine ones)."""
    p = ctx.params
    extra = {"task": {"latent": isotropic_latent(p.F, p.a)}}
    sgd, dif = [], []
    for act in p.activations:
        for D in p.dims:
            sets = {"model.activation": act, "model.H": p.H, "task.D": D, "seeds": p.seeds,
                    "train.T": p.T, "record.points": p.points}  # fmt: skip
            sgd.append(Run(_name(act, D), "simulate", {**sets, "train.engine": "reduced"}, extra))
            if p.diffusion_engine:
                dif.append(Run(_name(act, D, "diffusion"), "simulate",
                               {**sets, "train.engine": "diffusion"}, extra))  # fmt: skip
    return sgd, dif


def runs(ctx: Context) -> list[Run]:
    sgd, dif = _sims(ctx)
    return [*ctx.paired_plan(sgd), *dif]


@study("arrangement_odds", "arrangement_odds.toml", Params, plan=runs)
def run(ctx: Context):
    """The odds of each arrangement from random starts: SGD, diffusion engine, ODE, per D."""
    p = ctx.params
    sgd, dif = _sims(ctx)
    pairs = ctx.paired(sgd)
    difs = ctx.runs(dif) if dif else {}
    law = isotropic_latent(p.F, p.a)
    atoms, probs = np.asarray(law["atoms"]), np.asarray(law["probs"])
    kw = {"min_cos": p.min_cos, "margin": p.margin, "idle_frac": p.idle_frac}
    tests = len(p.activations) * len(p.dims) if p.diffusion_engine else 0
    rng = np.random.default_rng(0)
    rows = []
    for act in p.activations:
        idle = act != "softmax"
        for D in p.dims:
            sim, ode, _ = pairs[_name(act, D)]
            ends = {"sgd": sim, "ode": ode}
            if p.diffusion_engine:
                ends["diffusion"] = difs[_name(act, D, "diffusion")]
            got = {r: arrangements_of(ds.M.values[:, -1], ds.Q.values[:, -1], atoms, probs,
                                      idle=idle, **kw) for r, ds in ends.items()}  # fmt: skip
            same = [same_arrangement(a, b) for a, b in zip(got["sgd"], got["ode"], strict=True)]
            agree, n = float(np.mean(same)), len(same)
            se = float(np.sqrt(agree * (1 - agree) / n))
            both = [s for s, a, b in zip(same, got["sgd"], got["ode"], strict=True)
                    if resolved(a) and resolved(b)]  # fmt: skip
            n_both, n_same = len(both), int(sum(both))
            row = {"activation": act, "D": D, "T": float(sim.t[-1]), "arrangements": got,
                   "agreement": agree, "agreement_se": se, "resolved_both": n_both,
                   "resolved_same": n_same}  # fmt: skip
            if p.diffusion_engine:
                t = compare_categories(got["sgd"], got["diffusion"], rng, p.n_perm)
                row |= {"chi2": t.chi2, "p_value": t.p_value}
                ctx.claim(Claim(
                    f"{ctx.id}.same_law.{act}.D{D}",
                    f"{act}, D = {D}: SGD and the diffusion engine end in the same law of "
                    "arrangements",
                    f"permutation p-value of the χ² of their {len(t.categories)}-arrangement "
                    f"table ({n} seeds each)",
                    t.p_value, 0.0,
                    Tolerance("at_least", p.alpha / tests, why=f"not rejected at level "
                              f"{p.alpha:g}/{tests} (Bonferroni over activations × D); with "
                              f"{n} seeds per route only large differences in the odds are "
                              "detectable"),
                    detail="; ".join(f"{c}: {x}/{y}" for c, x, y in
                                     zip(t.categories, t.counts_a, t.counts_b, strict=True)),
                ))  # fmt: skip
            ctx.claim(Claim(
                f"{ctx.id}.agreement.{act}.D{D}",
                f"{act}, D = {D}: the ODE from a seed's initial state ends in that seed's "
                "arrangement",
                "fraction of seeds (ODE and SGD in the same arrangement at T; a seed with a head "
                "on no pool direction in either counts as not the same)",
                agree, se, unit="%",
                detail=f"seeds resolved at T in both routes: {n_both} of {n}; the same "
                f"arrangement in {n_same} of them; a head on no pool direction at T: "
                + ", ".join(f"{r} {sum(not resolved(x) for x in got[r])}" for r in got),
            ))  # fmt: skip
            rows.append(row)
    _table(ctx, rows)
    from headspec.apps.studies.escape import plain
    from headspec.conventions.io import write_json_atomic

    write_json_atomic(ctx.outdir / "arrangement_odds.json", plain({"rows": rows}))
    _figure(ctx, rows)


def _odds(names: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in names:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _table(ctx: Context, rows: list[dict]) -> None:
    """Per activation and D: the most common arrangements of each route, the agreement."""
    ctx.outcome.table_header = ("activation", "D", "route", "arrangements at T (seeds)",
                                "ODE = SGD")  # fmt: skip
    table = []
    for r in rows:
        for route in [x for x in ROUTES if x in r["arrangements"]]:
            odds = _odds(r["arrangements"][route])
            text = "; ".join(f"{k} ×{v}" for k, v in list(odds.items())[:4])
            more = len(odds) - 4
            agree = f"{r['agreement']:.2f} ± {r['agreement_se']:.2f}" if route == "ode" else ""
            table.append((r["activation"], str(r["D"]), route,
                          text + (f"; {more} more" if more > 0 else ""), agree))  # fmt: skip
    ctx.outcome.table = table


def _figure(ctx: Context, rows: list[dict]) -> None:
    """Per activation: stacked bars of the arrangements' odds per D and route, and the ODE–SGD
    agreement against D."""
    import matplotlib.pyplot as plt

    acts = list(dict.fromkeys(r["activation"] for r in rows))
    fig, axs = plt.subplots(len(acts), 2, figsize=(11, 3.4 * len(acts)), squeeze=False,
                            width_ratios=(3, 1))  # fmt: skip
    for (left, right), act in zip(axs, acts, strict=True):
        mine = [r for r in rows if r["activation"] == act]
        names = list(_odds([x for r in mine for v in r["arrangements"].values() for x in v]))
        colours = {n: plt.cm.tab20(i % 20) for i, n in enumerate(names)}
        x, labels = 0, []
        for r in mine:
            for route in [q for q in ROUTES if q in r["arrangements"]]:
                odds, n, bottom = _odds(r["arrangements"][route]), len(r["arrangements"][route]), 0
                for name in names:
                    h = odds.get(name, 0) / n
                    left.bar(x, h, bottom=bottom, color=colours[name], width=0.8,
                             label=name if x == 0 or name not in left.get_legend_handles_labels()[1]
                             else None)  # fmt: skip
                    bottom += h
                labels.append(f"{route}\nD={r['D']:g}")
                x += 1
        left.set_xticks(range(len(labels)), labels, fontsize="x-small")
        left.set(ylabel="fraction of seeds", title=f"{act}: arrangement at T")
        left.legend(fontsize="xx-small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
        D = [r["D"] for r in mine]
        right.errorbar(D, [r["agreement"] for r in mine], [2 * r["agreement_se"] for r in mine],
                       fmt="o-")  # fmt: skip
        right.set(xscale="log", ylim=(-0.05, 1.05), xlabel="D", ylabel="ODE = SGD (± 2 s.e.)",
                  title="per-seed agreement")  # fmt: skip
    fig.tight_layout()
    ctx.figure(fig, "odds")
