"""The `study` command: one study of headspec.apps.studies (a recipe of the second registry) and
its report, with the same runner, resumable runs and Dask cluster as `reproduce`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from headspec.apps.cli.common import (
    TlsCaFileOpt,
    TlsCertOpt,
    TlsKeyOpt,
    app,
    check_scheduler_options,
    fail,
    out,
)
from headspec.apps.cli.reproduce import RecipeSchedulerOpt, WorkersOpt, run_and_report

STUDY_SCALES = ("full", "smoke")  # a study's own scale; smoke: tiny sizes, for tests


@app.command()
def study(
    name: Annotated[
        str | None,
        typer.Argument(help="The study, e.g. escape_time (leave out to list them)."),
    ] = None,
    scale: Annotated[
        str,
        typer.Option(
            "--scale",
            help="full (the study as documented: its numbers in the docs) or smoke (tiny sizes "
            "for tests: seconds per run, verdicts that mean nothing).",
        ),
    ] = "full",
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Report folder (default: studies/out/NAME)."),
    ] = None,
    scheduler: RecipeSchedulerOpt = None,
    tls_ca_file: TlsCaFileOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
    workers: WorkersOpt = None,
):
    """Run a study (a longer measurement beside the paper's findings) and write its report.

    A study is a recipe like E1–E9: typed parameters in its TOML, runs reused by their full
    resolved config (running the same command again resumes), claims as data with tolerances
    from standard errors, figures, and every config in OUT/configs. Without NAME: the list.
    """
    from headspec.apps.studies import STUDIES

    if name is None:
        table = Table(title="studies (headspec study NAME)")
        table.add_column("name", no_wrap=True)
        table.add_column("what it measures")
        for s in STUDIES.values():
            table.add_row(s.id, (s.run.__doc__ or "").strip().splitlines()[0])
        out.print(table)
        return
    if name not in STUDIES:
        fail(f"no study {name!r}; fix: use one of {', '.join(STUDIES)} (headspec study lists "
             "them)")  # fmt: skip
    if scale not in STUDY_SCALES:
        fail(f"--scale {scale!r} is not known; fix: use {' or '.join(STUDY_SCALES)}")
    security = check_scheduler_options(scheduler, tls_ca_file, tls_cert, tls_key, workers=workers)
    tls = [("--tls-ca-file", tls_ca_file), ("--tls-cert", tls_cert), ("--tls-key", tls_key)]
    out_dir = out_dir if out_dir is not None else Path("studies") / "out" / name
    run_and_report(scale, out_dir, None, scheduler, workers, security, tls, study=name)
