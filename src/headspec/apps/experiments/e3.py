"""E3 — activations (SPEC §7): on the same task and H, softmax stalls above R_B, softmax-1 is
lower (most of all with opposite signals), Bayes-softmax reaches R_B once H ≥ #atoms.

Every activation on every law is simulated on the exact reduced engine at large D beside the ODE
from each seed's exact initial state (``ctx.paired``), at a constant η. Bayes-softmax is run again
with the annealed (inverse-time) η for "reaches R_B"; its constant-η run is the contrast (O(η)
excess). All final risks are compared with R_B on common samples (:func:`annealed.final_excess`), so
each verdict's tolerance is a multiple of a standard error (Monte Carlo and seed mean).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from headspec.apps.experiments.annealed import (
    AnnealParams,
    anneal_run,
    final_excess,
    overlay_risk,
    pct,
    rb_on_record_base,
    reach_annealed,
    risk_dev_text,
)
from headspec.apps.experiments.base import Context, Run, ode_beside
from headspec.apps.experiments.claims import Claim, Tolerance
from headspec.apps.experiments.registry import recipe


def _beyond(cid: str, x: dict, hi: str, lo: str, measure: str, why: str) -> tuple[Claim, ...]:
    """Parts ``cid.sim`` and ``cid.ode``: activation ``hi``'s final excess over R_B minus
    ``lo``'s, > 3 s.e. of the difference (seed means and paired Monte Carlo)."""
    return tuple(
        Claim(f"{cid}.{k}", k, f"{measure} ({k})", x[hi][k]["mean"] - x[lo][k]["mean"],
              float(np.hypot(x[hi][k]["se"], x[lo][k]["se"])),
              Tolerance("above", 0.0, k=3, why=why), unit="%")
        for k in ("sim", "ode")
    )  # fmt: skip


def _end_slope(ds) -> float:
    """d ln R / d ln t of the seed-mean risk over the last half decade of t (0: a plateau)."""
    t = ds.t.values
    r = ds.risk.mean("seed").values
    k = np.flatnonzero(t >= t[-1] / np.sqrt(10))[0]
    return float(np.log(r[-1] / r[k]) / np.log(t[-1] / t[k]))


Activation = Literal["softmax", "softmax1", "bayes_softmax"]


class Params(AnnealParams):
    """E3's parameters (``[experiment]`` of ``e3_activations.toml``)."""

    activations: list[Activation] = Field(min_length=1, description="the activations compared")
    laws: list[dict] = Field(min_length=1, description="latent laws (task.latent tables)")


def _batches(p: Params) -> dict[str, list[Run]]:
    """Law kind → its simulations: each activation at constant η, Bayes-softmax annealed."""
    batches = {}
    for law in p.laws:
        kind, extra = law["kind"], {"task": {"latent": law}}
        batches[kind] = [
            Run(f"{kind}_{a}", "simulate", {"seeds": p.seeds, "model.activation": a}, extra)
            for a in p.activations
        ]
        bs = {"model.activation": "bayes_softmax"}
        batches[kind].append(anneal_run(f"{kind}_bayes_softmax_anneal", p, bs, extra=extra))
    return batches


def plan(ctx: Context) -> list[Run]:
    return ctx.paired_plan([r for b in _batches(ctx.params).values() for r in b])


@recipe("E3", "e3_activations.toml", Params, plan=plan)
def run(ctx: Context):
    """Final risks of the three activations against R_B (simulation beside the ODE), on each
    latent law of the recipe; Bayes-softmax also with an annealed η."""
    from matplotlib.figure import Figure

    p = ctx.params
    batches = _batches(p)
    # every law's runs in one call: all simulations at once, then all ODEs (fewer waits)
    every = ctx.paired([r for b in batches.values() for r in b])
    fig = Figure(figsize=(6.2 * len(p.laws), 4.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(p.laws)))
    gaps, shares = {}, {}
    for i, law in enumerate(p.laws):
        kind = law["kind"]
        pairs = {r.name: every[r.name] for r in batches[kind]}
        gaps[kind], shares[kind] = _law_claims(ctx, kind, pairs)
        _panel(axes[i], ctx, kind, pairs)
    if "flipped_spike" in gaps and "discrete" in gaps:
        _opposite(ctx, gaps, shares)
    ctx.figure(fig, "activations")


