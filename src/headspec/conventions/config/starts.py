"""Where runs start: SGD's random or given start (``init`` of a simulate config) and the ODE's
initial states (``theory.init``), with the checks that a given state's keys exist."""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, Strict, field_validator

from headspec.conventions.config.base import StrictModel, Vector
from headspec.conventions.config.latent import MAX_SIGNAL, MAX_VARIANCE, largest_entry


class RandomStart(StrictModel):
    """SPEC §4's start: keys k_h ~ N(0, model.sigma0² I_D), biases model.b0 (a new draw per
    seed)."""

    kind: Literal["random"] = "random"


class PerturbedInit(StrictModel):
    """The exact law of the finite-D initial overlaps: k_h ~ N(0, σ0² I_D) at D = task.D.

    M_hf ~ N(0, σ0²/D) and Q = MMᵀ + σ0² W/D with W ~ Wishart(D − F, I_H): a symmetric state plus a
    seeded perturbation of size σ0/√D (one per seed).
    """

    kind: Literal["perturbed"] = "perturbed"


class SymmetricInit(StrictModel):
    """M = 0, Q = σ0² I, b = b0: the D → ∞ initial state; identical heads never specialise.

    The drift's base samples are then closed under cyclic shifts of the heads (cost × H), so the
    estimated drift keeps the heads exactly identical.
    """

    kind: Literal["symmetric"] = "symmetric"


class GivenInit(StrictModel):
    """A user-given state (M, Q, b); Q and the joint covariance [[Q, M], [Mᵀ, I]] must be PSD."""

    kind: Literal["given"] = "given"
    M: Annotated[list[Vector], Field(min_length=1)] = Field(
        description="H rows of F numbers (within ±1000)"
    )
    Q: Annotated[list[Vector], Field(min_length=1)] = Field(
        description="H×H, symmetric (entries within ±10⁶)"
    )
    b: Vector | None = Field(None, description="H biases (default: model.b0 rule; within ±1000)")

    @field_validator("M", "b")
    @classmethod
    def _overlap_range(cls, v, info):
        m = largest_entry(v)
        if m > MAX_SIGNAL:
            raise ValueError(
                f"an entry of size {m:g} is outside the plausible range ±{MAX_SIGNAL:g}; fix: "
                f"give {info.field_name} of moderate size"
            )
        return v

    @field_validator("Q")
    @classmethod
    def _gram_range(cls, Q):
        m = largest_entry(Q)
        if m > MAX_VARIANCE:
            raise ValueError(
                f"an entry of size {m:g} is outside the plausible range ±{MAX_VARIANCE:g} (Q_hh = "
                f"|k_h|²/D); fix: give Q of moderate size"
            )
        return Q


class SimulationInit(StrictModel):
    """The exact initial (M, Q, b) of the seeds of a simulation result file."""

    kind: Literal["simulation"] = "simulation"
    path: str = Field(description="a result file written by `headspec simulate`")
    seeds: list[Annotated[int, Strict()]] | None = Field(
        None, description="seed ids to start from (default: all seeds of the file)"
    )


Init = Annotated[
    PerturbedInit | SymmetricInit | GivenInit | SimulationInit, Field(discriminator="kind")
]


class GivenStart(GivenInit):
    """A simulation's given start: the state (M, Q, b) of :class:`GivenInit`, realised by keys
    of dimension task.D, plus ``noise``·N(0, I_D) added to every key (a new draw per seed)."""

    noise: float = Field(
        0.0,
        ge=0,
        le=MAX_SIGNAL,
        description="N(0, noise²) added to every coordinate of every key, per seed: overlaps "
        "move by O(noise/√D), Q's diagonal by ≈ noise². Breaks the symmetry of identical "
        "heads, which SGD alone keeps (0: every seed starts at exactly the given overlaps)",
    )


def check_given(init: GivenInit, H: int, F: int, where: str) -> float:
    """A given state's shapes (model.H × F), Q's symmetry and Q − MMᵀ ⪰ 0 (keys exist)."""
    if len(init.M) != H or any(len(r) != F for r in init.M):
        raise ValueError(
            f"{where}.M must be {H}×{F} (model.H × latent F); fix: give H rows of F numbers"
        )
    if len(init.Q) != H or any(len(r) != H for r in init.Q):
        raise ValueError(f"{where}.Q must be {H}×{H}; fix: give an H×H matrix")
    if init.b is not None and len(init.b) != H:
        raise ValueError(f"{where}.b must have H = {H} entries; fix: give {H} biases")
    M, Q = np.asarray(init.M), np.asarray(init.Q)
    tol = 1e-9 * max(1.0, float(np.abs(Q).max()))
    if not np.allclose(Q, Q.T, atol=tol, rtol=0):
        raise ValueError(f"{where}.Q is not symmetric; fix: make Q[i][j] = Q[j][i]")
    w = float(np.linalg.eigvalsh(Q - M @ M.T).min())
    if w < -tol:
        raise ValueError(
            f"{where}: Q − MMᵀ is not positive semi-definite (smallest eigenvalue {w:.3g}), so "
            f"no keys have these overlaps; fix: give Q ⪰ MMᵀ (|k_h|² ≥ |M_h|²)"
        )
    return w  # the smallest eigenvalue of Q − MMᵀ (≈ 0: identical heads, or keys in span(K*))
