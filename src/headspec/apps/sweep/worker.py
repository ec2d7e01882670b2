"""The worker side of a sweep: :func:`run_task` runs one task in a Dask worker process.

Dask pickles :func:`run_task` by reference: each worker imports it from this module
(``headspec.apps.sweep.worker``), and its first call sets the worker process up.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from pathlib import Path

from headspec.apps.sweep.spec import MODELS

TOKEN = ".token"  # a random string per run: a worker that reads it shares the driver's folder
WORKER_ENV = {
    # one worker per core, each single-threaded: no oversubscription of the cores
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
_WORKER_READY = False


def run_task(kind: str, config_json: str, target: str | None = None, token: str = "") -> dict:
    """Run one task (on a worker): returns the status, the elapsed time and the dataset, or the
    error of a point that raised. Never raises for an error of the point itself.

    With ``target`` (the point file's path) and a worker that sees the sweep folder — its
    ``.token`` file holds ``token`` — the worker writes the file itself (atomically) and returns
    no dataset: the driver, which also runs the scheduler, then only records it.
    """
    global _WORKER_READY
    if not _WORKER_READY:
        _worker_setup()
        _WORKER_READY = True
    from headspec.conventions import results
    from headspec.conventions.checkpoint import path_for
    from headspec.conventions.runs import compute

    t0, c0 = time.perf_counter(), time.process_time()
    # a worker that writes the file itself also keeps a long simulation's checkpoint beside it
    shared = target is not None and _same_folder(Path(target).parent.parent, token)
    kept = path_for(target) if shared else None
    try:
        cfg = MODELS[kind].model_validate_json(config_json)
        ds = compute(kind, cfg, checkpoint=kept)
    except Exception as e:
        return {
            "status": "failed",
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc(limit=20),
            "elapsed_s": time.perf_counter() - t0,
        }
    failed = (
        []
        if "failed" not in ds
        else [  # a split map has no seeds that diverge
            int(s) for s, f in zip(ds.seed.values, ds.failed.values, strict=True) if f
        ]
    )
    wall, cpu = results.stamp_compute(ds, t0, c0)  # kept with the file
    out = {
        "status": "diverged" if failed else "done",
        "diverged_seeds": failed,
        "elapsed_s": wall,
        "cpu_s": cpu,  # this process's CPU time: below elapsed_s when the
        # worker waited for a core (other workers, the driver's analysis), above with threads
    }
    if target is not None and _same_folder(Path(target).parent.parent, token):
        results.save(ds, target)
        if kept is not None:
            kept.unlink(missing_ok=True)
        out["written"] = True
    else:  # no shared file system: the driver writes it
        out["dataset"] = ds
    return out


def dask_setup(worker) -> None:
    """Dask preload of the local cluster's workers (headspec.apps.sweep.cluster): ignore SIGINT.

    A Ctrl-C in a terminal reaches every process of the foreground group, the workers too; the
    command then closes its cluster itself (headspec.apps.cli.interrupts), so a worker ended by
    the Ctrl-C would only add a traceback. SIGTERM still ends a worker."""
    import signal

    with contextlib.suppress(ValueError):  # not the main thread: nothing to change
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _same_folder(folder: Path, token: str) -> bool:
    """The worker sees the driver's sweep folder: its ``.token`` file holds this run's token."""
    try:
        return bool(token) and (folder / TOKEN).read_text() == token
    except OSError:
        return False


def _worker_setup() -> None:
    """Once per worker process: JAX's 64-bit mode (a worker is a process of headspec's own, like
    the command line; the runs choose float64 locally anyway), the disk cache of compilations
    and, as the command line does, a less frequent cycle collector (core.compiles.collect_less)."""
    import jax

    from headspec.conventions.provenance import enable_compilation_cache
    from headspec.core.compiles import collect_less

    jax.config.update("jax_enable_x64", True)
    enable_compilation_cache()
    collect_less()
