"""Saddle-to-saddle analysis of one trajectory: where it slows down, the fixed point it sits on
there, that point's spectrum and the time it takes to leave it.

For each slow stretch of the risk curve (:func:`headspec.dynamics.analysis.slow_stretches`) the
state there is *polished* into a fixed point of the ODE: heads whose keys point within
``group_cos`` of each other are taken as one group of identical heads (the symmetric states the
saddles are, e.g. the common phase: one group of H heads), and the least-squares zero of the drift
in that reduced space is found from the groups' mean state
(:func:`headspec.dynamics.fixed_points.find_fixed_point`). Its Jacobian on all H heads
(:func:`headspec.dynamics.jacobian.drift_jacobian`, finite where heads coincide) gives the modes:
common or head-difference, the features and heads they move, zero modes of symmetries apart. The
leading unstable rate λ predicts the time to leave the saddle at dimension D: a head difference
of size ~1/√D grows like e^{λt}, so it takes about ln(D)/(2λ) to become O(1).

Example:
    >>> import jax.numpy as jnp, numpy as np
    >>> Q = np.array([[1.0, 0.995, 0.1], [0.995, 1.0, 0.12], [0.1, 0.12, 1.0]])
    >>> group_heads(Q, 0.99)                     # heads 0 and 1 together, head 2 alone
    [[0, 1], [2]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from headspec.core.precision import float64
from headspec.core.schedules import Schedule
from headspec.dynamics.fixed_points import FixedPoint, find_fixed_point, is_fixed
from headspec.dynamics.jacobian import Mode, drift_jacobian, modes
from headspec.dynamics.problem import DriftProblem, OrderParameters
from headspec.dynamics.splits import stability


def group_heads(Q: np.ndarray, group_cos: float = 0.98) -> list[list[int]]:
    """Groups of heads whose keys all point within ``group_cos`` of each other (complete linkage,
    heads taken in order): Q (H, H) → list of head-index lists, in order of their first head."""
    Q = np.asarray(Q, dtype=float)
    d = np.sqrt(np.maximum(np.diag(Q), 1e-300))
    cos = Q / np.outer(d, d)  # (H, H)
    groups: list[list[int]] = []
    for h in range(Q.shape[0]):
        for g in groups:
            if all(cos[h, j] >= group_cos for j in g):
                g.append(h)
                break
        else:
            groups.append([h])
    return groups


def _grouped_guess(state: OrderParameters, groups: list[list[int]]) -> OrderParameters:
    """One representative per group: the group's mean M, b and its mean overlaps."""
    M, Q, b = (np.asarray(x, dtype=float) for x in state)
    G = len(groups)
    Mg = np.stack([M[g].mean(0) for g in groups])  # (G, F)
    Qg = np.empty((G, G))
    for i, gi in enumerate(groups):
        for j, gj in enumerate(groups):
            Qg[i, j] = np.diag(Q)[gi].mean() if i == j else Q[np.ix_(gi, gj)].mean()
    bg = np.array([b[g].mean() for g in groups])  # (G,)
    return OrderParameters(jnp.asarray(Mg), jnp.asarray(Qg), jnp.asarray(bg))


def describe_mode(mode: Mode, H: int, F: int, with_heads: bool = True) -> str:
    """A mode in words: common or head-difference, the features and heads its M-part moves
    (``with_heads=False`` for one vector of a degenerate eigenspace, whose heads are arbitrary)."""
    if mode.zero:
        return "zero mode (a symmetry)"
    kind = (
        "common (all heads alike)"
        if mode.common > 0.9
        else "head-difference"
        if mode.common < 0.1
        else f"mixed ({100 * mode.common:.0f} % common)"
    )
    m = mode.vector[: H * F].reshape(H, F)  # (H, F)
    if (m**2).sum() < 0.05:
        return f"{kind}; moves key norms/biases, not the features"
    feats = ", ".join(
        f"f{f} {100 * w:.0f} %" for f, w in enumerate(mode.feature_weights) if w >= 0.1
    )
    if not with_heads or mode.common > 0.9:
        return f"{kind}; features {feats}"
    dm = m - m.mean(0)
    share = (dm**2).sum(1) / max((dm**2).sum(), 1e-300)  # (H,)
    heads = ", ".join(f"h{h}" for h in np.argsort(-share) if share[h] >= 0.15)
    return f"{kind}; features {feats}; heads {heads}"


