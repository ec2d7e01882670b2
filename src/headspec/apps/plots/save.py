"""Figure files: the standard figures of a result written as PNG, PDF, SVG, ...

Every figure file headspec writes goes through :func:`write_figure`: atomically (a temporary file
beside the target, fsync'ed and renamed, see :mod:`headspec.conventions.io`), with the umask's
permissions, through a symlinked path."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import xarray as xr
from matplotlib.figure import Figure

from headspec.apps.plots.overlaps import plot_head_similarity, plot_overlaps
from headspec.apps.plots.risk import plot_risk
from headspec.conventions.io import write_atomic

FIGURES = ("risk", "overlaps", "head_similarity")


def write_figure(fig: Figure, path: str | Path, fmt: str | None = None, **savefig_kw) -> Path:
    """Save ``fig`` to ``path`` atomically: a crash leaves the old file or the whole new one.

    ``fmt`` (e.g. "png", "pdf", "svg") defaults to the suffix of ``path``; the other keywords go
    to ``Figure.savefig`` (e.g. ``dpi=150``). Returns ``path``.
    """
    fmt = (fmt or Path(path).suffix).lower().lstrip(".")
    if not fmt:
        raise ValueError(f"{str(path)!r} has no suffix; fix: name the format (fmt='png')")
    return write_atomic(path, lambda tmp: fig.savefig(tmp, format=fmt, **savefig_kw))


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
                paths.append(write_figure(fig, path, fmt, dpi=150))
        finally:
            fig.clear()  # not a pyplot figure: nothing to close; drop its artists now
    return paths
