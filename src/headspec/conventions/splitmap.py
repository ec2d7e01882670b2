"""One setting of the map of uneven splits, from its config to a dataset (issue 27): every split
of H heads over the law's directions (or every arrangement, issue 55), found as a fixed point of
the ODE's drift and classified (:mod:`headspec.dynamics.splitmap`). A sweep of kind "splitmap"
(`headspec sweep run`) runs one setting per task and collects them into the map.

The setting's file (netCDF, ``kind = "splitmap"``) has dimensions ``split`` (labelled by name:
"4:0", "3:1", "2:2"; the most concentrated first), ``direction``, ``side`` (+1, −1: the two
sides of a saddle's leading mode), ``head``, ``head2`` and ``feature``.

- Per split: ``n_heads`` (split, direction: heads per direction), ``found``, ``balanced`` (1
  for the most even split), ``kind`` (text: minimum, saddle, marginal, no fixed point),
  ``risk``, ``lead_rate``, ``lead_se`` (the leading non-zero eigenvalue's real part and its
  standard error), ``n_unstable``, ``n_marginal``, ``mode`` (the leading mode in words),
  ``guess_scale`` and the fixed point ``M``, ``Q``, ``b`` (NaN where none).
- Per split and side, from a saddle with ``map.excursions`` (NaN and "" elsewhere): where the
  ODE goes from the fixed point nudged along the mode — ``exc_end_split``, ``exc_t_change``
  (first time the split differs), ``exc_start_risk``, ``exc_max_risk`` (the bump),
  ``exc_end_risk`` and ``exc_T`` (the horizon).
- Scalars that summarise the setting (the map's colour): ``amplitude`` (|first direction|),
  ``eta`` (0: gradient flow), ``uneven_kind`` and ``uneven_split`` (the most stable uneven split,
  :func:`~headspec.dynamics.splitmap.most_stable_uneven`; "none" where no uneven split is a
  fixed point), ``uneven_rate``, ``uneven_rate_se``, ``balanced_kind`` and ``balanced_risk``
  (the balanced split's; "none" where it is no fixed point), ``risk_advantage`` (the best
  uneven fixed point's risk minus the balanced one's: > 0 where the even split is better).

With ``map.candidates = "arrangements"`` the points are the arrangements of
:mod:`headspec.dynamics.arrangements` instead (``split`` labelled by their names, "2(+e1)
1(−e1) +1 idle"): ``direction`` runs over the pool of candidate directions (scaled to the atoms'
norm), ``n_heads`` counts each arrangement's heads per pool direction, ``idle`` its idle heads
(0 for splits), the fixed point holds its active heads first (idle heads NaN), and no point is
``balanced`` (so ``uneven_*`` name the most stable arrangement). Where an arrangement has idle
heads and a fixed point: ``idle_wakes`` (1 where an idle head would switch back on there, 0 where
it stays idle; −1 elsewhere), ``wake_rate`` ± ``wake_se`` and ``wake_key``
(:func:`headspec.dynamics.arrangements.wake`); a minimum whose idle head wakes is not counted
in ``n_minima`` and ``best_minimum``. For both: ``n_minima`` (stable
minima found), ``best_minimum`` and ``best_risk`` (the lowest-risk one; "" and NaN where none).

Attributes: ``config_json``, ``elapsed_s`` (compute seconds) and the provenance of
:func:`~headspec.conventions.provenance.run_metadata`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np
import xarray as xr

from headspec.conventions import build
from headspec.conventions.provenance import run_metadata
from headspec.conventions.results import COMPUTE_SECONDS
from headspec.core.precision import float64
from headspec.dynamics.arrangements import Arrangement, Wake, arrangement_map, pool, with_heads
from headspec.dynamics.splitmap import (
    Excursion,
    SplitPoint,
    classify_splits,
    excursion,
    is_balanced,
    most_stable,
    pool_index,
)

KIND = "splitmap"


@float64
def classify_setting(cfg, progress: Callable[[int, int], None] | None = None) -> xr.Dataset:
    """Every split (or arrangement, ``map.candidates``) of the config's setting, classified (see
    the module); ``progress(done, total)`` after each."""
    t0 = time.perf_counter()
    problem, directions = build.split_map_problem(cfg)
    o = cfg.map
    kw = {"scales": tuple(o.scales), "min_cos": o.min_cos, "margin": o.margin}
    arrangements = wakes = None
    if o.candidates == "arrangements":
        found = arrangement_map(problem, cfg.model.H, idle=o.idle, max_groups=o.max_groups,
                                only=o.only, progress=progress, **kw)  # fmt: skip
        points = [a.point for a in found]
        arrangements = [a.arrangement for a in found]
        wakes = [a.wake for a in found]
        directions = np.linalg.norm(directions[0]) * pool(directions.shape[1])  # (P, F)
    else:
        points = classify_splits(problem, directions, cfg.model.H, progress, **kw)
    trips = {}
    if o.excursions:
        for k, p in enumerate(points):
            if p.found and p.kind == "saddle":
                q = with_heads(problem, len(p.state.b))  # an arrangement's active heads
                trips[k] = excursion(q, p, directions, min_cos=o.min_cos, margin=o.margin)
    ds = to_dataset(points, directions, cfg, trips, arrangements=arrangements, wakes=wakes)
    ds.attrs[COMPUTE_SECONDS] = time.perf_counter() - t0
    return ds


def to_dataset(
    points: list[SplitPoint],
    directions: np.ndarray,
    cfg,
    excursions: dict[int, list[Excursion]] | None = None,
    *,
    arrangements: list[Arrangement] | None = None,
    wakes: list[Wake | None] | None = None,
) -> xr.Dataset:
    """The setting's dataset (see the module) from its classified splits (or, with
    ``arrangements``, the arrangement of each point, ``directions`` then the pool, and ``wakes``:
    whether its idle heads stay idle) and the excursions from some of them (index of the split →
    both sides)."""
    H, J = cfg.model.H, len(directions)
    F = directions.shape[1]
    S = len(points)
    nan = np.nan
    M = np.full((S, H, F), nan)  # (split, head, feature)
    Q = np.full((S, H, H), nan)  # (split, head, head2)
    b = np.full((S, H), nan)  # (split, head)
    sizes = np.zeros((S, J), np.int64)  # (split, direction)
    idle = np.zeros(S, np.int64)  # (split,)
    for k, p in enumerate(points):
        if arrangements is None:
            sizes[k, : len(p.sizes)] = p.sizes
        else:
            a = arrangements[k]
            own = pool_index(directions, a.directions)  # (G,)
            sizes[k] = np.bincount(own, weights=a.sizes, minlength=J).astype(np.int64)
            idle[k] = a.idle
        if p.state is not None:  # an arrangement's active heads first, idle ones NaN
            h = len(p.state.b)
            M[k, :h], Q[k, :h, :h], b[k, :h] = (np.asarray(x) for x in p.state)
    balanced = [arrangements is None and is_balanced(p.sizes, J) for p in points]
    wakes = wakes or [None] * S
    woken = [w is not None and w.wakes for w in wakes]
    per = {
        "found": [int(p.found) for p in points],
        "balanced": [int(x) for x in balanced],
        "idle": idle,
        "kind": [p.kind for p in points],
        "risk": [p.risk for p in points],
        "lead_rate": [p.lead_rate for p in points],
        "lead_se": [p.lead_se for p in points],
        "n_unstable": [p.n_unstable for p in points],
        "n_marginal": [p.n_marginal for p in points],
        "mode": [p.mode for p in points],
        "guess_scale": [p.scale for p in points],
        "idle_wakes": [-1 if w is None else int(w.wakes) for w in wakes],
        "wake_rate": [np.nan if w is None else w.rate for w in wakes],
        "wake_se": [np.nan if w is None else w.se for w in wakes],
        "wake_key": ["" if w is None else w.key for w in wakes],
    }
    data = {k: ("split", np.asarray(v)) for k, v in per.items()}
    data |= {
        "n_heads": (("split", "direction"), sizes),
        "M": (("split", "head", "feature"), M),
        "Q": (("split", "head", "head2"), Q),
        "b": (("split", "head"), b),
    }
    data |= _excursion_variables(len(points), excursions or {})
    data |= {k: ((), v) for k, v in summary(points, balanced, woken).items()}
    data["amplitude"] = ((), float(np.linalg.norm(directions[0])))
    data["eta"] = ((), float(cfg.map.lr))
    coords = {"split": [p.split for p in points], "direction": np.arange(J), "side": [1, -1],
              "head": np.arange(H), "head2": np.arange(H), "feature": np.arange(F)}  # fmt: skip
    attrs = {"kind": KIND, "config_json": cfg.model_dump_json(), **run_metadata()}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _excursion_variables(S: int, trips: dict[int, list[Excursion]]) -> dict:
    """(split, side) variables of the excursions: NaN and "" where none was run."""
    num = {f: np.full((S, 2), np.nan) for f in ("t_change", "start_risk", "max_risk", "end_risk",
                                                "T")}  # fmt: skip
    end = np.full((S, 2), "", dtype=object)
    for k, sides in trips.items():
        for i, e in enumerate(sides):
            for f in num:
                num[f][k, i] = getattr(e, f)
            end[k, i] = e.end_split + (" (solver failed)" if e.failed else "")
    out = {f"exc_{f}": (("split", "side"), v) for f, v in num.items()}
    out["exc_end_split"] = (("split", "side"), end.astype(str))
    return out


WOKEN = "minimum, an idle head wakes"  # a minimum of the active heads that is no resting point


def resting_kind(kind, idle_wakes):
    """The kind of a fixed point as a resting point: ``WOKEN`` for a minimum of the active heads
    at which an idle head wakes (``idle_wakes`` == 1; -1 or 0: none wakes), else ``kind``.
    Elementwise over arrays; only ``"minimum"`` is a stable arrangement.

    >>> resting_kind(np.array(["minimum", "minimum", "saddle"]), np.array([1, 0, 1])).tolist()
    ['minimum, an idle head wakes', 'minimum', 'saddle']
    """
    return np.where((np.asarray(kind) == "minimum") & (np.asarray(idle_wakes) == 1), WOKEN, kind)


def summary(points: list[SplitPoint], balanced: list[bool], woken: list[bool] | None = None):
    """The setting's scalars (see the module): the most stable uneven split (every point not
    ``balanced``: for arrangements, every one), the balanced one's risk, the even split's
    advantage, and the stable minima (how many; the lowest risk and its split) — a minimum of
    the active heads where an idle head wakes (``woken``) is none."""
    woken = woken or [False] * len(points)
    uneven = [p for p, even in zip(points, balanced, strict=True) if not even]
    worst = most_stable(uneven)
    even = min((p for p, e in zip(points, balanced, strict=True) if p.found and e),
               key=lambda p: p.risk, default=None)  # fmt: skip
    even_risk = np.nan if even is None else even.risk
    minima = [p for p, w in zip(points, woken, strict=True)
              if p.found and p.kind == "minimum" and not w]  # fmt: skip
    best = min(minima, key=lambda p: p.risk, default=None)
    return {
        "uneven_kind": "none" if worst is None else worst.kind,
        "uneven_split": "" if worst is None else worst.split,
        "uneven_rate": np.nan if worst is None else worst.lead_rate,
        "uneven_rate_se": np.nan if worst is None else worst.lead_se,
        "balanced_kind": "none" if even is None else even.kind,
        "balanced_risk": even_risk,
        "risk_advantage": min((p.risk for p in uneven if p.found), default=np.nan) - even_risk,
        "n_minima": len(minima),
        "best_minimum": "" if best is None else best.split,
        "best_risk": np.nan if best is None else best.risk,
    }


def to_json(ds: xr.Dataset) -> dict:
    """The setting's table as plain JSON (one entry per split, the summary, the config)."""
    from headspec.conventions.io import json_number as num

    splits = []
    for k, name in enumerate(ds.split.values):
        row = ds.isel(split=k)
        splits.append({
            "split": str(name),
            "n_heads": [int(v) for v in row.n_heads.values],
            "idle": int(row.idle) if "idle" in row else 0,
            "found": bool(row.found), "balanced": bool(row.balanced), "kind": str(row.kind.values),
            "risk": num(row.risk), "lead_rate": num(row.lead_rate), "lead_se": num(row.lead_se),
            "n_unstable": int(row.n_unstable), "n_marginal": int(row.n_marginal),
            "mode": str(row["mode"].values),
        })  # fmt: skip
    scalars = ("amplitude", "eta", "uneven_rate", "uneven_rate_se", "balanced_risk",
               "risk_advantage")  # fmt: skip
    return {
        "kind": KIND,
        "summary": {
            "uneven_kind": str(ds.uneven_kind.values),
            "uneven_split": str(ds.uneven_split.values),
            "balanced_kind": str(ds.balanced_kind.values),
            **{k: num(ds[k]) for k in scalars},
            **(
                {
                    "n_minima": int(ds.n_minima),
                    "best_minimum": str(ds.best_minimum.values),
                    "best_risk": num(ds.best_risk),
                }
                if "n_minima" in ds
                else {}
            ),
        },
        "splits": splits,
        "config": json.loads(ds.attrs["config_json"]),
        "elapsed_s": ds.attrs.get(COMPUTE_SECONDS),
    }


