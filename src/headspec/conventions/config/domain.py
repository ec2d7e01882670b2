"""The diffusion engine's domain of validity, checked on a SimulateConfig
(:mod:`headspec.dynamics.engines.diffusion` says why)."""

from __future__ import annotations

import math

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
