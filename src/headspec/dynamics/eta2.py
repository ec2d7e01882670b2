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
  (:func:`symmetric_eta2`: with identical heads T is t·11ᵀ and t a combination of
  E[p_0^j Π S_k], S_k = Σ_l p_l^k, each a w-integral of per-token moments as in
  :mod:`headspec.core.exact`). Near a common phase (heads nearly identical: E1's plateau) it
  removes almost all the variance; at an exactly symmetric state the estimate is exact.

Example:
    >>> import jax.numpy as jnp
    >>> from headspec.core.latent import Discrete
    >>> from headspec.core.attention import Softmax
    >>> law = Discrete(3.0 * jnp.eye(3), [0.5, 0.3, 0.2])
    >>> samples = ScoreSamples.rqmc(0, L=10, H=3, n=2048)
    >>> M = jnp.diag(jnp.array([3.6, 3.3, 3.0]))
    >>> Q, b = M @ M.T + 0.2 * jnp.eye(3), jnp.zeros(3)
    >>> est = eta2_term(M, Q, b, Softmax(), law, samples)
    >>> bool(jnp.all(est.se < 0.02 * est.mean.max())), bool(jnp.allclose(est.mean, est.mean.T))
    (True, True)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.attention import Activation, BayesSoftmax, Softmax, Softmax1
from headspec.core.exact import Quadrature, _moments1, _w_grid, exact_risk
from headspec.core.latent import Gaussian, LatentLaw
from headspec.core.linalg import principal_root
from headspec.core.precision import float64

Array = jax.Array
sg = jax.lax.stop_gradient

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
def _constants(activation: Activation, H: int):
    """(κ, β, γ, joint): per-head normaliser κ + Σ e^s; for identical heads W = β p and
    g = γ p (r − ρ); ``joint`` for Bayes-softmax's one normaliser over heads and tokens."""
    c = 1.0 / H if activation.aggregation == "mean" else 1.0
    if isinstance(activation, BayesSoftmax):
        return 0.0, c, c / H, True
    if isinstance(activation, Softmax1):
        return 1.0, c * H, c, False
    if isinstance(activation, Softmax):
        return 0.0, c * H, c, False
    raise TypeError(f"no η² estimator for activation {type(activation).__name__}")


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


def _per_sample(s0: Array, nz: _Noise, sh: _Noise, b, theta, activation, with_theta: bool):
    """Integrand and controls for one atom, hidden scores s0 (H, c): T's upper triangle (P, c)
    and the controls (q, c) [ℓ, Σ g λᵀ (H²), Σ g (H), (g_0 θᵀ (H·F)), shadow]."""
    H, c = s0.shape
    kappa, beta, gamma, joint = _constants(activation, H)
    cf = 1.0 / H if activation.aggregation == "mean" else 1.0
    a = _weights(s0[:, None], nz, kappa, (0, 1) if joint else 1)  # (H, L, c)
    r = cf * jnp.sum(a, 0)  # (L, c)
    r = r.at[0].add(-1.0)
    if joint:
        rho = jnp.sum(jnp.sum(a, 0) * r, 0)[None, None]  # (1, 1, c)
    else:
        rho = jnp.sum(a * r[None], 1, keepdims=True)  # (H, 1, c)
    g = cf * a * (r[None] - rho)  # (H, L, c)
    iu, ju = np.triu_indices(H)
    T = jnp.sum(g[iu] * g[ju], 1)  # (P, c)
    lam = jnp.concatenate([s0[:, None], nz.s], 1) - b[:, None, None]  # (H, L, c)
    gl = jnp.sum(g[:, None] * lam[None], 2).reshape(H * H, c)  # (H², c)
    ctrl = [0.5 * jnp.sum(r**2, 0)[None], gl, jnp.sum(g, 1)]  # (1, c), (H², c), (H, c)
    if with_theta:
        ctrl.append((g[:, 0][:, None] * theta[None, :, None]).reshape(-1, c))  # (H·F, c)
    p = _weights(jnp.mean(s0, 0)[None], sh, kappa, 0)  # (L, c) the shadow's weights
    ctrl.append(_shadow(p, beta, gamma)[None])  # (1, c)
    return T, jnp.concatenate(ctrl)


def _shadow(p: Array, beta: float, gamma: float) -> Array:
    """γ² Σ_l p_l² (r_l − ρ)² for identical heads with token weights p (L, c): (c,)."""
    r = (beta * p).at[0].add(-1.0)  # (L, c)
    rho = jnp.sum(p * r, 0)  # (c,)
    return gamma**2 * jnp.sum(p**2 * (r - rho) ** 2, 0)  # (c,)


def _token_laws(M: Array, Q: Array, b: Array, law: LatentLaw):
    """Hidden-token means (J, H), its covariance (H, H), θ per atom (J, F), weights (J,)."""
    if isinstance(law, Gaussian):
        return (M @ law.mu + b)[None], Q + M @ law.sigma @ M.T, law.mu[None], jnp.ones(1)
    atoms = law.atoms.astype(M.dtype)  # (J, F)
    return atoms @ M.T + b[None], Q, atoms, law.probs.astype(M.dtype)


# -------------------------------------------------------- the exact T of identical heads
def _partitions(items: list[int]):
    """Set partitions of a list (as lists of blocks of items)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [[first], *part]
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1 :]]


def _falling(x: int, k: int) -> int:
    return math.prod(range(x - k + 1, x + 1)) if k > 0 else 1


def _monomials(beta: float):
    """γ⁻² Σ_l p_l² (r_l − ρ)² = Σ coef · p_0^j Π_i S_{k_i}: (coef, j, ks)."""
    return (
        (beta**2, 0, (4,)), (-2 * beta**2, 0, (2, 3)), (2 * beta, 1, (3,)),
        (beta**2, 0, (2, 2, 2)), (-2 * beta, 1, (2, 2)), (1.0, 2, (2,)),
        (-2 * beta - 2.0, 3, ()), (2 * beta, 2, (2,)), (1.0, 2, ()),
    )  # fmt: skip


A_MAX = 7  # token moments e_a for a < A_MAX (total power ≤ 6)


def _symmetric_eta2(M, Q, b, activation: Activation, law: LatentLaw, L: int, quad) -> Array:
    H = M.shape[0]
    kappa, beta, gamma, _ = _constants(activation, H)
    hm, Ch, _, wts = _token_laws(M, Q, b, law)
    one = jnp.ones(H, M.dtype) / H
    mh, vh = hm @ one, jnp.full(hm.shape[0], one @ Ch @ one)  # (K,) ×2: the shadow's laws
    mn, vn = jnp.mean(b), one @ Q @ one
    K = mh.shape[0]
    w, _, _ = _w_grid(jnp.concatenate([mn[None], mh]), jnp.concatenate([vn[None], vh]),
                      mn, vn, L, kappa, quad)  # fmt: skip
    h = w[1] - w[0]
    base = jnp.full(w.shape, h).at[-1].set(0.5 * h)
    kap = jnp.exp(-kappa * jnp.exp(w))  # (n_w,)
    e = _moments1(
        jnp.concatenate([mn[None], mh]), jnp.concatenate([vn[None], vh]),
        jnp.broadcast_to(w, (1 + K, w.shape[0])), A_MAX, quad.n_s, quad.window,
    )  # fmt: skip
    en, eh = e[0], e[1:]  # (A, n_w), (K, A, n_w)

    def moment(j: int, powers: list[int]) -> Array:
        """E[p_0^j Σ_{distinct l_1..l_m} Π_i p_{l_i}^{P_i}] per atom (K,)."""
        m, tot = len(powers), j + sum(powers)
        wt = base.at[0].set(0.5 * h / jnp.tanh(0.5 * tot * h)) * kap / math.gamma(tot)
        out = jnp.zeros(K, mh.dtype)
        if L - 1 >= m:  # no l_i is the hidden token
            f = eh[:, j] * math.prod((en[P] for P in powers), start=1.0)
            f = f * en[0] ** (L - 1 - m)
            out = out + _falling(L - 1, m) * jnp.sum(wt * f, -1)
        for i in range(m):  # l_i is the hidden token
            f = eh[:, j + powers[i]] * math.prod(
                (en[P] for k, P in enumerate(powers) if k != i), start=1.0
            )
            f = f * en[0] ** (L - m)
            out = out + _falling(L - 1, m - 1) * jnp.sum(wt * f, -1)
        return out

    t = jnp.zeros(K, mh.dtype)
    for coef, j, ks in _monomials(beta):
        for part in _partitions(list(range(len(ks)))):
            t = t + coef * moment(j, [sum(ks[i] for i in block) for block in part])
    return gamma**2 * (wts @ t)


@float64
def symmetric_eta2(
    M: Array, Q: Array, b: Array, activation: Activation, law: LatentLaw, L: int,
    quad: Quadrature = Quadrature(),
) -> Array:  # fmt: skip
    """E of the symmetric shadow: T (a scalar t, T = t·11ᵀ) for H identical heads whose scores
    are the mean head's, x_l = mean_h s_hl (noise N(b̄, 1ᵀQ1/H²), hidden N(mean_h(Mθ + b),
    1ᵀC1/H²), C the hidden covariance). Exactly T itself when the heads are identical."""
    M, Q, b = (jnp.asarray(x, jnp.float64) for x in (M, Q, b))
    return _symmetric_jit(M, Q, b, activation, law, int(L), quad)


_symmetric_jit = eqx.filter_jit(_symmetric_eta2)


# ------------------------------------------------------------------------------ the estimator
class RiskGradient(NamedTuple):
    """R and its gradient in (M, Q, b) (Q's entries independent), from :func:`risk_gradient`."""

    R: Array  # ()
    R_M: Array  # (H, F)
    R_Q: Array  # (H, H)
    R_b: Array  # (H,)


def _risk_gradient(M, Q, b, activation, law, L: int, quad) -> RiskGradient:
    v, (gM, gQ, gb) = jax.value_and_grad(
        lambda M, Q, b: exact_risk(M, Q, b, activation, law, L, quad).mean, (0, 1, 2)
    )(M, Q, b)
    return RiskGradient(v, gM, gQ, gb)


_risk_gradient_jit = eqx.filter_jit(_risk_gradient)


@float64
def risk_gradient(M, Q, b, activation, law, L: int, quad: Quadrature = Quadrature()):
    """The exact R and ∇R at (M, Q, b) (:func:`headspec.core.exact.exact_risk`)."""
    M, Q, b = (jnp.asarray(x, jnp.float64) for x in (M, Q, b))
    return _risk_gradient_jit(M, Q, b, activation, law, int(L), quad)


class Eta2(NamedTuple):
    """T = E[Σ_l g_l g_lᵀ] and its standard error (both (H, H), symmetric)."""

    mean: Array  # (H, H)
    se: Array  # (H, H)


def _control_means(M, Q, grad: RiskGradient, t_sym, with_theta: bool) -> Array:
    """Exact means of the controls of :func:`_per_sample`, in its order (q,)."""
    G = grad.R_Q + grad.R_Q.T
    X = grad.R_M @ M.T + G @ Q  # (H, H) = E Σ_l g_l λ_lᵀ
    parts = [grad.R[None], X.ravel(), grad.R_b]
    if with_theta:
        parts.append(grad.R_M.ravel())
    if t_sym is not None:
        parts.append(t_sym[None])
    return jnp.concatenate(parts)  # (q,)


@eqx.filter_jit
def _eta2(M, Q, b, grad, activation, law, samples: ScoreSamples, controls, shadow, quad, tol):
    H = M.shape[0]
    mh, Ch, thetas, wts = _token_laws(M, Q, b, law)
    with_theta = not isinstance(law, Gaussian)
    Cn, C0 = principal_root(Q), principal_root(Ch)  # (H, H) ×2

    kappa, _, _, joint = _constants(activation, H)

    def block(z):  # z (L, H, c) → T (P, c), controls (q, c), atom-averaged
        x0 = C0 @ z[0]  # (H, c)
        xn = jnp.einsum("hk,lkc->hlc", Cn, z[1:]) + b[:, None, None]  # (H, L−1, c)
        nz = _noise(xn, kappa, (0, 1) if joint else 1)  # shared by the atoms
        sh = _noise(jnp.mean(xn, 0), kappa, 0)  # the shadow's

        def atom(m, th):
            return _per_sample(x0 + m[:, None], nz, sh, b, th, activation, with_theta)

        T, X = jax.vmap(atom)(mh, thetas)  # (J, P, c), (J, q, c)
        return jnp.tensordot(wts, T, 1), jnp.tensordot(wts, X, 1)  # (P, c), (q, c)

    R, K, L, _, c = samples.z.shape
    P = H * (H + 1) // 2
    T, X = jax.lax.map(block, samples.z.reshape(R * K, L, H, c))  # (RK, P, c), (RK, q, c)
    q = X.shape[1]
    T = jnp.moveaxis(T, 1, 0).reshape(P, R, K * c)  # (P, R, m)
    X = jnp.moveaxis(X, 1, 0).reshape(q, R, K * c)  # (q, R, m)
    if not shadow:
        X, q = X[:-1], q - 1
    n = R * K * c
    yr, xr = T.mean(-1).T, X.mean(-1).T  # (R, P), (R, q) replicate means
    ybar, xbar = yr.mean(0), xr.mean(0)  # (P,), (q,)
    Tc = T.reshape(P, n) - ybar[:, None]  # (P, n)
    Xc = X.reshape(q, n) - xbar[:, None]  # (q, n)
    Cxx, Cxy, Cyy = Xc @ Xc.T / n, Xc @ Tc.T / n, jnp.mean(Tc**2, -1)  # (q, q), (q, P), (P,)
    if controls:
        if grad is None:
            grad = _risk_gradient(M, Q, b, activation, law, L, quad)
        t_sym = _symmetric_eta2(M, Q, b, activation, law, L, quad) if shadow else None
        mu = _control_means(M, Q, grad, t_sym, with_theta)  # (q,)
        # β minimises the variance of the mean, Var(y − βX)/n, plus the squared bias that the
        # exact means' error (≤ tol each) can bring, Σ β_k² tol²: a ridge n·tol² on Cxx.
        d = jnp.sqrt(jnp.maximum(jnp.diagonal(Cxx), 0.0))  # (q,)
        live = d > 1e-12 * jnp.maximum(jnp.max(d), 1e-300)  # constant controls drop out
        ds = jnp.where(live, d, 1.0)
        A = Cxx / jnp.outer(ds, ds) + jnp.diag(n * tol**2 / ds**2)
        A = jnp.where(jnp.outer(live, live), A, jnp.eye(q))
        rhs = jnp.where(live[:, None], Cxy / ds[:, None], 0.0)
        beta = jnp.linalg.solve(A + 1e-12 * jnp.eye(q), rhs) / ds[:, None]  # (q, P)
        est = yr - (xr - mu[None]) @ beta  # (R, P)
        var1 = Cyy - 2 * jnp.sum(beta * Cxy, 0) + jnp.sum(beta * (Cxx @ beta), 0)  # (P,)
        dof = n - 1 - jnp.sum(live)
        bias2 = tol**2 * jnp.sum(beta**2, 0)  # (P,) the means' error, bounded
    else:
        est, var1, dof, bias2 = yr, Cyy, n - 1, 0.0
    mean = est.mean(0)  # (P,)
    if samples.iid:
        se2 = jnp.maximum(var1, 0.0) / dof
    else:
        se2 = est.var(0, ddof=1) / R
    se = jnp.sqrt(se2 + bias2)
    iu, ju = np.triu_indices(H)
    full = lambda v: jnp.zeros((H, H), v.dtype).at[iu, ju].set(v).at[ju, iu].set(v)  # noqa: E731
    return Eta2(full(mean), full(se))


@float64
def eta2_term(
    M: Array,
    Q: Array,
    b: Array,
    activation: Activation,
    law: LatentLaw,
    samples: ScoreSamples,
    grad: RiskGradient | None = None,
    controls: bool = True,
    shadow: bool = True,
    quad: Quadrature = Quadrature(),
    mean_tol: float = 1e-8,
) -> Eta2:
    """T = E[Σ_l g_l g_lᵀ] (H, H) at (M, Q, b) and its standard error.

    ``samples``: :class:`ScoreSamples` for L tokens and H heads (RQMC replicates or plain MC).
    ``controls``: use the control variates. Their means need R and ∇R: pass ``grad`` from
    :func:`risk_gradient` when the caller has it (the exact drift does), else it is computed
    here (one exact value-and-gradient, the dominant cost). ``shadow=False`` leaves out the
    symmetric shadow (for comparisons). ``mean_tol`` bounds the error of
    the exact means (quadrature, ≲ 1e-8); the coefficients are shrunk accordingly and the bias
    it can cause is included in ``se``. Exact over a discrete law's atoms; a Gaussian law is
    folded into the hidden token. Q may be singular. Jitted: one compilation per shapes,
    activation, law family and options; (M, Q, b) and ``mean_tol`` are traced.
    """
    M, Q, b = (jnp.asarray(x, jnp.float64) for x in (M, Q, b))
    Hs = samples.z.shape[3]
    if Hs != M.shape[0]:
        raise ValueError(f"samples are for H = {Hs} heads, M has {M.shape[0]}")
    if grad is not None:
        grad = RiskGradient(*(jnp.asarray(x, jnp.float64) for x in grad))
    tol = jnp.asarray(mean_tol, jnp.float64)
    return _eta2(M, Q, b, grad, activation, law, samples, bool(controls), bool(shadow), quad, tol)
