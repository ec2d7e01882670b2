"""The map of arrangements (a collected sweep of kind "splitmap" with ``map.candidates =
"arrangements"``, issue 55): one panel per number of heads, one row per candidate arrangement
of that many heads (in the order of the candidates: fewest groups first), one column per other
setting (activation, η, amplitude …); each cell coloured by the arrangement's kind as a fixed
point and, where it is one, its risk and leading rate Re λ written in it. A minimum of the
active heads at which an idle head wakes (``idle_wakes``) has a colour of its own: it is no
resting point of the model. The lowest-risk stable minimum of each column is framed."""

from __future__ import annotations

import json

import numpy as np
import xarray as xr
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from headspec.conventions.splitmap import WOKEN, resting_kind

# an arrangement's kind → (code, colour, legend)
KINDS = {
    "minimum": (0, "#1f77b4", "stable minimum"),
    WOKEN: (1, "#aec7e8", "minimum of the active heads, an idle head wakes"),
    "marginal": (2, "#ffbf00", "marginal (|Re λ| ≤ 3 s.e.)"),
    "saddle": (3, "#ff9896", "saddle"),
    "no fixed point": (4, "#e0e0e0", "no fixed point found"),
    "": (5, "#ffffff", "not a candidate / not computed"),
}


def is_arrangement_map(ds: xr.Dataset) -> bool:
    """A collected splitmap sweep of arrangements (its spec's config or its points' configs say
    ``map.candidates = "arrangements"``)."""
    spec = json.loads(ds.attrs.get("spec_json", "{}"))
    if spec.get("config", {}).get("map.candidates") == "arrangements":
        return True
    for a in spec.get("axes", []):
        if a.get("key") == "map.candidates":
            return False  # mixed: the map of splits
    texts = [t for t in np.ravel(ds["config_json"].values) if t]
    return bool(texts) and json.loads(texts[0]).get("map", {}).get("candidates") == "arrangements"


def _column_label(ds: xr.Dataset, axes: list[str], idx: tuple[int, ...]) -> str:
    parts = []
    for a, i in zip(axes, idx, strict=True):
        key = ds[a].attrs.get("config_key", a)
        v = ds[a].values[i]
        parts.append(str(v) if key == "model.activation" else f"{key.split('.')[-1]}={v}")
    return "\n".join(parts)


def _candidate_order(one: xr.Dataset) -> dict[str, int]:
    """name → rank in :func:`~headspec.dynamics.arrangements.candidates`' order for the law and
    H of the panel's points (fewest groups first); {} where no point says."""
    from headspec.conventions.config.splitmap import SplitMapConfig
    from headspec.dynamics.arrangements import candidates

    texts = [t for t in np.ravel(one["config_json"].values) if t]
    if not texts:
        return {}
    cfg = SplitMapConfig.model_validate_json(texts[0])
    law = cfg.task.latent.build()
    names = [a.name for a in candidates(np.asarray(law.atoms), np.asarray(law.probs),
                                        cfg.model.H, idle=True)]  # fmt: skip
    return {n: i for i, n in enumerate(names)}


def plot_arrangement_map(ds: xr.Dataset) -> Figure:
    """See the module. Panels by ``model.H`` where it is swept (else one panel)."""
    axes = json.loads(ds.attrs["axes"])
    key = {a: ds[a].attrs.get("config_key", a) for a in axes}
    h_axis = next((a for a in axes if key[a] == "model.H"), None)
    cols = [a for a in axes if a != h_axis]
    panels = list(range(ds.sizes[h_axis])) if h_axis else [None]
    combos = list(np.ndindex(*[ds.sizes[a] for a in cols])) if cols else [()]
    rows_of = []
    for p in panels:
        one = ds if p is None else ds.isel({h_axis: p})
        kinds = one["kind"].transpose(*cols, "split").values.reshape(len(combos), -1)  # (C, S)
        keep = [k for k in range(one.sizes["split"]) if any(str(x) for x in kinds[:, k])]
        rank = _candidate_order(one)
        keep.sort(key=lambda k: rank.get(str(one.split.values[k]), len(rank)))
        rows_of.append((one, keep))
    heights = [max(len(keep), 1) for _, keep in rows_of]
    fig = Figure(figsize=(2.2 + 1.25 * len(combos), 1.6 + 0.3 * sum(heights)),
                 layout="constrained")  # fmt: skip
    axs = fig.subplots(len(panels), 1, squeeze=False, height_ratios=heights)[:, 0]
    cmap = ListedColormap([c for _, c, _ in KINDS.values()])
    for ax, p, (one, keep) in zip(axs, panels, rows_of, strict=True):
        t = [*cols, "split"]
        kind = one["kind"].transpose(*t).values.reshape(len(combos), -1)[:, keep]  # (C, R)
        if "idle_wakes" in one:  # points computed before wake() have none
            wakes = one["idle_wakes"].transpose(*t).values.reshape(len(combos), -1)[:, keep]
            kind = resting_kind(np.asarray(kind).astype(str), wakes)
        risk = one["risk"].transpose(*t).values.reshape(len(combos), -1)[:, keep]
        rate = one["lead_rate"].transpose(*t).values.reshape(len(combos), -1)[:, keep]
        code = np.vectorize(lambda k: KINDS.get(str(k), KINDS[""])[0])(kind).astype(float)
        C, R = code.shape
        ax.pcolormesh(np.arange(C + 1), np.arange(R + 1), code.T, cmap=cmap, vmin=-0.5,
                      vmax=len(KINDS) - 0.5, edgecolors="w", linewidth=1)  # fmt: skip
        for c in range(C):
            for r in range(R):
                if np.isfinite(risk[c, r]):
                    ax.text(c + 0.5, r + 0.5, f"R {risk[c, r]:.4f}  λ {rate[c, r]:+.1e}",
                            ha="center", va="center", fontsize="xx-small")  # fmt: skip
            minima = [r for r in range(R) if str(kind[c, r]) == "minimum"]
            if minima:
                best = min(minima, key=lambda r: risk[c, r])
                ax.add_patch(Rectangle((c, best), 1, 1, fill=False, lw=2, color="k"))
        ax.set_yticks(np.arange(R) + 0.5, [str(one.split.values[k]) for k in keep],
                      fontsize="x-small")  # fmt: skip
        ax.set_xticks(np.arange(C) + 0.5, [_column_label(ds, cols, i) for i in combos],
                      fontsize="x-small")  # fmt: skip
        ax.invert_yaxis()
        ax.set_title("all settings" if p is None else f"H = {ds[h_axis].values[p]} heads",
                     fontsize="small")  # fmt: skip
    handles = [Patch(color=c, label=t) for _, c, t in list(KINDS.values())[:5]]
    handles.append(Patch(fill=False, edgecolor="k", lw=2, label="lowest-risk minimum"))
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize="small")
    fig.suptitle("map of arrangements: each candidate as a fixed point of the ODE")
    return fig
