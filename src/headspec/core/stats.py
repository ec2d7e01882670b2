"""Monte-Carlo means with standard errors: the one place where mean ± s.e. is computed.

Also the two statistics of escape-time laws (E2's log-D fit, the escape-time and finite-size
studies): a median over seeds some of which are censored (:func:`censored_median`) and a
straight line fitted by weighted least squares (:func:`weighted_line`); and whether two samples of
categories (the arrangement each seed ended in) share one law (:func:`compare_categories`).

Example:
    >>> MCEstimate.of([1.0, 2.0, 3.0])
    MCEstimate(mean=2.0, se=0.5773502691896258, n=3)
    >>> mean_se([[1.0, 3.0], [2.0, 5.0]], axis=0)
    (array([1.5, 4. ]), array([0.5, 1. ]))
    >>> fit = weighted_line(np.array([0.0, 1.0, 2.0]), np.array([1.0, 3.0, 5.0]), np.ones(3))
    >>> round(fit.slope, 6), round(fit.intercept, 6), round(fit.chi2, 6)
    (2.0, 1.0, 0.0)
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


def censored_median(x, rng: np.random.Generator, n_boot: int = 2000) -> tuple[float, float]:
    """Median over seeds and its bootstrap standard error, where +inf marks a censored seed (it
    had not crossed by the horizon) and NaN a seed left out. Exact while fewer than half are
    censored, else (NaN, NaN); the s.e. is NaN when more than half the resamples' medians are
    infinite."""
    x = np.asarray(x, dtype=np.float64)
    x = x[~np.isnan(x)]
    n = x.size
    if n < 2 or np.isinf(x).sum() >= n / 2:
        return float("nan"), float("nan")
    boot = np.median(x[rng.integers(0, n, (n_boot, n))], axis=1)  # (n_boot,)
    boot = boot[np.isfinite(boot)]
    return float(np.median(x)), float(boot.std(ddof=1)) if boot.size > n_boot // 2 else np.nan


class LineFit(NamedTuple):
    """y = intercept + slope·x by weighted least squares (:func:`weighted_line`)."""

    intercept: float
    slope: float
    slope_se: float  # from the weights alone
    chi2: float
    dof: int

    @property
    def chi2_dof(self) -> float:
        return self.chi2 / self.dof if self.dof > 0 else float("nan")

    @property
    def slope_se_scaled(self) -> float:
        """The slope's s.e. inflated by √(χ²/dof) where that exceeds 1 (the points scatter more
        than their standard errors say)."""
        return self.slope_se * (float(np.sqrt(max(1.0, self.chi2_dof))) if self.dof > 0 else 1.0)


def weighted_line(x, y, se) -> LineFit:
    """Fit y = a + b·x with weights 1/se² (x, y, se: (k,) arrays, k ≥ 2)."""
    x, y, se = (np.asarray(v, dtype=np.float64) for v in (x, y, se))
    X = np.stack([np.ones_like(x), x], 1)  # (k, 2)
    W = 1.0 / se**2  # (k,)
    cov = np.linalg.inv(X.T @ (W[:, None] * X))  # (2, 2)
    beta = cov @ X.T @ (W * y)  # (2,)
    chi2 = float((W * (y - X @ beta) ** 2).sum())
    return LineFit(float(beta[0]), float(beta[1]), float(np.sqrt(cov[1, 1])), chi2, len(y) - 2)


class CategoryTest(NamedTuple):
    """Two samples of categories compared: the counts per category (in ``categories`` order),
    the χ² statistic of the 2 × k table, its permutation p-value and how many permutations."""

    categories: list[str]
    counts_a: np.ndarray  # (k,)
    counts_b: np.ndarray  # (k,)
    chi2: float
    p_value: float
    n_perm: int


def _chi2_table(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's χ² of the 2 × k table of counts a (k,), b (k,) (empty columns dropped)."""
    table = np.stack([a, b]).astype(np.float64)  # (2, k)
    table = table[:, table.sum(0) > 0]
    expect = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    return float(((table - expect) ** 2 / expect).sum())


def compare_categories(a, b, rng: np.random.Generator, n_perm: int = 10_000) -> CategoryTest:
    """Do two samples of categorical outcomes (``a``, ``b``: sequences of labels, e.g. the
    arrangement each seed ended in) come from the same distribution? Pearson's χ² of their
    2 × k table, with its p-value from ``n_perm`` random relabellings of the pooled sample (exact
    in law for any counts, unlike the χ² approximation, which needs ≥ 5 expected per cell): the
    fraction of relabellings with χ² ≥ the observed one, (count + 1)/(n_perm + 1).

    >>> t = compare_categories(["x"] * 30 + ["y"] * 2, ["x"] * 3 + ["y"] * 29,
    ...                        np.random.default_rng(0), n_perm=2000)
    >>> t.categories, t.counts_a.tolist(), t.counts_b.tolist(), t.p_value < 0.001
    (['x', 'y'], [30, 2], [3, 29], True)
    """
    a, b = [str(x) for x in a], [str(x) for x in b]
    cats = sorted(set(a) | set(b))
    index = {c: i for i, c in enumerate(cats)}
    pooled = np.array([index[x] for x in a + b])  # (n_a + n_b,)
    k, n_a = len(cats), len(a)

    def counts(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.bincount(labels[:n_a], minlength=k), np.bincount(labels[n_a:], minlength=k)

    ca, cb = counts(pooled)
    observed = _chi2_table(ca, cb)
    hits = sum(_chi2_table(*counts(rng.permutation(pooled))) >= observed - 1e-12
               for _ in range(n_perm))  # fmt: skip
    return CategoryTest(cats, ca, cb, observed, (hits + 1) / (n_perm + 1), n_perm)
