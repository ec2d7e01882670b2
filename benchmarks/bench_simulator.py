"""Simulator throughput against a plain NumPy loop and against drawing the random numbers alone.

Run:  .venv/bin/python benchmarks/bench_simulator.py [--D 1000] [--T 4] [--json out.json]

Measures, in the same process (ratios are what to read; absolute times drift on shared machines):
- ``jax``: headspec's simulator (`Engine.advance`: jit + a loop over steps, vmap over seeds),
  samples/second over all seeds, after compilation;
- ``rng``: the same loop drawing only the Gaussian tokens (B·L·D normals per seed and step) — the
  floor any exact full-D simulator pays;
- ``numpy``: a plain per-step NumPy loop of the same model (hand-written gradient, one sample per
  step, one seed).
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

jax.config.update("jax_enable_x64", True)  # as inside headspec's entry points


def numpy_loop(D, L, H, F, steps, lr, seed=0):
    """Plain NumPy online SGD, softmax heads averaged, discrete law; returns samples/s."""
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((D, F)))[0]
    atoms = 2.0 * np.eye(F)
    probs = np.full(F, 1.0 / F)
    K = 0.1 * rng.standard_normal((H, D))
    b = np.zeros(H)
    sq = np.sqrt(D)
    t0 = time.perf_counter()
    for _ in range(steps):
        X = rng.standard_normal((L, D))
        eps = rng.integers(L)
        X[eps] += U @ atoms[rng.choice(F, p=probs)]
        s = X @ K.T / sq + b  # (L, H)
        s -= s.max(0)
        p = np.exp(s)
        p /= p.sum(0)  # (L, H) softmax over positions
        W = p.mean(1)  # (L,)
        r = X @ (W @ X - X[eps]) / D  # (L,) ∂ℓ/∂W_l
        g = p * (r[:, None] - (r @ p)[None, :]) / H  # (L, H) ∂ℓ/∂s
        K -= lr * (g.T @ X) / sq
        b -= lr / D * g.sum(0)
    return steps / (time.perf_counter() - t0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--D", type=int, default=1000)
    ap.add_argument("--L", type=int, default=10)
    ap.add_argument("--H", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--T", type=float, default=4.0, help="timed horizon (t units) for jax")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--numpy-steps", type=int, default=3000)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    cfg = load_config(
        SimulateConfig,
        overrides=[
            f"task.D={a.D}",
            f"task.L={a.L}",
            f"model.H={a.H}",
            f"seeds={a.seeds}",
            f'train.dtype="{a.dtype}"',
            'task.latent={kind="discrete", atoms=[[2.0, 0.0], [0.0, 2.0]]}',
        ],
    )
    dtype = jnp.float32 if a.dtype == "float32" else jnp.float64
    eng = build.engine(cfg)
    keys = seed_keys(np.arange(a.seeds))
    state = eng.init(keys, cfg.model.sigma0, 0.0, dtype)
    n = int(a.T * a.D)
    # compile, then time
    eng.advance(state, keys["train"], jnp.int64(0), jnp.int64(10)).keys.block_until_ready()
    t0 = time.perf_counter()
    eng.advance(state, keys["train"], jnp.int64(0), jnp.int64(n)).keys.block_until_ready()
    jax_rate = n * a.seeds / (time.perf_counter() - t0)

    @jax.jit
    def rng_only(keys, n):
        def body(i, acc):
            z = jax.vmap(lambda k: jax.random.normal(jax.random.fold_in(k, i), (a.L, a.D), dtype))(
                keys
            )
            return acc + z[:, 0, 0]

        return jax.lax.fori_loop(0, n, body, jnp.zeros(a.seeds, dtype))

    rng_only(keys["train"], 10).block_until_ready()
    t0 = time.perf_counter()
    rng_only(keys["train"], n).block_until_ready()
    rng_rate = n * a.seeds / (time.perf_counter() - t0)

    np_rate = numpy_loop(a.D, a.L, a.H, 2, a.numpy_steps, 1.0)
    out = {
        "D": a.D,
        "L": a.L,
        "H": a.H,
        "F": 2,
        "seeds": a.seeds,
        "dtype": a.dtype,
        "backend": jax.default_backend(),
        "jax_samples_per_s": jax_rate,
        "rng_only_samples_per_s": rng_rate,
        "numpy_loop_samples_per_s": np_rate,
        "speedup_vs_numpy": jax_rate / np_rate,
        "fraction_of_rng_bound": jax_rate / rng_rate,
    }
    print(f"backend {out['backend']}, D={a.D} L={a.L} H={a.H} F=2, {a.seeds} seeds, {a.dtype}")
    print(f"  headspec simulator : {jax_rate:12,.0f} samples/s")
    print(f"  random numbers only: {rng_rate:12,.0f} samples/s")
    print(f"  plain NumPy loop   : {np_rate:12,.0f} samples/s")
    print(f"  speed-up over NumPy loop: {out['speedup_vs_numpy']:.1f}x")
    print(f"  simulator / RNG-only throughput: {out['fraction_of_rng_bound']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
