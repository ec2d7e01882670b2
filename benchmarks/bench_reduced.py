"""Reduced engine against the full engine: per-step cost as D grows.

Run:  .venv/bin/python benchmarks/bench_reduced.py [--json out.json]

Times `advance` (after compilation) for L = 10, H = 4, F = 2, 8 seeds, float32: the reduced engine
at D = 10^3 … 10^6 (its cost should not depend on D) and the full engine at D = 10^3 and 10^4, in
the same run; prints samples/second over all seeds and the ratios.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from headspec.conventions import build
from headspec.conventions.config import SimulateConfig, load_config
from headspec.dynamics.engines import seed_keys

jax.config.update("jax_enable_x64", True)  # as inside headspec's entry points (int64 steps)


def rate(engine: str, D: int, seeds: int, steps: int) -> float:
    cfg = load_config(
        SimulateConfig,
        overrides=[f"task.D={D}", "task.L=10", "model.H=4", f"seeds={seeds}",
                   f'train.engine="{engine}"'],
    )  # fmt: skip
    eng = build.engine(cfg)
    keys = seed_keys(np.arange(seeds))
    st = eng.init(keys, 0.1, 0.0, jnp.float32)

    def go(n):
        return eng.advance(st, keys["train"], jnp.int64(0), jnp.int64(n)).keys

    go(5).block_until_ready()
    t0 = time.perf_counter()
    go(steps).block_until_ready()
    return steps * seeds / (time.perf_counter() - t0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    out = {"reduced": {}, "full": {}}
    for D in (10**3, 10**4, 10**5, 10**6):
        out["reduced"][D] = rate("reduced", D, a.seeds, a.steps)
        print(f"reduced D = {D:>8}: {out['reduced'][D]:12,.0f} samples/s")
    for D in (10**3, 10**4):
        out["full"][D] = rate("full", D, a.seeds, max(200, a.steps // (D // 1000)))
        r = out["reduced"][D] / out["full"][D]
        print(f"full    D = {D:>8}: {out['full'][D]:12,.0f} samples/s   reduced/full = {r:.1f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
