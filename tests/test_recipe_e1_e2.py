"""E1 and E2 recipes: end to end at smoke scale, and their helpers on constructed inputs.

The smoke scales use the laws the old recipes could not read: E1 a uniform discrete law given
without `probs`, E2 a Gaussian law given by `cov` (not `var`).
"""

from __future__ import annotations

import tomllib

import numpy as np
import pytest

from headspec.apps.experiments import e1, e2, experiments_dir
from helpers import assert_reasoned, claims_by_id


@pytest.fixture(scope="module")
def outcomes(smoke_report):
    """E1 and E2 of the session's smoke reproduction (tests/smoke_plugin.py)."""
    return smoke_report[1]


def _spec(name):
    with (experiments_dir() / name).open("rb") as f:
        return tomllib.load(f)


def test_smoke_laws_are_the_unusual_forms():
    s1 = _spec("e1_two_phases.toml")["scale"]["smoke"]["task"]["latent"]
    assert s1["kind"] == "discrete" and "probs" not in s1
    s2 = _spec("e2_order.toml")["config"]["task"]["latent"]
    assert s2["kind"] == "gaussian" and "cov" in s2 and "var" not in s2


def test_quick_scale_is_large_d_on_the_reduced_engine():
    for name, dmin in (("e1_two_phases.toml", 10_000), ("e2_order.toml", 2000)):
        spec = _spec(name)
        assert spec["config"]["train"]["engine"] == "reduced"
        assert spec["scale"]["quick"]["task"]["D"] >= dmin
        assert spec["scale"]["full"]["task"]["D"] >= 10_000
        assert spec["scale"]["full"]["seeds"] >= 32


@pytest.mark.parametrize(
    "exp, claims, figures",
    [
        ("E1", ("E1.common_phase", "E1.split", "E1.staggered", "E1.plateaus", "E1.saddle_levels",
                "E1.ode"),
         ("E1_risk.png", "E1_overlaps.png", "E1_head_similarity.png")),
        ("E2", ("E2.order", "E2.log_d"), ("E2_order_and_logD.png",)),
    ],
)  # fmt: skip
def test_smoke_end_to_end(outcomes, exp, claims, figures):
    o = outcomes[exp]
    assert o.error is None, o.error
    assert set(claims) <= set(claims_by_id(o)), [c.id for c in o.claims]
    for c in o.claims:
        assert_reasoned(c)
    names = {f.name for f in o.figures}
    assert set(figures) <= names
    assert all(f.exists() and f.stat().st_size > 0 for f in o.figures)


def test_compound_verdicts_name_their_parts(outcomes):
    """E1's plateaus and ODE claims and E2's two are decided by parts (each its own tolerance);
    the saddle tolerance says it was set after seeing data."""
    c1, c2 = claims_by_id(outcomes["E1"]), claims_by_id(outcomes["E2"])
    assert [p.id for p in c1["E1.ode"].all_of] == ["E1.ode.risk", "E1.ode.overlaps"]
    assert [p.id for p in c2["E2.log_d"].all_of] == ["E2.log_d.growth", "E2.log_d.saddle"]
    growth, saddle = c2["E2.log_d"].all_of
    assert (growth.tolerance.kind, growth.tolerance.k) == ("above", 3.0)
    assert (saddle.tolerance.kind, saddle.tolerance.k) == ("within", 2.0)
    assert {p.id for p in c2["E2.order"].all_of} >= {"E2.order.sim", "E2.order.ode"}
    tol = c1["E1.saddle_levels"].tolerance
    assert tol.set_after_data and tol.kind == "at_most" and tol.bound == 0.02


def test_smoke_runs_are_paired_and_reduced(outcomes):
    cfgs = outcomes["E1"].configs
    assert cfgs["simulation"]["train"]["engine"] == "reduced"
    assert cfgs["simulation_ode"]["theory"]["init"]["kind"] == "simulation"
    cfgs = outcomes["E2"].configs
    assert cfgs["order_ode"]["theory"]["init"]["kind"] == "simulation"
    assert {k for k in cfgs if k.startswith("logD_")} == {"logD_30", "logD_60", "logD_120"}
    assert all(cfgs[f"logD_{d}"]["train"]["engine"] == "reduced" for d in (30, 60, 120))


# ------------------------------------------------------------------------------- E1 helpers
def test_gaps_and_censoring():
    ts = np.array([[10.0, 30.0, 20.0], [5.0, 5.0, 5.0], [np.nan, np.nan, np.nan]])
    g = e1._gaps(ts)
    assert g[0] == 20.0 and g[1] == 0.0 and np.isnan(g[2])


def test_specialisation_censors_heads_that_never_leave():
    import xarray as xr

    t = np.array([0.0, 1.0, 2.0, 3.0])
    together, apart = np.ones((2, 2)), np.eye(2)

    def ds(*seeds):
        Q = np.array([list(s) for s in seeds])
        return xr.Dataset({"Q": (("seed", "t", "head", "head2"), Q)}, coords={"t": t})

    # seed 0: together from t = 1, split at t = 3; seed 1: together, never splits (censored)
    ts = e1._specialisation(ds((apart, together, together, apart),
                               (apart, together, together, together)), 0.95, 3.0)  # fmt: skip
    assert ts.tolist() == [[3.0, 3.0], [3.0, 3.0]]
    ts = e1._specialisation(ds((apart, together, apart, apart)), 0.95, 3.0)
    assert ts.tolist() == [[2.0, 2.0]]
    assert np.isnan(e1._specialisation(ds((apart,) * 4), 0.95, 3.0)).all()  # no common phase


def test_between_drops():
    t = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    r = np.array([0.45, 0.40, 0.30, 0.30, 0.30, 0.20])
    pl = {"t_start": 2.0, "t_end": 4.0, "level": 0.30}
    assert e1._between_drops(t, r, pl, 0.05)
    assert not e1._between_drops(t, r, pl, 0.2)  # the drops are 0.10 and 0.10
    r_end = np.array([0.45, 0.40, 0.30, 0.30, 0.30, 0.30])  # a final plateau: no drop after
    assert not e1._between_drops(t, r_end, {**pl, "t_end": 4.0}, 0.05)


# ------------------------------------------------------------------------------- E2 helpers
def test_ordered():
    picks = np.array([[5.0, 9.0, 3.0], [2.0, 4.0, 7.0]])  # (F, S)
    order = np.array([1, 0])  # feature 1 has the larger variance
    assert e2._ordered(picks, order).tolist() == [True, True, False]
    picks[0, 0] = np.nan  # never picked up: not ordered
    assert e2._ordered(picks, order).tolist() == [False, True, False]


def test_pickups():
    import xarray as xr

    t = np.array([0.0, 1.0, 2.0, 3.0])
    cos = np.zeros((1, 4, 2, 2))  # (seed, t, head, feature)
    cos[0, 2:, 1, 0] = 0.9  # feature 0 reached at t = 2 by head 1
    cos[0, 3, 0, 1] = -0.85  # feature 1 at t = 3 (sign does not matter)
    ds = xr.Dataset({"cos": (("seed", "t", "head", "feature"), cos)}, coords={"t": t})
    assert e2._pickups(ds, 0.8).tolist() == [[2.0], [3.0]]
