"""E7 — the shape of the learned representation (SPEC §7).

The paper: with softmax the heads split into groups that are orthogonal to each other (a
hierarchical representation in which heads learn combinations of signals); with Bayes-softmax pairs
of heads each take one direction (its ± ends). Measured on the isotropic laws θ = ±a·e_f (2F atoms
of equal probability) for softmax, softmax-1 and Bayes-softmax, in simulations on the reduced engine
beside the ODE from the same initial states: the final heads' groups (head–head cosine ≥ ``same``),
the angles between group means, each head's cosines with the features (pure feature or a
combination: its feature participation), and the number of groups over time. Against the map of
arrangements (:mod:`~headspec.apps.experiments.e7_map`, with ``map_n``): the arrangement each
seed ends in, the map's verdict on every arrangement reached (final: a stable minimum), and the
per-seed agreement of the ODE with SGD, measured.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from headspec.apps.experiments import e7_map
from headspec.apps.experiments.base import Context, Run, fmt
from headspec.apps.experiments.claims import Claim, Tolerance
from headspec.apps.experiments.params import Cosine, Count, Positive, RecipeParams
from headspec.apps.experiments.registry import recipe
from headspec.dynamics import representation as rep

ACTIVATIONS = ("softmax", "softmax1", "bayes_softmax")
LABEL = {"softmax": "softmax", "softmax1": "softmax-1", "bayes_softmax": "Bayes-softmax"}


def isotropic_latent(F: int, a: float) -> dict:
    """The discrete law θ = ±a·e_f, f = 1..F, each of the 2F atoms with probability 1/(2F)."""
    atoms = []
    for f in range(F):
        e = [0.0] * F
        e[f] = float(a)
        atoms += [e, [-x for x in e]]
    return {"kind": "discrete", "atoms": atoms, "probs": [1.0 / (2 * F)] * (2 * F)}


def shape(M, Q, atoms, p) -> dict:
    """The representation of one final state: M (H, F), Q (H, H), atoms (2F, F) of the law."""
    C = rep.head_cosines(Q)
    cf = rep.feature_cosines(M, Q)
    span = rep.span_fraction(M, Q)
    labels = rep.cluster_heads(C, span, p.same, p.active)
    active = labels >= 0
    gc = rep.group_cosines(C, labels)
    lines = rep.pair_lines(gc, -p.same)
    G = gc.shape[0]
    opposite = {frozenset(x) for x in lines}
    others = [abs(gc[i, j]) for i in range(G) for j in range(i + 1, G)
              if frozenset((i, j)) not in opposite]  # fmt: skip
    neff = rep.feature_participation(cf)[active]
    ac = np.nan_to_num(cf @ atoms.T / np.linalg.norm(atoms, axis=1))  # (H, 2F) cos with atoms
    on = ac.max(1) >= p.pure  # a head on an atom (a pure ± feature direction)
    covered = np.array([np.any(on & (ac.argmax(1) == j)) for j in range(len(atoms))])
    return {
        "labels": labels, "cf": cf, "groups": G, "idle": int((~active).sum()),
        "sizes": [int((labels == g).sum()) for g in range(G)], "lines": lines,
        "max_other": max(others) if others else 0.0,
        "orthogonal": bool(all(o <= p.orth for o in others)) and G > 1,
        "neff": float(np.mean(neff)) if neff.size else float("nan"),
        "combination": bool(neff.size and np.all(neff >= p.combo)),
        "pure": int(on[active].sum()), "active": int(active.sum()),
        "pm_pairs": bool(active.any() and on[active].all() and covered.all()),
    }  # fmt: skip


def order(s: dict) -> np.ndarray:
    """Heads ordered by group, the two ends of a line next to each other, idle heads last."""
    done, out = set(), []
    for i, j in s["lines"]:
        out += [i, j]
        done |= {i, j}
    out += [g for g in range(s["groups"]) if g not in done]
    heads = [h for g in out for h in np.flatnonzero(s["labels"] == g)]
    return np.array(heads + list(np.flatnonzero(s["labels"] < 0)), dtype=int)


def history(ds, s: int, p) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Number of groups, mean feature participation of the active heads and the group labels
    (T, H) over time, for seed index s."""
    M, Q = ds.M.values[s], ds.Q.values[s]
    counts, labels = rep.grouping_history(M, Q, p.same, p.active)
    neff = rep.feature_participation(rep.feature_cosines(M, Q))
    with np.errstate(invalid="ignore"):
        mean = np.array([np.mean(n[lab >= 0]) if np.any(lab >= 0) else np.nan
                         for n, lab in zip(neff, labels, strict=True)])  # fmt: skip
    return counts, mean, labels


