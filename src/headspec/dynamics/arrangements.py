"""Arrangements of H heads over F features: the candidates, up to the law's symmetries, and each
one as a fixed point of the ODE with its kind — the cells of the map of arrangements (issue 55,
SPEC §7 E7).

An *arrangement* puts groups of identical heads on directions of feature space and, for
softmax-1 and Bayes-softmax, leaves some heads *idle* (switched off). It generalises the splits
of :mod:`~headspec.dynamics.splitmap` (heads on a law's atoms) to the shapes E7 asks about:
softmax's groups on combinations of features, orthogonal to each other, and Bayes-softmax's
pairs of heads on the two ends ±e_f of one feature.

Candidates (*modelling choices* of headspec, not the paper's; every candidate is then checked as
a fixed point, so a family only decides what is looked for, not what is found):

- Directions: the signed sums of feature subsets, Σ_{f∈S} s_f e_f / √|S| (S ≠ ∅, s_f = ±1),
  scaled to the law's atom norm: the ends ±e_f and the combinations (e_1 ± e_2)/√2, ….
  :func:`pool` lists them (2F at F = 1 … 26 at F = 3).
- Frames: F mutually orthogonal lines of the pool (:func:`frames`): {e_1, e_2} and
  {(e_1 + e_2)/√2, (e_1 − e_2)/√2} at F = 2, {e_1, e_2, e_3} and {(e_1 ± e_2)/√2, e_3} (and
  their feature permutations) at F = 3.
- An arrangement: a frame, how many heads sit on each of its 2F ends (at least one head in all),
  and the idle heads (softmax-1 and Bayes-softmax only: a softmax head always carries 1/H of the
  mass). Arrangements that a signed permutation of the features maps into each other, where that
  permutation maps the law onto itself (atoms and probabilities, :func:`law_symmetries`), are one
  candidate (:func:`candidates`).

Idle heads (a modelling choice): an idle head is one whose bias went to −∞; it adds nothing to
the predictor, so the arrangement's fixed point is that of its active heads alone, and its kind
is theirs. Whether an idle head would switch back on there is not assessed yet.

The fixed point and its kind come from :func:`~headspec.dynamics.splitmap.classify_split` (the
group-symmetric least-squares solve from the split's guess, the full Jacobian's spectrum, the one
rule of :func:`~headspec.dynamics.splits.stability`); a fixed point is kept only when every
group's heads still sit on their own pool direction (cosine ≥ ``min_cos``, ahead of every other
pool direction by ``margin``: neighbours in the pool are 45° apart at F = 2, 35° at F = 3).

Example:
    >>> import numpy as np
    >>> atoms = np.array([[2.5, 0.0], [-2.5, 0.0], [0.0, 2.5], [0.0, -2.5]])   # E7's ±a·e_f
    >>> len(law_symmetries(atoms, np.full(4, 0.25)))    # the 8 signed permutations of 2 features
    8
    >>> [a.name for a in candidates(atoms, np.full(4, 0.25), H=2, idle=False)]
    ['2(+e1)', '2(+e1+e2)', '1(+e1) 1(−e1)', '1(+e1) 1(+e2)', '1(+e1+e2) 1(+e1−e2)', \
'1(+e1+e2) 1(−e1−e2)']
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import equinox as eqx
import numpy as np

from headspec.core.precision import float64
from headspec.dynamics.problem import DriftProblem
from headspec.dynamics.splitmap import SCALES, SplitPoint, classify_split

__all__ = [
    "UNRESOLVED", "Arrangement", "ArrangementPoint", "Wake", "arrangement_map", "arrangement_of",
    "arrangements_of", "candidates", "classify_arrangement", "direction_name", "frames",
    "law_symmetries", "pool", "resolved", "same_arrangement", "wake", "with_heads",
]  # fmt: skip

_DIGITS = 9  # rounding of unit directions in keys (pool entries are exact sums of ±1/√k)


# ============================================================================ geometry
def pool(F: int) -> np.ndarray:
    """Every candidate unit direction (P, F): Σ_{f∈S} s_f e_f / √|S|, subsets by size, then
    features in order, signs + before −; P = 3^F − 1.

    >>> pool(1).tolist()
    [[1.0], [-1.0]]
    >>> len(pool(2)), len(pool(3))
    (8, 26)
    """
    if F < 1:
        raise ValueError(f"F = {F} features; fix: at least 1")
    out = []
    for k in range(1, F + 1):
        for S in itertools.combinations(range(F), k):
            for signs in itertools.product((1.0, -1.0), repeat=k):
                v = np.zeros(F)
                v[list(S)] = signs
                out.append(v / np.sqrt(k))
    return np.array(out)


def _line(v: np.ndarray) -> tuple[float, ...]:
    """A line's key: the unit direction with its first non-zero entry positive, rounded."""
    v = v / np.linalg.norm(v)
    first = v[np.flatnonzero(np.abs(v) > 1e-12)[0]]
    return tuple(np.round(np.sign(first) * v, _DIGITS) + 0.0)


