"""E6's reading of head arrangements: which direction each head took, the split of the heads
over the directions, each seed's history of splits (moves, their times and risk bumps), prepared
uneven starts, and the fixed-point classification of a final state.

A head's direction and the split's name are those of :mod:`headspec.dynamics.splits` (the one
place of the split labels and the stable/saddle/marginal rule): cosine ≥ ``min_cos`` with an atom,
ahead of the other atom's by ``margin`` (a softmax head on the mean direction of the two
orthogonal atoms has cosine 0.71 with both and would be put on a random one), and a key that has
not shrunk (``idle_q``: silent softmax-1 / Bayes-softmax heads).
"""

from __future__ import annotations

import numpy as np

from headspec.apps.experiments.base import finite_mean_se, fmt
from headspec.conventions.runs import config_model
from headspec.dynamics.splits import UNDECIDED, head_labels, is_even, is_uneven, split_name


# ============================================================================ histories
def seed_history(t, risk, labels, persist: int = 3) -> dict:
    """One seed: t (T,), risk (T,), labels (T, H) → first split, end split, moves.

    The split after specialisation: the first label set (no head undecided, ≥ 2 heads on atoms)
    that persists ``persist`` grid points; a move: a later change of the split name that persists
    ``persist`` points (or lasts to the end); the end split is the last grid point's (a head
    still between the atoms shows as undecided). A move's risk bump: the largest risk on the way
    (from the previous split's lowest risk to the move's end) above that lowest risk (> 0: an
    excursion)."""
    names = [split_name(x) for x in labels]
    on = (labels >= 0).sum(-1)
    ok = (on >= 2) & ((labels == UNDECIDED).sum(-1) == 0) & (t > 0)
    T = len(t)

    def lasting(k):
        end = min(k + persist, T)
        return all(names[j] == names[k] and ok[j] for j in range(k, end))

    k0 = next((k for k in range(T) if ok[k] and lasting(k)), None)
    if k0 is None:
        return {"first": None, "t_first": np.nan, "end": names[-1], "moves": [],
                "end_risk": float(risk[-1])}  # fmt: skip
    moves, cur, kp = [], names[k0], k0
    for k in range(k0 + 1, T):
        if names[k] != cur and ok[k] and lasting(k):
            lo = kp + int(np.argmin(risk[kp:k]))
            bump = float(np.max(risk[lo : k + 1]) - risk[lo])
            moves.append({"t": float(t[k]), "from": cur, "to": names[k], "bump": bump})
            cur, kp = names[k], k
    return {"first": names[k0], "t_first": float(t[k0]), "end": names[-1], "moves": moves,
            "end_risk": float(risk[-1])}  # fmt: skip


def histories(ds, atoms, p) -> list[dict]:
    """Per seed of ``ds``: :func:`seed_history` (idle heads only for softmax-1/Bayes-softmax:
    a softmax head with a small key attends uniformly, it is not silent)."""
    idle = 0.0 if config_model(ds).model.activation == "softmax" else p.idle_q
    lab = head_labels(ds.M.values, ds.Q.values, atoms, p.min_cos, p.margin, idle)
    t, r = ds.t.values, ds.risk.values
    return [seed_history(t, r[s], lab[s], p.persist) for s in range(ds.sizes["seed"])]


def summary(hs: list[dict]) -> dict:
    def hist(xs):
        out: dict[str, int] = {}
        for x in xs:
            out[str(x)] = out.get(str(x), 0) + 1
        return ", ".join(f"{k} ×{v}" for k, v in sorted(out.items()))

    S = len(hs)
    uneven0 = [h for h in hs if h["first"] and is_uneven(h["first"])]
    moved = [h for h in uneven0 if is_even(h["end"])]
    moves = [m for h in hs for m in h["moves"]]
    ev = [h["end_risk"] for h in hs if is_even(h["end"])]
    un = [h["end_risk"] for h in hs if is_uneven(h["end"])]
    return {"S": S, "first": hist(h["first"] for h in hs), "end": hist(h["end"] for h in hs),
            "n_uneven0": len(uneven0), "n_moved": len(moved), "moves": moves,
            "risk_even": ev, "risk_uneven": un}  # fmt: skip


def moves_text(moves, limit=6) -> str:
    if not moves:
        return "none"
    txt = "; ".join(f"t={fmt(m['t'])} {m['from']}→{m['to']} bump {m['bump']:+.4f}"
                    for m in moves[:limit])  # fmt: skip
    return txt + (f"; … ({len(moves)} in all)" if len(moves) > limit else "")


def risks_text(xs) -> str:
    if not xs:
        return "–"
    m, se = finite_mean_se(xs)
    return f"{m:.4f} ± {se:.4f} (n={len(xs)})"


# ============================================================================ prepared starts
def prepared_state(atoms: np.ndarray, sizes: tuple[int, ...], scale: float, eps: float, seed=0):
    """M: heads grouped on the atoms (``sizes`` heads on atom 0, 1), at ``scale``·atom, plus a
    deterministic perturbation ``eps`` (so identical heads can separate); Q = MMᵀ + 0.1·I."""
    rng = np.random.default_rng(seed)
    rows = np.concatenate([np.repeat(atoms[j][None], n, 0) for j, n in enumerate(sizes)])
    M = scale * rows + eps * rng.standard_normal(rows.shape)
    Q = M @ M.T + 0.1 * np.eye(len(M))
    return M, Q


def rounded(x) -> list[list[float]]:
    """A matrix as nested lists of floats to 6 significant digits (a readable config entry)."""
    return [[float(f"{v:.6g}") for v in r] for r in x]


def classify(ds, t_index: int, n: int, group_cos: float) -> dict:
    """Fixed point nearest the state of seed 0 at ``t_index`` and its spectrum
    (``headspec.dynamics.saddles.saddle_at``): minimum or saddle."""
    from headspec.conventions import build
    from headspec.dynamics.problem import OrderParameters
    from headspec.dynamics.saddles import saddle_at
    from headspec.dynamics.splits import mode_se, stability

    cfg = config_model(ds)
    law = cfg.task.latent.build()
    st = ds.isel(seed=0, t=t_index)
    state = OrderParameters(*(np.asarray(st[v].values, float) for v in ("M", "Q", "b")))
    problem = build.analysis_problem(cfg, law, ds.sizes["head"], n)
    sad = saddle_at(state, problem, group_cos)
    lead = sad.leading
    st = stability(sad.modes)
    kind = st.kind
    if not sad.is_fixed:
        kind += " (not polished to a fixed point)"
    return {
        "kind": kind,
        "risk": float(sad.risk),
        "lead": float(lead.eigenvalue.real) if lead else np.nan,
        "lead_se": mode_se(lead) if lead else np.nan,
        "n_unstable": len(st.unstable),
        "n_marginal": len(st.marginal),
        "max_z": float(sad.max_z),
        "t": float(ds.t.values[t_index]),
    }
