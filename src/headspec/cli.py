"""The `headspec` command line: one command per job, over the same functions as the Python API.

Every command takes ``--config FILE.toml`` and repeatable ``--set key.path=value`` overrides;
bad input gives a message that names the field and the fix, exit code 2 and no output file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from headspec.config import BayesRunConfig, ConfigError, SimulateConfig, load_config
from headspec.results import write_json_atomic

app = typer.Typer(
    name="headspec",
    help="Multi-head attention on the high-dimensional single-location model "
    "(Sagitova, Duranthon, Zdeborová 2026): simulation, theory, Bayes-optimal risk.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
out = Console()
err = Console(stderr=True)


def fail(message: str, code: int = 2):
    """Print ``error: …`` on stderr and exit with ``code`` (2: bad input)."""
    err.print("error: " + message, markup=False, highlight=False, soft_wrap=True, style="red")
    raise typer.Exit(code)


def check_output_path(path: Path | None) -> None:
    """Refuse an output path whose folder is missing, or that is a folder, before any work."""
    if path is None:
        return
    if path.is_dir():
        fail(f"output {str(path)!r} is a folder; fix: give a file name")
    if not path.parent.exists():
        fail(f"the folder of output {str(path)!r} does not exist; fix: create it first")


ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="TOML config file (see experiments/).")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        help="Override a config key, repeatable: --set task.L=20 "
        "--set 'task.latent={kind=\"spike\", a=[3.0]}'. Values are TOML values.",
    ),
]


@app.command()
def bayes(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    L: Annotated[int | None, typer.Option("--L", help="Tokens per sequence (task.L).")] = None,
    D: Annotated[
        int | None, typer.Option("--D", help="Token dimension for --route finite (task.D).")
    ] = None,
    latent: Annotated[
        str | None,
        typer.Option(
            "--latent",
            help="Latent law as a TOML inline table (task.latent), e.g. "
            "'{kind=\"flipped_spike\", a=[2.0]}'.",
        ),
    ] = None,
    scale: Annotated[
        float | None, typer.Option("--scale", help="Signal strength c: θ → cθ.")
    ] = None,
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
    in the D → ∞ route. Each row also gives its excess risk over R_B on the same samples.
    """
    overrides = list(set_ or [])
    if latent is not None:
        overrides.append(f"task.latent={latent}")
    for key, val in (
        ("task.L", L),
        ("task.D", D),
        ("task.latent.scale", scale),
        ("bayes.samples", samples),
        ("seed", seed),
    ):
        if val is not None:
            overrides.append(f"{key}={val}")
    if route is not None:
        overrides.append(f"bayes.route={json.dumps(route)}")
    try:
        cfg = load_config(BayesRunConfig, config, overrides)
    except ConfigError as e:
        fail(str(e))
    check_output_path(json_out)

    from headspec.bayes import run_bayes

    lat = cfg.task.latent
    with err.status(f"estimating risks on {cfg.bayes.samples:,} sequences…"):
        res = run_bayes(cfg)
    where = "D → ∞" if cfg.bayes.route == "projected" else f"finite D = {cfg.task.D}"
    table = Table(
        title=f"Risks — L = {cfg.task.L}, {lat.kind} law (F = {lat.F}, scale {lat.scale:g}), "
        f"{where}, n = {cfg.bayes.samples:,}, seed {cfg.seed}",
    )
    for col, just in (
        ("predictor", "left"),
        ("heads", "right"),
        ("risk", "right"),
        ("± s.e.", "right"),
        ("risk − R_B (paired)", "right"),
    ):
        table.add_column(col, justify=just)
    for row in res["results"]:
        table.add_row(
            row["description"],
            str(row["heads"] or "—"),
            f"{row['risk']:.5f}",
            f"{row['se']:.5f}",
            f"{row['excess_over_bayes']:+.5f} ± {row['excess_se']:.5f}",
        )
    out.print(table)
    if json_out is not None:
        write_json_atomic(json_out, res)
        out.print(f"wrote {json_out}")


