"""Configs of the latent laws of SPEC §2; ``.build()`` makes the :mod:`headspec.core.latent` law."""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from headspec.conventions.config.base import StrictModel, Vector
from headspec.core import latent


class _LatentBase(StrictModel):
    scale: float = Field(
        1.0, ge=0, description="global signal strength c: θ → cθ (0 removes the signal)"
    )

    @property
    def F(self) -> int:
        raise NotImplementedError

    def build(self) -> latent.LatentLaw:
        """The JAX law, with the scale applied."""
        return self._build().scaled(self.scale)


class SpikeConfig(_LatentBase):
    """θ = a."""

    kind: Literal["spike"] = "spike"
    a: Vector = Field(description="the fixed latent vector (length F)")

    @property
    def F(self):
        return len(self.a)

    def _build(self):
        return latent.Spike(self.a)


class FlippedSpikeConfig(_LatentBase):
    """θ = ±a with probability ½ each."""

    kind: Literal["flipped_spike"] = "flipped_spike"
    a: Vector = Field(description="the latent vector whose sign is flipped (length F)")

    @property
    def F(self):
        return len(self.a)

    def _build(self):
        return latent.FlippedSpike(self.a)


class DiscreteConfig(_LatentBase):
    """θ = atoms[j] with probability probs[j] (uniform when probs is omitted)."""

    kind: Literal["discrete"] = "discrete"
    atoms: Annotated[list[Vector], Field(min_length=1)] = Field(
        description="J atoms, each a list of F numbers"
    )
    probs: Annotated[list[float], Field(min_length=1)] | None = Field(
        None, description="J probabilities summing to 1 (default: uniform)"
    )

    @field_validator("atoms")
    @classmethod
    def _same_length(cls, atoms):
        F = len(atoms[0])
        for j, a in enumerate(atoms):
            if len(a) != F:
                raise ValueError(
                    f"atoms[{j}] has {len(a)} entries but atoms[0] has {F}; "
                    f"fix: give every atom the same number F of entries"
                )
        return atoms

    @field_validator("probs")
    @classmethod
    def _probabilities(cls, probs, info: ValidationInfo):
        if probs is None:
            return probs
        atoms = info.data.get("atoms")
        if atoms is not None and len(probs) != len(atoms):
            raise ValueError(
                f"probs has {len(probs)} entries for {len(atoms)} atoms; "
                f"fix: give one probability per atom"
            )
        neg = [j for j, p in enumerate(probs) if p < 0]
        if neg:
            raise ValueError(
                f"probs[{neg[0]}] = {probs[neg[0]]} is negative; fix: use probabilities ≥ 0"
            )
        total = math.fsum(probs)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(
                f"probs sum to {total:g}, not 1; fix: make them sum to 1 "
                f"(or omit probs for uniform weights)"
            )
        return probs

    @property
    def F(self):
        return len(self.atoms[0])

    def _build(self):
        return latent.Discrete(self.atoms, self.probs)


class GaussianConfig(_LatentBase):
    """θ ~ N(mean, cov) (or a diagonal covariance given by var; identity if neither)."""

    kind: Literal["gaussian"] = "gaussian"
    mean: Vector = Field(description="μ, length F")
    cov: Annotated[list[Vector], Field(min_length=1)] | None = Field(
        None, description="Σ, F×F symmetric positive semi-definite"
    )
    var: Annotated[list[Annotated[float, Field(ge=0)]], Field(min_length=1)] | None = Field(
        None, description="diagonal of Σ (alternative to cov), F numbers ≥ 0"
    )

    @field_validator("var")
    @classmethod
    def _var_shape(cls, var, info: ValidationInfo):
        mean = info.data.get("mean")
        if var is not None and mean is not None and len(var) != len(mean):
            raise ValueError(
                f"var has {len(var)} entries but mean has {len(mean)}; "
                f"fix: give F = {len(mean)} variances"
            )
        return var

    @field_validator("cov")
    @classmethod
    def _cov_psd(cls, cov, info: ValidationInfo):
        mean = info.data.get("mean")
        if cov is None or mean is None:
            return cov
        F = len(mean)
        if len(cov) != F or any(len(r) != F for r in cov):
            lengths = ", ".join(str(len(r)) for r in cov)
            raise ValueError(
                f"cov has {len(cov)} rows (of lengths {lengths}) but mean has F = {F} entries; "
                f"fix: give a {F}×{F} matrix"
            )
        C = np.asarray(cov, dtype=np.float64)
        tol = 1e-9 * max(1.0, float(np.abs(C).max()))
        if not np.allclose(C, C.T, rtol=0, atol=tol):
            raise ValueError("cov is not symmetric; fix: make cov[i][j] equal cov[j][i]")
        wmin = float(np.linalg.eigvalsh(C).min())
        if wmin < -tol:
            raise ValueError(
                f"cov is not positive semi-definite (smallest eigenvalue {wmin:.3g}); "
                f"fix: give a valid covariance matrix"
            )
        return cov

    @model_validator(mode="after")
    def _one_of(self):
        if self.cov is not None and self.var is not None:
            raise ValueError("both cov and var are given; fix: give only one of them")
        return self

    @property
    def F(self):
        return len(self.mean)

    def _build(self):
        return latent.Gaussian(self.mean, cov=self.cov, var=self.var)


LatentConfig = Annotated[
    SpikeConfig | FlippedSpikeConfig | DiscreteConfig | GaussianConfig,
    Field(discriminator="kind"),
]


def _default_latent() -> DiscreteConfig:
    return DiscreteConfig(atoms=[[2.0, 0.0], [0.0, 2.0]], probs=[0.6, 0.4])
