"""The diffusion engine's mean increment: error against wall time, sampled vs exact drift.

Run:  .venv/bin/python benchmarks/bench_diffusion_mean.py [--quick] [--json out.json]

State: the common-phase plateau of the escape-time study's law (two softmax heads, L = 10, atoms
2.5·e₁, 2.5·e₂ with p = 0.6/0.4, η = 3; the symmetric ODE's state at t = 15), where the drift is
a small difference of O(1) terms and the sampled mean's error is a bias that every step of every
seed repeats. For D = 10⁴ and 10⁶, the mean increment E ψ_D (``noise.increment_moments``, the
engine's one evaluation per solver stage, with the tokens' finite-D Gram parts) by

- ``sampled``: the base samples' average (head-cyclic Sobol, as the engine takes them at D > n);
- ``exact``: ``diffusion.drift = "exact"``, the exact D → ∞ drift plus the samples' finite-D
  correction with its control variate (:mod:`headspec.dynamics.noise`);

each on 4 independent sample sets, against a reference (the exact route at n = 2¹⁶). Printed:
the median over coordinates of the RMS error relative to |f| for dQ and dM, and the wall time of
one evaluation at one state (jitted, after compilation, median over the sets), all measured in
this run; the last column is the cost ratio against sampled n = 8192 (the engine's default) in
the same run. Then the engine itself: wall time per unit t per seed of ``advance`` (16 seeds,
t = 0…1, D = 10⁴), where every seed has its own Q, so the exact quadrature's set-up is not shared
between seeds as it is at one state — that is the cost a run pays.
"""

from __future__ import annotations

import argparse
import json
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import headspec as hs
from headspec.conventions import build, runs
from headspec.core.model import Model
from headspec.core.observables import BaseSamples
from headspec.dynamics.eta2 import ScoreSamples
from headspec.dynamics.noise import gram_rest, increment_moments
from headspec.dynamics.problem import DriftProblem, Exact, OrderParameters

jax.config.update("jax_enable_x64", True)

LAW = "task.latent={kind='discrete', atoms=[[2.5, 0.0], [0.0, 2.5]], probs=[0.6, 0.4]}"
L, H, LR = 10, 2, 3.0


def plateau():
    """The symmetric ODE's state at t = 15 (the common phase), its law and activation."""
    over = [LAW, f"task.L={L}", "task.D=10000", f"model.H={H}", f"train.lr={LR}", "train.T=15",
            "seeds=1", "record.points=5", "theory.n=65536",
            "theory.init={kind='symmetric'}"]  # fmt: skip
    cfg = hs.load_config(hs.TheoryConfig, overrides=over)
    st = runs.solve(cfg).isel(seed=0, t=-1)
    X = OrderParameters(*(jnp.asarray(st[v].values) for v in ("M", "Q", "b")))
    return X, cfg.task.latent.build(), build.activation(cfg.model)


@eqx.filter_jit
def _mean(problem, gram, X):
    return increment_moments(X, problem, 1.0, gram=gram).mean  # (d,)


def setup(route: str, n: int, seed: int, D: int, law, act):
    """(problem, gram) of one route on n samples scrambled by ``seed``, as the engine has them."""
    base = BaseSamples.sobol(seed, law, L, H, n)
    copies = H if route == "sampled" else 1  # head-cyclic: build.diffusion_head_cyclic at D > n
    gram = gram_rest(jax.random.key(100 + seed), n, L, D, law.F + H, copies)
    if route == "sampled":
        return DriftProblem.sampled(act, law, base.head_cyclic(), LR), gram
    method = Exact(base, scores=ScoreSamples.rqmc(seed, L, H, n), cyclic=True)
    return DriftProblem(Model(act, law, L), LR, LR, method), gram


def timed(problem, gram, X, budget: float) -> tuple[np.ndarray, float]:
    f = np.asarray(_mean(problem, gram, X))  # compiles
    t0, k = time.perf_counter(), 0
    while k < 3 or time.perf_counter() - t0 < budget:
        f = np.asarray(_mean(problem, gram, X))
        k += 1
    return f, (time.perf_counter() - t0) / k