def _nanmedian(x) -> float:
    x = np.asarray(x, dtype=float)
    return float(np.median(x[np.isfinite(x)])) if np.isfinite(x).any() else float("nan")


def _sequence(t, counts) -> str:
    fr = rep.first_reached(t, counts)
    return " → ".join(f"{c} (t = {fmt(tt, 2)})" for c, tt in fr.items()) or "no group"


class Params(RecipeParams):
    """E7's parameters (``[experiment]`` of ``e7_representation.toml``)."""

    a: Positive = Field(description="atom amplitude |θ|")
    settings: list[
        tuple[Count, Count]
        | tuple[Count, Count, Positive]
        | tuple[Count, Count, dict[Literal["softmax", "softmax1", "bayes_softmax"], Positive]]
    ] = Field(
        min_length=1,
        description="(F, H) pairs, or (F, H, T) with that setting's own horizon (train.T; the "
        "ODE beside it too), T a number or a table by activation (those not in it keep train.T)",
    )
    activations: list[Literal["softmax", "softmax1", "bayes_softmax"]] = Field(
        list(ACTIVATIONS), min_length=1, description="the activations on each setting"
    )
    seeds: Count = Field(description="seeds per run")
    ode_seeds: int | None = Field(None, ge=0, description="seeds with the ODE beside (None: all)")
    same: Cosine = Field(description="two heads are one group at this cosine")
    active: float = Field(ge=0, le=1, description="a head counts with this share of its key in "
                          "the feature span")  # fmt: skip
    orth: float = Field(ge=0, le=1, description="group means orthogonal: |cos| at most")
    combo: float = Field(ge=1, description="a combination: feature participation at least")
    pure: Cosine = Field(description="a head on an atom: cosine at least")
    map_n: int | None = Field(
        None,
        ge=2,
        description="the map of arrangements at the arrangements the simulations reached: base "
        "samples of its drift (one splitmap run per setting and activation, after the "
        "simulations; not priced by --dry-run); None: no map",
    )

    @field_validator("settings")
    @classmethod
    def _distinct(cls, settings):
        """Each (F, H) once: two entries would name the same runs (F{F}_H{H}_…)."""
        seen = [tuple(x[:2]) for x in settings]
        twice = sorted({fh for fh in seen if seen.count(fh) > 1})
        if twice:
            raise ValueError(
                f"settings lists (F, H) = {', '.join(map(str, twice))} more than once (its runs "
                "would share one name); fix: keep one entry per (F, H), with the horizon it needs"
            )
        return settings


def _runs(ctx: Context) -> tuple[list[Run], dict, dict]:
    """The simulations (one per F, H, activation), their (F, H, activation), and the settings
    of the ODE beside them (the first ``ode_seeds`` seeds)."""
    p = ctx.params
    S, n_ode = int(p.seeds), int(p.seeds if p.ode_seeds is None else p.ode_seeds)
    batch, meta = [], {}
    for F, H, *T in [tuple(x) for x in p.settings]:
        for act in p.activations:
            name = f"F{F}_H{H}_{act}"
            ov = {"seeds": S, "model.H": H, "model.activation": act}
            horizon = T[0].get(act) if T and isinstance(T[0], dict) else (T or [None])[0]
            if horizon is not None:  # this setting's own horizon
                ov["train.T"] = float(horizon)
            extra = {"task": {"latent": isotropic_latent(F, p.a)}}
            batch.append(Run(name, "simulate", ov, extra))
            meta[name] = (F, H, act)
    seed0 = ctx.base.seed
    ids = list(range(seed0, seed0 + n_ode))
    return batch, meta, {"theory.init.seeds": ids} if n_ode < S else {}


def plan(ctx: Context) -> list[Run]:
    batch, _, th_ov = _runs(ctx)
    return ctx.paired_plan(batch, th_ov)


