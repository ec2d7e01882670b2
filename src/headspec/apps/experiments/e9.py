"""E9 — redundancy at scale (SPEC §7): many heads, few needed. With F features carried by J = F
atoms and H ≫ F heads, how many heads specialise and how many stay redundant, the plateaus, and
the pruning curves, the ODE beside the simulation, for the three activations and a range of H.

Runs: for every activation and every H of ``heads``, a reduced-engine simulation and, beside it,
the ODE from each seed's exact initial state (``ctx.paired``). Every seed of both is pruned as in
E5 (:mod:`headspec.apps.experiments.pruning`: `headspec prune`'s function at the final time, risk
increases in units of ΔR_atom, what the constructed Bayes-softmax loses with one atom's head).

Claims, per activation and H (simulation and ODE, seed means), each resting on
- specialised heads: at least ``specialised`` of the seeds end with every atom served (the census
  below) — pruning tests redundancy only in a trained model (softmax's common phase lasts ∝ H:
  its runs go to T = max(train.T, ``softmax_T_per_head`` · H));
- "about H − J heads can be pruned": the greedy path keeps its risk with J heads left
  (increase ≤ ``keep_fraction`` ΔR_atom + 3 s.e.);
- softmax-1 and Bayes-softmax degrade sharply below: with J − 1 heads the increase is
  ≥ ``sharp_fraction`` ΔR_atom − 3 s.e.;
- softmax is robust to the number of heads: with J − 1 heads its increase stays below that sharp
  level (≤ ``sharp_fraction`` ΔR_atom + 3 s.e.) — its heads' mean aggregation spreads each
  atom's work over groups of heads that all see both features.

The census of the final heads (measured only, in the table): each head's atom by cosine
(``min_cos``, ``margin``: :func:`headspec.dynamics.splits.head_labels`), idle when its key is
small against the largest, Q_hh < ``idle_frac`` · max_h Q_hh (softmax-1 and Bayes-softmax only: a
small softmax key attends uniformly, it is not silent — a modelling choice, stated in
docs/modelling-choices.md); redundant heads: H minus the number of atoms served. The greedy path's
removable heads (how many go before the increase first exceeds ``keep_fraction`` ΔR_atom) are
shown beside it: two routes, geometry and risk, to the same H − J.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from headspec.apps.experiments.base import Context, Run, finite_mean_se, first_crossing, ode_beside
from headspec.apps.experiments.claims import Claim, Tolerance
from headspec.apps.experiments.pruning import (
    PruneParams,
    Scale,
    increase,
    mc_se,
    path_dev,
    prune_paths,
    removable,
)
from headspec.apps.experiments.registry import recipe
from headspec.core.stats import mean_se

Activation = Literal["softmax", "softmax1", "bayes_softmax"]


class Params(PruneParams):
    """E9's parameters (``[experiment]`` of ``e9_redundancy.toml``)."""

    activations: list[Activation] = Field(min_length=1, description="the activations compared")
    heads: list[Annotated[int, Field(ge=2)]] = Field(
        min_length=1, description="the numbers of heads H (each ≥ 2: pruning needs heads to remove)"
    )
    min_cos: float = Field(gt=0, le=1, description="a head is on an atom at this cosine …")
    margin: float = Field(ge=0, description="… ahead of the runner-up atom's by this")
    idle_frac: float = Field(ge=0, lt=1, description="idle: Q_hh < this × max Q_hh")
    specialised: float = Field(
        gt=0, le=1, description="the claims need this fraction of seeds with every atom served"
    )
    softmax_T_per_head: float = Field(
        ge=0, description="softmax runs: T = max(train.T, this × H) (its common phase lasts ∝ H)"
    )


def _name(a: str, H: int) -> str:
    return f"{a}_H{H}"


def _sims(ctx: Context) -> list[Run]:
    p, T = ctx.params, ctx.base.train.T
    out = []
    for a in p.activations:
        for H in p.heads:
            sets = {"seeds": p.seeds, "model.activation": a, "model.H": H}
            if a == "softmax" and p.softmax_T_per_head * H > T:
                sets["train.T"] = p.softmax_T_per_head * H  # its split comes ∝ H late
            out.append(Run(_name(a, H), "simulate", sets))
    return out


def plan(ctx: Context) -> list[Run]:
    return ctx.paired_plan(_sims(ctx))


