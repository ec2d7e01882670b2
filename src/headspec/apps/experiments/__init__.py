"""The paper's findings E1–E7 (SPEC §7) as runnable recipes, and the report that collects them.

Each experiment reads its recipe ``recipes/eN_*.toml`` (shipped with the package): an
``[experiment]`` table of parameters, a ``[config]`` table (the base task/model/train/record/theory
config) and ``[scale.smoke]`` (tests) / ``[scale.quick]`` / ``[scale.full]`` overrides. A recipe
(``e1.py`` … ``e7.py``, each a ``run(ctx)``) records on an :class:`Outcome`: claims as data (the
measured value ± s.e. and the tolerance that decides it, with its reason; the verdict is computed,
see ``claims``), figures with simulation and theory side by side, and every resolved config it
ran. :func:`reproduce` runs them (runs resumable, on Dask at full scale), isolates failures, and
writes ``report/index.md``, ``index.html`` and ``outcomes.json``.

Modules: ``claims`` (Claim, Tolerance: a claim as data and its verdict), ``base`` (Outcome,
Context, Run, helpers), ``e1`` … ``e7`` (the recipes), ``annealed`` (E3's and E4's "reaches R_B"
with an annealed η), ``runner`` (recipe files, run one or all), ``report`` (Markdown report, its
HTML rendering, ``outcomes.json`` and :func:`read_outcomes`).
"""

from collections.abc import Callable

from headspec.apps.experiments import e1, e2, e3, e4, e5, e6, e7
from headspec.apps.experiments.base import CONFIG_SECTIONS, Context, Outcome, Run
from headspec.apps.experiments.claims import Claim, Tolerance
from headspec.apps.experiments.e1 import run as run_e1
from headspec.apps.experiments.e2 import run as run_e2
from headspec.apps.experiments.e3 import run as run_e3
from headspec.apps.experiments.e4 import run as run_e4
from headspec.apps.experiments.e5 import run as run_e5
from headspec.apps.experiments.e6 import run as run_e6
from headspec.apps.experiments.e7 import run as run_e7
from headspec.apps.experiments.report import environment, read_outcomes, to_html, write_report
from headspec.apps.experiments.runner import (
    EXPERIMENT_FILES,
    SCALES,
    TEST_SCALE,
    experiments_dir,
    reproduce,
    run_experiment,
)

# The recipe of each experiment id; the runner reads it from here at call time.
RECIPES: dict[str, Callable[[Context], None]] = {
    "E1": e1.run, "E2": e2.run, "E3": e3.run, "E4": e4.run, "E5": e5.run, "E6": e6.run,
    "E7": e7.run,
}  # fmt: skip

__all__ = [
    "CONFIG_SECTIONS",
    "EXPERIMENT_FILES",
    "RECIPES",
    "SCALES",
    "TEST_SCALE",
    "Claim",
    "Context",
    "Outcome",
    "Run",
    "Tolerance",
    "environment",
    "experiments_dir",
    "read_outcomes",
    "reproduce",
    "run_e1",
    "run_e2",
    "run_e3",
    "run_e4",
    "run_e5",
    "run_e6",
    "run_e7",
    "run_experiment",
    "to_html",
    "write_report",
]
