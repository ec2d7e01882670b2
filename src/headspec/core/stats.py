"""Monte-Carlo means with standard errors: the one place where mean ± s.e. is computed.

Example:
    >>> MCEstimate.of([1.0, 2.0, 3.0])
    MCEstimate(mean=2.0, se=0.5773502691896258, n=3)
    >>> mean_se([[1.0, 3.0], [2.0, 5.0]], axis=0)
    (array([1.5, 4. ]), array([0.5, 1. ]))
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np


def mean_se(x, axis=None, ddof: int = 1):
    """Mean and standard error std/√n (``ddof`` 1) along ``axis``, ignoring NaN (NumPy).

    Non-finite values (NaN, ±inf: a diverged seed) are left out; the standard error is NaN where
    fewer than ``ddof + 1`` finite values are left.
    """
    x = np.asarray(x, dtype=np.float64)
    x = np.where(np.isfinite(x), x, np.nan)
    n = np.sum(np.isfinite(x), axis=axis)
    with warnings.catch_warnings():  # all-NaN slices give NaN, which is the answer
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(x, axis=axis)
        sd = np.nanstd(x, axis=axis, ddof=ddof)
    return mean, np.where(n > ddof, sd / np.sqrt(np.maximum(n, 1)), np.nan)


def sample_mean_se(x, axis=0):
    """Mean and standard error std/√n (ddof 1) of Monte-Carlo samples along ``axis`` (JAX; for
    use inside jitted code, where every sample is finite by construction)."""
    n = x.shape[axis]
    return x.mean(axis), x.std(axis, ddof=1) / jnp.sqrt(n)


class MCEstimate(NamedTuple):
    """A Monte-Carlo mean with its standard error (std/√n, ddof = 1)."""

    mean: float
    se: float
    n: int

    @classmethod
    def of(cls, samples) -> MCEstimate:
        x = np.asarray(samples, dtype=np.float64).ravel()
        se = float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else float("nan")
        return cls(float(x.mean()), se, int(x.size))

    def __str__(self) -> str:
        return f"{self.mean:.5f} ± {self.se:.5f}"
