"""E6 — rearrangement (SPEC §7, multi-head softmax): "misplaced heads can rearrange, by performing
an excursion, so that at the end the split is even and the loss optimized".

H = 4 softmax heads on two laws with two directions — the flipped spike ±a and two orthogonal
features a·e₁, a·e₂ of probability ½ each — trained from the natural random start (reduced engine,
many seeds) beside the ODE started from each seed's exact initial state, plus ODE runs started
near prepared uneven splits (3:1, 4:0). Softmax-1 and Bayes-softmax are contrasts (ODE only, from
the perturbed random start of the same D).

The map of uneven splits (:mod:`headspec.conventions.splitmap`) at E6's η along the amplitude a
says where the paper's claim can hold: where every uneven split is a saddle of the ODE, misplaced
heads can leave it; where one is a stable minimum, heads placed there stay. E6 reports its
simulations against the map at its own a.

A head's direction and the split of the heads are read by
:mod:`headspec.dynamics.splits` (labels, split names, the stable/saddle/marginal rule) and
:mod:`headspec.apps.experiments.arrangement` (histories of splits). The uneven split right after
specialisation, at the end, each move (time, risk bump), end risks by arrangement, and the
fixed-point classification (Jacobian of the ODE's drift at the uneven state: minimum or saddle)
are reported.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from headspec.apps.experiments.arrangement import (
    classify,
    histories,
    moves_text,
    prepared_state,
    risks_text,
    rounded,
    summary,
)
from headspec.apps.experiments.base import Context, Run, finite_mean_se, fmt
from headspec.apps.experiments.claims import Claim, Tolerance
from headspec.apps.experiments.params import Cosine, Count, Positive, RecipeParams
from headspec.apps.experiments.registry import recipe
from headspec.apps.experiments.split_map import (
    LAW_NAMES,
    LAWS,
    law_sets,
    map_claim,
    map_figure,
    map_runs,
    split_map,
)
from headspec.conventions.runs import config_model
from headspec.dynamics import analysis
from headspec.dynamics.splits import UNDECIDED, counts, head_labels, is_even, is_uneven, split_name

Law = Literal["spike", "orth"]
Split = tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]]


class Params(RecipeParams):
    """E6's parameters (``[experiment]`` of ``e6_rearrangement.toml``)."""

    a: Positive = Field(description="the atoms' size (flipped spike ±a; orthogonal a·e1, a·e2)")
    laws: list[Law] = Field(min_length=1, description="the laws: spike, orth")
    seeds: Count = Field(description="simulation seeds per law (softmax)")
    contrasts: list[Literal["softmax1", "bayes_softmax"]] = Field(
        description="contrast activations (ODE only)"
    )
    contrast_seeds: int = Field(ge=0, description="ODE seeds per contrast and law (0: none)")
    contrast_head_cyclic: Literal["auto"] | bool = Field(
        description="theory.head_cyclic of the contrast runs"
    )
    contrast_prepared: list[Split] = Field(description="prepared starts of the contrasts")
    ode_seeds: int | None = Field(None, ge=1, description="the ODE beside the first seeds")
    prepared: list[Split] = Field(description="heads on atom 1 and 2 at the prepared starts")
    prep_scale: Positive = Field(description="prepared M rows = prep_scale·atom (+ noise)")
    prep_eps: float = Field(ge=0, description="the prepared starts' noise")
    T_prepared: Positive = Field(description="horizon of the prepared runs")
    classify: list[str] = Field(description="prepared starts ('3:1') classified by the Jacobian")
    jacobian_n: Count = Field(description="Sobol base samples of the polish and Jacobian")
    group_cos: Cosine = Field(description="heads with this cosine are one group in the polish")
    min_cos: Cosine = Field(description="a head sits on an atom at this cosine …")
    margin: float = Field(ge=0, description="… beating the other atom's by this")
    idle_q: float = Field(ge=0, description="… with Q_hh at least this (else idle)")
    persist: Count = Field(description="a split counts when it lasts this many grid points")
    T: dict[Law, Positive] = Field(description="horizon per law")
    map_laws: list[Law] = Field(description="laws of the map of uneven splits ([]: no map)")
    map_a: list[Positive] = Field(description="the map's amplitudes a")
    map_lr: float | None = Field(None, ge=0, description="the map's η (None: train.lr; 0: flow)")
    map_n: Count = Field(description="Sobol base samples of the map's drift (qmc)")


