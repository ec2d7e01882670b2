"""Diffusion engine: cost per unit of t over D, and the reduced engine as the baseline.

Run:  .venv/bin/python benchmarks/bench_diffusion.py [--quick] [--json out.json]

All in one run, after compilation, best of 3 (machines are noisy; compare ratios):

1. the diffusion engine's wall time per unit t per seed at D = 10^3 … 10^9 (8 seeds; defaults:
   Heun, dt = 0.1, 2048 Sobol base samples, made head-cyclic at every D so that each D does the
   same work — with head_cyclic = "auto" the work grows × H once D > diffusion.n) — it should
   not depend on D;
2. the exact reduced engine (float64, as the diffusion engine) at D = 10^4 and 10^5 for the same
   t and seeds, and the ratio reduced / diffusion (> 1: the diffusion engine is faster).
Setup: the escape-time study's E1-type law (two atoms 2.5·e_f, p = 0.6/0.4), L = 10, H = 2,
softmax, η = 3. Prints the JAX backend: the same code runs on a GPU.
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

LAW = 'task.latent={kind="discrete", atoms=[[2.5, 0.0], [0.0, 2.5]], probs=[0.6, 0.4]}'


def make(engine: str, D: int, seeds: int, T: float):
    cfg = load_config(SimulateConfig, overrides=[
        LAW, f"task.D={D}", "task.L=10", "model.H=2", f"seeds={seeds}", f'train.engine="{engine}"',
        "train.lr=3.0", f"train.T={T}", "diffusion.head_cyclic=true", 'train.dtype="float64"',
    ])  # fmt: skip
    eng = build.engine(cfg)
    keys = seed_keys(np.arange(seeds))
    return eng, keys, eng.init(keys, 0.1, 0.0, jnp.float64)


def seconds_per_t(engine: str, D: int, seeds: int, t: float) -> float:
    """Wall seconds per unit t per seed of ``advance`` from t = 0 to ``t`` (best of 3)."""
    eng, keys, st = make(engine, D, seeds, t)
    n = round(t * D)

    def go(n):
        out = eng.advance(st, keys["train"], jnp.int64(0), jnp.int64(n))
        return jax.tree.map(lambda x: x.sum(), out)

    jax.block_until_ready(go(n))  # compile (the same shapes as timed)
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        jax.block_until_ready(go(n))
        best = min(best, time.perf_counter() - t0)
    return best / t / seeds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer D, shorter t")
    ap.add_argument("--json", help="write the numbers here")
    a = ap.parse_args()
    seeds = 8
    t = 1.0 if a.quick else 2.0
    Ds = [10**3, 10**5, 10**9] if a.quick else [10**k for k in range(3, 10)]
    print(f"backend: {jax.default_backend()}; {seeds} seeds, t = 0 … {t:g}")
    res = {"seeds": seeds, "t": t, "diffusion": {}, "reduced": {}, "ratio": {}}
    for D in Ds:
        s = seconds_per_t("diffusion", D, seeds, t)
        res["diffusion"][D] = s
        print(f"diffusion D = {D:>10.0e}: {s * 1e3:8.1f} ms per unit t per seed", flush=True)
    vals = list(res["diffusion"].values())
    res["spread"] = max(vals) / min(vals)
    print(f"max/min over D: {res['spread']:.2f}")
    for D in (10**4, 10**5):
        s = seconds_per_t("reduced", D, seeds, t)
        res["reduced"][D] = s
        dif = res["diffusion"].get(D) or seconds_per_t("diffusion", D, seeds, t)
        res["ratio"][D] = s / dif
        print(f"reduced   D = {D:>10.0e}: {s * 1e3:8.1f} ms per unit t per seed; "
              f"reduced / diffusion = {s / dif:.2f}", flush=True)  # fmt: skip
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
