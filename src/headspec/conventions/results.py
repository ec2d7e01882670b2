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
config), ``seed``, ``bayes_risk``, ``bayes_risk_se``, ``headspec_version``, ``git_revision``, plus
per-kind extras. Coordinates: ``seed``, ``t``, ``step`` (on t), ``head``, ``head2``, ``feature``,
``atom``; ``atoms`` (atom, feature) for discrete laws.

This module owns the schema: :func:`load` checks every file it reads with :func:`validate` —
the variables, dimensions, coordinates and attributes above, and that ``config_json`` is JSON
that validates as the config of its kind (SimulateConfig, TheoryConfig) with the file's H and F —
and refuses anything else with one :class:`ResultError` line naming the file, what is wrong and
the fix; then that its numbers mean something (:mod:`headspec.conventions.meaning`: finite M, Q,
b in seeds not marked failed, Q − MMᵀ positive semi-definite, ``step`` = t·D/B).
:func:`validate` also knows the other netCDF files headspec writes, so that giving one
where a result is expected is named as such: ``kind = "saddles"`` (headspec.conventions.saddles),
``kind = "splitmap"`` (a setting of the map of uneven splits, headspec.conventions.splitmap:
checked for its variables, text fields and config) and ``kind = "sweep"`` (a collected sweep,
headspec.apps.sweep.collect, of a simulate, theory or splitmap sweep).

