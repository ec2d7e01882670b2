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
    check_paths,
    err,
    fail,
    figure_paths,
    load_result_seed,
    out,
    with_flags,
)
from headspec.apps.cli.figures import (
    FiguresDirOpt,
    FormatsOpt,
    check_formats,
    write_figures,
    write_result_figures,
)

ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Go on when the two files' task, model or learning rates differ (a warning, not a "
        "refusal).",
    ),
]


def check_same_dynamics(a, b, a_path: Path, b_path: Path, force: bool) -> None:
    """Refuse two results of different numbers of heads or features; refuse (warn with
    ``force``) two whose settings that decide the dynamics differ
    (headspec.conventions.results.dynamics_differences; task.D may differ)."""
    from headspec.conventions.results import dynamics_differences
    from headspec.conventions.runs import config_model

    if a.sizes["head"] != b.sizes["head"] or a.sizes["feature"] != b.sizes["feature"]:
        fail(f"{a_path} has H = {a.sizes['head']}, F = {a.sizes['feature']} but {b_path} has "
             f"H = {b.sizes['head']}, F = {b.sizes['feature']}; fix: compare runs of the same "
             "model and latent law")  # fmt: skip
    diffs = dynamics_differences(config_model(a), config_model(b))
    if not diffs:
        return
    what = f"{a_path} and {b_path} were run with different settings: " + "; ".join(diffs)
    if not force:
        fail(
            f"{what}; fix: compare runs of the same task, model and learning rates (e.g. "
            f"headspec theory --init-from {a_path}), or add --force to compare them anyway"
        )
    err.print(
        f"warning: {what} (compared anyway: --force)",
        markup=False,
        highlight=False,
        soft_wrap=True,
        style="yellow",
    )


def warn(text: str) -> None:
    err.print(f"warning: {text}", markup=False, highlight=False, soft_wrap=True, style="yellow")


def _report_nan(dev: dict, until) -> None:
    """Say which seeds compare left out (failed) and at how many times a mean is NaN."""
    first = next(iter(dev.values()))
    for name, seeds in first["excluded"].items():
        if seeds:
            warn(
                f"compare left out the {name}'s seed(s) {seeds}: marked failed (diverged), "
                "their values are NaN after the failure; the means are over the other seeds"
            )
    nan = {q: d["nan_points"] for q, d in dev.items() if d["nan_points"]}
    if nan:
        which = ", ".join(f"{q} at {n} time(s)" for q, n in nan.items())
        where = "" if until is None else f", t ≤ {until:g}"
        warn(
            f"a seed mean is NaN ({which}{where}): the theory's grid ends earlier or every seed "
            "failed there; the largest deviations are over the other times (NaN if none)"
        )


