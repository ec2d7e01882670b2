"""E4 — Bayes-softmax optimality (SPEC §6, §7): the constructed predictor attains R_B on the same
samples; trained Bayes-softmax approaches R_B; two heads take the ± directions of one feature.

Trained heads are simulated on the exact reduced engine at large D and, beside each simulation,
the ODE is integrated from each seed's exact initial state (``ctx.paired``). "Reaches R_B" is
tested with an annealed learning rate (inverse-time schedule): with a constant η the η² term of
dQ/dt leaves an O(η) excess, which the constant-η runs show as the contrast (two η in theory).

The excess over R_B is measured on common samples: every seed's final (M, Q, b) and the Bayes
posterior are evaluated on the same ``excess_samples`` sequences (paired, so the Monte-Carlo error
of the difference is small), see :func:`final_excess`. The helpers here are shared with E3.
"""

from __future__ import annotations

import numpy as np

from headspec.apps.experiments.base import Context, Run, _fmt
from headspec.conventions.config import TheoryConfig


# ============================================================================ shared helpers
def final_excess(ds, n: int, key: int = 7, t_index: int = -1) -> dict:
    """Relative excess (R − R_B)/R_B of every seed's final state (or the state at grid index
    ``t_index``) of a result ``ds``, on ``n`` common samples shared with the Bayes posterior
    (paired).

    Returns {"seeds": (S,) relative excess (NaN for a diverged seed), "mean": seed mean,
    "se_seed": s.e. of the seed mean from the seed-to-seed spread, "se_mc": Monte-Carlo s.e. of the
    seed mean's paired difference (samples are shared by all seeds, so this part does not average
    out over seeds), "se": both combined, "rb": R_B on these samples, "rb_se": its s.e.}.
    The same ``key`` for every call: all results are compared on the same samples.
    """
    import jax

    from headspec.conventions import build
    from headspec.conventions.runs import config_model, law_of
    from headspec.core.attention import Heads
    from headspec.core.stats import mean_se
    from headspec.dynamics.bayes import Posterior, estimate_risks

    cfg = config_model(ds)
    law = law_of(ds)
    act = build.activation(cfg.model)
    last = ds.isel(t=t_index)
    M, Q, b = (np.asarray(last[v].values, dtype=float) for v in ("M", "Q", "b"))
    S = M.shape[0]
    ok = [s for s in range(S) if np.isfinite(M[s]).all() and np.isfinite(Q[s]).all()
          and np.isfinite(b[s]).all()]  # fmt: skip
    preds = {f"s{s}": Heads(M=M[s], Q=Q[s], b=b[s], activation=act) for s in ok}
    preds["bayes"] = Posterior(law)
    est, smp = estimate_risks(jax.random.key(key), law, cfg.task.L, preds, n=n, return_samples=True)
    rb = est["bayes"].mean
    per = np.full(S, np.nan)
    for s in ok:
        per[s] = (est[f"s{s}"].mean - rb) / rb
    m, se_seed = mean_se(per)
    se_seed = float(se_seed) if np.isfinite(se_seed) else 0.0
    if ok:
        d = np.mean([smp[f"s{s}"] for s in ok], axis=0) - smp["bayes"]  # (n,) seed-mean paired
        se_mc = float(d.std(ddof=1) / np.sqrt(d.size) / rb)
    else:
        se_mc = float("nan")
    return {
        "seeds": per,
        "mean": float(m),
        "se_seed": se_seed,
        "se_mc": se_mc,
        "se": float(np.hypot(se_seed, se_mc)),
        "rb": float(rb),
        "rb_se": float(est["bayes"].se),
    }


