"""The η² term of the D → ∞ drift, T = E[Σ_l g_l g_lᵀ] (SPEC §5), with an honest standard error.

With the η-linear part of the drift exact (the metric gradient of R from
:mod:`headspec.core.exact`), T (H × H) is the only sampled quantity. g_hl = ∂ℓ/∂s_hl depends on
the scores alone, so T is an integral over the L score vectors s_l ∈ R^H (noise tokens N(b, Q),
the hidden one N(Mθ + b, Q), or N(Mμ + b, Q + MΣMᵀ) for a Gaussian law: θ is folded in), exactly
over a discrete law's atoms (common random numbers across atoms). For every activation
g_hl = c·a_hl (r_l − ρ_h), r_l = W_l − 1[l=0], with a the per-head normalised weights, c the
aggregation factor and ρ_h = Σ_l a_hl r_l (Bayes-softmax: ρ = Σ_l (Σ_h a_hl) r_l).

The estimator (benchmarks/bench_eta2.py measured the alternatives):

- **Randomised QMC**: s_l = m_l + C z_l with C = principal_root(Q) and z from R independently
  scrambled Sobol sequences (:meth:`ScoreSamples.rqmc`), dimensions ordered principal component
  first (all tokens' first components, then the second, …; the hidden token first). The
  standard error is the spread of the R replicate estimates (QMC errors are not visible in the
  spread of points). Plain Monte Carlo (:meth:`ScoreSamples.mc`) uses the sample spread.
- **Control variates with exact means** (regression coefficients fitted on the same points):
  ℓ (mean R), Σ_l g_l λ_lᵀ (mean R_M Mᵀ + G Q, G = R_Q + R_Qᵀ), Σ_l g_l (mean R_b), g_0 θᵀ
  (mean R_M; discrete laws), all from ∇R — which the exact drift computes anyway — and the
  **symmetric shadow**: the same integrand for H identical heads whose scores are the heads'
  mean score x_l = mean_h s_hl. Its mean is exact by a one-dimensional quadrature
  (:func:`headspec.core.shadows.symmetric_eta2`). Near a common phase (heads nearly
  identical: E1's plateau) it removes almost all the variance; at an exactly symmetric state
  the estimate is exact. And the **independent shadow**: the integrand for heads made
  independent, head h's scores from its own variance along s' = m + D V z (D = √diag Q,
  V = polar(D⁻¹C), so that s' ≈ s where Q is nearly diagonal). Its mean is exact too
  (:func:`headspec.core.shadows.independent_eta2`). Near specialised, orthogonal heads it
  removes almost all the variance, at about the cost of a second evaluation of the integrand.

Example:
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> from headspec.core.latent import Discrete
    >>> from headspec.core.attention import Softmax
    >>> law = Discrete(3.0 * jnp.eye(3), [0.5, 0.3, 0.2])
    >>> samples = ScoreSamples.rqmc(0, L=10, H=3, n=2048)
    >>> M = jnp.diag(jnp.array([3.6, 3.3, 3.0]))
    >>> Q, b = M @ M.T + 0.2 * jnp.eye(3), jnp.zeros(3)
    >>> from headspec.core.model import Model
    >>> est = eta2_term(M, Q, b, Model(Softmax(), law, L=10), samples)
    >>> T, se = np.asarray(est.mean), np.asarray(est.se)
    >>> bool(np.all(se < 0.02 * T.max())), bool(np.allclose(T, T.T))
    (True, True)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.attention import Activation
from headspec.core.exact import exact_risk
from headspec.core.latent import Gaussian
from headspec.core.linalg import principal_root, solve, svd
from headspec.core.model import Model
from headspec.core.precision import float64
from headspec.core.quadrature import Quadrature
from headspec.core.shadows import head_constants, independent_mean, symmetric_mean, token_laws

Array = jax.Array
sg = jax.lax.stop_gradient

CONTROLS = ("gradient", "symmetric", "independent")  # every control variate (the default)
#: the independent shadow's table of patterns grows like H⁵ in Python (0.2 s at H = 4, 1.5 s at
#: 8, 28 s at 16, every process); beyond this many heads the exact drift leaves it out. It pays
#: for nearly orthogonal specialised heads, which many heads on few features are not.
INDEPENDENT_MAX_H = 8
BLOCK = 256  # points per block of the scan over samples (keeps the working set in cache)


# ------------------------------------------------------------------------------ base samples
class ScoreSamples(eqx.Module):
    """Standard normals z for the L score vectors: R independent replicates of m points.

    Stored in blocks of ``BLOCK`` points, shape (R, K, L, H, c) with m = K·c; replicate r is
    z[r]. For QMC the coordinates are z[..., l, k, :] = Φ⁻¹(u_d) with Sobol dimension
    d = k·L + l (principal component k of token l; token 0 is the hidden one).
    """

    z: Array  # (R, K, L, H, c)
    iid: bool = eqx.field(static=True, default=False)  # plain MC: s.e. from the points' spread

    @property
    def n(self) -> int:
        R, K, _, _, c = self.z.shape
        return R * K * c

    @property
    def replicates(self) -> int:
        return self.z.shape[0]

    @classmethod
    @float64
    def rqmc(cls, seed: int, L: int, H: int, n: int, replicates: int = 8) -> ScoreSamples:
        """``replicates`` independently scrambled Sobol sequences (LMS + digital shift) of
        n / replicates points each (rounded up to a power of 2), mapped to normals by Φ⁻¹."""
        from scipy.special import ndtri
        from scipy.stats import qmc

        R = int(replicates)
        m = 1 << max(0, math.ceil(math.log2(max(1, -(-int(n) // R)))))
        seeds = np.random.SeedSequence(int(seed)).spawn(R)
        zs = []
        for s in seeds:
            u = qmc.Sobol(L * H, scramble=True, seed=np.random.default_rng(s)).random(m)
            z = ndtri(np.clip(u, 1e-300, 1.0 - 2**-53))  # (m, L·H), dimension d = k·L + l
            zs.append(z.reshape(m, H, L).transpose(2, 1, 0))  # (L, H, m)
        return cls(z=_blocked(np.stack(zs)), iid=False)  # (R, K, L, H, c)

    @classmethod
    @float64
    def mc(cls, key, L: int, H: int, n: int) -> ScoreSamples:
        """Plain Monte Carlo: n i.i.d. normals (rounded up to a multiple of the block size)."""
        c = min(BLOCK, int(n))
        K = -(-int(n) // c)
        z = jax.random.normal(key, (1, K, L, H, c), dtype=jnp.float64)  # (1, K, L, H, c)
        return cls(z=z, iid=True)


def _blocked(z: np.ndarray) -> Array:
    """(R, L, H, m) → (R, K, L, H, c), c = min(m, BLOCK)."""
    R, L, H, m = z.shape
    c = min(m, BLOCK)
    K = m // c
    return jnp.asarray(z.reshape(R, L, H, K, c).transpose(0, 3, 1, 2, 4))


# ------------------------------------------------------------------------- the integrand
# ------------------------------------------------------------------------- the integrand


class _Noise(NamedTuple):
    """What the noise tokens contribute to every atom's weights: their scores (H, L−1, c), the
    shift m of the exponentials, e^{s − m} and Σ_l e^{s_l − m} (per head, or joint)."""

    s: Array  # (H, L−1, c) or (L−1, c) for the shadow
    m: Array  # (H, 1, c) or (1, 1, c) / (1, c)
    e: Array  # like s
    z: Array  # like m


def _noise(s: Array, kappa: float, axes) -> _Noise:
    m = sg(jnp.max(s, axis=axes, keepdims=True))
    if kappa:
        m = jnp.maximum(m, 0.0)  # the extra logit 0
    e = jnp.exp(s - m)
    return _Noise(s, m, e, jnp.sum(e, axis=axes, keepdims=True))


def _weights(s0: Array, nz: _Noise, kappa: float, axes) -> Array:
    """Weights of all tokens given the hidden token's scores s0 (…, 1, c) and the noise part:
    the shift moves up to the hidden score where it is larger (one exponential per head)."""
    m = jnp.maximum(nz.m, sg(jnp.max(s0, axis=axes, keepdims=True)))
    f = jnp.exp(nz.m - m)
    e0 = jnp.exp(s0 - m)
    z = f * nz.z + jnp.sum(e0, axis=axes, keepdims=True)
    if kappa:
        z = z + kappa * jnp.exp(-m)
    return jnp.concatenate([e0 / z, nz.e * (f / z)], axis=-2)  # (…, L, c)


def _integrand(s0: Array, nz: _Noise, activation: Activation):
    """T's upper triangle (P, c), g (H, L, c) and r (L, c) for one atom, hidden scores s0."""
    H, _ = s0.shape
    kappa, _, _, joint = head_constants(activation, H)
    cf = activation.head_weight(H)
    a = _weights(s0[:, None], nz, kappa, (0, 1) if joint else 1)  # (H, L, c)
    r = cf * jnp.sum(a, 0)  # (L, c)
    r = r.at[0].add(-1.0)
    if joint:
        rho = jnp.sum(jnp.sum(a, 0) * r, 0)[None, None]  # (1, 1, c)
    else:
        rho = jnp.sum(a * r[None], 1, keepdims=True)  # (H, 1, c)
    g = cf * a * (r[None] - rho)  # (H, L, c)
    iu, ju = np.triu_indices(H)
    return jnp.sum(g[iu] * g[ju], 1), g, r  # (P, c), (H, L, c), (L, c)


