"""The base of every config: strict pydantic models, the error type, shared field types."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict

PositiveInt = Annotated[int, Strict(), Field(ge=1)]
Vector = Annotated[list[float], Field(min_length=1)]

LATENT_KINDS = ("spike", "flipped_spike", "discrete", "gaussian")
SCHEDULE_KINDS = ("constant", "inverse_time")
INIT_KINDS = ("perturbed", "symmetric", "given", "simulation")
KINDS_BY_TABLE = {"latent": LATENT_KINDS, "schedule": SCHEDULE_KINDS, "init": INIT_KINDS}
KIND_TAGS = frozenset(LATENT_KINDS + SCHEDULE_KINDS + INIT_KINDS)


class ConfigError(ValueError):
    """A config could not be loaded or is invalid; the message names the field and the fix."""


class StrictModel(BaseModel):
    """Base of all configs: unknown keys and nan/inf are refused; instances are immutable.

    Strict types: a number field takes numbers only (a whole number where a float is expected,
    but not true/false or "0.5"), a text field takes text only, a list a list.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True, strict=True)