def rb_on_record_base(ds) -> float:
    """R_B on the base samples of the recorded risk curves (``record.mc_seed``, ``record.n_mc``):
    the level those curves reach at the optimum. Their common Monte-Carlo error (≈ 1–3 % at
    n_mc = 4096) shifts curves and this level alike, so figures draw this one, not
    ``attrs["bayes_risk"]`` (other samples)."""
    import jax
    import jax.numpy as jnp

    from headspec.conventions import build
    from headspec.conventions.runs import config_model, law_of
    from headspec.core.attention import loss_projected
    from headspec.dynamics.bayes import posterior

    cfg = config_model(ds)
    law = law_of(ds)
    L = cfg.task.L
    base = build.risk_base(cfg.record, law, L, cfg.model.H)

    def per_sample(theta):  # (n, F) → (n,)
        shift = jax.nn.one_hot(0, L, dtype=base.nu.dtype)[None, :, None] * theta[:, None, :]
        W = posterior(law, base.nu + shift)  # (n, L)
        return loss_projected(W, jnp.zeros(W.shape[0], jnp.int32))

    losses, _ = law.expect_by_atom(per_sample, base.theta)
    return float(jnp.mean(losses))


def pct(x: float, digits: int = 2) -> str:
    return f"{100 * x:+.{digits}f} %"


def schedule_override(t0: float, power: float = 1.0) -> str:
    return f'train.schedule={{kind="inverse_time", t0={float(t0)}, power={float(power)}}}'


def eta_end(lr: float, t0: float, power: float, T: float) -> float:
    """η(T) of the inverse-time schedule."""
    return lr * (1.0 + T / t0) ** (-power)


def eta_limit(ds, n: int, eta_of, from_frac: float = 0.25) -> dict:
    """The η → 0 limit of the excess along an annealed run: per seed, the least-squares line
    x(t) = x0 + c·η(t) through the paired excess at the grid times t ≥ from_frac·T; returns
    {"x0": seed mean of x0, "se": its s.e. (seeds) ⊕ the Monte-Carlo s.e., "c": mean slope,
    "t": the times used}. At an optimum reached, x0 = 0 (the excess is the O(η(t)) term); heads
    stuck off the optimum leave x0 > 0."""
    from headspec.core.stats import mean_se

    t = ds.t.values
    idx = np.flatnonzero(t >= from_frac * t[-1])
    ex = [final_excess(ds, n, t_index=int(i)) for i in idx]
    X = np.stack([e["seeds"] for e in ex], axis=1)  # (S, k)
    eta = np.asarray([eta_of(t[i]) for i in idx])
    A = np.stack([np.ones_like(eta), eta], axis=1)  # (k, 2)
    x0, c = [], []
    for row in X:
        if np.isfinite(row).all():
            coef = np.linalg.lstsq(A, row, rcond=None)[0]
            x0.append(coef[0])
            c.append(coef[1])
    m, se = mean_se(np.asarray(x0))
    se = float(se) if np.isfinite(se) else 0.0
    se_mc = max(e["se_mc"] for e in ex)
    return {"x0": float(m), "se": float(np.hypot(se, se_mc)), "c": float(np.mean(c)),
            "t": t[idx]}  # fmt: skip


