"""Counting XLA compilations, and releasing compiled programs before a process runs out of
memory mappings.

JAX compiles one XLA program per jitted function and per distinct set of static arguments and
input shapes; a program compiled once is reused for every call with the same shapes. headspec
keeps sizes that do not change a shape (D, T, η, schedule parameters, …) as traced values, so a
second run with another D or η compiles nothing new; tests assert it with :class:`CompileCount`
and ``benchmarks/bench_compiles.py`` reports the counts and compile times of the first steps.

Example:
    >>> import jax, jax.numpy as jnp
    >>> f = jax.jit(lambda x, a: a * x)
    >>> with CompileCount() as first:
    ...     _ = f(jnp.ones(3), 2.0)
    >>> with CompileCount() as second:
    ...     _ = f(jnp.ones(3), 5.0)                 # same shapes, another value: no compile
    >>> first.n >= 1, second.n
    (True, 0)
"""

from __future__ import annotations

import threading
from pathlib import Path

import jax

_EVENT = "/jax/core/compile/backend_compile_duration"
_lock = threading.Lock()
_active: list[CompileCount] = []
_registered = False


_HIT = "/jax/compilation_cache/cache_hits"


def _listener(event: str, duration: float, **kwargs) -> None:
    if event != _EVENT:
        return
    with _lock:
        for c in _active:
            c.n += 1
            c.seconds += duration


def _hit_listener(event: str, **kwargs) -> None:
    if event != _HIT:
        return
    with _lock:
        for c in _active:
            c.cache_hits += 1


class CompileCount:
    """Context manager: ``n`` XLA programs JAX needed inside the ``with`` block (all threads) —
    compiled, or loaded from the persistent compilation cache (``cache_hits`` of them) — and
    the ``seconds`` that took. A program already in memory costs nothing and is not counted."""

    def __init__(self):
        self.n = 0
        self.cache_hits = 0
        self.seconds = 0.0

    @property
    def compiled(self) -> int:
        """Programs actually compiled (not read back from the persistent cache)."""
        return self.n - self.cache_hits

    def __enter__(self) -> CompileCount:
        global _registered
        with _lock:
            if not _registered:
                jax.monitoring.register_event_duration_secs_listener(_listener)
                jax.monitoring.register_event_listener(_hit_listener)
                _registered = True
            _active.append(self)
        return self

    def __exit__(self, *exc) -> None:
        with _lock:
            _active.remove(self)


def memory_maps() -> tuple[int, int]:
    """(memory mappings of this process, the system's limit ``vm.max_map_count``); (0, 0) where
    /proc does not tell."""
    try:
        with open("/proc/self/maps", "rb") as f:
            n = sum(1 for _ in f)
        limit = int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return 0, 0
    return n, limit


def release_if_crowded(fraction: float = 0.5) -> bool:
    """Drop JAX's in-memory compiled programs when this process holds more than ``fraction`` of
    the memory mappings the system allows; returns whether it did.

    Every compiled (or cache-loaded) XLA program keeps about 22 memory mappings for its code
    (measured with jaxlib 0.10.2 on Linux), so a process that compiles ~3000 distinct programs
    reaches the default limit of 65530 and then crashes (a segmentation fault inside the next
    compile or executable load). Long-lived processes that compile many programs — the test
    session, a reproduction, a sweep worker — call this between pieces of work; programs
    dropped are compiled again (or read back from the persistent cache) when next needed.
    """
    n, limit = memory_maps()
    if limit and n > fraction * limit:
        jax.clear_caches()
        return True
    return False


def collect_less(gen0: int = 20_000) -> None:
    """Run Python's cycle collector less often in a process of its own that traces many JAX
    programs (the command line, the test processes, the tests' smoke reproduction): objects
    alive now (the imported modules) are moved out of its reach (``gc.freeze``) and the first
    generation is collected every ``gen0`` net allocations instead of 700.

    Tracing and lowering allocate millions of short-lived objects while the process holds a
    large, long-lived heap (modules, cached programs), and every full collection walks that heap:
    measured on the tests' smoke reproduction (``reproduce(scale="smoke")``, 2 cores, warm
    compilation cache, 2026-12-03) the collector took 8.0 and 8.3 s of its ~140 s by default,
    2.0 and 2.6 s this way, at the same peak memory (2.9 GB). Not called by the library's
    functions: the process's owner decides (a user's notebook keeps Python's defaults).
    """
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(gen0, 20, 20)
