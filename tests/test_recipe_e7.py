"""E7 (the shape of the learned representation): the analysis on constructed states with known
answers, and the recipe end to end at smoke scale."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from headspec.apps.experiments import RECIPES, e7
from headspec.dynamics import representation as rep
from helpers import assert_reasoned, claims_by_id

S2 = np.sqrt(2.0)


def _state(dirs, noise=None):
    """M (H, F), Q (H, H) of keys k_h = K* m_h + n_h with n_h ⊥ span (noise (H, H) Gram)."""
    M = np.asarray(dirs, dtype=float)
    Q = M @ M.T + (0.0 if noise is None else np.asarray(noise))
    return M, Q


# ------------------------------------------------------------------- representation module
def test_cosines_span_and_participation():
    M, Q = _state([[1, 0], [1, 1], [0, 0.5]], noise=np.diag([0, 0, 0.75]))
    C = rep.head_cosines(Q)
    assert C[0, 1] == pytest.approx(1 / S2)
    assert C[0, 2] == pytest.approx(0.0) and C[1, 2] == pytest.approx(0.5 / (S2 * 1.0))
    cf = rep.feature_cosines(M, Q)
    np.testing.assert_allclose(cf, [[1, 0], [1 / S2, 1 / S2], [0, 0.5]])
    np.testing.assert_allclose(rep.span_fraction(M, Q), [1, 1, 0.5])
    n = rep.feature_participation(np.array([[1, 0, 0], [1, 1, 0], [1, 1, 1], [3, 1, 0]]))
    np.testing.assert_allclose(n, [1, 2, 3, 100 / 82])


def test_zero_key_gives_nan_not_a_crash():
    M, Q = _state([[1, 0], [0, 0]])
    assert np.isnan(rep.head_cosines(Q)[0, 1])
    assert rep.cluster_heads(rep.head_cosines(Q)).tolist() == [0, 1]
    assert rep.cluster_heads(rep.head_cosines(Q), rep.span_fraction(M, Q)).tolist() == [0, -1]


def test_cluster_heads_single_linkage_threshold_and_idle_heads():
    # heads 0, 1 nearly equal (cos 0.995), head 2 opposite, head 3 at 60° from 0 (not grouped)
    ang = np.radians([0, 5.7, 180, 60, 90])
    M, Q = _state(np.c_[np.cos(ang), np.sin(ang)], noise=np.diag([0, 0, 0, 0, 9.0]))
    C, span = rep.head_cosines(Q), rep.span_fraction(M, Q)
    labels = rep.cluster_heads(C, span)
    assert labels.tolist() == [0, 0, 1, 2, -1]  # head 4: span fraction 1/√10 < 0.5, idle
    assert rep.cluster_heads(C, span, same=0.4).tolist() == [0, 0, 1, 0, -1]  # 60° joins at 0.4
    gc = rep.group_cosines(C, labels)
    assert gc[0, 1] == pytest.approx(-np.cos(np.radians(2.85)), abs=1e-6)  # mean at 2.85°
    assert gc[0, 2] == pytest.approx(np.cos(np.radians(60 - 2.85)), abs=1e-6)
    assert rep.pair_lines(gc) == [(0, 1)]


def test_group_means_and_features_of_diagonal_square_vs_pure_pairs():
    # softmax-like: ±e1±e2 (combinations); Bayes-like: ±e1, ±e2 (pure ± pairs)
    for dirs, neff, gf in (
        ([[1, 1], [-1, -1], [1, -1], [-1, 1]], 2.0, 1 / S2),
        ([[1, 0], [-1, 0], [0, 1], [0, -1]], 1.0, 1.0),
    ):
        M, Q = _state(dirs)
        C, cf = rep.head_cosines(Q), rep.feature_cosines(M, Q)
        labels = rep.cluster_heads(C, rep.span_fraction(M, Q))
        gc = rep.group_cosines(C, labels)
        np.testing.assert_allclose(gc, [[1, -1, 0, 0], [-1, 1, 0, 0], [0, 0, 1, -1], [0, 0, -1, 1]],
                                   atol=1e-12)  # fmt: skip
        assert sorted(map(sorted, rep.pair_lines(gc))) == [[0, 1], [2, 3]]
        np.testing.assert_allclose(rep.feature_participation(cf), neff)
        np.testing.assert_allclose(np.abs(rep.group_feature_cosines(C, cf, labels)).max(1), gf)


def test_group_mean_of_two_heads_is_their_bisector():
    ang = np.radians([0, 20, 110])
    M, Q = _state(np.c_[np.cos(ang), np.sin(ang)])
    labels = np.array([0, 0, 1])  # imposed grouping: mean of heads 0 and 1 points at 10°
    gc = rep.group_cosines(rep.head_cosines(Q), labels)
    assert gc[0, 1] == pytest.approx(np.cos(np.radians(100)))
    gf = rep.group_feature_cosines(rep.head_cosines(Q), rep.feature_cosines(M, Q), labels)
    np.testing.assert_allclose(gf[0], [np.cos(np.radians(10)), np.sin(np.radians(10))])


def test_grouping_history_and_first_reached():
    # t0: all keys noise; t1: two groups (±e1); t2, t3: four (±e1 ± e2 directions)
    noise = np.eye(4) * 1.0
    states = [
        _state(np.zeros((4, 2)) + 1e-3, noise),
        _state([[1, 0.1], [1, -0.1], [-1, 0.1], [-1, -0.1]]),
        _state([[1, 1], [1, -1], [-1, 1], [-1, -1]]),
        _state([[1, 1], [1, -1], [-1, 1], [-1, -1]]),
    ]
    M = np.stack([s[0] for s in states])
    Q = np.stack([s[1] for s in states])
    counts, labels = rep.grouping_history(M, Q)
    assert counts.tolist() == [0, 2, 4, 4]
    assert labels[0].tolist() == [-1] * 4 and labels[1].tolist() == [0, 0, 1, 1]
    t = np.array([0.0, 1.0, 2.0, 3.0])
    assert rep.first_reached(t, counts, persist=1) == {2: 1.0, 4: 2.0}
    assert rep.first_reached(t, counts, persist=2) == {4: 2.0}  # 2 groups held only one point
    assert rep.settle_time(t, labels) == 2.0
    assert rep.same_partition([0, 0, 1, -1], [1, 1, 0, -1])
    assert not rep.same_partition([0, 0, 1, -1], [0, 1, 1, -1])
    assert np.isnan(rep.settle_time(t[:1], labels[:1]))  # no group yet
    # a grouping that changes and comes back counts only from its last arrival
    lab = np.array([[0, 0, 1, 1], [0, 1, 2, 3], [0, 0, 1, 1], [0, 0, 1, 1]])
    assert rep.settle_time(t, lab) == 2.0


# ------------------------------------------------------------------- recipe helpers
def test_isotropic_latent_and_shape_verdicts():
    lat = e7.isotropic_latent(3, 2.0)
    assert lat["atoms"][2] == [0.0, 2.0, 0.0] and lat["atoms"][3] == [0.0, -2.0, 0.0]
    assert np.isclose(sum(lat["probs"]), 1.0) and len(lat["probs"]) == 6
    atoms = np.array(e7.isotropic_latent(2, 2.5)["atoms"])
    p = SimpleNamespace(same=0.9, active=0.5, orth=0.1, combo=1.5, pure=0.9)
    sq = e7.shape(*_state([[1, 1], [-1, -1], [1, -1], [-1, 1]]), atoms, p)
    assert sq["orthogonal"] and sq["combination"] and not sq["pm_pairs"]
    pm = e7.shape(*_state([[1, 0], [-1, 0], [0, 1], [0, -1]]), atoms, p)
    assert pm["orthogonal"] and not pm["combination"] and pm["pm_pairs"]
    # three heads on +e1, −e1, +e2 and one idle: not every end covered
    part = e7.shape(*_state([[1, 0], [-1, 0], [0, 1], [0, 0.1]], np.diag([0, 0, 0, 1.0])), atoms, p)
    assert part["idle"] == 1 and not part["pm_pairs"]
    # a tetrahedron-like arrangement in 2-D (heads at 0°, 120°, 240°): not orthogonal
    ang = np.radians([0, 120, 240])
    tri = e7.shape(*_state(np.c_[np.cos(ang), np.sin(ang)]), atoms, p)
    assert not tri["orthogonal"] and tri["max_other"] == pytest.approx(0.5)
    # order: the ± ends of each line next to each other
    o = e7.order(e7.shape(*_state([[1, 1], [1, -1], [-1, -1], [-1, 1]]), atoms, p))
    assert sorted(map(sorted, [o[:2].tolist(), o[2:].tolist()])) == [[0, 2], [1, 3]]


# ------------------------------------------------------------------- recipe end to end
@pytest.fixture(scope="module")
def smoke(smoke_report):
    """E7 of the session's smoke reproduction (tests/smoke_plugin.py)."""
    return smoke_report[1]["E7"]