@recipe("E9", "e9_redundancy.toml", Params, plan=plan)
def run(ctx: Context):
    """Census, plateaus and pruning paths of every trained seed (simulation and ODE), per
    activation and number of heads."""
    from matplotlib.figure import Figure

    p = ctx.params
    pairs = ctx.paired(_sims(ctx))
    first = pairs[_name(p.activations[0], p.heads[0])][0]
    scale = Scale(first, p.n)
    D = ctx.base.task.D
    acts = list(p.activations)
    fig = Figure(figsize=(4.6 * len(acts), 7.6), layout="constrained")
    axes = np.asarray(fig.subplots(2, len(acts), squeeze=False))
    rows = []
    for i, a in enumerate(acts):
        for j, H in enumerate(p.heads):
            sim, ode, dev = pairs[_name(a, H)]
            t0 = time.perf_counter()
            paths = {"sim": prune_paths(sim, p.n, p.random_orders),
                     "ode": prune_paths(ode, p.n, p.random_orders)}  # fmt: skip
            ctx.progress(f"{_name(a, H)}: pruned {sim.sizes['seed']} + {ode.sizes['seed']} seeds "
                         f"in {time.perf_counter() - t0:.0f} s")  # fmt: skip
            rows += _claim(ctx, a, H, sim, ode, paths, scale)
            _curves(axes[:, i], f"C{j}", H, sim, ode, paths)
            r = dev["risk"]
            ode_beside(ctx, f"E9.{a}.H{H}.ode_beside", f"{a}, H = {H}, D = {D}", r["max_dev"],
                       f"at t = {r['t']:.3g}; of the seed-mean greedy pruning path "
                       f"{path_dev(paths):.1f} %")  # fmt: skip
        _decorate(axes[:, i], a, scale, D, p.heads)
    ctx.outcome.table = rows
    ctx.outcome.table_header = ("activation", "H", "run", "final split (seeds)", "redundant heads",
                                "removable heads", "final risk", "t½")  # fmt: skip
    ctx.figure(fig, "redundancy")


def census(ds, p: Params, atoms: np.ndarray, softmax: bool) -> tuple[list[str], np.ndarray]:
    """Per seed of ``ds`` at its final time: the split's name ('5:3', '1:1 +6 idle') and the
    number of redundant heads (H minus the atoms served by a head that is on it and not idle)."""
    from headspec.dynamics.splits import IDLE, head_labels, split_name

    M, Q = ds.M.values[:, -1], ds.Q.values[:, -1]  # (S, H, F), (S, H, H)
    lab = head_labels(M, Q, atoms, p.min_cos, p.margin, 0.0)  # (S, H)
    if not softmax:
        q = np.einsum("shh->sh", Q)  # (S, H)
        lab = np.where(q < p.idle_frac * q.max(-1, keepdims=True), IDLE, lab)
    J = len(atoms)
    names = [split_name(x, J=J) for x in lab]
    served = np.array([len({int(v) for v in x if v >= 0}) for x in lab])  # (S,)
    return names, (M.shape[1] - served).astype(float)


def _claim(ctx: Context, a: str, H: int, sim, ode, paths: dict, sc: Scale) -> list[tuple]:
    """The pruning claim of activation ``a`` with ``H`` heads; returns its rows of the table."""
    from headspec.conventions.runs import law_of

    p = ctx.params
    J, d_atom, D = sc.J, sc.d_atom, ctx.base.task.D
    se_mc = mc_se(sim, p.n) / d_atom  # in units of ΔR_atom
    why = (f"in units of ΔR_atom = {d_atom:.4f} (what the constructed Bayes-softmax loses with "
           f"one atom's head, {100 * d_atom / sc.c_path['risk'][0]:.0f} % of R_B); keeps: seed-"
           f"mean increase ≤ {p.keep_fraction:g} ΔR_atom + 3 s.e.")  # fmt: skip
    if a == "softmax":
        below = Tolerance("at_most", p.sharp_fraction, k=3, why=why + f"; robust: below J, "
                          f"≤ {p.sharp_fraction:g} ΔR_atom + 3 s.e. (not sharp)")  # fmt: skip
    else:
        below = Tolerance("at_least", p.sharp_fraction, k=3, why=why + f"; sharp: below J, "
                          f"≥ {p.sharp_fraction:g} ΔR_atom − 3 s.e.")  # fmt: skip
    why += f"; s.e. = seed mean ⊕ Monte Carlo (√2·s.e. on n = {p.n}: {se_mc:.3f} ΔR_atom)"
    levels = [("keep", J, Tolerance("at_most", p.keep_fraction, k=3, why=why)),
              ("robust" if a == "softmax" else "sharp", J - 1, below)]  # fmt: skip
    atoms = np.asarray(law_of(sim).atoms, dtype=float)
    parts, detail, rows = [], [], []
    for k, ds in (("sim", sim), ("ode", ode)):
        names, red = census(ds, p, atoms, a == "softmax")
        served = np.mean(red == H - J)  # seeds whose heads serve every atom
        parts.append(Claim(
            f"E9.{a}.H{H}.prune.{k}.specialised", f"specialised ({k})",
            f"fraction of seeds whose final heads serve all J = {J} atoms (census)", served,
            tolerance=Tolerance("at_least", p.specialised, why=f"pruning tests redundancy only "
                                "once the heads have specialised: at least "
                                f"{100 * p.specialised:g} % of the seeds (else the run ended "
                                "too early, e.g. in softmax's common phase)"), unit="%",
        ))  # fmt: skip
        for name, m, tol in levels:
            v, se = mean_se(increase(paths[k], m, relative=False) / d_atom)
            se = float(np.hypot(se if np.isfinite(se) else 0.0, se_mc))
            what = f"seed-mean risk increase with {m} of {H} heads kept, greedy ({k}), in ΔR_atom"
            parts.append(Claim(f"E9.{a}.H{H}.prune.{k}.{name}", f"{name} ({k})", what, v, se,
                               tol, unit="ΔR_atom"))  # fmt: skip
        rem = removable(paths[k], p.keep_fraction * d_atom)
        risk, risk_se = finite_mean_se(ds.risk.values[:, -1])
        t_half = _t_half(ds)
        split = ", ".join(f"{s} ×{c}" for s, c in Counter(names).most_common())
        rows.append((a, H, k, split, _mean_text(red), _mean_text(rem),
                     f"{risk:.4f} ± {risk_se:.4f}", f"{t_half:.3g}"))  # fmt: skip
        detail.append(f"{k}: redundant {_mean_text(red)}, removable {_mean_text(rem)} "
                      f"(H − J = {H - J}); splits {split}")  # fmt: skip
    if a == "softmax":
        claim = (f"softmax with H = {H}: about H − J = {H - J} heads can be pruned, and below J "
                 "it degrades gently (robust to the number of heads)")  # fmt: skip
    else:
        claim = (f"{a} with H = {H}: about H − J = {H - J} heads can be pruned; it keeps its risk "
                 f"down to J = {J} heads and degrades sharply below")  # fmt: skip
    ctx.claim(Claim(
        f"E9.{a}.H{H}.prune", claim, f"risk increase (ΔR_atom units) with J = {J} heads kept / "
        f"with J − 1: simulation (D = {D}) and ODE, {p.seeds} seeds",
        detail="; ".join(detail), all_of=tuple(parts),
    ))  # fmt: skip
    return rows


