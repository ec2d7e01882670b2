"""Leaving the common phase: the escape time of two heads and the saddle theory's prediction.

Shared by the escape-time and finite-size studies. Two heads first move together to the *common
phase*, a fixed point of the order-parameter ODE with both heads identical; their difference, of
size ~1/√D at initialisation, then grows like e^{λt} along the leading head-difference mode of the
drift's Jacobian there, so t_esc ≈ const + ln(D)/(2λ).

t_esc (primary, ``dM``): the first time, after the heads have reached the common phase (key cosine
Q₀₁/√(Q₀₀Q₁₁) ≥ ``cos_common``), at which |M₀ − M₁| reaches ``threshold``, log-linearly
interpolated between record points; +∞ when it never does before the horizon (censored), NaN when
the heads never reached the common phase. Checks: |M₀ − M₁| = ``check`` (``dM_check``) and the
key cosine falling below ``cos_leave`` (``cos``).

Example (a head difference growing like e^{t/2} from 10⁻³ after the common phase at t = 1):
    >>> t = np.linspace(0, 20, 81)
    >>> M = np.zeros((1, t.size, 2, 2)); M[0, :, 0, 0] = 1e-3 * np.exp(t / 2)
    >>> Q = np.ones((1, t.size, 2, 2)); Q[0, :4, 0, 1] = 0.5
    >>> escape_times(t, M, Q)["dM"].round(2)  # 2 ln(500) = 12.43
    array([12.43])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from headspec.apps.experiments.claims import Claim, Tolerance, json_number, value_se
from headspec.core.stats import censored_median, weighted_line

if TYPE_CHECKING:
    from headspec.apps.experiments.base import Context


def _crossing(t, y, level: float, k0: int, up: bool, log: bool) -> float:
    """First time at index ≥ k0 where y crosses ``level`` (upward if ``up``), interpolated in y
    (or in log y); +inf if it never does before the horizon."""
    hit = np.flatnonzero(((y >= level) if up else (y < level))[k0:])
    if hit.size == 0:
        return np.inf
    k = k0 + hit[0]
    if k == k0:  # already across when the common phase is reached
        return float(t[k])
    f = np.log if log else (lambda x: x)
    y0, y1, lv = f(max(y[k - 1], 1e-300)), f(max(y[k], 1e-300)), f(level)
    w = 0.0 if y1 == y0 else (lv - y0) / (y1 - y0)
    return float(t[k - 1] + np.clip(w, 0.0, 1.0) * (t[k] - t[k - 1]))


def escape_times(t, M, Q, threshold=0.5, check=0.25, cos_common=0.95, cos_leave=0.9) -> dict:
    """Per-seed t_esc of each definition (``dM``, ``dM_check``, ``cos``) and ``t_common``, from
    the overlaps M (seed, t, head, feature) and Q (seed, t, head, head) of two heads."""
    dM = np.linalg.norm(M[:, :, 0] - M[:, :, 1], axis=-1)  # (S, T)
    cos = Q[:, :, 0, 1] / np.sqrt(Q[:, :, 0, 0] * Q[:, :, 1, 1])  # (S, T)
    res = {"dM": [], "dM_check": [], "cos": [], "t_common": []}
    for s in range(M.shape[0]):
        common = np.flatnonzero(cos[s] >= cos_common)
        if common.size == 0:
            for v in res.values():
                v.append(np.nan)
            continue
        k0 = int(common[0])
        res["t_common"].append(float(t[k0]))
        res["dM"].append(_crossing(t, dM[s], threshold, k0, up=True, log=True))
        res["dM_check"].append(_crossing(t, dM[s], check, k0, up=True, log=True))
        res["cos"].append(_crossing(t, cos[s], cos_leave, k0, up=False, log=False))
    return {k: np.asarray(v, float) for k, v in res.items()}


def of_dataset(ds, **levels) -> dict:
    """:func:`escape_times` of a result dataset (variables M and Q over seed and t)."""
    M = ds.M.transpose("seed", "t", "head", "feature").values
    Q = ds.Q.transpose("seed", "t", ...).values
    return escape_times(ds.t.values, M, Q, **levels)


def summary(x, rng: np.random.Generator, n_boot: int = 4000) -> dict:
    """Of t_esc over the seeds that reached the common phase: the median with censored seeds at
    +∞ and its bootstrap s.e. (:func:`~headspec.core.stats.censored_median`), the mean ± s.e. and
    s.d. of the escaped ones (biased low when some are censored), 10/90 % quantiles, counts."""
    x = np.asarray(x, float)
    x = x[~np.isnan(x)]
    fin = x[np.isfinite(x)]
    med, med_se = censored_median(x, rng, n_boot)
    out = {
        "n": int(x.size),
        "n_censored": int(np.isinf(x).sum()),
        "median": med,
        "median_se": med_se,
        "mean": np.nan,
        "se": np.nan,
        "sd": np.nan,
        "q10": np.nan,
        "q90": np.nan,
    }
    if fin.size > 1:
        sd = float(fin.std(ddof=1))
        out.update(
            mean=float(fin.mean()),
            se=sd / np.sqrt(fin.size),
            sd=sd,
            q10=float(np.quantile(fin, 0.1)),
            q90=float(np.quantile(fin, 0.9)),
        )
    return out


def log_d_slope(Ds, value, se) -> dict | None:
    """Weighted least-squares line of ``value`` ± ``se`` against ln D over the finite points
    (None below two): slope ± s.e., intercept, χ²/dof and the D used."""
    Ds, y, e = (np.asarray(a, float) for a in (Ds, value, se))
    ok = np.isfinite(y) & np.isfinite(e) & (e > 0)
    if ok.sum() < 2:
        return None
    f = weighted_line(np.log(Ds[ok]), y[ok], e[ok])
    return {
        "slope": f.slope,
        "slope_se": f.slope_se,
        "intercept": f.intercept,
        "chi2": f.chi2,
        "dof": f.dof,
        "Ds": Ds[ok].astype(int).tolist(),
    }


def paired_slope(Ds, per_seed) -> dict | None:
    """Slope from seeds shared by every D (seed ids 0, 1, … start from the same normals scaled by
    1/√D, so per-D statistics are correlated): per seed a least-squares slope of t_esc against
    ln D, then mean ± s.e. over seeds. ``per_seed``: one array of t_esc per D (the first S seeds
    are used, S the fewest); seeds censored at some D are dropped (``n_dropped``: the slow ones,
    a possible bias)."""
    if len(Ds) < 2:
        return None
    S = min(len(v) for v in per_seed)
    Y = np.array([np.asarray(v, float)[:S] for v in per_seed])  # (nD, S)
    ok = np.all(np.isfinite(Y), axis=0)
    if ok.sum() < 2:
        return None
    slopes = np.polyfit(np.log(np.asarray(Ds, float)), Y[:, ok], 1)[0]
    return {
        "slope": float(slopes.mean()),
        "slope_se": float(slopes.std(ddof=1) / np.sqrt(ok.sum())),
        "n_seeds": int(ok.sum()),
        "n_dropped": int((~ok).sum()),
    }


def power(D: int) -> str:
    """D as a power of ten where it is one: power(1000) = '10³', power(2000) = '2000'."""
    k = round(np.log10(D))
    if 10**k != D:
        return str(D)
    return "10" + "".join("⁰¹²³⁴⁵⁶⁷⁸⁹"[int(c)] for c in str(k))


def predicted_slope(lam: float, lam_se: float) -> tuple[float, float]:
    """1/(2λ) and its s.e. by the delta method."""
    return 1.0 / (2 * lam), lam_se / (2 * lam**2)


def head_difference_rate(problem, state, H: int) -> dict:
    """The leading head-difference mode of the drift's Jacobian at ``state`` (one group of ``H``
    heads): its rate λ ± s.e. (over the drift's samples, delta method), whether it is the leading
    mode of all, and every nonzero mode (eigenvalue, s.e., common part, M part)."""
    from headspec.dynamics.jacobian import drift_jacobian, modes

    jac = drift_jacobian(problem, state, keep_samples=True)
    F = state.M.shape[-1]
    ms = [m for m in modes(jac, H, F) if not m.zero]
    lead = next(m for m in ms if m.common < 0.05)
    return {
        "lambda": float(lead.eigenvalue.real),
        "lambda_se": float(lead.se),
        "is_leading": bool(ms[0].common < 0.05),
        "modes": [
            {
                "eigenvalue": [float(m.eigenvalue.real), float(m.eigenvalue.imag)],
                "se": float(m.se),
                "common": float(m.common),
                "M_part": np.asarray(m.vector[: H * F]).tolist(),
            }
            for m in ms
        ],
    }


def common_phase(problem, guess, H: int) -> dict:
    """The common fixed point of ``H`` identical heads (polished from ``guess``, one group) and
    its :func:`head_difference_rate`."""
    from headspec.dynamics.fixed_points import find_fixed_point

    fp = find_fixed_point(guess, (H,), problem)
    out = head_difference_rate(problem, fp.state, H)
    out["fixed_point"] = {
        "M": np.asarray(fp.state.M[0]).tolist(),
        "Q00": float(fp.state.Q[0, 0]),
        "risk": float(fp.risk),
        "is_fixed": bool(fp.is_fixed),
        "converged": bool(fp.converged),
    }
    return out


def rate_of(ctx: Context, n: int, name: str) -> tuple[dict, object]:
    """:func:`common_phase` of the context's base config on ``n`` × H head-cyclic Sobol samples
    (full drift; the config kept as ``name``), and its DriftProblem."""
    import jax.numpy as jnp

    from headspec.conventions import build
    from headspec.conventions.config import TheoryConfig
    from headspec.dynamics.problem import OrderParameters

    cfg = ctx.cfg(TheoryConfig, name, {"theory.n": n})
    law, H = cfg.task.latent.build(), cfg.model.H
    a = np.asarray(law.atoms, float)  # (J, F); the guess: between the atoms, by their weights
    guess = OrderParameters(
        jnp.asarray(np.asarray(law.probs) @ a)[None],
        jnp.array([[0.65 * float(a[0] @ a[0])]]),
        jnp.zeros(1),
    )
    problem = build.analysis_problem(cfg, law, H, n, method="qmc", cyclic=True)
    return common_phase(problem, guess, H), problem


def median_fit(rows: list[dict], dmin: int) -> dict | None:
    """The weighted line of median t_esc against ln D over the rows with D ≥ ``dmin``."""
    sel = [r for r in rows if r["D"] >= dmin]
    return log_d_slope(
        [r["D"] for r in sel], [r["dM"]["median"] for r in sel], [r["dM"]["median_se"] for r in sel]
    )


def slope_claim(
    cid: str, statement: str, fit: dict | None, pred, k: float, source: str, precision: float = 0.1
) -> Claim:
    """The claim that a fitted slope equals 1/(2λ) (``pred``: value, s.e.), in two parts that
    must both hold: ``agrees`` (their difference within ``k`` combined standard errors) and
    ``precise`` (the combined s.e. at most ``precision`` × 1/(2λ), from ≥ 3 values of D: a test
    too weak to see a deviation would otherwise pass). ``source``: where the slope's s.e. comes
    from, in words."""
    import math

    fit = fit or {"slope": np.nan, "slope_se": np.nan}
    diff, se = fit["slope"] - pred[0], float(np.hypot(fit["slope_se"], pred[1]))
    n_dims = len(fit.get("Ds", ()))
    why = (
        f"the difference of two estimates, each with its s.e. (the slope's {source}; λ's over "
        f"its drift samples); {k:g} s.e.: a {100 * math.erfc(k / math.sqrt(2)):.2g} % false "
        "alarm where the law holds and the s.e. are right. No finite-D correction is applied: "
        "a bias of the slope beyond that shows as a NO"
    )
    measure = (
        f"fitted slope − 1/(2λ) (slope {value_se(fit['slope'], fit['slope_se'])}, "
        f"1/(2λ) = {value_se(*pred)})"
    )
    sharp = (
        f"with {k:g} s.e. at most {k * precision:.0%} of 1/(2λ), the test can see a deviation of "
        "that size; fewer than 3 values of D fit no line that can be checked"
    )
    rel = se / pred[0] if n_dims >= 3 else np.nan
    parts = (
        Claim(f"{cid}.agrees", "the slope agrees with 1/(2λ)", measure, diff, se,
              Tolerance("within", 0.0, k=k, why=why)),
        Claim(f"{cid}.precise", "the test is sharp enough", "combined s.e. / (1/(2λ)), over "
              f"{n_dims} values of D", rel, tolerance=Tolerance("at_most", precision, why=sharp)),
    )  # fmt: skip
    detail = f"fit over D = {fit.get('Ds', '—')}"
    if "chi2" in fit:
        detail += f"; χ²/dof of the line {fit['chi2']:.2f}/{fit['dof']}"
    return Claim(cid, statement, "the slope of t_esc against ln D beside 1/(2λ)", all_of=parts,
                 detail=detail)  # fmt: skip


def plain(x):
    """NumPy values as JSON-ready Python numbers (floats by
    :func:`~headspec.apps.experiments.claims.json_number`: NaN → null, ±∞ → text)."""
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple | np.ndarray):
        return [plain(v) for v in x]
    if isinstance(x, float | np.floating):
        return json_number(float(x))
    return x.item() if isinstance(x, np.generic) else x
