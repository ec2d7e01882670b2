"""Analysis of results: comparing theory with simulation (more to come: phases, specialisation).

Example:
    >>> import numpy as np, xarray as xr
    >>> # two datasets of the result schema on the same grid: see headspec.results
"""

from __future__ import annotations

import numpy as np
import xarray as xr


def align_time(sim: xr.Dataset, theory: xr.Dataset) -> xr.Dataset:
    """The theory on the simulation's time grid (itself when the grids agree; else linear
    interpolation in t, NaN outside the theory's range)."""
    if sim.sizes["t"] == theory.sizes["t"] and np.allclose(sim.t, theory.t, rtol=1e-9, atol=0):
        return theory.assign_coords(t=sim.t.values, step=("t", sim.step.values))
    return theory.drop_vars("step").interp(t=sim.t.values)


def compare(sim: xr.Dataset, theory: xr.Dataset, until: float | None = None) -> dict:
    """Largest deviation between a simulation and a theory result, per quantity.

    When the theory started from the simulation's own seeds (``--init-from``), both are averaged
    over those seeds; otherwise each is averaged over all its seeds. Heads are compared by index
    (the same initial state gives the same identities). Risk deviations are relative to the
    theory; M, Q, b and cos are absolute. ``until`` limits the window to t ≤ until.

    Returns ``{quantity: {"max_dev", "t", "relative", "sim_se"}}`` (sim_se: standard error of the
    simulation's seed mean at that time, for risk).
    """
    th = align_time(sim, theory)
    common = [s for s in th.seed.values if s in set(sim.seed.values)]
    if common and th.attrs.get("init") == "simulation":
        sim_sel, th_sel = sim.sel(seed=common), th.sel(seed=common)
    else:
        sim_sel, th_sel = sim, th
    t = sim.t.values
    window = np.ones(t.size, bool) if until is None else t <= until
    out = {}
    for q in ("risk", "M", "Q", "b", "cos"):
        a = sim_sel[q].mean("seed").values[window]
        b = th_sel[q].mean("seed").values[window]
        if q == "risk":
            dev = np.abs(a - b) / np.abs(b)
        else:
            dev = np.abs(a - b).reshape(a.shape[0], -1).max(axis=1)
        if not np.isfinite(dev).any():
            out[q] = {"max_dev": float("nan"), "t": float("nan"), "relative": q == "risk"}
            continue
        k = int(np.nanargmax(dev))
        entry = {"max_dev": float(dev[k]), "t": float(t[window][k]), "relative": q == "risk"}
        if q == "risk":
            r = sim_sel.risk.values[:, window][:, k]
            entry["sim_se"] = float(np.nanstd(r, ddof=1) / np.sqrt(r.size)) if r.size > 1 else 0.0
        out[q] = entry
    return out
