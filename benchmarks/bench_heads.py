"""The theory's cost as the heads grow (issue 54): `headspec theory` at E1's setting by H, and
where one vector field's time goes.

Run:  .venv/bin/python benchmarks/bench_heads.py [--H 4 16 32] [--T 20] [--json out.json]

``command``: ``headspec theory -c experiments/two_phase.toml --H h --T 20`` (softmax, L = 10,
two atoms, 4 seeds, the exact drift: η² on n = 1024 score points) for each H, in one run, each
in a fresh process with its own empty compile cache ("cold": what a first run costs) and then
again on that cache ("warm"); wall time, solver steps, and the ratio to the first H's time.
``calls``: in this process, the median time of one call of ∇R (value and gradient by
quadrature), of the η² estimator and of the whole vector field at a state of the run (the
perturbed start moved towards the atoms: Q_hh ≈ 1.3) — what each solver stage costs.

The issue's aim: H = 16 within 4× the H = 4 time, H = 32 within 16×. Timings drift with the
machine's load; read the ratios of one run. Measured results are in docs/speed.md ("Cost of the
theory as the heads grow").
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

ROOT = Path(__file__).resolve().parents[1]


def run_command(H: int, T: float, cache: str, out: Path) -> tuple[float, int]:
    """Wall time (s) and solver steps of one `headspec theory` run."""
    env = {**os.environ, "HEADSPEC_JAX_CACHE": cache}
    config = str(ROOT / "experiments/two_phase.toml")
    cmd = [sys.executable, "-m", "headspec.apps.cli", "theory", "-c", config,
           "--H", str(H), "--T", str(T), "-o", str(out)]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    import xarray as xr

    with xr.open_dataset(out, engine="h5netcdf") as ds:
        return wall, int(ds.attrs["solver_steps"])


def per_call(H: int, reps: int = 5) -> dict:
    """Median ms of ∇R, the η² estimator and the vector field at a mid-run state."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np

    from headspec.conventions import build
    from headspec.conventions.config.overrides import load_config
    from headspec.conventions.config.schema import TheoryConfig
    from headspec.core.precision import float64_context
    from headspec.dynamics.problem import OrderParameters

    cfg = load_config(TheoryConfig, ROOT / "experiments/two_phase.toml", [f"model.H={H}"])
    law = cfg.task.latent.build()
    with float64_context():
        init = build.initial_state(cfg)
        problem = build.drift_problem(cfg, law, init)
        y0, _ = init.states(H, law.F, np.arange(1))
        s = OrderParameters(*(x[0] for x in y0))
        s = OrderParameters(s.M + 0.8, s.Q + 0.8 * jnp.ones((H, H)) + 0.5 * jnp.eye(H), s.b)
        grad = eqx.filter_jit(lambda p, st: p.method.risk_and_gradient(p, st))
        g = grad(problem, s)
        eta = eqx.filter_jit(lambda p, st, g: p.method.eta2_term(p, st, g, None, with_se=False))
        field = eqx.filter_jit(lambda p, st: p.field_at(st))
        calls = {"grad": (grad, (problem, s)), "eta2": (eta, (problem, s, g)),
                 "field": (field, (problem, s))}  # fmt: skip
        out = {}
        for name, (f, args) in calls.items():
            jax.block_until_ready(f(*args))
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                jax.block_until_ready(f(*args))
                times.append(time.perf_counter() - t0)
            out[name] = 1e3 * float(np.median(times))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--H", type=int, nargs="+", default=[4, 16, 32])
    ap.add_argument("--T", type=float, default=20.0)
    ap.add_argument("--part", choices=("all", "command", "calls"), default="all")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = {}
    if args.part in ("all", "calls"):
        print(f"{'H':>3} {'∇R ms':>8} {'η² ms':>8} {'field ms':>9}")
        for H in args.H:
            c = per_call(H)
            rows.setdefault(H, {}).update(c)
            print(f"{H:>3} {c['grad']:8.1f} {c['eta2']:8.1f} {c['field']:9.1f}", flush=True)
    if args.part in ("all", "command"):
        print(f"{'H':>3} {'cold s':>8} {'warm s':>8} {'steps':>6} {'cold ×':>7} {'warm ×':>7}")
        first = None
        with tempfile.TemporaryDirectory() as tmp:
            for H in args.H:
                cache = str(Path(tmp) / f"cache{H}")
                out = Path(tmp) / f"h{H}.nc"
                cold, steps = run_command(H, args.T, cache, out)
                warm, _ = run_command(H, args.T, cache, out)
                first = first or (cold, warm)
                rows.setdefault(H, {}).update(cold=cold, warm=warm, steps=steps)
                print(f"{H:>3} {cold:8.1f} {warm:8.1f} {steps:>6} {cold / first[0]:7.2f} "
                      f"{warm / first[1]:7.2f}", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
