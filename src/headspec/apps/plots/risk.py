"""The risk figure: seeds, their mean ± s.e., held-out loss, theory and reference levels."""

from __future__ import annotations

import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from headspec.apps.plots.common import (
    FAIL_COLOR,
    SIM_COLOR,
    TEST_COLOR,
    THEORY_COLOR,
    failed_seeds,
    legend_outside,
    log_x,
    nanmean,
    nested_get,
    positive_t,
    result_config,
    sem,
    title_of,
)


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
    pos = positive_t(ds)
    t = np.asarray(pos.t, dtype=float)
    risk = np.asarray(pos.risk, dtype=float).reshape(-1, t.size)  # (S, T)
    S = risk.shape[0]
    failed = failed_seeds(ds)
    ok_rows = [i for i in range(S) if not failed[i]]
    fail_rows = [i for i in range(S) if failed[i]]

    # the drawing order below is the legend's order
    _draw_healthy_seeds(ax, t, risk, ok_rows)
    labelled = _draw_diverged_seeds(ax, ds, t, risk, fail_rows)
    _draw_seed_mean(ax, t, risk)
    if "test_risk" in pos:
        _draw_test_risk(ax, pos, t, S)
    if theory is not None:
        _draw_theory(ax, theory)
    levels = _draw_reference_levels(ax, ds, theory)
    if fail_rows and ok_rows:  # a blow-up before divergence must not squash the other curves
        _clip_to_healthy(ax, pos, risk, ok_rows, fail_rows, levels, labelled)

    log_x(ax, t)
    ax.set_ylabel("risk")
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(title_of(ds, "risk"), fontsize="medium")
    legend_outside(ax, fontsize="small")
    return fig


def _draw_healthy_seeds(ax: Axes, t: np.ndarray, risk: np.ndarray, ok_rows: list[int]) -> None:
    """One thin translucent line per healthy seed; the first is labelled when there are several
    seeds."""
    S = risk.shape[0]
    for n, i in enumerate(ok_rows):
        ax.plot(
            t,
            risk[i],
            color=SIM_COLOR,
            lw=0.8,
            alpha=0.35,
            label=f"individual seeds ({len(ok_rows)})" if n == 0 and S > 1 else None,
        )


def _draw_diverged_seeds(
    ax: Axes, ds: xr.Dataset, t: np.ndarray, risk: np.ndarray, fail_rows: list[int]
) -> Line2D | None:
    """Diverged seeds red dashed (``gid="diverged-seed-<seed>"``), a cross at each one's last
    finite point (or a dotted vertical line at its failure time when it has none).

    Returns the line that carries the legend label naming the diverged seeds (None if none)."""
    S = risk.shape[0]
    fail_t = np.asarray(ds.fail_t, dtype=float) if "fail_t" in ds else np.full(S, np.nan)
    seed_ids = np.asarray(ds.seed).astype(int) if "seed" in ds.coords else np.arange(S)
    fail_label = (
        f"diverged seed{'s' if len(fail_rows) > 1 else ''} "
        f"({', '.join(str(seed_ids[j]) for j in fail_rows)})"
    )
    labelled = None
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
        if n == 0:
            labelled = line
        finite = np.flatnonzero(np.isfinite(risk[i]))
        if finite.size:  # mark the last recorded point before the failure
            k = finite[-1]
            ax.plot(t[k], risk[i, k], "x", color=FAIL_COLOR, ms=7, mew=1.5)
        elif np.isfinite(fail_t[i]):
            ax.axvline(fail_t[i], color=FAIL_COLOR, ls=":", lw=0.8)
    return labelled


def _draw_seed_mean(ax: Axes, t: np.ndarray, risk: np.ndarray) -> None:
    """The NaN-aware mean over seeds bold (``gid="risk-mean"``), with a ± 1 s.e. band when there
    are several seeds."""
    S = risk.shape[0]
    mean = nanmean(risk, axis=0)
    ax.plot(
        t,
        mean,
        color=SIM_COLOR,
        lw=2.2,
        label=f"risk R(M, Q, b), mean over {S} seeds" if S > 1 else "risk R(M, Q, b)",
        gid="risk-mean",
    )
    if S > 1:
        se = sem(risk, axis=0)
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