def reach_claims(ctx: Context, label: str, anneal: dict, anneal_ode: dict, lim: dict,
                 lim_ode: dict, const: dict, const_ode: dict, D: int, eta_T: float,
                 aim: float):  # fmt: skip
    """The "reaches R_B" verdicts of an annealed run (simulation and ODE) and its contrast.

    ``anneal``/``const``: :func:`final_excess` of the simulations; ``*_ode``: of their ODEs;
    ``lim``/``lim_ode``: :func:`eta_limit` of the annealed simulation and ODE.
    """
    x, xo = anneal["mean"], anneal_ode["mean"]
    gap = x - xo  # finite-D part: same initial states, same schedule
    se_gap = float(np.hypot(anneal["se_seed"], anneal_ode["se_seed"]))
    tol = 3 * lim["se"] + abs(gap)
    tol_o = 3 * lim_ode["se"]
    ts = lim["t"]
    ctx.claim(
        f"{label}Bayes-softmax reaches R_B with an annealed η",
        f"η → 0 limit x0 of the relative excess over R_B along the annealing (per seed, line "
        f"x = x0 + c·η(t) through t = {ts[0]:.0f} … {ts[-1]:.0f}; paired on common samples), "
        f"simulation at D = {D} / ODE from the same initial states; and the excess at T "
        f"(η(T) = {eta_T:.3g})",
        f"x0 = {pct(lim['x0'])} ± {100 * lim['se']:.2f} % / {pct(lim_ode['x0'])} ± "
        f"{100 * lim_ode['se']:.2f} %; at T {pct(x)} ± {100 * anneal['se']:.2f} % / {pct(xo)} "
        f"± {100 * anneal_ode['se']:.2f} % (finite-D gap {pct(gap)} ± {100 * se_gap:.2f} %)",
        lim["x0"] <= tol and lim_ode["x0"] <= tol_o and x <= aim and xo <= aim,
        f"the excess falls like η(t): c = {100 * lim['c']:.1f} % per unit η along the annealing "
        f"(constant-η contrast: {pct(const['mean'])} sim / {pct(const_ode['mean'])} ODE at "
        "η = 2, i.e. ≈ excess/η per unit η; the annealed c is larger by the lag of the slow "
        "relaxation behind η(t))",
        tolerance=f"x0 ≤ 3 s.e. + |finite-D| (simulation: {100 * tol:.2f} %; ODE "
        f"{100 * tol_o:.2f} %), and the excess at T ≤ {100 * aim:.0f} % (the issue's aim). s.e.: "
        "seed-to-seed spread of the per-seed x0 ⊕ the paired Monte-Carlo error; finite-D: the "
        f"measured sim − ODE gap of the same seeds at T, {100 * abs(gap):.2f} % (O(1/D), "
        f"1/D = {100 / D:.2f} %). The O(η) excess itself is removed by the η → 0 limit; heads "
        "stuck off the optimum would leave x0 > 0",
    )
    diff = const["mean"] - x
    se_d = float(np.hypot(const["se"], anneal["se"]))
    ctx.claim(
        f"{label}The constant-η excess is the O(η) term, removed by annealing",
        "relative excess over R_B: constant η (simulation / ODE) vs annealed (simulation)",
        f"{pct(const['mean'])} / {pct(const_ode['mean'])} vs {pct(x)} "
        f"(difference {100 * diff:.2f} ± {100 * se_d:.2f} %)",
        diff > 3 * se_d and const_ode["mean"] - xo > 3 * se_d,
        tolerance="the constant-η excess exceeds the annealed one by > 3 s.e. of the difference "
        f"({100 * 3 * se_d:.2f} %), in simulation and in the ODE",
    )


