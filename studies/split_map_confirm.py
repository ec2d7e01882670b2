"""The map of uneven splits confirmed by simulation (issue 27): SGD started at a fixed point.

The map (a sweep of kind "splitmap", ``experiments/sweep_split_map.toml``: softmax, H = 4,
L = 10, the flipped spike ±a) says, for each amplitude a and learning rate η, whether each split
of the heads is a stable minimum, a saddle or marginal. Here the reduced engine (exact SGD at
D = 2000, float32) starts 32 seeds at the map's fixed point of a split (``init`` of kind
"given": every seed at the same overlaps, differing by its SGD noise only) and records which
seeds leave the split by the horizon T, and where they go. The prediction:

- saddle → seeds leave (fraction > 0), at t ≈ ln(D)/(2λ) + O(1/λ), to the split the ODE's
  excursion reaches (3:1 → 2:2; 4:0 → 3:1 where 3:1 is stable);
- stable minimum → no seed leaves by T (0 of 32: the 95 % upper bound is 3/32 ≈ 0.09);
- marginal (|Re λ| within 3 s.e. of 0, or slow modes within their error) → undecided by the
  map; the run says what finite η and D do there.

The points are E6's η = 2 on both sides of the two boundaries the map finds (3:1 between a = 1.5
and 2; 4:0 between 3 and 4). T: 1500, or 2.5·ln(D)/(2λ) for a slower saddle (at most 3000).

Then the 3:1 boundary is located by bisection in a (``--bisect``: the sign change of 3:1's
leading rate between a = 1.5 and 2 at η = 2, to 1/16) and confirmed by SGD on both sides
(``--straddle k``: k = 0 the last probe that is a saddle by the rule, k = 1 the first past the
sign change; 32 seeds each as above, T = 3000).

Run from the repository root (two halves in parallel on 2 cores, then the report):

    nice -n 5 .venv/bin/python studies/split_map_confirm.py --part 0/2 &
    nice -n 5 .venv/bin/python studies/split_map_confirm.py --part 1/2; wait
    nice -n 5 .venv/bin/python studies/split_map_confirm.py --bisect
    nice -n 5 .venv/bin/python studies/split_map_confirm.py --straddle 0 &
    nice -n 5 .venv/bin/python studies/split_map_confirm.py --straddle 1; wait
    nice -n 5 .venv/bin/python studies/split_map_confirm.py --random 0 &
    nice -n 5 .venv/bin/python studies/split_map_confirm.py --random 1; wait
    .venv/bin/python studies/split_map_confirm.py --report

Inputs: the collected map ``studies/out/split_map_e6.nc`` (a copy of the sweep's sweep.nc).
``--random k``: 32 seeds from the natural random start at a = 1.5 (every uneven split a saddle)
and a = 3 (3:1 a stable minimum): the split each seed first settles in and the split at T.
Outputs: ``studies/out/split_map_confirm_<k>.json`` per part (``_straddle<k>`` at the
boundary), ``split_map_random_<k>.json``, ``split_map_confirm.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).parent / "out"
MAP = OUT / "split_map_e6.nc"
D, SEEDS, ETA = 2000, 32, 2.0
# (a, split): both sides of the 3:1 boundary (1.5 | 2.0) and of the 4:0 boundary (3.0 | 4.0)
POINTS = [(1.5, "3:1"), (2.0, "3:1"), (2.5, "3:1"), (3.0, "3:1"),
          (1.5, "4:0"), (2.5, "4:0"), (3.0, "4:0"), (4.0, "4:0")]  # fmt: skip


def horizon(kind: str, rate: float) -> float:
    if kind == "saddle" and rate > 0:
        return float(np.clip(2.5 * np.log(D) / (2 * rate), 1500.0, 3000.0))
    return 1500.0


def run_part(part: int, parts: int) -> None:
    import xarray as xr

    from headspec.conventions.config import SplitMapConfig
    from headspec.conventions.runs import simulate
    from headspec.conventions.splitmap import prepared_run, rearrangement

    ds = xr.load_dataset(MAP, engine="h5netcdf")
    rows = []
    for i, (a, split) in enumerate(POINTS):
        if i % parts != part:
            continue
        cell = ds.sel(scale=a, lr=ETA, split=split)
        cfg = SplitMapConfig.model_validate_json(str(cell.config_json.values))
        state = (cell.M.values, cell.Q.values, cell.b.values)
        kind, rate, se = str(cell.kind.values), float(cell.lead_rate), float(cell.lead_se)
        T = horizon(kind, rate)
        sim_cfg = prepared_run(cfg, state, D, T, SEEDS, seed=1000 * i)
        t0 = time.time()
        sim = simulate(sim_cfg)
        dirs = np.asarray(cfg.task.latent.build().atoms)
        r = rearrangement(sim, dirs, cfg.map.min_cos, cfg.map.margin)
        rows.append({"a": a, "eta": ETA, "split": split, "map_kind": kind, "rate": rate,
                     "rate_se": se, "risk": float(cell.risk), "D": D, "T": T,
                     "wall_s": time.time() - t0, **r})  # fmt: skip
        print(json.dumps({k: v for k, v in rows[-1].items() if k not in ("t_left", "end_risk")}),
              flush=True)  # fmt: skip
        (OUT / f"split_map_confirm_{part}.json").write_text(json.dumps(rows, indent=1))


def bisect() -> None:
    """The 3:1 boundary at η = 2 between a = 1.5 and 2 (the map's grid step), to 1/16."""
    import xarray as xr

    from headspec.conventions import build
    from headspec.conventions.config import SplitMapConfig
    from headspec.dynamics.splitmap import locate_boundary

    ds = xr.load_dataset(MAP, engine="h5netcdf")
    cfg = SplitMapConfig.model_validate_json(str(ds.sel(scale=1.5, lr=ETA).config_json.values))
    problem, dirs = build.split_map_problem(cfg)
    o = cfg.map
    t0 = time.time()

    def show(a, pt):
        print(f"a = {a:.4f}: {pt.kind} {pt.lead_rate:+.6f} ± {pt.lead_se:.6f}", flush=True)

    b = locate_boundary(problem, dirs, (3, 1), 1.5, 2.0, eta=ETA, tol=1 / 16, progress=show,
                        scales=tuple(o.scales), min_cos=o.min_cos, margin=o.margin)  # fmt: skip

    def point(a, pt):
        return {"a": a, "kind": pt.kind, "rate": pt.lead_rate, "se": pt.lead_se, "risk": pt.risk,
                "M": np.asarray(pt.state.M).tolist(), "Q": np.asarray(pt.state.Q).tolist(),
                "b": np.asarray(pt.state.b).tolist()}  # fmt: skip

    out = {"split": "3:1", "eta": ETA, "low": b.low, "high": b.high, "wall_s": time.time() - t0,
           "probes": [point(a, pt) for a, pt in b.probes]}  # fmt: skip
    (OUT / "split_map_boundary.json").write_text(json.dumps(out, indent=1))
    print(f"boundary of 3:1 between a = {b.low:g} and {b.high:g} ({out['wall_s']:.0f} s)")


def straddle(k: int) -> None:
    """SGD from the fixed point on either side of the boundary: k = 0 the largest probed a whose
    3:1 is a saddle by the rule (Re λ > 3 s.e.: near the sign change the rate is within its
    error of 0, and the escape time ln(D)/(2λ) outgrows any horizon), k = 1 the first probe past
    the sign change; both to T = 3000."""
    import xarray as xr

    from headspec.conventions.config import SplitMapConfig
    from headspec.conventions.runs import simulate
    from headspec.conventions.splitmap import prepared_run, rearrangement

    bd = json.loads((OUT / "split_map_boundary.json").read_text())
    saddles = [p["a"] for p in bd["probes"] if p["kind"] == "saddle" and p["a"] <= bd["low"]]
    a = max(saddles) if k == 0 else bd["high"]
    pt = next(p for p in bd["probes"] if p["a"] == a)
    ds = xr.load_dataset(MAP, engine="h5netcdf")
    cfg = SplitMapConfig.model_validate_json(str(ds.sel(scale=1.5, lr=ETA).config_json.values))
    cfg = cfg.model_copy(update={"task": cfg.task.model_copy(update={
        "latent": cfg.task.latent.model_copy(update={"scale": a})})})  # fmt: skip
    T = 3000.0
    t0 = time.time()
    sim = simulate(prepared_run(cfg, (pt["M"], pt["Q"], pt["b"]), D, T, SEEDS, seed=9000 + k))
    dirs = np.asarray(cfg.task.latent.build().atoms)
    r = rearrangement(sim, dirs, cfg.map.min_cos, cfg.map.margin)
    row = {"a": a, "eta": ETA, "split": "3:1", "map_kind": pt["kind"], "rate": pt["rate"],
           "rate_se": pt["se"], "risk": pt["risk"], "D": D, "T": T, "wall_s": time.time() - t0,
           "boundary": [bd["low"], bd["high"]], **r}  # fmt: skip
    (OUT / f"split_map_confirm_straddle{k}.json").write_text(json.dumps([row], indent=1))
    print(json.dumps({k: v for k, v in row.items() if k not in ("t_left", "end_risk")}))


# random starts (``--random k``): (a, T) — every uneven split a saddle at a = 1.5 (3:1 is left
# at t ≈ 1300 from its fixed point), 3:1 a stable minimum at a = 3 (4:0 a saddle into 3:1)
RANDOM = [(1.5, 2000.0), (3.0, 1000.0)]


def first_split(names: list[str], persist: int = 3) -> str:
    """The first split every head has decided (even or uneven) that lasts ``persist`` records."""
    from headspec.dynamics.splits import is_even, is_uneven

    for k in range(len(names) - persist + 1):
        n = names[k]
        if (is_even(n) or is_uneven(n)) and all(m == n for m in names[k : k + persist]):
            return n
    return "none"


def random_starts(k: int) -> None:
    """SGD from the natural random start at RANDOM[k]: the split each seed's heads first settle
    in, and the split at T. The map predicts: where every uneven split is a saddle, every seed
    ends even (first uneven → even); where 3:1 is a stable minimum, a seed that settles 3:1 stays
    (and one that settles 4:0 moves to 3:1 where 4:0 is a saddle)."""
    import xarray as xr

    from headspec.conventions.config import SimulateConfig, SplitMapConfig
    from headspec.conventions.runs import simulate
    from headspec.conventions.splitmap import prepared_run
    from headspec.dynamics.splits import head_labels, is_even, split_name

    a, T = RANDOM[k]
    ds = xr.load_dataset(MAP, engine="h5netcdf")
    cell = ds.sel(scale=a, lr=ETA)
    cfg = SplitMapConfig.model_validate_json(str(cell.config_json.values))
    even = cell.sel(split="2:2")  # any valid state: the given start is replaced below
    given = prepared_run(cfg, (even.M.values, even.Q.values, even.b.values), D, T, SEEDS,
                         seed=7000 + k, points=80)  # fmt: skip
    data = given.model_dump()
    data.pop("init")  # the default: the natural random start
    t0 = time.time()
    sim = simulate(SimulateConfig.model_validate(data))
    dirs = np.asarray(cfg.task.latent.build().atoms)
    lab = head_labels(sim.M.values, sim.Q.values, dirs, min_cos=cfg.map.min_cos,
                      margin=cfg.map.margin)  # fmt: skip
    names = [[split_name(lab[s, j], J=len(dirs)) for j in range(sim.t.size)]
             for s in range(len(lab))]  # fmt: skip
    pairs = [(first_split(n), n[-1]) for n in names]
    kinds = {str(s): str(v) for s, v in zip(cell.split.values, cell.kind.values, strict=True)}
    first_uneven = [p for p in pairs if p[0] != "none" and not is_even(p[0])]
    moved = sum(is_even(e) for _, e in first_uneven)
    row = {"a": a, "eta": ETA, "D": D, "T": T, "seeds": len(pairs), "map_kinds": kinds,
           "first_uneven": len(first_uneven), "uneven_to_even": moved,
           "end_uneven": sum(not is_even(e) for _, e in pairs),
           "transitions": {f"{f} → {e}": sum(p == (f, e) for p in pairs) for f, e in set(pairs)},
           "wall_s": time.time() - t0}  # fmt: skip
    (OUT / f"split_map_random_{k}.json").write_text(json.dumps(row, indent=1))
    print(json.dumps(row))


def verdict(row: dict) -> str:
    k, S, kind = row["left"], row["seeds"], row["map_kind"]
    if kind == "saddle":
        return "agrees (seeds leave)" if k > 0 else "DISAGREES: no seed left a saddle"
    if kind == "minimum":
        return "agrees (no seed leaves)" if k == 0 else f"DISAGREES: {k} of {S} left a minimum"
    return f"marginal: {k} of {S} left"


def report() -> None:
    rows = []
    for f in sorted(OUT.glob("split_map_confirm_*.json")):
        rows += json.loads(f.read_text())
    rows.sort(key=lambda r: (r["split"], r["a"]))
    lines = [
        "# The map of uneven splits, confirmed by simulation",
        "",
        f"softmax, H = 4, L = 10, flipped spike ±a, η = {ETA:g}; reduced engine, D = {D}, "
        f"{SEEDS} seeds started at the map's fixed point of the split (studies/"
        "split_map_confirm.py). Left: seeds whose split at T differs from the start (binomial "
        "s.e.; 0 of n: 95 % upper bound 3/n).",
        "",
        "| split | a | map (Re λ ± s.e.) | T | left | where they went | median t left | "
        "verdict | wall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        frac = (f"{r['left']}/{r['seeds']} ({r['fraction']:.2f} ± {r['se']:.2f})" if r["left"]
                else f"0/{r['seeds']} (< {r['upper95']:.2f})")  # fmt: skip
        ends = ", ".join(f"{k} ×{v}" for k, v in sorted(r["end_splits"].items())) or "–"
        tl = [t for t in r["t_left"] if np.isfinite(t)]
        med = f"{np.median(tl):.0f}" if tl else "–"
        lines.append(
            f"| {r['split']} | {r['a']:g} | {r['map_kind']} ({r['rate']:+.5f} ± "
            f"{r['rate_se']:.5f}) | {r['T']:.0f} | {frac} | {ends} | {med} | {verdict(r)} | "
            f"{r['wall_s']:.0f} s |"
        )
    randoms = [json.loads(f.read_text()) for f in sorted(OUT.glob("split_map_random_*.json"))]
    if randoms:
        lines += [
            "",
            f"Random starts (the natural random start, {SEEDS} seeds, D = {D}, η = {ETA:g}): the "
            "split each seed's heads first settle in (decided, lasting 3 records) and the split at "
            "T, beside the map's kinds at that a.",
            "",
            "| a | map: 4:0, 3:1, 2:2 | T | first uneven | of those even at T | uneven at T | "
            "transitions (first → at T) | wall |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in randoms:
            kinds = ", ".join(r["map_kinds"].get(s, "–") for s in ("4:0", "3:1", "2:2"))
            moves = "; ".join(f"{k} ×{v}" for k, v in sorted(r["transitions"].items()))
            lines.append(
                f"| {r['a']:g} | {kinds} | {r['T']:.0f} | {r['first_uneven']}/{r['seeds']} | "
                f"{r['uneven_to_even']}/{r['first_uneven']} | {r['end_uneven']}/{r['seeds']} | "
                f"{moves} | {r['wall_s']:.0f} s |"
            )
    (OUT / "split_map_confirm.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="0/1", help="k/n: run every n-th point from the k-th")
    ap.add_argument("--report", action="store_true", help="merge the parts into the table")
    ap.add_argument("--bisect", action="store_true", help="locate the 3:1 boundary in a")
    ap.add_argument("--straddle", type=int, choices=(0, 1), help="SGD at the boundary's ends")
    ap.add_argument("--random", type=int, choices=range(len(RANDOM)), help="SGD from random starts")
    args = ap.parse_args()
    if args.random is not None:
        random_starts(args.random)
        return
    if args.report:
        report()
        return
    if args.bisect:
        bisect()
        return
    if args.straddle is not None:
        straddle(args.straddle)
        return
    k, n = (int(x) for x in args.part.split("/"))
    run_part(k, n)


if __name__ == "__main__":
    main()