def _law_claims(ctx: Context, kind: str, pairs: dict) -> tuple[tuple, float]:
    """One law's claims (stalls, lower, reaches R_B, ODE beside); returns the relative risk
    reduction softmax → softmax-1 (simulation, its s.e., ODE) and the share of softmax's excess
    that softmax-1 removes."""
    p = ctx.params
    D, lr, n = ctx.base.task.D, ctx.base.train.lr, p.excess_samples
    ex = {k: {"sim": final_excess(v[0], n), "ode": final_excess(v[1], n)} for k, v in pairs.items()}
    x = {a: ex[f"{kind}_{a}"] for a in p.activations}
    sl = {k: _end_slope(pairs[f"{kind}_softmax"][i]) for i, k in enumerate(("sim", "ode"))}
    ctx.claim(Claim(
        f"E3.{kind}.stalls",
        f"[{kind}] softmax stalls on a plateau above R_B",
        f"final relative excess over R_B at η = {lr:g}, softmax minus Bayes-softmax (same η, "
        f"same T; D = {D}), in simulation and ODE",
        detail="; ".join(f"{k}: softmax {pct(x['softmax'][k]['mean'], 1)} vs Bayes-softmax "
                         f"{pct(x['bayes_softmax'][k]['mean'], 1)}, log-slope of the softmax "
                         f"risk over the last half decade {sl[k]:+.3f}" for k in sl)
        + ". Bayes-softmax at the same constant η carries the same kind of O(η) excess, so "
        "the softmax excess beyond it is what the activation costs",
        all_of=_beyond(f"E3.{kind}.stalls", x, "softmax", "bayes_softmax",
                       "softmax's excess minus Bayes-softmax's",
                       "softmax's excess exceeds Bayes-softmax's by > 3 s.e. of the difference "
                       "(seed mean and paired Monte Carlo), in simulation and ODE"),
    ))  # fmt: skip
    ctx.claim(Claim(
        f"E3.{kind}.lower",
        f"[{kind}] softmax-1 is clearly lower than softmax",
        "final relative excess over R_B, softmax minus softmax-1, in simulation and ODE",
        detail="; ".join(f"{k}: softmax-1 {pct(x['softmax1'][k]['mean'], 1)} vs softmax "
                         f"{pct(x['softmax'][k]['mean'], 1)}" for k in ("sim", "ode")),
        all_of=_beyond(f"E3.{kind}.lower", x, "softmax", "softmax1",
                       "softmax's excess minus softmax-1's", "softmax-1 below softmax by > 3 "
                       "s.e. of the difference, in simulation and ODE"),
    ))  # fmt: skip
    sm, s1 = x["softmax"]["sim"], x["softmax1"]["sim"]
    g = (sm["mean"] - s1["mean"]) / (1 + sm["mean"])  # (R_sm − R_s1)/R_sm
    se_g = float(np.hypot(sm["se"], s1["se"])) / (1 + sm["mean"])
    smo, s1o = x["softmax"]["ode"], x["softmax1"]["ode"]
    gap = (g, se_g, (smo["mean"] - s1o["mean"]) / (1 + smo["mean"]))
    reach_annealed(ctx, f"E3.{kind}", f"[{kind}] ", p, pairs[f"{kind}_bayes_softmax_anneal"],
                   ex[f"{kind}_bayes_softmax_anneal"], x["bayes_softmax"], D, lr)  # fmt: skip
    ode_beside(
        ctx, f"E3.{kind}.ode_beside", f"D = {D}",
        max((d for d in (v[2]["risk"]["max_dev"] for v in pairs.values()) if d == d),
            default=float("nan")),
        "per run: " + "; ".join(f"{k.removeprefix(kind + '_')}: {risk_dev_text(v[2])}, final "
                                f"excess sim − ODE {pct(x_['sim']['mean'] - x_['ode']['mean'])}"
                                for (k, v), x_ in zip(pairs.items(), ex.values(), strict=True))
        + ". The largest deviations sit at the drops, whose times fluctuate between SGD and ODE",
        label=f"[{kind}] ", measure=", largest over the runs",
    )  # fmt: skip
    return gap, (sm["mean"] - s1["mean"]) / sm["mean"]


def _panel(ax, ctx: Context, kind: str, pairs: dict) -> None:
    """One law's risks: every activation's simulation and ODE, the annealed run, R_B."""
    p, cfg = ctx.params, ctx.base
    D, lr, H = cfg.task.D, cfg.train.lr, cfg.model.H
    rb = rb_on_record_base(pairs[f"{kind}_softmax"][0])
    for j, a in enumerate(p.activations):
        overlay_risk(ax, *pairs[f"{kind}_{a}"][:2], f"C{j}", a)
    overlay_risk(ax, *pairs[f"{kind}_bayes_softmax_anneal"][:2], "C3",
                 f"bayes_softmax, annealed (t0 = {p.anneal_t0:g})", rb)  # fmt: skip
    ax.set_yscale("log")
    ax.set_ylabel("risk (D → ∞ risk of the state)")
    ax.set_title(f"{kind} law, H = {H}, D = {D}, η = {lr:g} (dotted: R_B)", fontsize="medium")
    ax.legend(fontsize="x-small")


def _opposite(ctx: Context, gaps: dict, shares: dict) -> None:
    """The softmax-1 advantage, flipped spike against discrete."""
    (gf, sef, gfo), (gd, sed, gdo) = gaps["flipped_spike"], gaps["discrete"]
    se = float(np.hypot(sef, sed))
    why = "flipped spike ahead by > 3 s.e. of the difference in simulation, and ahead in the ODE"
    what = "relative risk reduction softmax → softmax-1, flipped spike minus discrete"
    ctx.claim(Claim(
        "E3.opposite",
        "The softmax-1 advantage is largest when signals point in opposite directions",
        "relative risk reduction softmax → softmax-1, (R_sm − R_s1)/R_sm: flipped spike vs "
        "discrete (simulation; ODE)",
        detail=f"simulation {100 * gf:.1f} ± {100 * sef:.1f} % vs {100 * gd:.1f} ± "
        f"{100 * sed:.1f} %, ODE {100 * gfo:.1f} % vs {100 * gdo:.1f} %; share of softmax's "
        f"excess over R_B that softmax-1 removes: {100 * shares['flipped_spike']:.0f} % vs "
        f"{100 * shares['discrete']:.0f} %",
        all_of=(Claim("E3.opposite.sim", "simulation", f"{what} (simulation)", gf - gd, se,
                      Tolerance("above", 0.0, k=3, why=why), unit="%"),
                Claim("E3.opposite.ode", "ODE", f"{what} (ODE; no s.e.: not compared with one)",
                      gfo - gdo, 0.0, Tolerance("above", 0.0, why=why), unit="%")),
    ))  # fmt: skip
