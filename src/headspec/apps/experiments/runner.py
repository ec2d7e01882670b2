"""Running the recipes: find a recipe's TOML, run it with failures isolated, run them all.

The recipes are those of the registry (:data:`headspec.apps.experiments.registry.RECIPES`,
filled by the ``@recipe`` decorator of each ``e<number>.py``); :func:`check` validates every
selected recipe's parameters before anything runs.

The recipe TOMLs ship inside the package (``headspec/apps/experiments/recipes/``) and are read
with :mod:`importlib.resources`, so ``headspec reproduce`` works from any directory of an
installed package.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import threading
import time
import tomllib
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headspec.apps.experiments.base import Context, Outcome
from headspec.apps.experiments.params import RecipeError, resolve
from headspec.apps.experiments.registry import RECIPES, STUDIES, Recipe
from headspec.apps.experiments.report import write_report
from headspec.core.precision import float64_context

SCALES = ("quick", "overnight", "full")  # the scales of the claims (recipes also have "smoke")
TEST_SCALE = "smoke"  # tiny sizes, for tests: seconds per run, verdicts that mean nothing


def experiments_dir():
    """The folder of the recipe TOML files, shipped as package data (a Traversable: a Path for a
    package installed or checked out on disk)."""
    return importlib.resources.files("headspec.apps.experiments") / "recipes"


def find_recipe(exp_id: str) -> Recipe:
    # looked up at call time: replacing an entry of the registry (tests do) takes effect
    if exp_id in RECIPES:
        return RECIPES[exp_id]
    if exp_id in STUDIES:
        return STUDIES[exp_id]
    known = ", ".join([*RECIPES, *STUDIES])
    raise RecipeError(f"no recipe or study {exp_id!r}; fix: use one of {known}")


def load_spec(exp_id: str, folder=None) -> dict:
    """The TOML of recipe (or study) ``exp_id`` (from ``folder``, default: the ones shipped)."""
    r = find_recipe(exp_id)
    if folder is None:  # the recipes' folder looked up at call time (tests replace it)
        ours = r.package == "headspec.apps.experiments"
        folder = experiments_dir() if ours else importlib.resources.files(r.package) / "recipes"
    with (folder / r.file).open("rb") as f:
        return tomllib.load(f)


def check(ids, scale: str, folder=None) -> None:
    """Validate the parameters of recipes ``ids`` at ``scale``: a :class:`RecipeError` (file,
    table, field and the fix) for the first that cannot run."""
    for exp_id in ids:
        r = find_recipe(exp_id)
        try:
            spec = load_spec(exp_id, folder)
        except tomllib.TOMLDecodeError as e:
            raise RecipeError(f"{r.file}: not valid TOML ({e}); fix: correct its syntax") from None
        resolve(spec, scale, r.params, r.file)


def run_experiment(
    exp_id: str,
    scale: str,
    outdir: Path,
    folder: Path | None = None,
    client: Any = None,
    log: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> Outcome:
    """Run one experiment; an exception becomes ``Outcome.error`` (the others still run).

    ``folder``: where the recipe TOMLs are (default: the ones shipped with the package);
    ``client``, ``log``, ``stop``: see :class:`~headspec.apps.experiments.base.Context`."""
    t0 = time.perf_counter()
    try:
        r = find_recipe(exp_id)
        spec = load_spec(exp_id, folder)
        ctx = Context(exp_id, spec, scale, outdir, client=client, log=log, stop=stop,
                      params=r.params, file=r.file)  # fmt: skip
        with float64_context():  # thread-local: each recipe thread of `reproduce` enters it
            r.run(ctx)
        out = ctx.outcome
    except Exception as e:  # reported in the report, never hidden
        out = Outcome(exp_id, exp_id, error=f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
        if "ctx" in locals():
            out.title, out.configs, out.figures = (
                ctx.outcome.title,
                ctx.outcome.configs,
                ctx.outcome.figures,
            )
            out.reused, out.reused_seconds = ctx.outcome.reused, ctx.outcome.reused_seconds
    out.seconds = time.perf_counter() - t0
    return out


def reproduce(
    scale="quick",
    outdir="report",
    only=None,
    progress=None,
    scheduler: str | None = None,
    workers: int | None = None,
    security: Any = None,
    log: Callable[[str], None] | None = None,
    folder: Path | None = None,
    study: str | None = None,
) -> list[Outcome]:
    """Run every registered recipe (or ``only``) at a scale, write the report; the outcomes.

    ``study``: run that study (:data:`~headspec.apps.experiments.registry.STUDIES`) alone and
    write its report instead (``headspec study NAME``).

    Runs go to the Dask scheduler at ``scheduler`` (an address), else, at the quick and full
    scales, to a local cluster of ``workers`` single-threaded processes (default: one per core),
    so that the independent runs of a recipe use every core; they run in this process with one
    core, with ``workers=1`` and at the smoke scale (unless ``workers`` > 1 is given). Finished
    runs in ``outdir/data`` with the same config are reused: an interrupted reproduction resumes.
    Every selected recipe's parameters are validated first (:func:`check`: a
    :class:`~headspec.apps.experiments.params.RecipeError` before anything runs).

    A ``KeyboardInterrupt`` (Ctrl-C) stops the reproduction within seconds: the recipe threads
    stop at their next run (their runs in progress on a local cluster end with it), every
    finished run stays in ``outdir/data``, no report is written, and the interrupt propagates."""
    from headspec.apps.sweep.cluster import available_cores, dask_client
    from headspec.apps.sweep.manifest import folder_lock

    ids = [study] if study else list(only or RECIPES)
    named = [] if study else [i for i in ids if i in STUDIES]  # never in the paper's report
    if named:
        raise RecipeError(
            f"{named[0]!r} is a study, not one of the paper's experiments; fix: "
            f"run it with headspec study {named[0]} (reproduce(study=...))"
        )
    check(ids, scale, folder)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    outcomes = []
    n = workers or available_cores()
    use_dask = scheduler is not None or (n > 1 and (scale in SCALES or workers is not None))
    with (
        folder_lock(outdir, "headspec reproduce or study"),  # one writer per report folder
        dask_client(scheduler, workers, security)
        if use_dask
        else contextlib.nullcontext() as client,
    ):
        if client is None:
            for k, exp_id in enumerate(ids):
                if progress:
                    progress(exp_id, k, len(ids))
                outcomes.append(run_experiment(exp_id, scale, outdir, folder, client, log))
        else:  # the recipes side by side: one's analysis overlaps another's runs on the cluster
            outcomes = _concurrently(ids, scale, outdir, folder, client, log, progress)
    if progress:
        progress(None, len(ids), len(ids))
    write_report(outcomes, outdir, scale, time.perf_counter() - t0, study)
    return outcomes


def _concurrently(ids, scale, outdir, folder, client, log, progress) -> list[Outcome]:
    """Run the recipes in threads of this process, their runs on the cluster; outcomes in the
    order of ``ids``. A recipe's own work here (analysis, fixed points, pruning, figures) thus
    overlaps the other recipes' runs, and every core stays busy."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    stop = threading.Event()  # set on an interrupt: each recipe thread stops at its next run
    pool = ThreadPoolExecutor(max_workers=len(ids), thread_name_prefix="recipe")
    try:
        futures = {
            pool.submit(run_experiment, exp_id, scale, outdir, folder, client, log, stop): exp_id
            for exp_id in ids
        }
        if progress:
            progress(", ".join(ids), 0, len(ids))
        done: dict[str, Outcome] = {}
        for fut in as_completed(futures):
            done[futures[fut]] = fut.result()  # run_experiment never raises for a recipe's error
            if progress:
                left = [i for i in ids if i not in done]
                progress(", ".join(left) or None, len(done), len(ids))
    except BaseException:  # KeyboardInterrupt: not waiting for the threads (unlike `with pool`)
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return [done[i] for i in ids]
