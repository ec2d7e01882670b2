"""The recording time grid shared by simulation and theory (SPEC §8).

Example:
    >>> steps, t = time_grid("log", points=3, t_min=0.1, T=10.0, D=100, B=1)
    >>> steps.tolist(), t.tolist()
    ([0, 10, 100, 1000], [0.0, 0.1, 1.0, 10.0])
"""

from __future__ import annotations

import numpy as np


def time_grid(
    grid: str, points: int, t_min: float, T: float, D: int, B: int
) -> tuple[np.ndarray, np.ndarray]:
    """Steps and times t = step·B/D of the recording grid; t = 0 first.

    ``grid`` "log": ``points`` times from ``t_min`` to T, geometrically spaced; "linear": ``points``
    equal steps up to T. Times are rounded to whole steps, duplicates dropped; the last point is
    the horizon T.
    """
    if grid == "log":
        ts = np.geomspace(t_min, T, points)
    else:
        ts = np.linspace(0.0, T, points + 1)[1:]
    steps = np.unique(np.concatenate([[0], np.round(ts * D / B).astype(np.int64)]))
    return steps, steps * B / D
