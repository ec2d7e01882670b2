"""Commands that read result files: `compare` (simulation vs theory), `prune`, `plot`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from headspec.apps.cli.common import (
    ResultArg,
    app,
    check_output_dir,
    err,
    fail,
    load_result_seed,
    out,
)
from headspec.apps.cli.figures import (
    FiguresDirOpt,
    FormatsOpt,
    check_formats,
    write_figures,
    write_result_figures,
)


@app.command()
def compare(
    sim: Annotated[Path, typer.Argument(help="A simulation result.")],
    theory_file: Annotated[Path, typer.Argument(help="A theory result.")],
    until: Annotated[
        float | None, typer.Option("--until", help="Compare only up to this time.")
    ] = None,
    out_dir: FiguresDirOpt = None,
    formats: FormatsOpt = None,
):
    """Overlay a simulation and a theory (risk and overlaps) and print the largest deviations."""
    import math

    from headspec.conventions import results
    from headspec.dynamics.analysis import compare as compare_results

    fmts = check_formats(formats)
    if until is not None and not (math.isfinite(until) and until > 0):
        fail(f"--until {until} is not a positive time; fix: give a time t > 0, e.g. --until 30")
    check_output_dir(out_dir or sim.parent)
    try:
        s_ds, t_ds = results.load(sim), results.load(theory_file)
    except results.ResultError as e:
        fail(str(e))
    if s_ds.sizes["head"] != t_ds.sizes["head"] or s_ds.sizes["feature"] != t_ds.sizes["feature"]:
        fail("the two results have different numbers of heads or features; fix: compare runs "
             "of the same model")  # fmt: skip
    dev = compare_results(s_ds, t_ds, until=until)
    window = "" if until is None else f" for t ≤ {until:g}"
    table = Table(title=f"largest deviation, simulation − theory{window}")
    for col in ("quantity", "max |Δ|", "at t", "note"):
        table.add_column(col)
    for q, d in dev.items():
        val = f"{100 * d['max_dev']:.2f} %" if d["relative"] else f"{d['max_dev']:.4f}"
        note = "relative to theory" if d["relative"] else "absolute, worst entry"
        if "sim_se" in d:
            note += f"; s.e. of the simulation mean {d['sim_se']:.4f}"
        table.add_row(q, val, f"{d['t']:.4g}", note)
    out.print(table)
    folder = out_dir or sim.parent
    folder.mkdir(parents=True, exist_ok=True)
    from headspec.apps.plots import plot_compare_overlaps, plot_risk

    figures = (
        ("risk", plot_risk(s_ds, theory=t_ds)),
        ("overlaps", plot_compare_overlaps(s_ds, t_ds)),
    )
    write_figures(folder, f"{sim.stem}_vs_{theory_file.stem}", figures, fmts)


@app.command()
def prune(
    result: ResultArg,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Seed of the file to prune (default: the first).")
    ] = None,
    n: Annotated[int, typer.Option("--n", help="Base samples of the risk.", min=2)] = 16384,
    random_orders: Annotated[
        int, typer.Option("--random-orders", help="Random removal orders to draw.", min=0)
    ] = 8,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out-dir", "-o", help="Folder for the figure (default: beside)."),
    ] = None,
):
    """Risk after removing heads from the final state, greedily (fewest harm first) and in random
    orders, for every number of heads kept (SPEC §7 E5)."""
    import numpy as np

    from headspec.apps.plots import plot_prune
    from headspec.conventions.runs import prune_result

    ds, i = load_result_seed(result, seed)
    seeds = [int(s) for s in ds.seed.values]
    check_output_dir(out_dir or result.parent)
    with err.status("pruning…"):
        res = prune_result(ds, seed_index=i, n=n, random_orders=random_orders)
    table = Table(title=f"pruning seed {seeds[i]} of {result.name} at t = {float(ds.t[-1]):g}")
    for col in ("heads kept", "greedy risk", "head removed", "random orders: mean risk"):
        table.add_column(col, justify="right")
    g = res["greedy"]
    for k, nh in enumerate(res["n_heads"]):
        rnd = [p["risk"][k] for p in res["random"]]
        table.add_row(
            str(nh),
            f"{g['risk'][k]:.4f}",
            "—" if k == 0 else f"h{g['removed'][k - 1]}",
            f"{np.mean(rnd):.4f}" if rnd else "—",
        )
    table.caption = f"Bayes risk R_B = {ds.attrs['bayes_risk']:.4f}"
    out.print(table)
    folder = out_dir or result.parent
    folder.mkdir(parents=True, exist_ok=True)
    fig = plot_prune(res, f"pruning, seed {seeds[i]} — {result.name}", ds.attrs["bayes_risk"])
    write_figures(folder, result.stem, [("prune", fig)], ("png",))


@app.command("plot")
def plot_cmd(
    result: ResultArg,
    out_dir: FiguresDirOpt = None,
    formats: FormatsOpt = None,
    theory: Annotated[
        Path | None, typer.Option("--theory", help="A theory result to overlay.")
    ] = None,
):
    """Figures of a result: risk vs t, cosine overlaps per head and feature, head similarity."""
    from headspec.conventions import results

    fmts = check_formats(formats)
    try:
        ds = results.load(result)
        th = results.load(theory) if theory is not None else None
    except results.ResultError as e:
        fail(str(e))
    folder = out_dir or result.parent
    check_output_dir(folder)
    write_result_figures(ds, folder, result.stem, fmts, theory=th)