def frames(F: int) -> list[np.ndarray]:
    """Every set of F mutually orthogonal lines of :func:`pool` (each (F, F), one unit vector per
    line, first non-zero entry positive), in the pool's order."""
    lines = []
    for v in pool(F):
        if _line(v) not in [_line(w) for w in lines]:
            lines.append(np.array(_line(v)))
    out = []
    for combo in itertools.combinations(range(len(lines)), F):
        B = np.array([lines[i] for i in combo])  # (F, F)
        if np.allclose(B @ B.T, np.eye(F), atol=1e-9):
            out.append(B)
    return out


def law_symmetries(atoms, probs, tol: float = 1e-9) -> list[np.ndarray]:
    """The signed permutations P (F, F) of the features that map the law onto itself: every atom
    a_j to an atom of the same probability (P a_j = a_k, p_j = p_k). The identity is first."""
    atoms = np.asarray(atoms, np.float64)  # (J, F)
    probs = np.asarray(probs, np.float64)  # (J,)
    F = atoms.shape[1]
    out = []
    for perm in itertools.permutations(range(F)):
        for signs in itertools.product((1.0, -1.0), repeat=F):
            P = np.zeros((F, F))
            P[np.arange(F), perm] = signs  # (P x)_i = s_i x_perm(i)
            moved = atoms @ P.T  # (J, F)
            d = np.abs(moved[:, None, :] - atoms[None, :, :]).max(-1)  # (J, J)
            k = np.argmin(d, axis=1)
            if np.all(d[np.arange(len(k)), k] <= tol) and np.allclose(probs[k], probs, atol=tol):
                out.append(P)
    return out


def direction_name(v: np.ndarray) -> str:
    """'+e1', '−e2', '+e1−e2' (the signs of a pool direction's features)."""
    return "".join(f"{'+' if x > 0 else '−'}e{f + 1}" for f, x in enumerate(v) if abs(x) > 1e-12)


# ============================================================================ candidates
class Arrangement(NamedTuple):
    """Groups of heads on directions, and idle heads (see the module)."""

    directions: np.ndarray  # (G, F) unit directions, one per group
    sizes: tuple[int, ...]  # heads per group, the largest first
    idle: int  # switched-off heads (softmax-1, Bayes-softmax)
    name: str  # '2(+e1) 1(−e1) +1 idle'

    @property
    def H(self) -> int:
        return sum(self.sizes) + self.idle


def _key(dirs: np.ndarray, sizes: Sequence[int], order: dict[tuple, int]) -> tuple:
    """(−heads, pool index) per group, sorted: the arrangement as data, whatever its group
    order (the largest group first)."""
    return tuple(sorted((-int(n), order[tuple(np.round(d, _DIGITS) + 0.0)])
                        for d, n in zip(dirs, sizes, strict=True)))  # fmt: skip


def _canonical(dirs, sizes, syms: Sequence[np.ndarray], order: dict[tuple, int]) -> tuple:
    """The smallest key of the arrangement over the law's symmetries (the largest group on the
    pool's first direction it can take: + before −, ends before combinations)."""
    return min(_key(dirs @ P.T, sizes, order) for P in syms)


def _order(P: np.ndarray) -> dict[tuple, int]:
    return {tuple(np.round(v, _DIGITS) + 0.0): i for i, v in enumerate(P)}