def _mean_text(x) -> str:
    m, se = mean_se(x)
    return f"{m:.2f} ± {se:.2f}" if np.isfinite(se) else f"{m:.2f}"


def _t_half(ds) -> float:
    """First time the seed-mean risk is halfway down from its start to its end (NaN if never)."""
    r = np.nanmean(ds.risk.values, axis=0)  # (T,)
    return first_crossing(ds.t.values, -r, -0.5 * (r[0] + r[-1]))  # r ≤ its midpoint


def _curves(ax, col: str, H: int, sim, ode, paths: dict) -> None:
    """Top: the seed-mean risk against t; bottom: the seed-mean greedy pruning path (simulation
    solid, ODE dashed) and the simulation's random orders (dotted, mean over seeds and orders)."""
    for k, ds, ls in (("sim", sim, "-"), ("ode", ode, "--")):
        lab = f"H = {H}" if k == "sim" else None
        ax[0].plot(ds.t.values[1:], np.nanmean(ds.risk.values, axis=0)[1:], ls=ls, color=col,
                   lw=1.6, label=lab)  # fmt: skip
        ok = [q for q in paths[k] if q is not None]
        if ok:
            r = np.mean([q["greedy"]["risk"] for q in ok], axis=0)
            nh = np.asarray(ok[0]["n_heads"])  # (H + 1,)
            ax[1].plot(nh, r, ls=ls, color=col, marker="o", ms=3, lw=1.4, label=lab)
            rnd = [o["risk"] for q in ok for o in q["random"]]  # seeds × orders paths
            if rnd and k == "sim":  # the simulation's random orders, mean over seeds and orders
                ax[1].plot(nh, np.mean(rnd, axis=0), ls=":", color=col, lw=1.0, alpha=0.8,
                           label=f"H = {H}, random orders")  # fmt: skip


def _decorate(ax, a: str, sc: Scale, D: int, heads: list[int]) -> None:
    for x in ax:
        x.axhline(sc.rb, color="k", ls=":", lw=0.8, label="R_B")
        x.grid(True, alpha=0.3)
    ax[0].set_xscale("log")
    ax[0].set_xlabel("t")
    ax[0].set_ylabel("risk (seed mean)")
    ax[0].set_title(f"{a}: risk (D = {D}; ODE dashed)", fontsize="medium")
    ax[0].legend(fontsize="x-small")
    ax[1].plot(sc.c_path["n_heads"], sc.c_path["risk"], color="0.3", ls=":", marker="s", ms=3,
               label="constructed Bayes-softmax")  # fmt: skip
    ax[1].axvline(sc.J, color="0.5", ls=":", lw=1)
    ax[1].set_xscale("symlog", linthresh=2, linscale=0.5)  # 0 … J linear, then log2-spaced H
    ticks = sorted({0, 1, sc.J, *heads})
    ax[1].set_xticks(ticks, [str(k) for k in ticks])
    ax[1].minorticks_off()
    ax[1].invert_xaxis()
    ax[1].set_xlabel("heads kept (greedy; J atoms dotted)")
    ax[1].set_ylabel("risk after pruning (D → ∞)")
    ax[1].legend(fontsize="x-small")