def _per_sample(s0, nz: _Noise, sh, si, b, theta, *, activation, grad: bool, with_theta: bool):
    """Integrand and controls for one atom, hidden scores s0 (H, c): T's upper triangle (P, c)
    and the controls (q, c): if ``grad``, [ℓ, Σ g λᵀ (H²), Σ g (H), (g_0 θᵀ (H·F))]; then the
    symmetric shadow (1) and the independent shadow (P), where ``sh``/``si`` (the shadows'
    noise part, and hidden scores with noise part) are given."""
    H, c = s0.shape
    kappa, beta, gamma, _ = head_constants(activation, H)
    T, g, r = _integrand(s0, nz, activation)  # (P, c), (H, L, c), (L, c)
    ctrl = [jnp.zeros((0, c), s0.dtype)]
    if grad:
        lam = jnp.concatenate([s0[:, None], nz.s], 1) - b[:, None, None]  # (H, L, c)
        gl = jnp.sum(g[:, None] * lam[None], 2).reshape(H * H, c)  # (H², c)
        ctrl += [0.5 * jnp.sum(r**2, 0)[None], gl, jnp.sum(g, 1)]  # (1, c), (H², c), (H, c)
        if with_theta:
            ctrl.append((g[:, 0][:, None] * theta[None, :, None]).reshape(-1, c))  # (H·F, c)
    if sh is not None:
        p = _weights(jnp.mean(s0, 0)[None], sh, kappa, 0)  # (L, c) the symmetric shadow
        ctrl.append(_shadow(p, beta, gamma)[None])  # (1, c)
    if si is not None:
        ctrl.append(_integrand(si[0], si[1], activation)[0])  # (P, c) the independent shadow
    return T, jnp.concatenate(ctrl)


