"""The resolved sweep: its axes and every task (a grid point's config on a block of seeds), hashed.

A task's identity is the hash of its kind and fully resolved config (:func:`config_hash`); the
sweep's identity is the hash of what defines its results (:meth:`Sweep.record`).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from headspec.apps.sweep.spec import MODELS, Range, SweepSpec
from headspec.conventions.budget import check_sweep_size, check_sweep_task
from headspec.conventions.config import (
    ConfigError,
    format_validation_error,
    merge,
    read_toml,
    set_key,
)

_RESERVED_DIMS = frozenset({"seed", "t", "t_index", "head", "head2", "feature", "atom"})


@dataclass(frozen=True)
class Axis:
    key: str  # dotted config key
    name: str  # dimension name in the collected dataset
    values: list


@dataclass(frozen=True)
class SweepTask:
    """One unit of work: a grid point's config restricted to a block of seeds."""

    point: int  # index of the grid point
    index: tuple[int, ...]  # position on the grid
    params: dict  # axis name → value
    config: Any  # validated SimulateConfig | TheoryConfig
    hash: str  # sha256 of kind + resolved config

    @property
    def file(self) -> str:
        return f"points/{self.hash[:24]}.nc"


@dataclass
class Sweep:
    """The plan of a sweep: its axes, seeds, output folder and tasks (see :func:`resolve`)."""

    kind: str
    axes: list[Axis]
    base: dict  # resolved base config (before the axes)
    seeds: int
    seed: int
    seeds_per_task: int
    out: Path
    tasks: list[SweepTask] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.axes)

    @property
    def points(self) -> list[SweepTask]:
        """The first task of every grid point."""
        return [t for t in self.tasks if t.config.seed == self.seed]

    def record(self) -> dict:
        """What defines the results (hashed): kind, base config, axes, seeds. Not the folder."""
        return {
            "kind": self.kind,
            "base": self.base,
            "axes": [{"key": a.key, "name": a.name, "values": a.values} for a in self.axes],
            "seeds": self.seeds,
            "seed": self.seed,
            "seeds_per_task": self.seeds_per_task,
        }

    @property
    def spec_hash(self) -> str:
        return _hash(self.record())


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def config_hash(kind: str, cfg) -> str:
    """Identity of a task: its kind and fully resolved config (defaults included)."""
    return _hash({"kind": kind, "config": cfg.model_dump(mode="json")})


def _axis_names(keys: list[str]) -> list[str]:
    """Last key part (``model.H`` → ``H``) unless two axes share it or it names a result dim."""
    last = [k.split(".")[-1] for k in keys]
    return [
        k.replace(".", "_") if last.count(n) > 1 or n in _RESERVED_DIMS else n
        for k, n in zip(keys, last, strict=True)
    ]


def resolve(spec: SweepSpec, root: str | Path = ".", out: str | Path | None = None) -> Sweep:
    """Every task of the sweep, each config validated (the first invalid point is reported)."""
    s = spec.sweep
    model = MODELS[s.kind]
    base: dict = model.model_construct().model_dump(mode="json")
    if s.base is not None:
        base = merge(base, read_toml(Path(root) / s.base))
    base = merge(base, _expand_dotted(spec.config))
    try:  # the base itself must be valid (with the sweep's seeds)
        base_cfg = model.model_validate(base)
    except ValidationError as e:
        raise ConfigError("base config: " + format_validation_error(e, model)) from None
    base = base_cfg.model_dump(mode="json")
    seeds = s.seeds if s.seeds is not None else base_cfg.seeds
    seed = s.seed if s.seed is not None else base_cfg.seed
    per = min(s.seeds_per_task or seeds, seeds)
    keys = list(spec.axes)
    axes = [
        Axis(k, n, v.values() if isinstance(v, Range) else list(v))
        for k, n, v in zip(keys, _axis_names(keys), spec.axes.values(), strict=True)
    ]
    sweep = Sweep(s.kind, axes, base, seeds, seed, per, Path(out if out is not None else s.out))
    n_points = math.prod(sweep.shape)  # refuse a grid too large before building its configs
    check_sweep_size(n_points, n_points * -(-seeds // per))
    blocks = [(s0, min(per, seed + seeds - s0)) for s0 in range(seed, seed + seeds, per)]
    for p, index in enumerate(np.ndindex(*sweep.shape)):
        params = {a.name: a.values[i] for a, i in zip(axes, index, strict=True)}
        data = json.loads(json.dumps(base))
        for a, i in zip(axes, index, strict=True):
            data = set_key(data, a.key.split("."), a.values[i], what=f"axis {a.key!r}")
        for s0, n in blocks:
            data = dict(data, seed=s0, seeds=n)
            try:
                cfg = model.model_validate(data)
                check_sweep_task(cfg)  # numbers, steps that never finish, memory
            except (ValidationError, ConfigError) as e:
                where = ", ".join(f"{a.key} = {json.dumps(v)}" for a, v in _pairs(axes, params))
                msg = format_validation_error(e, model) if isinstance(e, ValidationError) else e
                raise ConfigError(f"sweep point {where}: {msg}") from None
            sweep.tasks.append(SweepTask(p, tuple(int(i) for i in index), params, cfg, ""))
    sweep.tasks = [
        SweepTask(t.point, t.index, t.params, t.config, config_hash(s.kind, t.config))
        for t in sweep.tasks
    ]
    return sweep


def _pairs(axes, params):
    return [(a, params[a.name]) for a in axes]


def _expand_dotted(table: dict) -> dict:
    """``{"train.T": 5}`` (a quoted dotted key) → ``{"train": {"T": 5}}``; nested tables kept."""
    out: dict = {}
    for k, v in table.items():
        v = _expand_dotted(v) if isinstance(v, dict) else v
        parts = k.split(".")
        if len(parts) > 1:
            out = set_key(out, parts, v)  # the rules of an override (a new kind: a new table)
        else:  # a plain key of a table (e.g. the kind and atoms of "task.latent" = {…}) as it is
            old = out.get(k)
            out[k] = merge(old, v) if isinstance(old, dict) and isinstance(v, dict) else v
    return out
