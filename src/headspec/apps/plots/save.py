"""Figure files: the standard figures of a result written as PNG, PDF, SVG, ..."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import xarray as xr
from matplotlib.figure import Figure

from headspec.apps.plots.overlaps import plot_head_similarity, plot_overlaps
from headspec.apps.plots.risk import plot_risk

FIGURES = ("risk", "overlaps", "head_similarity")


def save_figures(
    ds: xr.Dataset,
    outdir: str | Path,
    formats: Iterable[str] = ("png",),
    prefix: str | None = None,
    theory: xr.Dataset | None = None,
) -> list[Path]:
    """Write the risk, overlaps and head-similarity figures of ``ds`` into ``outdir``.

    Files are ``{prefix}risk.{fmt}``, ``{prefix}overlaps.{fmt}``, ``{prefix}head_similarity.{fmt}``
    for each format (e.g. "png", "pdf", "svg"); ``outdir`` is created if needed. ``theory`` is
    overlaid on the risk figure. Returns the paths written, figure by figure.
    """
    fmts = [str(f).lower().lstrip(".") for f in formats]
    if not fmts:
        raise ValueError("no formats given; fix: give at least one, e.g. ('png',)")
    supported = Figure().canvas.get_supported_filetypes()
    bad = [f for f in fmts if f not in supported]
    if bad:
        raise ValueError(
            f"figure format {bad[0]!r} is not supported; fix: use one of "
            f"{', '.join(sorted(supported))}"
        )
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    prefix = prefix or ""
    makers = {
        "risk": lambda: plot_risk(ds, theory=theory),
        "overlaps": lambda: plot_overlaps(ds),
        "head_similarity": lambda: plot_head_similarity(ds),
    }
    paths = []
    for name in FIGURES:
        fig = makers[name]()
        try:
            for fmt in fmts:
                path = outdir / f"{prefix}{name}.{fmt}"
                fig.savefig(path, format=fmt, dpi=150)
                paths.append(path)
        finally:
            fig.clear()  # not a pyplot figure: nothing to close; drop its artists now
    return paths
