"""`headspec saddles`: the fixed points a trajectory passes by, their spectra and escape times."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from headspec.apps.cli.common import (
    ConfigOpt,
    SetOpt,
    app,
    banner,
    check_output_path,
    counted,
    err,
    fail,
    figure_paths,
    load_or_fail,
    load_result_seed,
    out,
    progress_bar,
    with_flags,
)
from headspec.apps.cli.figures import FormatsOpt, check_formats, write_figures
from headspec.apps.cli.interrupts import not_written, on_interrupt


# Long only by its option list (one parameter per option).
@app.command()
def saddles(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    from_: Annotated[
        Path | None,
        typer.Option(
            "--from", help="Analyse this simulation or theory result instead of solving the ODE."
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option("--seed", help="The seed to analyse (default: the config's / file's first)."),
    ] = None,
    n: Annotated[
        int,
        typer.Option(
            "--n",
            min=2,
            help="Base samples of the sampled terms (exact: the η² term only; qmc, mc: all).",
        ),
    ] = 2048,
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help="exact (the η-linear drift from the exact risk: eigenvalues without sampling "
            "error under --gradient-flow), qmc or mc (every term on --n samples).",
        ),
    ] = "exact",
    gradient_flow: Annotated[
        bool,
        typer.Option(
            "--gradient-flow",
            help="Fixed points of the η-linear drift (no η² term: the gradient-flow limit).",
        ),
    ] = False,
    group_cos: Annotated[
        float,
        typer.Option(
            "--group-cos",
            min=0.5,
            max=1.0,
            help="Heads whose keys are within this cosine count as identical when polishing.",
        ),
    ] = 0.98,
    out_path: Annotated[
        Path, typer.Option("--out", "-o", help="Saddle file (netCDF); a .json goes beside it.")
    ] = Path("saddles.nc"),
    formats: FormatsOpt = None,
):
    """The fixed points a trajectory passes by: their risk, spectrum and escape time.

    Find where a trajectory slows down, polish each slow stretch into a fixed point of the ODE
    (heads within --group-cos taken as identical), and give its spectrum: unstable modes (common
    or head-difference, which features and heads), symmetry zero modes apart, and the predicted
    time ln(D)/(2λ) to leave it at the run's D.

    From a config (as `headspec theory`: the ODE is solved for one seed from the exact finite-D
    initial law) or from a result file with --from. Writes OUT (netCDF), OUT.json and a figure
    OUT_saddles.png: the risk curve with each fixed point's risk, and the spectra.
    """
    from headspec.conventions.config import TheoryConfig

    fmts = check_formats(formats)
    if method not in ("exact", "qmc", "mc"):
        fail(f"--method {method!r} is not one of exact, qmc, mc; fix: --method exact")
    if out_path.suffix == ".json":
        fail("--out is the netCDF file (the JSON goes beside it); fix: give a name ending in .nc")
    also = [("the JSON beside --out", out_path.with_suffix(".json")),
            *figure_paths(out_path.parent, out_path.stem, ["saddles"], fmts)]  # fmt: skip
    if from_ is not None:
        if config is not None or set_:
            fail("--from analyses a result as it was run; fix: drop --config/--set, or drop --from")
        check_output_path(out_path, inputs=[("--from", from_)], also=also)
        from headspec.conventions import results

        ds, i = load_result_seed(from_, seed, trained=True)
        source, cfg = str(from_), None
        _check_jacobian_size(
            n,
            ds.sizes["head"],
            ds.sizes["feature"],
            ds.sizes.get("atom", 1),
            L=int(results.config_of(ds).get("task", {}).get("L", 10)),
        )
    else:
        overrides = list(set_ or []) + ["seeds=1"] + ([] if seed is None else [f"seed={seed}"])
        cfg = load_or_fail(TheoryConfig, config, overrides, out_path, also=also, command="saddles")
        source = "ode"
        F, A = cfg.task.latent.build().F, cfg.task.latent.build().n_atoms
        _check_jacobian_size(n, cfg.model.H, F, A, cfg.task.L)
    started = time.time()
    with on_interrupt(lambda: not_written(out_path, started)):
        if cfg is not None:
            ds, i = _solve(cfg), 0
        _analyse(ds, i, n, not gradient_flow, group_cos, out_path, fmts, source, method)


def _check_jacobian_size(n: int, H: int, F: int, A: int, L: int) -> None:
    """Refuse an --n whose Jacobian this machine has no memory for, before any work."""
    from headspec.conventions.budget import check_memory, estimate_jacobian
    from headspec.conventions.config import ConfigError

    try:
        check_memory(estimate_jacobian(n, L, H, F, A or 1))
    except ConfigError as e:
        fail(with_flags(str(e), "saddles"))


def _solve(cfg):
    from headspec.conventions.runs import solve

    banner("solving the ODE", [cfg.model.activation, f"H = {cfg.model.H}",
                               f"{cfg.task.latent.kind} law", f"η = {cfg.train.lr:g}",
                               f"T = {cfg.train.T:g}", f"seed {cfg.seed}",
                               f"init {cfg.theory.init.kind} at D = {cfg.task.D}"])  # fmt: skip
    with progress_bar("t = {task.completed:.3g} / {task.total:.3g}", eta=False) as bar:
        job = bar.add_task("compiling…", total=cfg.train.T)
        try:
            return solve(cfg, lambda t, _: bar.update(job, completed=t, description="ODE"))
        except ValueError as e:
            fail(str(e))


def _analyse(ds, i, n, eta2, group_cos, out_path, fmts, source, method):
    from headspec.apps.plots import plot_saddles
    from headspec.conventions.io import write_json_atomic
    from headspec.conventions.results import save
    from headspec.conventions.saddles import find_saddles, to_dataset, to_json

    with progress_bar(counted("slow stretches")) as bar:
        job = bar.add_task("polishing", total=0)

        def progress(done, total):
            bar.update(job, completed=done, total=total)

        try:
            found = find_saddles(ds, i, n, eta2, group_cos, progress, method)
        except ValueError as e:  # a state the analysis cannot take (non-finite Jacobian)
            bar.stop()
            fail(f"cannot analyse seed {int(ds.seed[i])} of {source}: {e}", code=3)
    sd = to_dataset(found, ds, i, eta2=eta2, group_cos=group_cos, n=n, source=source,
                    method=method)  # fmt: skip
    out.print(_table(found, sd))
    if not found:
        err.print("no slow stretch between drops in this trajectory (nothing to polish); try a "
                  "longer train.T or a larger task.D", style="yellow")  # fmt: skip
    save(sd, out_path)
    json_path = out_path.with_suffix(".json")
    write_json_atomic(json_path, to_json(found, sd))
    out.print(f"wrote {out_path}\nwrote {json_path}")
    title = f"saddles of seed {sd.attrs['seed']} ({source}), D = {sd.attrs['D']}"
    write_figures(out_path.parent, out_path.stem, [("saddles", plot_saddles(sd, title))], fmts)


def _table(found, sd):
    """Two tables with one row per fixed point — where it lies, then its spectrum — so that each
    fits 80 columns, and the leading modes in words under them (they are long)."""
    from rich.console import Group
    from rich.text import Text

    from headspec.dynamics.saddles import describe_mode

    H, F, D = sd.sizes["head"], sd.sizes["feature"], int(sd.attrs["D"])
    drift = "η-linear drift" if not sd.attrs["eta2"] else "full drift"
    where = Table(
        title=f"fixed points along seed {sd.attrs['seed']} ({drift}, n = {sd.attrs['n']})"
    )
    spectrum = Table(title=f"their spectra (escape time ln D/2λ at D = {D:g})")
    for col in ("#", "slow t", "risk: run → fixed", "max|drift|: run → fixed", "z"):
        where.add_column(col, justify="right", no_wrap=col != "max|drift|: run → fixed")
    for col in ("#", "groups", "unstable/zero", "leading λ ± s.e.", "escape time"):
        spectrum.add_column(col, justify="right", no_wrap=True)
    words = []
    for k, s in enumerate(found):
        lead = s.leading
        esc = s.escape_time(D)
        where.add_row(
            str(k + 1),
            f"{s.t_start:.3g}–{s.t_end:.3g}",
            f"{s.level:.4f} → {s.risk:.4f}",
            f"{s.drift_before:.1e} → {s.drift_after:.0e}",
            f"{s.max_z:.1f}" + ("" if s.is_fixed else " quasi*" if s.max_z <= 3 else " quasi"),
        )
        spectrum.add_row(
            str(k + 1),
            "+".join(str(len(g)) for g in s.groups),
            f"{len(s.unstable)}/{s.n_zero}",
            "—" if lead is None else f"{lead.eigenvalue.real:+.4f} ± {lead.se:.4f}",
            "stable" if not (esc < float("inf")) else f"{esc:.3g}",
        )
        if lead is not None:
            mult = sum(
                1 for m in s.modes if not m.zero
                and abs(m.eigenvalue - lead.eigenvalue) <= 1e-6 * max(1.0, abs(lead.eigenvalue))
            )  # fmt: skip
            text = describe_mode(lead, H, F, with_heads=mult == 1)
            words.append(f"{k + 1}: {text}" + (f" (×{mult}, degenerate)" if mult > 1 else ""))
    notes = ["leading modes — " + "; ".join(words)] if words else []
    bounds = [f"{k + 1}: {s.leading.err:.1e}" for k, s in enumerate(found)
              if s.leading is not None and s.leading.err > 0]  # fmt: skip
    if bounds:
        notes.append(
            "quadrature error bound of the leading λ (in its ± s.e.) — " + "; ".join(bounds)
        )
    notes.append(
        "z: largest |drift|/s.e. at the fixed point (fixed: the solver converged and z ≤ 3, "
        "within Monte-Carlo error; else quasi-fixed); unstable: Re λ > 3 s.e.; zero modes: "
        "symmetries (softmax biases)"
    )
    # fixed = converged and z ≤ 3 (one rule, dynamics.fixed_points.is_fixed): not fixed with
    # z ≤ 3 means the solver did not converge
    unconverged = [str(k + 1) for k, s in enumerate(found) if not s.is_fixed and s.max_z <= 3]
    if unconverged:
        which = ", #".join(unconverged)
        notes.append(f"* quasi-fixed although z ≤ 3: the solver did not converge (#{which})")
    return Group(where, spectrum, *(Text(n) for n in notes))
