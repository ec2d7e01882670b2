"""The shape of a learned representation (SPEC §7 E7): groups of heads, their angles, features.

All functions work on the order parameters (NumPy): M (..., H, F) head–feature overlaps and
Q (..., H, H) head–head overlaps, so they apply alike to simulations and to the ODE.

- :func:`head_cosines`, :func:`feature_cosines`: cos(k_h, k_h') and cos(k_h, k*_f);
- :func:`span_fraction`: how much of each key lies in the feature span (an *active* head: most);
- :func:`feature_participation`: over how many features a head spreads (1: a pure feature,
  2: an equal combination of two, …);
- :func:`cluster_heads`: groups of heads that point the same way (cosine ≥ a threshold, single
  linkage) among the active heads; :func:`group_cosines`, :func:`group_feature_cosines`: the
  angles between the groups' mean directions and their cosines with the features;
- :func:`pair_lines`: groups whose means are opposite (the ± ends of one line);
- :func:`grouping_history`, :func:`first_reached`, :func:`settle_time`: the number of groups at
  every time, when it first reaches each count (which split comes first) and when the final
  grouping settles; :func:`same_partition` compares two groupings (labels up to renaming).

Example (four heads on the diagonals ±e1 ± e2 of two features, all in the feature span):
    >>> import numpy as np
    >>> M = np.array([[1.0, 1.0], [-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0]]) / np.sqrt(2)
    >>> Q = M @ M.T
    >>> labels = cluster_heads(head_cosines(Q), span_fraction(M, Q))
    >>> labels.tolist(), feature_participation(feature_cosines(M, Q)).round(2).tolist()
    ([0, 1, 2, 3], [2.0, 2.0, 2.0, 2.0])
    >>> [sorted(p) for p in pair_lines(group_cosines(head_cosines(Q), labels))]
    [[0, 1], [2, 3]]
"""

from __future__ import annotations

import numpy as np

SAME = 0.9  # default: two heads point the same way (cos ≥ 0.9)
ACTIVE = 0.5  # default: a head is active when ≥ half of its key (in norm) lies in the span


def _norms(Q: np.ndarray) -> np.ndarray:
    return np.sqrt(np.maximum(np.einsum("...hh->...h", np.asarray(Q, dtype=float)), 0.0))


def head_cosines(Q: np.ndarray) -> np.ndarray:
    """cos(k_h, k_h') = Q_hh' / √(Q_hh Q_h'h'): (..., H, H) → (..., H, H); NaN for a zero key."""
    Q = np.asarray(Q, dtype=float)
    n = _norms(Q)
    with np.errstate(invalid="ignore", divide="ignore"):
        return Q / (n[..., :, None] * n[..., None, :])


def feature_cosines(M: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """cos(k_h, k*_f) = M_hf / √Q_hh: M (..., H, F), Q (..., H, H) → (..., H, F)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(M, dtype=float) / _norms(Q)[..., None]


def span_fraction(M: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """|P k_h| / |k_h| with P the projection on the feature span (K*ᵀK* = D·I): √Σ_f cos²_hf,
    in [0, 1]. (..., H). A random key has O(√(F/D)); a head aligned in the span has ≈ 1."""
    return np.sqrt(np.sum(feature_cosines(M, Q) ** 2, axis=-1))


def feature_participation(cos_hf: np.ndarray) -> np.ndarray:
    """Effective number of features a head combines, (Σ_f c²)² / Σ_f c⁴ of its feature cosines
    c = cos_hf (..., H, F) → (..., H): 1 for a pure feature, n for an equal combination of n."""
    c2 = np.asarray(cos_hf, dtype=float) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(c2, -1) ** 2 / np.sum(c2**2, -1)


def cluster_heads(
    cos_hh: np.ndarray, span: np.ndarray | None = None, same: float = SAME, active: float = ACTIVE
) -> np.ndarray:
    """Groups of heads pointing the same way, for one state: cos_hh (H, H) → labels (H,).

    Heads h, h' are linked when cos(k_h, k_h') ≥ ``same``; groups are the connected components
    (single linkage), numbered 0, 1, … in the order of their first head. Heads whose
    ``span`` fraction (:func:`span_fraction`, optional) is below ``active`` belong to no group
    (label −1): their direction is mostly noise, not a learned direction.
    """
    C = np.asarray(cos_hh, dtype=float)
    H = C.shape[-1]
    ok = np.ones(H, bool) if span is None else np.asarray(span) >= active
    labels = np.full(H, -1)
    g = 0
    for h in range(H):
        if not ok[h] or labels[h] >= 0:
            continue
        stack, labels[h] = [h], g
        while stack:
            i = stack.pop()
            for j in np.flatnonzero(ok & (labels < 0) & (np.nan_to_num(C[i], nan=-2.0) >= same)):
                labels[j] = g
                stack.append(j)
        g += 1
    return labels


def _mean_weights(labels: np.ndarray) -> np.ndarray:
    """(G, H) weights of the mean of each group's unit keys."""
    G = int(labels.max()) + 1 if labels.size and labels.max() >= 0 else 0
    W = np.zeros((G, labels.size))
    for g in range(G):
        members = labels == g
        W[g, members] = 1.0 / members.sum()
    return W


