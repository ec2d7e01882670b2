"""Fixed points of the order-parameter ODE with groups of identical heads (SPEC §5).

Heads that form groups of identical heads (a partition of H such as 4, 2+2, 3+1) stay identical
under the exact ODE, so such states are described by one representative per group. This module
finds zeros of the drift in that reduced space — the common phase (one group), uneven splits —
by least squares with optimistix (Levenberg–Marquardt), starting from a guess or a state taken
from a trajectory ("polishing").

Parametrisation. A representative key is k_g = Σ_f M_gf u_f + Σ_j W_gj w_j (u_f the feature
directions, w_j orthonormal directions outside span(K*)), W lower-triangular (G × G), so
Q = MMᵀ + WWᵀ and the head projections are λ_g = M_g·ν + W_g·ξ: the drift is smooth in (M, W, b)
everywhere, also where Q − MMᵀ is singular (keys in span(K*), which a square root of Q − MMᵀ
could not differentiate). The residual is the reduced drift (dM, upper triangle of dQ, db) of
SPEC §5, averaged over the base samples (exact over a discrete law's atoms); the scores of the H
heads are the representatives' scores repeated over their groups.

What is not a fixed point: with softmax a head's bias has no effect and key norms can keep
growing slowly while directions settle. Least squares then ends at a *quasi-fixed point*, the
state of locally smallest drift; :class:`FixedPoint` reports the largest drift entry against
its Monte-Carlo standard error, so the caller can tell a fixed point (drift within a few s.e.)
from a quasi-fixed one.

Example:
    >>> import jax.numpy as jnp
    >>> from headspec.core.latent import Spike
    >>> from headspec.core.attention import Softmax
    >>> from headspec.core.observables import BaseSamples
    >>> from headspec.dynamics.problem import DriftProblem
    >>> law = Spike([2.0])
    >>> base = BaseSamples.sobol(0, law, L=10, H=1, n=4096)
    >>> guess = OrderParameters(M=jnp.array([[1.5]]), Q=jnp.array([[2.5]]), b=jnp.zeros(1))
    >>> problem = DriftProblem.sampled(Softmax(), law, base, eta2=False)
    >>> fp = find_fixed_point(guess, (1,), problem)
    >>> round(float(fp.state.M[0, 0]), 1), fp.is_fixed                 # k = K*a (SPEC §6)
    (2.0, True)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.accuracy import error_bound
from headspec.core.grouped import (
    expand_groups,
    group_index,
    groupable,
    grouped_risk_and_gradient,
)
from headspec.core.linalg import psd_root, qr
from headspec.core.precision import float64
from headspec.core.stats import sample_mean_se
from headspec.dynamics.eta2 import RiskGradient
from headspec.dynamics.jacobian import drift_integrand
from headspec.dynamics.problem import DriftProblem, Exact, OrderParameters, flatten

Array = jax.Array


def representatives(sizes: tuple[int, ...]) -> np.ndarray:
    """The first head of each group (G,)."""
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)


def expand(state: OrderParameters, sizes: tuple[int, ...]) -> OrderParameters:
    """A reduced state (one head per group) as the full state of H heads."""
    return OrderParameters(*expand_groups(*(jnp.asarray(x) for x in state), sizes))


def reduce(state: OrderParameters, sizes: tuple[int, ...]) -> OrderParameters:
    """The representatives of a full state whose heads are grouped by ``sizes``."""
    r = representatives(sizes)
    M, Q, b = (jnp.asarray(x) for x in state)
    return OrderParameters(M[r], Q[r][:, r], b[r])


def _pack(M, W, b):
    iu = jnp.tril_indices(W.shape[0])
    return jnp.concatenate([M.ravel(), W[iu], b])


def _unpack(x, G, F):
    M = x[: G * F].reshape(G, F)
    n_w = G * (G + 1) // 2
    W = jnp.zeros((G, G), x.dtype).at[jnp.tril_indices(G)].set(x[G * F : G * F + n_w])
    return M, W, x[G * F + n_w :]


def _factor(state: OrderParameters) -> Array:
    """W lower-triangular with WWᵀ = Q − MMᵀ (eigen-clipped, then a QR to make it triangular)."""
    S = psd_root(state.Q - state.M @ state.M.T)  # (G, G), S Sᵀ = C
    _, R = qr(S.T)  # S = Rᵀ Qᵀ: Rᵀ is lower-triangular with Rᵀ R = S Sᵀ
    return R.T


def _expanded(x, sizes, F) -> OrderParameters:
    """The full state (H heads) of packed representatives x."""
    M, W, b = _unpack(x, len(sizes), F)
    return expand(OrderParameters(M, M @ M.T + W @ W.T, b), sizes)


def _reduce_flat(psi, sizes, H: int, F: int):
    """(dM, upper triangle of dQ, db) of the representatives from flat full drifts (…, P)."""
    rep, iu = representatives(sizes), np.triu_indices(len(sizes))
    lead = psi.shape[:-1]
    dM = psi[..., : H * F].reshape(*lead, H, F)[..., rep, :]  # (…, G, F)
    dQ = psi[..., H * F : H * F + H * H].reshape(*lead, H, H)[..., rep, :][..., rep]  # (…, G, G)
    db = psi[..., H * F + H * H :][..., rep]  # (…, G)
    return jnp.concatenate([dM.reshape(*lead, -1), dQ[..., iu[0], iu[1]], db], axis=-1)


def _reduced_terms(x, sizes, F, problem: DriftProblem, linear=True):
    """Per-sample reduced drift (n, p) at packed x: (dM, upper triangle of dQ, db) of the
    representatives, with the H heads' scores repeated over groups (``linear=False``: the η²
    term only)."""
    G = len(sizes)
    M, W, b = _unpack(x, G, F)
    idx = group_index(sizes)
    base = problem.base
    L = base.nu.shape[1]
    hot = jax.nn.one_hot(0, L, dtype=base.nu.dtype)[None, :, None]  # hidden token at l = 0

    def per_theta(theta):  # θ (n, F) → (n, p)
        nu = base.nu + hot * theta[:, None, :]  # (n, L, F)
        lam = jnp.einsum("nlf,gf->ngl", nu, M) + jnp.einsum("nlk,gk->ngl", base.xi[..., :G], W)

        def one(lam_g, nu_):  # (G, L), (L, F)
            psi = drift_integrand(lam_g[idx], nu_, b[idx], problem, linear=linear)
            return _reduce_flat(psi, sizes, len(idx), F)

        return jax.vmap(one)(lam, nu)

    return problem.law.expect(per_theta, base.theta)  # (n, p)


def _residual_terms(x, args):
    """Per-sample reduced drift (n, p) at packed x (the exact method: its η-linear part, exact,
    added to every sample's η² term; (1, p) without that term); ``args`` = (sizes, F, problem)."""
    sizes, F, problem = args
    if not isinstance(problem.method, Exact):
        return _reduced_terms(x, sizes, F, problem)
    st = _expanded(x, sizes, F)
    grad = None
    if groupable(problem.model) and len(sizes) < st.M.shape[0]:  # G(G+1)/2 kinds of pairs
        M, W, b = _unpack(x, len(sizes), F)
        g = grouped_risk_and_gradient(M, M @ M.T + W @ W.T, b, sizes, problem.model,
                                      problem.method.quad)  # fmt: skip
        grad = RiskGradient(*g)
    lin = problem.method.linear(problem, st, problem.lr, problem.lr_b, grad)[1]
    lin = _reduce_flat(flatten(lin), sizes, st.M.shape[0], F)[None]  # (1, p)
    if not problem.eta2:
        return lin
    return lin + _reduced_terms(x, sizes, F, problem, linear=False)


def _mean_residual(x, args):
    """The reduced drift at packed x: the least-squares residual (p,)."""
    return _residual_terms(x, args).mean(0)


def is_fixed(converged: bool, max_z: float) -> bool:
    """The one rule for a fixed point: the solver converged and |drift| ≤ 3 s.e. everywhere."""
    return bool(converged) and max_z <= 3.0


class FixedPoint(NamedTuple):
    """A (quasi-)fixed point of the ODE with groups of identical heads."""

    state: OrderParameters  # the full state (H heads)
    sizes: tuple[int, ...]  # group sizes
    drift: Array  # (p,) reduced drift (dM, upper triangle of dQ, db) at the state
    drift_se: Array  # (p,) its standard errors (at least the method's accuracy and, exact
    #: method, the quadrature's error bound at the state)
    risk: float  # D → ∞ risk of the state by the problem's method
    steps: int  # least-squares iterations
    converged: bool  # the solver met its tolerance

    @property
    def max_z(self) -> float:
        """Largest |drift| / s.e. over the entries (where s.e. > 0)."""
        d, s = np.abs(np.asarray(self.drift)), np.asarray(self.drift_se)
        z = np.where(s > 0, d / np.where(s > 0, s, 1.0), np.where(d > 1e-12, np.inf, 0.0))
        return float(z.max())

    @property
    def is_fixed(self) -> bool:
        """The solver converged and the drift is within 3 standard errors in every entry (else: a
        quasi-fixed point). Both are needed: where keys run off to infinity the standard errors
        grow with the norms, so a small z alone can hide a state that is not a fixed point."""
        return is_fixed(self.converged, self.max_z)


@float64
def find_fixed_point(
    guess: OrderParameters,
    sizes: tuple[int, ...],
    problem: DriftProblem,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    max_steps: int = 256,
    *,
    chunk: int | None = None,
    runaway: float | None = None,
) -> FixedPoint:
    """Least-squares zero of the reduced drift of ``problem`` near ``guess``.

    ``guess`` is either a reduced state (one head per group, G heads) or a full state of
    H = sum(sizes) heads whose representatives are taken; ``problem.linear()`` gives the
    gradient-flow fixed points. Uses optimistix's Levenberg–Marquardt (robust to the zero modes
    of softmax's biases); the result says whether the drift vanished within its errors (standard
    errors, and for the exact method its quadrature accuracy).

    ``chunk``: solve in runs of that many steps (each restarts Levenberg–Marquardt from where the
    last one stopped; one compiled program for all), so that with ``runaway`` the solve stops
    early where the largest key norm √Q_hh exceeds ``runaway`` and still grows over a run: keys
    that run off to infinity have no fixed point to find (the map of arrangements spent most of
    its time on such solves, to ``max_steps``). A solve that converges within the first run is
    the same as without ``chunk``.
    """
    import optimistix as optx

    sizes = tuple(int(s) for s in sizes)
    G, H = len(sizes), sum(sizes)
    guess = OrderParameters(*(jnp.asarray(x, jnp.float64) for x in guess))
    if guess.M.shape[0] == H and H != G:
        guess = reduce(guess, sizes)
    if guess.M.shape[0] != G:
        raise ValueError(f"guess has {guess.M.shape[0]} head(s); sizes {sizes} need {G} or {H}")
    F = guess.M.shape[1]
    x0 = _pack(guess.M, _factor(guess), guess.b)
    args = (sizes, F, problem)
    step = max_steps if chunk is None else min(chunk, max_steps)
    x, done = x0, 0
    top = _key_norm(x0, G, F) if runaway is not None else 0.0
    while True:
        sol = optx.least_squares(
            _mean_residual,  # module-level: identical solves reuse one compiled program
            optx.LevenbergMarquardt(rtol=rtol, atol=atol),
            x,
            args=args,
            max_steps=step,
            throw=False,
        )
        done += int(sol.stats["num_steps"])
        converged = bool(sol.result == optx.RESULTS.successful)
        out_of_steps = sol.result == optx.RESULTS.nonlinear_max_steps_reached
        if not bool(out_of_steps) or done + step > max_steps:
            break  # converged, failed otherwise, or out of steps
        x = sol.value
        if runaway is not None:
            last, top = top, _key_norm(x, G, F)
            if top > runaway and top > last:
                break  # the keys run off: no fixed point here
    M, W, b = _unpack(sol.value, G, F)
    red = OrderParameters(M, M @ M.T + W @ W.T, b)
    terms = _residual_terms(sol.value, args)  # (n, p)
    mean = terms.mean(0)
    se = sample_mean_se(terms)[1] if terms.shape[0] > 1 else jnp.zeros_like(mean)
    if isinstance(problem.method, Exact):  # and the quadrature's error bound at the solution
        fine = _residual_terms(sol.value, (sizes, F, problem.refined())).mean(0)
        se = jnp.maximum(se, error_bound(mean, fine))
    full = expand(red, sizes)
    return FixedPoint(
        state=full,
        sizes=sizes,
        drift=mean,
        drift_se=jnp.maximum(se, problem.method.accuracy),
        risk=float(problem.risk(full).mean),
        steps=done,
        converged=converged,
    )


def _key_norm(x, G: int, F: int) -> float:
    """The largest key norm √Q_gg of a packed reduced state."""
    M, W, _ = _unpack(x, G, F)
    return float(jnp.sqrt(jnp.max(jnp.sum(M**2, 1) + jnp.sum(W**2, 1))))
