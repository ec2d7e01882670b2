"""Figures of a result (schema of :mod:`headspec.results`): risk, cosine overlaps, head overlaps.

Every function takes datasets and returns a :class:`matplotlib.figure.Figure`. Figures are built
with ``matplotlib.figure.Figure`` directly, not through ``pyplot``: importing this module selects
no backend and registers nothing in pyplot's figure list, so there is no global state and nothing
to close (a figure is freed when the last reference to it goes). In Jupyter a returned figure
displays as usual; :func:`save_figures` writes PNG, PDF or SVG files.

Time axes are logarithmic; the point t = 0 is therefore left out of every curve (the first point
drawn is the first positive time of the grid). Diverged seeds (``failed == 1``) are NaN after
their failure time; NaNs show as gaps and are ignored by means and standard errors.

Example:
    >>> fig = plot_risk(ds)                                   # doctest: +SKIP
    >>> paths = save_figures(ds, "figures", formats=("png", "pdf"))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterable
from pathlib import Path

import matplotlib
import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

__all__ = [
    "plot_compare_overlaps",
    "plot_head_similarity",
    "plot_overlaps",
    "plot_prune",
    "plot_risk",
    "plot_sweep",
    "save_figures",
]

SIM_COLOR = "C0"
THEORY_COLOR = "C1"
TEST_COLOR = "C2"
FAIL_COLOR = "red"
T_LABEL = "training time t = samples / D"
FIGURES = ("risk", "overlaps", "head_similarity")


# ----------------------------------------------------------------------------- helpers
def _config(ds: xr.Dataset) -> dict:
    try:
        return json.loads(ds.attrs.get("config_json", "{}"))
    except (TypeError, ValueError):
        return {}


def _get(d: dict, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _title(ds: xr.Dataset, what: str) -> str:
    """``what — simulation: softmax, H = 4, L = 10, D = 1000, discrete latent, 8 seeds``."""
    cfg = _config(ds)
    kind = ds.attrs.get("kind", "result")
    parts = []
    act = _get(cfg, "model", "activation")
    if act is not None:
        parts.append(str(act))
    H = _get(cfg, "model", "H") or ds.sizes.get("head")
    if H is not None:
        parts.append(f"H = {H}")
    L = _get(cfg, "task", "L")
    if L is not None:
        parts.append(f"L = {L}")
    D = _get(cfg, "task", "D")
    if D is not None and kind != "theory":
        parts.append(f"D = {D}")
    latent = _get(cfg, "task", "latent", "kind")
    if latent is not None:
        parts.append(f"{latent} latent")
    if "seed" in ds.dims and kind != "theory":
        S = ds.sizes["seed"]
        parts.append(f"{S} seed{'s' if S != 1 else ''}")
    return f"{what} — {kind}: " + ", ".join(parts)


def _positive_t(ds: xr.Dataset) -> xr.Dataset:
    """The dataset restricted to t > 0 (log axes)."""
    return ds.isel(t=np.flatnonzero(np.asarray(ds.t) > 0))


def _nanmean(x: np.ndarray, axis=0) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns → NaN, quietly
        return np.nanmean(x, axis=axis)


def _sem(x: np.ndarray, axis=0) -> np.ndarray:
    """Standard error of the mean over ``axis``, ignoring NaN (NaN where < 2 finite values)."""
    n = np.sum(np.isfinite(x), axis=axis)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        sd = np.nanstd(x, axis=axis, ddof=1)
        return np.where(n >= 2, sd / np.sqrt(n), np.nan)


def _failed(ds: xr.Dataset) -> np.ndarray:
    if "failed" in ds:
        return np.asarray(ds.failed).astype(bool)
    return np.zeros(ds.sizes.get("seed", 1), dtype=bool)


def _log_x(ax: Axes, t: np.ndarray) -> None:
    if t.size and np.any(t > 0):
        ax.set_xscale("log")
    ax.set_xlabel(T_LABEL)


def _seed_index(ds: xr.Dataset, seed) -> int:
    """Index of the seed whose coordinate value is ``seed`` (the first seed when None)."""
    if "seed" not in ds.dims or ds.sizes["seed"] == 0:
        raise ValueError("the result has no seeds to plot")
    if seed is None:
        return 0
    values = [int(s) for s in np.asarray(ds.seed)]
    if int(seed) not in values:
        raise ValueError(
            f"seed {seed} is not in this result (seeds: {values}); fix: pick one of them"
        )
    return values.index(int(seed))


def _head_colors(H: int) -> list:
    if H <= 10:
        return [f"C{h}" for h in range(H)]
    cmap = matplotlib.colormaps["viridis"]
    return [cmap(h / (H - 1)) for h in range(H)]


def _legend_outside(ax: Axes, **kw):
    """Legend to the right of the axes, so it never covers curves."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kw)


