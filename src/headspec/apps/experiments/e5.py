"""E5 — pruning (SPEC §7): softmax tolerates heavy pruning; softmax-1 and Bayes-softmax keep their
risk down to about the number of needed heads and degrade sharply below it.

Trained states come from reduced-engine simulations at large D and, beside each, the ODE from each
seed's exact initial state (``ctx.paired``). Every seed of both is pruned by
:func:`headspec.conventions.runs.prune_result` — the function behind `headspec prune`, with its
base samples (``record.mc_seed``) and random orders (keys 1000 + k) — at the final time.

The thresholds are set by what losing one atom costs at the optimum: the constructed Bayes-softmax
(one head per atom, SPEC §6) pruned greedily by the same function loses ΔR_atom (an absolute risk
increase) with its first head. Losing the head that serves an atom leaves that atom's sequences to
heads aimed elsewhere, an absolute cost of about ΔR_atom whatever the activation, so increases are
measured in units of ΔR_atom: f = (R(kept) − R(H))/ΔR_atom. "Keeps its risk": f ≤ 0.1; "degrades
sharply": f ≥ 0.5; each widened by 3 standard errors (seed mean and Monte Carlo). The relative
increases (R(kept)/R(H) − 1) are reported beside them.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from headspec.apps.experiments.base import Context, Run, ode_beside
from headspec.apps.experiments.claims import Claim, Tolerance
from headspec.apps.experiments.pruning import (
    PruneParams,
    Scale,
    increase,
    mc_se,
    path_dev,
    prune_paths,
)
from headspec.apps.experiments.registry import recipe
from headspec.core.stats import mean_se


class Params(PruneParams):
    """E5's parameters (``[experiment]`` of ``e5_pruning.toml``)."""

    activations: list[Literal["softmax", "softmax1", "bayes_softmax"]] = Field(
        min_length=1, description="the activations pruned"
    )


def _sims(p: Params) -> list[Run]:
    return [Run(a, "simulate", {"seeds": p.seeds, "model.activation": a}) for a in p.activations]


def plan(ctx: Context) -> list[Run]:
    return ctx.paired_plan(_sims(ctx.params))


@recipe("E5", "e5_pruning.toml", Params, plan=plan)
def run(ctx: Context):
    """Greedy and random pruning paths of every trained seed (simulation and ODE) per activation."""
    from matplotlib.figure import Figure

    p = ctx.params
    acts = list(p.activations)
    pairs = ctx.paired(_sims(p))
    scale = Scale(pairs[acts[0]][0], p.n)
    fig = Figure(figsize=(5.0 * len(acts), 4.2), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(acts), sharey=True))
    rows = []
    for i, a in enumerate(acts):
        sim, ode, dev = pairs[a]
        paths = {k: prune_paths(ds, p.n, p.random_orders) for k, ds in (("sim", sim), ("ode", ode))}
        rows += _prune_claim(ctx, a, sim, paths, scale)
        _panel(axes[i], a, paths, scale, ctx.base.task.D)
        r = dev["risk"]
        ode_beside(ctx, f"E5.{a}.ode_beside", f"{a}, D = {ctx.base.task.D}",
                   r["max_dev"], f"at t = {r['t']:.3g}; of the seed-mean greedy pruning path "
                   f"{path_dev(paths):.1f} %")  # fmt: skip
    axes[0].set_ylabel("risk (D → ∞)")
    ctx.outcome.table = rows
    ctx.outcome.table_header = ("activation", "run", "seed", "heads kept", "increase",
                                "increase with one fewer")  # fmt: skip
    ctx.figure(fig, "pruning")