def test_registered():
    r = RECIPES["E7"]
    assert (r.file, r.run, r.params) == ("e7_representation.toml", e7.run, e7.Params)


def test_smoke_runs_end_to_end(smoke):
    assert smoke.error is None, smoke.error
    claims = claims_by_id(smoke)
    assert {"E7.F2_H4.softmax.groups", "E7.F2_H4.bayes_softmax.pm_pairs", "E7.ode_agreement",
            "E7.F2_H4.softmax.formation"} <= set(claims)  # fmt: skip
    assert claims["E7.F2_H4.softmax.groups"].statement.startswith("Softmax: the heads split")
    assert claims["E7.F2_H4.softmax.groups"].tolerance.bound == 1.0  # half of the 2 seeds
    for c in smoke.claims:
        assert_reasoned(c)
    names = {p.name for p in smoke.figures}
    assert {"E7_head_feature_cosines.png", "E7_grouping_over_time.png"} <= names
    assert all(p.exists() and p.stat().st_size > 0 for p in smoke.figures)
    assert smoke.table and len(smoke.table[0]) == len(smoke.table_header)
    # every simulation has its ODE from the same initial state
    assert {"F2_H4_softmax", "F2_H4_softmax_ode", "F2_H4_bayes_softmax_ode"} <= set(smoke.configs)
    init = smoke.configs["F2_H4_softmax_ode"]["theory"]["init"]
    assert init["kind"] == "simulation" and init["seeds"] == [0]
    assert smoke.configs["F2_H4_softmax"]["train"]["engine"] == "reduced"