def _overrides(set_, pairs, strings=()) -> list[str]:
    """Turn shortcut options into dotted overrides (numbers as-is, strings TOML-quoted)."""
    overrides = list(set_ or [])
    for key, val in pairs:
        if val is not None:
            overrides.append(f"{key}={val}")
    for key, val in strings:
        if val is not None:
            overrides.append(f"{key}={json.dumps(val)}")
    return overrides


@app.command()
def simulate(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    H: Annotated[int | None, typer.Option("--H", help="Heads (model.H).")] = None,
    L: Annotated[int | None, typer.Option("--L", help="Tokens per sequence (task.L).")] = None,
    D: Annotated[int | None, typer.Option("--D", help="Token dimension (task.D).")] = None,
    T: Annotated[float | None, typer.Option("--T", help="Time horizon in t = samples/D.")] = None,
    activation: Annotated[
        str | None,
        typer.Option("--activation", "-a", help="softmax | softmax1 | bayes_softmax."),
    ] = None,
    latent: Annotated[
        str | None,
        typer.Option(
            "--latent", help="Latent law as a TOML inline table, e.g. '{kind=\"spike\", a=[2.0]}'."
        ),
    ] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Learning rate η (train.lr).")] = None,
    seeds: Annotated[int | None, typer.Option("--seeds", help="Independent runs.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="First seed.")] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="full (D-dimensional) or reduced (exact, cost per step independent of D).",
        ),
    ] = None,
    out_path: Annotated[Path, typer.Option("--out", "-o", help="Result file (netCDF).")] = Path(
        "simulation.nc"
    ),
    plot: Annotated[
        bool, typer.Option("--plot/--no-plot", help="Also write PNG figures next to the result.")
    ] = False,
):
    """Train multi-head attention by online SGD at finite D; record risk and overlaps.

    Records, on a log time grid shared with `headspec theory`: the D → ∞ risk of the current
    (M, Q, b) and the exact loss on a held-out batch (± standard errors), M, Q, b and cosine
    overlaps, per seed. Writes one netCDF file (schema in headspec.results).
    """
    overrides = _overrides(
        set_,
        [
            ("model.H", H),
            ("task.L", L),
            ("task.D", D),
            ("train.T", T),
            ("train.lr", lr),
            ("seeds", seeds),
            ("seed", seed),
        ],
        [("model.activation", activation), ("train.engine", engine)],
    )
    if latent is not None:
        overrides.append(f"task.latent={latent}")
    try:
        cfg = load_config(SimulateConfig, config, overrides)
    except ConfigError as e:
        fail(str(e))
    check_output_path(out_path)

    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from headspec.sgd import divergence_message
    from headspec.sgd import simulate as run_simulation

    m, tk = cfg.model, cfg.task
    err.print(
        f"simulate: {m.activation}, H = {m.H}, L = {tk.L}, D = {tk.D}, {tk.latent.kind} law, "
        f"η = {cfg.train.lr:g}, T = {cfg.train.T:g}, {cfg.seeds} seeds, {cfg.train.dtype}, "
        f"{cfg.train.engine} engine",
        highlight=False,
    )
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} steps"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=False,
    ) as bar:
        total = round(cfg.train.T * tk.D / cfg.train.batch)
        job = bar.add_task("compiling…", total=total)

        def progress(done, total):
            bar.update(job, completed=done, total=total, description="training")

        ds = run_simulation(cfg, progress=progress)
    _finish(ds, out_path, plot)
    failed = [i for i in range(ds.sizes["seed"]) if int(ds.failed[i])]
    for i in failed:
        err.print("error: " + divergence_message(ds, i), markup=False, style="red")
    if failed:
        raise typer.Exit(3)


