"""Studies: longer measurements beside the paper's findings, run by ``headspec study NAME``.

A study is a recipe of a second registry (:data:`STUDIES`, filled by ``@study`` in each module
here): typed parameters in its TOML (``recipes/<name>.toml``), runs through the same
:class:`~headspec.apps.experiments.base.Context` as E1–E9 (reused by their full resolved config,
provenance recorded, on a Dask cluster), claims as data, figures and a report in its own folder
(default ``studies/out/<name>``). Modules: ``escape`` (t_esc and its statistics, shared),
``escape_time``, ``finite_size``, ``e6_classification`` and ``arrangement_odds`` (the studies;
importing them registers them).
"""

from headspec.apps.experiments.registry import STUDIES
from headspec.apps.studies import (  # noqa: F401
    arrangement_odds,
    e6_classification,
    escape_time,
    finite_size,
)

__all__ = ["STUDIES"]