def _shadow(p: Array, beta: float, gamma: float) -> Array:
    """γ² Σ_l p_l² (r_l − ρ)² for identical heads with token weights p (L, c): (c,)."""
    r = (beta * p).at[0].add(-1.0)  # (L, c)
    rho = jnp.sum(p * r, 0)  # (c,)
    return gamma**2 * jnp.sum(p**2 * (r - rho) ** 2, 0)  # (c,)


# ------------------------------------------------ the independent shadow's coordinates
def _diag_root(C: Array) -> Array:
    """√diag(C) (H,), kept away from 0 (a head without variance)."""
    return jnp.sqrt(jnp.maximum(jnp.diagonal(C), 1e-30))


def _polar(A: Array) -> Array:
    """The orthogonal polar factor U Wᵀ of A = U Σ Wᵀ (one LAPACK call per matrix: linalg.svd)."""
    U, _, Wt = svd(A)
    return U @ Wt


# ------------------------------------------------------------------------------ the estimator
class RiskGradient(NamedTuple):
    """R and its gradient in (M, Q, b) (Q's entries independent), from :func:`risk_gradient`."""

    R: Array  # ()
    R_M: Array  # (H, F)
    R_Q: Array  # (H, H)
    R_b: Array  # (H,)


def _risk_gradient(M, Q, b, model: Model, quad) -> RiskGradient:
    v, (gM, gQ, gb) = jax.value_and_grad(
        lambda M, Q, b: exact_risk(M, Q, b, model, quad).mean, (0, 1, 2)
    )(M, Q, b)
    return RiskGradient(v, gM, gQ, gb)


_risk_gradient_jit = eqx.filter_jit(_risk_gradient)


