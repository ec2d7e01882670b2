"""What every recipe shares: claims, the outcome of an experiment, its context, small helpers.

A recipe (``e1.py`` … ``e6.py``) is a function ``run(ctx: Context)`` that records claims, figures
and configs on ``ctx.outcome``. :class:`Context` resolves the recipe's TOML (``[experiment]``
parameters, ``[config]`` base config, ``[scale.<name>]`` overrides) and runs theory and simulation
with every resolved config kept for the report.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from headspec.conventions import results
from headspec.conventions.config import SimulateConfig, TheoryConfig, load_config, merge
from headspec.core.stats import mean_se

CONFIG_SECTIONS = ("task", "model", "train", "record", "theory")


@dataclasses.dataclass
class Claim:
    claim: str
    quantity: str
    value: str
    holds: bool | None  # None: measured, no verdict
    note: str = ""

    def __post_init__(self):
        if self.holds is not None:
            self.holds = bool(self.holds)  # NumPy booleans are not `True`


@dataclasses.dataclass
class Outcome:
    id: str
    title: str
    claims: list[Claim] = dataclasses.field(default_factory=list)
    figures: list[Path] = dataclasses.field(default_factory=list)
    configs: dict[str, dict] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None
    table: list[tuple] | None = None  # per-seed rows shown under the figures (E6)


class Context:
    """What a recipe needs: its parameters, base config, output folders, and a run helper."""

    def __init__(self, exp_id: str, spec: dict, scale: str, outdir: Path):
        self.id = exp_id
        params = dict(spec.get("experiment", {}))
        config = dict(spec.get("config", {}))
        for k, v in spec.get("scale", {}).get(scale, {}).items():
            if k in CONFIG_SECTIONS:
                config = merge(config, {k: v})
            else:
                params[k] = v
        self.params, self.config, self.spec = params, config, spec
        self.figdir = outdir / "figures"
        self.datadir = outdir / "data"
        self.figdir.mkdir(parents=True, exist_ok=True)
        self.datadir.mkdir(parents=True, exist_ok=True)
        self.outcome = Outcome(exp_id, params.get("title", exp_id))

    def cfg(self, model, name: str, *overrides: str, extra: dict | None = None):
        base = merge(self.config, extra or {})
        if model is SimulateConfig:
            base = {k: v for k, v in base.items() if k != "theory"}
        c = load_config(model, base=base, overrides=list(overrides))
        self.outcome.configs[name] = json.loads(c.model_dump_json())
        return c

    def theory(self, name: str, *overrides: str, extra: dict | None = None):
        from headspec.conventions.runs import solve

        ds = solve(self.cfg(TheoryConfig, name, *overrides, extra=extra))
        results.save(ds, self.datadir / f"{self.id}_{name}.nc")
        return ds

    def simulate(self, name: str, *overrides: str):
        from headspec.conventions.runs import simulate

        ds = simulate(self.cfg(SimulateConfig, name, *overrides))
        path = self.datadir / f"{self.id}_{name}.nc"
        results.save(ds, path)
        return ds, path

    def figure(self, fig, name: str):
        from headspec.apps.plots import write_figure

        path = self.figdir / f"{self.id}_{name}.png"
        write_figure(fig, path, dpi=130)
        fig.clear()
        self.outcome.figures.append(path)

    def claim(self, *args, **kw):
        self.outcome.claims.append(Claim(*args, **kw))


def _fmt(x, digits=3):
    return f"{x:.{digits}g}"


def _mean_se(x):
    """Mean ± s.e. of the finite values (s.e. 0 for a single value: nothing to spread)."""
    m, se = mean_se(np.ravel(x))
    return float(m), float(se) if np.isfinite(se) or not np.isfinite(m) else 0.0


def _first_crossing(t, x, level):
    idx = np.flatnonzero(x >= level)
    return float(t[idx[0]]) if idx.size else float("nan")