HEADER = ("activation", "law", "start → run", "n", "split after specialisation", "end split",
          "uneven→even", "moves (t, from→to, risk bump)", "end risk even", "end risk uneven",
          "fixed point (Jacobian)")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class _Laws:
    """The recipe's laws: the task.latent setting, the atoms (two rows) and the horizon T of
    each."""

    names: list[str]
    over: dict[str, dict]  # law → its task.latent setting
    atoms: dict[str, np.ndarray]
    T: dict[str, float]

    @classmethod
    def of(cls, p: Params) -> _Laws:
        a = p.a
        over = {k: law_sets(k, a) for k in LAWS}
        atoms = {k: f(a) for k, (_, f) in LAWS.items()}
        return cls(list(p.laws), over, atoms, {k: p.T[k] for k in p.laws})


def _sims(p: Params, L: _Laws) -> tuple[list[Run], dict]:
    """Softmax simulations from the natural start, and the settings of the ODE beside them
    (from the first ``ode_seeds`` seeds' initial states)."""
    sims = [Run(f"softmax_{k}", "simulate", {**L.over[k], "seeds": p.seeds, "train.T": L.T[k]})
            for k in L.names]  # fmt: skip
    return sims, {} if p.ode_seeds is None else {"theory.init.seeds": list(range(p.ode_seeds))}


def _contrasts(p: Params, L: _Laws) -> list[Run]:
    """Contrasts: ODE only, perturbed random start at the same D (head_cyclic false in quick: 4×
    cheaper, the drift samples' O(1/√n) asymmetry then joins the O(1/√D) start's)."""
    return [Run(f"{act}_{k}_ode", "theory", {**L.over[k], "seeds": p.contrast_seeds,
                                             "train.T": L.T[k], "model.activation": act,
                                             "theory.head_cyclic": p.contrast_head_cyclic})
            for act in p.contrasts for k in L.names if p.contrast_seeds]  # fmt: skip


def plan(ctx: Context) -> list[Run]:
    p = ctx.params
    L = _Laws.of(p)
    prepared = {
        **_prepared(p, L, p.contrasts, p.contrast_prepared),
        **_prepared(p, L, [None], p.prepared),
    }
    return [*ctx.paired_plan(*_sims(p, L)), *_contrasts(p, L),
            *(v[3] for v in prepared.values()), *map_runs(ctx, p).values()]  # fmt: skip


@recipe("E6", "e6_rearrangement.toml", Params, plan=plan)
def run(ctx: Context):
    """Splits of H heads between two directions after specialisation and at the end."""
    p = ctx.params
    L = _Laws.of(p)
    paired = ctx.paired(*_sims(p, L))
    cons = ctx.runs(_contrasts(p, L))
    # contrasts from the prepared uneven starts (ODE, one run each: cheap)
    con_prep = _prepared(p, L, p.contrasts, p.contrast_prepared)
    con_prep_ds = ctx.runs([v[3] for v in con_prep.values()])
    # ---- prepared uneven starts (ODE; a simulation cannot start from a given state)
    prep = _prepared(p, L, [None], p.prepared)
    preps = ctx.runs([v[3] for v in prep.values()])
    prep_meta = {name: (k, f"{sz[0]}:{sz[1]}") for name, (_, k, sz, _) in prep.items()}
    # ---- analysis
    res, lab0 = _analyse(paired, cons, L, p)
    classes = _classify_prepared(preps, prep_meta, L, p)
    rows = []
    for k in L.names:
        rows += _rows(k, paired, res, preps, prep_meta, classes, con_prep, con_prep_ds, L, p)
    ctx.outcome.table = rows
    ctx.outcome.table_header = HEADER
    for k in L.names:
        prep_here = [(prep_meta[n][1], histories(preps[n], L.atoms[k], p)[0]) for n in preps
                     if prep_meta[n][0] == k]  # fmt: skip
        cl = {n: c for n, c in classes.items() if prep_meta[n][0] == k}
        dev = paired[f"softmax_{k}"][2]
        _claims(ctx, k, res, lab0[k], prep_here, cl, dev, L.T[k])
    _figures(ctx, paired, preps, prep_meta, L.atoms, L.names, p)
    cells = split_map(ctx, p)
    for k in p.map_laws:
        map_claim(ctx, k, cells[k], res.get((k, "sim")), p)
    if cells:
        map_figure(ctx, cells)


