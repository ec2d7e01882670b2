"""The drift's Jacobian where heads coincide: Price's theorem instead of a square root's derivative.

The drift of SPEC §5 is an average over Gaussian token projections λ_l = M ν_l + ζ_l with
ζ_l ~ N(0, C), C = Q − MMᵀ. :func:`headspec.dynamics.ode.drift_and_jacobian` differentiates the
common-random-number estimator through ζ = C^{1/2} ξ, whose derivative is infinite where C is
singular — exactly at the states saddle-to-saddle theory is about: identical heads (the common
phase), keys inside span(K*) (one softmax head at its optimum, the constructed Bayes-softmax
optimum). The exact drift is smooth there, and Price's theorem gives its derivative in C without
a square root:

    ∂/∂C E f(ζ) = ½ E ∇²f(ζ),   ζ ~ N(0, C)   (any C ⪰ 0),

so with ψ the per-sample integrand of the drift as a function of λ (H, L), ν and b, and
T = Σ_l E[∂²ψ/∂λ_il ∂λ_jl] (second derivatives within one token, summed over tokens):

    ∂F/∂M_hf = E[Σ_l ∂ψ/∂λ_hl ν_lf] − Σ_j T_hj M_jf     (mean shift, and C = Q − MMᵀ)
    ∂F/∂Q_ij = ½ T_ij                                    (Q_ij and Q_ji as separate coordinates)
    ∂F/∂b_h  = E[∂ψ/∂b_h]

All terms are averages over the same base samples (exact over a discrete law's atoms) and
``jax`` derivatives of the per-sample loss; their Monte-Carlo standard errors are returned too.
Both Jacobians estimate the same matrix where C is non-singular (tests compare them).

Example:
    >>> import jax, jax.numpy as jnp
    >>> from headspec.core.latent import Spike
    >>> from headspec.core.attention import Softmax
    >>> from headspec.core.observables import BaseSamples
    >>> from headspec.dynamics.problem import DriftProblem, OrderParameters
    >>> law = Spike([2.0])
    >>> base = BaseSamples.sobol(0, law, L=10, H=1, n=4096)
    >>> at_optimum = OrderParameters(M=jnp.array([[2.0]]), Q=jnp.array([[4.0]]), b=jnp.zeros(1))
    >>> problem = DriftProblem.sampled(Softmax(), law, base, eta2=False)
    >>> jac = drift_jacobian(problem, at_optimum)                          # C = 0: singular
    >>> bool(jnp.all(jnp.isfinite(jac.J))), jac.J.shape
    (True, (3, 3))
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.accuracy import FLOOR, SAFETY
from headspec.core.linalg import jacobian_in_batches, psd_root
from headspec.core.observables import sample_loss, token_projections
from headspec.core.precision import float64
from headspec.core.stats import sample_mean_se
from headspec.dynamics.problem import (
    DriftProblem,
    Exact,
    OrderParameters,
    SampleTerms,
    flatten,
    increment,
    unflatten,
)

Array = jax.Array


class Jacobian(NamedTuple):
    """The drift F and ∂F/∂(M, Q, b) on the flat vector of :func:`headspec.dynamics.ode.flatten`
    (M row-major, then all H² entries of Q, then b), with Monte-Carlo standard errors."""

    F: Array  # (P,) drift, P = H·F + H² + H
    J: Array  # (P, P)
    F_se: Array  # (P,)
    J_se: Array  # (P, P)
    J_samples: Array | None = None  # (n, P, P) per-sample terms (``keep_samples=True``)
    accuracy: float = 0.0  # absolute accuracy of J's entries beyond J_se (the exact method's)
    #: (P, P) the exact part's J on the refined rule minus on the method's (None: sampled); its
    #: effect on each eigenvalue is that eigenvalue's error bound (:func:`modes`)
    J_diff: Array | None = None


def drift_integrand(lam, nu, b, problem: DriftProblem, *, linear: bool = True):
    """Per-sample drift ψ (P,) from λ (H, L), ν (L, F) and b (H,): the integrand of SPEC §5's
    dM, dQ, db (flat as :func:`headspec.dynamics.problem.flatten`) of ``problem``'s activation,
    learning rates and η² switch, with g = ∂ℓ/∂s by ``jax.grad``; ``linear=False`` keeps only
    the η² term η² Σ_l g_l g_lᵀ (what the exact method samples)."""
    lr, lr_b = problem.lr, problem.lr_b
    g = jax.grad(sample_loss)(lam + b[:, None], problem.activation)  # (H, L) = ∂ℓ/∂s
    if not linear:
        H, F = g.shape[0], nu.shape[1]
        zero = jnp.zeros
        return flatten(OrderParameters(zero((H, F), g.dtype), lr**2 * (g @ g.T), zero(H, g.dtype)))
    terms = SampleTerms(jnp.zeros((), g.dtype), g @ nu, g @ lam.T, g @ g.T, g.sum(-1))
    return flatten(increment(terms, lr, lr_b, problem.eta2))


def _sample_terms(lam, nu, b, problem: DriftProblem, linear: bool):
    """For one sample: ψ (P,), G = Σ_l ∂ψ/∂λ_l ν_lᵀ (P, H, F), T = Σ_l ∂²ψ/∂λ_l² (P, H, H) and
    ∂ψ/∂b (P, H)."""

    def psi(lam, b):
        return drift_integrand(lam, nu, b, problem, linear=linear)

    value = psi(lam, b)
    J_lam, J_b = jax.jacfwd(psi, argnums=(0, 1))(lam, b)  # (P, H, L), (P, H)
    G = jnp.einsum("phl,lf->phf", J_lam, nu)  # (P, H, F)

    def token_hessian(l):  # ∂²ψ/∂λ_l² for token l only: (P, H, H)
        return jax.jacfwd(jax.jacfwd(lambda x: psi(lam.at[:, l].set(x), b)))(lam[:, l])

    T = jax.vmap(token_hessian)(jnp.arange(lam.shape[1])).sum(0)  # (P, H, H)
    return value, G, T, J_b


@eqx.filter_jit
def _exact_part(problem: DriftProblem, x, H: int, F: int):
    """The exact method's η-linear drift (flat) and its Jacobian by forward mode, in batches of
    directions (:func:`~headspec.core.linalg.jacobian_in_batches`: memory bounded at any H)."""

    def f(x):
        st = unflatten(x, H, F)
        return flatten(problem.method.linear(problem, st, problem.lr, problem.lr_b)[1])

    return jacobian_in_batches(f, x)


#: memory of one chunk of per-sample η² Jacobians in :func:`drift_jacobian` (bytes)
CHUNK_MEMORY = 2**30


def sample_bytes(H: int, F: int, L: int) -> int:
    """Memory of one sample's intermediates in :func:`drift_jacobian`: ≈ 20·L·P² numbers,
    P = HF + H² + H (measured 2026-12-06 from the peak memory at two chunk sizes, L = 10:
    1.16 MB per sample at H = 4 and 12.1 MB at H = 8, 1.5 and 1.6 kB × P²)."""
    P = H * F + H * H + H
    return 20 * L * P * P * 8


def auto_chunk(H: int, F: int, L: int, budget: int = CHUNK_MEMORY) -> int:
    """Samples per chunk of :func:`drift_jacobian`: a power of two ≤ 1024 whose intermediates
    (:func:`sample_bytes`) fit ``budget`` (1 GiB: 1024 at H ≤ 3, 64 at H = 8, 4 at H = 16)."""
    fit = max(1, budget // sample_bytes(H, F, L))
    return int(min(1024, 2 ** int(np.log2(fit))))


@float64
def drift_jacobian(
    problem: DriftProblem,
    state: OrderParameters,
    chunk: int | None = None,
    keep_samples: bool = False,
) -> Jacobian:
    """The drift and its Jacobian, finite at singular Q − MMᵀ (see module).

    Sampled method: Price's theorem over the base samples. Exact method: forward mode through
    the η-linear drift built from the exact risk, plus the η² term by Price's theorem over the
    base samples (the only part with a standard error). Without the η² term
    (``problem.linear()``, the gradient-flow limit) the exact Jacobian has no sampling error at
    all. Samples are processed ``chunk`` at a time (default :func:`auto_chunk`: their
    intermediates within :data:`CHUNK_MEMORY`; until 2026-12-06 a fixed 1024, 13.7 GB at H = 8),
    each chunk's Jacobians formed at once, so what stays is the per-sample Jacobians (n, P, P)
    for the mean and its standard error. ``keep_samples`` keeps them in the result, from which
    :func:`modes` gives each eigenvalue its standard error.
    """
    M, Q, b = (jnp.asarray(x, jnp.float64) for x in state)
    H, F = M.shape
    chunk = auto_chunk(H, F, problem.L) if chunk is None else int(chunk)
    exact = isinstance(problem.method, Exact)
    x = flatten(OrderParameters(M, Q, b))
    if exact and not problem.eta2:
        value, J = _exact_part(problem, x, H, F)
        zeros = jnp.zeros_like
        samples = J[None] if keep_samples else None
        acc = problem.method.jacobian_accuracy
        diff = _exact_part(problem.refined(), x, H, F)[1] - J
        return Jacobian(value, J, zeros(value), zeros(J), samples, acc, diff)
    base = problem.base
    S = psd_root(Q - M @ M.T)  # (H, H): only to draw λ; never differentiated

    def per_sample(theta):  # θ (n, F) → per-sample drift (n, P) and Jacobian (n, P, P)
        nu, lam = token_projections(M, S, theta, base)  # (n, L, F), (n, H, L)
        n = nu.shape[0]
        parts = [
            _chunk_jacobians(lam[i : i + chunk], nu[i : i + chunk], b, M, problem, not exact)
            for i in range(0, n, chunk)
        ]
        return jax.tree.map(lambda *x: jnp.concatenate(x), *parts)

    value, J = problem.law.expect(per_sample, base.theta)  # (n, P), (n, P, P)
    diff = None
    if exact:  # add the exact η-linear part to every sample's η² part
        lin, J_lin = _exact_part(problem, x, H, F)
        value, J = value + lin, J + J_lin
        diff = _exact_part(problem.refined(), x, H, F)[1] - J_lin
    F_mean, F_se = sample_mean_se(value)
    J_mean, J_se = sample_mean_se(J)
    acc = problem.method.jacobian_accuracy
    return Jacobian(F_mean, J_mean, F_se, J_se, J if keep_samples else None, acc, diff)


@eqx.filter_jit
def _chunk_jacobians(lam, nu, b, M, problem: DriftProblem, linear: bool):
    """Per-sample drift (c, P) and Jacobian (c, P, P) of a chunk of samples (Price's theorem:
    :func:`_sample_terms`), compiled once per shape and setting."""
    H, F = M.shape
    P = H * F + H * H + H
    value, G, T, Jb = jax.vmap(lambda la, nu_: _sample_terms(la, nu_, b, problem, linear))(
        lam, nu
    )  # (c, P), (c, P, H, F), (c, P, H, H), (c, P, H)
    J_M = G - jnp.einsum("nphj,jf->nphf", T, M)  # (c, P, H, F)
    J = jnp.concatenate(
        [J_M.reshape(-1, P, H * F), 0.5 * T.reshape(-1, P, H * H), Jb], axis=2
    )  # (c, P, P)
    return value, J


def symmetric_coordinates(H: int, F: int) -> tuple[np.ndarray, np.ndarray]:
    """(E, R): E (P, p) embeds the independent coordinates u = (M, upper triangle of Q, b) into
    the flat vector (Q_ij = Q_ji), R (p, P) reads them back; R J E is the Jacobian of the flow
    on symmetric Q (no spurious modes from antisymmetric parts of Q)."""
    P = H * F + H * H + H
    iu = np.triu_indices(H)
    p = H * F + len(iu[0]) + H
    E = np.zeros((P, p))
    R = np.zeros((p, P))
    for k in range(H * F):
        E[k, k] = R[k, k] = 1.0
    for k, (i, j) in enumerate(zip(*iu, strict=True)):
        E[H * F + i * H + j, H * F + k] = E[H * F + j * H + i, H * F + k] = 1.0
        R[H * F + k, H * F + i * H + j] = 1.0
    for k in range(H):
        E[H * F + H * H + k, H * F + len(iu[0]) + k] = 1.0
        R[H * F + len(iu[0]) + k, H * F + H * H + k] = 1.0
    return E, R


class Mode(NamedTuple):
    """One eigenmode of the Jacobian on symmetric coordinates."""

    eigenvalue: complex
    vector: np.ndarray  # (P,) on the flat (M, Q, b) vector, unit norm
    common: float  # fraction of |vector|² in the head-permutation-symmetric subspace
    feature_weights: np.ndarray  # (F,) share of the M-part of the vector on each feature
    zero: bool  # an exact zero mode (|eigenvalue| ≤ 1e-9·|J|): a symmetry, e.g. softmax's biases
    #: the real part's uncertainty: its standard error (delta method; NaN without samples) and
    #: its quadrature error bound ``err`` combined in quadrature
    se: float
    err: float = 0.0  # the real part's quadrature error bound (exact method; 0: sampled)


def _common_part(v: np.ndarray, H: int, F: int) -> np.ndarray:
    """The head-permutation average of a flat (M, Q, b) vector: every head alike."""
    M = v[: H * F].reshape(H, F)
    Q = v[H * F : H * F + H * H].reshape(H, H)
    b = v[H * F + H * H :]
    off = ~np.eye(H, dtype=bool)
    Qc = np.full((H, H), Q[off].mean() if H > 1 else 0.0)
    np.fill_diagonal(Qc, np.diag(Q).mean())
    return np.concatenate([np.tile(M.mean(0), H), Qc.ravel(), np.full(H, b.mean())])


def modes(jac: Jacobian, H: int, F: int) -> list[Mode]:
    """Eigenmodes of the Jacobian on symmetric coordinates, largest real part first, each
    described by its share in the common (all heads alike) subspace — the rest is made of
    head-difference directions — and by the features its M-part moves. Exact zero modes come
    from symmetries of the drift (a softmax head's bias has no effect; a common shift of all
    Bayes-softmax biases changes nothing): they are flagged ``zero``, not counted as unstable."""
    from scipy.linalg import eig

    E, R = symmetric_coordinates(H, F)
    Js = R @ np.asarray(jac.J) @ E
    if not np.all(np.isfinite(Js)):
        raise ValueError(
            "the Jacobian of the drift is not finite at this state (overflowing keys or a "
            "diverged run); fix: analyse a state with moderate overlaps (a run that converged, "
            "e.g. at a lower train.lr)"
        )
    w, U, V = eig(Js, left=True, right=True)  # U: left eigenvectors (uᴴ Js = λ uᴴ)
    # an exact symmetry's eigenvalue is zero to round-off, or to the method's accuracy
    tiny = max(1e-9 * max(1.0, float(np.linalg.norm(Js))), 3 * jac.accuracy)
    samples = None if jac.J_samples is None else np.asarray(jac.J_samples)
    diff = None if jac.J_diff is None else R @ np.asarray(jac.J_diff) @ E
    out = []
    for k in np.argsort(-w.real):
        v = E @ np.real_if_close(V[:, k])
        v = np.real(v) if np.iscomplexobj(v) else v
        v = v / max(np.linalg.norm(v), 1e-300)
        c = _common_part(v, H, F)
        m = v[: H * F].reshape(H, F)
        fw = (m**2).sum(0)
        se, err = float("nan"), 0.0
        u, vk = U[:, k], V[:, k]
        if diff is not None:  # first order: δλ = uᴴ δJ v / (uᴴ v) for δJ = J(refined) − J
            dlam = (u.conj() @ diff @ vk) / (u.conj() @ vk)
            err = SAFETY * abs(float(np.real(dlam))) + FLOOR * max(1.0, abs(w[k]))
        if samples is not None:  # δλ per sample, then its standard error
            per = np.einsum("i,nij,j->n", u.conj(), R @ samples @ E, vk) / (u.conj() @ vk)
            se = float(np.std(per.real, ddof=1) / np.sqrt(per.size)) if per.size > 1 else 0.0
            # and the quadrature's error: measured where there is a refined rule, else the
            # method's stated accuracy
            se = float(np.hypot(se, err if diff is not None else jac.accuracy))
        out.append(
            Mode(
                eigenvalue=complex(w[k]),
                vector=v,
                common=float(c @ c),
                feature_weights=fw / fw.sum() if fw.sum() > 0 else fw,
                zero=bool(abs(w[k]) <= tiny),
                se=se,
                err=err,
            )
        )
    return out
