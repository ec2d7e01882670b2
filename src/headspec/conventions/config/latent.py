"""Configs of the latent laws of SPEC §2; ``.build()`` makes the :mod:`headspec.core.latent` law.

Plausible ranges (refused beyond, naming the field: values this large only overflow — in float32
already above ~10^19 — and were then blamed on the learning rate): entries of θ (spike ``a``,
``atoms``, Gaussian ``mean``) and the scale c within ±:data:`MAX_SIGNAL` = 1000, also after
scaling (c·θ); variances (``var``, ``cov``) up to :data:`MAX_VARIANCE` = 10^6, also c²·Var θ.
The paper's laws have entries of 2–3 and variances of a few units.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from headspec.conventions.config.base import StrictModel, Vector

if TYPE_CHECKING:  # the JAX laws are imported only where a config is built
    from headspec.core import latent

MAX_SIGNAL = 1e3  # plausible |entries| of θ and of c·θ, and the largest scale c
MAX_VARIANCE = 1e6  # plausible variances of θ and of c·θ (standard deviations up to 1000)


def check_range(value: float, high: float, what: str, fix: str, low: float | None = None) -> float:
    """``value`` if within the plausible range [low, high] (default low = −high), else a
    ValueError naming the value, the range, what it is and the fix (the caller's field path is
    prefixed by :func:`~headspec.conventions.config.format_validation_error`)."""
    low = -high if low is None else low
    if not low <= value <= high:
        raise ValueError(
            f"{value:g} is outside the plausible range {low:g} … {high:g} ({what}); fix: {fix}"
        )
    return value


def largest_entry(values) -> float:
    """The largest |entry| of a (nested) list of numbers; 0 for None."""
    if values is None:
        return 0.0
    return float(np.abs(np.asarray(values, dtype=np.float64)).max(initial=0.0))


def _check_entries(values, name: str) -> None:
    """Every entry of θ's parameters (a, atoms, mean) within ±MAX_SIGNAL."""
    m = largest_entry(values)
    if m > MAX_SIGNAL:
        raise ValueError(
            f"{name} has an entry of size {m:g}, outside the plausible range |θ_f| ≤ "
            f"{MAX_SIGNAL:g}; fix: give entries of moderate size (the paper's are 2–3; "
            f"task.latent.scale scales them all)"
        )


class _LatentBase(StrictModel):
    scale: float = Field(
        1.0,
        ge=0,
        description="global signal strength c: θ → cθ (0 removes the signal); plausible range "
        "0 … 1000, with every entry of c·θ within ±1000 and c²·Var θ ≤ 10⁶",
    )

    @field_validator("scale")
    @classmethod
    def _scale_range(cls, scale):
        return check_range(
            scale, MAX_SIGNAL, "the signal strength c: θ → cθ", "use a scale ≤ 1000", low=0.0
        )

    @model_validator(mode="after")
    def _scaled_range(self):
        """The scaled law c·θ keeps the plausible ranges."""
        c = self.scale
        m, v = self._sizes()
        if c * m > MAX_SIGNAL:
            raise ValueError(
                f"scale·θ reaches {c * m:g} (scale {c:g} × largest entry {m:g}), outside the "
                f"plausible range |cθ_f| ≤ {MAX_SIGNAL:g}; fix: lower task.latent.scale or the "
                f"entries of θ"
            )
        if c * c * v > MAX_VARIANCE:
            raise ValueError(
                f"scale²·Var θ reaches {c * c * v:g} (scale {c:g}, largest variance {v:g}), "
                f"outside the plausible range ≤ {MAX_VARIANCE:g}; fix: lower task.latent.scale or "
                f"the variances"
            )
        return self

    def _sizes(self) -> tuple[float, float]:
        """(largest |entry| of θ's parameters, largest variance)."""
        raise NotImplementedError

    def signal_size(self) -> tuple[float, float]:
        """(largest |entry| of c·θ's parameters, largest variance of c·θ)."""
        m, v = self._sizes()
        return self.scale * m, self.scale**2 * v

    @property
    def F(self) -> int:
        raise NotImplementedError

    def build(self) -> latent.LatentLaw:
        """The JAX law, with the scale applied."""
        from headspec.core import latent  # JAX: imported only where a law is built

        return self._build(latent).scaled(self.scale)


