"""Fit headspec.conventions.cost's seconds per unit to measured runs, and show how well it fits.

Reads every result file of a reproduction's ``data/`` folder (``headspec reproduce -o REPORT``:
each file keeps its resolved config and ``cpu_s``, the CPU seconds of the worker that ran it; for
files written before that attribute existed, ``--log`` reads them from the command's output, whose
lines say "E8 a3_softmax1: 22 s on a worker (CPU 12 s)", else the wall time ``elapsed_s``),
counts each run's work terms (:func:`headspec.conventions.cost.terms`) and fits the seconds per
unit of each term by non-negative least squares on relative errors (each run weighted by
1/measured). Prints the fitted constants (paste them into ``PER_UNIT``), each run's estimate beside
its measured time, and per recipe the sums and their ratio — the number the model is judged by
(``reproduce --dry-run`` promises ~2× per experiment). ``--current`` judges today's ``PER_UNIT``
without fitting. ``--json FILE`` writes the measured runs as ``{"what": …, "runs": [{recipe,
scale, name, kind, config, seconds}, …]}`` for ``tests/test_plan.py``.

    python benchmarks/bench_cost.py REPORT/data [REPORT2/data …] [--log OUTPUT …] [--current]
        [--runs tests/data/cost_runs.json] [--json FILE --what TEXT]

``--runs`` adds the runs of an earlier ``--json`` file (e.g. the committed quick reproduction's)
for every (recipe, scale) that the folders do not measure again.

Several folders (e.g. a quick and an overnight reproduction) are fitted together: runs of one
recipe at two scales tell the cost per seed from the cost per step shared by the seeds.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from headspec.apps.sweep.spec import MODELS
from headspec.conventions import cost, results


def cpu_from_log(log: Path | None) -> dict[str, float]:
    """Run file stem (``E8_a3_softmax1``) → its CPU seconds, from `headspec reproduce`'s output."""
    if log is None:
        return {}
    found = re.findall(r"(E\d+) (\S+): \d+ s on a worker \(CPU (\d+) s\)", log.read_text())
    return {f"{e}_{n}": float(c) for e, n, c in found}


def scale_of(folder: Path) -> str:
    """The scale of the reproduction whose data/ folder this is (from its report, else '?')."""
    try:
        return json.loads((folder.parent / "outcomes.json").read_text())["scale"]
    except (OSError, ValueError, KeyError):
        return "?"


def measured(folder: Path, log: Path | None = None) -> list[dict]:
    """Every run of ``folder``: recipe, name, kind, config (dict), CPU seconds."""
    rows, cpu = [], cpu_from_log(log)
    for path in sorted(folder.glob("*.nc")):
        ds = results.load(path, kinds=results.TASK_KINDS)
        kind = {"simulation": "simulate"}.get(ds.attrs["kind"], ds.attrs["kind"])  # run kind
        exp_id, name = path.stem.split("_", 1)
        sec = ds.attrs.get(results.COMPUTE_CPU_SECONDS, cpu.get(path.stem))
        sec = ds.attrs[results.COMPUTE_SECONDS] if sec is None else sec
        rows.append({"recipe": exp_id, "name": name, "kind": str(kind), "scale": scale_of(folder),
                     "config": results.config_of(ds), "seconds": max(float(sec), 0.5)})  # fmt: skip
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
    ap.add_argument("data", type=Path, nargs="+", help="reproductions' data/ folders")
    ap.add_argument(
        "--log",
        type=Path,
        action="append",
        default=[],
        help="a reproduction's output (CPU seconds per run; once per folder)",
    )
    ap.add_argument("--current", action="store_true", help="judge PER_UNIT as it is")
    ap.add_argument("--runs", type=Path, help="earlier measured runs (a --json file) to add")
    ap.add_argument("--json", type=Path, help="write the measured runs here")
    ap.add_argument("--what", default="", help="with --json: where the runs were measured "
                    "(added to the --runs file's own)")  # fmt: skip
    a = ap.parse_args()
    logs = a.log + [None] * (len(a.data) - len(a.log))
    unknown = [str(f) for f in a.data if scale_of(f) == "?"]
    if unknown:  # per-scale sums and --runs' merge need it
        raise SystemExit(
            f"cannot tell the scale of {', '.join(unknown)} (no readable outcomes.json beside "
            "it); fix: pass the data/ folder of a finished `headspec reproduce` run"
        )
    rows = [r for folder, log in zip(a.data, logs, strict=False) for r in measured(folder, log)]
    what = a.what
    if a.runs:  # the earlier runs of every (recipe, scale) not measured again
        earlier = json.loads(a.runs.read_text())
        new = {(r["recipe"], r["scale"]) for r in rows}
        rows += [r for r in earlier["runs"] if (r["recipe"], r["scale"]) not in new]
        what = "; ".join(x for x in (earlier.get("what", ""), a.what) if x)  # keep provenance
    for r in rows:
        cfg = MODELS[r["kind"]].model_validate(r["config"])
        r["terms"] = cost.terms(r["kind"], cfg)
    per_unit = dict(cost.PER_UNIT) if a.current else {**cost.PER_UNIT, **fit(rows)}
    print("PER_UNIT = {")
    for k, v in per_unit.items():
        print(f'    "{k}": {v:.3g},')
    print("}")
    by: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0])
    print(f"\n{'run':40s} {'kind':9s} {'measured':>9s} {'estimate':>9s} {'ratio':>6s}")
    for r in rows:
        est = sum(per_unit[k] * v for k, v in r["terms"].items())
        by[(r["recipe"], r["scale"])][0] += r["seconds"]
        by[(r["recipe"], r["scale"])][1] += est
        print(f"{r['recipe'] + ' ' + r['name']:40s} {r['kind']:9s} {r['seconds']:9.1f} "
              f"{est:9.1f} {est / r['seconds']:6.2f}")  # fmt: skip
    print(f"\n{'recipe':18s} {'measured s':>11s} {'estimate s':>11s} {'ratio':>6s}")
    for (k, sc), (m, e) in sorted(by.items()):
        print(f"{k + ' ' + sc:18s} {m:11.0f} {e:11.0f} {e / m:6.2f}")
    tot_m, tot_e = sum(v[0] for v in by.values()), sum(v[1] for v in by.values())
    print(f"{'all':18s} {tot_m:11.0f} {tot_e:11.0f} {tot_e / tot_m:6.2f}")
    if a.json:
        keep = [{k: r[k] for k in ("recipe", "scale", "name", "kind", "config", "seconds")}
                for r in rows]  # fmt: skip
        a.json.write_text(json.dumps({"what": what, "runs": keep}, indent=1) + "\n")


if __name__ == "__main__":
    main()
