"""How fast this machine runs plain Python right now: put it beside any wall time you measure.

Run:  python benchmarks/machine_speed.py        (any Python; no headspec needed)

Prints the median of 5 timings of a fixed pure-Python workload (dict updates and small-object
allocation, the kind of work JAX's tracing does). Shared 2-core machines drift a lot: on this
project's machine one timing of it read 0.51–0.53 s at 10:45 and 1.0–1.5 s at 11:20
(2026-12-03), and three runs of the same test suite between them took 252, 349 and 414 s. A
wall time is comparable with another only when this number is close; otherwise compare within
one run (ratios).
"""

from __future__ import annotations

import statistics
import time


class _Box:
    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x


def workload() -> int:
    counts: dict[int, int] = {}
    for i in range(2_000_000):
        counts[i % 1000] = counts.get(i % 1000, 0) + i
    return sum(_Box(i).x for i in range(1_000_000)) + len(counts)


def main() -> None:
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        workload()
        times.append(time.perf_counter() - t0)
    print(f"machine speed: {statistics.median(times):.3f} s (median of 5; lower is faster)")


if __name__ == "__main__":
    main()
