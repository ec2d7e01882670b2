"""Sweeps over grids of configs on dask.distributed: resumable, loss-free, one combined dataset.

A sweep spec (TOML) names a base config (``simulate``, ``theory`` or ``splitmap``: one setting
of the map of uneven splits per point, :mod:`headspec.conventions.splitmap`), the axes to vary,
the seeds and the output folder::

    [sweep]
    kind = "simulate"              # or "theory", "splitmap"
    base = "two_phase.toml"        # optional base config, relative to this file
    out = "sweeps/phase"           # output folder (relative to the current directory)
    seeds = 8                      # seeds per grid point (default: the base config's)
    seeds_per_task = 8             # seeds batched with vmap in one task (default: all)

    [config]                       # optional overrides of the base config
    train.T = 40.0

    [axes]                         # the grid is the product of the axes, in this order
    "task.latent.scale" = {start = 0.5, stop = 3.0, num = 6}
    "model.H" = [2, 4]
    "model.activation" = ["softmax", "softmax1"]

Each task (a grid point, or a block of its seeds) runs on a Dask worker (of a local cluster, or
of a remote scheduler, which is trusted: Dask moves pickles; see :mod:`.cluster` for TLS),
which writes its result atomically to ``OUT/points/<config hash>.nc`` when it shares the output
folder with the driver (else it returns the dataset and the driver writes the file). The driver
records each finished task in ``OUT/manifest.json`` (the spec, its hash, and per task its
status, file checksum and error). Re-running the same sweep skips the tasks whose file is
intact (checksum, or config hash read from the file) and runs the rest; a changed spec is
refused unless forced. :func:`collect` combines the points into one dataset with the swept
parameters as coordinates (``OUT/sweep.nc``) and draws its figure (the final risk, or the map
of uneven splits).

Modules: :mod:`.spec` (the TOML spec), :mod:`.plan` (the resolved tasks and their hashes),
:mod:`.manifest` (the folder's bookkeeping), :mod:`.worker` (:func:`run_task`, run by the Dask
workers), :mod:`.cluster` (the Dask client), :mod:`.driver` (:func:`run`), :mod:`.collect`
(the combined dataset and figure).

Example:
    >>> spec = SweepSpec.model_validate({"sweep": {"kind": "theory", "out": "/tmp/x"},
    ...                                  "axes": {"model.H": [2, 3]}})
    >>> sw = resolve(spec)
    >>> [p.params for p in sw.points]
    [{'H': 2}, {'H': 3}]
"""

from headspec.apps.sweep.cluster import (
    CONNECT_TIMEOUT,
    available_cores,
    check_scheduler,
    check_workers,
    dask_client,
    probe_scheduler,
    tls_security,
)
from headspec.apps.sweep.collect import (
    COLLECTED,
    FIGURE,
    MAP_FIGURE,
    MAP_TABLE,
    collect,
    figure_name,
    save_collected,
    save_figure,
    save_table,
)
from headspec.apps.sweep.driver import Report, check_folder, prepare, run
from headspec.apps.sweep.errors import SweepError
from headspec.apps.sweep.manifest import (
    MANIFEST,
    MANIFEST_VERSION,
    read_manifest,
    spec_differences,
    status_counts,
    task_is_intact,
)
from headspec.apps.sweep.plan import Axis, Sweep, SweepTask, config_hash, resolve
from headspec.apps.sweep.spec import (
    MODELS,
    Range,
    SweepSection,
    SweepSpec,
    load_spec,
    spec_from_dict,
)
from headspec.apps.sweep.worker import TOKEN, WORKER_ENV, run_task

__all__ = [
    "COLLECTED",
    "CONNECT_TIMEOUT",
    "FIGURE",
    "MANIFEST",
    "MANIFEST_VERSION",
    "MAP_FIGURE",
    "MAP_TABLE",
    "MODELS",
    "TOKEN",
    "WORKER_ENV",
    "Axis",
    "Range",
    "Report",
    "Sweep",
    "SweepError",
    "SweepSection",
    "SweepSpec",
    "SweepTask",
    "available_cores",
    "check_folder",
    "check_scheduler",
    "check_workers",
    "collect",
    "config_hash",
    "dask_client",
    "figure_name",
    "load_spec",
    "prepare",
    "probe_scheduler",
    "read_manifest",
    "resolve",
    "run",
    "run_task",
    "save_collected",
    "save_figure",
    "save_table",
    "spec_differences",
    "spec_from_dict",
    "status_counts",
    "task_is_intact",
    "tls_security",
]