# ------------------------------------------------------------- E7 against the map (e7_map)
MIN4 = "1(+e1+e2) 1(−e1−e2) 1(+e1−e2) 1(−e1+e2)"


def _ctx():
    got = []
    return SimpleNamespace(base=SimpleNamespace(seed=0), claim=got.append, claims=got)


def _map(**kinds):
    """Verdicts as e7_map.verdicts writes them: name → (kind, stable)."""
    return {a: {"kind": k, "stable": k == "minimum", "risk": 0.33, "rate": -1e-3, "se": 1e-4}
            for a, k in kinds.items()}  # fmt: skip


def test_final_claim_counts_seeds_on_stable_minima_and_needs_half():
    from headspec.apps.experiments import e7_map

    v = _map(**{MIN4: "minimum", "2(+e1) 2(−e1)": "saddle"})
    cases: list = [  # (the seeds' arrangements, stable ones, verdict at ≥ S/2)
        ([MIN4, MIN4, "2(+e1) 2(−e1)"], 2, True),
        ([MIN4, "unresolved (1 undecided)", "2(+e1) 2(−e1)"], 1, False),
        (["unresolved (2 undecided)"] * 3, 0, False),  # no map run: none is final
        (["2(+e1) 2(−e1)"] * 3, 0, False),  # the last: its detail below
    ]
    for sn, n, ok in cases:
        ctx = _ctx()
        e7_map.final_claim(ctx, "E7.F2_H4.softmax", "softmax", "here", sn, v)
        (c,) = ctx.claims
        assert (c.id, c.value, c.verdict) == ("E7.F2_H4.softmax.final", n, ok)
        assert_reasoned(c)
    assert c.detail == "2(+e1) 2(−e1): 3 (map: saddle, R 0.3300, λ -0.00100 ± 0.00010)"


def test_a_minimum_whose_idle_head_wakes_is_not_final():
    from headspec.apps.experiments import e7_map

    ds = SimpleNamespace(  # the variables of a map setting that verdicts() reads
        split=SimpleNamespace(values=np.array(["1(+e1+e2) +1 idle", "1(+e1) 1(−e1)"])),
        kind=SimpleNamespace(values=np.array(["minimum", "minimum"])),
        idle_wakes=SimpleNamespace(values=np.array([1, -1])),
        risk=SimpleNamespace(values=np.array([0.4, 0.3])),
        lead_rate=SimpleNamespace(values=np.array([-0.01, -0.02])),
        lead_se=SimpleNamespace(values=np.array([0.001, 0.001])),
    )
    v = e7_map.verdicts(ds)
    assert v["1(+e1+e2) +1 idle"]["kind"] == "minimum, an idle head wakes"
    assert not v["1(+e1+e2) +1 idle"]["stable"] and v["1(+e1) 1(−e1)"]["stable"]


def test_ode_agreement_is_measured_per_seed_without_a_verdict():
    from headspec.apps.experiments import e7_map

    finals = {"F2_H4_softmax": ([MIN4, MIN4, "2(+e1) 2(−e1)"], {0: MIN4, 2: MIN4}),
              "F2_H4_bayes_softmax": (["unresolved (1 undecided)"] * 3,
                                      {0: "unresolved (1 undecided)"})}  # fmt: skip
    ctx = _ctx()
    e7_map.agreement_claim(ctx, finals, 2000)
    (c,) = ctx.claims
    assert c.id == "E7.ode_agreement" and c.verdict is None
    assert c.value == pytest.approx(1 / 3) and c.detail.startswith("1 of 3 runs")  # unresolved ≠
    assert c.se == pytest.approx(np.sqrt(1 / 3 * 2 / 3 / 3))


def test_map_runs_classify_only_the_reached_arrangements():
    from headspec.apps.experiments import e7_map

    finals = {"F2_H4_softmax": ([MIN4, "unresolved (2 undecided)", MIN4], {}),
              "F2_H4_bayes_softmax": (["unresolved (1 undecided)"] * 3, {})}  # fmt: skip
    meta = {"F2_H4_softmax": (2, 4, "softmax"), "F2_H4_bayes_softmax": (2, 4, "bayes_softmax")}
    law = {k: e7.isotropic_latent(2, 2.5) for k in meta}
    ctx = SimpleNamespace(base=SimpleNamespace(train=SimpleNamespace(lr=2.0)))
    runs = e7_map.map_runs(ctx, finals, meta, law, 4096)
    assert list(runs) == ["F2_H4_softmax"]  # every Bayes-softmax seed unresolved: no map
    r = runs["F2_H4_softmax"]
    assert (r.kind, r.sets["map.only"], r.sets["map.lr"]) == ("splitmap", [MIN4], 2.0)
