"""Fit headspec.conventions.cost's seconds per unit to measured runs, and show how well it fits.

Reads every result file of a reproduction's ``data/`` folder (``headspec reproduce -o REPORT``:
each file keeps its resolved config and ``elapsed_s``, the seconds its run took on one worker),
counts each run's work terms (:func:`headspec.conventions.cost.terms`) and fits the seconds per
unit of each term by non-negative least squares on relative errors (each run weighted by
1/measured). Prints the fitted constants (paste them into ``PER_UNIT``), each run's estimate beside
its measured time, and per recipe the sums and their ratio — the number the model is judged by
(``reproduce --dry-run`` promises ~2× per experiment). ``--current`` judges today's ``PER_UNIT``
without fitting. ``--json FILE`` writes the measured runs (name, kind, config, seconds) for
``tests/test_plan.py``.

    python benchmarks/bench_cost.py REPORT/data [--current] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from headspec.apps.sweep.spec import MODELS
from headspec.conventions import cost, results


def measured(folder: Path) -> list[dict]:
    """Every run of ``folder``: recipe, name, kind, config (dict), elapsed seconds."""
    rows = []
    for path in sorted(folder.glob("*.nc")):
        ds = results.load(path, kinds=results.TASK_KINDS)
        kind = {"simulation": "simulate"}.get(ds.attrs["kind"], ds.attrs["kind"])  # run kind
        exp_id, name = path.stem.split("_", 1)
        rows.append({"recipe": exp_id, "name": name, "kind": str(kind),
                     "config": results.config_of(ds),
                     "seconds": float(ds.attrs[results.COMPUTE_SECONDS])})  # fmt: skip
    return rows


def fit(rows: list[dict]) -> dict[str, float]:
    """Seconds per unit of each term: NNLS on relative errors (rows scaled by 1/measured)."""
    keys = sorted({k for r in rows for k in r["terms"]})
    A = np.array([[r["terms"].get(k, 0.0) / r["seconds"] for k in keys] for r in rows])
    b = np.ones(len(rows))
    scale = np.where(A.max(0) > 0, A.max(0), 1.0)
    x, _ = nnls(A / scale, b)
    return {k: float(v / s) for k, v, s in zip(keys, x, scale, strict=True)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", type=Path, help="a reproduction's data/ folder")
    ap.add_argument("--current", action="store_true", help="judge PER_UNIT as it is")
    ap.add_argument("--json", type=Path, help="write the measured runs here")
    a = ap.parse_args()
    rows = measured(a.data)
    for r in rows:
        cfg = MODELS[r["kind"]].model_validate(r["config"])
        r["terms"] = cost.terms(r["kind"], cfg)
    per_unit = dict(cost.PER_UNIT) if a.current else {**cost.PER_UNIT, **fit(rows)}
    print("PER_UNIT = {")
    for k, v in per_unit.items():
        print(f'    "{k}": {v:.3g},')
    print("}")
    by = defaultdict(lambda: [0.0, 0.0])
    print(f"\n{'run':40s} {'kind':9s} {'measured':>9s} {'estimate':>9s} {'ratio':>6s}")
    for r in rows:
        est = sum(per_unit[k] * v for k, v in r["terms"].items())
        by[r["recipe"]][0] += r["seconds"]
        by[r["recipe"]][1] += est
        print(f"{r['recipe'] + ' ' + r['name']:40s} {r['kind']:9s} {r['seconds']:9.1f} "
              f"{est:9.1f} {est / r['seconds']:6.2f}")  # fmt: skip
    print(f"\n{'recipe':8s} {'measured s':>11s} {'estimate s':>11s} {'ratio':>6s}")
    for k, (m, e) in sorted(by.items()):
        print(f"{k:8s} {m:11.0f} {e:11.0f} {e / m:6.2f}")
    tot_m, tot_e = sum(v[0] for v in by.values()), sum(v[1] for v in by.values())
    print(f"{'all':8s} {tot_m:11.0f} {tot_e:11.0f} {tot_e / tot_m:6.2f}")
    if a.json:
        keep = [{k: r[k] for k in ("recipe", "name", "kind", "config", "seconds")} for r in rows]
        a.json.write_text(json.dumps(keep, indent=1) + "\n")


if __name__ == "__main__":
    main()
