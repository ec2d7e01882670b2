"""A run's compute time, kept with its result file: the wall and CPU seconds it took (what reusing
the file saves, and what :mod:`headspec.conventions.cost` models)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["COMPUTE_CPU_SECONDS", "COMPUTE_SECONDS", "stamp_compute"]

# a result file's attribute: the seconds its run took to compute (what reusing the file saves)
COMPUTE_SECONDS = "elapsed_s"
# … and the CPU seconds of the process that computed it (what headspec.conventions.cost models:
# the wall time is longer where the process waited for a core)
COMPUTE_CPU_SECONDS = "cpu_s"


def stamp_compute(ds: xr.Dataset, t0: float, c0: float) -> tuple[float, float]:
    """Write into ``ds`` the wall and CPU seconds since ``t0`` (``time.perf_counter``) and ``c0``
    (``time.process_time``) as its compute time (:data:`COMPUTE_SECONDS`,
    :data:`COMPUTE_CPU_SECONDS`), plus those of the runs before a resumed one (attributes
    ``earlier_elapsed_s``, ``earlier_cpu_s``: :mod:`headspec.conventions.checkpoint`, which
    are removed); returns them."""
    wall = time.perf_counter() - t0 + float(ds.attrs.pop("earlier_elapsed_s", 0.0))
    cpu = time.process_time() - c0 + float(ds.attrs.pop("earlier_cpu_s", 0.0))
    ds.attrs[COMPUTE_SECONDS], ds.attrs[COMPUTE_CPU_SECONDS] = wall, cpu
    return wall, cpu
