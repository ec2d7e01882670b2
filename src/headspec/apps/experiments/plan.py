"""What a reproduction will run and what it will cost, before anything runs (``headspec
reproduce --dry-run``).

Every recipe declares its runs (``plan`` in :func:`~headspec.apps.experiments.registry.recipe`):
:func:`planned` resolves them at a scale with a context that writes nothing, and :func:`estimate`
prices each with :func:`headspec.conventions.cost.seconds` (one core of the reference machine).
Pruning, the recipes' own work that grows fastest (H² per path step), is priced per run
(:attr:`PricedRun.analysis`, with :func:`headspec.conventions.cost.prune_terms`); the rest of
their work (fixed points, saddles, figures) is not: measured, it added 42 % to the runs' CPU at
quick scale and 9.5 % at the overnight scale.

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
from headspec.apps.experiments.runner import find_recipe, load_spec
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
    analysis: float = 0.0  # CPU seconds of the recipe's own work on it (pruning), reused or not


def planned(exp_id: str, scale: str, folder: Path | None = None,
            outdir: Path = Path("report")) -> list[tuple[Run, Any]]:  # fmt: skip
    """The runs recipe ``exp_id`` asks for at ``scale``, each with its resolved config (its ODEs'
    starts point into ``outdir/data``, as a reproduction into ``outdir`` would)."""
    return _planned(exp_id, scale, folder, outdir)[1]


def _planned(exp_id, scale, folder, outdir) -> tuple[Context, list[tuple[Run, Any]]]:
    r = find_recipe(exp_id)
    if r.plan is None:
        raise ValueError(f"recipe {exp_id} declares no plan of its runs")
    ctx = Context(exp_id, load_spec(exp_id, folder), scale, Path(outdir), params=r.params,
                  file=r.file, dry=True)  # fmt: skip
    return ctx, ctx.planned(r.plan(ctx))


def _analysis(params, cfg) -> float:
    """CPU seconds of a recipe's own work on one run: pruning every seed (recipes whose
    parameters are :class:`~headspec.apps.experiments.pruning.PruneParams`), else 0."""
    from headspec.apps.experiments.pruning import PruneParams

    if not isinstance(params, PruneParams):
        return 0.0
    work = cost.prune_terms(cfg, params.n, 1 + params.random_orders)
    return float(sum(cost.PER_UNIT[k] * v for k, v in work.items()))


def estimate(ids=None, scale: str = "quick", folder: Path | None = None,
             outdir: Path = Path("report")) -> dict[str, list | None]:  # fmt: skip
    """Recipe id → its :class:`PricedRun` list at ``scale`` (every registered recipe by default;
    ``outdir`` as in :func:`planned`), or None for a recipe that declares no plan."""
    out = {}
    for exp_id in ids or RECIPES:
        if find_recipe(exp_id).plan is None:
            out[exp_id] = None
            continue
        ctx, runs = _planned(exp_id, scale, folder, outdir)
        out[exp_id] = [PricedRun(r.name, r.kind, c, cost.seconds(r.kind, c),
                                 _analysis(ctx.params, c)) for r, c in runs]  # fmt: skip
    return out
