"""How heads split between directions, and what kind of fixed point holds them: the one place of
the split labels, the group projection and the stable/saddle/marginal rule (used by the E6
recipe, the study ``headspec study e6_classification``,
:class:`~headspec.dynamics.saddles.Saddle` and so ``headspec saddles``).

Split labels. A head's label is the atom it sits on (:func:`head_labels`:
:func:`~headspec.dynamics.analysis.best_atom` — cosine ≥ ``min_cos`` and ahead of the runner-up
atom by ``margin``), ``UNDECIDED`` (−1) or ``IDLE`` (−2, a key that shrank: Q_hh < ``idle_q``).
The split of two directions is named by :func:`split_name`: the larger group first, then idle and
undecided heads ("3:1", "2:1 +1 idle", "1:1 +2 undecided"; ``sep="+"`` gives "3+1").

Group projection. A split with group sizes (3, 1) has its own symmetry: heads of one group are
interchangeable. :func:`group_projection` projects a flat (M, Q, b) vector on the states with that
symmetry (the groups move as wholes).

The rule. A fixed point's kind follows from its Jacobian's non-zero (non-symmetry) modes
(:func:`stability`): a *saddle* has some mode with Re λ > k·s.e., a *marginal* point none but some
with |Re λ| ≤ k·s.e., a *minimum* every mode with Re λ < −k·s.e. (k = 3; an s.e. that is not a
number counts as 0: the rate is taken as exact).

Example:
    >>> import numpy as np
    >>> atoms = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> M = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.7, 0.7]])
    >>> lab = head_labels(M, M @ M.T, atoms, min_cos=0.5, margin=0.1)
    >>> lab.tolist(), split_name(lab), is_uneven(split_name(lab))
    ([0, 0, 1, -1], '2:1 +1 undecided', False)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np

from headspec.dynamics.analysis import IDLE, UNDECIDED, best_atom

__all__ = [
    "IDLE",
    "UNDECIDED",
    "Stability",
    "counts",
    "group_projection",
    "head_labels",
    "is_even",
    "is_uneven",
    "mode_se",
    "split_name",
    "stability",
]


# ============================================================================ split labels
def head_labels(M, Q, atoms, min_cos: float = 0.5, margin: float = 0.0, idle_q: float = 0.0):
    """Per head (..., H): the atom it sits on, ``UNDECIDED`` (−1) or ``IDLE`` (−2); see the
    module (a ``margin`` over the runner-up atom, so that a head on the mean direction of two
    orthogonal atoms is counted on neither)."""
    return best_atom(M, Q, atoms, min_cos, margin, idle_q)


def counts(labels, J: int = 2) -> np.ndarray:
    """Heads per atom (..., J) of labels (..., H)."""
    labels = np.asarray(labels)
    return np.stack([(labels == j).sum(-1) for j in range(J)], axis=-1)


def split_name(labels, sep: str = ":", J: int = 2) -> str:
    """'3:1' (largest group first; ``sep`` between), then '+k idle', '+k undecided'. One group
    per direction: ``J`` of them, or more where a label names a later direction ('2:1:1').

    >>> split_name([0, 0, 0, 1]), split_name([1, -2, 1, 0], sep="+")
    ('3:1', '2+1 +1 idle')
    >>> split_name([0, 0, 0, 0], J=3), split_name([2, 0, 1, 0])
    ('4:0:0', '2:1:1')
    """
    lab = np.asarray(labels)
    J = max(J, int(lab.max(initial=-1)) + 1)
    c = sorted((int((lab == j).sum()) for j in range(J)), reverse=True)
    out = sep.join(str(k) for k in c)
    for code, word in ((IDLE, "idle"), (UNDECIDED, "undecided")):
        k = int((lab == code).sum())
        if k:
            out += f" +{k} {word}"
    return out


def _groups(name: str) -> tuple[str, str]:
    a, b = name.split(" ")[0].replace("+", ":").split(":")
    return a, b


def is_even(name: str) -> bool:
    """Both groups equal and not empty, no head undecided; idle heads allowed."""
    a, b = _groups(name)
    return a == b and a != "0" and "undecided" not in name


def is_uneven(name: str) -> bool:
    """Every active head decided and the groups unequal (e.g. 3:1, 4:0, 2:1 +1 idle)."""
    a, b = _groups(name)
    return a != b and "undecided" not in name


# ============================================================================ group projection
def group_projection(v, sizes: Sequence[int], F: int) -> np.ndarray:
    """Projection of a flat (M, Q, b) vector — M (H, F), Q (H, H), b (H), heads ordered group by
    group with ``sizes`` heads each — on the states symmetric within each group (the groups
    move as wholes): M rows and b averaged per group, Q's diagonal and off-diagonal entries
    averaged per pair of groups.

    >>> v = np.arange(2 * 1 + 4 + 2, dtype=float)   # H = 2 in one group, F = 1
    >>> group_projection(v, (2,), 1).tolist()
    [0.5, 0.5, 3.5, 3.5, 3.5, 3.5, 6.5, 6.5]
    """
    v = np.asarray(v, dtype=float)
    H = int(sum(sizes))
    idx = np.repeat(np.arange(len(sizes)), sizes)
    M = v[: H * F].reshape(H, F)
    Q = v[H * F : H * F + H * H].reshape(H, H)
    b = v[H * F + H * H :]
    Mo, Qo, bo = np.zeros_like(M), np.zeros_like(Q), np.zeros_like(b)
    for g in range(len(sizes)):
        ig = idx == g
        Mo[ig] = M[ig].mean(0)
        bo[ig] = b[ig].mean()
        for g2 in range(len(sizes)):
            ig2 = idx == g2
            blk = Q[np.ix_(ig, ig2)]
            if g == g2:
                d = np.diag(blk).mean()
                off = blk[~np.eye(len(blk), dtype=bool)].mean() if len(blk) > 1 else 0.0
                Qo[np.ix_(ig, ig2)] = np.where(np.eye(len(blk), dtype=bool), d, off)
            else:
                Qo[np.ix_(ig, ig2)] = blk.mean()
    return np.concatenate([Mo.ravel(), Qo.ravel(), bo])


# ============================================================================ the rule
class _Mode(Protocol):  # what the rule reads of a Jacobian mode
    eigenvalue: complex
    se: float
    zero: bool


class Stability(NamedTuple):
    """A fixed point's kind ("saddle", "marginal" or "minimum") and the non-zero modes that make
    it so: ``unstable`` (Re λ > k·s.e.) and ``marginal`` (|Re λ| ≤ k·s.e.), in the modes' order."""

    kind: str
    unstable: list
    marginal: list


def mode_se(m: _Mode) -> float:
    """A mode's standard error, 0 where it is not a number (a rate taken as exact)."""
    return 0.0 if np.isnan(m.se) else float(m.se)


def stability(modes: Sequence[_Mode], k: float = 3.0) -> Stability:
    """The kind of the fixed point whose Jacobian has ``modes`` (zero modes of symmetries left
    out): saddle, marginal or minimum, see the module.

    >>> from types import SimpleNamespace as M
    >>> ms = [M(eigenvalue=0.05 + 0j, se=0.01, zero=False), M(eigenvalue=-1 + 0j, se=0.01,
    ...       zero=False), M(eigenvalue=0j, se=0.0, zero=True)]
    >>> stability(ms).kind, stability(ms[1:]).kind, stability(ms, k=6).kind
    ('saddle', 'minimum', 'marginal')
    """
    nonzero = [m for m in modes if not m.zero]
    unstable = [m for m in nonzero if m.eigenvalue.real > k * mode_se(m)]
    marginal = [m for m in nonzero if abs(m.eigenvalue.real) <= k * mode_se(m)]
    kind = "saddle" if unstable else ("marginal" if marginal else "minimum")
    return Stability(kind, unstable, marginal)
