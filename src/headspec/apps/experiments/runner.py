"""Running the recipes: find a recipe's TOML, run it with failures isolated, run them all.

The recipe TOMLs ship inside the package (``headspec/apps/experiments/recipes/``) and are read
with :mod:`importlib.resources`, so ``headspec reproduce`` works from any directory of an
installed package.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.resources
import threading
import time
import tomllib
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headspec.apps.experiments.base import Context, Outcome
from headspec.apps.experiments.report import write_report
from headspec.core.precision import float64_context

EXPERIMENT_FILES = {
    "E1": "e1_two_phases.toml",
    "E2": "e2_order.toml",
    "E3": "e3_activations.toml",
    "E4": "e4_bayes_softmax.toml",
    "E5": "e5_pruning.toml",
    "E6": "e6_rearrangement.toml",
    "E7": "e7_representation.toml",
}
SCALES = ("quick", "full")  # the scales of the paper's claims (recipes also have "smoke")
TEST_SCALE = "smoke"  # tiny sizes, for tests: seconds per run, verdicts that mean nothing


def experiments_dir():
    """The folder of the recipe TOML files, shipped as package data (a Traversable: a Path for a
    package installed or checked out on disk)."""
    return importlib.resources.files("headspec.apps.experiments") / "recipes"


def _recipe(exp_id: str):
    # Looked up on the package at call time, not bound at import: the recipe table is
    # `headspec.apps.experiments.RECIPES`, and replacing it there (tests do) must take effect.
    return importlib.import_module("headspec.apps.experiments").RECIPES[exp_id]


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
    folder = folder or experiments_dir()
    t0 = time.perf_counter()
    try:
        with (folder / EXPERIMENT_FILES[exp_id]).open("rb") as f:
            spec = tomllib.load(f)
        ctx = Context(exp_id, spec, scale, outdir, client=client, log=log, stop=stop)
        with float64_context():  # thread-local: each recipe thread of `reproduce` enters it
            _recipe(exp_id)(ctx)
        out = ctx.outcome
    except Exception as e:  # reported in the report, never hidden
        out = Outcome(exp_id, exp_id, error=f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
        if "ctx" in locals():
            out.title, out.configs, out.figures = (
                ctx.outcome.title,
                ctx.outcome.configs,
                ctx.outcome.figures,
            )
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
) -> list[Outcome]:
    """Run E1–E7 (or ``only``) at a scale and write the report; returns the outcomes.

    Runs go to the Dask scheduler at ``scheduler`` (an address), else, at the quick and full
    scales, to a local cluster of ``workers`` single-threaded processes (default: one per core),
    so that the independent runs of a recipe use every core; they run in this process with one
    core, with ``workers=1`` and at the smoke scale (unless ``workers`` > 1 is given). Finished
    runs in ``outdir/data`` with the same config are reused: an interrupted reproduction resumes.

    A ``KeyboardInterrupt`` (Ctrl-C) stops the reproduction within seconds: the recipe threads
    stop at their next run (their runs in progress on a local cluster end with it), every
    finished run stays in ``outdir/data``, no report is written, and the interrupt propagates."""
    from headspec.apps.sweep.cluster import available_cores, dask_client

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    ids = list(only or EXPERIMENT_FILES)
    t0 = time.perf_counter()
    outcomes = []
    n = workers or available_cores()
    use_dask = scheduler is not None or (n > 1 and (scale in SCALES or workers is not None))
    with (
        dask_client(scheduler, workers, security) if use_dask else contextlib.nullcontext()
    ) as client:
        if client is None:
            for k, exp_id in enumerate(ids):
                if progress:
                    progress(exp_id, k, len(ids))
                outcomes.append(run_experiment(exp_id, scale, outdir, folder, client, log))
        else:  # the recipes side by side: one's analysis overlaps another's runs on the cluster
            outcomes = _concurrently(ids, scale, outdir, folder, client, log, progress)
    if progress:
        progress(None, len(ids), len(ids))
    write_report(outcomes, outdir, scale, time.perf_counter() - t0)
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
