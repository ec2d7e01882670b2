"""Splits of heads over a law's directions as fixed points of the ODE: found or not, their risk
and their kind (stable minimum, saddle, marginal) — the cell of the map of uneven splits.

A *split* puts ``sizes[j]`` heads on direction j (``directions`` (G, F), one row per group; for a
discrete law usually its atoms). :func:`split_guess` builds the state with one head per group on
its direction (times ``scale``), Q = MMᵀ + 0.1·I, and biases that give each group a mass of order
one on the hidden token (see below). :func:`classify_split` polishes that guess into a fixed point
with those groups (:func:`~headspec.dynamics.fixed_points.find_fixed_point`, least squares on the
group-symmetric states), keeps it only when its heads still sit on their directions in the same
numbers (:func:`~headspec.dynamics.splits.head_labels`), and classifies it by the spectrum of the
full drift's Jacobian (every head free: :func:`~headspec.dynamics.jacobian.drift_jacobian`) with
the one rule of :func:`~headspec.dynamics.splits.stability` (Re λ against 3 s.e.). Several guess
scales are tried, first to last; the first fixed point that keeps the split is the answer.

Bias guesses (modelling choice of this module, not of the paper; like the guess scales they only
choose where the solve starts, and every point found is checked): 0 for softmax (a common shift
does nothing); for softmax-1 −scale²·|d|² − log(size) (the hidden token's score scale²·|d|² then
gives the group a mass of order one); for Bayes-softmax the constructed optimum's
log(p) − scale²·|d|²/2 − log(size), with p = 1/G (identical heads share one direction's prior).

Measured (tests/test_splitmap.py; softmax, two orthogonal atoms 2.5·e_f, L = 4, η = 1,
2026-12-03): with two heads the even split 1:1 is a stable minimum (leading rate −0.00139 by the
exact method), and both heads on one atom is no fixed point (the least-squares solve ends on the
common phase, both heads on the atoms' mean direction, which the margin counts on neither). With
four heads the group-symmetric 2:2 and 3:1 states are fixed points and both saddles by the rule
(+0.0051 ± 0.0011 and +0.0060 ± 0.0013 at n = 2048): their unstable modes split a group's
identical heads — what that means for rearrangement is the map's question (issue 27), not
settled here. One classification compiles two programs (the least-squares solve and the
Jacobian, ~10 s of tracing each on 2 cores at H = 2); further settings of the same shapes reuse
them. The run time per setting grows with H, L and n: the H = 2, L = 4, n = 2048 test grid takes
a few seconds per setting, a 4-head map at L = 10, n = 4096 took 1–5 min per setting (2 shared
cores).

Example:
    >>> import numpy as np
    >>> g = split_guess(np.array([[2.5, 0.0], [0.0, 2.5]]), (3, 1), scale=1.0)
    >>> g.M.tolist(), g.b.tolist()                      # one row per group; softmax: biases 0
    ([[2.5, 0.0], [0.0, 2.5]], [0.0, 0.0])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from headspec.core.precision import float64
from headspec.dynamics.fixed_points import find_fixed_point
from headspec.dynamics.jacobian import drift_jacobian, modes
from headspec.dynamics.problem import DriftProblem, OrderParameters
from headspec.dynamics.saddles import describe_mode
from headspec.dynamics.splits import counts, head_labels, mode_se, split_name, stability

__all__ = [
    "Boundary", "Excursion", "MapCell", "SplitPoint", "at_setting", "classify_split",
    "classify_splits", "excursion", "is_balanced", "locate_boundary", "most_stable",
    "most_stable_uneven", "pool_index", "split_guess", "split_map", "splits_of",
]  # fmt: skip

SCALES = (1.0, 0.6, 1.5)  # guess scales tried, first to last
#: a split's solve runs in chunks of CHUNK Levenberg–Marquardt steps and stops once the largest
#: key norm exceeds RUNAWAY × the directions' norm (× the guess scale, if larger than 1) and still
#: grows: those keys run off, with no fixed point to find. Fixed points found on E7's law (L = 10,
#: η = 2, H = 2–4, the three activations) have key norms ≤ 1.7 × the atoms' norm; the solves
#: that did not converge grew past 4× by step 32–64 and kept growing to step 256.
CHUNK, RUNAWAY = 32, 4.0


class SplitPoint(NamedTuple):
    """One split's fixed point and its kind (``kind`` "no fixed point" when none kept it)."""

    sizes: tuple[int, ...]  # heads per direction
    split: str  # its name over every direction ("3:1", "2:1:1", "4:0:0"; splits.split_name)
    found: bool  # a fixed point with this split was found
    kind: str  # "minimum" | "saddle" | "marginal" | "no fixed point"
    risk: float  # its D → ∞ risk (NaN if none)
    lead_rate: float  # Re λ of the leading non-zero mode (NaN if none)
    lead_se: float  # its standard error
    n_unstable: int  # non-zero modes with Re λ > 3 s.e.
    n_marginal: int  # non-zero modes with |Re λ| ≤ 3 s.e.
    mode: str  # the leading mode in words (saddles.describe_mode)
    scale: float  # the guess scale that found it (NaN if none)
    state: OrderParameters | None  # the fixed point (H heads, group by group)
    lead_vector: np.ndarray | None = None  # the leading mode on the flat (M, Q, b), unit norm