def _prepared(p: Params, L: _Laws, acts: list, splits: list) -> dict:
    """ODE runs from the prepared uneven starts: name → (activation, law, sizes, Run) for each
    activation (None: the config's, softmax), law and split."""
    out = {}
    for act in acts:
        for k in L.names:
            for sizes in splits:
                M, Q = prepared_state(L.atoms[k], tuple(sizes), p.prep_scale, p.prep_eps)
                init = {"kind": "given", "M": rounded(M), "Q": rounded(Q)}
                name = ("" if act is None else f"{act}_") + f"prepared_{k}_{sizes[0]}{sizes[1]}"
                use = {} if act is None else {"model.activation": act}
                sets = {**L.over[k], "train.T": p.T_prepared, **use, "theory.init": init}
                out[name] = (act, k, sizes, Run(name, "theory", sets))
    return out


def _analyse(paired: dict, cons: dict, L: _Laws, p: Params) -> tuple[dict, dict]:
    """Split histories: (law, "sim"/"ode"/contrast) → summary, (law, "dev"), (law, "agree");
    and per law the share of states head_split alone misreads."""
    res, lab0 = {}, {}
    for k in L.names:
        sim, ode, dev = paired[f"softmax_{k}"]
        for who, ds in (("sim", sim), ("ode", ode)):
            res[(k, who)] = summary(histories(ds, L.atoms[k], p))
        # how often head_split(min_cos) alone puts every head on an atom while the local
        # criterion calls some head undecided (the mislabelling this recipe avoids)
        hs_all = analysis.head_split(sim.M.values, sim.Q.values, L.atoms[k], p.min_cos)
        lab = head_labels(sim.M.values, sim.Q.values, L.atoms[k], p.min_cos, p.margin)
        lab0[k] = float(np.mean((hs_all.sum(-1) == sim.sizes["head"])
                                & (lab == UNDECIDED).any(-1)))  # fmt: skip
        res[(k, "dev")] = dev
        hs_s = histories(sim.sel(seed=ode.seed.values), L.atoms[k], p)
        hs_o = histories(ode, L.atoms[k], p)
        res[(k, "agree")] = (sum(a["first"] == b["first"] for a, b in zip(hs_s, hs_o, strict=True)),
                             sum(a["end"] == b["end"] for a, b in zip(hs_s, hs_o, strict=True)),
                             len(hs_o))  # fmt: skip
    for act in p.contrasts if p.contrast_seeds else ():
        for k in L.names:
            res[(k, act)] = summary(histories(cons[f"{act}_{k}_ode"], L.atoms[k], p))
    return res, lab0


