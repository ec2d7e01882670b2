"""Collecting a sweep: its finished point files combined into one dataset (``OUT/sweep.nc``),
with the swept parameters as coordinates, and its figure (the final risk of a simulate or theory
sweep; the map of uneven splits of a splitmap sweep)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from headspec.apps.sweep.errors import SweepError
from headspec.apps.sweep.manifest import read_manifest

COLLECTED = "sweep.nc"
FIGURE = "sweep_final_risk.png"
MAP_FIGURE = "sweep_split_map.png"  # of a splitmap sweep
MAP_TABLE = "sweep_split_map.json"  # … and its table


def figure_name(kind: str) -> str:
    """The figure's file name of a sweep of ``kind``."""
    return MAP_FIGURE if kind == "splitmap" else FIGURE


def collect(folder: str | Path) -> Any:
    """Combine the finished points of a sweep folder into one xarray dataset.

    Dimensions: the axes (coordinates = swept values; tables as JSON strings), then the result
    dims (seed, t, head, …). Per point: ``status`` ("done", "diverged", "failed", "pending"),
    ``bayes_risk``, ``bayes_risk_se`` and ``config_json``. Missing points are NaN (text "").
    If the points' time grids differ (e.g. a sweep over D), ``t`` becomes a variable over
    (axes…, t_index). A splitmap sweep has no time: its points' dims are split, head, …, and
    settings with other numbers of heads are joined on the split names (NaN where a split does
    not exist). Raises :class:`SweepError` if no point is finished.
    """
    import xarray as xr

    from headspec.conventions.provenance import run_metadata

    folder = Path(folder)
    manifest = read_manifest(folder)
    spec = manifest["spec"]
    axes = spec["axes"]
    shape = tuple(len(a["values"]) for a in axes)
    names = [a["name"] for a in axes]
    chunks, status = _read_points(folder, manifest)
    if not chunks:
        raise SweepError(f"{folder}: no point is finished yet; fix: run the sweep first")
    n_points = int(np.prod(shape))
    per_point = {p: _join_seed_blocks(items) for p, items in chunks.items()}
    template = next(iter(per_point.values()))
    shared = "t" not in template.dims or _shared_grid(per_point)
    nested: Any = np.empty(shape, dtype=object)
    for p, index in enumerate(np.ndindex(*shape)):
        st = status.get(p, ["pending"])  # of the point's seed blocks
        nested[index] = _point_ds(per_point.get(p), st, template, shared, axes, index)
    assert p == n_points - 1
    fill = {k: "" if _is_text(v) else np.nan for k, v in template.data_vars.items()}
    fill |= {"status": "pending", "config_json": ""}
    combined = xr.combine_nested(
        nested.tolist(), concat_dim=names, join="outer", combine_attrs="drop", fill_value=fill
    )
    for a in axes:
        combined[a["name"]].attrs["config_key"] = a["key"]
    combined.attrs = {
        "kind": "sweep",
        "sweep_kind": spec["kind"],
        "spec_json": json.dumps(spec, sort_keys=True),
        "spec_hash": manifest["spec_hash"],
        "axes": json.dumps(names),
        "points": n_points,
        "points_finished": int(np.isin(combined["status"].values, ["done", "diverged"]).sum()),
        **run_metadata(),
    }
    return combined


def _shared_grid(per_point: dict) -> bool:
    """Every point has the same time grid."""
    grids = [ds.t.values for ds in per_point.values()]
    return all(g.shape == grids[0].shape and np.array_equal(g, grids[0]) for g in grids)


def _is_text(v) -> bool:
    return v.dtype.kind in "USO"


def _read_points(folder: Path, manifest: dict) -> tuple[dict[int, list], dict[int, list[str]]]:
    """Per grid point: its finished seed blocks as ``(first seed, dataset)``, and the statuses of
    all its seed blocks."""
    from headspec.conventions import results

    chunks: dict[int, list] = {}
    status: dict[int, list[str]] = {}
    for e in manifest["tasks"]:
        status.setdefault(e["point"], []).append(e["status"])
        if e["status"] in ("done", "diverged"):
            try:
                ds = results.load(folder / e["file"], kinds=results.TASK_KINDS)
            except results.ResultError as err:
                raise SweepError(
                    f"point file {e['file']} is unreadable ({err}); fix: re-run the sweep "
                    "(it recomputes corrupt points)"
                ) from None
            chunks.setdefault(e["point"], []).append((e["seed"], ds))
    return chunks, status


def _join_seed_blocks(items: list):
    """One point's seed blocks, concatenated along ``seed`` in seed order."""
    import xarray as xr

    items.sort(key=lambda x: x[0])
    if len(items) == 1:
        return items[0][1]
    return xr.concat(
        [d for _, d in items],
        dim="seed",
        data_vars="minimal",  # per-seed variables; `atoms` is shared
        coords="minimal",
        compat="override",
        join="exact",
        combine_attrs="override",  # attributes of the first block (its Bayes risk)
    )


