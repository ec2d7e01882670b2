"""Analysis of trajectories (NumPy): deviations, head geometry, plateaus.

- :func:`largest_deviation`: a trajectory's deviation from another at each time (the numerics of
  :func:`headspec.conventions.comparison.compare`, which reads the result files' schema);
- head geometry: cosines with the heads' common direction (the unspecialised phase of E1),
  specialisation times, head–atom cosines, assignment (argmax and Hungarian), head splits;
- :func:`plateaus`: flat stretches of a risk curve on a log-time axis.

Example:
    >>> import numpy as np
    >>> Q = np.array([[1.0, 0.99], [0.99, 1.0]])             # two nearly aligned heads
    >>> bool(unspecialised(Q)), head_mean_cosine(Q).round(3).tolist()
    (True, [0.997, 0.997])
    >>> t = np.geomspace(0.1, 100, 31)
    >>> r = np.where(t < 3, 0.3, 0.1)                          # one drop at t = 3
    >>> [round(p["level"], 2) for p in plateaus(t, r)]
    [0.3, 0.1]
"""

from __future__ import annotations

import numpy as np


def largest_deviation(a: np.ndarray, b: np.ndarray, relative: bool) -> np.ndarray:
    """The deviation of ``a`` from ``b`` at each time (axis 0): |a − b| / |b| (``relative``,
    scalars per time) or the largest |a − b| over the other axes; NaN where either is NaN.

    >>> largest_deviation(np.array([1.1, 2.0]), np.array([1.0, 2.0]), relative=True).round(3)
    array([0.1, 0. ])
    >>> largest_deviation(np.array([[0.0, 0.3], [1.0, 1.0]]), np.zeros((2, 2)), relative=False)
    array([0.3, 1. ])
    """
    if relative:
        return np.abs(a - b) / np.abs(b)
    return np.abs(a - b).reshape(a.shape[0], -1).max(axis=1)


# ============================================================================ head geometry
def head_mean_cosine(Q: np.ndarray) -> np.ndarray:
    """cos(k_h, k̄) of every head with the heads' mean k̄ = (1/H) Σ_h k_h, from Q (..., H, H).

    k_h·k̄ = (Q 1)_h / H and |k̄|² = 1ᵀQ1 / H² (all divided by D). Returns shape (..., H).
    """
    Q = np.asarray(Q, dtype=float)
    H = Q.shape[-1]
    dot = Q.sum(-1) / H  # (..., H)
    norm_mean = np.sqrt(np.maximum(Q.sum((-2, -1)), 0.0)) / H  # (...)
    norm_h = np.sqrt(np.maximum(np.einsum("...hh->...h", Q), 0.0))  # (..., H)
    with np.errstate(invalid="ignore", divide="ignore"):
        return dot / (norm_h * norm_mean[..., None])


def unspecialised(Q: np.ndarray, cos_threshold: float = 0.95) -> np.ndarray:
    """True where every head points within ``cos_threshold`` of the heads' common mean direction
    (the unspecialised phase of SPEC §7 E1). Q (..., H, H) → (...)."""
    return np.all(head_mean_cosine(Q) >= cos_threshold, axis=-1)


def specialisation_times(t: np.ndarray, Q: np.ndarray, cos_threshold: float = 0.95) -> np.ndarray:
    """When each head leaves the common direction, per seed: t (T,), Q (S, T, H, H) → (S, H).

    The common phase is the first time all heads are within ``cos_threshold`` of their mean
    direction; a head's specialisation time is the first later time at which its cosine with the
    mean direction falls below ``cos_threshold``. NaN where there is no common phase or the head
    never leaves it.
    """
    t = np.asarray(t, dtype=float)
    c = head_mean_cosine(Q)  # (S, T, H)
    together = np.all(c >= cos_threshold, axis=-1)  # (S, T)
    S, _, H = c.shape
    out = np.full((S, H), np.nan)
    for s in range(S):
        start = np.flatnonzero(together[s])
        if start.size == 0:
            continue
        k0 = start[0]
        for h in range(H):
            left = np.flatnonzero(c[s, k0:, h] < cos_threshold)
            if left.size:
                out[s, h] = t[k0 + left[0]]
    return out