class Saddle(NamedTuple):
    """A slow stretch of a trajectory and the fixed point it sits on."""

    t_start: float  # the slow stretch on the trajectory
    t_end: float
    t_polish: float  # the grid time whose state was polished
    level: float  # the trajectory's mean risk over the stretch
    groups: tuple[tuple[int, ...], ...]  # heads taken as identical (indices of the trajectory)
    state: OrderParameters  # the fixed point, heads in the trajectory's order
    risk: float  # its D → ∞ risk
    drift_before: float  # max |drift| entry at the trajectory's state
    drift_after: float  # max |drift| entry at the fixed point
    max_z: float  # max |drift| / s.e. at the fixed point (≤ 3: fixed; else quasi-fixed)
    converged: bool  # the least-squares solver met its tolerance
    distance: float  # max |Δ| over (M, Q, b) between the trajectory's state and the fixed point
    modes: list[Mode]  # spectrum on symmetric coordinates, largest real part first

    @property
    def is_fixed(self) -> bool:
        """Converged, and the drift within 3 s.e. (as :attr:`FixedPoint.is_fixed`)."""
        return is_fixed(self.converged, self.max_z)

    @property
    def unstable(self) -> list[Mode]:
        """Non-zero modes growing by more than 3 standard errors (:func:`splits.stability`)."""
        return stability(self.modes).unstable

    @property
    def kind(self) -> str:
        """ "saddle", "marginal" or "minimum" (:func:`headspec.dynamics.splits.stability`)."""
        return stability(self.modes).kind

    @property
    def n_zero(self) -> int:
        return sum(m.zero for m in self.modes)

    @property
    def leading(self) -> Mode | None:
        """The non-zero mode of largest real part."""
        return next((m for m in self.modes if not m.zero), None)

    def escape_time(self, D: float) -> float:
        """ln(D)/(2λ), λ the leading unstable rate (inf for a stable point)."""
        u = self.unstable
        return float(np.log(D) / (2 * u[0].eigenvalue.real)) if u else float("inf")


@float64
def polish(
    state: OrderParameters, problem: DriftProblem, group_cos: float = 0.98
) -> tuple[FixedPoint, list[list[int]], OrderParameters]:
    """The fixed point nearest a trajectory's state with its heads grouped by ``group_cos``.

    Returns the :class:`FixedPoint` (heads ordered group by group), the groups (head indices of
    the trajectory) and the fixed point's state with the heads back in the trajectory's order.
    """
    groups = group_heads(state.Q, group_cos)
    sizes = tuple(len(g) for g in groups)
    fp = find_fixed_point(_grouped_guess(state, groups), sizes, problem)
    inv = np.argsort(np.concatenate(groups))  # trajectory head h sits at position inv[h]
    M, Q, b = (np.asarray(x) for x in fp.state)
    back = OrderParameters(
        jnp.asarray(M[inv]), jnp.asarray(Q[np.ix_(inv, inv)]), jnp.asarray(b[inv])
    )
    return fp, groups, back


@float64
def saddle_at(
    state: OrderParameters,
    problem: DriftProblem,
    group_cos: float = 0.98,
    stretch: dict | None = None,
) -> Saddle:
    """Polish one trajectory state into a fixed point and take its spectrum (see module)."""
    st = OrderParameters(*(jnp.asarray(x, jnp.float64) for x in state))
    H, F = st.M.shape
    before = problem.drift(st)
    fp, groups, fixed = polish(st, problem, group_cos)
    jac = drift_jacobian(problem, fixed, keep_samples=True)
    dist = max(float(jnp.abs(a - b).max()) for a, b in zip(st, fixed, strict=True))
    stretch = stretch or {}
    return Saddle(
        t_start=float(stretch.get("t_start", np.nan)),
        t_end=float(stretch.get("t_end", np.nan)),
        t_polish=float(stretch.get("t_mid", np.nan)),
        level=float(stretch.get("level", np.nan)),
        groups=tuple(tuple(g) for g in groups),
        state=fixed,
        risk=fp.risk,
        drift_before=max(float(jnp.abs(x).max()) for x in (before.dM, before.dQ, before.db)),
        drift_after=float(jnp.abs(fp.drift).max()),
        max_z=fp.max_z,
        converged=fp.converged,
        distance=dist,
        modes=modes(jac, H, F),
    )


def saddle_chain(
    t: np.ndarray,
    risk: np.ndarray,
    states: OrderParameters,
    problem: DriftProblem,
    schedule: Schedule | None = None,
    *,
    group_cos: float = 0.98,
    progress: Callable[[int, int], None] | None = None,
) -> list[Saddle]:
    """The saddles of one trajectory: t (T,), risk (T,), states with a leading (T,) axis.

    Every slow stretch of the risk curve (:func:`~headspec.dynamics.analysis.slow_stretches`)
    is polished at its flattest grid point; with a ``schedule`` the learning rates there are
    η·schedule(t) (the fixed points of the ODE at that moment). ``progress(done, total)`` after
    each stretch.
    """
    from headspec.dynamics.analysis import slow_stretches

    stretches = slow_stretches(t, risk)
    out = []
    for i, s in enumerate(stretches):
        k = s["index"]
        f = 1.0 if schedule is None else float(schedule(jnp.asarray(t[k])))
        st = OrderParameters(*(np.asarray(x)[k] for x in states))
        at = problem.with_lr(problem.lr * f, problem.lr_b * f)
        out.append(saddle_at(st, at, group_cos, s))
        if progress is not None:
            progress(i + 1, len(stretches))
    return out