def _point_ds(ds, st: list[str], template, shared: bool, axes: list[dict], index: tuple):
    """One grid point ready to combine: ``ds`` (None if nothing finished) with its status, NaN
    if some seed block is missing, and its swept values as length-1 dimensions."""
    full = [s for s in st if s in ("done", "diverged")]
    if ds is not None and len(full) == len(st):
        point_status = "diverged" if "diverged" in st else "done"
    else:  # missing or partly missing: NaN placeholder of the template's shape
        ds = ds if ds is not None else template
        ds = ds.copy(data={k: np.full(v.shape, "" if _is_text(v) else np.nan)
                           for k, v in ds.data_vars.items()})  # fmt: skip
        point_status = "failed" if "failed" in st else "pending"
    ds = _prune_point_attrs(ds.drop_encoding(), point_status)  # ints may become NaN
    if not shared:
        ds = ds.drop_indexes("t").rename_dims(t="t_index").reset_coords(["t", "step"])
    coords = {a["name"]: [_coord_value(a["values"][i])] for a, i in zip(axes, index, strict=True)}
    return ds.expand_dims(coords)


def _prune_point_attrs(ds, status: str):
    """Per-point attributes that vary become variables; the rest are dropped."""
    ds = ds.copy()
    ds["status"] = ((), status)
    ds["config_json"] = ((), ds.attrs.get("config_json", ""))
    for k in ("bayes_risk", "bayes_risk_se"):
        v = ds.attrs.get(k, np.nan)
        ds[k] = ((), float(v) if status in ("done", "diverged") else np.nan)
    ds.attrs = {}
    return ds


def _coord_value(v):
    """Swept values as coordinate labels: numbers and strings as they are, tables as JSON."""
    if isinstance(v, bool | int | float | str):
        return v
    return json.dumps(v, sort_keys=True)


def save_collected(ds, path: str | Path) -> Path:
    """Write the combined dataset atomically (netCDF, h5netcdf)."""
    from headspec.conventions.results import save

    return save(ds, path)


def save_table(ds, folder: str | Path) -> Path | None:
    """The table of a collected splitmap sweep as plain JSON (``folder/sweep_split_map.json``):
    per grid point its swept values, status, the setting's summary and every split's kind, risk
    and leading rate ± s.e. (null where not a number). None for other sweeps (their dataset is
    the table)."""
    from headspec.conventions.io import json_number as num
    from headspec.conventions.io import write_json_atomic

    if ds.attrs["sweep_kind"] != "splitmap":
        return None
    axes = json.loads(ds.attrs["axes"])

    points = []
    for index in np.ndindex(*[ds.sizes[a] for a in axes]):
        one = ds.isel(dict(zip(axes, index, strict=True)))
        row = {a: _coord_value(one[a].values.item()) for a in axes}
        row["status"] = str(one.status.values)
        row |= {k: str(one[k].values) for k in ("uneven_kind", "uneven_split", "balanced_kind")}
        row |= {k: num(one[k]) for k in ("uneven_rate", "uneven_rate_se", "balanced_risk",
                                         "risk_advantage", "amplitude", "eta")}  # fmt: skip
        if "best_minimum" in one:  # the stable minima (settings computed since issue 55)
            row |= {"best_minimum": str(one.best_minimum.values), "best_risk": num(one.best_risk),
                    "n_minima": num(one.n_minima)}  # fmt: skip
        row["splits"] = {
            str(s): {"kind": str(one.kind.sel(split=s).values),
                     **{k: num(one[k].sel(split=s)) for k in ("risk", "lead_rate", "lead_se")}}
            for s in one.split.values if str(one.kind.sel(split=s).values)
        }  # fmt: skip
        points.append(row)
    path = Path(folder) / MAP_TABLE
    write_json_atomic(path, {"kind": "splitmap sweep", "axes": axes, "points": points})
    return path


def save_figure(ds, folder: str | Path) -> Path:
    """The figure of a collected sweep: ``folder/sweep_final_risk.png`` (simulate, theory) or
    ``folder/sweep_split_map.png`` (splitmap: the map of uneven splits, or of arrangements)."""
    from headspec.apps.plots import plot_arrangement_map, plot_split_map, plot_sweep, write_figure
    from headspec.apps.plots.arrangements import is_arrangement_map

    kind = ds.attrs["sweep_kind"]
    path = Path(folder) / figure_name(kind)
    if kind != "splitmap":
        fig = plot_sweep(ds)
    else:
        fig = plot_arrangement_map(ds) if is_arrangement_map(ds) else plot_split_map(ds)
    write_figure(fig, path, dpi=120)
    return path
