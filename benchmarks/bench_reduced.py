"""Reduced engine: cost per SGD step, its breakdown, and the full engine as the baseline.

Run:  .venv/bin/python benchmarks/bench_reduced.py [--quick] [--json out.json]

All in one run, after compilation, best of 3 (machines are noisy; compare ratios):

1. the reduced engine's cost per step per seed at 1 and 64 seeds, D = 10^3 … 10^6 (it should not
   depend on D), float32 (the default) — E1's law, L = 10, H = 4, F = 2, B = 1;
2. the full engine at D = 10^4 with the same seeds, and the ratio;
3. a breakdown of one reduced step at D = 10^4: engines that do only part of the work (the loop
   with its divergence checks, each kind of random draw, the step's arithmetic without draws),
   so that the cost of each part is the difference to the loop alone.
Prints the JAX backend: the same code runs on a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from headspec.conventions import build
from headspec.conventions.config import SimulateConfig, load_config
from headspec.core.linalg import chi2
from headspec.dynamics.engines import seed_keys
from headspec.dynamics.engines.reduced import ReducedEngine, StepRandoms

jax.config.update("jax_enable_x64", True)  # as inside headspec's entry points (int64 steps)

LAW = 'task.latent={kind="discrete", atoms=[[3.0, 0.0], [0.0, 3.0]], probs=[0.7, 0.3]}'


def make(engine: str, D: int, seeds: int, cls=None):
    cfg = load_config(SimulateConfig, overrides=[LAW, f"task.D={D}", "task.L=10", "model.H=4",
                      f"seeds={seeds}", f'train.engine="{engine}"', "train.lr=2.0"])  # fmt: skip
    eng = build.engine(cfg)
    if cls is not None:  # the same engine as a stripped-down subclass (own compilation cache)
        eng = cls(**{f.name: getattr(eng, f.name) for f in dataclasses.fields(eng)})
    keys = seed_keys(np.arange(seeds))
    return eng, keys, eng.init(keys, 0.1, 0.0, jnp.float32)


def us_per_step(eng, keys, st, steps: int) -> float:
    """µs per step per seed of ``advance`` (keys, biases and divergence marks all used)."""

    def go(n):
        out = eng.advance(st, keys["train"], jnp.int64(0), jnp.int64(n))
        return out.keys.sum() + out.b.sum() + out.fail_step.sum()

    go(2 * eng.block).block_until_ready()  # compile
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        go(steps).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return best / steps / st.b.shape[0] * 1e6


# --------------------------------------------------------------------------- the breakdown
def _zeros(self, key, frame):
    B, L, s, dt, n = self.B, self.L, frame.shape[1], frame.dtype, self.block
    tie = jax.random.key_data(key).sum().astype(dt) * 0  # keep the key "used"
    z = jnp.zeros((n, B, L, s), dt) + tie
    T = jnp.zeros((n, B, L, B * L), dt)
    return StepRandoms(z, T, jnp.zeros((n, B), int), jnp.zeros((n, B, self.law.F), dt))


def _normals(self, key, frame):
    r = _zeros(self, key, frame)
    B, L, s, n = self.B, self.L, frame.shape[1], self.block
    g = jax.random.normal(key, (n, B * L * s + (B * L) * (B * L - 1) // 2), jnp.float32)
    return r._replace(z=g[:, : B * L * s].reshape(n, B, L, s).astype(frame.dtype))


def _chi2(self, key, frame):
    r = _zeros(self, key, frame)
    BL = self.B * self.L
    d = chi2(key, self.D - frame.shape[1] - jnp.arange(BL), (self.block, BL), frame.dtype)
    return r._replace(T=r.T + jnp.sqrt(d)[:, None, None, :])


def _eps_theta(self, key, frame):
    r = _zeros(self, key, frame)
    k1, k2 = jax.random.split(key)
    eps = jax.random.randint(k1, (self.block, self.B), 0, self.L)
    return r._replace(eps=eps, theta=self.law.sample(k2, (self.block, self.B)).astype(frame.dtype))


def _classic_threefry(draw):
    def wrapped(self, key, frame):
        with jax.threefry_partitionable(False):  # as ReducedEngine._draw
            return draw(self, key, frame)

    return wrapped


def _no_step(self, frame, keys, b, rnd, t):
    used = rnd.z.sum() + rnd.T.sum() + rnd.theta.sum() + rnd.eps.sum()
    return frame, keys, b + 0 * used, used


PARTS = {  # name → (step, randoms_block) overrides; None keeps the engine's own
    "loop and divergence checks only": (_no_step, _zeros),
    "+ normal draws (z and Bartlett off-diagonals)": (_no_step, _normals),
    "+ chi-square draws (Bartlett diagonal)": (_no_step, _chi2),
    "+ hidden location and latent draws": (_no_step, _eps_theta),
    "all draws, no step": (_no_step, None),
    "step arithmetic, no draws": (None, _zeros),
    "full step": (None, None),
}


def breakdown(seeds: int, steps: int) -> dict[str, float]:
    """Each part as its own engine class (own compilation); draws with the engine's threefry."""
    out = {}
    for k, (name, (step, draw)) in enumerate(PARTS.items()):
        attrs = {}
        if step is not None:
            attrs["step"] = step
        if draw is not None:
            attrs["randoms_block"] = _classic_threefry(draw)
        cls = type(f"Part{k}", (ReducedEngine,), attrs)
        out[name] = us_per_step(*make("reduced", 10**4, seeds, cls), steps)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps (noisier)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    f = 0.25 if a.quick else 1.0
    steps = {1: int(16384 * f), 64: int(2048 * f)}
    print(f"backend: {jax.default_backend()} ({jax.devices()[0].device_kind}); float32; "
          f"µs per SGD step per seed, best of 3")  # fmt: skip
    out = {"backend": jax.default_backend(), "reduced": {}, "full": {}, "breakdown": {}}
    for S in (1, 64):
        row = {
            D: us_per_step(*make("reduced", D, S), steps[S]) for D in (10**3, 10**4, 10**5, 10**6)
        }
        out["reduced"][S] = row
        cells = "  ".join(f"D=10^{int(np.log10(D))}: {v:6.2f}" for D, v in row.items())
        spread = max(row.values()) / min(row.values())
        print(f"reduced, {S:2d} seed(s): {cells}   (max/min {spread:.2f})")
    for S in (1, 64):
        full = us_per_step(*make("full", 10**4, S), max(64, steps[S] // 32))
        out["full"][S] = full
        ratio = full / out["reduced"][S][10**4]
        print(f"full,    {S:2d} seed(s): D=10^4: {full:8.1f}   full/reduced = {ratio:.0f}x")
    for S in (1, 64):
        parts = breakdown(S, steps[S])
        out["breakdown"][S] = parts
        base = parts["loop and divergence checks only"]
        print(
            f"breakdown at D = 10^4, {S} seed(s) (µs per step per seed; + rows: cost over the loop)"
        )
        for name, v in parts.items():
            extra = "" if name.startswith("loop") else f"   ({v - base:+6.2f} over the loop)"
            print(f"  {name:48s} {v:6.2f}{extra}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=2, default=str)
    return out


if __name__ == "__main__":
    main()