# ----------------------------------------------------------------------------- confirmation
def prepared_run(
    cfg,
    state,
    D: int,
    T: float,
    seeds: int,
    seed: int = 0,
    engine: str = "reduced",
    points: int = 40,
    n_mc: int = 512,
    noise: float = 0.1,
):
    """The :class:`~headspec.conventions.config.SimulateConfig` of SGD started at a split's fixed
    point ``state`` (M, Q, b) of the setting ``cfg`` (a SplitMapConfig): the same law, L, heads,
    activation and η = η_b = map.lr, at dimension ``D`` for time ``T``, ``seeds`` seeds, each
    key plus ``noise``·N(0, I_D) (``init`` of kind "given"; default 0.1, the random start's key
    scale: without it the identical heads of a group would stay identical under SGD, whatever
    the split's stability). Gradient flow (map.lr = 0) has no SGD to simulate: refused."""
    from headspec.conventions.config import SimulateConfig

    if cfg.map.lr == 0:
        raise ValueError(
            "map.lr = 0 is gradient flow, which SGD at a finite learning rate does not follow; "
            "fix: confirm the map at a setting with map.lr > 0"
        )
    M, Q, b = (np.asarray(x, np.float64).tolist() for x in state)
    data = {
        "task": cfg.task.model_dump() | {"D": int(D)},
        "model": cfg.model.model_dump(),
        "train": {"T": float(T), "lr": cfg.map.lr, "engine": engine, "dtype": "float32"},
        "record": {"points": points, "n_mc": n_mc, "t_min": min(1.0, T / 10)},
        "init": {"kind": "given", "M": M, "Q": Q, "b": b, "noise": float(noise)},
        "seed": seed,
        "seeds": seeds,
    }
    return SimulateConfig.model_validate(data)


