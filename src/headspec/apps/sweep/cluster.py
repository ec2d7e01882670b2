"""The Dask cluster of a sweep: a client on an existing scheduler or on a local cluster."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from headspec.apps.sweep.errors import SweepError
from headspec.apps.sweep.worker import WORKER_ENV


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, workers: int | None = None) -> Iterator[Any]:
    """A ``distributed.Client``: on an existing scheduler, or on a local cluster of ``workers``
    single-threaded processes (default: one per core) on loopback, closed on exit."""
    import logging

    from distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            client = Client(scheduler)  # waits distributed.comm.timeouts.connect (30 s)
        except (OSError, TimeoutError) as e:
            raise SweepError(
                f"cannot reach the Dask scheduler at {scheduler!r} ({type(e).__name__}: {e}); "
                "fix: check the address (tcp://host:port), or leave out --scheduler for a "
                "local cluster"
            ) from None
        try:
            yield client
        finally:
            client.close()
        return
    n = workers or available_cores()
    with (
        LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.CRITICAL,
            env=dict(WORKER_ENV),
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client