def _classify_prepared(preps: dict, prep_meta: dict, L: _Laws, p: Params) -> dict:
    """The uneven state of each prepared run — its end if it is still uneven there, else the
    first slow stretch of its risk (analysis.slow_stretches) while uneven — classified by the
    Jacobian (arrangement.classify)."""
    classes = {}
    for name, ds in preps.items():
        k, start = prep_meta[name]
        if start not in p.classify:
            continue
        lab = head_labels(ds.M.values[0], ds.Q.values[0], L.atoms[k], p.min_cos, p.margin)
        uneven = np.array([is_uneven(split_name(x)) for x in lab])
        slow = [x["index"] for x in analysis.slow_stretches(ds.t.values, ds.risk.values[0])]
        slow = [i for i in slow if uneven[i]]
        if uneven[-1]:  # converged (or slowly converging) to an uneven state: classify it
            ti = ds.sizes["t"] - 1
        elif slow:  # left the uneven split: classify its first plateau while uneven
            ti = slow[0]
        else:  # passed no uneven plateau
            continue
        classes[name] = classify(ds, ti, p.jacobian_n, p.group_cos)
        classes[name]["split"] = split_name(lab[ti])
    return classes


def _summary_row(act: str, k: str, label: str, s: dict) -> tuple:
    return (act, LAW_NAMES[k], label, s["S"], s["first"], s["end"],
            f"{s['n_moved']}/{s['n_uneven0']}", moves_text(s["moves"]),
            risks_text(s["risk_even"]), risks_text(s["risk_uneven"]), "")  # fmt: skip


def _single_row(act: str, k: str, label: str, h: dict, ctext: str = "") -> tuple:
    er, end = f"{h['end_risk']:.4f}", h["end"]
    return (act, LAW_NAMES[k], label, 1, h["first"] or "–", end, "", moves_text(h["moves"]),
            er if is_even(end) else "–", er if is_uneven(end) else "–", ctext)  # fmt: skip


def _rows(k, paired, res, preps, prep_meta, classes, con_prep, con_prep_ds, L, p) -> list:
    """Law ``k``'s rows of the table (columns: HEADER)."""
    rows = []
    D = config_model(paired[f"softmax_{k}"][0]).task.D
    for who, label in (("sim", f"random → simulation (D = {D})"),
                       ("ode", "random (each seed's init) → ODE")):  # fmt: skip
        rows.append(_summary_row("softmax", k, label, res[(k, who)]))
    for name, ds in preps.items():
        if prep_meta[name][0] != k:
            continue
        c = classes.get(name)
        ctext = "" if c is None else (
            f"{c['kind']} at {c['split']} (t={fmt(c['t'])}, R*={c['risk']:.4f}): lead Re λ = "
            f"{c['lead']:+.4f} ± {c['lead_se']:.4f}, {c['n_unstable']} unstable, "
            f"{c['n_marginal']} marginal")  # fmt: skip
        h = histories(ds, L.atoms[k], p)[0]
        rows.append(_single_row("softmax", k, f"prepared {prep_meta[name][1]} → ODE", h, ctext))
    for name, (act, k2, sizes, _) in con_prep.items():
        if k2 == k:
            h = histories(con_prep_ds[name], L.atoms[k], p)[0]
            rows.append(_single_row(act, k, f"prepared {sizes[0]}:{sizes[1]} → ODE", h))
    for act in p.contrasts if p.contrast_seeds else ():
        rows.append(_summary_row(act, k, "random (perturbed init) → ODE", res[(k, act)]))
    return rows


