"""Helpers shared by the figures: colours, titles, the seed index, log time axes, NaN-aware
mean and standard error, legends."""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import xarray as xr
from matplotlib.axes import Axes

from headspec.core.stats import mean_se

SIM_COLOR = "C0"
THEORY_COLOR = "C1"
TEST_COLOR = "C2"
FAIL_COLOR = "red"
T_LABEL = "training time t = samples / D"


# ----------------------------------------------------------------------------- config and titles
def result_config(ds: xr.Dataset) -> dict:
    try:
        return json.loads(ds.attrs.get("config_json", "{}"))
    except (TypeError, ValueError):
        return {}


def nested_get(d: dict, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def title_of(ds: xr.Dataset, what: str) -> str:
    """``what — simulation: softmax, H = 4, L = 10, D = 1000, discrete latent, 8 seeds``."""
    cfg = result_config(ds)
    kind = ds.attrs.get("kind", "result")
    parts = []
    act = nested_get(cfg, "model", "activation")
    if act is not None:
        parts.append(str(act))
    H = nested_get(cfg, "model", "H") or ds.sizes.get("head")
    if H is not None:
        parts.append(f"H = {H}")
    L = nested_get(cfg, "task", "L")
    if L is not None:
        parts.append(f"L = {L}")
    D = nested_get(cfg, "task", "D")
    if D is not None and kind != "theory":
        parts.append(f"D = {D}")
    latent = nested_get(cfg, "task", "latent", "kind")
    if latent is not None:
        parts.append(f"{latent} latent")
    if "seed" in ds.dims and kind != "theory":
        S = ds.sizes["seed"]
        parts.append(f"{S} seed{'s' if S != 1 else ''}")
    return f"{what} — {kind}: " + ", ".join(parts)


# ----------------------------------------------------------------------------- data
def positive_t(ds: xr.Dataset) -> xr.Dataset:
    """The dataset restricted to t > 0 (log axes)."""
    return ds.isel(t=np.flatnonzero(np.asarray(ds.t) > 0))


def nanmean(x: np.ndarray, axis=0) -> np.ndarray:
    """Mean over ``axis`` of the finite values (NaN where there are none)."""
    return mean_se(x, axis=axis)[0]


def sem(x: np.ndarray, axis=0) -> np.ndarray:
    """Standard error of the mean over ``axis`` of the finite values (NaN where < 2)."""
    return mean_se(x, axis=axis)[1]


def failed_seeds(ds: xr.Dataset) -> np.ndarray:
    if "failed" in ds:
        return np.asarray(ds.failed).astype(bool)
    return np.zeros(ds.sizes.get("seed", 1), dtype=bool)


def seed_index(ds: xr.Dataset, seed) -> int:
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


# ----------------------------------------------------------------------------- axes and colours
def log_x(ax: Axes, t: np.ndarray) -> None:
    if t.size and np.any(t > 0):
        ax.set_xscale("log")
    ax.set_xlabel(T_LABEL)


def head_colors(H: int) -> list:
    if H <= 10:
        return [f"C{h}" for h in range(H)]
    cmap = matplotlib.colormaps["viridis"]
    return [cmap(h / (H - 1)) for h in range(H)]


def legend_outside(ax: Axes, **kw):
    """Legend to the right of the axes, so it never covers curves."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kw)