def candidates(atoms, probs, H: int, *, idle: bool, max_groups: int | None = None):
    """Every candidate arrangement of ``H`` heads (see the module) for the law (``atoms`` (J, F),
    ``probs`` (J,)), one per class of the law's symmetries, each written in its smallest form:
    fewest groups first, then the most concentrated, then by the pool's order of directions.
    ``idle`` allows idle heads (0 … H − 1 of them); ``max_groups`` bounds the groups."""
    atoms = np.asarray(atoms, np.float64)
    F = atoms.shape[1]
    syms = law_symmetries(atoms, probs)
    P_all = pool(F)
    order = _order(P_all)
    seen: dict[tuple, Arrangement] = {}
    for n_idle in range(H if idle else 1):
        active = H - n_idle
        for B in frames(F):
            ends = np.concatenate([B, -B])  # (2F, F)
            for counts in _compositions(active, 2 * F):
                used = [i for i in range(2 * F) if counts[i] > 0]
                if max_groups is not None and len(used) > max_groups:
                    continue
                key = (n_idle, _canonical(ends[used], [counts[i] for i in used], syms, order))
                if key not in seen:
                    seen[key] = _arrangement(key[1], n_idle, P_all)
    return sorted(seen.values(), key=lambda a: (len(a.sizes), a.idle, [-s for s in a.sizes],
                                                _rank(a, order)))  # fmt: skip


def _rank(a: Arrangement, order: dict[tuple, int]) -> list[int]:
    return [order[tuple(np.round(d, _DIGITS) + 0.0)] for d in a.directions]


def _arrangement(key: tuple, n_idle: int, directions: np.ndarray) -> Arrangement:
    """The arrangement of a canonical key: groups the largest first, ties in the pool's order."""
    dirs = directions[[g[1] for g in key]]  # (G, F)
    sizes = tuple(-g[0] for g in key)
    name = " ".join(f"{n}({direction_name(d)})" for d, n in zip(dirs, sizes, strict=True))
    return Arrangement(dirs, sizes, n_idle, name + (f" +{n_idle} idle" if n_idle else ""))


def _compositions(n: int, k: int):
    """Every k-tuple of integers ≥ 0 summing to n."""
    if k == 1:
        yield (n,)
        return
    for first in range(n, -1, -1):
        for rest in _compositions(n - first, k - 1):
            yield (first, *rest)


def arrangement_of(
    M, Q, atoms, probs, *, min_cos: float = 0.5, margin: float = 0.1, idle_q: float = 0.0
) -> str:
    """The candidate name of a state's arrangement (M (H, F), Q (H, H)): each head labelled by the
    pool direction it sits on (:func:`~headspec.dynamics.splits.head_labels`: cosine ≥
    ``min_cos``, ahead of every other pool direction by ``margin``; idle when Q_hh < ``idle_q``),
    written in the smallest form over the law's symmetries, as :func:`candidates` names it.
    "unresolved (k undecided)" when some head sits on no pool direction.

    >>> import numpy as np
    >>> atoms, probs = np.array([[2.5, 0], [-2.5, 0], [0, 2.5], [0, -2.5]]), np.full(4, 0.25)
    >>> M = np.array([[0.0, -1.0], [0.0, 1.0], [0.0, 1.02]])   # heads on −e2, +e2, +e2
    >>> arrangement_of(M, M @ M.T + 0.01 * np.eye(3), atoms, probs)
    '2(+e1) 1(−e1)'
    """
    return arrangements_of(np.asarray(M)[None], np.asarray(Q)[None], atoms, probs, idle=False,
                           idle_q=idle_q, min_cos=min_cos, margin=margin)[0]  # fmt: skip


