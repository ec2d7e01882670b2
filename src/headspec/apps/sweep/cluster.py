"""The Dask cluster of a sweep: a client on an existing scheduler or on a local cluster.

A remote scheduler is trusted: Dask moves pickled functions and results between the command,
the scheduler and its workers, so whoever runs that scheduler can run code here. Over networks
that are not private, use TLS (``tls://`` addresses and :func:`tls_security`). An address is
checked for syntax before anything happens (:func:`check_scheduler`) and then asked who it is
within a short timeout, so that nothing listening, or something that is not a Dask scheduler,
is one error line instead of a hang or a traceback.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from headspec.apps.sweep.errors import SweepError
from headspec.apps.sweep.worker import WORKER_ENV

PRELOAD = "headspec.apps.sweep.worker"  # its dask_setup: a local worker ignores SIGINT

# Dask's nanny starts its workers with MALLOC_TRIM_THRESHOLD_=65536 (memory handed back to the
# system eagerly). JAX allocates and frees its buffers at every call, so glibc then unmaps and
# maps pages all the time: a jitted reduced-engine kernel ran 4–5× slower in such a worker than
# in a plain process, and a quick reproduction spent a quarter of its CPU time in the kernel.
# The local cluster leaves glibc's own (adaptive) threshold; workers of a remote scheduler are
# configured there (docs/sweep.md, "Execution").
NO_MALLOC_TRIM = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
CONNECT_TIMEOUT = 10.0  # at most this many seconds to reach a scheduler and hear it answer
_HOST_PORT_SCHEMES = ("tcp", "tls", "ws", "wss")
_FIX = (
    "fix: give the address of a running Dask scheduler, e.g. --scheduler tcp://host:8786 "
    "(tls://host:8786 with --tls-* options), or leave out --scheduler for a local cluster"
)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


WORKER_BYTES = 1 << 30  # a local worker's memory: JAX, its compiled programs, one run's arrays


def check_workers(workers: int | None) -> int:
    """The size of a local cluster: ``workers`` (default: one per core), refused (SweepError,
    naming --workers and the fix) beyond the cores this process may use or beyond the memory
    for one :data:`WORKER_BYTES` each; a larger cluster only slows every worker down (and a
    100 000-worker request took minutes and gigabytes before it failed)."""
    from headspec.conventions.budget import available_memory, format_bytes

    cores = available_cores()
    if workers is None:
        return cores
    room = max(1, int(available_memory() // WORKER_BYTES))
    most = min(cores, room)
    if workers > most:
        free = format_bytes(available_memory())
        why = f"this machine has {cores} cores" if most == cores else f"~1 GB each, {free} free"
        raise SweepError(
            f"--workers {workers}: a local cluster of more than {most} workers ({why}) runs no "
            f"faster; fix: --workers {most} or fewer, or a Dask scheduler of a cluster "
            "(--scheduler)"
        )
    return workers


WORKER_WAIT = 60.0  # seconds a scheduler may take to get its first worker (a job queue's start)


def _wait_for_a_worker(client, scheduler: str, seconds: float) -> None:
    """Raise SweepError if the scheduler has no worker within ``seconds`` (tasks sent to it would
    wait for ever, silently)."""
    if client.scheduler_info().get("workers"):
        return
    try:
        client.wait_for_workers(1, timeout=seconds)
    except Exception:  # distributed raises TimeoutError (asyncio's or its own)
        raise SweepError(
            f"the Dask scheduler at {scheduler!r} has no workers (waited {seconds:g} s); fix: "
            f"start some (dask worker {scheduler}), or drop --scheduler for a local cluster"
        ) from None


def check_scheduler(address: str) -> str:
    """The address of a Dask scheduler, checked without connecting: a scheme Dask knows (none
    means tcp) and, for tcp/tls/ws/wss, a host and a port. Raises :class:`SweepError` naming
    --scheduler and the fix; returns the address with its scheme."""
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port
    from distributed.comm.registry import backends

    text = address.strip()
    if not text:
        raise SweepError(f"--scheduler is empty; {_FIX}")
    scheme, loc = parse_address(text, strict=False)
    if scheme not in backends:
        raise SweepError(
            f"--scheduler {address!r} has the unknown scheme {scheme!r} (Dask knows "
            f"{', '.join(sorted(backends))}); {_FIX}"
        )
    if scheme in _HOST_PORT_SCHEMES:
        try:
            host, port = parse_host_port(loc)
        except ValueError:
            host, port = "", 0
        if not host or not 0 < int(port) < 65536:
            raise SweepError(f"--scheduler {address!r} needs host:port (port 1–65535); {_FIX}")
    return f"{scheme}://{loc}"


def tls_security(ca_file: Path | None, cert: Path | None, key: Path | None) -> Any:
    """A ``distributed.security.Security`` for TLS to a remote scheduler: the certificate
    authority that signed the scheduler's certificate, and this client's certificate and key
    (``key`` may be left out when ``cert`` holds both). Files that do not exist raise
    :class:`SweepError` naming the option."""
    from distributed.security import Security

    for option, path in (("--tls-ca-file", ca_file), ("--tls-cert", cert), ("--tls-key", key)):
        if path is not None and not Path(path).is_file():
            raise SweepError(f"{option} {str(path)!r} is not a file; fix: check the path")
    return Security(
        tls_ca_file=None if ca_file is None else str(ca_file),
        tls_client_cert=None if cert is None else str(cert),
        tls_client_key=None if key is None else str(key),
        require_encryption=True,
    )


def connect_timeout(seconds: float | None = None) -> float:
    """``seconds``, or Dask's ``distributed.comm.timeouts.connect`` but at most
    :data:`CONNECT_TIMEOUT`."""
    if seconds is not None:
        return float(seconds)
    import dask.config
    import distributed  # noqa: F401  (its config defaults)
    from dask.utils import parse_timedelta

    configured = parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), "s")
    return min(CONNECT_TIMEOUT, float(configured))


def probe_scheduler(address: str, security: Any = None, timeout: float | None = None) -> None:
    """Ask ``address`` who it is (Dask's ``identity`` call) and wait at most ``timeout``
    seconds (:func:`connect_timeout`) for the answer "Scheduler"; raises :class:`SweepError`
    otherwise (nothing listens, a peer that is not Dask — which may never answer —, a Dask
    worker, a TLS mismatch)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed.core import rpc

    timeout = connect_timeout(timeout)
    args = security.get_connection_args("client") if security is not None else {}

    async def identity():
        r = rpc(address, connection_args=args, timeout=timeout)
        try:
            return await r.identity()
        finally:
            await r.close_rpc()

    async def bounded():
        return await asyncio.wait_for(identity(), timeout)

    try:
        with ThreadPoolExecutor(1) as ex:  # its own event loop, also under a running one
            info = ex.submit(asyncio.run, bounded()).result()
    except TimeoutError:
        raise SweepError(
            f"cannot reach the Dask scheduler at --scheduler {address!r}: none answered within "
            f"{timeout:g} s (nothing listens there, or something that is not a Dask scheduler); "
            + _FIX
        ) from None
    except Exception as e:  # refused, unreachable, garbage from a non-Dask peer, TLS errors
        text = " ".join(str(e).split())[:200]
        raise SweepError(
            f"cannot reach the Dask scheduler at --scheduler {address!r} "
            f"({type(e).__name__}: {text}); {_FIX}"
        ) from None
    kind = info.get("type") if isinstance(info, dict) else None
    if kind != "Scheduler":
        raise SweepError(
            f"--scheduler {address!r} answered as {kind or 'something else'}, not as a Dask "
            f"scheduler; {_FIX}"
        )


@contextlib.contextmanager
def dask_client(
    scheduler: str | None = None,
    workers: int | None = None,
    security: Any = None,
    timeout: float | None = None,
) -> Iterator[Any]:
    """A ``distributed.Client``: on an existing scheduler (checked by :func:`check_scheduler`
    and :func:`probe_scheduler` first, waiting at most ``timeout`` seconds; ``security`` e.g.
    from :func:`tls_security`), or on a
    local cluster of ``workers`` single-threaded processes (default: one per core) on loopback,
    closed on exit."""
    import logging

    import dask
    from distributed import Client, LocalCluster

    if scheduler is not None:
        address = check_scheduler(scheduler)
        timeout = connect_timeout(timeout)
        probe_scheduler(address, security, timeout)
        try:
            client = Client(address, timeout=timeout, security=security)
        except Exception as e:
            raise SweepError(
                f"cannot reach the Dask scheduler at {scheduler!r} ({type(e).__name__}: {e}); "
                + _FIX
            ) from None
        with _closed_after(client.close):
            _wait_for_a_worker(client, scheduler, max(timeout, WORKER_WAIT))
            yield client
        return
    n = check_workers(workers)
    with dask.config.set(NO_MALLOC_TRIM):
        with _signals_held():  # a Ctrl-C while the workers start: after the cluster is up
            cluster = LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
                silence_logs=logging.CRITICAL,
                env=dict(WORKER_ENV),
                preload=[PRELOAD],  # workers ignore Ctrl-C: the command closes them (worker.py)
            )
            try:
                client = Client(cluster)
            except BaseException:
                cluster.close()
                raise

        def close():
            client.close()
            cluster.close()

        with _closed_after(close, on_interrupt=lambda: _stop_workers(cluster)):
            yield client