def split_guess(
    directions: np.ndarray, sizes: Sequence[int], scale: float, activation: str = "softmax"
) -> OrderParameters:
    """The reduced guess of a split: one head per group (G, F) on its direction × ``scale``,
    Q = MMᵀ + 0.1·I, biases as in the module docstring."""
    d = np.asarray(directions, np.float64)  # (G, F)
    sizes = np.asarray(sizes, np.float64)
    G = len(sizes)
    M = scale * d[:G]  # (G, F)
    sq = (M**2).sum(1)  # (G,) scale²·|d|²
    if activation == "softmax1":
        b = -sq - np.log(sizes)
    elif activation == "bayes_softmax":
        b = np.log(1.0 / G) - sq / 2 - np.log(sizes)
    else:
        b = np.zeros(G)
    return OrderParameters(jnp.asarray(M), jnp.asarray(M @ M.T + 0.1 * np.eye(G)), jnp.asarray(b))


@float64
def classify_split(
    problem: DriftProblem,
    directions: np.ndarray,
    sizes: Sequence[int],
    scales: Sequence[float] = SCALES,
    min_cos: float = 0.5,
    margin: float = 0.1,
    *,
    pool: np.ndarray | None = None,
) -> SplitPoint:
    """The fixed point of ``sizes[j]`` heads on direction j and its kind (see the module). A
    head counts on a direction with cosine ≥ ``min_cos`` and ahead of every other direction's by
    ``margin`` (a head on the mean of two orthogonal directions, cosine 0.71 with both, is on
    neither: that is the common phase, not a split).

    ``pool`` (P, F): the directions a head is labelled against instead (every direction of
    :mod:`~headspec.dynamics.arrangements`' candidates, ``directions`` among them); the fixed
    point is kept only when each group's heads sit on the group's own pool direction. Without
    it, any assignment of the group sizes to ``directions`` is kept (a split's name)."""
    sizes = tuple(int(s) for s in sizes)
    if not sizes or min(sizes) < 1:
        raise ValueError(
            f"sizes {sizes}: every group needs at least one head; fix: list only the directions "
            "that hold heads, e.g. (4,) for all four heads on the first direction"
        )
    dirs = np.asarray(directions, np.float64)  # (J, F): every direction a head may take
    if len(sizes) > len(dirs):
        raise ValueError(f"sizes {sizes} name {len(sizes)} groups but there are {len(dirs)} "
                         "directions; fix: one size per direction, at most")  # fmt: skip
    want = sorted(sizes, reverse=True)
    H = sum(sizes)
    against = dirs if pool is None else np.asarray(pool, np.float64)  # (J, F) or (P, F)
    if pool is not None:  # heads per pool direction asked for: each group on its own direction
        own = pool_index(against, dirs[: len(sizes)])  # (G,)
        expected = np.bincount(own, weights=sizes, minlength=len(against)).astype(int)
    for scale in scales:
        guess = split_guess(dirs[: len(sizes)], sizes, scale, problem.activation.name)
        far = RUNAWAY * max(1.0, scale) * float(np.linalg.norm(dirs, axis=1).max())
        fp = find_fixed_point(guess, sizes, problem, chunk=CHUNK, runaway=far)
        if not fp.is_fixed:
            continue
        M, Q = np.asarray(fp.state.M), np.asarray(fp.state.Q)  # (H, F), (H, H)
        labels = head_labels(M, Q, against, min_cos=min_cos, margin=margin)  # (H,)
        got = counts(labels, len(against))  # (J,) or (P,): heads per direction
        kept = (sorted(got[got > 0], reverse=True) == want if pool is None
                else np.array_equal(got, expected))  # fmt: skip
        if (labels < 0).any() or not kept:
            continue  # the heads left their directions: another split's fixed point
        F = M.shape[1]
        ms = modes(drift_jacobian(problem, fp.state, keep_samples=True), H, F)
        st = stability(ms)
        lead = next((m for m in ms if not m.zero), None)
        return SplitPoint(
            sizes=sizes,
            split=split_name(labels, J=len(against)),
            found=True,
            kind=st.kind,
            risk=float(fp.risk),
            lead_rate=float(lead.eigenvalue.real) if lead else np.nan,
            lead_se=mode_se(lead) if lead else np.nan,
            n_unstable=len(st.unstable),
            n_marginal=len(st.marginal),
            mode=describe_mode(lead, H, F) if lead else "",
            scale=float(scale),
            state=fp.state,
            lead_vector=None if lead is None else np.asarray(lead.vector, np.float64),
        )
    name = split_name(np.repeat(np.arange(len(sizes)), sizes), J=len(dirs))  # asked for: "4:0"
    nan = float("nan")
    return SplitPoint(sizes, name, False, "no fixed point", nan, nan, nan, 0, 0, "", nan, None)