def arrangements_of(
    M, Q, atoms, probs, *, idle: bool, idle_frac: float = 0.25, idle_q: float = 0.0,
    min_cos: float = 0.5, margin: float = 0.1,
) -> list[str]:  # fmt: skip
    """:func:`arrangement_of` per seed (M (S, H, F), Q (S, H, H)), the heads of every seed
    labelled at once; with ``idle`` (softmax-1, Bayes-softmax) a head is idle when Q_hh <
    ``idle_frac`` × its seed's largest Q_hh (E9's census rule), else when Q_hh < ``idle_q``."""
    from headspec.dynamics.splits import head_labels

    M, Q = np.asarray(M, np.float64), np.asarray(Q, np.float64)
    P = pool(M.shape[-1])
    diag = np.einsum("shh->sh", Q)  # (S, H)
    cut = idle_frac * diag.max(-1, keepdims=True) if idle else np.full((len(Q), 1), idle_q)
    labels = head_labels(M, Q, P, min_cos, margin, cut)  # (S, H)
    syms, order = law_symmetries(atoms, probs), _order(P)
    return [_name(lab, P, syms, order) for lab in labels]


UNRESOLVED = "unresolved"  # the name's start for a state with a head on no pool direction


def resolved(name: str) -> bool:
    """A state's name (:func:`arrangements_of`) names an arrangement: every head sits on a pool
    direction or is idle."""
    return not name.startswith(UNRESOLVED)


def same_arrangement(a: str, b: str) -> bool:
    """Two states' names (:func:`arrangements_of`) name one arrangement: equal and resolved (two
    states with heads on no pool direction are not known to agree)."""
    return a == b and resolved(a)


def _name(labels: np.ndarray, P: np.ndarray, syms, order) -> str:
    """The candidate name of one state's head labels (H,) against the pool P."""
    undecided = int((labels == -1).sum())
    if undecided:
        return f"{UNRESOLVED} ({undecided} undecided)"
    on = labels[labels >= 0]
    if on.size == 0:
        return f"all {labels.size} idle"
    used, sizes = np.unique(on, return_counts=True)
    key = _canonical(P[used], sizes, syms, order)
    return _arrangement(key, int((labels < -1).sum()), P).name


# ============================================================================ classification
class Wake(NamedTuple):
    """Whether an idle head switches back on at an arrangement's fixed point (:func:`wake`)."""

    rate: float  # the largest db/dt · e^{−bias} of one added head over the keys tried
    se: float  # its standard error (the method's)
    key: str  # the key that gives it: '0' or '1.0×(−e1−e2)'
    wakes: bool  # rate > 3 s.e.: its bias grows, so the idle head does not stay idle


@float64
def wake(problem: DriftProblem, point: SplitPoint, *, bias: float = -20.0,
         scales: Sequence[float] = (0.5, 1.0)) -> Wake:  # fmt: skip
    """Does an idle head stay idle at ``point`` (an arrangement's fixed point of its active
    heads)? One head is added with bias ``bias`` and a key of zero or on a pool direction ×
    ``scales`` × the atoms' norm (its own orthogonal part 0.01). Its mass is ~e^{bias + score},
    and a key as long as the atoms scores up to a² ≈ 6 on the hidden token, so at −20 the head
    changes nothing else and the drift of its bias, db/dt = −η_b ∂R/∂b, is linear in its mass:
    db/dt · e^{−bias} is the rate at which the idle head's bias would start to grow (measured:
    2544 at −20, 2531 at −19, but 728 at −12, where the mass is no longer small). The largest
    over the keys: > 3 s.e. and the head wakes (the arrangement with idle heads is not a resting
    point of the whole model), else it stays idle. Softmax-1 and Bayes-softmax only (a softmax
    head cannot idle)."""
    if point.state is None:
        raise ValueError("the point has no fixed point; fix: pass a SplitPoint with found = True")
    M, Q, b = (np.asarray(x, np.float64) for x in point.state)  # (A, F), (A, A), (A,)
    A, F = M.shape
    q = with_heads(problem, A + 1)
    norm = float(np.linalg.norm(np.asarray(problem.law.atoms)[0]))
    keys = [("0", np.zeros(F))] + [(f"{c:g}×({direction_name(d)})", c * norm * d)
                                   for c in scales for d in pool(F)]  # fmt: skip
    best = (-np.inf, 0.0, "")
    for name, k in keys:
        M1 = np.vstack([M, k])  # (A + 1, F)
        Q1 = np.zeros((A + 1, A + 1))
        Q1[:A, :A], Q1[A, :A], Q1[:A, A] = Q, M @ k, M @ k
        Q1[A, A] = k @ k + 0.01
        st = type(point.state)(M1, Q1, np.append(b, bias))
        d = q.drift(st)
        r = float(np.asarray(d.db)[A]) * np.exp(-bias)
        if r > best[0]:
            se = float(np.asarray(d.db_se)[A] + np.asarray(d.db_err)[A]) * np.exp(-bias)
            best = (r, se, name)
    rate, se, name = best
    return Wake(rate, se, name, bool(rate > 3 * se))


