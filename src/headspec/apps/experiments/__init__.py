"""The paper's findings E1–E9 (SPEC §7; E8 beyond it) as runnable recipes, and their report.

Each experiment reads its recipe ``recipes/eN_*.toml`` (shipped with the package): an
``[experiment]`` table of parameters (typed: one pydantic model per recipe, see ``params``), a
``[config]`` table (the base task/model/train/record/theory config) and ``[scale.smoke]`` (tests)
/ ``[scale.quick]`` / ``[scale.full]`` overrides. A recipe (``e1.py`` … ``e8.py``, each a
``run(ctx)`` registered by ``@recipe("E1", "e1_….toml", Params)``: the registry is the only list
of recipes) records on an :class:`Outcome`: claims as data (the measured value ± s.e. and the
tolerance that decides it, with its reason; the verdict is computed, see ``claims``), figures with
simulation and theory side by side, and every resolved config it ran. :func:`reproduce` runs them
(runs resumable, on Dask at full scale), isolates failures, and writes ``report/index.md``,
``index.html`` and ``outcomes.json``.

Modules: ``claims`` (Claim, Tolerance: a claim as data and its verdict), ``params`` (a recipe's
typed parameters, RecipeError), ``registry`` (``@recipe``, RECIPES), ``base`` (Outcome,
Context, Run, helpers), ``e1`` … ``e8`` (the recipes), ``annealed`` (E3's and E4's "reaches R_B"
with an annealed η), ``runner`` (recipe files, run one or all), ``report`` (Markdown report, its
HTML rendering, ``outcomes.json`` and :func:`read_outcomes`).
"""

from headspec.apps.experiments.base import CONFIG_SECTIONS, Context, Outcome, Run
from headspec.apps.experiments.claims import Claim, Tolerance
from headspec.apps.experiments.params import RecipeError, RecipeParams
from headspec.apps.experiments.registry import RECIPES, Recipe, load_all, recipe
from headspec.apps.experiments.report import environment, read_outcomes, to_html, write_report
from headspec.apps.experiments.runner import (
    SCALES,
    TEST_SCALE,
    check,
    experiments_dir,
    reproduce,
    run_experiment,
)

load_all()  # every e<number>.py registers its recipe (the registry is the only list of them)

__all__ = [
    "CONFIG_SECTIONS",
    "RECIPES",
    "SCALES",
    "TEST_SCALE",
    "Claim",
    "Context",
    "Outcome",
    "Recipe",
    "RecipeError",
    "RecipeParams",
    "Run",
    "Tolerance",
    "check",
    "environment",
    "experiments_dir",
    "load_all",
    "read_outcomes",
    "recipe",
    "reproduce",
    "run_experiment",
    "to_html",
    "write_report",
]