@recipe("E7", "e7_representation.toml", Params, plan=plan)
def run(ctx: Context):
    """Sim + ODE per (F, H, activation); final shapes, verdicts, figures, per-seed table."""
    p = ctx.params
    S = int(p.seeds)
    batch, meta, th_ov = _runs(ctx)
    res = ctx.paired(batch, theory_sets=th_ov)

    law = {name: isotropic_latent(F, p.a) for name, (F, _, _) in meta.items()}
    finals = e7_map.final_arrangements(res, meta, law)
    shapes, rows = {}, []
    for name, (sim, ode, dev) in res.items():
        F, H, act = meta[name]
        atoms = sim.atoms.values
        sh = [shape(sim.M.values[s, -1], sim.Q.values[s, -1], atoms, p) for s in range(S)]
        so = {int(sd): shape(ode.M.values[k, -1], ode.Q.values[k, -1], atoms, p)
              for k, sd in enumerate(ode.seed.values)}  # fmt: skip
        shapes[name] = (sh, so, dev)
        for s, x in enumerate(sh):
            sd = int(sim.seed.values[s])
            o = so.get(sd)
            same_shape = "—"
            if o is not None:
                same_shape = (f"{'yes' if rep.same_partition(x['labels'], o['labels']) else 'no'}; "
                              f"max|Δcos| {np.nanmax(np.abs(x['cf'] - o['cf'])):.2f}")  # fmt: skip
            counts, _, _ = history(sim, s, p)
            rows.append((f"F={F} H={H}", LABEL[act], sd, "+".join(map(str, x["sizes"])) or "—",
                         len(x["lines"]), f"{x['max_other']:.2f}", f"{x['neff']:.2f}",
                         f"{x['pure']}/{x['active']}", "yes" if x["pm_pairs"] else "no",
                         _sequence(sim.t.values, counts), same_shape,
                         f"{finals[name][0][s]}; ODE: {finals[name][1].get(sd, '—')}"))  # fmt: skip
    ctx.outcome.table = rows
    ctx.outcome.table_header = (
        "law", "activation", "seed", "group sizes (sim)", "± lines", "max |cos| other groups",
        "mean n_eff", "pure heads", "± ends of each feature", "groups over time (sim)",
        "ODE: same groups; max |Δcos_hf|", "arrangement (sim; ODE)",
    )  # fmt: skip
    horizon = {name: float(sim.t.values[-1]) for name, (sim, _, _) in res.items()}
    maps = {}
    if p.map_n is not None:  # the map's verdict on every arrangement the seeds reached
        runs = e7_map.map_runs(ctx, finals, meta, law, p.map_n)
        done = ctx.runs(list(runs.values())) if runs else {}
        maps = {name: e7_map.verdicts(done[r.name]) for name, r in runs.items()}
    _claims(ctx, shapes, meta, p, S, horizon, finals, maps)
    _formation(ctx, res, meta, p)
    _figures(ctx, res, shapes, meta, [tuple(x)[:2] for x in p.settings], p, horizon)


