"""E1 — two phases (SPEC §7): softmax heads first move together toward K*E[θ], then split."""

from __future__ import annotations

import numpy as np

from headspec.apps.experiments.base import Context, _fmt, _mean_se
from headspec.conventions import results
from headspec.conventions.runs import law_of
from headspec.dynamics import analysis


def run(ctx: Context):
    """Common phase, staggered specialisation, risk plateaus, ODE vs simulation."""
    from headspec.apps.plots import plot_compare_overlaps, plot_head_similarity, plot_risk

    p = ctx.params
    sim, path = ctx.simulate("simulation", f"seeds={p['seeds']}")
    th = ctx.theory("theory", f'theory.init={{kind="simulation", path="{path}"}}')
    t = sim.t.values
    Q = sim.Q.values
    together = analysis.unspecialised(Q, p["common_cos"])  # (S, T)
    mean_dir = np.asarray(law_of(sim).mean())  # E[θ] of the law itself (any law, any probs)
    mean_dir = mean_dir / np.linalg.norm(mean_dir)
    along = (sim.cos.values @ mean_dir).min(-1)  # (S, T) worst head's cosine with K*E[θ]
    joint = together & (along >= 0.9)
    k_all = np.flatnonzero(joint.all(0))
    ctx.claim(
        "Heads first move together toward the mean direction K*E[θ]",
        f"first t where, in every seed, all heads are within cos {p['common_cos']} of their mean "
        "and ≥ 0.9 along K*E[θ]",
        "never"
        if k_all.size == 0
        else f"t = {_fmt(t[k_all[0]])} (held until t = {_fmt(t[k_all[-1]])})",
        bool(k_all.size),
    )
    ts = analysis.specialisation_times(t, Q, p["common_cos"])  # (S, H)
    first = np.nanmin(np.where(np.isnan(ts), np.inf, ts), axis=1)
    n_split = int(np.isfinite(first).sum())
    m, se = _mean_se(first[np.isfinite(first)])
    ctx.claim(
        "Then the heads split and align with latent directions one after another",
        "seeds whose heads left the common direction by the end; first specialisation time",
        f"{n_split}/{len(first)} seeds; t = {_fmt(m)} ± {_fmt(se, 2)}",
        n_split == len(first),
    )
    heads_spec = np.isfinite(ts).sum(1)
    ctx.claim(
        "Specialisation is staggered (saddle to saddle)",
        "heads specialised by the end, per seed; spread of their times",
        ", ".join(str(int(k)) for k in heads_spec)
        + f" heads; spread {_fmt(float(np.nanmean(np.nanmax(ts, 1) - np.nanmin(ts, 1))))}",
        None,
    )
    r = sim.risk.mean("seed").values
    pls = analysis.plateaus(t, r, max_slope=0.02, min_decades=0.3)
    ctx.claim(
        "The risk shows plateaus between drops",
        "flat stretches of the mean risk (≤ 0.02 per decade over ≥ 0.3 decades)",
        "; ".join(f"{_fmt(q['level'])} on [{_fmt(q['t_start'])}, {_fmt(q['t_end'])}]" for q in pls)
        or "none",
        len(pls) >= 2,
    )
    until = float(t[k_all[-1]]) if k_all.size else None  # end of the common phase
    dev = analysis.compare(sim, th, until=until)
    ctx.claim(
        "The D → ∞ ODE predicts the simulation through the common phase",
        f"largest deviation up to t = {_fmt(until or float(t[-1]))} "
        f"(D = {results.config_of(sim)['task']['D']})",
        f"risk {100 * dev['risk']['max_dev']:.1f} %, |ΔM| {dev['M']['max_dev']:.3f}, "
        f"|ΔQ| {dev['Q']['max_dev']:.3f}",
        dev["risk"]["max_dev"] <= 0.05,
        "finite-D corrections shrink with D (README)",
    )
    ctx.figure(plot_risk(sim, theory=th), "risk")
    ctx.figure(plot_head_similarity(sim), "head_similarity")
    ctx.figure(plot_compare_overlaps(sim, th), "overlaps")
