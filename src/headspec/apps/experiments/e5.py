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
from headspec.apps.experiments.params import Count, RecipeParams
from headspec.apps.experiments.registry import recipe
from headspec.core.stats import mean_se


def _paths(ds, n: int, orders: int) -> list[dict]:
    """prune_result of every seed of ``ds`` (final time)."""
    from headspec.conventions.runs import prune_result

    out = []
    for s in range(ds.sizes["seed"]):
        if not np.isfinite(ds.M.isel(seed=s, t=-1).values).all():
            out.append(None)  # a diverged seed has no trained state to prune
            continue
        out.append(prune_result(ds, seed_index=s, n=n, random_orders=orders))
    return out


def _increase(paths: list, kept: int, relative: bool = True) -> np.ndarray:
    """Risk increase of every seed's greedy path with ``kept`` heads left, relative to the full
    model's risk (or absolute), NaN for a seed without a path."""
    out = []
    for q in paths:
        if q is None:
            out.append(np.nan)
            continue
        r = np.asarray(q["greedy"]["risk"])
        H = len(r) - 1
        out.append(r[H - kept] / r[0] - 1 if relative else r[H - kept] - r[0])
    return np.asarray(out)


def _mc_se(ds, n: int) -> float:
    """Monte-Carlo s.e. of a relative risk difference on ``n`` samples (bound √2·se/R of two
    unpaired estimates; prune's estimates are paired, so this is conservative), from the trained
    seeds' per-sample losses."""
    import jax

    from headspec.conventions import build
    from headspec.conventions.runs import config_model, law_of
    from headspec.core.attention import Heads
    from headspec.dynamics.bayes import estimate_risks

    cfg = config_model(ds)
    last = ds.isel(t=-1)
    act = build.activation(cfg.model)
    out = []
    for s in range(ds.sizes["seed"]):
        M, Q, b = (np.asarray(last[v].values[s], dtype=float) for v in ("M", "Q", "b"))
        if not (np.isfinite(M).all() and np.isfinite(Q).all() and np.isfinite(b).all()):
            continue
        est = estimate_risks(jax.random.key(11), law_of(ds), cfg.task.L,
                             {"m": Heads(M=M, Q=Q, b=b, activation=act)}, n=n)["m"]  # fmt: skip
        out.append(np.sqrt(2.0) * est.se)
    return float(np.max(out)) if out else float("nan")


def _atom_scale(ds, n: int) -> tuple[float, dict]:
    """ΔR_atom: absolute risk increase when the constructed Bayes-softmax loses its least needed
    head (same function and base samples as `headspec prune`), and its greedy path."""
    from headspec.conventions import build
    from headspec.conventions.runs import config_model, law_of
    from headspec.dynamics.bayes import constructed_bayes_softmax
    from headspec.dynamics.prune import prune_path

    cfg = config_model(ds)
    law = law_of(ds)
    c = constructed_bayes_softmax(law)
    base = build.risk_base(cfg.record, law, cfg.task.L, c.n_heads, n)
    path = prune_path(c.M, c.Q, c.b, c.activation, law, base, order="greedy")
    r = np.asarray(path["risk"])
    return float(r[1] - r[0]), path


class Params(RecipeParams):
    """E5's parameters (``[experiment]`` of ``e5_pruning.toml``)."""

    activations: list[Literal["softmax", "softmax1", "bayes_softmax"]] = Field(
        min_length=1, description="the activations pruned"
    )
    keep_fraction: float = Field(ge=0, description="keeps its risk: increase ≤ this × ΔR_atom")
    sharp_fraction: float = Field(ge=0, description="degrades sharply: ≥ this × ΔR_atom")
    random_orders: int = Field(ge=0, description="random pruning orders (keys 1000 + k)")
    n: Count = Field(description="base samples of the pruning risks (as headspec prune)")
    seeds: Count = Field(description="seeds per run")


def _sims(p: Params) -> list[Run]:
    return [Run(a, "simulate", (f"seeds={p.seeds}", f'model.activation="{a}"'))
            for a in p.activations]  # fmt: skip


def plan(ctx: Context) -> list[Run]:
    return ctx.paired_plan(_sims(ctx.params))


@recipe("E5", "e5_pruning.toml", Params, plan=plan)
def run(ctx: Context):
    """Greedy and random pruning paths of every trained seed (simulation and ODE) per activation."""
    from matplotlib.figure import Figure

    p = ctx.params
    acts = list(p.activations)
    pairs = ctx.paired(_sims(p))
    scale = _Scale(pairs[acts[0]][0], p.n)
    fig = Figure(figsize=(5.0 * len(acts), 4.2), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(acts), sharey=True))
    rows = []
    for i, a in enumerate(acts):
        sim, ode, dev = pairs[a]
        paths = {"sim": _paths(sim, p.n, p.random_orders), "ode": _paths(ode, p.n, p.random_orders)}
        rows += _prune_claim(ctx, a, sim, paths, scale)
        _panel(axes[i], a, paths, scale, int(ctx.config["task"]["D"]))
        r = dev["risk"]
        ode_beside(ctx, f"E5.{a}.ode_beside", f"{a}, D = {int(ctx.config['task']['D'])}",
                   r["max_dev"], f"at t = {r['t']:.3g}; of the seed-mean greedy pruning path "
                   f"{_path_dev(paths):.1f} %")  # fmt: skip
    axes[0].set_ylabel("risk (D → ∞)")
    ctx.outcome.table = rows
    ctx.outcome.table_header = ("activation", "run", "seed", "heads kept", "increase",
                                "increase with one fewer")  # fmt: skip
    ctx.figure(fig, "pruning")


class _Scale:
    """What the thresholds are measured in: ΔR_atom of the constructed Bayes-softmax (its path
    ``c_path``), with the law's J atoms, the model's H heads and R_B of the first run ``ds``."""

    def __init__(self, ds, n: int):
        from headspec.conventions.runs import config_model, law_of

        self.H, self.J = config_model(ds).model.H, int(law_of(ds).J)
        self.d_atom, self.c_path = _atom_scale(ds, n)
        self.rb = float(ds.attrs["bayes_risk"])


def _prune_claim(ctx: Context, a: str, sim, paths: dict, sc: _Scale) -> list[tuple]:
    """Activation ``a``'s pruning claim (keeps its risk / degrades sharply, simulation and ODE);
    returns its rows of the per-seed table."""
    p = ctx.params
    H, J, d_atom, D = sc.H, sc.J, sc.d_atom, int(ctx.config["task"]["D"])
    se_mc = _mc_se(sim, p.n) / d_atom  # in units of ΔR_atom
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
        rel = [_increase(paths[k], m) for _, m, _ in levels]
        for (name, m, tol), rj in zip(levels, rel, strict=True):
            mf, se = mean_se(_increase(paths[k], m, relative=False) / d_atom)
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


def _panel(ax, a: str, paths: dict, sc: _Scale, D: int) -> None:
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


def _path_dev(paths) -> float:
    """Largest relative deviation (%) between the seed-mean greedy paths of simulation and ODE."""
    means = []
    for k in ("sim", "ode"):
        ok = [q["greedy"]["risk"] for q in paths[k] if q is not None]
        if not ok:
            return float("nan")
        means.append(np.mean(ok, axis=0))
    return float(100 * np.max(np.abs(means[0] - means[1]) / np.abs(means[1])))
