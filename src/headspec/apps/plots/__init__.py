"""Figures of a result (schema of :mod:`headspec.conventions.results`): risk, overlaps, heads.

Every function takes datasets and returns a :class:`matplotlib.figure.Figure`. Figures are built
with ``matplotlib.figure.Figure`` directly, not through ``pyplot``: importing this package selects
no backend and registers nothing in pyplot's figure list, so there is no global state and nothing
to close (a figure is freed when the last reference to it goes). In Jupyter a returned figure
displays as usual; :func:`save_figures` writes PNG, PDF or SVG files.

Time axes are logarithmic; the point t = 0 is therefore left out of every curve (the first point
drawn is the first positive time of the grid). Diverged seeds (``failed == 1``) are NaN after
their failure time; NaNs show as gaps and are ignored by means and standard errors.

Modules: :mod:`.common` (colours, titles, seed index, log time axis, NaN-aware mean and
standard error), :mod:`.risk` (:func:`plot_risk`), :mod:`.overlaps` (:func:`plot_overlaps`,
:func:`plot_compare_overlaps`, :func:`plot_head_similarity`), :mod:`.prune` (:func:`plot_prune`),
:mod:`.saddles` (:func:`plot_saddles`), :mod:`.splitmap` (:func:`plot_split_map`, the map of
uneven splits of a splitmap sweep), :mod:`.arrangements` (:func:`plot_arrangement_map`, the map
of arrangements of a splitmap sweep with ``map.candidates = "arrangements"``),
:mod:`.sweep` (:func:`final_risk`, :func:`plot_sweep`), :mod:`.save` (:func:`save_figures`;
:func:`write_figure`, through which every figure file is written, atomically).

Example:
    >>> fig = plot_risk(ds)                                   # doctest: +SKIP
    >>> paths = save_figures(ds, "figures", formats=("png", "pdf"))  # doctest: +SKIP
"""

from headspec.apps.plots.arrangements import plot_arrangement_map
from headspec.apps.plots.overlaps import (
    plot_compare_overlaps,
    plot_head_similarity,
    plot_overlaps,
)
from headspec.apps.plots.prune import plot_prune
from headspec.apps.plots.risk import plot_risk
from headspec.apps.plots.saddles import plot_saddles
from headspec.apps.plots.save import FIGURES, save_figures, write_figure
from headspec.apps.plots.splitmap import plot_split_map
from headspec.apps.plots.sweep import final_risk, plot_sweep

__all__ = [
    "FIGURES",
    "final_risk",
    "plot_arrangement_map",
    "plot_compare_overlaps",
    "plot_head_similarity",
    "plot_overlaps",
    "plot_prune",
    "plot_risk",
    "plot_saddles",
    "plot_split_map",
    "plot_sweep",
    "save_figures",
    "write_figure",
]
