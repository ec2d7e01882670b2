"""What a reproduction will run and what it will cost, before anything runs (``headspec
reproduce --dry-run``).

Every recipe declares its runs (``plan`` in :func:`~headspec.apps.experiments.registry.recipe`):
:func:`planned` resolves them at a scale with a context that writes nothing, and :func:`estimate`
prices each with :func:`headspec.conventions.cost.seconds` (one core of the reference machine).
The recipes' own work beside their runs (fixed points, saddles, pruning, figures) is not priced:
measured, it added 42 % to the runs' CPU at quick scale and 9.5 % at the overnight scale.

Example:
    >>> est = estimate(["E1"], "smoke")
    >>> [r.name for r in est["E1"]]
    ['simulation', 'simulation_ode']
    >>> all(r.estimate > 0 for r in est["E1"])
    True
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from headspec.apps.experiments.base import Context, Run
from headspec.apps.experiments.registry import RECIPES
from headspec.apps.experiments.runner import _recipe, load_spec
from headspec.conventions import cost

__all__ = ["PricedRun", "estimate", "planned"]


@dataclasses.dataclass(frozen=True)
class PricedRun:
    """One planned run: its name, kind, resolved config and ``estimate``, its CPU seconds on one
    core as :func:`headspec.conventions.cost.seconds` models them (nothing is timed)."""

    name: str
    kind: str
    config: Any
    estimate: float


def planned(exp_id: str, scale: str, folder: Path | None = None,
            outdir: Path = Path("report")) -> list[tuple[Run, Any]]:  # fmt: skip
    """The runs recipe ``exp_id`` asks for at ``scale``, each with its resolved config (its ODEs'
    starts point into ``outdir/data``, as a reproduction into ``outdir`` would)."""
    r = _recipe(exp_id)
    if r.plan is None:
        raise ValueError(f"recipe {exp_id} declares no plan of its runs")
    ctx = Context(exp_id, load_spec(exp_id, folder), scale, Path(outdir), params=r.params,
                  file=r.file, dry=True)  # fmt: skip
    return ctx.planned(r.plan(ctx))


def estimate(ids=None, scale: str = "quick", folder: Path | None = None,
             outdir: Path = Path("report")) -> dict[str, list | None]:  # fmt: skip
    """Recipe id → its :class:`PricedRun` list at ``scale`` (every registered recipe by default;
    ``outdir`` as in :func:`planned`), or None for a recipe that declares no plan."""
    out = {}
    for exp_id in ids or RECIPES:
        if _recipe(exp_id).plan is None:
            out[exp_id] = None
            continue
        runs = planned(exp_id, scale, folder, outdir)
        out[exp_id] = [PricedRun(r.name, r.kind, c, cost.seconds(r.kind, c)) for r, c in runs]
    return out
