"""The saddles figure: the risk curve with each fixed point's risk over its slow stretch, and each
fixed point's spectrum (unstable modes red, stable blue, symmetry zero modes grey)."""

from __future__ import annotations

import numpy as np
import xarray as xr
from matplotlib.figure import Figure

from headspec.apps.plots.common import SIM_COLOR, T_LABEL


def plot_saddles(sd: xr.Dataset, title: str = "") -> Figure:
    """Left: the analysed risk curve (log t), each slow stretch shaded and the risk of the fixed
    point polished there drawn over it. Right: the real parts of each fixed point's eigenvalues
    with ±2 s.e. bars."""
    fig = Figure(figsize=(10.0, 4.0), layout="constrained")
    ax, sp = fig.subplots(1, 2, width_ratios=(3, 2))
    t, r = sd.t.values, sd.traj_risk.values
    keep = t > 0
    ax.plot(t[keep], r[keep], color=SIM_COLOR, lw=1.8, label="trajectory")
    S = sd.sizes["saddle"]
    for i in range(S):
        s = sd.isel(saddle=i)
        t0, t1 = float(s.t_start), float(s.t_end)
        ax.axvspan(t0, t1, color=f"C{2 + i % 6}", alpha=0.12)
        ax.hlines(float(s.risk), t0, t1, color=f"C{2 + i % 6}", lw=2.5,
                  label=f"fixed point {i + 1}: R = {float(s.risk):.4f}")  # fmt: skip
        ax.plot([float(s.t_polish)], [float(s.level)], "k.", ms=5)
    ax.set_xscale("log")
    ax.set_xlabel(T_LABEL)
    ax.set_ylabel("risk (D → ∞)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    for i in range(S):
        s = sd.isel(saddle=i)
        ev, se, zero = s.eig_real.values, s.eig_se.values, s.mode_zero.values.astype(bool)
        ok = np.isfinite(ev)
        unstable = ok & ~zero & (ev > 3 * np.nan_to_num(se))
        x = i + 1 + np.linspace(-0.25, 0.25, ev.size)
        for mask, color, label in ((ok & zero, "0.6", "zero mode (symmetry)"),
                                   (ok & ~zero & ~unstable, "C0", "stable / marginal"),
                                   (unstable, "red", "unstable")):  # fmt: skip
            sp.errorbar(x[mask], ev[mask], yerr=2 * np.nan_to_num(se[mask]), fmt="o", ms=3,
                        color=color, label=label if i == 0 else None)  # fmt: skip
    sp.axhline(0.0, color="k", lw=0.8)
    sp.set_yscale("symlog", linthresh=1e-2)
    sp.set_xticks(range(1, S + 1))
    sp.set_xlabel("fixed point")
    sp.set_ylabel("Re λ (±2 s.e.)")
    sp.grid(True, alpha=0.3)
    if S:
        sp.legend(fontsize="small")
    fig.suptitle(title or "saddles of a trajectory", fontsize="medium")
    return fig
