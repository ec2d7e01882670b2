"""The `reproduce` command: experiments E1–E9 and their report, over headspec.apps.experiments."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from headspec.apps.cli.common import (
    TlsCaFileOpt,
    TlsCertOpt,
    TlsKeyOpt,
    app,
    check_output_dir,
    check_paths,
    check_scheduler_options,
    counted,
    fail,
    out,
    plural,
    progress_bar,
    scheduler_option,
)
from headspec.apps.cli.interrupts import on_interrupt

# the options `reproduce` and `study` share: where the runs go
RecipeSchedulerOpt = Annotated[
    str | None,
    scheduler_option(
        " and, for the ODE started from a simulation, this folder",
        "a local cluster, one worker per core",
    ),
]
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        "-w",
        min=1,
        help="Size of the local Dask cluster (default: one per core; 1: in this process).",
    ),
]


@app.command()
def reproduce(
    scale: Annotated[
        str,
        typer.Option(
            "--scale",
            help="quick (a laptop, minutes), overnight (a laptop, ~2 h on 2 cores: D ≥ 10⁴, "
            "≥ 16 seeds) or full (a cluster; see --dry-run); smoke: tiny sizes for tests "
            "(seconds per run, verdicts that mean nothing; a local cluster only with --workers).",
        ),
    ] = "quick",
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Report folder.")] = Path("report"),
    only: Annotated[
        str | None, typer.Option("--only", help="Comma-separated experiments, e.g. E1,E3.")
    ] = None,
    scheduler: RecipeSchedulerOpt = None,
    tls_ca_file: TlsCaFileOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
    workers: WorkersOpt = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print each experiment's runs and their estimated compute time (CPU-hours, and "
            "the wall time on the workers), then stop: nothing runs and nothing is written. Runs "
            "already finished in --out are counted as reused.",
        ),
    ] = False,
):
    """Reproduce the paper's findings E1–E9 (SPEC §7, and E8) in a report (index.md, index.html).

    The report has a claims table with the measured number behind each claim, its tolerance and
    why, figures with simulation and theory side by side, the environment and every config used.
    A failing experiment is reported; the others still run. Every run's result is kept in
    OUT/data: running the same command again resumes, reusing each finished run whose config is
    unchanged.
    """
    from headspec.apps.experiments import RECIPES, SCALES, TEST_SCALE

    if scale not in (*SCALES, TEST_SCALE):
        fail(f"--scale {scale!r} is not known; fix: use quick, overnight or full")
    security = check_scheduler_options(scheduler, tls_ca_file, tls_cert, tls_key, workers=workers)
    ids = None
    if only is not None:  # an empty --only (an unset shell variable) is no selection
        ids = list(dict.fromkeys(x.strip().upper() for x in only.split(",") if x.strip()))
        if not ids:
            fail(f"--only {only!r} names no experiment; fix: give some of "
                 f"{', '.join(RECIPES)} (comma-separated), or drop --only to run "
                 "them all")  # fmt: skip
        bad = [x for x in ids if x not in RECIPES]
        if bad:
            fail(f"--only: unknown experiment {bad[0]!r}; fix: use some of "
                 f"{', '.join(RECIPES)}")  # fmt: skip
    if dry_run:
        _dry_run(scale, ids, out_dir, workers, scheduler)
        return
    tls = [("--tls-ca-file", tls_ca_file), ("--tls-cert", tls_cert), ("--tls-key", tls_key)]
    run_and_report(scale, out_dir, ids, scheduler, workers, security, tls)


def run_and_report(scale: str, out_dir: Path, ids, scheduler, workers, security, tls,
                   study: str | None = None) -> None:  # fmt: skip
    """Run the recipes ``ids`` (all: None), or ``study`` alone, into ``out_dir`` with a progress
    bar and one line per run; print the claims table. Exit 1 when an experiment failed.
    ``tls``: (option, path) of the TLS files given, checked with the output paths."""
    from headspec.apps.experiments import RECIPES, RecipeError
    from headspec.apps.experiments import reproduce as run_all
    from headspec.apps.experiments.claims import verdict_text
    from headspec.apps.sweep import SweepError

    check_output_dir(out_dir, "--out")
    _check_report_folder(out_dir)
    managed = [(f"the report's {name}", out_dir / name) for name in (*REPORT_FILES, "data",
               "figures", "configs")]  # fmt: skip
    check_paths([], tls, managed)
    with (
        on_interrupt(lambda: _kept(out_dir / "data")),
        progress_bar(counted("experiments"), eta=False) as bar,
    ):
        job = bar.add_task("starting…", total=1 if study else len(ids or RECIPES))

        def progress(exp_id, done, total):
            bar.update(job, completed=done, description=f"running {exp_id}" if exp_id else "done")

        def log(line):  # one line per finished or reused run, above the bar
            bar.console.print(f"{time.perf_counter() - t0:6.0f} s  {line}", markup=False)

        t0 = time.perf_counter()

        try:
            outcomes = run_all(
                scale=scale,
                outdir=out_dir,
                only=ids,
                progress=progress,
                scheduler=scheduler,
                workers=workers,
                security=security,
                log=log,
                study=study,
            )
        except (SweepError, RecipeError) as e:
            bar.stop()
            fail(str(e))
    table = Table(title=f"claims ({scale} scale)")
    for col in ("exp.", "claim", "value ± s.e.", "verdict"):  # the text columns wrap at words
        table.add_column(col, no_wrap=col in ("exp.", "verdict"))
    for o in outcomes:
        if o.error:
            table.add_row(o.id, "(experiment failed)", o.error.splitlines()[0], "NO")
        for c in o.claims:
            table.add_row(o.id, c.statement, c.value_text(), verdict_text(c.verdict))
    out.print(table)
    out.print(f"wrote {out_dir / 'index.html'} and {out_dir / 'index.md'}")
    if any(o.error for o in outcomes):
        raise typer.Exit(1)


REPORT_FILES = ("index.md", "index.html", "outcomes.json")


def _dry_run(scale: str, ids, out_dir: Path, workers: int | None, scheduler: str | None) -> None:
    """The table of `reproduce --dry-run`: per experiment its runs, those already finished in
    ``out_dir/data`` (reused), and the estimated compute time of the rest."""
    from headspec.apps.experiments import RECIPES, RecipeError, check
    from headspec.apps.experiments.base import reusable_result
    from headspec.apps.experiments.plan import estimate
    from headspec.apps.sweep.cluster import available_cores

    try:
        check(ids or list(RECIPES), scale)
        est = estimate(ids, scale, outdir=out_dir)
    except RecipeError as e:
        fail(str(e))
    n = workers or (None if scheduler else available_cores())
    table = Table(title=f"estimated compute in CPU-hours ({scale} scale; one core each)")
    for col in ("exp.", "runs", "reused", "runs", "pruning", "largest run"):
        table.add_column(col, justify="left" if col in ("exp.", "largest run") else "right")
    total = pruning = 0.0
    for exp_id, runs in est.items():
        if runs is None:
            table.add_row(exp_id, "?", "", "?", "?", "(the recipe declares no plan of its runs)")
            continue
        todo = [r for r in runs if reusable_result(out_dir / "data" / f"{exp_id}_{r.name}.nc",
                                             r.config) is None]  # fmt: skip
        cpu = sum(r.estimate for r in todo)
        prune = sum(r.analysis for r in runs)  # reused runs are pruned again
        total, pruning = total + cpu, pruning + prune
        big = max(todo, key=lambda r: r.estimate, default=None)
        table.add_row(exp_id, str(len(runs)), str(len(runs) - len(todo)), f"{cpu / 3600:.2f}",
                      f"{prune / 3600:.2f}" if prune else "",
                      f"{big.name} ({_duration(big.estimate)})" if big else "—")  # fmt: skip
    table.add_row("all", "", "", f"{total / 3600:.2f}", f"{pruning / 3600:.2f}", "")
    out.print(table)
    where = (
        f"on {plural(n, 'worker')}: at least {_duration(total / n)} of wall time"
        if n
        else "on the scheduler's workers: the CPU time over their number, at least"
    )
    out.print(f"{_duration(total)} of compute in all for the runs; {where}. Pruning "
              f"({_duration(pruning)}) runs in this process, one core, after the runs; the "
              "recipes' other analyses come on top (+42 % at quick scale, +9.5 % overnight), "
              "and so do E7's map runs, chosen by what its simulations reach (3.5 CPU-min at "
              "quick scale). "
              "Estimates from headspec.conventions.cost: within 2× per experiment on this "
              "project's reference machine (docs/speed.md).")  # fmt: skip


def _duration(s: float) -> str:
    """``42 s``, ``12 min``, ``3.4 h``, ``2.1 days``."""
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def _check_report_folder(out_dir: Path) -> None:
    """Refuse a --out folder whose index.md, index.html or outcomes.json a reproduction would
    replace but did not write: the folder holds no report of headspec (no outcomes.json of the
    report's shape) — e.g. a project folder with its own index.html."""
    import json

    from headspec.apps.experiments.report import OUTCOMES

    if not out_dir.is_dir():
        return
    found = [name for name in REPORT_FILES if (out_dir / name).exists()]
    if not found:
        return
    try:
        data = json.loads((out_dir / OUTCOMES).read_text())
        ours = isinstance(data, dict) and {"scale", "experiments", "environment"} <= data.keys()
    except (OSError, ValueError, UnicodeDecodeError):
        ours = False
    if not ours:
        fail(f"--out {str(out_dir)!r} holds {', '.join(found)} but no report of headspec "
             f"reproduce ({OUTCOMES} missing or not a report's), and a reproduction would "
             "replace them; fix: give another --out folder, or move those files away")  # fmt: skip


def _kept(data: Path) -> str:
    """The note of an interrupted reproduction: the finished runs kept for the next one."""
    n = len(list(data.glob("*.nc"))) if data.is_dir() else 0
    half = len(list(data.glob("*.partial.npz"))) if data.is_dir() else 0
    part = f", {plural(half, 'simulation')} half-way in a checkpoint" if half else ""
    return (f"{plural(n, 'run')} finished and kept in {data}{part}; run the same command again "
            "to resume (finished runs are reused)")  # fmt: skip
