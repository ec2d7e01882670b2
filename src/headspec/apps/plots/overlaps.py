"""Overlap figures: head–feature cosine overlaps (one seed; simulation vs theory) and head–head
similarity."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from headspec.apps.plots.common import (
    failed_seeds,
    head_colors,
    legend_outside,
    log_x,
    positive_t,
    seed_index,
    title_of,
)


# ----------------------------------------------------------------------------- cosine overlaps
def plot_overlaps(ds: xr.Dataset, seed: int | None = None) -> Figure:
    """Cosine overlaps cos_hf = M_hf/√Q_hh of every head with every feature, for one seed.

    ``seed`` is a value of the ``seed`` coordinate (default: the first seed). One panel per
    feature f shows cos_hf vs t (log x, t = 0 dropped), one colour per head; a last panel is a
    heatmap of |cos_hf| (heads × features, values written in the cells) at the last time where the
    seed's overlaps are finite (the final time unless the seed diverged).
    """
    i = seed_index(ds, seed)
    one = ds.isel(seed=i)
    pos = positive_t(one)
    t = np.asarray(pos.t, dtype=float)
    cos = np.asarray(pos.cos, dtype=float).reshape(t.size, one.sizes["head"], one.sizes["feature"])
    H, F = cos.shape[1], cos.shape[2]
    colors = head_colors(H)
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
        log_x(ax, t)
        ax.set_ylabel(f"cos(k_h, k*_{f})")
        ax.set_title(f"feature {f}", fontsize="medium")
        ax.grid(True, alpha=0.3)
    ymin = np.nanmin(cos) if np.isfinite(cos).any() else -1.0
    for ax in axes[:F]:
        ax.set_ylim(min(-0.05, ymin - 0.05), 1.05)

    _draw_last_overlaps(fig, axes[F], t, cos)
    for extra in axes[F + 1 :]:
        extra.set_visible(False)

    if H <= 16:
        handles = [Line2D([], [], color=colors[h], lw=1.5, label=f"head {h}") for h in range(H)]
        fig.legend(handles=handles, loc="outside right upper", fontsize="small")
    failed = failed_seeds(ds)[i]
    note = " (diverged)" if failed else ""
    fig.suptitle(title_of(ds, f"cosine overlaps, seed {seed_id}{note}"), fontsize="medium")
    return fig


def _draw_last_overlaps(fig: Figure, ax: Axes, t: np.ndarray, cos: np.ndarray) -> None:
    """Heatmap of |cos| (heads × features) at the last time where ``cos`` (T, H, F) has a finite
    value, values written in the cells when there are at most 400; a note when none is finite."""
    H, F = cos.shape[1], cos.shape[2]
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


def plot_compare_overlaps(sim: xr.Dataset, theory: xr.Dataset) -> Figure:
    """Cosine overlaps of simulation (thin) and theory (bold) on one figure, one panel per feature.

    If the theory started from some of the simulation's seeds, the first such seed is shown for
    both (same initial state, same head identities); otherwise every simulated seed is drawn thin
    and the theory's first seed bold.
    """
    from headspec.conventions.comparison import align_time

    th = align_time(sim, theory)
    common = [s for s in th.seed.values if s in set(sim.seed.values)]
    sims = sim.sel(seed=[common[0]]) if common else sim
    th1 = th.sel(seed=common[0]) if common else th.isel(seed=0)
    pos = sim.t.values > 0
    t = sim.t.values[pos]
    H, F = sim.sizes["head"], sim.sizes["feature"]
    colors = head_colors(H)
    fig = Figure(figsize=(4.2 * F + 1.2, 3.6), layout="constrained")
    axes = fig.subplots(1, F, squeeze=False).ravel()
    for f in range(F):
        ax = axes[f]
        for h in range(H):
            for s in range(sims.sizes["seed"]):
                ax.plot(t, sims.cos.values[s, pos, h, f], color=colors[h], lw=0.7, alpha=0.5)
            ax.plot(t, th1.cos.values[pos, h, f], color=colors[h], lw=2.2)
        ax.axhline(0.0, color="0.6", lw=0.6)
        log_x(ax, t)
        ax.set_ylabel(f"cos(k_h, k*_{f})")
        ax.set_title(f"feature {f}", fontsize="medium")
        ax.grid(True, alpha=0.3)
    handles = [Line2D([], [], color=colors[h], lw=1.5, label=f"head {h}") for h in range(H)][:16]
    handles += [
        Line2D([], [], color="0.3", lw=0.7, alpha=0.6, label="simulation"),
        Line2D([], [], color="0.3", lw=2.2, label="theory (D → ∞)"),
    ]
    fig.legend(handles=handles, loc="outside right upper", fontsize="small")
    S = sims.sizes["seed"]
    which = f"seed {int(common[0])}" if common else f"{S} seed{'' if S == 1 else 's'}"
    fig.suptitle(
        title_of(sim, f"cosine overlaps, simulation vs theory ({which})\n"), fontsize="medium"
    )
    return fig


# ----------------------------------------------------------------------------- head similarity
def plot_head_similarity(ds: xr.Dataset, seed: int | None = None) -> Figure:
    """Normalised head–head overlaps Q_hh'/√(Q_hh Q_h'h') (h < h') vs t for one seed, log x.

    ``seed`` is a value of the ``seed`` coordinate (default: the first seed); t = 0 is dropped.
    Heads that start alike specialise when these drop. With a single head there are no pairs and
    the panel says so.
    """
    i = seed_index(ds, seed)
    one = ds.isel(seed=i)
    pos = positive_t(one)
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
            legend_outside(ax, fontsize="small")
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
    log_x(ax, t)
    ax.set_ylabel("Q_hh' / √(Q_hh Q_h'h')")
    ax.grid(True, alpha=0.3)
    note = " (diverged)" if failed_seeds(ds)[i] else ""
    ax.set_title(
        title_of(ds, f"head similarity, seed {seed_id}{note}") + "\nheads separate when these drop",
        fontsize="medium",
    )
    return fig
