"""E7 against the map of arrangements (issue 55, SPEC §7).

Every final state (the simulations and the ODE beside them) is named by the map's own labels
(:func:`~headspec.dynamics.arrangements.arrangements_of`: a head on a pool direction of signed
feature sums, idle by E9's census rule for softmax-1 and Bayes-softmax, "unresolved" where a head
sits on no pool direction). With ``map_n`` set, one "splitmap" run per setting and activation
classifies the arrangements the simulations reached — only those (``map.only``), at the recipe's
L and η, as fixed points of the D → ∞ drift: stable minimum, saddle, marginal or no fixed point
(:mod:`headspec.conventions.splitmap`). Two claims follow:

- **final**: the seeds end on stable minima of the map. An arrangement is final when it is a
  stable minimum; a seed on a saddle, or unresolved, was still moving at the horizon. So this
  claim decides whether the horizon was long enough, and the paper's grouping claims beside it
  say which minimum was reached, with the map's risk of each.
- **ode_agreement** (measured, no verdict): the fraction of seeds whose ODE from the same initial
  state ends in the same arrangement. At a saddle the choice is made by small asymmetries that
  SGD's noise and the ODE's initial state supply differently, so the agreement is a function of D
  (the study ``arrangement_odds`` measures it against D at ≥ 64 seeds and decides the claim that
  can be right: SGD and the diffusion engine end in the same law of arrangements).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from headspec.apps.experiments.base import Context, Run
from headspec.apps.experiments.claims import Claim, Tolerance
from headspec.conventions.splitmap import resting_kind
from headspec.dynamics.arrangements import arrangements_of, resolved, same_arrangement


def final_arrangements(res: dict, meta: dict, law: dict) -> dict[str, tuple[list, dict]]:
    """Run name → (the arrangement of each simulation seed, {ODE seed: its arrangement})."""
    out = {}
    for name, (sim, ode, _) in res.items():
        atoms, probs = np.asarray(law[name]["atoms"]), np.asarray(law[name]["probs"])
        idle = meta[name][2] != "softmax"
        sn, on = (arrangements_of(ds.M.values[:, -1], ds.Q.values[:, -1], atoms, probs, idle=idle)
                  for ds in (sim, ode))  # fmt: skip
        out[name] = (sn, dict(zip((int(s) for s in ode.seed.values), on, strict=True)))
    return out


def map_runs(ctx: Context, finals: dict, meta: dict, law: dict, n: int) -> dict[str, Run]:
    """Run name → the "splitmap" run that classifies the arrangements its seeds reached (none
    where every seed is unresolved)."""
    out = {}
    for name, (sn, _) in finals.items():
        reached = sorted({a for a in sn if resolved(a)})
        if not reached:
            continue
        _, H, act = meta[name]
        out[name] = Run(f"map_{name}", "splitmap", {
            "task.latent": law[name], "model.H": H, "model.activation": act,
            "map.candidates": "arrangements", "map.only": reached,
            "map.lr": float(ctx.base.train.lr), "map.n": int(n),
        })  # fmt: skip
    return out


def verdicts(ds) -> dict[str, dict]:
    """Arrangement name → the map's verdict on it: kind ("minimum", "saddle", "marginal", "no
    fixed point"), risk, leading rate ± s.e., and whether an idle head wakes there."""
    out = {}
    for k, a in enumerate(ds.split.values):
        kind = str(resting_kind(ds.kind.values[k], ds.idle_wakes.values[k]))
        out[str(a)] = {
            "kind": kind,
            "stable": kind == "minimum",
            "risk": float(ds.risk.values[k]),
            "rate": float(ds.lead_rate.values[k]),
            "se": float(ds.lead_se.values[k]),
        }
    return out


def describe(sn: list[str], v: dict[str, dict] | None) -> str:
    """'1(+e1+e2) …: 3 (map: minimum, R 0.3362, λ -0.00136 ± 0.00006); unresolved (…): 1' (seeds
    per arrangement, most first, with the map's verdict where it has one)."""
    parts = []
    for a, c in Counter(sn).most_common():
        w = (v or {}).get(a)
        if w is None:
            parts.append(f"{a}: {c}")
            continue
        lam = f", λ {w['rate']:+.5f} ± {w['se']:.5f}" if np.isfinite(w["rate"]) else ""
        risk = f", R {w['risk']:.4f}" if np.isfinite(w["risk"]) else ""
        parts.append(f"{a}: {c} (map: {w['kind']}{risk}{lam})")
    return "; ".join(parts)


def final_claim(
    ctx: Context, cid: str, label: str, where: str, sn: list[str], v: dict[str, dict]
) -> None:
    """The seeds end on stable minima of the map (the horizon was long enough); ``label``: the
    setting in a few words ("softmax, F = 2, H = 4")."""
    S = len(sn)
    n = sum(bool(v.get(a, {}).get("stable")) for a in sn)
    ctx.claim(Claim(
        f"{cid}.final",
        f"{label}: the seeds end in a final arrangement, a stable minimum of the D → ∞ drift (the "
        "map of arrangements)",
        f"{where}: seeds whose arrangement at the horizon is a stable minimum of the map (its "
        "active heads stable within 3 s.e. of the leading rate, and no idle head that wakes)",
        n, 0.0,
        Tolerance("at_least", S / 2, why="an arrangement is final when it is a stable minimum; "
                  "a seed on a saddle or with a head on no direction was still moving at the "
                  "horizon, so most seeds must have arrived for the grouping claims to judge "
                  "final states"),
        unit=f"of {S} seeds", detail=describe(sn, v),
    ))  # fmt: skip


def agreement_claim(ctx: Context, finals: dict, D: int, extra: str = "") -> None:
    """The per-seed agreement of the ODE and SGD, measured (no verdict)."""
    same = [same_arrangement(sn[sd - ctx.base.seed], a)
            for sn, on in finals.values() for sd, a in on.items()]  # fmt: skip
    if not same:
        return
    f, n = float(np.mean(same)), len(same)
    ctx.claim(Claim(
        "E7.ode_agreement",
        "The ODE from a seed's initial state ends in the arrangement SGD reaches (measured: at a "
        "saddle the choice is made by asymmetries that SGD's noise and the ODE's initial state "
        "supply differently)",
        f"fraction of runs (setting × activation × ODE seed) whose ODE and simulation end in the "
        f"same arrangement, at D = {D} (a run with a head on no direction counts as not the "
        "same); its dependence on D and the same-law claim: the study arrangement_odds",
        f, float(np.sqrt(f * (1 - f) / n)), unit="%",
        detail=f"{sum(same)} of {n} runs{extra}",
    ))  # fmt: skip