@float64
def risk_gradient(M, Q, b, model: Model, quad: Quadrature = Quadrature()):
    """The exact R and ∇R at (M, Q, b) (:func:`headspec.core.exact.exact_risk`)."""
    M, Q, b = (jnp.asarray(x, jnp.float64) for x in (M, Q, b))
    return _risk_gradient_jit(M, Q, b, model, quad)


class Eta2(NamedTuple):
    """T = E[Σ_l g_l g_lᵀ] and its standard error (both (H, H), symmetric)."""

    mean: Array  # (H, H)
    se: Array  # (H, H)


def _control_means(M, Q, grad: RiskGradient | None, t_sym, t_ind, with_theta: bool):
    """Exact means of the controls of :func:`_per_sample`, in its order (q,), and the scale of
    their errors relative to ∇R's (q,): Σ g λᵀ = R_M Mᵀ + G Q carries ∇R's error times |Q|, the
    shadows' one-dimensional quadratures are ≲ 1e-11 (a tenth)."""
    H = M.shape[0]
    parts, scale = [jnp.zeros(0, M.dtype)], [jnp.zeros(0, M.dtype)]
    if grad is not None:
        G = grad.R_Q + grad.R_Q.T
        X = grad.R_M @ M.T + G @ Q  # (H, H) = E Σ_l g_l λ_lᵀ
        parts += [grad.R[None], X.ravel(), grad.R_b]
        big = 1.0 + jnp.max(jnp.abs(Q))
        scale += [jnp.ones(1), jnp.full(H * H, big), jnp.ones(H)]
        if with_theta:
            parts.append(grad.R_M.ravel())
            scale.append(jnp.ones(grad.R_M.size))
    if t_sym is not None:
        parts.append(t_sym[None])
        scale.append(jnp.full(1, 0.1))
    if t_ind is not None:
        parts.append(t_ind[np.triu_indices(H)])
        scale.append(jnp.full(H * (H + 1) // 2, 0.1))
    return jnp.concatenate(parts), jnp.concatenate(scale)  # (q,), (q,)


@eqx.filter_jit
def _eta2(M, Q, b, grad, model: Model, samples: ScoreSamples, *, controls, quad, tol):
    activation, law = model.activation, model.law
    H = M.shape[0]
    mh, Ch, thetas, wts = token_laws(M, Q, b, law)
    with_theta = not isinstance(law, Gaussian)
    Cn, C0 = principal_root(Q), principal_root(Ch)  # (H, H) ×2

    kappa, _, _, joint = head_constants(activation, H)
    axes = (0, 1) if joint else 1
    use_g, sym, ind = ("gradient" in controls, "symmetric" in controls, "independent" in controls)
    # the independent shadow: head h's scores from its own variance, s' = m + D V z with
    # V = polar(D⁻¹C) orthogonal (so s' is close to s = m + C z where Q is nearly diagonal)
    Dn, D0 = _diag_root(Q), _diag_root(Ch)  # (H,) ×2
    Vn, V0 = _polar(Cn / Dn[:, None]), _polar(C0 / D0[:, None])  # (H, H) ×2

    def block(z):  # z (L, H, c) → T (P, c), controls (q, c), atom-averaged
        x0 = C0 @ z[0]  # (H, c)
        xn = jnp.einsum("hk,lkc->hlc", Cn, z[1:]) + b[:, None, None]  # (H, L−1, c)
        nz = _noise(xn, kappa, axes)  # shared by the atoms
        sh = _noise(jnp.mean(xn, 0), kappa, 0) if sym else None  # the shadows'
        if ind:
            y0 = D0[:, None] * (V0 @ z[0])  # (H, c)
            yn = Dn[:, None, None] * jnp.einsum("hk,lkc->hlc", Vn, z[1:]) + b[:, None, None]
            ni = _noise(yn, kappa, axes)

        def atom(m, th):
            si = (y0 + m[:, None], ni) if ind else None
            s0 = x0 + m[:, None]  # (H, c)
            return _per_sample(s0, nz, sh, si, b, th, activation=activation, grad=use_g,
                               with_theta=with_theta)  # fmt: skip

        T, X = jax.vmap(atom)(mh, thetas)  # (J, P, c), (J, q, c)
        return jnp.tensordot(wts, T, 1), jnp.tensordot(wts, X, 1)  # (P, c), (q, c)

    R, K, L, _, c = samples.z.shape
    P = H * (H + 1) // 2
    T, X = jax.lax.map(block, samples.z.reshape(R * K, L, H, c))  # (RK, P, c), (RK, q, c)
    q = X.shape[1]
    T = jnp.moveaxis(T, 1, 0).reshape(P, R, K * c)  # (P, R, m)
    X = jnp.moveaxis(X, 1, 0).reshape(q, R, K * c)  # (q, R, m)
    n = R * K * c
    yr, xr = T.mean(-1).T, X.mean(-1).T  # (R, P), (R, q) replicate means
    ybar, xbar = yr.mean(0), xr.mean(0)  # (P,), (q,)
    Tc = T.reshape(P, n) - ybar[:, None]  # (P, n)
    Xc = X.reshape(q, n) - xbar[:, None]  # (q, n)
    Cxx, Cxy, Cyy = Xc @ Xc.T / n, Xc @ Tc.T / n, jnp.mean(Tc**2, -1)  # (q, q), (q, P), (P,)
    if controls:
        if use_g and grad is None:
            grad = _risk_gradient(M, Q, b, model, quad)
        grad = grad if use_g else None
        t_sym = symmetric_mean(M, Q, b, model, quad) if sym else None
        t_ind = independent_mean(M, Q, b, model, quad) if ind else None
        mu, scale = _control_means(M, Q, grad, t_sym, t_ind, with_theta)  # (q,) ×2
        tol = tol * scale  # (q,)
        # β minimises the variance of the mean, Var(y − βX)/n, plus the squared bias that the
        # exact means' errors (≤ tol_k each) can bring, Σ β_k² tol_k²: a ridge n·tol² on Cxx.
        d = jnp.sqrt(jnp.maximum(jnp.diagonal(Cxx), 0.0))  # (q,)
        live = d > 1e-12 * jnp.maximum(jnp.max(d), 1e-300)  # constant controls drop out
        ds = jnp.where(live, d, 1.0)

        def fit(Cxx, Cxy, k):  # β from covariances over k points (ridge k·tol²)
            A = Cxx / jnp.outer(ds, ds) + jnp.diag(k * tol**2 / ds**2)
            A = jnp.where(jnp.outer(live, live), A, jnp.eye(q))
            rhs = jnp.where(live[:, None], Cxy / ds[:, None], 0.0)
            return solve(A + 1e-12 * jnp.eye(q), rhs) / ds[:, None]  # (q, P)

        beta = fit(Cxx, Cxy, n)  # (q, P)
        est = yr - (xr - mu[None]) @ beta  # (R, P)
        if not samples.iid:  # cross-fitted: replicate r's β from the other replicates
            m = n // R
            X3, T3 = Xc.reshape(q, R, m), Tc.reshape(P, R, m)
            Sxx = jnp.einsum("qrm,srm->rqs", X3, X3)  # (R, q, q)
            Sxy = jnp.einsum("qrm,prm->rqp", X3, T3)  # (R, q, P)

            def beta_without(r):
                k = n - m
                return fit((Cxx * n - Sxx[r]) / k, (Cxy * n - Sxy[r]) / k, k)  # (q, P)

            betas = jax.lax.map(beta_without, jnp.arange(R))  # (R, q, P)
            spread = yr - jnp.einsum("rq,rqp->rp", xr - mu[None], betas)  # (R, P)
        var1 = Cyy - 2 * jnp.sum(beta * Cxy, 0) + jnp.sum(beta * (Cxx @ beta), 0)  # (P,)
        dof = n - 1 - jnp.sum(live)
        bias2 = jnp.sum((tol[:, None] * beta) ** 2, 0)  # (P,) the means' errors, bounded
    else:
        est, var1, dof, bias2 = yr, Cyy, n - 1, 0.0
    mean = est.mean(0)  # (P,)
    if samples.iid:
        se2 = jnp.maximum(var1, 0.0) / dof
    else:
        se2 = (spread if controls else est).var(0, ddof=1) / R
    se = jnp.sqrt(se2 + bias2)
    iu, ju = np.triu_indices(H)
    full = lambda v: jnp.zeros((H, H), v.dtype).at[iu, ju].set(v).at[ju, iu].set(v)  # noqa: E731
    return Eta2(full(mean), full(se))


def eta2_traced(
    M, Q, b, grad: RiskGradient, model: Model, samples: ScoreSamples, *, quad, mean_tol
) -> Eta2:
    """:func:`eta2_term` with every control (the independent shadow up to
    :data:`INDEPENDENT_MAX_H` heads), inside traced code (the exact drift's η² term): float64
    arrays in, ``grad`` required (the caller has it), no checks."""
    R, K, _, _, c = samples.z.shape
    controls = exact_controls(M.shape[0], M.shape[1], R * K * c)
    return _eta2(M, Q, b, grad, model, samples, controls=controls, quad=quad, tol=mean_tol)


def exact_controls(H: int, F: int, n: int) -> tuple[str, ...]:
    """The control variates the exact drift's η² estimator uses for H heads, F features and n
    score points: every one, but the independent shadow only up to :data:`INDEPENDENT_MAX_H`
    heads and the gradient control (1 + H² + H + H·F numbers) only while it has ≥ 2 points per
    number (beyond, its fit is noise: H ≥ 23 at n = 1024).

    >>> exact_controls(4, 2, 1024), exact_controls(16, 2, 1024), exact_controls(32, 2, 1024)
    (('gradient', 'symmetric', 'independent'), ('gradient', 'symmetric'), ('symmetric',))
    """
    out = ["symmetric"]
    if 2 * (1 + H * H + H + H * F) <= n:
        out.append("gradient")
    if H <= INDEPENDENT_MAX_H:
        out.append("independent")
    return tuple(x for x in CONTROLS if x in out)


@float64
def eta2_term(
    M: Array,
    Q: Array,
    b: Array,
    model: Model,
    samples: ScoreSamples,
    *,
    grad: RiskGradient | None = None,
    controls: tuple[str, ...] = CONTROLS,
    quad: Quadrature = Quadrature(),
    mean_tol: float = 1e-8,
) -> Eta2:
    """T = E[Σ_l g_l g_lᵀ] (H, H) at (M, Q, b) and its standard error.

    ``samples``: :class:`ScoreSamples` for the ``model``'s L tokens and H heads (RQMC replicates
    or plain MC).
    ``controls``: which control variates to use (``()``: none): "gradient" — ℓ, Σ g λᵀ, Σ g,
    g_0 θᵀ, whose means need R and ∇R: pass ``grad`` from :func:`risk_gradient` when the caller
    has it (the exact drift does), else it is computed here (one exact value-and-gradient, the
    dominant cost); "symmetric" — the shadow of equal heads (a common phase); "independent" —
    the shadow of independent heads (specialised, nearly orthogonal heads; it costs about one
    more evaluation of the integrand).
    ``mean_tol`` bounds the error of ∇R (quadrature, ≲ 1e-8; the controls' means carry it
    scaled, see :func:`_control_means`): the coefficients are shrunk accordingly and the bias
    those errors can cause is included in ``se``. With RQMC samples ``se`` is the spread of the
    replicates' estimates, each taken with the control coefficients fitted on the *other*
    replicates (cross-fitted; the mean keeps the coefficients from all of them): with many
    controls per sample (≈ 1.5 H² controls; at H = 16 and n = 1024, 2.3 samples each) the
    in-sample fit absorbs each replicate's noise and its spread understated the error 2.5×.

    Exact over a discrete law's atoms; a Gaussian law is folded into the hidden token. Q may be
    singular. Jitted: one compilation per shapes, activation, law family and options; (M, Q, b)
    and ``mean_tol`` are traced.
    """
    M, Q, b = (jnp.asarray(x, jnp.float64) for x in (M, Q, b))
    Ls, Hs = samples.z.shape[2:4]
    if Hs != M.shape[0]:
        raise ValueError(f"samples are for H = {Hs} heads, M has {M.shape[0]}")
    if Ls != model.L:
        raise ValueError(f"samples are for L = {Ls} tokens, the model has L = {model.L}")
    if grad is not None:
        grad = RiskGradient(*(jnp.asarray(x, jnp.float64) for x in grad))
    tol = jnp.asarray(mean_tol, jnp.float64)
    if isinstance(controls, str) or set(controls) - set(CONTROLS):
        raise ValueError(f"controls: a tuple of {CONTROLS}, got {controls!r}")
    controls = tuple(c for c in CONTROLS if c in controls)  # canonical order: one compilation
    return _eta2(M, Q, b, grad, model, samples, controls=controls, quad=quad, tol=tol)
