"""Loading configs: TOML files, dotted ``--set`` overrides and readable validation errors.

Values of overrides are parsed as TOML values — never evaluated. A bare word (``softmax1``) is
taken as text only for a field that takes text; any other value that is not TOML is refused.

Example:
    >>> from headspec.conventions.config import BayesRunConfig
    >>> cfg = load_config(BayesRunConfig, overrides=["task.L=20", "bayes.samples=1000"])
    >>> cfg.task.L, cfg.bayes.samples
    (20, 1000)
"""

from __future__ import annotations

import copy
import re
import stat
import tomllib
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ValidationError

from headspec.conventions.config.base import KIND_TAGS, KINDS_BY_TABLE, LATENT_KINDS, ConfigError

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
        if p in KIND_TAGS:
            continue
        field = model.model_fields.get(p)
        if field is None:
            return []
        candidates = models_in(field.annotation)
        kind = next((q for q in loc if q in KIND_TAGS), None)
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


# the last part of the location of an error in one member of a union (``float | int``,
# ``Literal["auto"] | bool``): pydantic names the member, e.g. "literal['auto']" or "bool"
_UNION_MEMBER = re.compile(r"(literal|list|dict|tuple|set)\[.*\]|bool|int|float|str|none")


def _merge_unions(errors: list[dict]) -> list[dict]:
    """One error per field for a value that fits no member of a union: ``x.float: not a number``
    and ``x.int: not an integer`` become ``x: Input should be a valid number or a valid
    integer`` (and just "a valid number" where float and int are the members)."""
    merged: list[dict] = []
    for e in errors:
        loc = tuple(e["loc"])
        if not (loc and isinstance(loc[-1], str) and _UNION_MEMBER.fullmatch(loc[-1])):
            merged.append(e)
            continue
        want = e["msg"].removeprefix("Input should be ")
        last = merged[-1] if merged else None
        if last and last.get("union") and last["loc"] == loc[:-1] and last["input"] is e["input"]:
            last["union"].append((e["type"], want))
        else:
            merged.append({**e, "loc": loc[:-1], "union": [(e["type"], want)]})
    for e in merged:
        members = e.pop("union", None)
        if members is None or len(members) == 1:
            continue
        types = {t for t, _ in members}
        if types <= {"float_type", "int_type"}:  # a number of either kind
            e.update(type="float_type", msg="Input should be a valid number")
        else:
            wants = " or ".join(dict.fromkeys(w for _, w in members))
            e.update(
                type="union", msg=f"Input should be {wants}", ctx={"fix": f"fix: give {wants}"}
            )
    return merged


def format_validation_error(err: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line per problem: ``field.path: message; fix: …``."""
    lines = []
    for e in _merge_unions(err.errors(include_url=False)):
        loc = [str(p) for p in e["loc"] if str(p) not in KIND_TAGS]
        where = ".".join(loc) or "(config)"
        msg = e["msg"].removeprefix("Value error, ")
        typ = e["type"]
        ctx = e.get("ctx") or {}
        hint = _HINTS.get(typ, ctx.get("fix", ""))
        if typ in ("union_tag_invalid", "union_tag_not_found"):
            kinds = ", ".join(KINDS_BY_TABLE.get(loc[-1] if loc else "", LATENT_KINDS))
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
        elif typ in ("float_type", "int_type") and isinstance(e.get("input"), bool | str):
            number, example = (
                ("a number", "0.5") if typ == "float_type" else ("a whole number", "3")
            )
            hint = (
                f"fix: give {number} (true and false are not numbers)"
                if isinstance(e["input"], bool)
                else f"fix: give {number} without quotes, e.g. {example}"
            )
        elif "fix:" in msg:
            hint = ""
        got = "" if typ in ("missing", "value_error") else f" (got {e.get('input')!r})"
        if typ == "extra_forbidden":
            got = ""
        # a check of a whole (sub)config names its fields itself: no "(config): " or "task: "
        named = not loc or msg.startswith((f"{where}.", f"{where} "))
        lines.append(
            ("" if named else f"{where}: ") + f"{msg}{got}" + (f"; {hint}" if hint else "")
        )
    return "\n".join(lines)


MAX_CONFIG_BYTES = 2**20  # a config or sweep spec is a few kB; /dev/zero would never end


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file (a regular file of at most 1 MiB); missing files, folders, devices,
    pipes, larger files and syntax errors become :class:`ConfigError`."""
    path = Path(path)
    try:
        mode = path.stat().st_mode  # before opening: opening a pipe waits for a writer
        if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            raise ConfigError(
                f"config {str(path)!r} is not a regular file (a device, pipe or socket); "
                f"fix: give a TOML file"
            )
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"config {str(path)!r} is larger than {MAX_CONFIG_BYTES // 2**20} MiB, too large "
                f"for a config; fix: give a TOML config file (a few kB)"
            )
        if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise ConfigError(
                f"{path}: starts with a UTF-16 byte-order mark: the file is UTF-16, TOML is UTF-8; "
                "fix: save it as UTF-8"
            )
        # A UTF-8 byte-order mark (as some Windows editors write) is accepted and skipped: TOML
        # itself does not allow one, and tomllib calls it "invalid statement at line 1"
        return tomllib.loads(raw.decode().removeprefix("\ufeff"))
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


