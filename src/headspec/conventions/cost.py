"""The compute time of a run, estimated from its validated config before it runs.

A run's time is modelled as a sum of work terms, each a count the run's config fixes (SGD steps of
every seed, and of all seeds at once for the vmapped step's launch; the risk's Monte-Carlo samples
at each recorded point; the ODE's drift samples times its horizon, …) times a cost per unit of
that term. :func:`terms` counts
the work; :data:`PER_UNIT` holds the seconds per unit on one core of this project's reference
machine, fitted to measured runs (``benchmarks/bench_cost.py`` fits them again from any
reproduction's ``data/`` folder and prints each run's estimate beside its measured time). The
model is meant to be right within about 2× per recipe — enough to say whether a reproduction takes
minutes, hours or CPU-days before it starts — not per run (compile time, the ODE's adaptive
steps and a machine's speed of the day move single runs more than that).

Example:
    >>> from headspec.conventions.config import SimulateConfig, load_config
    >>> small = load_config(SimulateConfig, overrides=["task.D=1000", "train.T=10", "seeds=2"])
    >>> big = load_config(SimulateConfig, overrides=["task.D=10000", "train.T=10", "seeds=2"])
    >>> terms("simulate", big)["sgd_step"] / terms("simulate", small)["sgd_step"]
    10.0
    >>> seconds("simulate", big) > seconds("simulate", small)
    True
"""

from __future__ import annotations

from headspec.conventions.budget import law_sizes, sobol_n, theory_samples

__all__ = ["PER_UNIT", "prune_terms", "seconds", "terms"]

#: Seconds per unit of each work term on one core (fitted by ``benchmarks/bench_cost.py``; the
#: date, machine and runs of the fit are in docs/speed.md).
PER_UNIT: dict[str, float] = {
    # fitted to the 77 runs of a cold quick reproduction and the 85 runs of a cold overnight one
    # (2026-12-03/04, 2-core Intel Xeon at its best speed; CPU seconds; tests/data/cost_runs.json)
    "run": 0.91,  # a run's fixed cost: tracing and compiling its programs, writing its file
    # the three SGD terms refitted with E9's 36 simulations (H = 4 … 32; 2026-12-06, 2-core AMD
    # EPYC), the other constants held: the step's cost grows with H (E9: 3.7 µs per seed-step at
    # H = 4, 19 µs at H = 32), which one constant per step had priced at 2.2 µs whatever H
    "sgd_step": 1.60e-6,  # one SGD step of one seed (reduced engine: independent of D)
    "sgd_launch": 5.8e-6,  # one SGD step of all seeds at once (vmapped: launching its operations)
    "sgd_heads": 1.82e-9,  # one SGD step of one seed, per token × head × (heads + features)
    "risk": 6.2e-8,  # the recorded risk: per point × Monte-Carlo sample × token × (heads + feat.)
    "ode": 1.04e-8,  # the ODE (sampled drift): per unit t × drift sample × token × (heads + feat.)
    "ode_exact": 1.36e-4,  # the exact drift: per unit t × token × pair of heads
    "map": 4.9e-6,  # a setting of the map: per split × drift sample × token × (heads + feat.)
    # measured alone (three runs of E2's log-D law at D = 10⁶, T = 5–10, 4–8 seeds)
    "diffusion": 1.3e-7,  # per step × drift sample × token × (heads + features), per seed
    # measured alone: E2's overnight log-D run at D = 10⁶ (16 seeds, T = 80, n = 1024), 420 CPU-s,
    # less what the terms above give it (2026-12-04); one point: other n (the η² term's score
    # points grow with it, × H for the relabellings) and H are extrapolations
    "diffusion_exact": 5.5e-4,  # the exact drift: per step × token × pair of heads, per seed
    # pruning a trained run's seeds (E5, E9), timed on E9's overnight runs (H = 4 … 32, n = 16384,
    # 1 greedy + 4 random paths; 2026-12-07, 2-core AMD EPYC): Bayes-softmax costs ≈ 3× softmax-1
    "prune": 4.5e-9,  # per path × step × atom × base sample × token × head
    # not measured: the full engine is in no recipe (a guess from its speed, docs/engine-reduced)
    "full_token": 2.0e-9,  # per step × token × dimension × (heads + features) × batch, per seed
}


def _seeds(cfg) -> int:
    """The seeds a run computes (an ODE from chosen seeds' starts: those)."""
    init = getattr(getattr(cfg, "theory", None), "init", None)
    return len(getattr(init, "seeds", None) or []) or cfg.seeds


def terms(kind: str, cfg) -> dict[str, float]:
    """The work terms of a run of ``kind`` ("simulate", "theory", "splitmap") with config ``cfg``
    (each a count; multiply by :data:`PER_UNIT` for seconds)."""
    F, A = law_sizes(cfg.task.latent)
    L, H = cfg.task.L, cfg.model.H
    width = L * (H + F)  # one sequence's scores and features
    out = {"run": 1.0}
    if kind == "splitmap":
        splits = (F + 1) ** H  # an upper bound on the splits of H heads over F directions
        out["map"] = splits * cfg.map.n * A * width
        return out
    S = _seeds(cfg)
    points = cfg.record.points
    out["risk"] = S * points * cfg.record.n_mc * A * width
    if kind == "simulate":
        B = cfg.train.batch
        if cfg.train.engine == "diffusion":
            opts = cfg.diffusion
            n = sobol_n(opts.n) if opts.sampler == "sobol" else opts.n
            steps = S * cfg.train.T / opts.dt
            out["diffusion"] = steps * n * A * width
            if opts.drift == "exact":  # the quadrature, per step and seed
                out["diffusion_exact"] = steps * L * H * H
        else:
            steps = cfg.train.T * cfg.task.D / B
            out["sgd_step"] = S * steps
            out["sgd_launch"] = steps
            out["sgd_heads"] = S * steps * L * H * (H + F)  # a step's head-by-feature work
            if cfg.train.engine == "full":
                out["full_token"] = S * steps * B * width * cfg.task.D
        return out
    if kind == "theory":
        if cfg.theory.method == "exact":
            out["ode_exact"] = S * cfg.train.T * L * H * H
        else:
            n, cyclic = theory_samples(cfg)
            out["ode"] = S * cfg.train.T * (n * H if cyclic else n) * A * width
        return out
    raise ValueError(f"no cost model for a run of kind {kind!r}")


def prune_terms(cfg, n: int, paths: int) -> dict[str, float]:
    """The work of pruning every seed of a run with config ``cfg`` at its final time on ``n`` base
    samples along ``paths`` removal orders (:func:`headspec.dynamics.prune.prune_path`: H steps,
    each pricing all H removals on every atom's samples)."""
    _, A = law_sizes(cfg.task.latent)
    H, S = cfg.model.H, _seeds(cfg)
    return {"prune": S * paths * H * A * n * cfg.task.L * H}


def seconds(kind: str, cfg, per_unit: dict[str, float] | None = None) -> float:
    """The estimated compute seconds (one core) of a run of ``kind`` with config ``cfg``."""
    c = PER_UNIT if per_unit is None else per_unit
    return float(sum(c[k] * v for k, v in terms(kind, cfg).items()))