def _claims(ctx: Context, shapes, meta, p, S: int, horizon: dict, finals: dict, maps: dict):
    D = ctx.base.task.D
    why_orth = (
        f"|cos| ≤ {p.orth} between the means of groups that are not the ± ends of one line, in "
        f"at least half of the seeds: the distinct arrangements it must tell apart differ by ≥ 1/3 "
        f"in cosine (tetrahedral −1/3, e_f·(e_f+e_g)/√2 = 0.71), the finite-D spread of a learned "
        f"overlap is O(1/√D) = {1 / np.sqrt(D):.3f} at D = {D}; groups: head cosine ≥ "
        f"{p.same} (a learned key's cosine with its target is ≈ 0.98 at this η; distinct "
        f"directions of ±e_f combinations are ≤ 0.82 apart)"
    )
    why_combo = (
        f"every active head has feature participation n_eff ≥ {p.combo} (1: pure feature, "
        f"2: equal mix of two; {p.combo} = 27° off a feature axis, far beyond the O(1/√D) "
        "spread)"
    )
    why_pm = (
        f"every active head has cos ≥ {p.pure} with one atom ±a·e_f and every atom has a "
        "head, in at least half of the seeds (learned keys reach ≈ 0.98 at this η; a mix of two "
        "features has ≤ 0.71)"
    )
    for name, (sh, _, _) in shapes.items():
        F, H, act = meta[name]
        n_orth = sum(x["orthogonal"] for x in sh)
        n_combo = sum(x["combination"] for x in sh)
        n_pm = sum(x["pm_pairs"] for x in sh)
        where = f"F = {F}, H = {H}, {LABEL[act]}, T = {horizon[name]:g}"
        detail = (f"orthogonal {n_orth}/{S} seeds (median max |cos| "
                  f"{np.median([x['max_other'] for x in sh]):.2f}); combinations {n_combo}/{S} "
                  f"(median mean n_eff {_nanmedian([x['neff'] for x in sh]):.2f}); "
                  f"± ends {n_pm}/{S}; arrangements: "
                  f"{e7_map.describe(finals[name][0], maps.get(name))}")  # fmt: skip
        cid, unit = f"E7.F{F}_H{H}.{act}", f"of {S} seeds"
        if act == "softmax":
            both = sum(x["orthogonal"] and x["combination"] for x in sh)
            ctx.claim(Claim(
                f"{cid}.groups",
                "Softmax: the heads split into groups orthogonal to each other, and heads learn "
                "combinations of signals",
                f"{where}: seeds whose final groups are orthogonal (apart from ± ends) and whose "
                "heads are all combinations (simulation, D = " + str(D) + ")",
                both, 0.0, Tolerance("at_least", S / 2, why=why_orth + "; " + why_combo),
                unit=unit, detail=detail,
            ))  # fmt: skip
        elif act == "bayes_softmax":
            if H < 2 * F:
                detail += f"; H = {H} < 2F = {2 * F}: not enough heads for every end"
            ctx.claim(Claim(
                f"{cid}.pm_pairs",
                "Bayes-softmax: pairs of heads each take one direction (its ± ends)",
                f"{where}: seeds in which every head sits on one ±a·e_f and every end has a head "
                f"(simulation, D = {D})",
                n_pm, 0.0, Tolerance("at_least", S / 2, why=why_pm), unit=unit, detail=detail,
            ))  # fmt: skip
        else:
            ctx.claim(Claim(
                f"{cid}.contrast",
                "Softmax-1 (contrast): its representation",
                f"{where}: seeds whose final groups are orthogonal (apart from ± ends), the other "
                f"measures below (simulation, D = {D})", n_orth, unit=unit, detail=detail,
            ))  # fmt: skip
        if p.map_n is not None:  # every seed unresolved: no map run, and none is final
            label = f"{LABEL[act]}, F = {F}, H = {H}"
            e7_map.final_claim(ctx, cid, label, where, finals[name][0], maps.get(name, {}))
    base = ctx.base.seed
    gaps = [float(np.nanmax(np.abs(sh[sd - base]["cf"] - o["cf"])))
            for sh, so, _ in shapes.values() for sd, o in so.items()]  # fmt: skip
    worst = max(gaps, default=0.0)
    devs = [dev["cos"]["max_dev"] for _, _, dev in shapes.values()]
    e7_map.agreement_claim(ctx, finals, D, extra=f"; largest final |Δcos_hf| {worst:.2f}, over "
                           f"the whole run {max(devs):.2f}")  # fmt: skip


def _formation(ctx: Context, res: dict, meta: dict, p):
    """How the grouping forms: when groups appear, through which counts, when the final grouping
    settles, and the heads' feature participation when they first all count vs at the end."""
    for name, (sim, _, _) in res.items():
        F, H, act = meta[name]
        t = sim.t.values
        appear, settle, detour, n0, n1 = [], [], 0, [], []
        for s in range(sim.sizes["seed"]):
            counts, neff, labels = history(sim, s, p)
            fr = rep.first_reached(t, counts)
            if not fr:
                continue
            appear.append(min(fr.values()))
            settle.append(rep.settle_time(t, labels))
            detour += len(fr) > 1
            full = np.flatnonzero(np.all(labels >= 0, axis=1))
            if full.size:
                n0.append(neff[full[0]])
                n1.append(neff[-1])
        S = sim.sizes["seed"]
        if not appear:
            detail = f"no group of active heads by t = {fmt(t[-1])} in any of {S} seeds"
        else:
            detail = (f"groups appear at t ≈ {fmt(np.median(appear), 2)}, final grouping from "
                      f"t ≈ {fmt(_nanmedian(settle), 2)} (medians over {len(appear)} seeds); "
                      f"{detour}/{len(appear)} seeds pass through another number of groups "
                      f"first; n_eff when all heads first count {fmt(np.median(n0), 3)} → end "
                      f"{fmt(np.median(n1), 3)}")  # fmt: skip
        ctx.claim(Claim(
            f"E7.F{F}_H{H}.{act}.formation",
            f"How the grouping forms ({LABEL[act]}, F = {F}, H = {H})",
            "median time at which groups of active heads appear (simulation); below: when the "
            "final grouping settles, intermediate counts, feature participation of the heads as "
            "they emerge vs at the end",
            np.median(appear) if appear else float("nan"), detail=detail,
        ))  # fmt: skip


