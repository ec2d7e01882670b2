"""Figures written by commands: the one list of allowed formats, and the "wrote PATH" lines.

The plotting itself lives in headspec.apps.plots; this module only checks ``--format``, names the
files and saves them, printing one ``wrote PATH`` line per file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

from headspec.apps.cli.common import fail, out

FORMATS = ("png", "pdf", "svg")
_FORMATS_TEXT = ", ".join(FORMATS[:-1]) + " or " + FORMATS[-1]  # "png, pdf or svg"

FormatsOpt = Annotated[
    list[str] | None,
    typer.Option("--format", "-f", help=f"{_FORMATS_TEXT}; repeatable."),
]
FiguresDirOpt = Annotated[
    Path | None, typer.Option("--out-dir", "-o", help="Folder for figures (default: beside).")
]


def check_formats(formats: list[str] | None) -> tuple[str, ...]:
    """The ``--format`` values (default png), or exit 2 naming the first unsupported one."""
    fmts = tuple(formats or ["png"])
    bad = [f for f in fmts if f not in FORMATS]
    if bad:
        fail(f"--format {bad[0]!r} is not supported; fix: use {_FORMATS_TEXT}")
    return fmts


def write_figures(folder: Path, stem: str, figures: Iterable[tuple[str, object]], fmts) -> None:
    """Save each ``(name, figure)`` as ``folder/{stem}_{name}.{fmt}`` for every format
    (atomically, headspec.apps.plots.write_figure)."""
    from headspec.apps.plots import write_figure

    for name, fig in figures:
        for fmt in fmts:
            path = folder / f"{stem}_{name}.{fmt}"
            write_figure(fig, path, fmt, dpi=150)
            out.print(f"wrote {path}")


def write_result_figures(ds, folder: Path, stem: str, fmts=("png",), theory=None) -> None:
    """The standard figures of one result (headspec.apps.plots.save_figures), named ``{stem}_…``."""
    from headspec.apps.plots import save_figures

    for p in save_figures(ds, folder, formats=fmts, prefix=stem + "_", theory=theory):
        out.print(f"wrote {p}")