:func:`dynamics_differences` lists the settings in which two results' configs differ that decide
their dynamics (compared by `headspec compare` and `plot --theory`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xarray as xr

from headspec.conventions.config.domain import recorded
from headspec.conventions.io import write_atomic
from headspec.conventions.provenance import run_metadata
from headspec.conventions.timing import COMPUTE_CPU_SECONDS as COMPUTE_CPU_SECONDS  # re-exported
from headspec.conventions.timing import COMPUTE_SECONDS as COMPUTE_SECONDS
from headspec.conventions.timing import stamp_compute as stamp_compute

SCHEMA_VERSION = 1
RUN_KINDS = ("simulation", "theory")  # the results of simulate and theory (this schema)
# what a sweep task or a recipe's run writes: a run's result, or a setting of the map of uneven
# splits (conventions.splitmap)
TASK_KINDS = (*RUN_KINDS, "splitmap")
KINDS = RUN_KINDS
_DESCRIBED = {
    "simulation": "a simulation result (headspec simulate)",
    "theory": "a theory result (headspec theory)",
    "saddles": "a saddles file (headspec saddles)",
    "sweep": "a collected sweep (headspec sweep)",
    "splitmap": "a setting of the map of uneven splits (a sweep of kind splitmap)",
}
_FIX = {
    "simulation": "give a file written by headspec simulate",
    "theory": "give a file written by headspec theory",
    "saddles": "give a file written by headspec saddles",
    "sweep": "give the sweep.nc written by headspec sweep (or headspec sweep collect)",
    "splitmap": "give a point file of a sweep of kind splitmap",
}

# required variables of each kind → their dimensions
_RUN_VARIABLES = {
    "risk": ("seed", "t"),
    "risk_se": ("seed", "t"),
    "risk_by_atom": ("seed", "t", "atom"),
    "test_risk": ("seed", "t"),
    "test_risk_se": ("seed", "t"),
    "test_risk_by_atom": ("seed", "t", "atom"),
    "M": ("seed", "t", "head", "feature"),
    "Q": ("seed", "t", "head", "head2"),
    "b": ("seed", "t", "head"),
    "cos": ("seed", "t", "head", "feature"),
    "failed": ("seed",),
    "fail_step": ("seed",),
    "fail_t": ("seed",),
}
_RUN_COORDS = {
    "seed": ("seed",),
    "t": ("t",),
    "step": ("t",),
    "head": ("head",),
    "head2": ("head2",),
    "feature": ("feature",),
    "atom": ("atom",),
}
_RUN_ATTRS = ("schema_version", "kind", "config_json", "seed", "bayes_risk", "bayes_risk_se")
_SADDLES_VARIABLES = {
    **{v: ("saddle",) for v in ("t_start", "t_end", "t_polish", "level", "risk", "max_z")},
    **{v: ("saddle",) for v in ("n_unstable", "n_zero", "lead_rate", "lead_se", "escape_time")},
    "group": ("saddle", "head"),
    "M": ("saddle", "head", "feature"),
    "Q": ("saddle", "head", "head2"),
    "b": ("saddle", "head"),
    "eig_real": ("saddle", "mode"),
    "eig_se": ("saddle", "mode"),
    "mode_features": ("saddle", "mode", "feature"),
    "traj_risk": ("t",),
}
_SADDLES_ATTRS = ("kind", "D", "seed", "source_kind", "config_json")
_SWEEP_ATTRS = ("kind", "sweep_kind", "spec_json", "axes", "points", "points_finished")
_SWEEP_VARIABLES = ("status", "config_json", "bayes_risk", "risk", "M", "Q", "b")  # + axes dims
_SPLITMAP_VARIABLES = {  # conventions.splitmap: one setting of the map of uneven splits
    **{v: ("split",) for v in ("found", "balanced", "risk", "lead_rate", "lead_se")},
    **{v: ("split",) for v in ("n_unstable", "n_marginal")},
    "n_heads": ("split", "direction"),
    "M": ("split", "head", "feature"),
    "Q": ("split", "head", "head2"),
    "b": ("split", "head"),
    **{v: () for v in ("amplitude", "eta", "uneven_rate", "balanced_risk", "risk_advantage")},
}
_SPLITMAP_TEXT = {"kind": ("split",), "mode": ("split",), "uneven_kind": (), "balanced_kind": ()}
_SPLITMAP_ATTRS = ("kind", "config_json")
_SPLITMAP_SWEEP_VARIABLES = ("status", "config_json", "kind", "risk", "lead_rate", "uneven_kind")


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
    """The resolved config a result (a saddle file: its source run) was produced with, as a dict
    (:func:`~headspec.conventions.config.domain.recorded`)."""
    kind = ds.attrs.get("source_kind", ds.attrs.get("kind"))
    return recorded(json.loads(ds.attrs["config_json"]), kind)


def save(ds: xr.Dataset, path: str | Path) -> Path:
    """Write netCDF (h5netcdf) atomically: a crash leaves the old file or the whole new one."""
    size = ds.nbytes + (64 << 10) * (len(ds.variables) + 1)  # data + HDF5 headers, generously
    return write_atomic(path, lambda tmp: ds.to_netcdf(tmp, engine="h5netcdf"), size=size)


def load(path: str | Path, kinds: tuple[str, ...] = RUN_KINDS) -> xr.Dataset:
    """Read a headspec netCDF file of one of ``kinds`` and check its schema (:func:`validate`);
    raises :class:`ResultError` with one line naming the file, the reason and the fix."""
    path = Path(path)
    if path.is_dir():
        raise ResultError(f"{str(path)!r} is a folder, not a result file; fix: give the .nc file")
    if not path.is_file():
        raise ResultError(f"result file {str(path)!r} does not exist; fix: check the path")
    try:
        ds = xr.load_dataset(path, engine="h5netcdf")
    except Exception as e:  # corrupt or not netCDF
        raise ResultError(
            f"{path} is not a readable netCDF result ({type(e).__name__}: {_one_line(e)}); fix: "
            "give a file written by headspec simulate or theory"
        ) from None
    validate(ds, str(path), kinds)
    return ds


def validate(ds: xr.Dataset, where: str = "the dataset", kinds=tuple(_DESCRIBED)) -> None:
    """Check a dataset against the schema of its ``kind`` (one of ``kinds``); raises
    :class:`ResultError` naming ``where``, what is missing or wrong, and the fix."""
    kind = ds.attrs.get("kind")
    wanted = " or ".join(k for k in kinds)
    if (
        not isinstance(kind, str)
        or kind not in _DESCRIBED
        or (kind in RUN_KINDS and "schema_version" not in ds.attrs)
    ):
        raise ResultError(
            f"{where} is not a headspec result (no schema_version/kind attributes); fix: give a "
            f"file written by headspec {'simulate or theory' if kinds == RUN_KINDS else wanted}"
        )
    if kind not in kinds:
        want = " or ".join(_DESCRIBED[k].split(" (")[0] for k in kinds)
        raise ResultError(
            f"{where} is {_DESCRIBED[kind]}, not {want}; fix: "
            + ("give a file written by headspec simulate or theory"
               if kinds == RUN_KINDS else _FIX[kinds[0]])
        )  # fmt: skip
    if kind in RUN_KINDS:
        try:
            version = int(ds.attrs["schema_version"])
        except (TypeError, ValueError):
            version = None
        if version != SCHEMA_VERSION:
            raise ResultError(
                f"{where} has result schema {ds.attrs['schema_version']}, this headspec reads "
                f"schema {SCHEMA_VERSION}; fix: re-run it with this version, or use the headspec "
                "that made it"
            )
    problem = _schema_problem(ds, kind)
    if problem is not None:
        raise ResultError(
            f"{where} is not a complete {_DESCRIBED[kind].split(' (')[0][2:]}: {problem}; fix: "
            f"{_FIX[kind]} (a file cut short or edited by hand must be written again)"
        )
    if kind in RUN_KINDS:
        from headspec.conventions.meaning import meaning_problem

        problem = meaning_problem(ds)
        if problem is not None:
            raise ResultError(
                f"{where} holds numbers no run can produce: {problem}; fix: write it again with "
                f"headspec {'simulate' if kind == 'simulation' else 'theory'} (a file edited by "
                "hand, or written by a run that did not check its states, cannot be used)"
            )


def _schema_problem(ds: xr.Dataset, kind: str) -> str | None:
    """What is missing or wrong in a dataset of ``kind``, or None."""
    if kind in RUN_KINDS:
        need = {**_RUN_VARIABLES, **_RUN_COORDS}
        attrs = _RUN_ATTRS
    elif kind == "saddles":
        need, attrs = _SADDLES_VARIABLES, _SADDLES_ATTRS
    elif kind == "splitmap":
        need, attrs = _SPLITMAP_VARIABLES, _SPLITMAP_ATTRS
    else:
        need, attrs = {}, _SWEEP_ATTRS
    for a in attrs:
        if a not in ds.attrs:
            return f"attribute {a!r} is missing"
    for name, dims in need.items():
        if name not in ds.variables:
            return f"variable {name!r} is missing"
        if ds[name].dims != dims:
            return f"variable {name!r} has dimensions {ds[name].dims}, not {dims}"
        if not np.issubdtype(ds[name].dtype, np.number):
            return f"variable {name!r} is not numeric ({ds[name].dtype})"
    if kind == "sweep":
        return _sweep_problem(ds)
    if kind == "splitmap":
        return _splitmap_problem(ds)
    for d in ("head", "feature") + (("seed", "t") if kind in RUN_KINDS else ()):
        if ds.sizes[d] < 1:
            return f"dimension {d!r} is empty"
    if ds.sizes["head2"] != ds.sizes["head"]:
        return f"head2 has {ds.sizes['head2']} entries but head has {ds.sizes['head']}"
    t = np.asarray(ds["t"].values, dtype=float)
    if not (np.isfinite(t).all() and (np.diff(t) > 0).all()):
        return "the time coordinate t is not finite and increasing"
    source = kind if kind in RUN_KINDS else ds.attrs["source_kind"]
    return _config_problem(ds.attrs["config_json"], source, ds.sizes["head"], ds.sizes["feature"])


def _sweep_problem(ds: xr.Dataset) -> str | None:
    """What is wrong in a collected sweep beyond its attributes, or None."""
    try:
        axes = json.loads(ds.attrs["axes"])
        json.loads(ds.attrs["spec_json"])
    except (TypeError, ValueError) as e:
        return f"its axes/spec_json attributes are not JSON ({_one_line(e)})"
    if not (isinstance(axes, list) and axes and all(isinstance(a, str) for a in axes)):
        return "its axes attribute is not a list of axis names"
    kinds = {"simulate": "simulation", "theory": "theory", "splitmap": "splitmap"}
    kind = kinds.get(ds.attrs["sweep_kind"])
    if kind is None:
        return f"sweep_kind {ds.attrs['sweep_kind']!r} is not one of {', '.join(kinds)}"
    for name in _SPLITMAP_SWEEP_VARIABLES if kind == "splitmap" else _SWEEP_VARIABLES:
        if name not in ds.variables:
            return f"variable {name!r} is missing"
        if tuple(ds[name].dims[: len(axes)]) != tuple(axes):
            return f"variable {name!r} does not start with the axes {tuple(axes)}"
    for status, text in zip(ds["status"].values.ravel(), ds["config_json"].values.ravel(),
                            strict=True):  # fmt: skip
        if str(status) in ("done", "diverged"):
            problem = _config_problem(text, kind)
            if problem is not None:
                return f"a finished point's {problem}"
    return None


def _splitmap_problem(ds: xr.Dataset) -> str | None:
    """What is wrong in a split map's setting beyond its numeric variables, or None."""
    for name, dims in _SPLITMAP_TEXT.items():
        if name not in ds.variables:
            return f"variable {name!r} is missing"
        if ds[name].dims != dims:
            return f"variable {name!r} has dimensions {ds[name].dims}, not {dims}"
    if ds.sizes["head2"] != ds.sizes["head"]:
        return f"head2 has {ds.sizes['head2']} entries but head has {ds.sizes['head']}"
    return _config_problem(ds.attrs["config_json"], "splitmap", ds.sizes["head"],
                           ds.sizes["feature"])  # fmt: skip


def _config_problem(text, kind: str, H: int | None = None, F: int | None = None) -> str | None:
    """What is wrong with a recorded ``config_json`` of a ``kind`` run, or None."""
    from pydantic import ValidationError

    from headspec.conventions.config import SimulateConfig, TheoryConfig, format_validation_error
    from headspec.conventions.config.splitmap import SplitMapConfig

    models = {"theory": TheoryConfig, "splitmap": SplitMapConfig}
    model = models.get(kind, SimulateConfig)
    try:
        raw = json.loads(text)
    except (TypeError, ValueError) as e:
        return f"config_json is not JSON ({_one_line(e)})"
    if not isinstance(raw, dict):
        return "config_json is not a JSON object (a config table)"
    try:
        cfg = model.model_validate(recorded(raw, kind))
    except ValidationError as e:
        first = format_validation_error(e, model).splitlines()[0].split("; fix:")[0]
        return f"config_json is not a valid {model.__name__} ({first})"
    if H is not None and cfg.model.H != H:
        heads = f"{H} head" + ("" if H == 1 else "s")
        return f"config_json has model.H = {cfg.model.H} but the file has {heads}"
    if F is not None and cfg.task.latent.F != F:
        return f"config_json has F = {cfg.task.latent.F} latent features but the file has {F}"
    return None


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def dynamics_differences(a, b) -> list[str]:
    """The settings that decide the dynamics in which two run configs (SimulateConfig or
    TheoryConfig) differ, as ``"key: a vs b"`` lines; empty if they match.

    Compared: task.L and task.latent (law, parameters, scale), model.H, model.activation,
    model.aggregation and model.b0 (defaults resolved), model.sigma0, train.lr, train.lr_b (= lr
    unless given) and train.schedule. Free to differ: task.D (a simulation's finite D against
    the theory's D → ∞, where D only sets the perturbed initial state), task.frame, train.T,
    train.batch (the ODE does not depend on it), train.dtype/engine, record.*, seeds and theory.*.
    """
    from headspec.core.attention import default_bias, get_activation

    def settings(c) -> dict:
        m, tr = c.model, c.train
        return {
            "task.L": c.task.L,
            "task.latent": c.task.latent.model_dump(mode="json"),
            "model.H": m.H,
            "model.activation": m.activation,
            "model.aggregation": get_activation(m.activation, m.aggregation).aggregation,
            "model.sigma0": m.sigma0,
            "model.b0": default_bias(m.activation, m.H, c.task.L) if m.b0 is None else m.b0,
            "train.lr": tr.lr,
            "train.lr_b": tr.lr if tr.lr_b is None else tr.lr_b,
            "train.schedule": tr.schedule.model_dump(mode="json"),
        }

    sa, sb = settings(a), settings(b)
    return [f"{k}: {_short(sa[k])} vs {_short(sb[k])}" for k in sa if not _same(sa[k], sb[k])]


def _same(x, y) -> bool:
    if isinstance(x, float | int) and isinstance(y, float | int):
        return bool(np.isclose(x, y, rtol=1e-12, atol=0))
    return x == y


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    text = json.dumps(v, ensure_ascii=False) if isinstance(v, dict | list) else repr(v)
    return text if len(text) <= 80 else text[:77] + "…"


TRIVIAL_RISK = 0.5  # ŷ = 0, also the best constant predictor, as D → ∞ (SPEC §4)


def final_risk_alarms(ds: xr.Dataset) -> tuple[list[str], list[str]]:
    """What a command must say about the final estimates of a result it wrote:
    ``(warnings, errors)``, each a list of one-line messages.

    Errors (the command exits 3): a NaN final risk of a seed not marked as diverged (a marked
    one is reported as a divergence), a NaN Bayes risk. Warnings: seeds whose final risk is
    above the trivial predictors' by more than 3 s.e. — ŷ = 0, which is also the best constant
    predictor, has risk ½ as D → ∞ — so the run learned worse than nothing.
    """
    warnings, errors = [], []
    seeds = [int(s) for s in ds.seed.values]
    failed = np.asarray(ds.failed.values, dtype=bool)
    last = ds.isel(t=-1)
    r, se = np.asarray(last.risk.values, float), np.asarray(last.risk_se.values, float)
    nan = [s for s, f, x in zip(seeds, failed, r, strict=True) if not f and not np.isfinite(x)]
    if nan:
        errors.append(
            f"the final risk of seed(s) {nan} is NaN, though no divergence was detected "
            "(non-finite numbers in the estimate); fix: check the latent law's size "
            "(task.latent.scale, its atoms or means) and lower train.lr"
        )
    rb = ds.attrs.get("bayes_risk")
    if rb is not None and not np.isfinite(float(rb)):
        errors.append(
            "the Bayes risk R_B is NaN (non-finite numbers in its Monte-Carlo estimate), likely "
            "a latent law too large for float64; fix: use moderate atoms, means or "
            "task.latent.scale"
        )
    bad = np.isfinite(r) & (r - 3 * np.nan_to_num(se) > TRIVIAL_RISK)
    if bad.any():
        which = [s for s, b in zip(seeds, bad, strict=True) if b]
        ends = ", ".join(f"{x:.4g}" for x in r[bad])
        r0 = np.asarray(ds.risk.isel(t=0).values, float)[bad]
        lr = ds.attrs.get("lr", "?")
        lr = f"{lr:g}" if isinstance(lr, float | int | np.floating) else lr
        if np.all(r[bad] > r0):  # worse than at the start: the steps themselves do harm
            why = f"it rose during training, so the learning rate (train.lr = {lr}) is likely "
            why += "too large; fix: lower train.lr"
        else:
            why = "fix: train longer (train.T) or check the learning rate (train.lr = "
            why += f"{lr}) and the model"
        warnings.append(
            f"seed(s) {which} end at risk {ends}, worse than predicting ŷ = 0 (risk "
            f"{TRIVIAL_RISK}, the best constant predictor): this run learned nothing useful; " + why
        )
    return warnings, errors


def simulation_states(path, seeds, H: int, F: int):
    """The exact initial (M, Q, b) of chosen seeds of a simulation result, as a
    :class:`~headspec.dynamics.initial.Given` initial state of the ODE."""
    from headspec.dynamics.initial import Given

    ds = load(path, kinds=("simulation",))
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
