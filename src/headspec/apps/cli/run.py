"""Commands that compute: `bayes` (Bayes-optimal risk), `simulate` (SGD), `theory` (the ODE).

`simulate` and `theory` write a result file of the same schema (headspec.conventions.results)
and end alike (``_finish``: save, summary table, figures on request, a loud warning when the
final risk is worse than ŷ = 0); exit 3 if a seed diverged or failed or an estimate is NaN
(`bayes` too, and then it writes no file).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from headspec.apps.cli.common import (
    ActivationOpt,
    ConfigOpt,
    HOpt,
    LatentOpt,
    LOpt,
    ResultOutOpt,
    ScaleOpt,
    SetOpt,
    app,
    banner,
    collect_overrides,
    counted,
    err,
    fail,
    figure_paths,
    load_or_fail,
    load_result_seed,
    out,
    plural,
    progress_bar,
)
from headspec.apps.cli.figures import write_result_figures
from headspec.apps.cli.interrupts import not_written, on_interrupt
from headspec.conventions.config import BayesRunConfig, SimulateConfig
from headspec.conventions.io import write_json_atomic


@app.command()
def bayes(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    L: LOpt = None,
    D: Annotated[
        int | None, typer.Option("--D", help="Token dimension for --route finite (task.D).")
    ] = None,
    latent: LatentOpt = None,
    scale: ScaleOpt = None,
    samples: Annotated[
        int | None, typer.Option("--samples", "-n", help="Monte-Carlo sequences.")
    ] = None,
    route: Annotated[
        str | None, typer.Option("--route", help="'projected' (D → ∞) or 'finite' (at task.D).")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Random seed.")] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the results as JSON here.")
    ] = None,
):
    """Bayes-optimal risk R_B (± standard error) and the risks of reference predictors.

    Defaults: L = 10, discrete law with atoms 2e₁, 2e₂ and probabilities 0.6, 0.4, 10^5 sequences
    in the D → ∞ route. Each row also gives its excess risk over R_B on the same samples and, in
    the D → ∞ route, its risk without sampling (exact: closed forms and quadrature; "—" where
    there is none, e.g. a Gaussian law's R_B).
    """
    overrides = collect_overrides(
        set_,
        [
            ("task.L", L),
            ("task.D", D),
            ("task.latent.scale", scale),
            ("bayes.samples", samples),
            ("seed", seed),
        ],
        [("bayes.route", route)],
        latent=latent,
    )
    cfg = load_or_fail(BayesRunConfig, config, overrides, json_out, option="--json")

    from headspec.conventions.runs import run_bayes

    started = time.time()
    with (
        on_interrupt(lambda: "" if json_out is None else not_written(json_out, started)),
        progress_bar(counted("sequences")) as bar,
    ):
        job = bar.add_task("compiling…", total=cfg.bayes.samples)

        def progress(done, total):
            bar.update(job, completed=done, total=total, description="estimating risks")

        res = run_bayes(cfg, progress=progress)
    out.print(_risk_table(cfg, res))
    keys = ("risk", "se", "excess_over_bayes", "excess_se")
    nan = [r["description"] for r in res["results"] if not all(_finite(r[k]) for k in keys)]
    if nan:  # a NaN estimate is no result: say so, exit 3, write no file
        fail(f"NaN estimates for {', '.join(nan)}: non-finite numbers in the Monte-Carlo "
             "sums, likely a latent law too large for float64; no file written; fix: use "
             "moderate atoms, means or task.latent.scale", code=3)  # fmt: skip
    if json_out is not None:
        write_json_atomic(json_out, res)
        out.print(f"wrote {json_out}")


def _finite(x) -> bool:
    import math

    return x is not None and math.isfinite(x)


def _risk_table(cfg: BayesRunConfig, res: dict) -> Table:
    """One row per predictor of a `bayes` run: risk ± s.e. and paired excess over R_B."""
    lat = cfg.task.latent
    where = "D → ∞" if cfg.bayes.route == "projected" else f"finite D = {cfg.task.D}"
    table = Table(
        title=f"Risks — L = {cfg.task.L}, {lat.kind} law (F = {lat.F}, scale {lat.scale:g}), "
        f"{where}, n = {cfg.bayes.samples:,}, seed {cfg.seed}",
        caption="risk − R_B: paired, on the same samples"
        + (
            "; exact: D → ∞ risk by quadrature, no sampling" + _largest_bound(res)
            if cfg.bayes.route == "projected"
            else ""
        ),
    )
    exact = cfg.bayes.route == "projected"
    table.add_column("predictor")
    for col in ("heads", "risk", "± s.e.", "risk − R_B") + (("exact",) if exact else ()):
        table.add_column(col, justify="right", no_wrap=True)
    for row in res["results"]:
        cells = [
            row["description"],
            str(row["heads"] or "—"),
            f"{row['risk']:.5f}",
            f"{row['se']:.5f}",
            # a difference that rounds to zero prints "+0.00000" on every CPU (the sign of a
            # round-off-sized difference is not a result)
            f"{_unsigned_zero(row['excess_over_bayes'], 5):+.5f} ± {row['excess_se']:.5f}",
        ]
        if exact:
            cells.append("—" if row.get("exact") is None else f"{row['exact']:.5f}")
        table.add_row(*cells)
    return table


#: `headspec theory` mentions the exact drift's accumulated quadrature error above this (E1's
#: first 20 time units: 2e-7)
PATH_NOTE = 1e-6


def _largest_bound(res: dict) -> str:
    """The exact column's largest error bound, for the caption ("" where none is recorded)."""
    errs = [r["exact_err"] for r in res["results"] if r.get("exact_err") is not None]
    return f" (error bounds ≤ {max(errs):.0e})" if errs else ""


@app.command()
def simulate(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    H: HOpt = None,
    L: LOpt = None,
    D: Annotated[int | None, typer.Option("--D", help="Token dimension (task.D).")] = None,
    T: Annotated[float | None, typer.Option("--T", help="Time horizon in t = samples/D.")] = None,
    activation: ActivationOpt = None,
    latent: LatentOpt = None,
    scale: ScaleOpt = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Learning rate η (train.lr).")] = None,
    seeds: Annotated[int | None, typer.Option("--seeds", help="Independent runs.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="First seed.")] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="full (D-dimensional), reduced (exact, cost per step independent of D) or "
            "diffusion (the order parameters' SDE, exact up to O(1/D): cost per unit t "
            "independent of D; options --set diffusion.dt=…, diffusion.n=…).",
        ),
    ] = None,
    out_path: ResultOutOpt = Path("simulation.nc"),
    plot: Annotated[
        bool, typer.Option("--plot/--no-plot", help="Also write PNG figures next to the result.")
    ] = False,
):
    """Train multi-head attention by online SGD at finite D; record risk and overlaps.

    Records, on a log time grid shared with `headspec theory`: the D → ∞ risk of the current
    (M, Q, b) and the exact loss on a held-out batch (± standard errors), M, Q, b and cosine
    overlaps, per seed. Writes one netCDF file (schema in headspec.conventions.results).
    """
    overrides = collect_overrides(
        set_,
        [("model.H", H), ("task.L", L), ("task.D", D), ("train.T", T), ("train.lr", lr),
         ("seeds", seeds), ("seed", seed), ("task.latent.scale", scale)],
        [("model.activation", activation), ("train.engine", engine)],
        latent=latent,
    )  # fmt: skip
    cfg = load_or_fail(SimulateConfig, config, overrides, out_path, also=_figures(out_path, plot))

    from headspec.conventions.runs import divergence_message
    from headspec.conventions.runs import simulate as run_simulation

    m, tk = cfg.model, cfg.task
    banner("simulate", [m.activation, f"H = {m.H}", f"L = {tk.L}", f"D = {tk.D}",
                        f"{tk.latent.kind} law", f"η = {cfg.train.lr:g}", f"T = {cfg.train.T:g}",
                        plural(cfg.seeds, "seed"), cfg.train.dtype,
                        f"{cfg.train.engine} engine"])  # fmt: skip
    # SGD engines count steps; the diffusion engine's work is per unit t, so its bar shows t
    sde = cfg.train.engine == "diffusion"
    per_step = cfg.train.batch / tk.D  # t per SGD step
    fmt = "t = {task.completed:.3g} / {task.total:.3g}" if sde else counted("steps")
    started = time.time()
    from headspec.conventions.checkpoint import path_for

    kept = path_for(out_path)  # the run so far, every few minutes: the same command resumes

    def note() -> str:
        said = not_written(out_path, started)
        return said + (f"; the run so far is kept in {kept} (the same command resumes from it)"
                       if kept.is_file() else "")  # fmt: skip

    with on_interrupt(note):
        with progress_bar(fmt) as bar:
            total = cfg.train.T if sde else round(cfg.train.T / per_step)
            job = bar.add_task("compiling…", total=total)

            def progress(done, total):
                done, total = (done * per_step, total * per_step) if sde else (done, total)
                bar.update(job, completed=done, total=total, description="training")

            ds = run_simulation(cfg, progress=progress, checkpoint=kept)
        nan = _finish(ds, out_path, plot)
        kept.unlink(missing_ok=True)
    failed = [i for i in range(ds.sizes["seed"]) if int(ds.failed[i])]
    for i in failed:
        err.print("error: " + divergence_message(ds, i), markup=False, style="red")
    if failed or nan:
        raise typer.Exit(3)


def _figures(out_path: Path, plot: bool) -> list:
    """The figure files ``--plot`` will write beside ``out_path`` (none without it)."""
    if not plot:
        return []
    from headspec.apps.plots.save import FIGURES

    return figure_paths(out_path.parent, out_path.stem, FIGURES, ("png",))


def _finish(ds, out_path: Path, plot: bool, extra: str = "") -> bool:
    """Save a result, print its summary, and write its figures if asked; then warn loudly of a
    final risk worse than ŷ = 0 and report NaN estimates (results.final_risk_alarms). Returns
    whether an estimate is NaN (the command then exits 3)."""
    from headspec.conventions import results

    results.save(ds, out_path)
    out.print(_summary(ds))
    out.print(f"wrote {out_path}{extra}")
    if plot:
        write_result_figures(ds, out_path.parent, out_path.stem)
    warnings, errors = results.final_risk_alarms(ds)
    for text in warnings:
        err.print("warning: " + text, markup=False, highlight=False, style="bold yellow")
    for text in errors:
        err.print("error: " + text, markup=False, highlight=False, style="red")
    return bool(errors)


def _summary(ds):
    """Final risk per seed, Bayes risk, and each head's best-matching feature: a table and two
    lines under it (80 columns suffice: numbers never wrap, the heads wrap between heads)."""
    import numpy as np
    from rich.console import Group
    from rich.text import Text

    table = Table(title=f"{ds.attrs['kind']} — final time t = {float(ds.t[-1]):g}")
    table.add_column("seed", justify="right", no_wrap=True)
    table.add_column("risk ± s.e.", justify="right", no_wrap=True)
    held_out = bool(np.isfinite(ds.test_risk.values).any())  # not for theory or the reduced engine
    if held_out:
        table.add_column("held-out ± s.e.", justify="right", no_wrap=True)
    table.add_column("heads → best feature (cos)")
    for i, s in enumerate(ds.seed.values):
        last = ds.isel(seed=i, t=-1)
        cos = np.asarray(last.cos)  # (H, F)
        heads = " ".join(  # no space inside a head's entry: lines break between heads
            f"h{h}→f{int(np.nanargmax(np.abs(c)))}({c[int(np.nanargmax(np.abs(c)))]:+.2f})"
            if np.isfinite(c).any()
            else f"h{h}→—"
            for h, c in enumerate(cos)
        )
        tr = float(last.test_risk)
        loss = "—" if not np.isfinite(tr) else f"{tr:.4f} ± {float(last.test_risk_se):.4f}"
        table.add_row(
            str(int(s)),
            f"{float(last.risk):.4f} ± {float(last.risk_se):.4f}",
            *([loss] if held_out else []),
            heads,
        )
    mean = float(ds.risk.isel(t=-1).mean())
    legend = "risk: D → ∞ risk of (M, Q, b)" + (
        "; held-out: exact loss on unseen sequences" if held_out else ""
    )
    numbers = (
        f"mean final risk {mean:.4f}; Bayes risk R_B = {ds.attrs['bayes_risk']:.4f} "
        f"± {ds.attrs['bayes_risk_se']:.4f}"
    )
    return Group(table, Text(legend), Text(numbers))


# Long only by its option list (one parameter per option); the body is under 60 lines.
@app.command()
def theory(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    init_from: Annotated[
        Path | None,
        typer.Option(
            "--init-from",
            help="Start from the exact initial (M, Q, b) of a simulation result; its task, model, "
            "train and record settings become the defaults.",
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed", help="With --init-from: the seed of that file to start from (default: all)."
        ),
    ] = None,
    H: HOpt = None,
    L: LOpt = None,
    D: Annotated[
        int | None, typer.Option("--D", help="Dimension of the perturbed initial state (task.D).")
    ] = None,
    T: Annotated[float | None, typer.Option("--T", help="Time horizon.")] = None,
    activation: ActivationOpt = None,
    latent: LatentOpt = None,
    scale: ScaleOpt = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Learning rate η.")] = None,
    n: Annotated[
        int | None,
        typer.Option(
            "--n",
            help="Sampled drift terms' base samples (theory.n): the η² "
            "term's for the exact method (default 1024), every term's for qmc/mc (8192).",
        ),
    ] = None,
    out_path: ResultOutOpt = Path("theory.nc"),
    plot: Annotated[bool, typer.Option("--plot/--no-plot", help="Also write PNG figures.")] = False,
):
    """Integrate the D → ∞ order-parameter ODE (SPEC §5) on the simulator's time grid.

    Same task/model/train/record options as `simulate`; the result has the same schema, so
    `headspec compare SIM.nc THEORY.nc` overlays them. Initial state: the exact law of the
    finite-D initial overlaps at task.D (default, one per seed), `theory.init={kind="symmetric"}`,
    a given state `theory.init={kind="given", M=[[…]], Q=[[…]]}`, or --init-from a simulation.
    The drift: theory.method, by default exact (the risk by quadrature; qmc for Bayes-softmax
    with H ≥ 4); `--set theory.method=qmc` samples every term.
    """
    from headspec.conventions.config import TheoryConfig

    overrides = collect_overrides(
        set_,
        [("model.H", H), ("task.L", L), ("task.D", D), ("train.T", T), ("train.lr", lr),
         ("theory.n", n), ("task.latent.scale", scale)],
        [("model.activation", activation)],
        latent=latent,
    )  # fmt: skip
    base = None
    if init_from is not None:
        base = _base_from_simulation(init_from, seed)
    elif seed is not None:
        overrides.append(f"seed={seed}")
    inputs = [("--init-from", init_from)]
    also = _figures(out_path, plot)
    cfg = load_or_fail(TheoryConfig, config, overrides, out_path, base, inputs=inputs, also=also)

    from headspec.conventions.runs import solve

    m, tk = cfg.model, cfg.task
    banner("theory", [m.activation, f"H = {m.H}", f"L = {tk.L}", f"{tk.latent.kind} law",
                      f"η = {cfg.train.lr:g}", f"T = {cfg.train.T:g}",
                      f"init {cfg.theory.init.kind}",
                      f"{cfg.theory.method} drift, n = {cfg.theory.n}"])  # fmt: skip
    started = time.time()
    with on_interrupt(lambda: not_written(out_path, started)):
        with progress_bar("t = {task.completed:.3g} / {task.total:.3g}", eta=False) as bar:
            job = bar.add_task("compiling…", total=cfg.train.T)

            def progress(t, total):
                bar.update(job, completed=t, description="integrating")

            try:
                ds = solve(cfg, progress=progress)
            except ValueError as e:  # inconsistent init (e.g. a simulation of another model)
                fail(str(e))
        steps = plural(int(ds.attrs["solver_steps"]), "solver step")
        nan = _finish(ds, out_path, plot, f" ({steps})")
        beyond = float(ds.attrs.get("sampled_from_t", float("nan")))
        if beyond == beyond:  # the exact drift left its reach: say where, and what it did
            err.print(
                f"note: from t = {beyond:g} a seed's Q_hh was above {ds.attrs['exact_reach']:.3g},"
                " beyond the exact quadrature's reach; the drift was sampled there (qmc on "
                f"{ds.attrs['n_drift']} samples, as theory.method = \"qmc\"); result attributes "
                "exact_reach and sampled_from_t",
                markup=False, highlight=False, style="bold yellow", soft_wrap=True,
            )  # fmt: skip
        path = float(ds.attrs.get("quadrature_path_err", float("nan")))
        if path > PATH_NOTE:  # the certified drift's errors added up to something visible
            err.print(
                f"note: the exact drift's quadrature error bound reached "
                f"{ds.attrs['quadrature_drift_err']:.1e} per unit t, {path:.1e} summed over the "
                "path (result attributes quadrature_drift_err, quadrature_path_err); where that "
                "matters compare with --set theory.method=qmc",
                markup=False, highlight=False, style="yellow", soft_wrap=True,
            )  # fmt: skip
    failed = [int(s) for s, f in zip(ds.seed.values, ds.failed.values, strict=True) if f]
    if nan and not failed:
        raise typer.Exit(3)
    if failed:
        from headspec.conventions.config.schema import unusual_settings

        causes = "".join(f"bring {c} back to the usual size, or " for c in unusual_settings(cfg))
        err.print(
            f"error: the solver failed for seed(s) {failed} (step limit or non-finite state); "
            f"fix: {causes}raise theory.max_steps, loosen theory.rtol, or lower train.lr",
            markup=False,
            style="red",
        )
        raise typer.Exit(3)


def _base_from_simulation(init_from: Path, seed: int | None) -> dict:
    """Config defaults for `theory --init-from SIM.nc`: the simulation's task, model, train and
    record settings, and an initial state read from that file (all seeds, or ``seed``). A file
    that is not a simulation, or a ``seed`` not in it, is refused here, before any work."""
    from headspec.conventions import results

    ds, _ = load_result_seed(init_from, seed)
    if ds.attrs.get("kind") != "simulation":
        fail(
            f"--init-from {str(init_from)!r} is a {ds.attrs.get('kind')} result; fix: give a "
            f"result written by `headspec simulate`"
        )
    try:
        sim_cfg = results.config_of(ds)
    except results.ResultError as e:
        fail(str(e))
    base = {k: sim_cfg[k] for k in ("task", "model", "train", "record") if k in sim_cfg}
    init = {"kind": "simulation", "path": str(init_from)}
    if seed is not None:
        init["seeds"] = [seed]
    base["theory"] = {"init": init}
    return base


def _unsigned_zero(x: float, digits: int) -> float:
    """x, or +0.0 where it rounds to zero at ``digits`` decimals (no "−0.00000" in a table)."""
    return 0.0 if round(float(x), digits) == 0 else float(x)