def pool_index(pool: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """Per direction (G, F) the index of the ``pool`` direction (P, F) it points along; refused
    (ValueError) where one is in no pool direction."""
    pn = pool / np.linalg.norm(pool, axis=1, keepdims=True)
    dn = directions / np.linalg.norm(directions, axis=1, keepdims=True)
    c = dn @ pn.T  # (G, P)
    idx = np.argmax(c, axis=1)
    if not np.all(c[np.arange(len(idx)), idx] > 1 - 1e-9):
        raise ValueError("a group's direction is not in the pool; fix: give the pool every "
                         "direction the groups take")  # fmt: skip
    return idx


def splits_of(H: int, J: int) -> list[tuple[int, ...]]:
    """Every split of H heads over at most J directions, each with its larger groups first, in
    descending lexicographic order (the most concentrated first): ``splits_of(4, 2)`` →
    [(4,), (3, 1), (2, 2)], i.e. 4:0, 3:1, 2:2."""
    if H < 1 or J < 1:
        raise ValueError(f"H = {H} heads over J = {J} directions; fix: both at least 1")

    def parts(n: int, most: int, k: int):  # partitions of n, parts ≤ most, at most k parts
        if n == 0:
            yield ()
            return
        if k == 0:
            return
        for first in range(min(n, most), 0, -1):
            for rest in parts(n - first, first, k - 1):
                yield (first, *rest)

    return list(parts(H, H, J))


def classify_splits(
    problem: DriftProblem,
    directions: np.ndarray,
    H: int,
    progress: Callable[[int, int], None] | None = None,
    **kwargs,
) -> list[SplitPoint]:
    """:func:`classify_split` for every split of ``H`` heads over the directions, in the order of
    :func:`splits_of`; ``kwargs`` go to :func:`classify_split`; ``progress(done, total)`` after
    each split."""
    J = len(np.asarray(directions))
    every, out = splits_of(H, J), []
    for sizes in every:
        out.append(classify_split(problem, directions, sizes, **kwargs))
        if progress is not None:
            progress(len(out), len(every))
    return out


def is_balanced(sizes: Sequence[int], J: int) -> bool:
    """The most even split of its heads over ``J`` directions: group sizes (empty directions
    counted as 0) differ by at most one — 2:2, 2:1, 1:1:0 (two heads, three directions)."""
    full = list(sizes) + [0] * (J - len(sizes))
    return max(full) - min(full) <= 1


_ORDER = {"minimum": 0, "marginal": 1, "saddle": 2}  # most stable first


def most_stable(points: Sequence[SplitPoint]) -> SplitPoint | None:
    """The point whose fixed point is the most stable — a minimum before a marginal point before
    a saddle, then the smallest leading rate — or None where none is a fixed point."""
    found = [p for p in points if p.found]
    return min(found, key=lambda p: (_ORDER[p.kind], p.lead_rate), default=None)


def most_stable_uneven(points: Sequence[SplitPoint], J: int) -> SplitPoint | None:
    """The uneven split (not :func:`is_balanced`) whose fixed point is the most stable — a
    minimum before a marginal point before a saddle, then the smallest leading rate — or None
    where no uneven split is a fixed point. It decides the map's colour: where it is a stable
    minimum, heads started there stay in an uneven split; where it is a saddle, they leave."""
    return most_stable([p for p in points if not is_balanced(p.sizes, J)])


class MapCell(NamedTuple):
    """One setting of a map: the law's amplitude, the learning rate (0: gradient flow) and every
    split's :class:`SplitPoint` (in the order of :func:`splits_of`)."""

    amplitude: float
    eta: float
    splits: list[SplitPoint]


def at_setting(
    problem: DriftProblem, directions: np.ndarray, amplitude: float, eta: float
) -> tuple[DriftProblem, np.ndarray]:
    """``problem`` with its discrete law's atoms (and ``directions``) scaled so that the first
    direction has norm ``amplitude``, at η = η_b = ``eta`` (0: gradient flow — the η-linear drift
    at η = 1, its rates per unit η). Law and η are data of the compiled programs: every setting
    of the same shapes reuses them."""
    from headspec.core.latent import Discrete

    law = problem.law
    if not isinstance(law, Discrete):
        raise ValueError(
            f"a map scales a discrete law's atoms; got {type(law).__name__}; fix: give a "
            "problem on a discrete law (its atoms are the directions)"
        )
    dirs = np.asarray(directions, np.float64)
    f = float(amplitude) / float(np.linalg.norm(dirs[0]))
    at = eqx.tree_at(lambda p: p.model.law.atoms, problem, law.atoms * f)
    q = at.linear().with_lr(1.0) if eta == 0 else at.with_lr(float(eta))
    return q, dirs * f


def split_map(
    problem: DriftProblem,
    directions: np.ndarray,
    H: int,
    amplitudes: Sequence[float],
    etas: Sequence[float],
    progress: Callable[[int, int], None] | None = None,
    **kwargs,
) -> list[MapCell]:
    """Every split of ``H`` heads at every (amplitude, η) of a grid (:func:`at_setting`); the
    grid compiles once (once more for η = 0, whose drift has no η² term); see the module for the
    time per setting. ``progress(done, total)`` after each setting."""
    total, cells = len(amplitudes) * len(etas), []
    for a in amplitudes:
        for eta in etas:
            q, dirs = at_setting(problem, directions, a, eta)
            cells.append(MapCell(float(a), float(eta), classify_splits(q, dirs, H, **kwargs)))
            if progress is not None:
                progress(len(cells), total)
    return cells


class Boundary(NamedTuple):
    """Where a split's leading rate changes sign along the amplitude: between ``low`` and
    ``high`` (``high − low`` ≤ the tolerance asked for), with every classification made on the
    way as ``(amplitude, SplitPoint)`` in the order computed."""

    sizes: tuple[int, ...]
    eta: float
    low: float
    high: float
    at_low: SplitPoint
    at_high: SplitPoint
    probes: list[tuple[float, SplitPoint]]

    @property
    def middle(self) -> float:
        return 0.5 * (self.low + self.high)


def locate_boundary(
    problem: DriftProblem,
    directions: np.ndarray,
    sizes: Sequence[int],
    low: float,
    high: float,
    *,
    eta: float,
    tol: float = 0.05,
    progress: Callable[[float, SplitPoint], None] | None = None,
    **kwargs,
) -> Boundary:
    """Bisect in the amplitude a for the sign change of split ``sizes``'s leading rate Re λ at
    learning rate ``eta`` (:func:`at_setting`): from a saddle (Re λ > 0) to a stable point, or
    back, between ``low`` and ``high``. The kinds (:func:`~headspec.dynamics.splits.stability`)
    name each end; a "marginal" end means the sign is within 3 s.e. of zero there. Each probe
    is one :func:`classify_split` (``kwargs``), ``progress(a, point)`` after each; about
    log2((high − low)/tol) + 2 of them.

    Refused (ValueError, with the fix): ends where the split is no fixed point, ends with the
    same sign (no boundary between them), or a probe on the way that finds no fixed point (the
    split disappears before its kind changes: the boundary is of another kind)."""
    if not 0 < low < high:
        raise ValueError(f"amplitudes low = {low:g}, high = {high:g}; fix: 0 < low < high")
    probes: list[tuple[float, SplitPoint]] = []

    def probe(a: float) -> SplitPoint:
        q, dirs = at_setting(problem, directions, a, eta)
        p = classify_split(q, dirs, sizes, **kwargs)
        probes.append((a, p))
        if progress is not None:
            progress(a, p)
        if not p.found:
            raise ValueError(
                f"split {p.split} is no fixed point at a = {a:g} (η = {eta:g}): no sign change "
                "of its rate to follow there; fix: choose ends where the map finds it"
            )
        return p

    at_low, at_high = probe(low), probe(high)
    sign = np.sign(at_low.lead_rate)
    if sign == np.sign(at_high.lead_rate):
        raise ValueError(
            f"split {at_low.split}: Re λ has the same sign at a = {low:g} ({at_low.lead_rate:+.3g})"
            f" and a = {high:g} ({at_high.lead_rate:+.3g}); fix: choose ends on both sides of a "
            "change of kind on the map"
        )
    while high - low > tol:
        mid = 0.5 * (low + high)
        p = probe(mid)
        if np.sign(p.lead_rate) == sign:
            low, at_low = mid, p
        else:
            high, at_high = mid, p
    return Boundary(tuple(int(s) for s in sizes), float(eta), low, high, at_low, at_high, probes)


class Excursion(NamedTuple):
    """Where the ODE goes from a split's fixed point nudged along its leading mode (one sign)."""

    sign: int  # +1 or −1: the side of the mode
    start_split: str  # the split at t = 0 (the fixed point's, unless the nudge moved a head)
    end_split: str  # the split at T
    t_change: float  # first grid time at which the split differs from the start (NaN: never)
    start_risk: float
    max_risk: float  # the bump of the excursion (≥ start_risk)
    end_risk: float
    T: float  # the horizon
    failed: bool  # the solver failed (the values stop at its last good state)


def _nudge(state: OrderParameters, v: np.ndarray, eps: float) -> OrderParameters:
    """state + eps·v/max|v| (flat (M, Q, b) vector), with Q − MMᵀ projected back to PSD."""
    M0, Q0, b0 = (np.asarray(x, np.float64) for x in state)
    H, F = M0.shape
    v = np.asarray(v, np.float64) / max(float(np.abs(v).max()), 1e-300)
    M = M0 + eps * v[: H * F].reshape(H, F)
    Q = Q0 + eps * v[H * F : H * F + H * H].reshape(H, H)
    b = b0 + eps * v[H * F + H * H :]
    C = Q - M @ M.T
    w, U = np.linalg.eigh(0.5 * (C + C.T))
    C = (U * np.clip(w, 0.0, None)) @ U.T
    return OrderParameters(M, M @ M.T + C, b)


@float64
def excursion(
    problem: DriftProblem,
    point: SplitPoint,
    directions: np.ndarray,
    *,
    eps: float = 1e-3,
    T: float | None = None,
    points: int = 40,
    min_cos: float = 0.5,
    margin: float = 0.1,
) -> list[Excursion]:
    """Integrate the ODE (:func:`~headspec.dynamics.ode.integrate`, constant η of ``problem``)
    from the split's fixed point plus ``eps`` (largest entry) along its leading mode, on both
    sides, to ``T`` (default 25/Re λ clipped to [200, 4000]: ~25 e-folds of the instability)
    on a log grid of ``points`` times; the split along the way by the labels of
    :func:`classify_split`. The risk is measured on the problem's own base samples.

    A saddle's excursion tells where the heads go (the end split) and what it costs (the bump
    ``max_risk − start_risk``); from a stable point both sides come back (end split = start)."""
    from headspec.core.schedules import Constant
    from headspec.dynamics.ode import Solver, integrate

    if point.state is None or point.lead_vector is None:
        raise ValueError(f"split {point.split} has no fixed point (or no mode) to start from; "
                         "fix: pass a SplitPoint with found = True")  # fmt: skip
    if T is None:
        T = float(np.clip(25.0 / max(point.lead_rate, 1e-6), 200.0, 4000.0))
    ts = np.concatenate([[0.0], np.geomspace(min(1.0, T / 10), T, points)])
    starts = [_nudge(point.state, point.lead_vector, s * eps) for s in (1.0, -1.0)]
    y0 = OrderParameters(*(jnp.stack([jnp.asarray(st[k]) for st in starts]) for k in range(3)))
    obs, fail_t, *_ = integrate(
        y0, ts, problem, problem.base, Constant(), solver=Solver(1e-6, 1e-8)
    )
    dirs = np.asarray(directions, np.float64)
    out = []
    for s, sign in enumerate((1, -1)):
        names = [
            split_name(head_labels(o.M[s], o.Q[s], dirs, min_cos=min_cos, margin=margin),
                       J=len(dirs))
            for o in obs
        ]  # fmt: skip
        risks = np.array([float(o.risk[s]) for o in obs])
        change = next((float(t) for t, n in zip(ts, names, strict=True) if n != names[0]), np.nan)
        out.append(Excursion(sign, names[0], names[-1], change, float(risks[0]),
                             float(np.nanmax(risks)), float(risks[-1]), float(T),
                             bool(np.isfinite(fail_t[s]))))  # fmt: skip
    return out