class _VectorLaw(_LatentBase):
    """A law given by one latent vector ``a`` (spike, flipped spike): its range check and size."""

    @field_validator("a", check_fields=False)
    @classmethod
    def _a_range(cls, a):
        _check_entries(a, "a")
        return a

    def _sizes(self):
        return largest_entry(self.a), 0.0

    @property
    def F(self):
        return len(self.a)


class SpikeConfig(_VectorLaw):
    """θ = a."""

    kind: Literal["spike"] = "spike"
    a: Vector = Field(description="the fixed latent vector (length F; entries within ±1000)")

    def _build(self, latent):
        return latent.Spike(self.a)


class FlippedSpikeConfig(_VectorLaw):
    """θ = ±a with probability ½ each."""

    kind: Literal["flipped_spike"] = "flipped_spike"
    a: Vector = Field(
        description="the latent vector whose sign is flipped (length F; entries within ±1000)"
    )

    def _build(self, latent):
        return latent.FlippedSpike(self.a)


class DiscreteConfig(_LatentBase):
    """θ = atoms[j] with probability probs[j] (uniform when probs is omitted)."""

    kind: Literal["discrete"] = "discrete"
    atoms: Annotated[list[Vector], Field(min_length=1)] = Field(
        description="J atoms, each a list of F numbers (entries within ±1000)"
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
        _check_entries(atoms, "atoms")
        return atoms

    def _sizes(self):
        return largest_entry(self.atoms), 0.0

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

    def _build(self, latent):
        return latent.Discrete(self.atoms, self.probs)


class GaussianConfig(_LatentBase):
    """θ ~ N(mean, cov) (or a diagonal covariance given by var; identity if neither)."""

    kind: Literal["gaussian"] = "gaussian"
    mean: Vector = Field(description="μ, length F (entries within ±1000)")
    cov: Annotated[list[Vector], Field(min_length=1)] | None = Field(
        None, description="Σ, F×F symmetric positive semi-definite (entries within ±10⁶)"
    )
    var: Annotated[list[Annotated[float, Field(ge=0)]], Field(min_length=1)] | None = Field(
        None, description="diagonal of Σ (alternative to cov), F numbers in 0 … 10⁶"
    )

    @field_validator("mean")
    @classmethod
    def _mean_range(cls, mean):
        _check_entries(mean, "mean")
        return mean

    def _sizes(self):
        return largest_entry(self.mean), max(largest_entry(self.var), largest_entry(self.cov))

    @field_validator("var")
    @classmethod
    def _var_shape(cls, var, info: ValidationInfo):
        if var is not None and largest_entry(var) > MAX_VARIANCE:
            raise ValueError(
                f"var has an entry {largest_entry(var):g}, outside the plausible range 0 … "
                f"{MAX_VARIANCE:g}; fix: give variances of moderate size"
            )
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
        if largest_entry(C) > MAX_VARIANCE:
            raise ValueError(
                f"cov has an entry of size {largest_entry(C):g}, outside the plausible range "
                f"|Σ_ij| ≤ {MAX_VARIANCE:g}; fix: give a covariance of moderate size"
            )
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

    def _build(self, latent):
        return latent.Gaussian(self.mean, cov=self.cov, var=self.var)


LatentConfig = Annotated[
    SpikeConfig | FlippedSpikeConfig | DiscreteConfig | GaussianConfig,
    Field(discriminator="kind"),
]


def default_latent() -> DiscreteConfig:
    return DiscreteConfig(atoms=[[2.0, 0.0], [0.0, 2.0]], probs=[0.6, 0.4])
