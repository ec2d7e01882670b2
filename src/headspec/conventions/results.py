"""One result schema for simulation and theory (SPEC §8), saved as netCDF (h5netcdf).

Dimensions: ``seed``, ``t`` (the shared time grid), ``head``, ``feature``, ``head2`` (a second head
axis for Q) and ``atom`` (discrete laws). Variables:

| variable | dims | meaning |
|---|---|---|
| risk, risk_se | seed, t | D → ∞ risk R(M, Q, b) of the current order parameters, MC s.e. |
| risk_by_atom | seed, t, atom | the same given θ = a_j |
| test_risk, test_risk_se | seed, t | exact finite-D loss on a fixed held-out batch |
| test_risk_by_atom | seed, t, atom | held-out loss split by the atom of θ |
| M | seed, t, head, feature | head–feature overlaps k_h·k*_f/D |
| Q | seed, t, head, head2 | head–head overlaps k_h·k_h'/D |
| b | seed, t, head | biases |
| cos | seed, t, head, feature | cosine overlaps M_hf/√Q_hh |
| failed, fail_step, fail_t | seed | divergence marks (NaN after fail_t) |

Attributes: ``schema_version``, ``kind`` ("simulation" | "theory"), ``config_json`` (the resolved
config), ``seed``, ``headspec_version``, ``git_revision``, plus per-kind extras.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xarray as xr

from headspec.conventions.io import write_atomic
from headspec.conventions.provenance import run_metadata

SCHEMA_VERSION = 1
KINDS = ("simulation", "theory")


class ResultError(ValueError):
    """A file is not a headspec result of a readable schema."""


def from_observations(
    *, kind, t, steps, seeds, obs, fail_step, fail_t, config, extra_attrs=None, atoms=None
) -> xr.Dataset:
    """Assemble the dataset from stacked observations (arrays of shape (seed, t, …))."""
    H = obs.M.shape[2]
    F = obs.M.shape[3]
    failed = fail_step >= 0
    after = failed[:, None] & (np.asarray(t)[None, :] > np.nan_to_num(fail_t, nan=np.inf)[:, None])

    def mask(x):
        x = np.asarray(x, dtype=np.float64).copy()
        x[after] = np.nan
        return x

    Q = mask(obs.Q)
    diag = np.sqrt(np.einsum("sthh->sth", Q))  # (S, T, H)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = mask(obs.M) / diag[..., None]
    data = {
        "risk": (("seed", "t"), mask(obs.risk)),
        "risk_se": (("seed", "t"), mask(obs.risk_se)),
        "risk_by_atom": (("seed", "t", "atom"), mask(obs.risk_by_atom)),
        "test_risk": (("seed", "t"), mask(obs.test_risk)),
        "test_risk_se": (("seed", "t"), mask(obs.test_risk_se)),
        "test_risk_by_atom": (("seed", "t", "atom"), mask(obs.test_risk_by_atom)),
        "M": (("seed", "t", "head", "feature"), mask(obs.M)),
        "Q": (("seed", "t", "head", "head2"), Q),
        "b": (("seed", "t", "head"), mask(obs.b)),
        "cos": (("seed", "t", "head", "feature"), cos),
        "failed": (("seed",), failed.astype(np.int8)),
        "fail_step": (("seed",), np.asarray(fail_step, dtype=np.int64)),
        "fail_t": (("seed",), np.asarray(fail_t, dtype=np.float64)),
    }
    coords = {
        "seed": np.asarray(seeds, dtype=np.int64),
        "t": np.asarray(t, dtype=np.float64),
        "step": ("t", np.asarray(steps, dtype=np.int64)),
        "head": np.arange(H),
        "head2": np.arange(H),
        "feature": np.arange(F),
    }
    J = obs.risk_by_atom.shape[-1]
    coords["atom"] = np.arange(J)
    if atoms is not None:
        data["atoms"] = (("atom", "feature"), np.asarray(atoms, dtype=np.float64))
    attrs = {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "config_json": config.model_dump_json(),
        "seed": int(config.seed),
        "lr": float(config.train.lr),
        **run_metadata(),
        **(extra_attrs or {}),
    }
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    ds["t"].attrs["long_name"] = "training time t = samples / D"
    ds["risk"].attrs["long_name"] = "D → ∞ risk of the current (M, Q, b)"
    ds["test_risk"].attrs["long_name"] = "exact finite-D loss on a held-out batch"
    return ds


def config_of(ds: xr.Dataset) -> dict:
    """The resolved config a result was produced with, as a dict."""
    return json.loads(ds.attrs["config_json"])


def save(ds: xr.Dataset, path: str | Path) -> Path:
    """Write netCDF (h5netcdf) atomically: a crash leaves the old file or the whole new one."""
    return write_atomic(
        path, lambda tmp: ds.to_netcdf(tmp, engine="h5netcdf", invalid_netcdf=False)
    )


def load(path: str | Path) -> xr.Dataset:
    """Read a result and check its schema; raises :class:`ResultError` with the reason."""
    path = Path(path)
    if path.is_dir():
        raise ResultError(f"{str(path)!r} is a folder, not a result file; fix: give the .nc file")
    if not path.is_file():
        raise ResultError(f"result file {str(path)!r} does not exist; fix: check the path")
    try:
        ds = xr.load_dataset(path, engine="h5netcdf")
    except Exception as e:  # corrupt or not netCDF
        raise ResultError(
            f"{path} is not a readable netCDF result ({type(e).__name__}: {e}); fix: give a file "
            "written by headspec simulate or theory"
        ) from None
    version = ds.attrs.get("schema_version")
    if version is None or ds.attrs.get("kind") not in KINDS:
        raise ResultError(
            f"{path} is not a headspec result (no schema_version/kind attributes); fix: give a "
            f"file written by headspec simulate or theory"
        )
    if int(version) != SCHEMA_VERSION:
        raise ResultError(
            f"{path} has result schema {int(version)}, this headspec reads schema "
            f"{SCHEMA_VERSION}; fix: re-run it with this version, or use the headspec that made it"
        )
    return ds


def simulation_states(path, seeds, H: int, F: int):
    """The exact initial (M, Q, b) of chosen seeds of a simulation result, as a
    :class:`~headspec.dynamics.initial.Given` initial state of the ODE."""
    from headspec.dynamics.initial import Given

    ds = load(path)
    if ds.attrs["kind"] != "simulation":
        raise ValueError(f"{path} is a {ds.attrs['kind']} result; fix: give a simulation result")
    if ds.sizes["head"] != H or ds.sizes["feature"] != F:
        raise ValueError(
            f"{path} has H = {ds.sizes['head']}, F = {ds.sizes['feature']} but the theory config "
            f"has H = {H}, F = {F}; fix: use the simulation's model and latent law"
        )
    available = [int(s) for s in ds.seed.values]
    chosen = available if seeds is None else list(seeds)
    missing = [s for s in chosen if s not in available]
    if missing:
        raise ValueError(f"seed {missing[0]} is not in {path}; fix: use one of {available}")
    sel = ds.sel(seed=chosen).isel(t=0)
    M, Q, b = (np.asarray(sel[v].values, np.float64) for v in ("M", "Q", "b"))
    return Given(M, Q, b, ids=np.asarray(chosen))
