"""The recipe registry: the one place a recipe is listed.

A recipe module (``e1.py`` … in this package) registers its ``run(ctx)`` with the decorator
:func:`recipe`, naming its id, its TOML (in ``recipes/``) and its parameter model::

    @recipe("E8", "e8_signal.toml", Params, plan=runs)
    def run(ctx: Context): ...

``plan(ctx)`` lists every run the recipe will ask :meth:`Context.runs` for, from its parameters
alone (``headspec reproduce --dry-run`` prices them before anything runs; a test checks that the
smoke reproduction ran exactly the planned runs, with the planned configs).

The package imports every module named ``e<number>`` (:func:`load_all`), so adding a recipe is one
module and one TOML: the runner, ``reproduce --only`` and the tests read :data:`RECIPES`, ordered
by number (E1, E2, …, E10).

Studies (:mod:`headspec.apps.studies`: longer measurements beside the paper's findings, run by
``headspec study NAME``) are recipes of a second table, :data:`STUDIES`, registered by
``@study("escape_time", "escape_time.toml", Params, plan=runs)``; their TOMLs are in that
package's ``recipes/`` folder. The runner finds a name in either table.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from headspec.apps.experiments.params import RecipeParams

if TYPE_CHECKING:
    from headspec.apps.experiments.base import Context, Run

_MODULE = re.compile(r"e\d+")


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A registered recipe: ``id`` ("E1"), ``file`` (its TOML in ``recipes/``), ``run`` (the
    function of a :class:`~headspec.apps.experiments.base.Context`), ``params`` (its model) and
    ``plan`` (the runs it asks for, without running them); ``package``: the package whose
    ``recipes/`` folder holds ``file``."""

    id: str
    file: str
    run: Callable[[Context], None]
    params: type[RecipeParams] = RecipeParams
    plan: Callable[[Context], list[Run]] | None = None
    package: str = "headspec.apps.experiments"


RECIPES: dict[str, Recipe] = {}
STUDIES: dict[str, Recipe] = {}  # filled by importing headspec.apps.studies


def _number(exp_id: str) -> tuple[int, str]:
    m = re.fullmatch(r"[A-Za-z]+(\d+)", exp_id)
    return (int(m.group(1)) if m else 10**9, exp_id)


def recipe(
    exp_id: str,
    file: str,
    params: type[RecipeParams] = RecipeParams,
    plan: Callable[[Context], list[Run]] | None = None,
):
    """Register the decorated ``run(ctx)`` as recipe ``exp_id`` with TOML ``file`` (and ``plan``,
    the runs it asks for)."""
    return _register(RECIPES, exp_id, file, params, plan, "headspec.apps.experiments")


def study(
    name: str,
    file: str,
    params: type[RecipeParams] = RecipeParams,
    plan: Callable[[Context], list[Run]] | None = None,
):
    """Register the decorated ``run(ctx)`` as study ``name`` (TOML ``file`` in
    ``headspec/apps/studies/recipes/``)."""
    if name in RECIPES:
        raise ValueError(f"study {name!r} has a recipe's name")
    return _register(STUDIES, name, file, params, plan, "headspec.apps.studies")


def _register(table: dict[str, Recipe], exp_id, file, params, plan, package):
    def register(run: Callable[[Context], None]):
        old = table.get(exp_id)
        if old is not None and (old.run.__module__, old.run.__qualname__) != (
            run.__module__,
            run.__qualname__,
        ):  # fmt: skip  (a module reloaded registers the same function again)
            raise ValueError(f"recipe {exp_id} is registered twice ({old.run.__module__})")
        table[exp_id] = Recipe(exp_id, file, run, params, plan, package)
        for k in sorted(table, key=_number):  # keep the table in the order of the numbers
            table[k] = table.pop(k)
        return run

    return register


def load_all() -> dict[str, Recipe]:
    """Import every recipe module of the package (``e<number>.py``); returns :data:`RECIPES`."""
    import headspec.apps.experiments as pkg

    for m in pkgutil.iter_modules(pkg.__path__):
        if _MODULE.fullmatch(m.name):
            importlib.import_module(f"{pkg.__name__}.{m.name}")
    return RECIPES
