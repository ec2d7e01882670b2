"""Analysis functions on synthetic trajectories whose answers are known by construction."""

import numpy as np
import pytest

from headspec.dynamics.analysis import (
    best_atom,
    head_mean_cosine,
    head_split,
    match_heads,
    plateaus,
    specialisation_times,
    unspecialised,
)

T_GRID = np.geomspace(0.01, 1000, 101)  # 20 points per decade


def _rot(angle):
    return np.array([np.cos(angle), np.sin(angle)])


def synthetic_keys(leave_at, final_angles, t=T_GRID):
    """Keys in a 2-D feature frame (so M = K, Q = KKᵀ): every head starts small and random,
    joins the common direction 45° by t = 0.1, and head h turns to final_angles[h] at time
    leave_at[h] (a jump, so the answer is exact on the grid)."""
    rng = np.random.default_rng(0)
    H = len(leave_at)
    K = np.zeros((t.size, H, 2))
    start = rng.normal(size=(H, 2)) * 0.05
    for k, tk in enumerate(t):
        for h in range(H):
            if tk < 0.1:
                K[k, h] = start[h]
            elif tk < leave_at[h]:
                K[k, h] = _rot(np.pi / 4) * (1.0 + 0.001 * h)
            else:
                K[k, h] = 2.0 * _rot(final_angles[h])
    Q = np.einsum("thf,tkf->thk", K, K)
    return K, Q


def test_head_mean_cosine_of_identical_and_opposite_heads():
    Q = np.outer([1.0, 1.0], [1.0, 1.0])  # two identical unit heads
    np.testing.assert_allclose(head_mean_cosine(Q), [1.0, 1.0])
    Q = np.array([[1.0, 0.0], [0.0, 1.0]])  # orthogonal heads: 45° from their mean
    np.testing.assert_allclose(head_mean_cosine(Q), [np.sqrt(0.5)] * 2)


def test_specialisation_times_are_found_at_the_constructed_times():
    leave = [3.0, 10.0, 10.0, np.inf]
    _, Q = synthetic_keys(leave, [0.0, np.pi / 2, 0.0, 0.0])
    ts = specialisation_times(T_GRID, Q[None])[0]
    expect = [T_GRID[np.searchsorted(T_GRID, x)] for x in leave[:3]]
    np.testing.assert_allclose(ts[:3], expect)
    assert np.isnan(ts[3])  # head 3 never leaves
    phase = unspecialised(Q)
    assert not phase[0]  # random start
    assert phase[np.searchsorted(T_GRID, 1.0)]  # together at t = 1
    assert not phase[-1]


def test_best_atom_split_and_hungarian_matching():
    atoms = np.array([[1.0, 0.0], [0.0, 1.0]])
    K, Q = synthetic_keys([3.0, 3.0, 30.0, 30.0], [0.0, 0.0, np.pi / 2, np.pi / 2])
    split = head_split(K, Q, atoms)  # (T, J)
    k_mid = np.searchsorted(T_GRID, 10.0)
    # at t = 10 two heads sit on atom 0 and two are still at 45°, equally close to both atoms
    # (cos 0.707): a tie goes to the first atom
    np.testing.assert_array_equal(split[k_mid], [4, 0])
    np.testing.assert_array_equal(split[-1], [2, 2])  # finally an even split
    np.testing.assert_array_equal(best_atom(K[-1], Q[-1], atoms), [0, 0, 1, 1])
    # Hungarian: heads permuted → assignment follows
    perm = [2, 0, 1, 3]
    heads, js = match_heads(K[-1][perm], Q[-1][np.ix_(perm, perm)], atoms)
    got = dict(zip(heads.tolist(), js.tolist(), strict=True))
    assert all(best_atom(K[-1][perm], Q[-1][np.ix_(perm, perm)], atoms)[h] == j
               for h, j in got.items())  # fmt: skip
    assert sorted(got.values()) == [0, 1]
    # a head pointing nowhere near any atom is not counted
    assert best_atom(np.array([[-1.0, -1.0]]), np.array([[2.0]]), atoms)[0] == -1


def test_plateaus_of_a_constructed_risk_curve():
    lt = np.log10(T_GRID)
    r = np.full(T_GRID.size, 0.45)
    r = np.where(lt > 0, 0.45 - 0.15 * np.clip(lt / np.log10(3), 0, 1), r)  # drop 1 → 3
    r = np.where(
        lt > np.log10(30), 0.30 - 0.10 * np.clip((lt - np.log10(30)) / np.log10(2), 0, 1), r
    )
    found = plateaus(T_GRID, r)
    assert len(found) == 3
    lv = [p["level"] for p in found]
    np.testing.assert_allclose(lv, [0.45, 0.30, 0.20], atol=1e-9)
    assert found[0]["t_end"] == pytest.approx(1.0, rel=0.13)
    assert found[1]["t_start"] == pytest.approx(3.0, rel=0.13)
    assert found[1]["t_end"] == pytest.approx(30.0, rel=0.13)
    assert found[2]["t_start"] == pytest.approx(60.0, rel=0.13)
    # a steadily falling curve has none
    assert plateaus(T_GRID, 0.45 - 0.05 * lt) == []