def _finish(ds, out_path: Path, plot: bool, extra: str = "") -> None:
    """Save a result, print its summary, and write its figures if asked."""
    from headspec import results

    results.save(ds, out_path)
    _summary(ds)
    out.print(f"wrote {out_path}{extra}")
    if plot:
        from headspec.plots import save_figures

        for p in save_figures(ds, out_path.parent, prefix=out_path.stem + "_"):
            out.print(f"wrote {p}")


def _summary(ds) -> None:
    """Final risk per seed, Bayes risk, and each head's best-matching feature."""
    import numpy as np

    table = Table(title=f"{ds.attrs['kind']} — final time t = {float(ds.t[-1]):g}")
    table.add_column("seed", justify="right")
    table.add_column("risk (D → ∞) ± s.e.", justify="right")
    table.add_column("held-out loss ± s.e.", justify="right")
    table.add_column("heads → best feature (cos)")
    for i, s in enumerate(ds.seed.values):
        last = ds.isel(seed=i, t=-1)
        cos = np.asarray(last.cos)  # (H, F)
        heads = "  ".join(
            f"h{h}→f{int(np.nanargmax(np.abs(c)))} ({c[int(np.nanargmax(np.abs(c)))]:+.2f})"
            if np.isfinite(c).any()
            else f"h{h}→—"
            for h, c in enumerate(cos)
        )
        tr = float(last.test_risk)
        table.add_row(
            str(int(s)),
            f"{float(last.risk):.4f} ± {float(last.risk_se):.4f}",
            "—" if not np.isfinite(tr) else f"{tr:.4f} ± {float(last.test_risk_se):.4f}",
            heads,
        )
    mean = float(ds.risk.isel(t=-1).mean())
    table.caption = (
        f"mean final risk {mean:.4f}; Bayes risk R_B = {ds.attrs['bayes_risk']:.4f} "
        f"± {ds.attrs['bayes_risk_se']:.4f}"
    )
    out.print(table)


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
    H: Annotated[int | None, typer.Option("--H", help="Heads (model.H).")] = None,
    L: Annotated[int | None, typer.Option("--L", help="Tokens per sequence (task.L).")] = None,
    D: Annotated[
        int | None, typer.Option("--D", help="Dimension of the perturbed initial state (task.D).")
    ] = None,
    T: Annotated[float | None, typer.Option("--T", help="Time horizon.")] = None,
    activation: Annotated[
        str | None, typer.Option("--activation", "-a", help="softmax | softmax1 | bayes_softmax.")
    ] = None,
    latent: Annotated[
        str | None, typer.Option("--latent", help="Latent law as a TOML inline table.")
    ] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Learning rate η.")] = None,
    n: Annotated[
        int | None, typer.Option("--n", help="Base samples of the drift (theory.n).")
    ] = None,
    out_path: Annotated[Path, typer.Option("--out", "-o", help="Result file (netCDF).")] = Path(
        "theory.nc"
    ),
    plot: Annotated[bool, typer.Option("--plot/--no-plot", help="Also write PNG figures.")] = False,
):
    """Integrate the D → ∞ order-parameter ODE (SPEC §5) on the simulator's time grid.

    Same task/model/train/record options as `simulate`; the result has the same schema, so
    `headspec compare SIM.nc THEORY.nc` overlays them. Initial state: the exact law of the
    finite-D initial overlaps at task.D (default, one per seed), `theory.init={kind="symmetric"}`,
    a given state `theory.init={kind="given", M=[[…]], Q=[[…]]}`, or --init-from a simulation.
    """
    from headspec import results
    from headspec.config import TheoryConfig

    overrides = _overrides(
        set_,
        [("model.H", H), ("task.L", L), ("task.D", D), ("train.T", T), ("train.lr", lr),
         ("theory.n", n)],
        [("model.activation", activation)],
    )  # fmt: skip
    if latent is not None:
        overrides.append(f"task.latent={latent}")
    base = None
    if init_from is not None:
        try:
            sim_cfg = results.config_of(results.load(init_from))
        except results.ResultError as e:
            fail(str(e))
        base = {k: sim_cfg[k] for k in ("task", "model", "train", "record") if k in sim_cfg}
        init = {"kind": "simulation", "path": str(init_from)}
        if seed is not None:
            init["seeds"] = [seed]
        base["theory"] = {"init": init}
    elif seed is not None:
        overrides.append(f"seed={seed}")
    try:
        cfg = load_config(TheoryConfig, config, overrides, base=base)
    except ConfigError as e:
        fail(str(e))
    check_output_path(out_path)

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from headspec.theory import solve

    m, tk = cfg.model, cfg.task
    err.print(
        f"theory: {m.activation}, H = {m.H}, L = {tk.L}, {tk.latent.kind} law, η = "
        f"{cfg.train.lr:g}, T = {cfg.train.T:g}, init {cfg.theory.init.kind}, "
        f"{cfg.theory.sampler} with n = {cfg.theory.n}",
        highlight=False,
    )
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("t = {task.completed:.3g} / {task.total:.3g}"),
        TimeElapsedColumn(),
        console=err,
    ) as bar:
        job = bar.add_task("compiling…", total=cfg.train.T)

        def progress(t, total):
            bar.update(job, completed=t, description="integrating")

        try:
            ds = solve(cfg, progress=progress)
        except ValueError as e:  # inconsistent init (e.g. a simulation of another model)
            fail(str(e))
    _finish(ds, out_path, plot, f" ({ds.attrs['solver_steps']} solver steps)")
    failed = [int(s) for s, f in zip(ds.seed.values, ds.failed.values, strict=True) if f]
    if failed:
        err.print(
            f"error: the solver failed for seed(s) {failed} (step limit or non-finite state); "
            "fix: raise theory.max_steps, loosen theory.rtol, or lower train.lr",
            markup=False,
            style="red",
        )
        raise typer.Exit(3)


