"""Saddles of a run (`headspec saddles`): from a result or a config to a table, netCDF and JSON.

:func:`find_saddles` takes one seed of a simulation or theory result, builds the objects its
config describes and calls :func:`headspec.dynamics.saddles.saddle_chain`;
:func:`to_dataset` and :func:`to_json` write what it found.

The saddle file (netCDF, ``kind = "saddles"``) has dimensions ``saddle``, ``head``, ``head2``,
``feature``, ``mode`` (the Jacobian's modes on symmetric coordinates, largest real part first)
and ``t`` (the analysed trajectory). Variables: the slow stretch (t_start, t_end, t_polish,
level), the fixed point (M, Q, b, group, risk, drift_before, drift_after, max_z, converged,
distance), its spectrum (eig_real, eig_imag, eig_se, mode_common, mode_zero, mode_features),
summaries (n_unstable, n_zero, lead_rate, lead_se, escape_time at the run's D) and the
trajectory (traj_risk on t). Attributes: D, seed, eta2, group_cos, n, source, config_json and
the provenance of :func:`headspec.conventions.provenance.run_metadata`.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import xarray as xr

from headspec.conventions import build
from headspec.conventions.io import json_number
from headspec.conventions.provenance import run_metadata
from headspec.conventions.runs import config_model
from headspec.core.precision import float64
from headspec.dynamics.problem import OrderParameters
from headspec.dynamics.saddles import Saddle, describe_mode, saddle_chain


@float64
def find_saddles(
    ds: xr.Dataset,
    seed_index: int = 0,
    n: int = 2048,
    eta2: bool = True,
    group_cos: float = 0.98,
    progress: Callable[[int, int], None] | None = None,
    method: str = "exact",
) -> list[Saddle]:
    """The saddles along one seed of a result, at the run's learning rates and schedule.

    ``method``: "exact" (the η-linear drift, its fixed points and Jacobian from the exact risk;
    the η² term, if kept, on ``n`` samples) or "qmc" (everything on ``n`` scrambled-Sobol base
    samples, exact over a discrete law's atoms), drawn with the result's ``theory.sample_seed``
    (0 for a simulation).
    """
    cfg = config_model(ds)
    law = cfg.task.latent.build()
    seed = cfg.theory.sample_seed if hasattr(cfg, "theory") else 0
    problem = build.analysis_problem(cfg, law, ds.sizes["head"], n, method, eta2, sample_seed=seed)
    one = ds.isel(seed=seed_index)
    states = OrderParameters(*(one[v].values for v in ("M", "Q", "b")))
    return saddle_chain(
        one.t.values,
        one.risk.values,
        states,
        problem,
        build.schedule(cfg.train.schedule),
        group_cos=group_cos,
        progress=progress,
    )


def to_dataset(saddles: list[Saddle], ds: xr.Dataset, seed_index: int, **attrs) -> xr.Dataset:
    """The saddles of one seed of ``ds`` as a dataset (schema in the module docstring)."""
    H, F = ds.sizes["head"], ds.sizes["feature"]
    D = int(config_model(ds).task.D)
    S = len(saddles)
    P = H * F + H * (H + 1) // 2 + H
    eig = np.full((S, P), np.nan, complex)
    eig_se = np.full((S, P), np.nan)
    common = np.full((S, P), np.nan)
    zero = np.zeros((S, P), bool)
    feats = np.full((S, P, F), np.nan)
    group = np.zeros((S, H), int)
    for i, s in enumerate(saddles):
        for k, m in enumerate(s.modes):
            eig[i, k], eig_se[i, k], common[i, k] = m.eigenvalue, m.se, m.common
            zero[i, k], feats[i, k] = m.zero, m.feature_weights
        for g, heads in enumerate(s.groups):
            group[i, list(heads)] = g

    def col(f, dtype=float):
        return ("saddle", np.array([f(s) for s in saddles], dtype))

    lead = [s.unstable[0] if s.unstable else None for s in saddles]
    one = ds.isel(seed=seed_index)
    data = {
        "t_start": col(lambda s: s.t_start),
        "t_end": col(lambda s: s.t_end),
        "t_polish": col(lambda s: s.t_polish),
        "level": col(lambda s: s.level),
        "risk": col(lambda s: s.risk),
        "drift_before": col(lambda s: s.drift_before),
        "drift_after": col(lambda s: s.drift_after),
        "max_z": col(lambda s: s.max_z),
        "converged": col(lambda s: s.converged, np.int8),
        "distance": col(lambda s: s.distance),
        "n_unstable": col(lambda s: len(s.unstable), int),
        "n_zero": col(lambda s: s.n_zero, int),
        "lead_rate": ("saddle", np.array([m.eigenvalue.real if m else np.nan for m in lead])),
        "lead_se": ("saddle", np.array([m.se if m else np.nan for m in lead])),
        "escape_time": col(lambda s: s.escape_time(D)),
        "group": (("saddle", "head"), group),
        "M": (("saddle", "head", "feature"), _stack([s.state.M for s in saddles], (0, H, F))),
        "Q": (("saddle", "head", "head2"), _stack([s.state.Q for s in saddles], (0, H, H))),
        "b": (("saddle", "head"), _stack([s.state.b for s in saddles], (0, H))),
        "eig_real": (("saddle", "mode"), eig.real),
        "eig_imag": (("saddle", "mode"), eig.imag),
        "eig_se": (("saddle", "mode"), eig_se),
        "mode_common": (("saddle", "mode"), common),
        "mode_zero": (("saddle", "mode"), zero.astype(np.int8)),
        "mode_features": (("saddle", "mode", "feature"), feats),
        "traj_risk": ("t", one.risk.values),
    }
    out = xr.Dataset(data, coords={"t": one.t.values})
    out.attrs.update(
        kind="saddles",
        D=D,
        seed=int(one.seed),
        source_kind=ds.attrs.get("kind", ""),
        config_json=ds.attrs["config_json"],
        **{k: (int(v) if isinstance(v, bool) else v) for k, v in attrs.items()},
        **run_metadata(),
    )
    return out


def _stack(xs, empty_shape):
    return np.stack([np.asarray(x, float) for x in xs]) if xs else np.zeros(empty_shape)


def to_json(saddles: list[Saddle], sd: xr.Dataset) -> dict:
    """A JSON-ready summary: settings, provenance and one entry per saddle with its modes."""
    H, F = sd.sizes["head"], sd.sizes["feature"]
    D = int(sd.attrs["D"])
    rows = []
    for s in saddles:
        rows.append({
            "t_start": s.t_start, "t_end": s.t_end, "t_polish": s.t_polish,
            "plateau_risk": s.level, "fixed_point_risk": s.risk,
            "drift_before": s.drift_before, "drift_after": s.drift_after, "max_z": s.max_z,
            "is_fixed": s.is_fixed, "converged": s.converged, "distance": s.distance,
            "groups": [list(g) for g in s.groups],
            "M": np.asarray(s.state.M).tolist(), "Q": np.asarray(s.state.Q).tolist(),
            "b": np.asarray(s.state.b).tolist(),
            "n_unstable": len(s.unstable), "n_zero": s.n_zero,
            "escape_time": json_number(s.escape_time(D)),
            "modes": [
                {"eigenvalue": [m.eigenvalue.real, m.eigenvalue.imag], "se": json_number(m.se),
                 "quadrature_err": json_number(m.err), "zero": m.zero, "common": m.common,
                 "feature_weights": np.asarray(m.feature_weights).tolist(),
                 "description": describe_mode(m, H, F)}
                for m in s.modes
            ],
        })  # fmt: skip
    keys = ("kind", "D", "seed", "eta2", "group_cos", "n", "source")
    return {
        "command": "saddles",
        **{k: sd.attrs[k] for k in keys if k in sd.attrs},
        "config": json.loads(sd.attrs["config_json"]),
        "metadata": run_metadata(),
        "saddles": rows,
    }