def overlay_risk(ax, sim, ode, color, label, rb=None):
    """Simulation mean (solid, ± s.e. band) and the ODE from the same seeds (dashed) on ``ax``."""
    from headspec.core.stats import mean_se

    t = sim.t.values
    pos = t > 0
    m, se = mean_se(sim.risk.values, axis=0)
    ax.plot(t[pos], m[pos], color=color, lw=1.8, label=f"{label} (sim)")
    ax.fill_between(t[pos], (m - se)[pos], (m + se)[pos], color=color, alpha=0.2, lw=0)
    to = ode.t.values
    ax.plot(to[to > 0], ode.risk.mean("seed").values[to > 0], color=color, lw=1.4, ls="--",
            label=f"{label} (ODE)")  # fmt: skip
    if rb is not None:
        ax.axhline(rb, color="k", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("t")


def risk_dev_text(dev: dict) -> str:
    r = dev["risk"]
    return (
        f"max |Δrisk| {100 * r['max_dev']:.1f} % at t = {_fmt(r['t'])}, "
        f"|ΔM| {dev['M']['max_dev']:.3f}"
    )


# ============================================================================ E4
def run(ctx: Context):
    """Constructed Bayes-softmax vs the posterior; trained Bayes-softmax (annealed and constant η,
    simulation beside the ODE) vs R_B; ± directions of the trained heads."""
    import jax
    from matplotlib.figure import Figure

    from headspec.dynamics import analysis
    from headspec.dynamics.bayes import Posterior, constructed_bayes_softmax, estimate_risks

    p = ctx.params
    cfg = ctx.cfg(TheoryConfig, "constructed", "seeds=1")
    law = cfg.task.latent.build()
    n_c = int(p["samples"])
    est, samples = estimate_risks(
        jax.random.key(0), law, cfg.task.L,
        {"bayes": Posterior(law), "constructed": constructed_bayes_softmax(law)},
        n=n_c, return_samples=True,
    )  # fmt: skip
    d = samples["constructed"] - samples["bayes"]
    diff = float(np.max(np.abs(d)))
    se_d = float(d.std(ddof=1) / np.sqrt(d.size))
    ctx.claim(
        "The constructed Bayes-softmax (one head per atom) attains R_B",
        f"largest per-sample difference from the posterior's loss over {n_c:,} common samples",
        f"R_B = {_fmt(est['bayes'].mean, 5)} ± {_fmt(est['bayes'].se, 2)}; max |Δ| = {diff:.1e}",
        diff < 1e-9,
        f"so the paired s.e. of the risk difference is {se_d:.1e}, against R_B's own s.e. "
        f"{est['bayes'].se:.1e}",
        tolerance="max |Δ| < 1e-9 per sample: the two predictors are the same function, so they "
        "must agree to float64 round-off on every sample (a risk comparison within the s.e. "
        f"{est['bayes'].se:.1e} would be far weaker)",
    )

    seeds, D, lr = int(p["seeds"]), int(ctx.config["task"]["D"]), float(ctx.config["train"]["lr"])
    t0, power, Ta = float(p["anneal_t0"]), float(p.get("anneal_power", 1.0)), float(p["anneal_T"])
    const = Run("const", "simulate", (f"seeds={seeds}",))
    anneal = Run("anneal", "simulate", (f"seeds={seeds}", f"train.T={Ta}",
                                        schedule_override(t0, power)))  # fmt: skip
    pairs = ctx.paired([const, anneal])
    lr2 = float(p["contrast_lr"])
    c2 = ctx.theory_of(const, f"train.lr={lr2}")
    ode_lr2 = ctx.runs([Run("const_lr2_ode", "theory", c2.overrides, c2.extra)])["const_lr2_ode"]
    n = int(p["excess_samples"])
    ex = {k: final_excess(v[0], n) for k, v in pairs.items()}
    exo = {k: final_excess(v[1], n) for k, v in pairs.items()}
    ex_lr2 = final_excess(ode_lr2, n)
    eta_T = eta_end(lr, t0, power, Ta)
    eta_of = lambda t: eta_end(lr, t0, power, t)  # noqa: E731
    lims = {k: eta_limit(pairs["anneal"][i], n, eta_of) for i, k in enumerate(("sim", "ode"))}
    reach_claims(ctx, "", ex["anneal"], exo["anneal"], lims["sim"], lims["ode"], ex["const"],
                 exo["const"], D, eta_T, float(p["aim"]))  # fmt: skip

    # the O(η) excess shrinks with η (theory, same initial states)
    x1, x2 = exo["const"]["mean"], ex_lr2["mean"]

    se12 = float(np.hypot(exo["const"]["se"], ex_lr2["se"]))
    ratio = x2 / x1 if x1 else float("nan")
    ctx.claim(
        "The constant-η excess shrinks with η (the η² term of dQ/dt)",
        f"ODE excess at η = {lr:g} vs η = {lr2:g} (same initial states); η → 0 extrapolation",
        f"{pct(x1)} vs {pct(x2)} (ratio {ratio:.2f}, η-ratio {lr2 / lr:.2f}); linear "
        f"extrapolation to η = 0: {pct((x2 * lr - x1 * lr2) / (lr - lr2))}",
        x1 - x2 > 3 * se12,
        "a linear O(η) law gives ratio = η-ratio; the intercept is the O(η²) curvature plus the "
        "finite-time residual",
        tolerance=f"the excess at the larger η exceeds the smaller one's by > 3 s.e. "
        f"({100 * 3 * se12:.2f} %, paired Monte Carlo and seed mean)",
    )

    # ± directions: Hungarian match of the final heads to the atoms ±a
    atoms = np.asarray(law.atoms, dtype=float)
    thr = float(p["pm_cos"])
    rows = []
    for kind, ds in (("simulation", pairs["anneal"][0]), ("ODE", pairs["anneal"][1])):
        last = ds.isel(t=-1)
        cos_ok = []
        for s in range(ds.sizes["seed"]):
            M, Q = last.M.values[s], last.Q.values[s]
            h, j = analysis.match_heads(M, Q, atoms)
            c = analysis.atom_cosines(M, Q, atoms)[h, j]
            cos_ok.append(len(set(j.tolist())) == len(atoms) and bool(np.all(c >= thr)))
            rows.append((kind, int(ds.seed.values[s]), *(f"{x:.3f}" for x in c)))
        rows_ok = int(np.sum(cos_ok))
        ctx.claim(
            f"The two heads take the + and − directions of the feature ({kind})",
            f"seeds whose heads match the atoms +a and −a one to one (Hungarian) with cos ≥ {thr}",
            f"{rows_ok}/{len(cos_ok)}",
            rows_ok == len(cos_ok),
            tolerance=f"cos ≥ {thr}: at the optimum k_h = ±K*a exactly (cos 1); a head "
            "still shared between both directions or unspecialised has cos ≈ 0 with each, "
            f"and the O(1/√D) = {1 / np.sqrt(D):.3f} finite-D spread of the keys lies far inside "
            "the margin",
        )
    ctx.outcome.table = rows
    ctx.outcome.table_header = ("run", "seed", *(f"cos(head, atom {j})" for j in range(len(atoms))))

    # deviations
    for k, (_sim, _ode, dev) in pairs.items():
        ctx.claim(
            f"ODE beside the simulation ({k}, D = {D})",
            "largest deviation of the seed means over the run (risk relative, M absolute) and the "
            "final excess gap",
            f"{risk_dev_text(dev)}; final excess sim − ODE {pct(ex[k]['mean'] - exo[k]['mean'])}",
            None,
            "the largest deviation sits at the drop, whose time fluctuates by O(ln D) between "
            "SGD and the ODE",
        )

    fig = Figure(figsize=(12.5, 4.2), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    rb = rb_on_record_base(pairs["const"][0])
    overlay_risk(ax1, *pairs["const"][:2], "C0", f"constant η = {lr:g}")
    overlay_risk(ax1, *pairs["anneal"][:2], "C2", f"annealed (t0 = {t0:g})", rb)
    to = ode_lr2.t.values
    ax1.plot(to[to > 0], ode_lr2.risk.mean("seed").values[to > 0], color="C1", ls="--", lw=1.4,
             label=f"constant η = {lr2:g} (ODE)")  # fmt: skip
    ax1.set_ylabel("risk")
    ax1.set_yscale("log")
    ax1.set_title(f"H = 2 Bayes-softmax, flipped spike, D = {D} (dotted: R_B on the curves' "
                  "samples)", fontsize="medium")  # fmt: skip
    ax1.legend(fontsize="small")
    for kind, ds, ls in (("sim", pairs["anneal"][0], "-"), ("ODE", pairs["anneal"][1], "--")):
        t = ds.t.values
        pos = t > 0
        for s in range(ds.sizes["seed"]):
            for h in range(ds.sizes["head"]):
                ax2.plot(t[pos], ds.cos.values[s, pos, h, 0], ls=ls, lw=1.0, color=f"C{h}",
                         alpha=0.7, label=f"head {h} ({kind})" if s == 0 else None)  # fmt: skip
    ax2.axhline(thr, color="0.5", lw=0.8, ls=":")
    ax2.axhline(-thr, color="0.5", lw=0.8, ls=":")
    ax2.set_xscale("log")
    ax2.set_xlabel("t")
    ax2.set_ylabel("cos(k_h, K* a)")
    ax2.set_title("annealed run: every seed, simulation (solid) and ODE (dashed)",
                  fontsize="medium")  # fmt: skip
    ax2.legend(fontsize="small")
    ctx.figure(fig, "risk_and_directions")