def _draw_test_risk(ax: Axes, pos: xr.Dataset, t: np.ndarray, S: int) -> None:
    """The held-out loss mean as dots with error bars: the seed-to-seed s.e. with ``S`` > 1
    seeds, the held-out s.e. (``test_risk_se``) with one. Nothing when it is all NaN."""
    test = np.asarray(pos.test_risk, dtype=float).reshape(-1, t.size)
    if not np.isfinite(test).any():
        return
    tmean = nanmean(test, axis=0)
    if S > 1:
        terr = sem(test, axis=0)
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


def _draw_theory(ax: Axes, theory: xr.Dataset) -> None:
    """The theory's mean risk over its seeds, bold (``gid="theory-mean"``)."""
    th = positive_t(theory)
    tt = np.asarray(th.t, dtype=float)
    tr = nanmean(np.asarray(th.risk, dtype=float).reshape(-1, tt.size), axis=0)
    ax.plot(tt, tr, color=THEORY_COLOR, lw=2.2, label="theory (D → ∞)", gid="theory-mean")


def _draw_reference_levels(
    ax: Axes, ds: xr.Dataset, theory: xr.Dataset | None
) -> tuple[float | None, float | None]:
    """The Bayes risk dashed (from ``ds``, else from ``theory``; not when missing or not finite)
    and the uniform-attention risk ½(1 − 1/L) dotted (when the config gives L).

    Returns ``(bayes_risk, uniform_risk)``, None for a level not drawn."""
    ref = None
    rb = ds.attrs.get("bayes_risk")
    if rb is None and theory is not None:
        rb = theory.attrs.get("bayes_risk")
    rb = None if rb is None or not np.isfinite(float(rb)) else float(rb)
    if rb is not None:
        ax.axhline(rb, color="k", ls="--", lw=1.2, label=f"Bayes risk R_B = {rb:.4g}")
    L = nested_get(result_config(ds), "task", "L")
    if L is not None:
        ref = 0.5 * (1.0 - 1.0 / float(L))
        ax.axhline(
            ref, color="0.4", ls=":", lw=1.4, label=f"uniform attention ½(1−1/L) = {ref:.4g}"
        )
    return rb, ref


def _clip_to_healthy(
    ax: Axes,
    pos: xr.Dataset,
    risk: np.ndarray,
    ok_rows: list[int],
    fail_rows: list[int],
    levels: tuple[float | None, float | None],
    labelled: Line2D,
) -> None:
    """Limit the y-axis to the healthy seeds, held-out loss, theory and reference ``levels`` when
    a diverged seed leaves that range, and say so in the ``labelled`` diverged line's label."""
    T = risk.shape[1]
    keep = [risk[ok_rows].ravel()]  # the mean may carry part of the blow-up: clip it too
    if "test_risk" in pos:
        keep.append(np.asarray(pos.test_risk, dtype=float).reshape(-1, T)[ok_rows])
    keep += [ln.get_ydata() for ln in ax.lines if ln.get_gid() == "theory-mean"]
    keep += [np.atleast_1d(v) for v in levels if v is not None]
    y = np.concatenate([np.asarray(k, dtype=float).ravel() for k in keep])
    y = y[np.isfinite(y)]
    bad = risk[fail_rows]
    bad = bad[np.isfinite(bad)]
    if y.size and bad.size:
        lo, hi = float(y.min()), float(y.max())
        pad = 0.06 * max(hi - lo, 1e-3)
        if bad.max() > hi + pad or bad.min() < lo - pad:
            ax.set_ylim(lo - pad, hi + pad)
            labelled.set_label(labelled.get_label() + ", y-axis clipped")