@app.command()
def compare(
    sim: Annotated[Path, typer.Argument(help="A simulation result.")],
    theory_file: Annotated[Path, typer.Argument(help="A theory result.")],
    until: Annotated[
        float | None, typer.Option("--until", help="Compare only up to this time.")
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out-dir", "-o", help="Folder for figures (default: beside).")
    ] = None,
    formats: Annotated[
        list[str] | None, typer.Option("--format", "-f", help="png, pdf or svg; repeatable.")
    ] = None,
):
    """Overlay a simulation and a theory (risk and overlaps) and print the largest deviations."""
    from headspec import results
    from headspec.analysis import compare as compare_results

    fmts = tuple(formats or ["png"])
    bad = [f for f in fmts if f not in ("png", "pdf", "svg")]
    if bad:
        fail(f"--format {bad[0]!r} is not supported; fix: use png, pdf or svg")
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
    from headspec.plots import plot_compare_overlaps, plot_risk

    stem = f"{sim.stem}_vs_{theory_file.stem}"
    for name, fig in (
        ("risk", plot_risk(s_ds, theory=t_ds)),
        ("overlaps", plot_compare_overlaps(s_ds, t_ds)),
    ):
        for fmt in fmts:
            path = folder / f"{stem}_{name}.{fmt}"
            fig.savefig(path, format=fmt, dpi=150)
            out.print(f"wrote {path}")


