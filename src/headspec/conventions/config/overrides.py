"""Loading configs: TOML files, dotted ``--set`` overrides and readable validation errors.

Values of overrides are parsed as TOML values — never evaluated.

Example:
    >>> from headspec.conventions.config import BayesRunConfig
    >>> cfg = load_config(BayesRunConfig, overrides=["task.L=20", "bayes.samples=1000"])
    >>> cfg.task.L, cfg.bayes.samples
    (20, 1000)
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from headspec.conventions.config.base import _KINDS, _TAGS, LATENT_KINDS, ConfigError

T = TypeVar("T", bound=BaseModel)

_HINTS = {
    "missing": "fix: add this field",
    "finite_number": "fix: use a finite number (nan and inf are not allowed)",
    "int_type": "fix: give a whole number",
    "int_parsing": "fix: give a whole number",
    "int_from_float": "fix: give a whole number",
    "float_type": "fix: give a number",
    "float_parsing": "fix: give a number",
    "list_type": "fix: give a list, e.g. [1.0, 0.0]",
    "too_short": "fix: give at least one entry",
}
_TABLE_HINT = 'fix: give a table of keys, e.g. {kind = "spike", a = [2.0]}'


def _allowed_keys(model: type[BaseModel] | None, loc: tuple) -> list[str]:
    """The keys a config table accepts, found by walking ``loc`` (without its last entry)."""
    from typing import get_args

    def models_in(annotation):
        args = get_args(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for a in args for m in models_in(a)]

    for p in loc[:-1]:
        if model is None or not isinstance(p, str):
            return []
        if p in _TAGS:
            continue
        field = model.model_fields.get(p)
        if field is None:
            return []
        candidates = models_in(field.annotation)
        kind = next((q for q in loc if q in _TAGS), None)
        model = next(
            (
                m
                for m in candidates
                if kind is None
                or m.model_fields.get("kind") is None
                or m.model_fields["kind"].default == kind
            ),
            None,
        )
    return sorted(model.model_fields) if model is not None else []


def format_validation_error(err: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line per problem: ``field.path: message; fix: …``."""
    lines = []
    for e in err.errors(include_url=False):
        loc = [str(p) for p in e["loc"] if str(p) not in _TAGS]
        where = ".".join(loc) or "(config)"
        msg = e["msg"].removeprefix("Value error, ")
        typ = e["type"]
        ctx = e.get("ctx") or {}
        hint = _HINTS.get(typ, "")
        if typ in ("union_tag_invalid", "union_tag_not_found"):
            kinds = ", ".join(_KINDS.get(loc[-1] if loc else "", LATENT_KINDS))
            verb = "set kind to" if typ == "union_tag_invalid" else "add kind ="
            hint = f"fix: {verb} one of {kinds}"
        elif typ in ("model_type", "model_attributes_type", "dict_type"):
            hint = (
                _TABLE_HINT
                if loc and loc[-1] == "latent"
                else "fix: give a table of keys (a [section] in TOML)"
            )
        elif typ == "extra_forbidden":
            msg = "unknown key"
            allowed = _allowed_keys(model, tuple(e["loc"]))
            hint = "fix: remove it or correct its spelling" + (
                f" (allowed here: {', '.join(allowed)})" if allowed else ""
            )
        elif typ in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
            op = {"greater_than_equal": "≥", "greater_than": ">", "less_than_equal": "≤"}.get(
                typ, "<"
            )
            bound = next(ctx[k] for k in ("ge", "gt", "le", "lt") if k in ctx)
            hint = f"fix: use a value {op} {bound}"
        elif typ == "literal_error":
            hint = f"fix: use one of {ctx.get('expected')}"
        elif "fix:" in msg:
            hint = ""
        got = "" if typ in ("missing", "value_error") else f" (got {e.get('input')!r})"
        if typ == "extra_forbidden":
            got = ""
        lines.append(f"{where}: {msg}{got}" + (f"; {hint}" if hint else ""))
    return "\n".join(lines)


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file; missing files and syntax errors become :class:`ConfigError`."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(
            f"config file {str(path)!r} does not exist; fix: check the path"
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"config {str(path)!r} is a folder; fix: give a TOML file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e}); fix: correct the syntax") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file; fix: give a TOML file") from None


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b.c=VALUE`` → (["a", "b", "c"], value); VALUE is a TOML value or else a bare string."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} has no '='; fix: write it as key.path=value")
    key, raw = item.split("=", 1)
    path = [p.strip() for p in key.strip().split(".")]
    if not all(path):
        raise ConfigError(f"override {item!r} has an empty key; fix: write it as key.path=value")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return path, value


def merge(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Recursively lay ``new`` over ``base``. A table whose ``kind`` changes is replaced whole
    (a spike law does not inherit the atoms of a default discrete law)."""
    out = dict(base)
    for k, v in new.items():
        old = out.get(k)
        if (
            isinstance(v, dict)
            and isinstance(old, dict)
            and v.get("kind", old.get("kind")) == old.get("kind")
        ):
            out[k] = merge(old, v)
        else:
            out[k] = v
    return out


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Set dotted keys in a nested dict (new nested tables are created as needed).

    A table value (``task.latent={kind="spike", a=[1.0]}``) replaces that table whole; setting
    a ``kind`` to a new value empties its table; any other value is set in place.
    """
    for item in overrides:
        path, value = parse_override(item)
        data = set_key(data, path, value, what=f"override {item!r}")
    return data


def set_key(data: dict[str, Any], path: list[str], value: Any, what: str = "key") -> dict[str, Any]:
    """Set one dotted key (as a list of parts) to a parsed value, with the rules of
    :func:`apply_overrides`; returns the updated dict (``data`` may be modified)."""
    node = data
    for i, p in enumerate(path[:-1]):
        node = node.get(p, {})
        if not isinstance(node, dict):
            where = ".".join(path[: i + 1])
            raise ConfigError(f"{what}: {where} is a value, not a table; fix: check the key path")
    if isinstance(value, dict):  # a table given whole replaces the table
        node = data
        for p in path[:-1]:
            node = node.setdefault(p, {})
        node[path[-1]] = value
        return data
    if path[-1] == "kind":
        return _set_kind(data, path, value)
    patch: Any = value
    for p in reversed(path):
        patch = {p: patch}
    return merge(data, patch)


def _set_kind(data, path, value):
    """Setting ``…kind`` to a new value starts that table afresh (other keys no longer apply)."""
    node = data
    for p in path[:-2]:
        node = node.setdefault(p, {})
    table = node.get(path[-2])
    if not isinstance(table, dict) or table.get("kind") != value:
        node[path[-2]] = {"kind": value}
    return data


def load_config(
    model: type[T],
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    base: dict[str, Any] | None = None,
) -> T:
    """Build a validated config: defaults, then ``base`` (a dict), the TOML file, the overrides."""
    data = model.model_construct().model_dump() if _has_defaults(model) else {}
    if base is not None:
        data = merge(data, base)
    if path is not None:
        data = merge(data, read_toml(path))
    data = apply_overrides(data, list(overrides or []))
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, model)) from None


def _has_defaults(model) -> bool:
    return all(not f.is_required() for f in model.model_fields.values())
