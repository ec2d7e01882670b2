"""The `headspec` command line: one command per job, over the same functions as the Python API.

Every command takes ``--config FILE.toml`` and repeatable ``--set key.path=value`` overrides;
bad input gives a message that names the field and the fix, exit code 2 and no output file.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from headspec.config import BayesRunConfig, ConfigError, load_config

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


def write_json_atomic(path: Path, data: dict) -> None:
    """Write JSON through a temporary file and a rename: never a half-written file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    sys.exit(app())


if __name__ == "__main__":
    main()