@app.command()
def prune(
    result: Annotated[Path, typer.Argument(help="A result file written by simulate or theory.")],
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

    from headspec import results
    from headspec.plots import plot_prune
    from headspec.prune import prune_result

    try:
        ds = results.load(result)
    except results.ResultError as e:
        fail(str(e))
    seeds = [int(s) for s in ds.seed.values]
    if seed is not None and seed not in seeds:
        fail(f"--seed {seed} is not in {result}; fix: use one of {seeds}")
    i = 0 if seed is None else seeds.index(seed)
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
    path = folder / f"{result.stem}_prune.png"
    plot_prune(res, f"pruning, seed {seeds[i]} — {result.name}", ds.attrs["bayes_risk"]).savefig(
        path, dpi=150
    )
    out.print(f"wrote {path}")


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
    """Reproduce the paper's findings E1–E6 (SPEC §7) and write report/index.md and index.html:
    a claims table with the measured number behind each claim, figures, the environment and
    every config used. A failing experiment is reported; the others still run."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from headspec.experiments import EXPERIMENT_FILES
    from headspec.experiments import reproduce as run_all

    if scale not in ("quick", "full"):
        fail(f"--scale {scale!r} is not known; fix: use quick or full")
    ids = None
    if only:
        ids = [x.strip().upper() for x in only.split(",") if x.strip()]
        bad = [x for x in ids if x not in EXPERIMENT_FILES]
        if bad:
            fail(f"--only: unknown experiment {bad[0]!r}; fix: use some of "
                 f"{', '.join(EXPERIMENT_FILES)}")  # fmt: skip
    if out_dir.exists() and not out_dir.is_dir():
        fail(f"--out {str(out_dir)!r} is a file; fix: give a folder")
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} experiments"),
        TimeElapsedColumn(),
        console=err,
    ) as bar:
        job = bar.add_task("starting…", total=len(ids or EXPERIMENT_FILES))

        def progress(exp_id, done, total):
            bar.update(job, completed=done, description=f"running {exp_id}" if exp_id else "done")

        outcomes = run_all(scale=scale, outdir=out_dir, only=ids, progress=progress)
    table = Table(title=f"claims ({scale} scale)")
    for col in ("exp.", "claim", "value", "holds"):
        table.add_column(col)
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


@app.command("plot")
def plot_cmd(
    result: Annotated[Path, typer.Argument(help="A result file written by simulate or theory.")],
    out_dir: Annotated[
        Path | None, typer.Option("--out-dir", "-o", help="Folder for figures (default: beside).")
    ] = None,
    formats: Annotated[
        list[str] | None, typer.Option("--format", "-f", help="png, pdf or svg; repeatable.")
    ] = None,
    theory: Annotated[
        Path | None, typer.Option("--theory", help="A theory result to overlay.")
    ] = None,
):
    """Figures of a result: risk vs t, cosine overlaps per head and feature, head similarity."""
    from headspec import results

    fmts = tuple(formats or ["png"])
    bad = [f for f in fmts if f not in ("png", "pdf", "svg")]
    if bad:
        fail(f"--format {bad[0]!r} is not supported; fix: use png, pdf or svg")
    try:
        ds = results.load(result)
        th = results.load(theory) if theory is not None else None
    except results.ResultError as e:
        fail(str(e))
    folder = out_dir or result.parent
    if folder.exists() and not folder.is_dir():
        fail(f"--out-dir {str(folder)!r} is a file; fix: give a folder")
    from headspec.plots import save_figures

    for p in save_figures(ds, folder, formats=fmts, prefix=result.stem + "_", theory=th):
        out.print(f"wrote {p}")


# ----------------------------------------------------------------------------- sweep
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
        typer.Option(
            "--scheduler",
            help="Address of an existing Dask scheduler (tcp://host:8786); its workers need "
            "headspec installed. Default: a local cluster that starts and stops with the command.",
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
    point failed (its error is in the manifest), 130 if interrupted.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from headspec import sweep as sw

    try:
        spec, root = sw.load_spec(spec_path, set_, axis)
        plan = sw.resolve(spec, root, out_dir)
    except ConfigError as e:
        fail(str(e))
    if plan.out.exists() and not plan.out.is_dir():
        fail(f"output {str(plan.out)!r} is a file; fix: give a folder (--out)")
    shape = " × ".join(f"{a.name}[{len(a.values)}]" for a in plan.axes)
    n_points = len(plan.points)
    err.print(
        f"sweep: {plan.kind}, {n_points} points ({shape}) × {plan.seeds} seeds in "
        f"{len(plan.tasks)} tasks → {plan.out}",
        highlight=False,
    )
    bar = Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("tasks"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
    )
    counts = {"done": 0, "diverged": 0, "failed": 0}
    job = None

    def on_start(client, n_todo, n_total):
        nonlocal job
        where = scheduler or f"local cluster, {len(client.scheduler_info()['workers'])} workers"
        err.print(f"dask: {where}; dashboard {client.dashboard_link}", highlight=False)
        if n_todo < n_total:
            err.print(f"resuming: {n_total - n_todo} of {n_total} tasks already finished")
        bar.start()
        job = bar.add_task("running", total=n_todo)

    def on_result(task, entry):
        counts[entry["status"]] += 1
        desc = ", ".join(f"{v} {k}" for k, v in counts.items() if v and k != "done") or "running"
        bar.update(job, advance=1, description=desc)

    try:
        report = sw.run(
            plan,
            scheduler=scheduler,
            workers=workers,
            force=force,
            on_start=on_start,
            on_result=on_result,
        )
    except sw.SweepError as e:
        bar.stop()
        fail(str(e))
    except KeyboardInterrupt:
        bar.stop()
        err.print(
            "interrupted: every finished point is kept; run the same command again to resume",
            markup=False,
        )
        raise typer.Exit(130) from None
    bar.stop()
    table = Table(title=f"sweep {plan.out}")
    for col in ("tasks", "finished before", "finished now", "of which diverged", "failed"):
        table.add_column(col, justify="right")
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
        out.print(f"wrote {sw.save_figure(sw.collect(plan.out), plan.out)}")
    if report.failed:
        raise typer.Exit(1)


@sweep_app.command("collect")
def sweep_collect(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="Output folder of a sweep.")],
    out_path: Annotated[
        Path | None, typer.Option("--out", "-o", help="Combined file (default: DIR/sweep.nc).")
    ] = None,
):
    """Combine the finished points of a sweep into one netCDF dataset (axes as coordinates)."""
    from headspec import sweep as sw

    check_output_path(out_path)
    try:
        ds = sw.collect(folder)
    except sw.SweepError as e:
        fail(str(e))
    path = sw.save_collected(ds, out_path or folder / sw.COLLECTED)
    dims = ", ".join(f"{k} = {v}" for k, v in ds.sizes.items())
    out.print(f"{ds.attrs['points_finished']} of {ds.attrs['points']} points finished; {dims}")
    out.print(f"wrote {path}")
    out.print(f"wrote {sw.save_figure(ds, path.parent)}")


@sweep_app.command("status")
def sweep_status(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="Output folder of a sweep.")],
):
    """Counts of finished, diverged, failed and pending tasks, and the errors of failed ones."""
    from headspec import sweep as sw

    try:
        manifest = sw.read_manifest(folder)
    except sw.SweepError as e:
        fail(str(e))
    table = Table(title=f"sweep {folder} ({manifest['spec']['kind']})")
    table.add_column("status")
    table.add_column("tasks", justify="right")
    for k, v in sorted(sw.status_counts(manifest).items()):
        table.add_row(k, str(v))
    out.print(table)
    for e in manifest["tasks"]:
        if e["status"] == "failed":
            err.print(f"failed: {e['params']}: {e.get('error', '?')}", markup=False, style="red")


def version_callback(value: bool):
    if value:
        from headspec import __version__

        out.print(f"headspec {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=version_callback, is_eager=True, help="Show version."),
    ] = False,
):
    """headspec: how attention heads specialise, in simulation and theory."""


def main() -> None:
    """Console entry point."""
    from headspec._meta import enable_compilation_cache

    enable_compilation_cache()
    sys.exit(app())


if __name__ == "__main__":
    main()
