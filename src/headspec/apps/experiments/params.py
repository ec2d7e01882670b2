"""A recipe's typed parameters: one pydantic model per recipe, validated when its TOML is loaded.

A recipe's TOML has an ``[experiment]`` table of parameters and ``[scale.<name>]`` overrides (a
key there that is not a config section — task, model, train, record, theory, diffusion —
overrides the parameter). :func:`resolve` merges them for one scale and validates the result with
the recipe's model (a subclass of :class:`RecipeParams`): an unknown key, a wrong type or a value
out of bounds is a :class:`RecipeError` that names the file, the table, the field and the fix.

Where a tolerance's bound was chosen after seeing a run's result, the TOML says so in the table
``[experiment.after_data]``: the parameter's name → what was seen (e.g. ``saddle_tol = "raised
from 1 % after a first run gave 1.06 %"``). :meth:`RecipeParams.tolerance` then builds the
:class:`~headspec.apps.experiments.claims.Tolerance` with ``set_after_data`` set and that history
in its reason.

Example:
    >>> class P(RecipeParams):
    ...     seeds: int = Field(4, ge=1, description="seeds per run")
    >>> resolve({"experiment": {"title": "t", "seeds": 2}}, "quick", P, "x.toml").seeds
    2
    >>> resolve({"experiment": {"title": "t", "seeds": 0}}, "quick", P, "x.toml")
    Traceback (most recent call last):
    ...
    headspec.apps.experiments.params.RecipeError: x.toml: [experiment] seeds = 0: Input should be \
greater than or equal to 1; fix: give seeds per run (an integer ≥ 1)
"""

from __future__ import annotations

import typing
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from headspec.apps.experiments.claims import Tolerance

CONFIG_SECTIONS = ("task", "model", "train", "record", "theory", "diffusion")

# the types of many recipes' fields (each field adds its description)
Count = Annotated[int, Field(ge=1)]  # seeds, samples: at least one
Positive = Annotated[float, Field(gt=0.0)]  # times, tolerances, scales
Cosine = Annotated[float, Field(ge=-1.0, le=1.0)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class RecipeError(ValueError):
    """A recipe's TOML that cannot run: the message names the file, table, field and the fix."""


class RecipeParams(BaseModel):
    """The parameters every recipe has: its ``id`` and ``title``, and ``after_data`` (parameter →
    what was seen, for each tolerance bound chosen after seeing data)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field("", description="the experiment's id (E1 …)")
    title: str = Field("", description="the experiment's title in the report (default: its id)")
    after_data: dict[str, str] = Field(
        default_factory=dict,
        description="tolerance bounds chosen after seeing data: parameter name → what was seen",
    )

    @field_validator("after_data")
    @classmethod
    def _after_data_names_fields(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [k for k in v if k not in cls.model_fields or k in ("after_data", "id", "title")]
        if bad:
            raise ValueError(f"{bad[0]!r} is no parameter of this recipe; fix: name one of its "
                             "parameters (a tolerance bound)")  # fmt: skip
        return v

    def tolerance(self, kind: str, name: str, *, why: str, k: float = 0.0, floor: float = 0.0):
        """The :class:`Tolerance` whose bound is parameter ``name``; set after seeing data (and
        its history first in the reason) where ``[experiment.after_data]`` names it."""
        seen = self.after_data.get(name)
        text = why if seen is None else f"{seen}, for this reason: {why}"
        return Tolerance(kind, getattr(self, name), k=k, floor=floor, why=text,
                         set_after_data=seen is not None)  # fmt: skip


def split_spec(spec: dict, scale: str) -> tuple[dict, dict, dict]:
    """(parameters, base config, where each parameter was set) of a recipe's TOML at ``scale``."""
    from headspec.conventions.config import merge

    params = dict(spec.get("experiment", {}))
    where = dict.fromkeys(params, "[experiment]")
    config = dict(spec.get("config", {}))
    for k, v in spec.get("scale", {}).get(scale, {}).items():
        if k in CONFIG_SECTIONS:
            config = merge(config, {k: v})
        else:
            params[k] = v
            where[k] = f"[scale.{scale}]"
    return params, config, where


def resolve(spec: dict, scale: str, model: type[RecipeParams], file: str) -> RecipeParams:
    """The recipe's parameters at ``scale``, validated by ``model``; a :class:`RecipeError` names
    the first bad field, the table that set it and the fix."""
    params, _, where = split_spec(spec, scale)
    try:
        return model.model_validate(params)
    except ValidationError as e:
        raise RecipeError(_message(e, model, where, file, scale)) from None


def _message(e: ValidationError, model, where: dict, file: str, scale: str) -> str:
    err = e.errors()[0]
    name = str(err["loc"][0]) if err["loc"] else ""
    field = model.model_fields.get(name)
    table = where.get(name, f"[experiment] (or [scale.{scale}])")
    if err["type"] == "extra_forbidden":
        known = ", ".join(k for k in model.model_fields if k not in ("id", "after_data"))
        return (f"{file}: {table} has an unknown parameter {name!r}; fix: remove it or use one "
                f"of {known}")  # fmt: skip
    if err["type"] == "missing":
        what = field.description if field is not None else name
        return f"{file}: [experiment] lacks {name!r}; fix: add {name} = … ({what})"
    # the field and the positions in it (a union's branch names are left out)
    loc = ".".join(str(x) for x in err["loc"] if isinstance(x, int) or x in model.model_fields)
    got = f" = {err['input']!r}" if "input" in err and not isinstance(err["input"], dict) else ""
    msg = err["msg"].removeprefix("Value error, ")
    if "fix:" in msg:
        return f"{file}: {table} {loc}{got}: {msg}"
    what = f"{field.description} ({_bounds(field)})" if field is not None else "a valid value"
    return f"{file}: {table} {loc}{got}: {msg}; fix: give {what}"


def _type_text(t) -> str:
    """A type annotation in words: list[Literal["a", "b"]] → 'a list of "a" or "b"'."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Literal:
        return " or ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin is list:
        return "a list, each " + _type_text(args[0])
    if origin is tuple:
        return "(" + ", ".join(_type_text(a) for a in args) + ")"
    if origin is dict:
        return f"a table of {_type_text(args[1]).removeprefix('a ')}s by {_type_text(args[0])}"
    if args:  # a union
        return " or ".join(_type_text(a) for a in args if a is not type(None)) + (
            " (or left out)" if type(None) in args else "")  # fmt: skip
    return {int: "an integer", float: "a number", str: "a text", bool: "true or false",
            dict: "a table"}.get(t, getattr(t, "__name__", str(t)))  # fmt: skip


def _bounds(field) -> str:
    kind = _type_text(field.annotation)
    parts = []
    for m in field.metadata:
        for attr, sym in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            v = getattr(m, attr, None)
            if v is not None:
                parts.append(f"{sym} {v:g}" if isinstance(v, int | float) else f"{sym} {v}")
    return kind + (" " + " and ".join(parts) if parts else "")
