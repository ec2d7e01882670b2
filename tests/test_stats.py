"""core.stats' escape-time statistics (E2's log-D law, the escape-time studies) against
independent routes: the weighted line against NumPy's polyfit (another solver) and a Monte-Carlo
check of its slope's standard error; the censored median against its definition."""

from __future__ import annotations

import numpy as np
import pytest

from headspec.core.stats import censored_median, compare_categories, weighted_line


def test_weighted_line_matches_polyfit_and_its_se_is_honest():
    rng = np.random.default_rng(3)
    x = np.log([1e2, 1e3, 1e4, 1e5, 1e6])
    se = np.array([0.5, 0.8, 1.0, 1.5, 2.0])
    y = 10.0 + 3.4 * x + se * rng.standard_normal(5)
    f = weighted_line(x, y, se)
    slope, intercept = np.polyfit(x, y, 1, w=1.0 / se)  # weights 1/σ: minimises Σ (r/σ)²
    np.testing.assert_allclose([f.slope, f.intercept], [slope, intercept], rtol=1e-10)
    assert f.dof == 3 and np.isclose(f.chi2, np.sum(((y - intercept - slope * x) / se) ** 2))
    # the slope's s.e. is its spread over redrawn data (4000 redraws: the spread is known to
    # ~1.1 %, so 5 % can only fail if the formula is wrong)
    ys = 10.0 + 3.4 * x + se * rng.standard_normal((4000, 5))
    spread = np.std([weighted_line(x, yy, se).slope for yy in ys], ddof=1)
    assert abs(spread / f.slope_se - 1) < 0.05
    # inflated by √(χ²/dof) only where that exceeds 1
    assert f.slope_se_scaled == f.slope_se * max(1.0, np.sqrt(f.chi2_dof))


def test_censored_median():
    rng = np.random.default_rng(0)
    x = np.array([3.0, 1.0, np.inf, 2.0, 5.0, np.nan])  # one censored, one left out
    m, se = censored_median(x, rng)
    assert m == 3.0 and 0 < se < 2  # the median of {1, 2, 3, 5, ∞}
    assert np.isnan(censored_median(np.array([1.0, np.inf, np.inf, 4.0]), rng)[0])  # half censored
    assert np.isnan(censored_median(np.array([1.0]), rng)[0])
    assert censored_median(np.array([1.0, np.nan, 2.0, 3.0]), rng)[0] == 2.0  # NaN: dropped


def test_compare_categories_agrees_with_the_chi2_law_on_large_samples():
    """Second route: with many outcomes per cell the permutation p-value approaches the
    asymptotic χ² one (scipy's chi2_contingency without continuity correction); the statistic
    itself is the same number."""
    from scipy.stats import chi2_contingency

    rng = np.random.default_rng(1)
    a = rng.choice(["p", "q", "r"], size=400, p=[0.5, 0.3, 0.2])
    b = rng.choice(["p", "q", "r"], size=300, p=[0.42, 0.33, 0.25])
    t = compare_categories(a, b, np.random.default_rng(2), n_perm=4000)
    chi2, p, *_ = chi2_contingency(np.stack([t.counts_a, t.counts_b]), correction=False)
    assert t.chi2 == pytest.approx(chi2, rel=1e-12)
    # the permutation p-value's own s.e. is √(p(1−p)/n_perm) ≤ 0.008: 4 s.e. and 0.01 for the
    # χ² law's approximation at these counts
    assert abs(t.p_value - p) < 4 * np.sqrt(p * (1 - p) / 4000) + 0.01


@pytest.mark.slow  # test tier: a law/statistical, cluster or physics test (docs/tests.md)
def test_compare_categories_rejects_at_its_level_under_the_null():
    """200 pairs of samples (32 and 48 outcomes, 4 categories, one law): the fraction with
    p < 0.1 is 0.1 within 3 binomial s.e. (0.064); and no pair with equal counts is rejected."""
    rng = np.random.default_rng(3)
    law = [0.4, 0.3, 0.2, 0.1]
    ps = [compare_categories(rng.choice(4, 32, p=law), rng.choice(4, 48, p=law), rng,
                             n_perm=199).p_value for _ in range(200)]  # fmt: skip
    assert abs(np.mean(np.array(ps) < 0.1) - 0.1) < 3 * np.sqrt(0.1 * 0.9 / 200)
    same = compare_categories(["x", "y"] * 10, ["y", "x"] * 10, rng, n_perm=199)
    assert same.chi2 == 0 and same.p_value == 1.0
