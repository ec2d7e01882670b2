"""The one place of the split labels, the group projection and the stable/saddle/marginal rule
(headspec.dynamics.splits), and that its users read it rather than their own copies."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from headspec.dynamics import splits
from headspec.dynamics.saddles import Saddle

ROOT = Path(__file__).resolve().parents[1]
ORTH = np.array([[2.5, 0.0], [0.0, 2.5]])


def _mode(re, se=0.01, zero=False):
    return SimpleNamespace(eigenvalue=complex(re, 0.3), se=se, zero=zero)


@pytest.mark.parametrize(
    ("rates", "kind", "n_unstable", "n_marginal"),
    [
        ([0.2, -1.0], "saddle", 1, 0),  # one mode grows beyond 3 s.e.
        ([0.02, -1.0], "marginal", 0, 1),  # 0.02 ≤ 3 × 0.01: not clearly growing
        ([-0.02, -1.0], "marginal", 0, 1),  # … nor clearly decaying
        ([-0.05, -1.0], "minimum", 0, 0),
        ([0.2, 0.01], "saddle", 1, 1),  # a saddle may have marginal modes too
    ],
)
def test_stability_rule(rates, kind, n_unstable, n_marginal):
    st = splits.stability([_mode(r) for r in rates] + [_mode(5.0, zero=True)])  # zero: ignored
    assert (st.kind, len(st.unstable), len(st.marginal)) == (kind, n_unstable, n_marginal)


def test_stability_rule_takes_a_missing_se_as_exact_and_k_as_the_margin():
    assert splits.stability([_mode(1e-9, se=float("nan"))]).kind == "saddle"
    assert splits.stability([_mode(-1e-9, se=float("nan"))]).kind == "minimum"
    assert splits.stability([_mode(0.05)], k=6).kind == "marginal"
    assert splits.stability([]).kind == "minimum"  # nothing but symmetries: nothing grows


def test_saddle_reads_the_rule():
    ms = [_mode(0.2), _mode(0.01), _mode(-1.0), _mode(3.0, zero=True)]
    s = Saddle(*([None] * 12), modes=ms)
    assert s.kind == "saddle" and s.unstable == [ms[0]]
    assert Saddle(*([None] * 12), modes=ms[1:]).kind == "marginal"


def test_split_labels_and_names():
    M = np.array([[2.5, 0.0], [2.4, 0.3], [0.0, 2.5], [1.8, 1.8]])
    lab = splits.head_labels(M, M @ M.T, ORTH, 0.5, 0.1)
    assert lab.tolist() == [0, 0, 1, splits.UNDECIDED]  # the diagonal head is on neither atom
    assert splits.split_name(lab) == "2:1 +1 undecided"
    assert splits.split_name(lab, sep="+") == "2+1 +1 undecided"
    assert splits.counts(lab).tolist() == [2, 1]
    Q = M @ M.T
    Q[2, 2] = 0.1  # head 2's key shrank: idle
    assert splits.head_labels(M, Q, ORTH, 0.5, 0.1, idle_q=0.25).tolist()[2] == splits.IDLE
    for name, even, uneven in [("2:2", True, False), ("3+1", False, True), ("4:0", False, True),
                               ("1:1 +2 idle", True, False), ("0:0 +4 idle", False, False),
                               ("2:1 +1 undecided", False, False)]:  # fmt: skip
        assert (splits.is_even(name), splits.is_uneven(name)) == (even, uneven), name


def test_group_projection_is_a_projection_onto_group_symmetric_states():
    rng = np.random.default_rng(0)
    sizes, F = (3, 1), 2
    H = sum(sizes)
    v = rng.standard_normal(H * F + H * H + H)
    p = splits.group_projection(v, sizes, F)
    np.testing.assert_allclose(splits.group_projection(p, sizes, F), p)  # idempotent
    M, Q = p[: H * F].reshape(H, F), p[H * F : H * F + H * H].reshape(H, H)
    np.testing.assert_allclose(M[:3], np.repeat(M[:1], 3, 0))  # the group of 3 moves as one
    assert np.allclose(np.diag(Q)[:3], Q[0, 0]) and np.allclose(Q[0, 1:3], Q[0, 1])
    perm = [1, 0, 2, 3]  # swapping two heads of the group leaves the projection unchanged
    vp = np.concatenate([v[: H * F].reshape(H, F)[perm].ravel(),
                         v[H * F : H * F + H * H].reshape(H, H)[np.ix_(perm, perm)].ravel(),
                         v[H * F + H * H :][perm]])  # fmt: skip
    np.testing.assert_allclose(splits.group_projection(vp, sizes, F), p)


def _defined(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}


def test_the_rule_and_the_labels_live_once():
    """No second definition of the labels, the projection or the rule in the recipes, the
    studies or the saddles' code (they import headspec.dynamics.splits)."""
    own = {"head_labels", "split_name", "split_label", "is_even", "is_uneven", "counts",
           "group_part", "group_projection", "stability"}  # fmt: skip
    users = [ROOT / "src/headspec/apps/experiments/arrangement.py",
             ROOT / "src/headspec/apps/experiments/e6.py",
             ROOT / "src/headspec/dynamics/saddles.py",
             ROOT / "src/headspec/conventions/saddles.py",
             ROOT / "src/headspec/apps/studies/e6_classification.py"]  # fmt: skip
    for path in users:
        assert not (_defined(path) & own), (path.name, _defined(path) & own)
        text = path.read_text(encoding="utf-8")
        assert "3 * m.se" not in text and "3 * _se(" not in text, path.name
    assert "stability(" in inspect.getsource(Saddle)