@contextlib.contextmanager
def _closed_after(close, on_interrupt=None) -> Iterator[None]:
    """Run the body, then ``close()``: after a normal end with signals held (a Ctrl-C as the last
    run ends waits for the close instead of cutting it short); after an interrupt, first
    ``on_interrupt()``, and not held (a further signal ends the command at once)."""
    interrupted = False
    try:
        yield
    except KeyboardInterrupt:
        interrupted = True
        if on_interrupt is not None:
            on_interrupt()
        raise
    finally:
        with contextlib.nullcontext() if interrupted else _signals_held():
            close()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold back SIGINT and SIGTERM while a local cluster starts or closes normally (main thread
    only), then hand the first one held to the handler it was meant for.

    An interrupt inside Dask's ``Client.close`` cancels the close half-way: the client stays
    "closing", the cluster then closes the event loop, and at exit the client's ``__del__`` prints
    "Exception ignored … IOLoop is closed" — a stray traceback after an interrupted command. A
    second signal while held goes to the handler at once (so two Ctrl-C still stop a close that
    hangs)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signums = (signal.SIGINT, signal.SIGTERM)
    handlers = {s: signal.getsignal(s) for s in signums}
    held: list[int] = []

    def hold(signum, frame):
        held.append(signum)
        if len(held) > 1:
            _deliver(handlers[signum], signum, frame)

    for s in signums:
        if callable(handlers[s]):  # an ignored or default signal stays as it is
            signal.signal(s, hold)
    try:
        yield
    finally:
        for s in signums:
            if callable(handlers[s]):
                signal.signal(s, handlers[s])
        if held:
            _deliver(handlers[held[0]], held[0], None)


def _deliver(handler: Any, signum: int, frame: Any) -> None:
    if callable(handler):
        handler(signum, frame)


def _stop_workers(cluster: Any, timeout: float = 1.0) -> None:
    """Close a local cluster's workers now, each given ``timeout`` seconds to end its task before
    its process is killed (an interrupted command: Dask's own close waits 4 s per busy worker)."""
    import asyncio

    async def close():
        nannies = list(cluster.workers.values())
        await asyncio.gather(*(w.close(timeout=timeout) for w in nannies), return_exceptions=True)

    with contextlib.suppress(Exception):
        cluster.sync(close)
