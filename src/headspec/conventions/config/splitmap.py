"""The config of one setting of the map of uneven splits (`headspec sweep` with kind "splitmap",
:mod:`headspec.conventions.splitmap`): the law, L, H, activation and η of one cell, and how its
splits are found and classified (:mod:`headspec.dynamics.splitmap`).

The map is a statement about the D → ∞ ODE: ``task.D`` and ``task.frame`` are not used (they are
kept so that a task table of `simulate` or `theory` can be reused as it is). The amplitude of the
law is ``task.latent.scale`` times its atoms: a sweep over ``task.latent.scale`` is a sweep over
the amplitude a (the E6 law ``flipped_spike`` with ``a = [1.0]`` makes the scale a itself).

Example:
    >>> cfg = SplitMapConfig.model_validate({"map": {"lr": 0}})
    >>> cfg.task.latent.kind, cfg.task.latent.a, cfg.model.H, cfg.map.lr, cfg.map.n
    ('flipped_spike', [2.5], 4, 0.0, 4096)
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, Strict, field_validator, model_validator

from headspec.conventions.config.base import StrictModel
from headspec.conventions.config.domain import beyond_exact
from headspec.conventions.config.latent import FlippedSpikeConfig
from headspec.conventions.config.schema import ModelConfig, TaskConfig


def _e6_task() -> TaskConfig:
    """E6's flipped spike ±2.5 (F = 1) at L = 10."""
    return TaskConfig(L=10, latent=FlippedSpikeConfig(a=[2.5]))


class MapOptions(StrictModel):
    """How one setting's splits are found and classified."""

    lr: float = Field(
        2.0,
        ge=0,
        description="learning rate η (= η_b) of the drift whose fixed points are classified; 0: "
        "gradient flow (the η-linear drift; its rates are then per unit η)",
    )
    method: Literal["exact", "qmc", "mc"] = Field(
        "qmc",
        description="how the drift's expectations are evaluated (as theory.method): qmc (every "
        "term on n scrambled Sobol samples; eigenvalues carry a standard error), exact (the "
        "η-linear drift by quadrature: no sampling error at map.lr = 0; ~10× slower) or mc",
    )
    n: Annotated[int, Strict(), Field(ge=2)] = Field(
        4096, description="base samples of the sampled terms (every term for qmc and mc)"
    )
    scales: list[Annotated[float, Field(gt=0, le=10)]] = Field(
        [1.0, 0.6, 1.5],
        min_length=1,
        description="scales of the guess (one head per group on its direction × scale), tried "
        "first to last; the first fixed point that keeps the split is the answer",
    )
    min_cos: float = Field(
        0.5, gt=0, le=1, description="a head counts on a direction with at least this cosine"
    )
    margin: float = Field(
        0.1, ge=0, lt=1, description="… and ahead of every other direction's cosine by this much"
    )
    candidates: Literal["splits", "arrangements"] = Field(
        "splits",
        description="what is classified: splits (every split of the heads over the law's atoms) "
        "or arrangements (groups on the ends of orthogonal frames of signed feature sums, and "
        "idle heads, one per class of the law's symmetries: headspec.dynamics.arrangements)",
    )
    max_groups: Annotated[int, Strict(), Field(ge=1)] | None = Field(
        None, description="arrangements: at most this many groups of heads (None: any number)"
    )
    only: list[str] | None = Field(
        None,
        min_length=1,
        description="arrangements: classify only the candidates of these names, as the map "
        'writes them (e.g. ["1(+e1+e2) 1(−e1−e2)"]: the arrangements some runs reached); None: '
        "every candidate",
    )
    idle: bool | None = Field(
        None,
        description="arrangements: include idle (switched-off) heads; None: for softmax-1 and "
        "Bayes-softmax (a softmax head always carries 1/H of the mass)",
    )
    excursions: bool = Field(
        False,
        description="from every saddle, integrate the ODE from the fixed point ± 10⁻³ along its "
        "leading mode (both sides) and record where the heads go: the end split, the time the "
        "split changes, the bump in the risk (an ODE solve per side: minutes per saddle at "
        "H = 4, L = 10)",
    )

    @field_validator("scales")
    @classmethod
    def _distinct(cls, scales):
        if len(set(scales)) != len(scales):
            raise ValueError("repeats a scale; fix: list each guess scale once")
        return scales


class SplitMapConfig(StrictModel):
    """One setting of the map of uneven splits: every split of ``model.H`` heads over the law's
    atoms, found as a fixed point of the ODE's drift at ``map.lr`` and classified."""

    task: TaskConfig = Field(default_factory=_e6_task)
    model: ModelConfig = Field(default_factory=ModelConfig)
    map: MapOptions = Field(default_factory=MapOptions)
    seed: Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)] = Field(
        0, description="scramble of the drift's Sobol samples (the random draw for mc)"
    )
    seeds: Literal[1] = Field(
        1, description="one classification per setting (a sweep's seeds must be 1)"
    )

    @model_validator(mode="after")
    def _check(self):
        law = self.task.latent
        if law.kind == "gaussian":
            raise ValueError(
                "task.latent is a Gaussian law, which has no directions to split heads over; "
                'fix: give a discrete law, e.g. task.latent = {kind = "flipped_spike", a = [2.5]}'
            )
        if law.kind == "spike":
            raise ValueError(
                "task.latent is a spike (one direction): every split puts all heads on it; fix: "
                'give a law with two or more atoms, e.g. {kind = "flipped_spike", a = [2.5]}'
            )
        if law.kind == "discrete" and len(law.atoms) < 2:
            raise ValueError(
                "task.latent has one atom: every split puts all heads on it; fix: give two or "
                "more atoms"
            )
        H = self.model.H
        if self.map.candidates == "splits" and (
            self.map.max_groups is not None
            or self.map.idle is not None
            or self.map.only is not None
        ):
            raise ValueError(
                "map.max_groups, map.idle and map.only apply to arrangements; fix: "
                'map.candidates = "arrangements", or leave them out'
            )
        if (
            self.map.candidates == "arrangements"
            and self.map.idle
            and (self.model.activation == "softmax")
        ):
            raise ValueError(
                "map.idle = true with softmax: a softmax head always carries 1/H of the mass, it "
                "cannot switch off; fix: map.idle = false (or leave it out)"
            )
        if H < 2:
            raise ValueError(f"model.H = {H}: one head has no split; fix: model.H ≥ 2")
        if self.map.method == "exact" and beyond_exact(self.model):
            raise ValueError(
                f"map.method = exact cannot integrate Bayes-softmax with model.H = {H} heads "
                "(its one normaliser couples all heads); fix: map.method = qmc, or at most 3 heads"
            )
        return self
