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
    eta_end,
    eta_limit,
    final_excess,
    overlay_risk,
    pct,
    rb_on_record_base,
    reach_claims,
    risk_dev_text,
    schedule_override,
)
from headspec.apps.experiments.base import Context, Run
from headspec.apps.experiments.claims import Claim, Tolerance
from headspec.apps.experiments.params import Count, Positive, RecipeParams
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


class Params(RecipeParams):
    """E3's parameters (``[experiment]`` of ``e3_activations.toml``)."""

    activations: list[Activation] = Field(min_length=1, description="the activations compared")
    laws: list[dict] = Field(min_length=1, description="latent laws (task.latent tables)")
    seeds: Count = Field(description="seeds per run")
    excess_samples: Count = Field(description="common samples of the paired excess over R_B")
    anneal_t0: Positive = Field(description="t0 of the annealed η(t) = η/(1 + t/t0)^power")
    anneal_power: Positive = Field(1.0, description="power of the annealed schedule")
    anneal_T: Positive = Field(description="horizon of the annealed runs")
    aim: Positive = Field(description="reaches R_B: a relative excess within this")


@recipe("E3", "e3_activations.toml", Params)
def run(ctx: Context):
    """Final risks of the three activations against R_B (simulation beside the ODE), on each
    latent law of the recipe; Bayes-softmax also with an annealed η."""
    from matplotlib.figure import Figure

    p = ctx.params
    laws = p.laws
    seeds, D, lr = int(p.seeds), int(ctx.config["task"]["D"]), float(ctx.config["train"]["lr"])
    H = int(ctx.config["model"]["H"])
    t0, power, Ta = float(p.anneal_t0), float(p.anneal_power), float(p.anneal_T)
    n = int(p.excess_samples)
    acts = list(p.activations)
    fig = Figure(figsize=(6.2 * len(laws), 4.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(laws)))
    gaps, shares = {}, {}
    batches = {}
    for law in laws:
        kind = law["kind"]
        extra = {"task": {"latent": law}}
        batches[kind] = [
            Run(f"{kind}_{a}", "simulate", (f"seeds={seeds}", f'model.activation="{a}"'), extra)
            for a in acts
        ]
        batches[kind].append(
            Run(f"{kind}_bayes_softmax_anneal", "simulate",
                (f"seeds={seeds}", 'model.activation="bayes_softmax"', f"train.T={Ta}",
                 schedule_override(t0, power)), extra)
        )  # fmt: skip
    # every law's runs in one call: all simulations at once, then all ODEs (fewer waits)
    every = ctx.paired([r for b in batches.values() for r in b])
    for i, law in enumerate(laws):
        kind = law["kind"]
        pairs = {r.name: every[r.name] for r in batches[kind]}
        ex = {
            k: {"sim": final_excess(v[0], n), "ode": final_excess(v[1], n)}
            for k, v in pairs.items()
        }
        x = {a: ex[f"{kind}_{a}"] for a in acts}
        xa = ex[f"{kind}_bayes_softmax_anneal"]
        rb = rb_on_record_base(pairs[f"{kind}_softmax"][0])

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
        gaps[kind] = (g, se_g, (smo["mean"] - s1o["mean"]) / (1 + smo["mean"]))
        shares[kind] = (sm["mean"] - s1["mean"]) / sm["mean"]

        an = pairs[f"{kind}_bayes_softmax_anneal"]
        eta_of = lambda t: eta_end(lr, t0, power, t)  # noqa: E731
        lim, lim_o = (eta_limit(an[i], n, eta_of) for i in (0, 1))
        reach_claims(ctx, f"E3.{kind}", f"[{kind}] ", xa["sim"], xa["ode"], lim, lim_o,
                     x["bayes_softmax"]["sim"], x["bayes_softmax"]["ode"], D,
                     eta_end(lr, t0, power, Ta), float(p.aim))  # fmt: skip
        ctx.claim(Claim(
            f"E3.{kind}.ode_beside",
            f"[{kind}] ODE beside the simulation (D = {D})",
            "largest relative deviation of the seed-mean risk, ODE from simulation, over the "
            "run, largest over the runs",
            max((d for d in (v[2]["risk"]["max_dev"] for v in pairs.values()) if d == d),
                default=float("nan")), unit="%",
            detail="per run: "
            + "; ".join(f"{k.removeprefix(kind + '_')}: {risk_dev_text(v[2])}, final excess "
                        f"sim − ODE {pct(ex[k]['sim']['mean'] - ex[k]['ode']['mean'])}"
                        for k, v in pairs.items())
            + ". The largest deviations sit at the drops, whose times fluctuate between SGD and "
            "ODE",
        ))  # fmt: skip

        ax = axes[i]
        for j, a in enumerate(acts):
            overlay_risk(ax, *pairs[f"{kind}_{a}"][:2], f"C{j}", a)
        overlay_risk(ax, *pairs[f"{kind}_bayes_softmax_anneal"][:2], "C3",
                     f"bayes_softmax, annealed (t0 = {t0:g})", rb)  # fmt: skip
        ax.set_yscale("log")
        ax.set_ylabel("risk (D → ∞ risk of the state)")
        ax.set_title(f"{kind} law, H = {H}, D = {D}, η = {lr:g} (dotted: R_B)",
                     fontsize="medium")  # fmt: skip
        ax.legend(fontsize="x-small")
    if "flipped_spike" in gaps and "discrete" in gaps:
        (gf, sef, gfo), (gd, sed, gdo) = gaps["flipped_spike"], gaps["discrete"]
        se = float(np.hypot(sef, sed))
        why = (
            "flipped spike ahead by > 3 s.e. of the difference in simulation, and ahead in the ODE"
        )
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
    ctx.figure(fig, "activations")
