"""Simulation against theory on two result files of the schema (:mod:`.results`): which seeds
and times to compare, and the largest deviation per quantity — what ``headspec compare`` prints.

This module reads the schema (dimensions ``seed``, ``t``; variables risk, M, Q, b, cos, failed;
coordinate ``step``; attribute ``init``); the numbers come from
:func:`headspec.dynamics.analysis.largest_deviation` and :func:`headspec.core.stats.mean_se`.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from headspec.core.stats import mean_se
from headspec.dynamics.analysis import largest_deviation

QUANTITIES = ("risk", "M", "Q", "b", "cos")  # compared; risk relative to the theory's


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

    NaN is never skipped silently: seeds marked failed (in either file) are left out of both
    means and named in ``excluded``; a time at which a mean is still NaN (the theory's grid ends
    earlier, every seed failed) counts in ``nan_points`` and the largest deviation is taken over
    the other times (NaN if none).

    Returns ``{quantity: {"max_dev", "t", "relative", "sim_se", "excluded", "nan_points"}}``
    (sim_se: standard error of the simulation's seed mean at that time, for risk; excluded:
    ``{"simulation": [seeds], "theory": [seeds]}``).
    """
    th = align_time(sim, theory)
    failed = {name: [int(s) for s, f in zip(d.seed.values, d.failed.values, strict=True) if f]
              for name, d in (("simulation", sim), ("theory", th))}  # fmt: skip
    drop = set(failed["simulation"]) | set(failed["theory"])
    common = [s for s in th.seed.values if s in set(sim.seed.values) and s not in drop]
    if common and th.attrs.get("init") == "simulation":
        sim_sel, th_sel = sim.sel(seed=common), th.sel(seed=common)
    else:
        sim_sel = sim.sel(seed=[s for s in sim.seed.values if s not in failed["simulation"]])
        th_sel = th.sel(seed=[s for s in th.seed.values if s not in failed["theory"]])
    t = sim.t.values
    window = np.ones(t.size, bool) if until is None else t <= until
    out = {}
    for q in QUANTITIES:
        a = sim_sel[q].mean("seed", skipna=False).values[window]  # (t, …)
        b = th_sel[q].mean("seed", skipna=False).values[window]  # (t, …)
        dev = largest_deviation(a, b, relative=q == "risk")  # (t,)
        notes = {"excluded": failed, "nan_points": int((~np.isfinite(dev)).sum())}
        if not np.isfinite(dev).any():
            out[q] = {"max_dev": float("nan"), "t": float("nan"), "relative": q == "risk", **notes}
            continue
        k = int(np.nanargmax(dev))
        entry = {"max_dev": float(dev[k]), "t": float(t[window][k]), "relative": q == "risk"}
        entry.update(notes)
        if q == "risk":
            r = sim_sel.risk.values[:, window][:, k]  # (seed,)
            se = float(mean_se(r)[1])
            entry["sim_se"] = se if np.isfinite(se) else 0.0
        out[q] = entry
    return out
