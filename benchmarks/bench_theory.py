"""Theory (order-parameter ODE) against simulation: time for the same risk curve.

Run:  .venv/bin/python benchmarks/bench_theory.py [--T 100] [--D 1000] [--json out.json]

Measures in one process: one theory curve (H = 4, L = 10, F = 2, t from 0 to T, risk standard
error below 0.5 % from record.n_mc = 16384 base samples) and one simulation of the same curve at
D = 1000 with 8 seeds; both include their compilation ("cold"), the theory is also timed again
("warm"). Then the cost of one drift evaluation for several N (base samples), H and L.
"""

from __future__ import annotations

import argparse
import json
import time

import equinox as eqx
import jax
import jax.numpy as jnp

from headspec.conventions.config import SimulateConfig, TheoryConfig, load_config
from headspec.conventions.runs import simulate, solve
from headspec.core.attention import Softmax
from headspec.core.latent import Discrete
from headspec.core.observables import BaseSamples
from headspec.dynamics.ode import DriftProblem, OrderParameters

jax.config.update("jax_enable_x64", True)  # as inside headspec's entry points

LAW = 'task.latent={kind="discrete", atoms=[[2.0, 0.0], [0.0, 2.0]], probs=[0.6, 0.4]}'


def drift_cost(n, H, L, reps=20):
    law = Discrete([[2.0, 0.0], [0.0, 2.0]], [0.6, 0.4])
    base = BaseSamples.draw(jax.random.key(0), law, L, H, n)
    st = OrderParameters(0.1 * jnp.ones((H, 2)), 0.5 * jnp.eye(H) + 0.02, jnp.zeros(H))
    f = eqx.filter_jit(lambda st, base: DriftProblem.sampled(Softmax(), law, base).field_at(st))
    jax.block_until_ready(f(st, base))
    t0 = time.perf_counter()
    for _ in range(reps):
        jax.block_until_ready(f(st, base))
    return (time.perf_counter() - t0) / reps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=float, default=100.0)
    ap.add_argument("--D", type=int, default=1000)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--n", type=int, default=4096, help="theory.n (drift base samples)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    common = [LAW, "task.L=10", f"task.D={a.D}", "model.H=4", f"train.T={a.T}",
              "record.points=60", "record.n_mc=16384"]  # fmt: skip
    tcfg = load_config(TheoryConfig, overrides=[*common, f"theory.n={a.n}"])
    t0 = time.perf_counter()
    th = solve(tcfg)
    theory_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    solve(tcfg)
    theory_warm = time.perf_counter() - t0
    rel_se = float((th.risk_se / th.risk).max())
    scfg = load_config(SimulateConfig, overrides=[*common, f"seeds={a.seeds}", "record.n_test=0"])
    t0 = time.perf_counter()
    simulate(scfg)
    sim_cold = time.perf_counter() - t0
    out = {
        "T": a.T,
        "D": a.D,
        "seeds": a.seeds,
        "theory_n": a.n,
        "theory_cold_s": theory_cold,
        "theory_warm_s": theory_warm,
        "simulation_s": sim_cold,
        "ratio_cold": sim_cold / theory_cold,
        "ratio_warm": sim_cold / theory_warm,
        "theory_max_relative_risk_se": rel_se,
        "solver_steps": int(th.attrs["solver_steps"]),
        "drift_eval_ms": {},
    }
    print(
        f"theory curve (T = {a.T:g}, n = {a.n}): {theory_cold:.1f} s cold, "
        f"{theory_warm:.1f} s warm, {out['solver_steps']} solver steps, "
        f"max risk s.e. {100 * rel_se:.2f} %"
    )
    print(f"simulation (D = {a.D}, {a.seeds} seeds): {sim_cold:.1f} s")
    print(f"speed-up: {out['ratio_cold']:.1f}x cold, {out['ratio_warm']:.1f}x warm")
    print("one drift evaluation (discrete law, J = 2 atoms):")
    for n, H, L in [(1024, 4, 10), (4096, 4, 10), (16384, 4, 10), (4096, 2, 10), (4096, 8, 10),
                    (4096, 4, 5), (4096, 4, 20)]:  # fmt: skip
        ms = 1e3 * drift_cost(n, H, L)
        out["drift_eval_ms"][f"n={n},H={H},L={L}"] = ms
        print(f"  n = {n:6d}, H = {H}, L = {L:2d}: {ms:7.2f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
