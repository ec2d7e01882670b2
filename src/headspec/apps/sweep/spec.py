"""The sweep spec (TOML): its ``[sweep]`` table, base config overrides and axes, validated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, Strict, ValidationError, field_validator, model_validator

from headspec.conventions.config import (
    ConfigError,
    SimulateConfig,
    StrictModel,
    TheoryConfig,
    format_validation_error,
    read_toml,
)
from headspec.conventions.config.splitmap import SplitMapConfig

# sweep kind → config model ("splitmap": one setting of the map of uneven splits per task)
MODELS = {"simulate": SimulateConfig, "theory": TheoryConfig, "splitmap": SplitMapConfig}
_Seed = Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)]


class Range(StrictModel):
    """``num`` values from ``start`` to ``stop`` inclusive, evenly or log-spaced.

    Integer ``start`` and ``stop`` give integers (rounded; repeats are refused).
    """

    start: float | int
    stop: float | int
    num: Annotated[int, Strict(), Field(ge=1, le=100_000)]
    spacing: Literal["linear", "log"] = "linear"

    @model_validator(mode="after")
    def _check(self):
        if self.spacing == "log" and (self.start <= 0 or self.stop <= 0):
            raise ValueError("a log range needs start > 0 and stop > 0; fix: use spacing='linear'")
        return self

    def values(self) -> list:
        fn = np.geomspace if self.spacing == "log" else np.linspace
        v = fn(self.start, self.stop, self.num)
        if isinstance(self.start, int) and isinstance(self.stop, int):
            return [int(x) for x in np.round(v)]
        return [float(x) for x in v]


class SweepSection(StrictModel):
    """The ``[sweep]`` table."""

    kind: Literal["simulate", "theory", "splitmap"] = Field(
        description="what each grid point runs: simulate, theory, or splitmap (every split of "
        "the heads over the law's directions, classified: the map of uneven splits)"
    )
    base: str | None = Field(None, description="base config TOML, relative to the spec file")
    out: str = Field("sweep", min_length=1, description="output folder")
    seeds: Annotated[int, Strict(), Field(ge=1)] | None = Field(
        None, description="seeds per grid point (default: the base config's)"
    )
    seed: _Seed | None = Field(None, description="first seed (default: the base config's)")
    seeds_per_task: Annotated[int, Strict(), Field(ge=1)] | None = Field(
        None, description="seeds batched with vmap in one Dask task (default: all of a point)"
    )


class SweepSpec(StrictModel):
    """A whole sweep spec file: ``[sweep]``, optional ``[config]``, ``[axes]``."""

    sweep: SweepSection
    config: dict[str, Any] = Field(default_factory=dict, description="overrides of the base")
    axes: dict[str, list[Any] | Range] = Field(
        description="dotted config key → list of values or range table"
    )

    @field_validator("axes", mode="before")
    @classmethod
    def _axes(cls, axes):
        if not isinstance(axes, dict) or not axes:
            raise ValueError('no axes; fix: add at least one, e.g. "model.H" = [2, 4]')
        out = {}
        for key, vals in axes.items():
            parts = key.split(".")
            if not all(p.strip() for p in parts):
                raise ValueError(f"axis {key!r} has an empty key part; fix: write a.b.c")
            if parts[0] in ("seed", "seeds"):
                raise ValueError(
                    f"axis {key!r}: seeds are not an axis; fix: set sweep.seeds and sweep.seed"
                )
            if isinstance(vals, dict):
                try:
                    vals = Range.model_validate(vals)
                except ValidationError as e:
                    raise ValueError(
                        f"axis {key!r}: bad range ({format_validation_error(e, Range)}); fix: "
                        'write {start = …, stop = …, num = …} (spacing = "log" optional)'
                    ) from None
            elif not isinstance(vals, list) or not vals:
                raise ValueError(
                    f"axis {key!r} needs a non-empty list of values or a range table; fix: "
                    "write [v1, v2, …] or {start = …, stop = …, num = …}"
                )
            values = vals.values() if isinstance(vals, Range) else vals
            canon = [json.dumps(v, sort_keys=True) for v in values]
            if len(set(canon)) != len(canon):
                raise ValueError(f"axis {key!r} repeats a value; fix: list each value once")
            out[key] = vals
        return out


def spec_from_dict(data: dict, where: str = "sweep spec") -> SweepSpec:
    """Validate a sweep spec given as a dict; errors become :class:`ConfigError` naming the key."""
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{where}: " + format_validation_error(e, SweepSpec)) from None


def load_spec(path: str | Path, overrides: list[str] | None = None, axes: list[str] | None = None):
    """Read and validate a sweep spec; returns the spec and the folder of the spec file.

    ``overrides`` are dotted ``key=value`` settings of the spec (``sweep.seeds=2``,
    ``config.train.T=5``); ``axes`` are ``KEY=VALUES`` items that add or replace an axis
    (``model.H=[2,4]`` or ``task.D={start=100, stop=1000, num=4, spacing="log"}``).
    """
    from headspec.conventions.config import apply_overrides, parse_value, takes_text

    path = Path(path)
    data = read_toml(path)

    def config_text(keys):  # does this key of the run config take text (a bare word)?
        sweep = data.get("sweep")
        kind = sweep.get("kind") if isinstance(sweep, dict) else None
        return takes_text(MODELS.get(kind) if isinstance(kind, str) else None, keys)

    def spec_text(keys):  # the same for a key of the spec: config.* are run-config keys
        return config_text(keys[1:]) if keys[0] == "config" else takes_text(SweepSpec, keys)

    data = apply_overrides(data, list(overrides or []), is_text=spec_text)
    for item in axes or []:
        if "=" not in item:
            raise ConfigError(f"--axis {item!r} has no '='; fix: write KEY=[v1, v2, …]")
        key, raw = item.split("=", 1)
        value = parse_value(raw, key.strip().split("."), config_text, f"--axis {item!r}")
        if not isinstance(value, list | dict):
            value = [value]
        data.setdefault("axes", {})[key.strip()] = value
    return spec_from_dict(data, str(path)), path.parent
