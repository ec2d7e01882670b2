"""The `sweep` sub-commands over headspec.apps.sweep: `run` (the default), `collect`, `status`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress
from rich.table import Table
from typer.core import TyperGroup

from headspec.apps.cli.common import (
    TlsCaFileOpt,
    TlsCertOpt,
    TlsKeyOpt,
    app,
    banner,
    check_output_dir,
    check_paths,
    check_scheduler_options,
    counted,
    err,
    fail,
    out,
    plural,
    progress_bar,
    scheduler_option,
)
from headspec.apps.cli.interrupts import on_interrupt
from headspec.conventions.config import ConfigError


class _RunByDefault(TyperGroup):
    """`headspec sweep SPEC.toml …` means `headspec sweep run SPEC.toml …`."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


sweep_app = typer.Typer(
    cls=_RunByDefault,
    no_args_is_help=True,
    help="Sweeps over grids of configs on Dask: `headspec sweep SPEC.toml` runs (or resumes) "
    "one; `headspec sweep collect DIR` combines its points; `headspec sweep status DIR`.",
)
app.add_typer(sweep_app, name="sweep")


# Long only by its option list (one parameter per option); the body is under 50 lines.
@sweep_app.command("run")
def sweep_run(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC.toml", help="Sweep spec (TOML).")],
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            "-s",
            help="Override a spec key, repeatable: --set sweep.seeds=4 --set config.train.T=10.",
        ),
    ] = None,
    axis: Annotated[
        list[str] | None,
        typer.Option(
            "--axis",
            help="Add or replace an axis, repeatable: --axis 'model.H=[2,4]' or "
            "--axis 'task.D={start=100, stop=1000, num=4, spacing=\"log\"}'.",
        ),
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", "-o", help="Output folder (default: sweep.out).")
    ] = None,
    scheduler: Annotated[
        str | None,
        scheduler_option("", "a local cluster that starts and stops with the command"),
    ] = None,
    tls_ca_file: TlsCaFileOpt = None,
    tls_cert: TlsCertOpt = None,
    tls_key: TlsKeyOpt = None,
    connect_timeout: Annotated[
        float | None,
        typer.Option(
            "--connect-timeout",
            help="Seconds to wait for the --scheduler to answer (default: 10).",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", "-w", min=1, help="Local cluster size (default: one per core)."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Run a changed spec in a folder of another spec (unchanged points kept).",
        ),
    ] = False,
):
    """Run a sweep: every grid point of the spec's axes (× seed blocks) is a Dask task.

    Finished points are written atomically to OUT/points/ and recorded in OUT/manifest.json; at
    the end they are combined into OUT/sweep.nc (swept parameters as coordinates). Re-running the
    same command resumes: intact points are skipped, missing or corrupt ones re-run. Exit 1 if a
    point failed (its error is in the manifest), else 3 if one diverged (like `simulate`), 130 if
    interrupted; 2 for bad input, with nothing made (an unreachable --scheduler included).
    """
    from headspec.apps import sweep as sw

    security = check_scheduler_options(
        scheduler, tls_ca_file, tls_cert, tls_key, connect_timeout, workers
    )
    try:
        spec, root = sw.load_spec(spec_path, set_, axis)
        plan = sw.resolve(spec, root, out_dir)
    except ConfigError as e:
        fail(str(e))
    check_output_dir(plan.out, "--out")
    base = None if spec.sweep.base is None else Path(root) / spec.sweep.base
    inputs = [("SPEC.toml", spec_path), ("the base config", base), ("--tls-ca-file", tls_ca_file),
              ("--tls-cert", tls_cert), ("--tls-key", tls_key)]  # fmt: skip
    check_paths([], inputs, _managed(plan.out, with_results=True))
    try:
        sw.check_folder(plan, force)
    except sw.SweepError as e:
        fail(str(e))
    shape = " × ".join(f"{a.name}[{len(a.values)}]" for a in plan.axes)
    banner("sweep", [plan.kind, f"{plural(len(plan.points), 'point')} ({shape})",
                     f"{plural(plan.seeds, 'seed')} each in {plural(len(plan.tasks), 'task')}",
                     f"→ {plan.out}"])  # fmt: skip
    bar = progress_bar(counted("tasks"))
    on_start, on_result = _bar_callbacks(bar, scheduler)
    try:
        with on_interrupt(lambda: _kept(plan.out)):
            try:
                report = sw.run(
                    plan,
                    scheduler=scheduler,
                    workers=workers,
                    force=force,
                    on_start=on_start,
                    on_result=on_result,
                    security=security,
                    timeout=connect_timeout,
                )
            finally:
                bar.stop()
    except sw.SweepError as e:
        fail(str(e))
    _print_report(plan, report)
    if report.failed:
        raise typer.Exit(1)
    if report.diverged_tasks:
        _report_diverged(plan, report)
        raise typer.Exit(3)