def _figures(ctx: Context, res: dict, shapes: dict, meta: dict, settings, p, horizon: dict):
    from matplotlib.figure import Figure

    acts = [a for a in ACTIVATIONS if any(m[2] == a for m in meta.values())]
    # 1) head–feature cosines of seed 0, heads ordered by group: sim and ODE side by side
    fig = Figure(figsize=(3.0 * 2 * len(settings), 2.6 * len(acts)), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(acts), 2 * len(settings), squeeze=False))
    im = None
    for i, act in enumerate(acts):
        for j, (F, H) in enumerate(settings):
            name = f"F{F}_H{H}_{act}"
            sh, so, _ = shapes[name]
            o = order(sh[0])
            pair = (("sim", sh[0]), ("ODE", so.get(int(res[name][0].seed[0]))))
            for k, (what, x) in enumerate(pair):
                ax = axes[i, 2 * j + k]
                if x is None:
                    ax.set_axis_off()
                    continue
                m = np.nan_to_num(x["cf"][o])
                im = ax.imshow(m, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
                for (h, f), v in np.ndenumerate(m):
                    ax.text(f, h, f"{v:.2f}", ha="center", va="center", fontsize=6)
                ax.set_xticks(range(F), [f"e{f + 1}" for f in range(F)], fontsize=7)
                ax.set_yticks(range(H), [f"h{h} g{x['labels'][h]}" for h in o], fontsize=6)
                ax.set_title(f"{LABEL[act]}, F={F} H={H}, {what}", fontsize=8)
    if im is not None:
        fig.colorbar(im, ax=axes, shrink=0.6, label="cos(k_h, k*_f)")
    ctx.figure(fig, "head_feature_cosines")
    # 2) grouping over time: number of groups and mean feature participation
    fig = Figure(figsize=(5.0 * len(settings), 6.0), layout="constrained")
    axes = np.atleast_2d(fig.subplots(2, len(settings), squeeze=False))
    colors = {"softmax": "C0", "softmax1": "C2", "bayes_softmax": "C3"}
    first = [rep.first_reached(sim.t.values, history(sim, s, p)[0]) for sim, _, _ in res.values()
             for s in range(sim.sizes["seed"])]  # fmt: skip
    t0 = [min(f.values()) for f in first if f]
    t_lo = 0.3 * min(t0) if t0 else None  # from a little before the first group forms
    for j, (F, H) in enumerate(settings):
        for act in acts:
            sim, ode, _ = res[f"F{F}_H{H}_{act}"]
            t = sim.t.values
            pos = t > 0
            for s in range(sim.sizes["seed"]):
                c, n, _ = history(sim, s, p)
                lab = LABEL[act] + " sim" if s == 0 else None
                axes[0, j].plot(t[pos], c[pos] + 0.04 * s, color=colors[act], lw=0.8, alpha=0.6,
                                label=lab)  # fmt: skip
                axes[1, j].plot(t[pos], n[pos], color=colors[act], lw=0.8, alpha=0.6)
            to = ode.t.values
            for k in range(ode.sizes["seed"]):
                c, n, _ = history(ode, k, p)
                lab = LABEL[act] + " ODE" if k == 0 else None
                axes[0, j].plot(to[to > 0], c[to > 0], color=colors[act], lw=1.6, ls="--",
                                label=lab)  # fmt: skip
                axes[1, j].plot(to[to > 0], n[to > 0], color=colors[act], lw=1.6, ls="--")
        axes[0, j].set_title(f"F = {F}, H = {H}: groups of heads (cos ≥ {p.same})",
                             fontsize="medium")  # fmt: skip
        axes[0, j].set_ylabel("number of groups")
        axes[1, j].set_ylabel("mean feature participation n_eff")
        axes[1, j].axhline(1, color="k", lw=0.6, ls=":")
        for ax in axes[:, j]:
            ax.set_xscale("log")
            # to the longest horizon of the setting (a table may give each activation its own T)
            t_hi = max(horizon[f"F{F}_H{H}_{a}"] for a in acts)
            ax.set_xlim(t_lo or t[pos][0], t_hi)
            ax.set_xlabel("t")
        axes[0, j].legend(fontsize="x-small")
    ctx.figure(fig, "grouping_over_time")
    # 3) risk, simulation beside the ODE
    from headspec.apps.plots import plot_risk

    for F, H in settings:
        fig = Figure(figsize=(5.0 * len(acts), 3.6), layout="constrained")
        axes = fig.subplots(1, len(acts), squeeze=False)[0]
        for ax, act in zip(axes, acts, strict=True):
            sim, ode, dev = res[f"F{F}_H{H}_{act}"]
            plot_risk(sim, ax=ax, theory=ode)
            ax.set_title(f"{LABEL[act]}, F={F} H={H}: Δrisk {100 * dev['risk']['max_dev']:.1f} %, "
                         f"Δcos {dev['cos']['max_dev']:.2f}", fontsize="small")  # fmt: skip
        ctx.figure(fig, f"risk_F{F}_H{H}")