def takes_text(model: type[BaseModel] | None, path: list[str]) -> bool | None:
    """Whether the config field at ``path`` takes text (a string, or one of some words such as
    an activation name): True or False, or None where ``path`` is not a field of ``model``."""
    from typing import Literal, Union, get_args, get_origin

    def models_in(annotation) -> list[type[BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for a in get_args(annotation) for m in models_in(a)]

    def is_text(annotation) -> bool:
        origin = get_origin(annotation)
        if origin is Literal:
            return any(isinstance(a, str) for a in get_args(annotation))
        if origin is Union or type(annotation).__name__ == "UnionType" or origin is Annotated:
            return any(is_text(a) for a in get_args(annotation))
        return annotation is str

    if model is None:
        return None
    annotations: list[Any] = [model]
    for p in path:
        annotations = [
            m.model_fields[p].annotation
            for a in annotations
            for m in models_in(a)
            if p in m.model_fields
        ]
        if not annotations:
            return None
    return any(is_text(a) for a in annotations)


_TOML_FIX = (
    'fix: write a TOML value — quote text ("softmax1"), numbers as 0.5 or 1e-3, lists as '
    '[1.0, 2.0], tables as {kind = "spike", a = [2.0]}'
)


def parse_value(
    raw: str, path: list[str], is_text: Callable[[list[str]], bool | None] | None, what: str
) -> Any:
    """Parse ``raw`` as a TOML value. Text that is not TOML (a bare word such as ``softmax1``) is
    taken as that text only where ``is_text(path)`` says the field takes text, or where the key is
    not a field at all (validation then names the unknown key); anything else is refused."""
    raw = raw.strip()
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError as e:
        text = None if is_text is None else is_text(path)
        if text or (text is None and is_text is not None):
            return raw
        reason = str(e).split(" (at ")[0].lower()
        raise ConfigError(
            f"{'.'.join(path)}: {raw!r} is not a TOML value ({reason}) in {what}; {_TOML_FIX}"
        ) from None


def split_key(key: str) -> list[str]:
    """A dotted key as TOML reads it: ``config."model.activation"`` → ["config",
    "model.activation"] (a quoted part keeps its dots); a key TOML cannot read is split at
    every dot.

    >>> split_key('config."model.activation"'), split_key("task.latent.a")
    (['config', 'model.activation'], ['task', 'latent', 'a'])
    """
    try:
        node = tomllib.loads(f"{key.strip()} = 0")
    except tomllib.TOMLDecodeError:
        return [p.strip() for p in key.strip().split(".")]
    path = []
    while isinstance(node, dict) and len(node) == 1:
        ((k, node),) = node.items()
        path.append(k)
    return path


def _split_assignment(item: str) -> tuple[str, str]:
    """``KEY=VALUE`` split at the first '=' outside a quoted part of KEY."""
    quote = None
    for i, c in enumerate(item):
        if quote:
            quote = None if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c == "=":
            return item[:i], item[i + 1 :]
    return item.split("=", 1)  # type: ignore[return-value]


def parse_override(
    item: str, is_text: Callable[[list[str]], bool | None] | None = None, what: str | None = None
) -> tuple[list[str], Any]:
    """``a.b.c=VALUE`` → (["a", "b", "c"], value); VALUE is a TOML value (see :func:`parse_value`:
    a bare word only where ``is_text`` says the field takes text)."""
    what = what or f"override {item!r}"
    if "=" not in item:
        raise ConfigError(f"{what} has no '='; fix: write it as key.path=value")
    key, raw = _split_assignment(item)
    path = split_key(key)
    if not all(path):
        raise ConfigError(f"{what} has an empty key; fix: write it as key.path=value")
    return path, parse_value(raw, path, is_text, what)


def merge(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Recursively lay ``new`` over ``base``. A table that names its ``kind`` (a latent law, a
    schedule, an init) is replaced whole: a spike law does not inherit the atoms of a default
    discrete law, nor a discrete law given by its atoms the default's probs. A table without
    ``kind`` (e.g. ``[task.latent] scale = 2``) changes only the keys it gives."""
    out = dict(base)
    for k, v in new.items():
        old = out.get(k)
        if isinstance(v, dict) and isinstance(old, dict) and "kind" not in v:
            out[k] = merge(old, v)
        else:
            out[k] = v
    return out


def apply_overrides(
    data: dict[str, Any],
    overrides: list[str],
    model: type[BaseModel] | None = None,
    is_text: Callable[[list[str]], bool | None] | None = None,
) -> dict[str, Any]:
    """Set dotted keys in a nested dict (new nested tables are created as needed).

    A table value (``task.latent={kind="spike", a=[1.0]}``) replaces that table whole; setting
    a ``kind`` to a new value empties its table; any other value is set in place. Values are TOML
    values; a bare word (``model.activation=softmax1``) is text only where the field of ``model``
    takes text (or ``is_text(path)`` says so), and is refused otherwise.
    """
    if is_text is None and model is not None:
        is_text = partial(takes_text, model)
    for item in overrides:
        path, value = parse_override(item, is_text)
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
    sets: Mapping[str, Any] | None = None,
) -> T:
    """Build a validated config: defaults, then ``base`` (a dict), the TOML file, ``sets`` (typed
    values by dotted key, ``{"model.H": 8}``: the rules of :func:`apply_overrides` without the
    parsing), then the overrides (``--set`` text)."""
    data = model.model_construct().model_dump() if _has_defaults(model) else {}
    if base is not None:
        data = merge(data, base)
    if path is not None:
        data = merge(data, read_toml(path))
    for key, value in (sets or {}).items():
        data = set_key(data, key.split("."), copy.deepcopy(value), what=f"setting {key!r}")
    data = apply_overrides(data, list(overrides or []), model)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, model)) from None


def _has_defaults(model) -> bool:
    return all(not f.is_required() for f in model.model_fields.values())