def rearrangement(sim: xr.Dataset, directions: np.ndarray, min_cos: float = 0.5,
                  margin: float = 0.1) -> dict:  # fmt: skip
    """Which seeds of a prepared run left the split they started in: per seed the start and end
    split (:func:`~headspec.dynamics.splits.split_name` over every direction, labels as the map's)
    and the first recorded time at which the split differs from the start (NaN: never); the
    fraction that left with its binomial standard error (0 of n: the 95 % upper bound 3/n in
    ``upper95``), and the end splits of those that left, counted."""
    from headspec.dynamics.splits import head_labels, split_name

    dirs = np.asarray(directions, np.float64)
    lab = head_labels(sim.M.values, sim.Q.values, dirs, min_cos=min_cos, margin=margin)  # (S,T,H)
    t = sim.t.values
    names = [[split_name(lab[s, k], J=len(dirs)) for k in range(t.size)] for s in range(len(lab))]
    start = [n[0] for n in names]
    left = [n[-1] != n[0] for n in names]
    t_left = [next((float(t[k]) for k in range(t.size) if n[k] != n[0]), np.nan) for n in names]
    S = len(names)
    k = int(sum(left))
    p = k / S
    ends: dict[str, int] = {}
    for n, gone in zip(names, left, strict=True):
        if gone:
            ends[n[-1]] = ends.get(n[-1], 0) + 1
    return {
        "seeds": S,
        "left": k,
        "fraction": p,
        "se": float(np.sqrt(p * (1 - p) / S)),
        "upper95": 3.0 / S if k == 0 else None,
        "start": sorted(set(start)),
        "end_splits": ends,
        "t_left": t_left,
        "end_risk": [float(r) for r in sim.risk.isel(t=-1).values],
    }