def _claims(ctx: Context, k: str, res: dict, lab0: float, prep_here: list, classes: dict, dev,
            T_k: float) -> None:  # fmt: skip
    """Law ``k``'s claims: uneven first splits, rearrangement, the cost of an uneven end.
    ``prep_here``: (start, history) of its prepared runs; ``classes``: their classifications;
    ``dev``: the softmax simulation's deviations from its ODE."""
    p = ctx.params
    s, so = res[(k, "sim")], res[(k, "ode")]
    S, n0 = s["S"], s["n_uneven0"]
    pr = n0 / S
    se = np.sqrt(max(pr * (1 - pr), 1.0 / S) / S)  # floor: not 0 at p̂ = 0 or 1
    ctx.claim(Claim(
        f"E6.{k}.uneven_first",
        f"softmax, {LAW_NAMES[k]}: heads first split unevenly (in some seeds)",
        "simulation seeds whose split right after specialisation is uneven",
        n0, 0.0,
        Tolerance("at_least", 1, why=f"≥ 1 seed, its uneven split lasting ≥ {p.persist} "
                  "grid points with every head decided (a label flicker does not count); the "
                  "count is a rate, not compared with a prediction"),
        unit=f"of {S} seeds",
        detail=f"fraction {pr:.2f} ± {se:.2f} (binomial s.e.); ODE from the same initial "
        f"states: {so['n_uneven0']}/{so['S']} (same first split as the simulation in "
        f"{res[(k, 'agree')][0]}/{so['S']}, same end split in {res[(k, 'agree')][1]}/"
        f"{so['S']}); first splits: {s['first']}; {lab0:.0%} of the recorded states have "
        f"every head on an atom by head_split(min_cos={p.min_cos}) alone but a head within "
        f"{p.margin} of both atoms' cosines (undecided here)",
    ))  # fmt: skip
    prep_moved = [f"{st}→{h['end']}" for st, h in prep_here]
    n_prep_even = sum(is_even(h["end"]) for _, h in prep_here)
    cl = [
        f"{c['split']}: {c['kind']} (lead Re λ {c['lead']:+.4f} ± {c['lead_se']:.4f})"
        for c in classes.values()
    ]
    moved_total = s["n_moved"] + n_prep_even
    stuck = moved_total == 0
    tol = Tolerance("at_least", 1, why=f"≥ 1 seed or prepared start ends even (split by "
                    f"cosine ≥ {p.min_cos} and margin {p.margin}, lasting ≥ "
                    f"{p.persist} grid points) by t = {fmt(T_k)} (prepared: "
                    f"{fmt(p.T_prepared)}); none → stuck, reported with the Jacobian's "
                    "classification of the uneven state")  # fmt: skip
    ctx.claim(Claim(
        f"E6.{k}.rearranges",
        f"softmax, {LAW_NAMES[k]}: an uneven split rearranges to the even one",
        "simulation seeds uneven after specialisation and even at the end, plus prepared "
        "uneven starts (ODE) ending even",
        moved_total, 0.0,
        tol if (n0 or prep_here) else None,  # nothing uneven to rearrange: measured only
        unit=f"of {n0 + len(prep_here)} ({n0} seeds + {len(prep_here)} prepared)",
        detail=("STUCK: " if stuck else "")
        + f"simulation {s['n_moved']}/{n0}; ODE same inits {so['n_moved']}/{so['n_uneven0']};"
        f" prepared: {', '.join(prep_moved) or '–'}. "
        + (f"Fixed point at the uneven state: {'; '.join(cl)}. " if cl else "")
        + f"Moves in simulations: {moves_text(s['moves'], 4)}",
    ))  # fmt: skip
    _uneven_costs(ctx, k, s, classes, dev)


def _uneven_costs(ctx: Context, k: str, s: dict, classes: dict, dev) -> None:
    """An uneven final arrangement costs risk: uneven − even end risk of the simulation seeds
    (measured only when no seed ends uneven, or none even)."""
    ev, un = s["risk_even"], s["risk_uneven"]
    tol = Tolerance("above", 0.0, k=3, why="difference > 3 s.e. (seed-to-seed spread of each "
                    "group's mean end risk, risks on common base samples so the Monte-Carlo "
                    "error cancels in the difference); finite-D corrections shift both groups "
                    "alike")  # fmt: skip
    if ev and un:
        (me, see), (mu, seu) = finite_mean_se(ev), finite_mean_se(un)
        d, sd = mu - me, float(np.hypot(see, seu))
        value = f"uneven {mu:.4f} vs even {me:.4f}"
        src = "simulation seeds"
    else:  # no seed ends uneven (or none even): measured, no verdict
        cl_r = [
            f"{c['split']} fixed point R* = {c['risk']:.4f} ({c['kind']})" for c in classes.values()
        ]
        value = (f"no simulation seed ends uneven; even ends {risks_text(ev)}"
                 if ev else "no simulation seed ends even")  # fmt: skip
        if cl_r:
            value += "; uneven " + ", ".join(cl_r)
        d, sd, tol = float("nan"), 0.0, None
        src = "simulation seeds (none ends uneven: no verdict)"
    ctx.claim(Claim(
        f"E6.{k}.uneven_costs",
        f"softmax, {LAW_NAMES[k]}: an uneven final arrangement costs risk",
        f"end risk (D → ∞ risk of the final overlaps) uneven − even, {src}",
        d, sd, tol,
        detail=f"{value}; ODE vs simulation (same initial states): max relative risk "
        f"deviation {dev['risk']['max_dev']:.3f} at t = {fmt(dev['risk']['t'])}",
    ))  # fmt: skip


