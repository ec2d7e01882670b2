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

import dataclasses
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
    "MapCell", "SplitPoint", "classify_split", "classify_splits", "split_guess", "split_map",
    "splits_of",
]  # fmt: skip

SCALES = (1.0, 0.6, 1.5)  # guess scales tried, first to last


class SplitPoint(NamedTuple):
    """One split's fixed point and its kind (``kind`` "no fixed point" when none kept it)."""

    sizes: tuple[int, ...]  # heads per direction
    split: str  # its name ("3:1", …; splits.split_name, which names two directions)
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
) -> SplitPoint:
    """The fixed point of ``sizes[j]`` heads on direction j and its kind (see the module). A
    head counts on a direction with cosine ≥ ``min_cos`` and ahead of every other direction's by
    ``margin`` (a head on the mean of two orthogonal directions, cosine 0.71 with both, is on
    neither: that is the common phase, not a split)."""
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
    for scale in scales:
        guess = split_guess(dirs[: len(sizes)], sizes, scale, problem.activation.name)
        fp = find_fixed_point(guess, sizes, problem)
        if not fp.is_fixed:
            continue
        M, Q = np.asarray(fp.state.M), np.asarray(fp.state.Q)  # (H, F), (H, H)
        labels = head_labels(M, Q, dirs, min_cos=min_cos, margin=margin)  # (H,)
        got = counts(labels, len(dirs))  # (J,) heads per direction
        if (labels < 0).any() or sorted(got[got > 0], reverse=True) != want:
            continue  # the heads left their directions: another split's fixed point
        F = M.shape[1]
        ms = modes(drift_jacobian(problem, fp.state, keep_samples=True), H, F)
        st = stability(ms)
        lead = next((m for m in ms if not m.zero), None)
        return SplitPoint(
            sizes=sizes,
            split=split_name(labels),
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
        )
    name = split_name(np.repeat(np.arange(len(sizes)), sizes))  # the split asked for: "4:0", …
    nan = float("nan")
    return SplitPoint(sizes, name, False, "no fixed point", nan, nan, nan, 0, 0, "", nan, None)


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
    problem: DriftProblem, directions: np.ndarray, H: int, **kwargs
) -> list[SplitPoint]:
    """:func:`classify_split` for every split of ``H`` heads over the directions, in the order of
    :func:`splits_of`; ``kwargs`` go to :func:`classify_split`."""
    J = len(np.asarray(directions))
    return [classify_split(problem, directions, sizes, **kwargs) for sizes in splits_of(H, J)]


class MapCell(NamedTuple):
    """One setting of a map: the law's amplitude, the learning rate (0: gradient flow) and every
    split's :class:`SplitPoint` (in the order of :func:`splits_of`)."""

    amplitude: float
    eta: float
    splits: list[SplitPoint]


def split_map(
    problem: DriftProblem,
    directions: np.ndarray,
    H: int,
    amplitudes: Sequence[float],
    etas: Sequence[float],
    progress: Callable[[int, int], None] | None = None,
    **kwargs,
) -> list[MapCell]:
    """Every split of ``H`` heads at every (amplitude, η) of a grid: the law of ``problem`` with
    its atoms (and ``directions``) scaled to each amplitude (relative to the first direction's
    norm), at learning rates η = η_b; η = 0 is gradient flow (the η-linear drift, its rates
    per unit η). Law and η are data of the compiled programs, so the grid compiles once (once
    more for η = 0, whose drift has no η² term); see the module for the time per setting.
    ``progress(done, total)`` after each setting."""
    from headspec.core.latent import Discrete

    law = problem.law
    if not isinstance(law, Discrete):
        raise ValueError(
            f"split_map scales a discrete law's atoms; got {type(law).__name__}; fix: give a "
            "problem on a discrete law (its atoms are the directions)"
        )
    dirs = np.asarray(directions, np.float64)
    unit = float(np.linalg.norm(dirs[0]))
    total, cells = len(amplitudes) * len(etas), []
    for a in amplitudes:
        f = float(a) / unit
        at = dataclasses.replace(problem, law=eqx.tree_at(lambda w: w.atoms, law, law.atoms * f))
        for eta in etas:
            q = at.linear().with_lr(1.0) if eta == 0 else at.with_lr(float(eta))
            cells.append(MapCell(float(a), float(eta), classify_splits(q, dirs * f, H, **kwargs)))
            if progress is not None:
                progress(len(cells), total)
    return cells
