"""The diffusion engine's settings on a SimulateConfig: its domain of validity
(:mod:`headspec.dynamics.engines.diffusion` says why), the drift and sample count that "auto"
and an unset n mean, the head-cyclic rule and the checks of fresh samples; and what
theory.method = "auto" and an unset theory.n mean for the ODE."""

from __future__ import annotations

import math

import numpy as np

DIFFUSION_DOMAIN = 10.0  # ρ = η·(s² + L)/D beyond which the diffusion engine is refused


def check_diffusion_domain(cfg) -> None:
    """The diffusion engine's domain of validity (dynamics.engines.diffusion): one SGD step may
    change a score by about ρ = η·(s² + L)/D (s² = F·(max |cθ_f|² + max Var cθ_f) bounds |cθ|²);
    the SDE neglects O(ρ) corrections, so ρ > DIFFUSION_DOMAIN is refused."""
    m, v = cfg.task.latent.signal_size()
    s2, eta = cfg.task.latent.F * (m * m + v), max(cfg.train.lr, cfg.train.lr_b or 0.0)
    rho = eta * (s2 + cfg.task.L) / cfg.task.D
    if rho > DIFFUSION_DOMAIN:
        D_min = math.ceil(eta * (s2 + cfg.task.L) / DIFFUSION_DOMAIN)
        raise ValueError(
            f'train.engine = "diffusion" is outside its domain of validity: one SGD step moves a '
            f"score by up to ρ = η·(s² + L)/D = {eta:g}·({s2:.4g} + {cfg.task.L})/{cfg.task.D} = "
            f"{rho:.3g} (> {DIFFUSION_DOMAIN:g}; s² = F·max|cθ_f|² from task.latent and its "
            f"scale), far from the small steps the SDE needs; fix: task.D ≥ {D_min:,}, a smaller "
            f'train.lr or task.latent.scale, or train.engine = "reduced" (exact at any step size)'
        )


def beyond_exact(model) -> bool:
    """Whether the exact quadrature cannot integrate this model: Bayes-softmax's one normaliser
    couples every head, an H-dimensional quadrature, out of reach for H ≥ 4."""
    return model.activation == "bayes_softmax" and model.H >= 4


def resolve_diffusion(cfg) -> None:
    """diffusion.drift = "auto" and an unset diffusion.n become what they mean for this run
    (written so into the dump: a result records what ran): exact with n = 1024 where the exact
    drift reaches, else sampled with n = 8192 (another engine's dump is then the one from before
    auto). The instance is frozen, so the resolved section replaces the field in place, once,
    during validation."""
    opts = cfg.diffusion
    if opts.drift != "auto" and opts.n is not None:
        return
    drift = opts.drift
    if drift == "auto":
        on = cfg.train.engine == "diffusion" and not opts.resample and not beyond_exact(cfg.model)
        drift = "exact" if on else "sampled"
    exact = drift == "exact" and cfg.train.engine == "diffusion"  # else the section is unused
    n = opts.n if opts.n is not None else (1024 if exact else 8192)
    object.__setattr__(cfg, "diffusion", opts.model_copy(update={"drift": drift, "n": n}))


def resolve_theory(cfg) -> None:
    """theory.method = "auto" and an unset theory.n become what they mean for this ODE run
    (written so into the dump, as :func:`resolve_diffusion` does): exact with n = 1024 (the η²
    term's score samples) where the quadrature reaches, else qmc with n = 8192. A whole exact
    trajectory costs 1.0–1.5× a qmc one at n = 8192 (two_phase.toml, H = 2/4/6: 17.4/18.5/28.0 s
    against 11.6/18.6/24.0 s cold, 2026-12-05) at a plateau drift error of 2e-4 against 0.067
    relative (benchmarks/bench_theory.py)."""
    opts = cfg.theory
    if opts.method != "auto" and opts.n is not None:
        return
    method = opts.method
    if method == "auto":
        method = "qmc" if beyond_exact(cfg.model) else "exact"
    n = opts.n if opts.n is not None else (1024 if method == "exact" else 8192)
    object.__setattr__(cfg, "theory", opts.model_copy(update={"method": method, "n": n}))


def theory_head_cyclic(cfg) -> bool:
    """Whether the ODE's drift samples are made head-cyclic (``theory.head_cyclic``; "auto":
    the symmetric init, or the perturbed init at task.D > theory.n); the one rule of the ODE's
    build and of its memory estimate."""
    choice, kind = cfg.theory.head_cyclic, cfg.theory.init.kind
    if choice == "auto":
        return kind == "symmetric" or (kind == "perturbed" and cfg.task.D > cfg.theory.n)
    return bool(choice)


def diffusion_head_cyclic(cfg) -> bool:
    """Whether the diffusion engine's base samples are made head-cyclic (``diffusion.head_cyclic``;
    "auto": when task.D > diffusion.n with fixed samples of a sampled drift; never with fresh
    ones, whose head asymmetry is noise that the SGD noise already counts, nor with the exact
    drift, whose samples' asymmetry is O(1/(D√n)))."""
    opts = cfg.diffusion
    choice = opts.head_cyclic
    if choice == "auto":
        return not opts.resample and opts.drift == "sampled" and cfg.task.D > opts.n
    return bool(choice)


def check_resample(opts, D: int) -> None:
    """diffusion.resample: plain Monte Carlo (the sampling noise it subtracts is that of
    independent samples), and a step's sampling noise (dt·C/n) no larger than its SGD noise
    (C/D): n ≥ D·dt."""
    if opts.drift == "exact":
        raise ValueError(
            "diffusion.resample = true takes the drift's sampling noise out of the SGD noise, and "
            'diffusion.drift = "exact" has none; fix: set diffusion.resample = false (with the '
            'exact drift, fixed samples err by O(1/(D√n)) only) or diffusion.drift = "sampled"'
        )
    if opts.sampler != "mc":
        raise ValueError(
            "diffusion.resample = true draws independent samples at every step; fix: set "
            'diffusion.sampler = "mc" (scrambled Sobol points are not independent, so their '
            "sampling noise is not the C/n that the engine subtracts)"
        )
    need = int(np.ceil(D * opts.dt))
    if opts.n < need:
        raise ValueError(
            f"diffusion.resample = true needs diffusion.n ≥ task.D·diffusion.dt = {need} (a step's "
            f"sampling noise dt·C/n must not exceed its SGD noise dt·C/D), got n = {opts.n}; fix: "
            f"raise diffusion.n to ≥ {need}, lower diffusion.dt to ≤ {opts.n / D:.3g}, or use "
            "diffusion.resample = false (fixed samples) at this D"
        )


def recorded(cfg, kind) -> dict:
    """A recorded config as it was meant: a simulation's without ``diffusion.drift`` was made
    before drift = "auto" (whose dumps name the drift of every diffusion run) and had the sampled
    drift, so it is read with drift = "sampled" (another engine's drift is unused). An ODE's
    with theory.method = "auto" (or none) was made while "auto" meant qmc (since then dumps name
    the method), so it is read as qmc at its n (8192 if unrecorded)."""
    if not isinstance(cfg, dict):
        return cfg
    if kind == "simulation" and isinstance(cfg.get("diffusion"), dict):
        cfg["diffusion"].setdefault("drift", "sampled")
    if kind == "theory":
        theory = cfg.setdefault("theory", {})
        if isinstance(theory, dict) and "sampler" not in theory:  # sampler: read as the method
            if theory.get("method", "auto") == "auto":
                theory["method"] = "qmc"
                theory.setdefault("n", 8192)
    return cfg
