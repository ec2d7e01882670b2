"""The studies as recipes of the second registry (headspec.apps.studies, `headspec study`): the
shared escape-time measurement against closed forms, the registry and the command, and (slow
tier) each study end to end at its smoke scale, rerun into the same folder to show its runs
reused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from headspec.apps.cli import app
from headspec.apps.experiments import RECIPES, RecipeError, reproduce
from headspec.apps.experiments.runner import check
from headspec.apps.studies import STUDIES, escape

runner = CliRunner()
# configs a study keeps beside its runs (its λ problems), by study: every study is listed here
EXTRA_CONFIGS = {"escape_time": 2, "finite_size": 1, "e6_classification": 0, "arrangement_odds": 0}


def _grow(t, t_common, rates, d0=1e-3):
    """Two heads: key cosine 0.5 before ``t_common`` and 1 after; |M₀ − M₁| = d0·e^{r t}."""
    S = len(rates)
    M = np.zeros((S, t.size, 2, 2))  # (seed, t, head, feature)
    M[:, :, 0, 0] = d0 * np.exp(np.outer(rates, t))
    Q = np.ones((S, t.size, 2, 2))  # (seed, t, head, head)
    Q[:, t < t_common, 0, 1] = 0.5
    return M, Q


def test_escape_time_is_the_exact_crossing_of_an_exponential():
    t = np.linspace(0.0, 30.0, 121)
    M, Q = _grow(t, 2.0, [0.5, 0.25, 0.1])
    esc = escape.escape_times(t, M, Q)
    # e^{r t} d0 = 0.5 at t = ln(500)/r; log-linear interpolation is exact for an exponential
    assert esc["dM"][0] == pytest.approx(np.log(500) / 0.5, rel=1e-12)
    assert esc["dM"][1] == pytest.approx(np.log(500) / 0.25, rel=1e-12)
    assert esc["dM_check"][0] == pytest.approx(np.log(250) / 0.5, rel=1e-12)
    assert esc["dM"][2] == np.inf  # ln(500)/0.1 = 62 > 30: censored at the horizon
    assert np.all(esc["t_common"] == 2.0)


def test_escape_time_is_nan_without_the_common_phase():
    t = np.linspace(0.0, 30.0, 61)
    M, Q = _grow(t, 100.0, [0.5])  # the key cosine never reaches 0.95
    assert np.isnan(escape.escape_times(t, M, Q)["dM"][0])


def test_summary_counts_censored_seeds_in_the_median_only():
    x = np.array([10.0, 11.0, 12.0, 13.0, np.inf, np.nan])
    s = escape.summary(x, np.random.default_rng(0), n_boot=200)
    assert (s["n"], s["n_censored"]) == (5, 1)  # the NaN seed never reached the common phase
    assert s["median"] == 12.0  # of 10, 11, 12, 13, +inf
    assert s["mean"] == pytest.approx(11.5) and s["sd"] == pytest.approx(
        np.std([10, 11, 12, 13], ddof=1)
    )


def test_paired_slope_is_the_mean_of_per_seed_least_squares_slopes():
    rng = np.random.default_rng(1)
    Ds = [100, 1000, 10000]
    slopes = rng.normal(3.4, 0.3, 8)
    per_seed = [20 + slopes * np.log(D) + rng.normal(0, 0.1, 8) for D in Ds]
    per_seed[1][3] = np.inf  # seed 3 censored at one D: dropped
    f = escape.paired_slope(Ds, per_seed)
    keep = np.arange(8) != 3
    each = np.polyfit(np.log(Ds), np.array(per_seed)[:, keep], 1)[0]  # (7,) by another route
    assert f["n_seeds"] == 7 and f["n_dropped"] == 1
    assert f["slope"] == pytest.approx(each.mean(), rel=1e-12)
    assert f["slope_se"] == pytest.approx(each.std(ddof=1) / np.sqrt(7), rel=1e-12)


def test_log_d_slope_skips_points_without_a_finite_value_or_se():
    f = escape.log_d_slope([100, 1000, 10000, 10**5], [10.0, 12.0, np.nan, 16.0], [1, 1, 1, 1])
    assert f["Ds"] == [100, 1000, 100000]
    assert f["slope"] == pytest.approx(6 / np.log(1000), rel=1e-9)
    assert escape.log_d_slope([100, 1000], [1.0, np.nan], [1, 1]) is None


def test_a_slope_claim_holds_within_k_combined_se_and_fails_beyond_or_when_too_weak():
    pred, Ds = (3.40, 0.10), [100, 1000, 10000]

    def claim(slope, se, dims=Ds):
        return escape.slope_claim("s.x", "law", {"slope": slope, "slope_se": se, "Ds": dims},
                                  pred, 3.0, "a fit")  # fmt: skip

    near, far = claim(3.6, 0.2), claim(4.4, 0.2)
    assert near.verdict is True and far.verdict is False  # |1.0| > 3·√(0.2² + 0.1²) = 0.67
    assert near.all_of[0].se == pytest.approx(np.hypot(0.2, 0.1))
    assert claim(4.4, 2.0).verdict is False  # agrees only because the s.e. is huge: too weak
    assert claim(3.6, 0.2, [100, 1000]).verdict is False  # two D: no line to check
    assert escape.slope_claim("s.x", "law", None, pred, 3.0, "a fit").verdict is False


def test_power_of_ten_text():
    assert [escape.power(D) for D in (100, 10**9, 2000)] == ["10²", "10⁹", "2000"]


def test_studies_are_their_own_registry_and_their_tomls_validate():
    assert set(STUDIES) == set(EXTRA_CONFIGS)
    assert not set(STUDIES) & set(RECIPES)
    with pytest.raises(RecipeError, match="is a study"):  # never in the paper's report
        reproduce(scale="smoke", outdir="unused", only=["E1", "finite_size"])
    for name in STUDIES:
        check([name], "full")
        check([name], "smoke")


def test_study_command_lists_and_refuses_unknown_names(tmp_path):
    r = runner.invoke(app, ["study"])
    assert r.exit_code == 0 and "escape_time" in r.output and "finite_size" in r.output
    r = runner.invoke(app, ["study", "nope", "-o", str(tmp_path / "x")])
    assert r.exit_code == 2 and "no study 'nope'" in r.output and "escape_time" in r.output
    assert not (tmp_path / "x").exists()
    r = runner.invoke(app, ["study", "finite_size", "--scale", "quick", "-o", str(tmp_path / "y")])
    assert r.exit_code == 2 and "--scale" in r.output and not (tmp_path / "y").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXTRA_CONFIGS))
def test_a_study_runs_at_smoke_scale_and_resumes(tmp_path, name):
    out = tmp_path / name
    args = ["study", name, "--scale", "smoke", "-o", str(out), "--workers", "1"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    data = json.loads((out / "outcomes.json").read_text())
    (exp,) = data["experiments"]
    assert exp["id"] == name and exp["error"] is None
    assert all(c["id"].startswith(name + ".") for c in exp["claims"])
    assert exp["figures"] and (out / exp["figures"][0]).exists() and exp["table"]
    assert "study " + name in (out / "index.md").read_text()
    if name == "arrangement_odds":  # every seed's arrangement per route, as JSON
        (row,) = json.loads((out / f"{name}.json").read_text())["rows"]
        assert {k: len(v) for k, v in row["arrangements"].items()} == {
            "sgd": 4, "ode": 4, "diffusion": 4}  # fmt: skip
    if name in ("escape_time", "finite_size"):  # every number of the escape-time studies, JSON
        numbers = json.loads((out / f"{name}.json").read_text())
        assert numbers["predicted_slope"][0] > 0
    r = runner.invoke(app, args)  # the same command again: every run reused, the same numbers
    assert r.exit_code == 0, r.output
    again = json.loads((out / "outcomes.json").read_text())["experiments"][0]
    assert again["reused_runs"] == len(exp["configs"]) - EXTRA_CONFIGS[name]
    assert [c["value"] for c in again["claims"]] == [c["value"] for c in exp["claims"]]