# ----------------------------------------------------------------------------- risk
def plot_risk(ds: xr.Dataset, ax: Axes | None = None, theory: xr.Dataset | None = None) -> Figure:
    """Risk vs training time, log x-axis; t = 0 is dropped (curves start at the first t > 0).

    Draws each seed's D → ∞ risk as a thin translucent line, their mean over seeds (NaN-aware,
    ``gid="risk-mean"``) bold with a band of ± 1 standard error of that mean (seed-to-seed spread
    / √(seeds), shown with ≥ 2 seeds), the held-out loss (``test_risk``) mean as dots with error
    bars (the seed-to-seed standard error, or the held-out s.e. with one seed) when present, the
    Bayes risk ``attrs["bayes_risk"]`` as a dashed line, and ½(1 − 1/L) — the risk of uniform
    attention W_l = 1/L — dotted. Diverged seeds are drawn red dashed (a cross at their last
    finite point) and named in the legend; they stay in the mean up to their failure. If a
    diverged seed blew up beyond the healthy curves, the y-axis is limited to the healthy seeds,
    theory and reference lines (the legend says "y-axis clipped"). ``theory`` (a result of kind
    "theory") overlays its mean risk bold in another colour (``gid="theory-mean"``).

    ``ax``: draw into these axes (the legend goes to their right); otherwise a new figure.
    Returns the figure.
    """
    if ax is None:
        fig = Figure(figsize=(8.5, 4.8), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    pos = _positive_t(ds)
    t = np.asarray(pos.t, dtype=float)
    risk = np.asarray(pos.risk, dtype=float).reshape(-1, t.size)  # (S, T)
    S = risk.shape[0]
    failed = _failed(ds)

    ok_rows = [i for i in range(S) if not failed[i]]
    for n, i in enumerate(ok_rows):
        ax.plot(
            t,
            risk[i],
            color=SIM_COLOR,
            lw=0.8,
            alpha=0.35,
            label=f"individual seeds ({len(ok_rows)})" if n == 0 and S > 1 else None,
        )
    fail_rows = [i for i in range(S) if failed[i]]
    fail_t = np.asarray(ds.fail_t, dtype=float) if "fail_t" in ds else np.full(S, np.nan)
    seed_ids = np.asarray(ds.seed).astype(int) if "seed" in ds.coords else np.arange(S)
    fail_label = (
        f"diverged seed{'s' if len(fail_rows) > 1 else ''} "
        f"({', '.join(str(seed_ids[j]) for j in fail_rows)})"
    )
    fail_lines = []
    for n, i in enumerate(fail_rows):
        line = ax.plot(
            t,
            risk[i],
            color=FAIL_COLOR,
            ls="--",
            lw=1.0,
            alpha=0.8,
            label=fail_label if n == 0 else None,
            gid=f"diverged-seed-{seed_ids[i]}",
        )[0]
        fail_lines.append(line)
        finite = np.flatnonzero(np.isfinite(risk[i]))
        if finite.size:  # mark the last recorded point before the failure
            k = finite[-1]
            ax.plot(t[k], risk[i, k], "x", color=FAIL_COLOR, ms=7, mew=1.5)
        elif np.isfinite(fail_t[i]):
            ax.axvline(fail_t[i], color=FAIL_COLOR, ls=":", lw=0.8)

    mean = _nanmean(risk, axis=0)
    ax.plot(
        t,
        mean,
        color=SIM_COLOR,
        lw=2.2,
        label=f"risk R(M, Q, b), mean over {S} seeds" if S > 1 else "risk R(M, Q, b)",
        gid="risk-mean",
    )
    if S > 1:
        se = _sem(risk, axis=0)
        band = np.isfinite(se)
        if band.any():
            ax.fill_between(
                t,
                mean - se,
                mean + se,
                where=band,
                color=SIM_COLOR,
                alpha=0.2,
                lw=0,
                label="± 1 s.e. of the mean",
            )

    if "test_risk" in pos:
        test = np.asarray(pos.test_risk, dtype=float).reshape(-1, t.size)
        if np.isfinite(test).any():
            tmean = _nanmean(test, axis=0)
            if S > 1:
                terr = _sem(test, axis=0)
            else:
                terr = np.asarray(pos.test_risk_se, dtype=float).reshape(-1)
            terr = np.where(np.isfinite(terr), terr, 0.0)
            ax.errorbar(
                t,
                tmean,
                yerr=terr,
                fmt="o",
                ms=4,
                color=TEST_COLOR,
                ecolor=TEST_COLOR,
                elinewidth=1,
                capsize=2,
                label="held-out loss (finite D), mean",
                zorder=3,
            )

    if theory is not None:
        th = _positive_t(theory)
        tt = np.asarray(th.t, dtype=float)
        tr = _nanmean(np.asarray(th.risk, dtype=float).reshape(-1, tt.size), axis=0)
        ax.plot(tt, tr, color=THEORY_COLOR, lw=2.2, label="theory (D → ∞)", gid="theory-mean")

    ref = None
    rb = ds.attrs.get("bayes_risk")
    if rb is None and theory is not None:
        rb = theory.attrs.get("bayes_risk")
    rb = None if rb is None or not np.isfinite(float(rb)) else float(rb)
    if rb is not None:
        ax.axhline(rb, color="k", ls="--", lw=1.2, label=f"Bayes risk R_B = {rb:.4g}")
    L = _get(_config(ds), "task", "L")
    if L is not None:
        ref = 0.5 * (1.0 - 1.0 / float(L))
        ax.axhline(
            ref, color="0.4", ls=":", lw=1.4, label=f"uniform attention ½(1−1/L) = {ref:.4g}"
        )

    if fail_rows and ok_rows:  # a blow-up before divergence must not squash the other curves
        keep = [risk[ok_rows].ravel()]  # the mean may carry part of the blow-up: clip it too
        if "test_risk" in pos:
            keep.append(np.asarray(pos.test_risk, dtype=float).reshape(-1, t.size)[ok_rows])
        keep += [ln.get_ydata() for ln in ax.lines if ln.get_gid() == "theory-mean"]
        keep += [np.atleast_1d(v) for v in (rb, ref) if v is not None]
        y = np.concatenate([np.asarray(k, dtype=float).ravel() for k in keep])
        y = y[np.isfinite(y)]
        bad = risk[fail_rows]
        bad = bad[np.isfinite(bad)]
        if y.size and bad.size:
            lo, hi = float(y.min()), float(y.max())
            pad = 0.06 * max(hi - lo, 1e-3)
            if bad.max() > hi + pad or bad.min() < lo - pad:
                ax.set_ylim(lo - pad, hi + pad)
                fail_lines[0].set_label(fail_label + ", y-axis clipped")

    _log_x(ax, t)
    ax.set_ylabel("risk")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(_title(ds, "risk"), fontsize="medium")
    _legend_outside(ax, fontsize="small")
    return fig


# ----------------------------------------------------------------------------- overlaps
def plot_overlaps(ds: xr.Dataset, seed: int | None = None) -> Figure:
    """Cosine overlaps cos_hf = M_hf/√Q_hh of every head with every feature, for one seed.

    ``seed`` is a value of the ``seed`` coordinate (default: the first seed). One panel per
    feature f shows cos_hf vs t (log x, t = 0 dropped), one colour per head; a last panel is a
    heatmap of |cos_hf| (heads × features, values written in the cells) at the last time where the
    seed's overlaps are finite (the final time unless the seed diverged).
    """
    i = _seed_index(ds, seed)
    one = ds.isel(seed=i)
    pos = _positive_t(one)
    t = np.asarray(pos.t, dtype=float)
    cos = np.asarray(pos.cos, dtype=float).reshape(t.size, one.sizes["head"], one.sizes["feature"])
    H, F = cos.shape[1], cos.shape[2]
    colors = _head_colors(H)
    seed_id = int(one.seed) if "seed" in one.coords else i

    n_panels = F + 1
    ncols = min(n_panels, 4)
    nrows = math.ceil(n_panels / ncols)
    fig = Figure(figsize=(3.6 * ncols + 1.2, 3.2 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for f in range(F):
        ax = axes[f]
        for h in range(H):
            ax.plot(t, cos[:, h, f], color=colors[h], lw=1.5, label=f"head {h}")
        ax.axhline(0.0, color="0.6", lw=0.6)
        _log_x(ax, t)
        ax.set_ylabel(f"cos(k_h, k*_{f})")
        ax.set_title(f"feature {f}", fontsize="medium")
        ax.grid(True, alpha=0.3)
    ymin = np.nanmin(cos) if np.isfinite(cos).any() else -1.0
    for ax in axes[:F]:
        ax.set_ylim(min(-0.05, ymin - 0.05), 1.05)

    ax = axes[F]
    finite_t = np.flatnonzero(np.isfinite(cos).any(axis=(1, 2)))
    if finite_t.size:
        k = finite_t[-1]
        A = np.abs(cos[k])  # (H, F)
        im = ax.imshow(A, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        fontsize = "small" if H * F <= 64 else "xx-small"
        if H * F <= 400:
            for h in range(H):
                for f in range(F):
                    v = A[h, f]
                    ax.text(
                        f,
                        h,
                        "—" if not np.isfinite(v) else f"{v:.2f}",
                        ha="center",
                        va="center",
                        fontsize=fontsize,
                        color="k" if v > 0.6 else "w",
                    )
        fig.colorbar(im, ax=ax, label="|cos|", shrink=0.9)
        ax.set_title(f"|cos| at t = {t[k]:.4g}", fontsize="medium")
    else:
        ax.text(0.5, 0.5, "no finite overlaps", ha="center", va="center", transform=ax.transAxes)
        ax.set_title("|cos| at the final time", fontsize="medium")
    ax.set_xlabel("feature f")
    ax.set_ylabel("head h")
    ax.set_xticks(range(F))
    ax.set_yticks(range(H))
    for extra in axes[F + 1 :]:
        extra.set_visible(False)

    if H <= 16:
        handles = [Line2D([], [], color=colors[h], lw=1.5, label=f"head {h}") for h in range(H)]
        fig.legend(handles=handles, loc="outside right upper", fontsize="small")
    failed = _failed(ds)[i]
    note = " (diverged)" if failed else ""
    fig.suptitle(_title(ds, f"cosine overlaps, seed {seed_id}{note}"), fontsize="medium")
    return fig


def plot_compare_overlaps(sim: xr.Dataset, theory: xr.Dataset) -> Figure:
    """Cosine overlaps of simulation (thin) and theory (bold) on one figure, one panel per feature.

    If the theory started from some of the simulation's seeds, the first such seed is shown for
    both (same initial state, same head identities); otherwise every simulated seed is drawn thin
    and the theory's first seed bold.
    """
    from headspec.analysis import align_time

    th = align_time(sim, theory)
    common = [s for s in th.seed.values if s in set(sim.seed.values)]
    sims = sim.sel(seed=[common[0]]) if common else sim
    th1 = th.sel(seed=common[0]) if common else th.isel(seed=0)
    pos = sim.t.values > 0
    t = sim.t.values[pos]
    H, F = sim.sizes["head"], sim.sizes["feature"]
    colors = _head_colors(H)
    fig = Figure(figsize=(4.2 * F + 1.2, 3.6), layout="constrained")
    axes = fig.subplots(1, F, squeeze=False).ravel()
    for f in range(F):
        ax = axes[f]
        for h in range(H):
            for s in range(sims.sizes["seed"]):
                ax.plot(t, sims.cos.values[s, pos, h, f], color=colors[h], lw=0.7, alpha=0.5)
            ax.plot(t, th1.cos.values[pos, h, f], color=colors[h], lw=2.2)
        ax.axhline(0.0, color="0.6", lw=0.6)
        _log_x(ax, t)
        ax.set_ylabel(f"cos(k_h, k*_{f})")
        ax.set_title(f"feature {f}", fontsize="medium")
        ax.grid(True, alpha=0.3)
    handles = [Line2D([], [], color=colors[h], lw=1.5, label=f"head {h}") for h in range(H)][:16]
    handles += [
        Line2D([], [], color="0.3", lw=0.7, alpha=0.6, label="simulation"),
        Line2D([], [], color="0.3", lw=2.2, label="theory (D → ∞)"),
    ]
    fig.legend(handles=handles, loc="outside right upper", fontsize="small")
    which = f"seed {int(common[0])}" if common else f"{sims.sizes['seed']} seeds"
    fig.suptitle(
        _title(sim, f"cosine overlaps, simulation vs theory ({which})\n"), fontsize="medium"
    )
    return fig


def plot_prune(out: dict, title: str = "", bayes_risk: float | None = None) -> Figure:
    """Risk vs heads kept: the greedy (fewest-harm-first) path bold, random orders thin."""
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.subplots()
    n = out["n_heads"]
    for k, path in enumerate(out["random"]):
        ax.plot(n, path["risk"], color="0.5", lw=0.8, alpha=0.6,
                label="random order" if k == 0 else None)  # fmt: skip
    ax.plot(n, out["greedy"]["risk"], color=SIM_COLOR, lw=2.2, marker="o", label="greedy")
    if bayes_risk is not None:
        ax.axhline(bayes_risk, color="k", ls="--", lw=1.0, label="Bayes risk R_B")
    ax.axhline(0.5, color="0.6", ls=":", lw=1.0, label="no head (ŷ = 0)")
    ax.set_xlabel("heads kept")
    ax.set_ylabel("risk (D → ∞)")
    ax.invert_xaxis()
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(title or "pruning", fontsize="medium")
    return fig


# ----------------------------------------------------------------------------- sweeps
def final_risk(ds: xr.Dataset) -> tuple[xr.DataArray, xr.DataArray]:
    """Mean over seeds of the risk at the last grid time, and its standard error (over the axes
    of a collected sweep). Diverged seeds (NaN at the end) are left out."""
    tdim = "t" if "t" in ds.risk.dims else "t_index"
    last = ds.risk.isel({tdim: -1})
    r = np.asarray(last)
    ax = last.dims.index("seed")
    dims = [d for d in last.dims if d != "seed"]
    coords = {d: ds[d] for d in dims}
    mean = xr.DataArray(_nanmean(r, axis=ax), dims=dims, coords=coords)
    return mean, xr.DataArray(_sem(r, axis=ax), dims=dims, coords=coords)


def plot_sweep(ds: xr.Dataset, max_lines: int = 12) -> Figure:
    """Final risk (mean over seeds ± s.e.) against the first swept axis, one line per value of
    the other axes (at most ``max_lines``), with each point's Bayes risk dashed."""
    axes = json.loads(ds.attrs["axes"])
    mean, se = final_risk(ds)
    x_name, others = axes[0], axes[1:]
    xv = ds[x_name].values
    numeric = np.issubdtype(xv.dtype, np.number)
    x = xv.astype(float) if numeric else np.arange(xv.size)
    combos = list(np.ndindex(*[ds.sizes[a] for a in others])) if others else [()]
    shown = combos[:max_lines]
    fig = Figure(figsize=(7.5, 4.6), layout="constrained")
    ax = fig.add_subplot()
    for k, idx in enumerate(shown):
        sel = {a: i for a, i in zip(others, idx, strict=True)}
        m, e = np.asarray(mean.isel(sel)), np.asarray(se.isel(sel))
        label = ", ".join(f"{a} = {ds[a].values[i]}" for a, i in sel.items()) or "final risk"
        color = f"C{k % 10}"
        ax.errorbar(x, m, yerr=np.nan_to_num(e), color=color, marker="o", ms=4, lw=1.6,
                    capsize=2, label=label)  # fmt: skip
        if "bayes_risk" in ds:
            ax.plot(x, np.asarray(ds.bayes_risk.isel(sel)), color=color, ls="--", lw=0.9)
    if not numeric:
        ax.set_xticks(x, [str(v) for v in xv], rotation=20)
    key = ds[x_name].attrs.get("config_key", x_name)
    ax.set_xlabel(key)
    ax.set_ylabel("final risk (D → ∞), mean over seeds")
    ax.grid(True, alpha=0.3)
    ax.add_artist(ax.legend(fontsize="small", loc="best"))
    ax.legend(handles=[Line2D([], [], color="0.3", ls="--", lw=0.9, label="Bayes risk R_B")],
              fontsize="small", loc="lower left")  # fmt: skip
    more = f" (first {len(shown)} of {len(combos)} lines)" if len(shown) < len(combos) else ""
    when = f"t = {float(ds.t[-1]):g}" if "t" in ds.risk.dims else "each point's last time"
    ax.set_title(f"{ds.attrs.get('sweep_kind', 'sweep')}: final risk at {when}{more}",
                 fontsize="medium")  # fmt: skip
    return fig


# ----------------------------------------------------------------------------- head similarity
def plot_head_similarity(ds: xr.Dataset, seed: int | None = None) -> Figure:
    """Normalised head–head overlaps Q_hh'/√(Q_hh Q_h'h') (h < h') vs t for one seed, log x.

    ``seed`` is a value of the ``seed`` coordinate (default: the first seed); t = 0 is dropped.
    Heads that start alike specialise when these drop. With a single head there are no pairs and
    the panel says so.
    """
    i = _seed_index(ds, seed)
    one = ds.isel(seed=i)
    pos = _positive_t(one)
    t = np.asarray(pos.t, dtype=float)
    H = one.sizes["head"]
    Q = np.asarray(pos.Q, dtype=float).reshape(t.size, H, H)
    seed_id = int(one.seed) if "seed" in one.coords else i

    fig = Figure(figsize=(8.5, 4.8), layout="constrained")
    ax = fig.add_subplot()
    pairs = [(h, g) for h in range(H) for g in range(h + 1, H)]
    diag = np.einsum("thh->th", Q)  # (T, H)
    with np.errstate(invalid="ignore", divide="ignore"):
        norm = np.sqrt(diag[:, :, None] * diag[:, None, :])
        R = Q / norm  # (T, H, H)
    if pairs:
        cmap = matplotlib.colormaps["viridis"]
        for n, (h, g) in enumerate(pairs):
            color = f"C{n}" if len(pairs) <= 10 else cmap(n / (len(pairs) - 1))
            ax.plot(t, R[:, h, g], color=color, lw=1.5, label=f"heads {h}, {g}")
        ax.axhline(0.0, color="0.6", lw=0.6)
        if len(pairs) <= 15:
            _legend_outside(ax, fontsize="small")
        else:
            ax.text(
                0.99,
                0.02,
                f"{len(pairs)} pairs",
                ha="right",
                va="bottom",
                transform=ax.transAxes,
                fontsize="small",
            )
    else:
        ax.text(
            0.5,
            0.5,
            "a single head: no head pairs",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    _log_x(ax, t)
    ax.set_ylabel("Q_hh' / √(Q_hh Q_h'h')")
    ax.grid(True, alpha=0.3)
    note = " (diverged)" if _failed(ds)[i] else ""
    ax.set_title(
        _title(ds, f"head similarity, seed {seed_id}{note}") + "\nheads separate when these drop",
        fontsize="medium",
    )
    return fig


# ----------------------------------------------------------------------------- files
def save_figures(
    ds: xr.Dataset,
    outdir: str | Path,
    formats: Iterable[str] = ("png",),
    prefix: str | None = None,
    theory: xr.Dataset | None = None,
) -> list[Path]:
    """Write the risk, overlaps and head-similarity figures of ``ds`` into ``outdir``.

    Files are ``{prefix}risk.{fmt}``, ``{prefix}overlaps.{fmt}``, ``{prefix}head_similarity.{fmt}``
    for each format (e.g. "png", "pdf", "svg"); ``outdir`` is created if needed. ``theory`` is
    overlaid on the risk figure. Returns the paths written, figure by figure.
    """
    fmts = [str(f).lower().lstrip(".") for f in formats]
    if not fmts:
        raise ValueError("no formats given; fix: give at least one, e.g. ('png',)")
    supported = Figure().canvas.get_supported_filetypes()
    bad = [f for f in fmts if f not in supported]
    if bad:
        raise ValueError(
            f"figure format {bad[0]!r} is not supported; fix: use one of "
            f"{', '.join(sorted(supported))}"
        )
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    prefix = prefix or ""
    makers = {
        "risk": lambda: plot_risk(ds, theory=theory),
        "overlaps": lambda: plot_overlaps(ds),
        "head_similarity": lambda: plot_head_similarity(ds),
    }
    paths = []
    for name in FIGURES:
        fig = makers[name]()
        try:
            for fmt in fmts:
                path = outdir / f"{prefix}{name}.{fmt}"
                fig.savefig(path, format=fmt, dpi=150)
                paths.append(path)
        finally:
            fig.clear()  # not a pyplot figure: nothing to close; drop its artists now
    return paths
