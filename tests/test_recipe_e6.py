"""E6 (rearrangement): the recipe end to end at smoke scale, and its labelling and history logic on
constructed inputs where the answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from headspec.apps.experiments import arrangement as arr
from headspec.dynamics import analysis, splits
from helpers import assert_reasoned, claims_by_id

ORTH = np.array([[2.5, 0.0], [0.0, 2.5]])
SPIKE = np.array([[2.5], [-2.5]])


def _state(dirs, norms=None):
    """M, Q of unit-free heads pointing along ``dirs`` (H, F) with squared norms ``norms``."""
    dirs = np.asarray(dirs, float)
    dirs = dirs / np.linalg.norm(dirs, axis=1, keepdims=True)
    norms = np.ones(len(dirs)) if norms is None else np.asarray(norms, float)
    K = dirs * np.sqrt(norms)[:, None]
    return K, K @ K.T  # M = K·(e_f), Q = K Kᵀ (keys inside the features' span)


def test_head_on_the_mean_direction_is_undecided():
    # the mean direction of the orthogonal law: cosine 0.71 with both atoms
    M, Q = _state([[1, 1], [1, 1.02], [1, 0], [0, 1]])
    # head_split(min_cos=0.5) alone puts the two heads on the diagonal on an atom: 4 heads split
    assert analysis.head_split(M, Q, ORTH, 0.5).sum() == 4
    lab = splits.head_labels(M, Q, ORTH, 0.5, 0.1)
    assert lab.tolist() == [splits.UNDECIDED, splits.UNDECIDED, 0, 1]
    assert splits.split_name(lab) == "1:1 +2 undecided"
    # a combination head clearly nearer one feature is on it
    M, Q = _state([[0.8, 0.58], [0.58, 0.8], [0.96, -0.27], [-0.26, 0.96]])
    lab = splits.head_labels(M, Q, ORTH, 0.5, 0.1)
    assert lab.tolist() == [0, 1, 0, 1]
    assert splits.is_even(splits.split_name(lab))


def test_flipped_spike_and_idle_heads():
    M = np.array([[2.0], [1.9], [2.1], [-2.0]])
    Q = M @ M.T + 0.2 * np.eye(4)
    lab = splits.head_labels(M, Q, SPIKE, 0.5, 0.1)
    assert lab.tolist() == [0, 0, 0, 1]
    assert splits.split_name(lab) == "3:1" and splits.is_uneven("3:1") and not splits.is_even("3:1")
    Q2 = Q.copy()
    Q2[1, 1] = 0.1  # a shrunk key (with its overlaps kept consistent enough for the label)
    M2 = M.copy()
    M2[1] = 0.3
    lab = splits.head_labels(M2, Q2, SPIKE, 0.5, 0.1, idle_q=0.25)
    assert lab.tolist() == [0, splits.IDLE, 0, 1]
    assert splits.split_name(lab) == "2:1 +1 idle" and splits.is_uneven("2:1 +1 idle")
    assert splits.is_even("1:1 +2 idle") and not splits.is_even("0:0 +4 idle")
    assert not splits.is_uneven("2:1 +1 undecided")


def test_seed_history_finds_first_split_move_and_bump():
    t = np.arange(12.0)
    u, a, b = splits.UNDECIDED, 0, 1
    labels = np.array(
        [[u, u, u, u]] * 2
        + [[a, a, a, b]] * 4  # 3:1 from t = 2
        + [[a, b, a, b]]  # a one-point flicker to 2:2 …
        + [[a, a, a, b]]  # … back
        + [[a, a, b, b]] * 4  # the move: 2:2 from t = 8, kept to the end
    )
    risk = np.array([0.45, 0.44, 0.32, 0.31, 0.30, 0.30, 0.30, 0.30, 0.33, 0.29, 0.28, 0.28])
    h = arr.seed_history(t, risk, labels, persist=3)
    assert h["first"] == "3:1" and h["t_first"] == 2.0
    assert h["end"] == "2:2"
    assert len(h["moves"]) == 1
    m = h["moves"][0]
    assert m["t"] == 8.0 and m["from"] == "3:1" and m["to"] == "2:2"
    assert m["bump"] == pytest.approx(0.03)  # 0.33 over the 3:1 plateau's 0.30
    s = arr.summary([h, {**h, "first": "2:2", "end": "2:2", "moves": [], "end_risk": 0.2}])
    assert s["n_uneven0"] == 1 and s["n_moved"] == 1 and len(s["risk_even"]) == 2


def test_seed_history_without_specialisation():
    t = np.arange(5.0)
    labels = np.full((5, 4), splits.UNDECIDED)
    h = arr.seed_history(t, np.full(5, 0.4), labels)
    assert h["first"] is None and h["moves"] == [] and h["end"] == "0:0 +4 undecided"


def test_prepared_state_is_the_asked_split():
    M, Q = arr.prepared_state(ORTH, (3, 1), 0.6, 0.01)
    assert M.shape == (4, 2) and np.allclose(Q, Q.T)
    assert np.linalg.eigvalsh(Q - M @ M.T).min() > 0  # a valid (PSD) overlap state
    assert splits.split_name(splits.head_labels(M, Q, ORTH)) == "3:1"
    M, Q = arr.prepared_state(SPIKE, (4, 0), 0.6, 0.01)
    assert splits.split_name(splits.head_labels(M, Q, SPIKE)) == "4:0"


@pytest.fixture(scope="module")
def smoke(smoke_report):
    """E6 of the session's smoke reproduction (tests/smoke_plugin.py)."""
    return smoke_report[1]["E6"]


