"""The map of uneven splits (a collected sweep of kind "splitmap"): for each setting, the most
stable uneven split's kind (stable minimum: heads placed there stay; saddle: they leave), and the
even split's risk advantage beside it."""

from __future__ import annotations

import json

import numpy as np
import xarray as xr
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

# the most stable uneven split's kind → (code, colour, legend)
KINDS = {
    "minimum": (0, "#d62728", "uneven split is a stable minimum (heads stay)"),
    "marginal": (1, "#ffbf00", "marginal (|Re λ| ≤ 3 s.e.)"),
    "saddle": (2, "#2ca02c", "every uneven split is a saddle (heads leave)"),
    "none": (3, "#c7c7c7", "no uneven split is a fixed point"),
    "": (4, "#ffffff", "not computed"),
}
_PREFERRED_X = ("task.latent.scale",)
_PREFERRED_Y = ("map.lr",)


def _pick_axes(ds: xr.Dataset) -> tuple[str, str | None, list[str]]:
    """(x axis, y axis or None, the other axes): the amplitude along x and η along y where swept."""
    axes = json.loads(ds.attrs["axes"])
    key = {a: ds[a].attrs.get("config_key", a) for a in axes}
    x = next((a for a in axes if key[a] in _PREFERRED_X), axes[0])
    rest = [a for a in axes if a != x]
    y = next((a for a in rest if key[a] in _PREFERRED_Y), rest[0] if rest else None)
    return x, y, [a for a in rest if a != y]


def _labels(ds: xr.Dataset, name: str, amplitude: bool) -> list[str]:
    if amplitude:  # the amplitude |a| of each column, from the points (scale × |atom|)
        amp = ds["amplitude"].values
        others = tuple(i for i, d in enumerate(ds["amplitude"].dims) if d != name)
        col = np.nanmax(amp, axis=others) if others else amp
        return [f"{v:.3g}" for v in col]
    return [str(v) for v in ds[name].values]


def plot_split_map(ds: xr.Dataset, max_panels: int = 6) -> Figure:
    """One row per value of the axes other than x and y (at most ``max_panels``): left, the kind
    of the most stable uneven split in each cell (its name and leading rate Re λ written in the
    cell); right, the even split's risk advantage (best uneven fixed point's risk minus the
    balanced one's)."""
    x, y, others = _pick_axes(ds)
    combos = list(np.ndindex(*[ds.sizes[a] for a in others])) if others else [()]
    shown = combos[:max_panels]
    amp_x = ds[x].attrs.get("config_key") in _PREFERRED_X and "amplitude" in ds
    fig = Figure(figsize=(11.5, 1.2 + 2.9 * len(shown)), layout="constrained")
    axs = fig.subplots(len(shown), 2, squeeze=False)
    cmap = ListedColormap([c for _, c, _ in KINDS.values()])
    for row, idx in zip(axs, shown, strict=True):
        sel = {a: i for a, i in zip(others, idx, strict=True)}
        one = ds.isel(sel)
        dims = [x] + ([y] if y else [])
        kinds = one["uneven_kind"].transpose(*dims).values  # (nx[, ny])
        rate = one["uneven_rate"].transpose(*dims).values
        split = one["uneven_split"].transpose(*dims).values
        adv = one["risk_advantage"].transpose(*dims).values
        even = one["balanced_kind"].transpose(*dims).values
        if y is None:
            kinds, rate, split, adv, even = (v[:, None] for v in (kinds, rate, split, adv, even))
        code = np.vectorize(lambda k: KINDS.get(str(k), KINDS[""])[0])(kinds).astype(float)
        nx, ny = code.shape
        left, right = row
        left.pcolormesh(np.arange(nx + 1), np.arange(ny + 1), code.T, cmap=cmap, vmin=-0.5,
                        vmax=len(KINDS) - 0.5, edgecolors="w", linewidth=1)  # fmt: skip
        for i in range(nx):
            for j in range(ny):
                if np.isfinite(rate[i, j]):
                    left.text(i + 0.5, j + 0.5, f"{split[i, j]}\n{rate[i, j]:+.2g}", ha="center",
                              va="center", fontsize="x-small")  # fmt: skip
        lim = np.nanmax(np.abs(adv)) if np.isfinite(adv).any() else 1.0
        im = right.pcolormesh(np.arange(nx + 1), np.arange(ny + 1), adv.T, cmap="RdBu",
                              vmin=-lim, vmax=lim, edgecolors="w", linewidth=1)  # fmt: skip
        for i in range(nx):
            for j in range(ny):
                text = f"{adv[i, j]:+.2g}\n" if np.isfinite(adv[i, j]) else ""
                if even[i, j]:  # the balanced split's own kind under its gain
                    right.text(i + 0.5, j + 0.5, f"{text}even: {even[i, j]}", ha="center",
                               va="center", fontsize="x-small")  # fmt: skip
        fig.colorbar(im, ax=right, label="risk: best uneven − balanced")
        where = ", ".join(f"{a} = {ds[a].values[i]}" for a, i in sel.items())
        for ax, what in ((left, "most stable uneven split (Re λ)"), (right, "even split's gain")):
            ax.set_xticks(np.arange(nx) + 0.5, _labels(ds, x, amp_x))
            ax.set_xlabel("amplitude a" if amp_x else ds[x].attrs.get("config_key", x))
            if y is not None:
                ax.set_yticks(np.arange(ny) + 0.5, [str(v) for v in ds[y].values])
                key = ds[y].attrs.get("config_key", y)
                ax.set_ylabel("η (0: gradient flow)" if key == "map.lr" else key)
            else:
                ax.set_yticks([])
            ax.set_title(what + (f" — {where}" if where else ""), fontsize="small")
    handles = [Patch(color=c, label=t) for _, c, t in list(KINDS.values())[:4]]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize="small")
    more = f" (first {len(shown)} of {len(combos)} panels)" if len(shown) < len(combos) else ""
    fig.suptitle(f"map of uneven splits{more}")
    return fig