@app.command()
def compare(
    sim: Annotated[Path, typer.Argument(metavar="SIM.nc", help="A simulation result.")],
    theory_file: Annotated[
        Path, typer.Argument(metavar="THEORY.nc", help="A theory result of the same settings.")
    ],
    until: Annotated[
        float | None, typer.Option("--until", help="Compare only up to this time.")
    ] = None,
    out_dir: FiguresDirOpt = None,
    formats: FormatsOpt = None,
    force: ForceOpt = False,
):
    """Overlay a simulation and a theory (risk and overlaps) and print the largest deviations.

    SIM must be a result of `headspec simulate` and THEORY one of `headspec theory`, run with the
    same task, model and learning rates (task.D may differ: the theory is D → ∞); files that
    differ in these settings are refused unless --force.
    """
    import math

    from headspec.conventions import results
    from headspec.conventions.comparison import compare as compare_results

    fmts = check_formats(formats)
    if until is not None and not (math.isfinite(until) and until > 0):
        fail(f"--until {until} is not a positive time; fix: give a time t > 0, e.g. --until 30")
    check_output_dir(out_dir or sim.parent)
    check_paths(figure_paths(out_dir or sim.parent, f"{sim.stem}_vs_{theory_file.stem}",
                             ("risk", "overlaps"), fmts),
                [("SIM.nc", sim), ("THEORY.nc", theory_file)], make_folders=True)  # fmt: skip
    try:
        s_ds, t_ds = results.load(sim), results.load(theory_file)
    except results.ResultError as e:
        fail(str(e))
    kinds = (s_ds.attrs["kind"], t_ds.attrs["kind"])
    if kinds == ("theory", "simulation"):
        fail(f"compare takes the simulation first, then the theory; fix: headspec compare "
             f"{theory_file} {sim}")  # fmt: skip
    if kinds != ("simulation", "theory"):
        path, want = (sim, "simulation") if kinds[0] != "simulation" else (theory_file, "theory")
        fail(f"{path} is a {kinds[path is theory_file]} result, but compare needs a {want} "
             f"result there (compare SIM.nc THEORY.nc: a simulation and a theory); fix: give a "
             f"{want} result, e.g. from headspec theory --init-from SIM.nc")  # fmt: skip
    check_same_dynamics(s_ds, t_ds, sim, theory_file, force)
    dev = compare_results(s_ds, t_ds, until=until)
    window = "" if until is None else f" for t ≤ {until:g}"
    table = Table(title=f"largest deviation, simulation − theory{window}")
    for col in ("quantity", "max |Δ|", "at t"):
        table.add_column(col, no_wrap=True)
    table.add_column("note")
    for q, d in dev.items():
        val = f"{100 * d['max_dev']:.2f} %" if d["relative"] else f"{d['max_dev']:.4f}"
        note = "relative to theory" if d["relative"] else "absolute, worst entry"
        if "sim_se" in d:
            note += f" (s.e. of the sim. mean {d['sim_se']:.4f})"
        table.add_row(q, val, f"{d['t']:.4g}", note)
    out.print(table)
    _report_nan(dev, until)
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
    """Risk after removing heads from the final state, for every number of heads kept.

    Heads are removed greedily (the least harmful first) and in random orders (SPEC §7 E5).
    """
    import numpy as np

    from headspec.apps.plots import plot_prune
    from headspec.conventions.runs import prune_result

    ds, i = load_result_seed(result, seed, trained=True)
    seeds = [int(s) for s in ds.seed.values]
    _check_prune_size(ds, n, random_orders)
    check_output_dir(out_dir or result.parent)
    check_paths(figure_paths(out_dir or result.parent, result.stem, ["prune"], ("png",)),
                [("RESULT", result)], make_folders=True)  # fmt: skip
    with err.status("pruning…"):
        res = prune_result(ds, seed_index=i, n=n, random_orders=random_orders)
    table = Table(title=f"pruning seed {seeds[i]} of {result.name} at t = {float(ds.t[-1]):g}")
    for col in ("heads kept", "greedy risk", "head removed", "random orders: mean risk"):
        table.add_column(col, justify="right", no_wrap=True)
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


def _check_prune_size(ds, n: int, random_orders: int) -> None:
    """Refuse --n or --random-orders whose memory this machine does not have, before any work."""
    from headspec.conventions import results
    from headspec.conventions.budget import check_memory, estimate_prune
    from headspec.conventions.config import ConfigError

    L = int(results.config_of(ds).get("task", {}).get("L", 10))
    sizes = ds.sizes
    est = estimate_prune(
        n, L, sizes["head"], sizes["feature"], sizes.get("atom", 1) or 1, random_orders
    )
    try:
        check_memory(est)
    except ConfigError as e:
        fail(with_flags(str(e), "prune"))


@app.command("plot")
def plot_cmd(
    result: ResultArg,
    out_dir: FiguresDirOpt = None,
    formats: FormatsOpt = None,
    theory: Annotated[
        Path | None,
        typer.Option(
            "--theory",
            help="A theory result to overlay (same task, model and learning rates as RESULT).",
        ),
    ] = None,
    force: ForceOpt = False,
):
    """Figures of a result: risk vs t, cosine overlaps per head and feature, head similarity."""
    from headspec.conventions import results

    fmts = check_formats(formats)
    try:
        ds = results.load(result)
        th = results.load(theory) if theory is not None else None
    except results.ResultError as e:
        fail(str(e))
    if th is not None:
        if th.attrs["kind"] != "theory":
            fail(f"--theory {theory} is a {th.attrs['kind']} result; fix: give a result of "
                 "headspec theory")  # fmt: skip
        check_same_dynamics(ds, th, result, theory, force)
    folder = out_dir or result.parent
    check_output_dir(folder)
    from headspec.apps.plots.save import FIGURES

    check_paths(figure_paths(folder, result.stem, FIGURES, fmts),
                [("RESULT", result), ("--theory", theory)], make_folders=True)  # fmt: skip
    write_result_figures(ds, folder, result.stem, fmts, theory=th)
