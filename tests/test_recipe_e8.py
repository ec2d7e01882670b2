"""E8 (softmax-1's advantage grows with the signal): the softmax floor L/(8(L−1)) against the
library's risk of softmax states (a bound every state obeys, and one that the best ± pair of heads
reaches), and the recipe end to end at smoke scale."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from headspec.apps.experiments import RECIPES, e8
from headspec.core.attention import Heads, Softmax
from headspec.core.latent import FlippedSpike
from headspec.dynamics.bayes import estimate_risks
from helpers import assert_reasoned, claims_by_id

L, N = 10, 8192


def _risks(states: dict, a: float) -> dict:
    """Risk (MCEstimate) of softmax heads (M (H, 1), Q (H, H)) on the flipped spike ±a."""
    preds = {k: Heads(M=np.asarray(M, float), Q=np.asarray(Q, float), b=np.zeros(len(M)),
                      activation=Softmax()) for k, (M, Q) in states.items()}  # fmt: skip
    return estimate_risks(jax.random.key(3), FlippedSpike([a]), L, preds, n=N)


def test_no_softmax_state_is_below_the_floor_and_the_pm_pair_reaches_it():
    """Across overlaps m and orthogonal noise q of two heads (aligned, opposite, one idle), every
    risk is ≥ the floor − 3 s.e.; at a large signal a, heads ±c·a/|a| with c small (c·a large: the
    right head finds the signal token; the wrong head's scores, of s.d. c, spread its mass nearly
    evenly) come within 1 % of it: the floor is the least risk as a → ∞, not a loose bound."""
    fl = e8.floor(L)
    states = {}
    for m, q in ((0.0, 0.0), (0.0, 9.0), (0.5, 1.0), (2.0, 0.0), (2.0, 9.0), (6.0, 1.0)):
        for sign in (1, -1, 0):
            M = [[m], [sign * m]]
            states[f"{m}_{q}_{sign}"] = (M, np.outer(M, M) + q * np.eye(2))
    for a in (1.0, 6.0):
        for k, est in _risks(states, a).items():
            assert est.mean >= fl - 3 * est.se, (a, k, est.mean, fl)
    best = _risks({"pm": ([[0.25], [-0.25]], np.diag([0.0625, 0.0625]))}, 40.0)["pm"]
    assert abs(best.mean - fl) <= 0.01 * fl + 3 * best.se, (best.mean, fl)


def test_paired_difference_is_tighter_than_either_risk():
    """diff: the Monte-Carlo part of the s.e. of x − y uses the per-sample differences."""
    rng = np.random.default_rng(0)
    common = rng.normal(0.3, 0.1, 4000)
    x = {"mean": common.mean() + 0.01, "se_seed": 0.0, "loss": common + 0.01}
    y = {"mean": common.mean(), "se_seed": 0.0, "loss": common + rng.normal(0, 1e-3, 4000)}
    v, se = e8.diff(x, y)
    assert v == pytest.approx(0.01) and se < 1e-4 < common.std() / np.sqrt(4000)


def test_registered():
    r = RECIPES["E8"]
    assert r.file == "e8_signal.toml" and r.params is e8.Params and r.run is e8.run


@pytest.fixture(scope="module")
def smoke(smoke_report):
    """E8 of the session's smoke reproduction (tests/smoke_plugin.py)."""
    return smoke_report[1]["E8"]


def test_smoke_runs_end_to_end(smoke):
    assert smoke.error is None, smoke.error
    claims = claims_by_id(smoke)
    assert {"E8.floor", "E8.to_zero", "E8.grows", "E8.splits", "E8.ode_beside"} <= set(claims)
    parts = {p.id for c in claims.values() for p in c.all_of}
    assert {"E8.floor.sim", "E8.floor.ode", "E8.to_zero.falls.sim", "E8.to_zero.under_floor.ode",
            "E8.grows.sim", "E8.grows.ode"} <= parts  # fmt: skip
    for c in smoke.claims:
        assert_reasoned(c)
    assert [p.name for p in smoke.figures] == ["E8_signal.png"]
    assert all(p.stat().st_size > 0 for p in smoke.figures)
    assert [row[0] for row in smoke.table] == ["2", "5"]  # the smoke scale's amplitudes
    assert len(smoke.table_header) == len(smoke.table[0])
    assert {"a2_softmax", "a5_softmax1_ode"} <= set(smoke.configs)
    assert smoke.configs["a5_softmax1"]["task"]["latent"]["a"] == [5.0]