def _prune_claim(ctx: Context, a: str, sim, paths: dict, sc: Scale) -> list[tuple]:
    """Activation ``a``'s pruning claim (keeps its risk / degrades sharply, simulation and ODE);
    returns its rows of the per-seed table."""
    p = ctx.params
    H, J, d_atom, D = sc.H, sc.J, sc.d_atom, ctx.base.task.D
    se_mc = mc_se(sim, p.n) / d_atom  # in units of ΔR_atom
    kept = max(1, H // 3) if a == "softmax" else J
    why = (f"keeps: seed-mean increase ≤ {p.keep_fraction:g} ΔR_atom + 3 s.e. (ΔR_atom = "
           f"{d_atom:.4f} = {100 * d_atom / sc.c_path['risk'][0]:.0f} % of R_B: what the "
           "constructed Bayes-softmax loses with one atom's head, an absolute cost that "
           "losing an atom's head carries for any activation)")  # fmt: skip
    if a != "softmax":
        why += f"; sharp: ≥ {p.sharp_fraction:g} ΔR_atom − 3 s.e."
    why += f"; s.e. = seed mean ⊕ Monte Carlo (√2·s.e. on n = {p.n}: {se_mc:.3f} ΔR_atom)"
    levels = [("keep", kept, Tolerance("at_most", p.keep_fraction, k=3, why=why))]
    if a != "softmax":
        levels.append(("sharp", kept - 1, Tolerance("at_least", p.sharp_fraction, k=3, why=why)))
    parts, rel_text, rows = [], [], []
    for k in ("sim", "ode"):
        rel = [increase(paths[k], m) for _, m, _ in levels]
        for (name, m, tol), rj in zip(levels, rel, strict=True):
            mf, se = mean_se(increase(paths[k], m, relative=False) / d_atom)
            se = float(np.hypot(se if np.isfinite(se) else 0.0, se_mc))
            what = f"seed-mean risk increase with {m} of {H} heads kept, greedy ({k}), in units of"
            parts.append(Claim(f"E5.{a}.prune.{k}.{name}", f"{name} ({k})", what + " ΔR_atom",
                               mf, se, tol, unit="ΔR_atom"))  # fmt: skip
            rel_text.append(f"{k}, {m} kept: {100 * np.nanmean(rj):+.1f} %")
        for s in range(len(rel[0])):
            rows.append((a, k, int(sim.seed.values[s]), kept, f"{100 * rel[0][s]:+.2f} %",
                         f"{100 * rel[1][s]:+.2f} %" if len(rel) > 1 else ""))  # fmt: skip
    if a == "softmax":
        claim = f"Softmax tolerates heavy pruning (redundant heads), {kept} of {H} kept"
        qty = f"risk increase (ΔR_atom units), greedy, {kept} of {H} heads kept"
    else:
        claim = (f"{a} keeps its risk down to the number of needed heads (J = {J} atoms) and "
                 "degrades sharply below")  # fmt: skip
        qty = f"risk increase (ΔR_atom units) with J = {J} heads kept / with J − 1"
    ctx.claim(Claim(
        f"E5.{a}.prune", claim, f"{qty}: simulation (D = {D}) and ODE, {p.seeds} seeds",
        detail="relative increases (seed mean): " + "; ".join(rel_text), all_of=tuple(parts),
    ))  # fmt: skip
    return rows


def _panel(ax, a: str, paths: dict, sc: Scale, D: int) -> None:
    """Seed-mean greedy paths, simulation vs ODE; the first seed's random orders thin."""
    for k, ls, col in (("sim", "-", "C0"), ("ode", "--", "C1")):
        ok_paths = [q for q in paths[k] if q is not None]
        if not ok_paths:
            continue
        nh = ok_paths[0]["n_heads"]
        r = np.mean([q["greedy"]["risk"] for q in ok_paths], axis=0)
        name = "simulation" if k == "sim" else "ODE"
        ax.plot(nh, r, ls=ls, color=col, marker="o", lw=2, label=f"greedy, {name} (seed mean)")
        for j, q in enumerate(ok_paths[0]["random"]):
            lab = "random orders (first seed)" if j == 0 and k == "sim" else None
            ax.plot(nh, q["risk"], ls=ls, color=col, lw=0.6, alpha=0.35, label=lab)
    ax.plot(sc.c_path["n_heads"], sc.c_path["risk"], color="0.3", ls=":", marker="s", ms=3,
            label="constructed Bayes-softmax")  # fmt: skip
    ax.axhline(sc.rb, color="k", ls="--", lw=0.8, label="R_B")
    ax.axvline(sc.J, color="0.5", ls=":", lw=1)
    ax.invert_xaxis()
    ax.set_xlabel("heads kept")
    ax.set_title(f"{a}: pruning H = {sc.H} trained heads (D = {D})", fontsize="medium")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small")
