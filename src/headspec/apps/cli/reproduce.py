"""The `reproduce` command: experiments E1–E6 and their report, over headspec.apps.experiments."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from headspec.apps.cli.common import app, check_output_dir, counted, fail, out, progress_bar


@app.command()
def reproduce(
    scale: Annotated[
        str, typer.Option("--scale", help="quick (a laptop, minutes) or full (a cluster).")
    ] = "quick",
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Report folder.")] = Path("report"),
    only: Annotated[
        str | None, typer.Option("--only", help="Comma-separated experiments, e.g. E1,E3.")
    ] = None,
):
    """Reproduce the paper's findings E1–E6 (SPEC §7) in a report (index.md and index.html).

    The report has a claims table with the measured number behind each claim, figures, the
    environment and every config used. A failing experiment is reported; the others still run.
    """
    from headspec.apps.experiments import EXPERIMENT_FILES
    from headspec.apps.experiments import reproduce as run_all

    if scale not in ("quick", "full"):
        fail(f"--scale {scale!r} is not known; fix: use quick or full")
    ids = None
    if only:
        ids = [x.strip().upper() for x in only.split(",") if x.strip()]
        bad = [x for x in ids if x not in EXPERIMENT_FILES]
        if bad:
            fail(f"--only: unknown experiment {bad[0]!r}; fix: use some of "
                 f"{', '.join(EXPERIMENT_FILES)}")  # fmt: skip
    check_output_dir(out_dir, "--out")
    with progress_bar(counted("experiments"), eta=False) as bar:
        job = bar.add_task("starting…", total=len(ids or EXPERIMENT_FILES))

        def progress(exp_id, done, total):
            bar.update(job, completed=done, description=f"running {exp_id}" if exp_id else "done")

        outcomes = run_all(scale=scale, outdir=out_dir, only=ids, progress=progress)
    table = Table(title=f"claims ({scale} scale)")
    for col in ("exp.", "claim", "value", "holds"):  # the text columns wrap at words
        table.add_column(col, no_wrap=col in ("exp.", "holds"))
    for o in outcomes:
        if o.error:
            table.add_row(o.id, "(experiment failed)", o.error.splitlines()[0], "NO")
        for c in o.claims:
            verdict = {True: "yes", False: "NO", None: "—"}[c.holds]
            table.add_row(o.id, c.claim, c.value, verdict)
    out.print(table)
    out.print(f"wrote {out_dir / 'index.html'} and {out_dir / 'index.md'}")
    if any(o.error for o in outcomes):
        raise typer.Exit(1)