def main(quick: bool = False) -> dict:
    X, law, act = plateau()
    d_M = H * law.F
    q = slice(d_M, d_M + H * (H + 1) // 2)  # the Q coordinates (upper triangle)
    routes = [("sampled", 8192), ("sampled", 32768), ("exact", 512), ("exact", 1024),
              ("exact", 2048)]  # fmt: skip
    sets, budget = (2, 0.5) if quick else (4, 2.0)
    out = {}
    print(f"JAX backend: {jax.default_backend()}")
    for D in (10_000, 1_000_000):
        ref, _ = timed(*setup("exact", 2**16, 999, D, law, act), X, 0.0)
        rows = []
        for route, n in routes:
            errs, walls = [], []
            for s in range(sets):
                f, w = timed(*setup(route, n, s, D, law, act), X, budget)
                errs.append(f - ref)
                walls.append(w)
            rms = np.sqrt((np.array(errs) ** 2).mean(0))  # (d,)
            rel = rms / np.abs(ref)  # (d,)
            rows.append({"route": route, "n": n, "wall_ms": 1e3 * float(np.median(walls)),
                         "rel_err_dQ": float(np.median(rel[q])),
                         "rel_err_dM": float(np.median(rel[:d_M]))})  # fmt: skip
        base_ms = rows[0]["wall_ms"]
        size_Q, size_M = np.abs(ref[q]).mean(), np.abs(ref[:d_M]).mean()
        print(f"\nD = {D}: |dQ/dt| {size_Q:.4f}, |dM/dt| {size_M:.4f}")
        print(f"{'route':>8} {'n':>6} {'err dQ':>9} {'err dM':>9} {'ms/eval':>8} {'cost':>6}")
        for r in rows:
            r["cost_vs_sampled_8192"] = r["wall_ms"] / base_ms
            print(f"{r['route']:>8} {r['n']:>6} {r['rel_err_dQ']:9.2e} {r['rel_err_dM']:9.2e} "
                  f"{r['wall_ms']:8.1f} {r['cost_vs_sampled_8192']:6.2f}")  # fmt: skip
        out[str(D)] = rows
    out["engine_ms_per_t_per_seed"] = engine_costs()
    return out


def engine_costs(D: int = 10_000, seeds: int = 16, t: float = 1.0) -> dict[str, float]:
    """Wall ms per unit t per seed of the diffusion engine's ``advance`` (after compilation)."""
    from headspec.conventions.config import SimulateConfig, load_config
    from headspec.dynamics.engines import seed_keys

    out = {}
    print(f"\nthe engine, D = {D}, {seeds} seeds, t = 0…{t:g}: ms per unit t per seed")
    variants = {"sampled n=8192 head-cyclic": ["diffusion.n=8192"],
                "exact n=1024": ["diffusion.n=1024", "diffusion.drift='exact'"]}  # fmt: skip
    for label, extra in variants.items():
        cfg = load_config(SimulateConfig, overrides=[
            LAW, f"task.D={D}", f"task.L={L}", f"model.H={H}", f"seeds={seeds}",
            "train.engine='diffusion'", f"train.lr={LR}", f"train.T={t}",
            "train.dtype='float64'", *extra])  # fmt: skip
        eng = build.engine(cfg)
        keys = seed_keys(np.arange(seeds))
        st = eng.init(keys, 0.1, 0.0, jnp.float64)

        def go(eng=eng, keys=keys, st=st):
            new = eng.advance(st, keys["train"], jnp.int64(0), jnp.int64(round(t * D)))
            return jax.block_until_ready(jax.tree.map(lambda x: x.sum(), new))

        go()  # compiles
        t0 = time.perf_counter()
        go()
        out[label] = 1e3 * (time.perf_counter() - t0) / t / seeds
        print(f"{label:>28}: {out[label]:7.1f}")
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 sample sets, short timings")
    ap.add_argument("--json", help="write the rows to this file")
    a = ap.parse_args()
    res = main(a.quick)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1)
