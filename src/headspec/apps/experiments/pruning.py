"""Pruning trained runs, shared by E5 (pruning) and E9 (redundancy at scale).

Every seed of a result (simulation or ODE) is pruned at its final time by
:func:`headspec.conventions.runs.prune_result` — the function behind `headspec prune`, with its
base samples (``record.mc_seed``) and random orders (keys 1000 + k). Risk increases are measured
in units of ΔR_atom (:class:`Scale`): what the constructed Bayes-softmax (one head per atom,
SPEC §6) loses with its least needed head. Losing the head that serves an atom leaves that atom's
sequences to heads aimed elsewhere, an absolute cost of about ΔR_atom whatever the activation.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from headspec.apps.experiments.params import Count, RecipeParams


class PruneParams(RecipeParams):
    """The pruning parameters of a recipe that prunes its trained runs (E5, E9)."""

    keep_fraction: float = Field(ge=0, description="keeps its risk: increase ≤ this × ΔR_atom")
    sharp_fraction: float = Field(ge=0, description="degrades sharply: ≥ this × ΔR_atom")
    random_orders: int = Field(ge=0, description="random pruning orders (keys 1000 + k)")
    n: Count = Field(description="base samples of the pruning risks (as headspec prune)")
    seeds: Count = Field(description="seeds per run")


def prune_paths(ds, n: int, orders: int) -> list[dict | None]:
    """prune_result of every seed of ``ds`` (final time); None for a diverged seed."""
    from headspec.conventions.runs import prune_result

    out = []
    for s in range(ds.sizes["seed"]):
        if not np.isfinite(ds.M.isel(seed=s, t=-1).values).all():
            out.append(None)  # a diverged seed has no trained state to prune
            continue
        out.append(prune_result(ds, seed_index=s, n=n, random_orders=orders))
    return out


def _greedy(paths: list) -> list[np.ndarray | None]:
    """Each seed's greedy risks (H + 1,) from all heads to none, None for a seed without a path."""
    return [None if q is None else np.asarray(q["greedy"]["risk"]) for q in paths]


def increase(paths: list, kept: int, relative: bool = True) -> np.ndarray:
    """Risk increase of every seed's greedy path with ``kept`` heads left, relative to the full
    model's risk (or absolute), NaN for a seed without a path."""
    out = []
    for r in _greedy(paths):
        d = np.nan if r is None else r[len(r) - 1 - kept] - r[0]
        out.append(d / r[0] if relative and r is not None else d)
    return np.asarray(out, dtype=float)


def removable(paths: list, limit: float) -> np.ndarray:
    """Per seed: how many heads the greedy path removes before the absolute risk increase first
    exceeds ``limit`` (NaN for a seed without a path)."""
    out = []
    for r in _greedy(paths):
        over = np.flatnonzero(r - r[0] > limit) if r is not None else None
        out.append(np.nan if r is None else float(over[0] - 1 if over.size else len(r) - 1))
    return np.asarray(out, dtype=float)


def mc_se(ds, n: int) -> float:
    """Monte-Carlo s.e. of a risk difference on ``n`` samples (bound √2·se of two unpaired
    estimates; prune's estimates are paired, so this is conservative), the largest over the
    trained seeds."""
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


def atom_scale(ds, n: int) -> tuple[float, dict]:
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


class Scale:
    """What the thresholds are measured in: ΔR_atom of the constructed Bayes-softmax (its path
    ``c_path``), with the law's J atoms, the model's H heads and R_B of the run ``ds``."""

    def __init__(self, ds, n: int):
        from headspec.conventions.runs import config_model, law_of

        self.H, self.J = config_model(ds).model.H, int(law_of(ds).J)
        self.d_atom, self.c_path = atom_scale(ds, n)
        self.rb = float(ds.attrs["bayes_risk"])


def path_dev(paths: dict) -> float:
    """Largest relative deviation (%) between the seed-mean greedy paths of simulation and ODE
    (``paths``: "sim" and "ode" → per-seed paths)."""
    means = []
    for k in ("sim", "ode"):
        ok = [q["greedy"]["risk"] for q in paths[k] if q is not None]
        if not ok:
            return float("nan")
        means.append(np.mean(ok, axis=0))
    return float(100 * np.max(np.abs(means[0] - means[1]) / np.abs(means[1])))