def test_smoke_runs_end_to_end(smoke):
    o = smoke
    assert o.error is None
    claims = claims_by_id(o)
    assert {"E6.orth.uneven_first", "E6.orth.rearranges", "E6.orth.uneven_costs"} <= set(claims)
    assert "rearranges to the even one" in claims["E6.orth.rearranges"].statement
    for c in o.claims:
        assert_reasoned(c)
    assert o.figures and all(f.exists() for f in o.figures)
    assert o.table_header and len(o.table) >= 3
    assert all(len(r) == len(o.table_header) for r in o.table)
    starts = {r[2] for r in o.table}
    assert any(s.startswith("prepared 3:1") for s in starts)
    assert any("simulation" in s for s in starts)


# ----------------------------------------------------------------------------- the map in E6
def _map_cells(amplitudes):
    """Synthetic settings of the map (helpers.synthetic_splits: 3:1 a saddle below a = 2.5, a
    stable minimum from it on), as E6 gets them from its "splitmap" runs."""
    from headspec.conventions.config import SplitMapConfig, load_config
    from headspec.conventions.splitmap import to_dataset
    from helpers import synthetic_splits

    cells = []
    for a in amplitudes:
        cfg = load_config(SplitMapConfig, overrides=[f"task.latent.scale={a}"])
        pts, dirs = synthetic_splits(cfg)
        cells.append((a, to_dataset(pts, dirs, cfg)))
    return cells


def test_e6_reports_its_simulations_against_the_map(tmp_path):
    """The verdict on "misplaced heads can rearrange" counts the amplitudes where every uneven
    split is a saddle and names both regions; E6's own simulations are set beside the map's
    verdict at E6's a; the map's figure is drawn. No saddle anywhere → the claim fails."""
    from headspec.apps.experiments import e6
    from headspec.apps.experiments.base import Context
    from headspec.apps.experiments.runner import load_spec

    ctx = Context("E6", load_spec("E6"), "quick", tmp_path, params=e6.Params)
    cells = _map_cells([1.5, 2.0, 2.5, 4.0])
    e6.map_claim(ctx, "spike", cells, {"n_moved": 0, "n_uneven0": 5}, ctx.params)
    (c,) = ctx.outcome.claims
    assert c.id == "E6.spike.map" and c.value == 2 and c.verdict is True
    assert "rearrange (every uneven split a saddle) at a = 1.5, 2" in c.detail
    assert "stuck (an uneven split a stable minimum) at a = 2.5, 4" in c.detail
    assert "At E6's a = 2.5" in c.detail and "3:1 (minimum)" in c.detail
    assert "0 of 5 seeds" in c.detail
    assert_reasoned(c)
    e6.map_claim(ctx, "orth", _map_cells([2.5, 4.0]), None, ctx.params)
    assert ctx.outcome.claims[-1].verdict is False  # stuck everywhere: the claim fails there
    e6.map_figure(ctx, {"spike": cells, "orth": _map_cells([2.5, 3.0])})
    (fig,) = ctx.outcome.figures
    assert fig.name == "E6_split_map.png" and fig.stat().st_size > 10_000


def test_e6s_map_is_on_at_quick_scale_and_off_at_smoke():
    from headspec.apps.experiments import e6
    from headspec.apps.experiments.params import resolve
    from headspec.apps.experiments.runner import load_spec

    spec = load_spec("E6")
    quick, smoke = (resolve(spec, s, e6.Params, "e6") for s in ("quick", "smoke"))
    assert quick.map_laws == ["spike"] and 2.5 in quick.map_a and quick.a == 2.5
    assert smoke.map_laws == []