def atom_cosines(M: np.ndarray, Q: np.ndarray, atoms: np.ndarray) -> np.ndarray:
    """cos(k_h, K* a_j) = M_h·a_j / (√Q_hh |a_j|): M (..., H, F), Q (..., H, H), atoms (J, F)
    → (..., H, J)."""
    atoms = np.asarray(atoms, dtype=float)
    dots = np.asarray(M, dtype=float) @ atoms.T  # (..., H, J)
    norm_h = np.sqrt(np.maximum(np.einsum("...hh->...h", np.asarray(Q, dtype=float)), 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return dots / (norm_h[..., None] * np.linalg.norm(atoms, axis=-1))


UNDECIDED, IDLE = -1, -2  # labels of best_atom for a head on no atom


def best_atom(M, Q, atoms, min_cos: float = 0.5, margin: float = 0.0, min_q: float = 0.0):
    """Index of the atom each head sits on (by cosine), shape (..., H); ``UNDECIDED`` (−1) when
    its best cosine is below ``min_cos`` or beats the runner-up atom's by less than ``margin``
    (a head on the mean direction of two atoms, cos ≈ 0.7 with both, is on neither), ``IDLE``
    (−2) when Q_hh < ``min_q`` (a switched-off softmax-1 or Bayes-softmax head).

    >>> import numpy as np
    >>> atoms = np.eye(2)                                  # two orthogonal features
    >>> M = np.array([[1.0, 0.0], [0.7, 0.7], [0.0, 0.09]])
    >>> Q = np.diag([1.0, 1.0, 0.01])                      # head 2 is small
    >>> best_atom(M, Q, atoms).tolist()                    # head 1 on the mean: "on atom 0"
    [0, 0, 1]
    >>> best_atom(M, Q, atoms, margin=0.1, min_q=0.25).tolist()
    [0, -1, -2]
    """
    c = np.nan_to_num(atom_cosines(M, Q, atoms), nan=-np.inf)  # (..., H, J)
    idx = np.argmax(c, axis=-1)
    top = np.sort(c, axis=-1)
    best = top[..., -1]
    second = top[..., -2] if c.shape[-1] > 1 else np.full_like(best, -np.inf)
    out = np.where((best >= min_cos) & (best - second >= margin), idx, UNDECIDED)
    q = np.einsum("...hh->...h", np.asarray(Q, dtype=float))
    return np.where(q < min_q, IDLE, out)


def head_split(M, Q, atoms, min_cos: float = 0.5, margin: float = 0.0, min_q: float = 0.0):
    """How many heads sit on each atom (:func:`best_atom`): (..., J) counts; heads on no atom
    (undecided or idle) are left out."""
    idx = best_atom(M, Q, atoms, min_cos, margin, min_q)
    J = np.asarray(atoms).shape[0]
    return np.stack([(idx == j).sum(-1) for j in range(J)], axis=-1)


def match_heads(M, Q, atoms) -> tuple[np.ndarray, np.ndarray]:
    """Optimal assignment (Hungarian) of heads to atoms maximising the summed cosine, for one
    state: M (H, F), Q (H, H). Returns (heads, atoms) index arrays of length min(H, J)."""
    from scipy.optimize import linear_sum_assignment

    c = np.nan_to_num(atom_cosines(M, Q, atoms), nan=-1.0)  # (H, J)
    return linear_sum_assignment(-c)


# ============================================================================ risk plateaus
def plateaus(
    t: np.ndarray, risk: np.ndarray, max_slope: float = 0.01, min_decades: float = 0.3
) -> list[dict]:
    """Flat stretches of a risk curve on a log-time axis.

    A plateau is a maximal run of consecutive grid intervals (t > 0) on which the risk changes by
    at most ``max_slope`` per decade of t, spanning at least ``min_decades`` decades. Returns
    ``[{"t_start", "t_end", "level"}]`` (level: mean risk over the stretch), in time order.
    """
    t = np.asarray(t, dtype=float)
    r = np.asarray(risk, dtype=float)
    keep = (t > 0) & np.isfinite(r)
    t, r = t[keep], r[keep]
    if t.size < 2:
        return []
    lt = np.log10(t)
    slope = np.abs(np.diff(r) / np.diff(lt))  # (T−1,)
    flat = slope <= max_slope
    out, k = [], 0
    while k < flat.size:
        if not flat[k]:
            k += 1
            continue
        j = k
        while j + 1 < flat.size and flat[j + 1]:
            j += 1
        if lt[j + 1] - lt[k] >= min_decades:
            out.append({"t_start": t[k], "t_end": t[j + 1], "level": float(r[k : j + 2].mean())})
        k = j + 1
    return out


def slow_stretches(
    t: np.ndarray, risk: np.ndarray, rel: float = 2.0, dip: float = 0.6, drop: float = 0.05
) -> list[dict]:
    """Where a risk curve slows down between drops: candidate saddles of a trajectory.

    With s the risk's slope per decade of t on each grid interval (t > 0; a running mean over 3
    intervals against noise), a slow stretch is centred on an interval whose slope is a local
    minimum and at most ``dip`` times the largest slope both before and after it, where those
    largest slopes are real drops (≥ ``drop`` times the curve's steepest); two candidates count
    as one unless a drop at least 1/``dip`` times steeper than both separates them (the flatter
    is kept). The stretch extends over the neighbouring intervals with slope ≤ ``rel`` times its
    minimum. The flat start of a curve on a log axis (s → 0 as t → 0) is never a candidate; the
    end of the run is, when the slope is not rising there and the last three intervals' mean
    slope is at most ``dip`` times the last drop's. Returns ``[{"t_start", "t_end", "t_mid",
    "index", "level", "slope"}]`` in time order: ``index`` is the grid point (of the given
    arrays) where the slope is smallest, ``t_mid`` its time, ``level`` the mean risk over the
    stretch, ``slope`` its slope per decade.

    Unlike :func:`plateaus` (flat by an absolute slope), this finds plateaus of any height,
    e.g. the common phase of E1 at D = 100 where the risk still creeps down by 1 % per decade.
    """
    t = np.asarray(t, dtype=float)
    r = np.asarray(risk, dtype=float)
    idx = np.flatnonzero((t > 0) & np.isfinite(r))
    if idx.size < 5:
        return []
    lt, rr = np.log10(t[idx]), r[idx]
    raw = np.abs(np.diff(rr) / np.diff(lt))  # (n,) slope per decade on each interval
    s = np.convolve(np.pad(raw, 1, mode="edge"), np.ones(3) / 3, mode="valid")  # (n,)
    n = s.size
    big = drop * s.max()
    cands = [
        k
        for k in range(1, n - 1)
        if s[k] <= s[k - 1] and s[k] < s[k + 1]
        and big <= min(s[:k].max(), s[k + 1 :].max())
        and s[k] <= dip * min(s[:k].max(), s[k + 1 :].max())
    ]  # fmt: skip
    tail = s[-3:].mean()
    falling = s[-1] <= s[-3]
    if n >= 4 and falling and s[: n - 3].max() >= big and tail <= dip * s[: n - 3].max():
        cands.append(n - 1)
    kept: list[int] = []
    for k in cands:
        if kept:
            j = kept[-1]
            between = s[j + 1 : k].max() if k > j + 1 else 0.0
            level = tail if k == n - 1 else s[k]
            if between < max(big, max(s[j], level) / dip):  # no real drop: one stretch
                if level < s[j]:
                    kept[-1] = k
                continue
        kept.append(k)
    out = []
    for k in kept:
        floor = tail if k == n - 1 else s[k]
        lo, hi = k, k
        while lo > 0 and s[lo - 1] <= rel * floor:
            lo -= 1
        while hi < n - 1 and s[hi + 1] <= rel * floor:
            hi += 1
        # the grid point inside the flattest interval whose other neighbour is flatter too
        j = k + 1 if k == n - 1 or s[k - 1] >= s[k + 1] else k
        out.append({
            "t_start": float(t[idx[lo]]),
            "t_end": float(t[idx[hi + 1]]),
            "t_mid": float(t[idx[j]]),
            "index": int(idx[j]),
            "level": float(rr[lo : hi + 2].mean()),
            "slope": float(floor),
        })  # fmt: skip
    return out