class ArrangementPoint(NamedTuple):
    """One arrangement's fixed point and kind (``point``: that of its active heads) and, where it
    has idle heads and a fixed point, whether they stay idle (``wake``, else None)."""

    arrangement: Arrangement
    point: SplitPoint
    wake: Wake | None = None


def with_heads(problem: DriftProblem, n: int) -> DriftProblem:
    """``problem`` for ``n`` active heads: its base samples' head projections cut to the first
    ``n`` (the other draws are unchanged)."""
    base = problem.base
    if base.xi.shape[-1] == n:
        return problem
    if base.xi.shape[-1] < n:
        raise ValueError(f"the problem's base samples have {base.xi.shape[-1]} heads, fewer than "
                         f"{n}; fix: build it for H = {n} or more")  # fmt: skip
    return eqx.tree_at(lambda p: p.method.base.xi, problem, base.xi[..., :n])


@float64
def classify_arrangement(
    problem: DriftProblem,
    arrangement: Arrangement,
    *,
    scales: Sequence[float] = SCALES,
    min_cos: float = 0.5,
    margin: float = 0.1,
) -> ArrangementPoint:
    """The arrangement's fixed point (its active heads, group-symmetric) and its kind, by
        :func:`~headspec.dynamics.splitmap.classify_split` with every pool direction to label
        against (see the module), and for an arrangement with idle heads whether they stay idle
    (:func:`wake`). ``problem``'s base samples need at least the active heads and one more."""
    law = problem.law
    norm = float(np.linalg.norm(np.asarray(law.atoms)[0]))  # the atoms' amplitude
    F = arrangement.directions.shape[1]
    q = with_heads(problem, sum(arrangement.sizes))
    point = classify_split(q, norm * arrangement.directions, arrangement.sizes, scales, min_cos,
                           margin, pool=norm * pool(F))  # fmt: skip
    point = point._replace(split=arrangement.name)
    woken = wake(problem, point) if arrangement.idle and point.found else None
    return ArrangementPoint(arrangement, point, woken)


def arrangement_map(
    problem: DriftProblem,
    H: int,
    *,
    idle: bool | None = None,
    max_groups: int | None = None,
    only: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    **kwargs,
) -> list[ArrangementPoint]:
    """Every candidate arrangement of ``H`` heads for the problem's discrete law, classified
    (:func:`candidates`, :func:`classify_arrangement` with ``kwargs``). Idle heads by default
    for softmax-1 and Bayes-softmax only. ``only``: the candidates of these names alone (in
    candidate order; a name that is no candidate is an error, before any work).
    ``progress(done, total)`` after each."""
    law = problem.law
    if not hasattr(law, "atoms"):
        raise ValueError(f"a map of arrangements needs a discrete law (its atoms and their "
                         f"symmetries); got {type(law).__name__}; fix: task.latent.kind = "
                         "\"discrete\"")  # fmt: skip
    if idle is None:
        idle = problem.activation.name != "softmax"
    every = candidates(law.atoms, law.probs, H, idle=idle, max_groups=max_groups)
    if only is not None:
        known = {a.name for a in every}
        unknown = [n for n in only if n not in known]
        if unknown:
            raise ValueError(
                f"map.only names {unknown}, which are no candidates of {H} heads here "
                f"({'with' if idle else 'without'} idle heads, max_groups {max_groups}); fix: "
                f"names as the map writes them, e.g. {sorted(known)[:4]}"
            )
        every = [a for a in every if a.name in set(only)]
    out = []
    for a in every:
        out.append(classify_arrangement(problem, a, **kwargs))
        if progress is not None:
            progress(len(out), len(every))
    return out
