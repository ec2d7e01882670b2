"""core.stats' escape-time statistics (E2's log-D law, the escape-time studies) against
independent routes: the weighted line against NumPy's polyfit (another solver) and a Monte-Carlo
check of its slope's standard error; the censored median against its definition."""

from __future__ import annotations

import numpy as np

from headspec.core.stats import censored_median, weighted_line


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
