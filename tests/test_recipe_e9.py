"""E9 (redundancy at scale): the pruning helpers on a model whose answer is known — the
constructed Bayes-softmax with every head doubled — the census of final heads, and the recipe end
to end at smoke scale."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from headspec.apps.experiments import RECIPES, e9
from headspec.apps.experiments.pruning import increase, removable
from headspec.core.latent import Discrete
from headspec.core.observables import BaseSamples
from headspec.dynamics.bayes import constructed_bayes_softmax
from headspec.dynamics.prune import prune_path
from helpers import assert_reasoned, claims_by_id

L, N = 10, 8192
LAW = Discrete(atoms=[[3.0, 0.0], [0.0, 3.0]], probs=[0.6, 0.4])


def _greedy(M, Q, b, act, seed=0):
    base = BaseSamples.draw(jax.random.key(seed), LAW, L=L, H=len(M), n=N)
    return prune_path(M, Q, b, act, LAW, base, order="greedy")


def test_doubled_bayes_softmax_has_exactly_h_minus_j_removable_heads():
    """Two Bayes-softmax heads with the same key and biases b − log 2 act as one head with bias b
    (the joint normaliser sums their weights), so the constructed predictor with every head
    doubled (H = 4, J = 2) has risk R_B until one head per atom is left — removable = H − J = 2,
    increase 0 to rounding — and then loses what the constructed one loses with its first head,
    ΔR_atom (independent base samples: equal within their Monte-Carlo s.e.)."""
    c = constructed_bayes_softmax(LAW)
    M, Q, b = (np.asarray(x, float) for x in (c.M, c.Q, c.b))
    one = _greedy(M, Q, b, c.activation)
    d_atom = one["risk"][1] - one["risk"][0]
    M2 = np.repeat(M, 2, axis=0)  # (4, F)
    two = _greedy(M2, M2 @ M2.T, np.repeat(b, 2) - np.log(2.0), c.activation, seed=1)
    paths = [{"greedy": two}]
    assert increase(paths, 2, relative=False)[0] == pytest.approx(0.0, abs=1e-6)
    assert removable(paths, 0.1 * d_atom).tolist() == [2.0]
    rb_two = two["risk"][0]
    assert abs(rb_two - one["risk"][0]) < 0.01  # both R_B, on different samples
    got = increase(paths, 1, relative=False)[0]
    assert got == pytest.approx(d_atom, rel=0.1), (got, d_atom)  # MC on N samples: a few %
    assert d_atom > 0.1  # a real cost: the claims' unit is not noise


def test_removable_counts_up_to_the_first_excess_and_skips_missing_seeds():
    path = {"greedy": {"risk": [0.10, 0.10, 0.11, 0.30, 0.10, 0.5]}}  # a late dip does not count
    assert removable([path, None], 0.02).tolist()[0] == 2.0
    assert np.isnan(removable([path, None], 0.02)[1])
    assert removable([path], 1.0).tolist() == [5.0]  # every head removable


class _P:
    min_cos, margin, idle_frac = 0.5, 0.1, 0.25


class _DS:
    """The two fields census reads: M (S, T, H, F) and Q (S, T, H, H)."""

    def __init__(self, M, Q):
        self.M = type("V", (), {"values": np.asarray(M)[:, None]})()
        self.Q = type("V", (), {"values": np.asarray(Q)[:, None]})()


def test_census_names_splits_and_counts_redundant_heads():
    atoms = np.eye(2) * 3.0
    M = np.array([[2.0, 0.1]] * 5 + [[0.1, 2.0]] * 3)  # 5 heads on atom 0, 3 on atom 1
    names, red = e9.census(_DS([M], [M @ M.T + np.eye(8)]), _P, atoms, softmax=True)
    assert names == ["5:3"] and red.tolist() == [6.0]
    # softmax-1: two large heads, six small keys — idle, not counted as serving an atom
    M = np.array([[3.0, 0.0], [0.0, 3.0]] + [[0.1, 0.1]] * 6)
    Q = M @ M.T + np.diag([1.0, 1.0] + [0.5] * 6)
    names, red = e9.census(_DS([M], [Q]), _P, atoms, softmax=False)
    assert names == ["1:1 +6 idle"] and red.tolist() == [6.0]
    # the same state read as softmax heads: small keys are not idle (they attend uniformly)
    names, _ = e9.census(_DS([M], [Q]), _P, atoms, softmax=True)
    assert "idle" not in names[0]
    # every head on one atom: one atom served, H − 1 redundant
    M = np.array([[2.0, 0.0]] * 4)
    names, red = e9.census(_DS([M], [M @ M.T + np.eye(4)]), _P, atoms, softmax=True)
    assert names == ["4:0"] and red.tolist() == [3.0]


def test_registered_and_smoke_runs_end_to_end(smoke_report):
    """Registered with its TOML and parameters; at the smoke scale of the session's reproduction
    (tests/smoke_plugin.py) every claim, figure, table row and config is there."""
    r, smoke = RECIPES["E9"], smoke_report[1]["E9"]
    assert r.file == "e9_redundancy.toml" and r.params is e9.Params and r.run is e9.run
    assert smoke.error is None, smoke.error
    claims = claims_by_id(smoke)
    acts = ("softmax", "softmax1", "bayes_softmax")
    assert {f"E9.{a}.H3.prune" for a in acts} <= set(claims)
    assert {f"E9.{a}.H3.ode_beside" for a in acts} <= set(claims)
    parts = [p.id for p in claims["E9.softmax1.H3.prune"].all_of]
    assert parts == [f"E9.softmax1.H3.prune.{k}.{w}" for k in ("sim", "ode")
                     for w in ("specialised", "keep", "sharp")]  # fmt: skip
    robust = claims["E9.softmax.H3.prune"].all_of[2]
    assert robust.id.endswith("sim.robust") and robust.tolerance.kind == "at_most"
    for c in smoke.claims:
        assert_reasoned(c)
    assert [p.name for p in smoke.figures] == ["E9_redundancy.png"]
    assert all(p.stat().st_size > 0 for p in smoke.figures)
    assert [(r[0], r[1], r[2]) for r in smoke.table[:2]] == [("softmax", 3, "sim"),
                                                             ("softmax", 3, "ode")]  # fmt: skip
    assert len(smoke.table_header) == len(smoke.table[0])
    assert smoke.configs["softmax1_H3"]["model"]["H"] == 3
    assert smoke.configs["softmax1_H3_ode"]["theory"]["init"]["kind"] == "simulation"


def test_one_head_is_refused_naming_the_field():
    from headspec.apps.experiments.params import RecipeError, resolve

    spec = {"experiment": {"activations": ["softmax"], "heads": [1, 4], "keep_fraction": 0.1,
                           "sharp_fraction": 0.5, "random_orders": 1, "n": 64, "seeds": 2,
                           "min_cos": 0.5, "margin": 0.1, "idle_frac": 0.25, "specialised": 0.5,
                           "softmax_T_per_head": 0.0}}  # fmt: skip
    with pytest.raises(RecipeError, match=r"heads\.0 = 1: .*≥ 2"):
        resolve(spec, "quick", e9.Params, "e9.toml")


def test_softmax_common_phase_does_not_count_as_specialised():
    """E9's overnight softmax heads at H = 32, T = 300 (all keys ≈ (1.31, 1.02), spread 0.01):
    one atom is served, so the redundant count is H − 1, not H − J — the 'specialised' part of
    the pruning claim fails there instead of passing on an unsplit model."""
    M = np.array([[1.31, 1.02]] * 32)
    names, red = e9.census(_DS([M], [M @ M.T + 0.01 * np.eye(32)]), _P, np.eye(2) * 3.0, True)
    assert names == ["32:0"] and red.tolist() == [31.0]