def _kept(folder: Path) -> str:
    """The note of an interrupted sweep: how many of its tasks are finished and kept."""
    from headspec.apps import sweep as sw

    try:
        counts = sw.status_counts(sw.read_manifest(folder))
    except sw.SweepError:  # interrupted before the manifest was written
        return "nothing finished yet; run the same command again to resume"
    kept = counts.get("done", 0) + counts.get("diverged", 0)
    return (f"{kept} of {plural(sum(counts.values()), 'task')} finished and kept in {folder}; "
            "run the same command again to resume")  # fmt: skip


def _report_diverged(plan, report) -> None:
    """Name the tasks whose results diverged (the sweep then exits 3, like `simulate`)."""
    from headspec.apps import sweep as sw

    tasks = report.diverged_tasks
    err.print(
        f"error: {len(tasks)} of {plural(report.total, 'task')} diverged (their results stop "
        "there, NaN after; every point is written); fix: lower train.lr for these points, see "
        f"headspec sweep status {plan.out}",
        markup=False,
        highlight=False,
        style="red",
    )
    for params, seeds in tasks[:10]:
        err.print(f"diverged: {params}, seeds {seeds}", markup=False, highlight=False, style="red")
    if len(tasks) > 10:
        err.print(f"… and {len(tasks) - 10} more (see {plan.out / sw.MANIFEST})", markup=False)


def _bar_callbacks(bar: Progress, scheduler: str | None):
    """``on_start``/``on_result`` for headspec.apps.sweep.run: the bar starts once the cluster is up
    (counting only the tasks left to run) and names the diverged and failed tasks so far."""
    counts = {"done": 0, "diverged": 0, "failed": 0}
    job = None

    def on_start(client, n_todo, n_total):
        nonlocal job
        n_workers = len(client.scheduler_info()["workers"])
        where = scheduler or f"local cluster, {plural(n_workers, 'worker')}"
        err.print(f"dask: {where}; dashboard {client.dashboard_link}", highlight=False)
        if n_todo < n_total:
            err.print(f"resuming: {n_total - n_todo} of {plural(n_total, 'task')} already finished")
        bar.start()
        job = bar.add_task("running", total=n_todo)

    def on_result(task, entry):
        counts[entry["status"]] += 1
        desc = ", ".join(f"{v} {k}" for k, v in counts.items() if v and k != "done") or "running"
        bar.update(job, advance=1, description=desc)

    return on_start, on_result


