"""Sweep figures: the final risk of a collected sweep (mean over seeds ± s.e.) against its axes."""

from __future__ import annotations

import json

import numpy as np
import xarray as xr
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from headspec.apps.plots.common import nanmean, sem


def final_risk(ds: xr.Dataset) -> tuple[xr.DataArray, xr.DataArray]:
    """Mean over seeds of the risk at the last grid time, and its standard error (over the axes
    of a collected sweep). Diverged seeds (NaN at the end) are left out."""
    tdim = "t" if "t" in ds.risk.dims else "t_index"
    last = ds.risk.isel({tdim: -1})
    r = np.asarray(last)
    ax = last.dims.index("seed")
    dims = [d for d in last.dims if d != "seed"]
    coords = {d: ds[d] for d in dims}
    mean = xr.DataArray(nanmean(r, axis=ax), dims=dims, coords=coords)
    return mean, xr.DataArray(sem(r, axis=ax), dims=dims, coords=coords)


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
