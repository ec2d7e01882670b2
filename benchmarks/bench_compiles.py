"""Compilations and wall time of the README's first steps, cold and warm.

Run:  .venv/bin/python benchmarks/bench_compiles.py [--json out.json]

Each scenario runs in a fresh process (nothing compiled yet, JAX's persistent compilation cache
off unless stated) and reports, for each call in it: the XLA programs it needed (compiled or
read back from the persistent cache, :class:`headspec.core.compiles.CompileCount`), the seconds
spent compiling them and the wall time of the call. The calls are those of the README's first
steps through the Python API (the CLI does the same plus start-up):

- ``simulate``: experiments/two_phase.toml with T = 20, 2 seeds (D = 100, H = 4, L = 10), then
  the same again (warm), then with D = 200 and η = 1.5 (another size, same shapes);
- ``theory``: the ODE from the simulation's saved initial state (theory.n = 1024), then the same
  again, then with η = 1.5;
- ``cli``: ``headspec simulate`` / ``headspec theory`` as commands, twice each, with a fresh
  persistent cache folder (the first run fills it, the second reads it back).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
E1 = [
    "task.D=100", "train.lr=2.0", "train.T=20.0", "record.points=40", "model.H=4", "task.L=10",
    'task.latent={kind="discrete", atoms=[[3.0, 0.0], [0.0, 3.0]], probs=[0.7, 0.3]}',
    'record.grid="log"',
]  # fmt: skip

CHILD = r"""
import json, sys, time
import headspec as hs
from headspec.core.compiles import CompileCount
E1, folder = json.loads(sys.argv[1]), sys.argv[2]
out = []

def timed(label, fn):
    with CompileCount() as c:
        t0 = time.perf_counter()
        res = fn()
        wall = time.perf_counter() - t0
    out.append({"call": label, "programs": c.n, "compile_s": round(c.seconds, 2),
                "wall_s": round(wall, 2)})
    return res

def sim(extra=()):
    return hs.simulate(hs.load_config(hs.SimulateConfig, overrides=[*E1, "seeds=2", *extra]))

def theory(extra=()):
    ov = [*E1, "theory.n=1024", f"theory.init={{kind='simulation', path='{folder}/sim.nc'}}"]
    return hs.solve(hs.load_config(hs.TheoryConfig, overrides=[*ov, *extra]))

if sys.argv[3] == "simulate":
    timed("simulate (cold)", sim)
    timed("simulate (again)", sim)
    timed("simulate D=200, lr=1.5", lambda: sim(["task.D=200", "train.lr=1.5"]))
else:
    hs.save(sim(), f"{folder}/sim.nc")
    timed("theory (cold)", theory)
    timed("theory (again)", theory)
    timed("theory lr=1.5", lambda: theory(["train.lr=1.5"]))
print(json.dumps(out))
"""


def scenario(name: str, folder: str) -> list[dict]:
    env = {**os.environ, "HEADSPEC_JAX_CACHE": "off"}
    res = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(E1), folder, name],
        capture_output=True, text=True, env=env, cwd=ROOT, check=True,
    )  # fmt: skip
    return json.loads(res.stdout.strip().splitlines()[-1])


def cli(folder: str) -> list[dict]:
    exe = str(Path(sys.executable).with_name("headspec"))
    env = {**os.environ, "HEADSPEC_JAX_CACHE": str(Path(folder) / "jax-cache")}
    cmds = {
        "simulate": [exe, "simulate", "-c", "experiments/two_phase.toml", "--T", "20",
                     "--seeds", "2", "-o", f"{folder}/cli_sim.nc"],
        "theory": [exe, "theory", "--init-from", f"{folder}/cli_sim.nc", "--n", "1024",
                   "-o", f"{folder}/cli_theory.nc"],
    }  # fmt: skip
    out = []
    for rep in ("cold cache", "warm cache"):
        for name, cmd in cmds.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=ROOT)
            out.append({"call": f"headspec {name} ({rep})",
                        "wall_s": round(time.perf_counter() - t0, 2)})  # fmt: skip
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        rows += scenario("simulate", folder)
        rows += scenario("theory", folder)
        rows += cli(folder)
    w = max(len(r["call"]) for r in rows)
    print(f"{'call':<{w}}  programs  compile s  wall s")
    for r in rows:
        print(f"{r['call']:<{w}}  {r.get('programs', ''):>8}  {r.get('compile_s', ''):>9}  "
              f"{r['wall_s']:>6}")  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