def _print_report(plan, report) -> None:
    """The task counts of a finished sweep, its first failures, and the files it wrote."""
    from headspec.apps import sweep as sw

    table = Table(title=f"sweep {plan.out}")
    for col in ("tasks", "finished before", "finished now", "of which diverged", "failed"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_row(
        str(report.total),
        str(report.skipped),
        str(report.done + report.diverged),
        str(report.diverged),
        str(len(report.failed)),
    )
    out.print(table)
    for params, error in report.failed[:10]:
        err.print(f"failed: {params}: {error}", markup=False, style="red")
    if len(report.failed) > 10:
        err.print(f"… and {len(report.failed) - 10} more (see {plan.out / sw.MANIFEST})")
    if report.dataset_path is not None:
        out.print(f"wrote {report.dataset_path}")
        from headspec.conventions import results

        # the combined file just written, not the points collected again (a second pass over
        # every point file: 1.3 s of a 7 s command for two points)
        collected = results.load(report.dataset_path, kinds=("sweep",))
        _write_views(collected, plan.out)


def _write_views(ds, folder: Path) -> None:
    """The collected sweep's figure, and for a map its JSON table, beside it (one place for
    `sweep run` and `sweep collect`)."""
    from headspec.apps import sweep as sw

    out.print(f"wrote {sw.save_figure(ds, folder)}")
    table = sw.save_table(ds, folder)
    if table is not None:
        out.print(f"wrote {table}")


def _managed(folder: Path, with_results: bool = False) -> list[tuple[str, Path]]:
    """The files and folders of a sweep folder that only the sweep writes (``with_results``:
    also the combined dataset and figure, which `sweep run` rewrites at its end)."""
    from headspec.apps import sweep as sw

    managed = [
        ("the sweep's manifest", folder / sw.MANIFEST),
        ("the sweep's points folder", folder / "points"),
        ("the sweep's lock", folder / ".lock"),
        ("the sweep's token", folder / sw.TOKEN),
    ]
    if with_results:
        managed += [("the sweep's combined dataset", folder / sw.COLLECTED),
                    ("the sweep's figure", folder / sw.FIGURE),
                    ("the sweep's figure", folder / sw.MAP_FIGURE),
                    ("the sweep's table", folder / sw.MAP_TABLE)]  # fmt: skip
    return managed


@sweep_app.command("collect")
def sweep_collect(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="Output folder of a sweep.")],
    out_path: Annotated[
        Path | None, typer.Option("--out", "-o", help="Combined file (default: DIR/sweep.nc).")
    ] = None,
):
    """Combine the finished points of a sweep into one netCDF dataset (axes as coordinates)."""
    from headspec.apps import sweep as sw

    try:
        sw.read_manifest(folder)  # first: a folder that is no sweep's is named as such
    except sw.SweepError as e:
        fail(str(e))
    target = out_path or folder / sw.COLLECTED
    kind = sw.read_manifest(folder)["spec"].get("kind", "simulate")
    figure = target.parent / sw.figure_name(kind)
    outputs = [("--out", target), ("the figure", figure)]
    if kind == "splitmap":
        outputs.append(("the table", target.parent / sw.MAP_TABLE))
    check_paths(outputs, [], _managed(folder))
    try:
        ds = sw.collect(folder)
    except sw.SweepError as e:
        fail(str(e))
    path = sw.save_collected(ds, target)
    dims = ", ".join(f"{k} = {v}" for k, v in ds.sizes.items())
    done, points = ds.attrs["points_finished"], plural(int(ds.attrs["points"]), "point")
    out.print(f"{done} of {points} finished; {dims}")
    out.print(f"wrote {path}")
    _write_views(ds, path.parent)


@sweep_app.command("status")
def sweep_status(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="Output folder of a sweep.")],
):
    """Counts of finished, diverged, failed and pending tasks, and the errors of failed ones."""
    from headspec.apps import sweep as sw

    try:
        manifest = sw.read_manifest(folder)
    except sw.SweepError as e:
        fail(str(e))
    table = Table(title=f"sweep {folder} ({manifest['spec'].get('kind', '?')})")
    table.add_column("status")
    table.add_column("tasks", justify="right", no_wrap=True)
    for k, v in sorted(sw.status_counts(manifest).items()):
        table.add_row(k, str(v))
    out.print(table)
    for e in manifest["tasks"]:
        if e["status"] == "failed":
            err.print(f"failed: {e.get('params')}: {e.get('error', '?')}", markup=False,
                      style="red")  # fmt: skip