def group_cosines(cos_hh: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Cosines between the groups' mean directions u_g = mean of the unit keys of group g:
    (G, G). From the head cosines alone: u_g·u_g' = Σ_{h∈g, h'∈g'} cos_hh' / (n_g n_g')."""
    W = _mean_weights(np.asarray(labels))
    G = W @ np.nan_to_num(np.asarray(cos_hh, dtype=float)) @ W.T
    n = np.sqrt(np.maximum(np.diag(G), 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return G / np.outer(n, n)


def group_feature_cosines(cos_hh: np.ndarray, cos_hf: np.ndarray, labels: np.ndarray):
    """Cosines of the groups' mean directions with the features: (G, F)."""
    W = _mean_weights(np.asarray(labels))
    norm2 = np.diag(W @ np.nan_to_num(np.asarray(cos_hh, dtype=float)) @ W.T)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (W @ np.nan_to_num(np.asarray(cos_hf, dtype=float))) / np.sqrt(norm2)[:, None]


def pair_lines(cos_gg: np.ndarray, opposite: float = -SAME) -> list[tuple[int, int]]:
    """Pairs of groups whose means are opposite (cos ≤ ``opposite``): the ± ends of one line.

    Each group is paired at most once, most opposite pairs first; unpaired groups are left out."""
    C = np.asarray(cos_gg, dtype=float)
    G = C.shape[0]
    cand = sorted((C[i, j], i, j) for i in range(G) for j in range(i + 1, G) if C[i, j] <= opposite)
    used, out = set(), []
    for _, i, j in cand:
        if i not in used and j not in used:
            used |= {i, j}
            out.append((i, j))
    return out


def grouping_history(
    M: np.ndarray, Q: np.ndarray, same: float = SAME, active: float = ACTIVE
) -> tuple[np.ndarray, np.ndarray]:
    """Groups over time for one run: M (T, H, F), Q (T, H, H) → (counts (T,), labels (T, H)).

    counts[k]: the number of groups of active heads at time index k (0 while no head is active:
    every key is still mostly noise)."""
    C = head_cosines(Q)
    span = span_fraction(M, Q)
    labels = np.stack([cluster_heads(C[k], span[k], same, active) for k in range(C.shape[0])])
    return labels.max(-1) + 1, labels


def first_reached(t: np.ndarray, counts: np.ndarray, persist: int = 2) -> dict[int, float]:
    """When the number of groups first reaches each value and holds it for ``persist`` grid
    points: {count: t}, in the order reached (which split comes first)."""
    t, counts = np.asarray(t, dtype=float), np.asarray(counts)
    out: dict[int, float] = {}
    for k in range(counts.size - persist + 1):
        c = int(counts[k])
        if c > 0 and c not in out and np.all(counts[k : k + persist] == c):
            out[c] = float(t[k])
    return out


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two labellings (H,) group the heads alike (labels up to renaming; −1: no group)."""
    a, b = np.asarray(a), np.asarray(b)
    pa = {frozenset(np.flatnonzero(a == g).tolist()) for g in set(a.tolist())}
    pb = {frozenset(np.flatnonzero(b == g).tolist()) for g in set(b.tolist())}
    return pa == pb


def settle_time(t: np.ndarray, labels: np.ndarray) -> float:
    """First time from which the grouping (labels (T, H)) stays the final one to the end;
    NaN when the final grouping has no group."""
    labels = np.asarray(labels)
    if labels[-1].max() < 0:
        return float("nan")
    k = labels.shape[0] - 1
    while k > 0 and same_partition(labels[k - 1], labels[-1]):
        k -= 1
    return float(np.asarray(t)[k])