def _figures(ctx, paired, preps, prep_meta, atoms, laws, p):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3.6 * len(laws)), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(laws), 3))
    for i, k in enumerate(laws):
        sim, ode, _ = paired[f"softmax_{k}"]
        sim = sim.sel(seed=ode.seed.values)  # the seeds with their ODE beside them
        t = sim.t.values
        pos = t > 0
        lab_s = head_labels(sim.M.values, sim.Q.values, atoms[k], p.min_cos, p.margin)
        lab_o = head_labels(ode.M.values, ode.Q.values, atoms[k], p.min_cos, p.margin)
        # |#heads on atom 1 − on atom 2| while every head is decided (0 even, 2 for 3:1, 4 for
        # 4:0), not drawn while some head is still undecided
        cs, co = (np.where((x == UNDECIDED).any(-1), np.nan,
                           np.abs(counts(x)[..., 0] - counts(x)[..., 1]).astype(float))
                  for x in (lab_s, lab_o))  # fmt: skip
        a1, a2, a3 = axes[i]
        for s in range(sim.sizes["seed"]):
            col = f"C{s % 10}"
            jit = 0.06 * (s - sim.sizes["seed"] / 2) / sim.sizes["seed"]
            a1.plot(t[pos], cs[s][pos] + jit, color=col, lw=1)
            a1.plot(ode.t.values[pos], co[s][pos] + jit, color=col, lw=1, ls="--")
            a2.plot(t[pos], sim.risk.values[s][pos], color=col, lw=1)
            a2.plot(ode.t.values[pos], ode.risk.values[s][pos], color=col, lw=1, ls="--")
        rel = np.abs(sim.risk.values - ode.risk.values) / np.abs(ode.risk.values)
        a3.plot(t[pos], rel.mean(0)[pos], color="k", label="mean over seeds")
        a3.plot(t[pos], rel.max(0)[pos], color="0.5", lw=1, label="largest seed")
        for name, ds in preps.items():
            if prep_meta[name][0] == k:
                a2.plot(ds.t.values[1:], ds.risk.values[0][1:], lw=2, alpha=0.6,
                        label=f"ODE from prepared {prep_meta[name][1]}")  # fmt: skip
        a1.set_ylabel("|#heads on atom 1 − on atom 2|")
        a1.set_yticks([0, 2, 4], ["0 (2:2)", "2 (3:1)", "4 (4:0)"])
        a1.set_title(f"{LAW_NAMES[k]}: split (sim —, ODE --)", fontsize="medium")
        a2.set_title("risk per seed (sim —, ODE --)", fontsize="medium")
        a2.legend(fontsize="x-small")
        a3.set_title("|sim − ODE| / ODE risk", fontsize="medium")
        if np.any(rel[:, pos] > 0):
            a3.set_yscale("log")
        a3.legend(fontsize="x-small")
        for ax in (a1, a2, a3):
            ax.set_xscale("log")
            ax.set_xlim(t[pos][0], max(t[-1], p.T_prepared) if ax is a2 else t[-1])
            ax.set_xlabel("t")
    ctx.figure(fig, "split")
