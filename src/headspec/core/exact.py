"""The exact D → ∞ population risk R(M, Q, b) by deterministic quadrature (SPEC §4–§6).

Given θ the L score vectors s_l ∈ R^H are independent: the hidden token (l = 0) s_0 ~ N(Mθ + b, Q),
the noise tokens s_l ~ N(b, Q) (a Gaussian law folds θ in: s_0 ~ N(Mμ + b, Q + MΣMᵀ)). With
R = ½ Σ_l E W_l² − E W_0 + ½, 1/Z = ∫₀^∞ e^{−uZ} du and 1/Z² = ∫₀^∞ u e^{−uZ} du factorise the
normalisers over tokens. In u = e^w, with g_a(x) = exp(a x − e^x), every token enters through

    e_a(w)    = E g_a(w + s)                      (one head: one score per token)
    F_ab(w,v) = E g_a(w + s_h) g_b(v + s_h')      (a pair of heads)

and for softmax (κ = 0) or softmax-1 (κ = 1), with c = 1/H ("mean") or 1 ("sum"),

    E A_h0        = ∫ dw  e^{−κe^w} e_1^{hid} (e_0^{noi})^{L−1}
    E A_h0²       = ∫ dw  e^{−κe^w} e_2^{hid} (e_0^{noi})^{L−1}
    E A_h1²       = ∫ dw  e^{−κe^w} e_2^{noi} (e_0^{noi})^{L−2} e_0^{hid}
    E A_h0 A_h'0  = ∫∫ dw dv e^{−κ(e^w+e^v)} F_11^{hid} (F_00^{noi})^{L−1}
    E A_h1 A_h'1  = ∫∫ dw dv e^{−κ(e^w+e^v)} F_11^{noi} (F_00^{noi})^{L−2} F_00^{hid}

    R = ½c² Σ_hh' [E A_h0 A_h'0 + (L−1) E A_h1 A_h'1] − c Σ_h E A_h0 + ½.

Bayes-softmax is one softmax over tokens of the scores y_l = log Σ_h e^{s_hl}: the same formulas
with H = 1 and token factors E g_a(w + y) over s ~ N(m, C) in R^H. The Bayes risk of a discrete
law is the risk of its constructed Bayes-softmax (SPEC §6), hence exact with the same code.

Quadrature (all node counts static, all ranges and spacings chosen from the state under
``stop_gradient``, so one compiled program serves every state of the same shapes):

- w (and v): a uniform grid over the support of the integrand, from below the largest score's
  tail (the integrand decays like e^{rw} there, r = 1 for 1/Z and 2 for 1/Z²: the grid's first
  weight sums that geometric tail, (h/2)coth(rh/2)) up to where the noise tokens' factors vanish.
- one score: the trapezoid rule on m ± ``window``·σ (normalised Gaussian weights);
- a pair of heads: s_h' given s_h is N(μ(s_h), τ²); the head with the larger variance is the
  outer one. Where τ is resolved by the grid of s_h' (τ ≥ ``resolve``·spacing) the pair rule is
  the tensor grid with weights p(s_h)·p(s_h'|s_h), so F_ab = G_a P G_bᵀ is two matrix products.
  For nearly identical heads (small τ, singular C included) the inner expectation is the
  blurred kernel G_b(y) = E_z g_b(y + τz), tabulated once (an inner trapezoid in z for τ < 0.95,
  a convolution in x beyond) and read by its Taylor series of order 7 about the nearest node.
  Cost: O(n_w² n_s + n_w n_s²) per pair of heads and token law, sequentially over them.
- Bayes-softmax: the token factors expand into the multi-head moments E Π_h g_{a_h}(w + s_h),
  computed along s_h = m_h + Σ_{k≤h} L_hk z_k (a Cholesky factor that tolerates singular C):
  heads 1..H−1 on ``n_bayes``-node grids, the last through its blurred kernel. The cost grows
  like n_w · n_bayes^{H−1} · A^H (A = 3, 5 with a gradient, 7 with a Hessian): fine for H ≤ 3,
  heavy at H = 4 (lower ``n_bayes``), out of reach beyond; see :func:`exact_risk`.

Derivatives: every Gaussian expectation has a ``jax.custom_jvp`` by Price's theorem,
dE f = E[∇f]·dm + ½ tr(dC E[∇²f]), evaluated by the same rule (g_a' = a g_a − g_{a+1}, so the
derivatives of e_a, F_ab are again e, F with a + 1, a + 2). No square root of Q is ever
differentiated: gradients and Jacobians are finite and correct at singular Q (identical heads,
keys inside span(K*), the Bayes construction), and derivatives of any order are available.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from headspec.core.latent import Spike
    >>> from headspec.core.attention import Softmax
    >>> M, Q, b = jnp.array([[2.0]]), jnp.array([[4.0]]), jnp.zeros(1)   # the head k = K*a
    >>> r = exact_risk(M, Q, b, Softmax(), Spike([2.0]), L=10)
    >>> round(float(r.mean), 4)      # one softmax head on the spike is Bayes-optimal
    0.2234
    >>> from headspec.core.precision import float64_context
    >>> with float64_context():      # gradients of any order, here at a singular Q (two heads)
    ...     M2, Q2 = jnp.array([[2.0], [2.0]]), jnp.full((2, 2), 4.0)
    ...     R = lambda Q: exact_risk(M2, Q, jnp.zeros(2), Softmax(), Spike([2.0]), L=10).mean
    ...     g = jax.grad(R)(Q2)
    >>> bool(jnp.isfinite(g).all())
    True
"""

from __future__ import annotations

import functools
import itertools
import statistics
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.attention import Activation, BayesSoftmax, Softmax, Softmax1
from headspec.core.latent import Gaussian, LatentLaw
from headspec.core.precision import float64

Array = jax.Array
sg = jax.lax.stop_gradient

X_CUT = 3.3  # g_0(x) = exp(−e^x) < 2e-12 beyond this x
EPS_TAIL = 1e-12  # the mass left out by the grids' upper ends


class Quadrature(eqx.Module):
    """Node counts and tolerances of :func:`exact_risk` (all static: one compilation each).

    The accuracy is set by the score grids' spacing 2·window·√Q_hh/(n_s − 1): below ≈ 0.5 the
    risk and its gradient converge to ≲ 1e-9 (measured at E1's states, benchmarks/
    bench_exact.py); above it the error grows fast (4e-6 in ∇R at 0.62). The defaults keep
    √Q_hh ≤ 5.6 (Q_hh ≤ 32) below that spacing; for larger keys raise n_s ≈ 28·√Q_hh (the cost
    grows linearly in n_s). n_w sets the log-u grids (48: ∇R to ≈ 3e-9 on E1's common phase,
    64: to 1e-12, at 1.4× the cost).
    """

    n_w: int = eqx.field(static=True, default=48)  # log-u nodes per head (softmax, softmax-1)
    n_s: int = eqx.field(static=True, default=160)  # nodes per score grid
    n_inner: int = eqx.field(static=True, default=64)  # inner nodes of the blurred-kernel tables
    n_table: int = eqx.field(static=True, default=512)  # nodes of those tables
    n_bayes: int = eqx.field(static=True, default=64)  # nodes per head but one (Bayes-softmax)
    n_w_bayes: int = eqx.field(static=True, default=128)  # log-u nodes (Bayes-softmax)
    window: float = eqx.field(static=True, default=7.0)  # score grids: m ± window·σ
    tail: float = eqx.field(static=True, default=14.0)  # w below −(top score) down to this
    resolve: float = eqx.field(static=True, default=1.1)  # pair grid: τ ≥ resolve·spacing


class ExactRisk(NamedTuple):
    mean: Array  # () R = E_θ R(θ)
    by_atom: Array  # (J,) risk given θ = a_j (discrete laws; empty otherwise)


# ------------------------------------------------------------------ the kernels g_a(x) = e^{ax−e^x}
def _expo(x: Array) -> Array:
    """e^x with x clipped to ±300: a product of three such factors stays finite and non-zero."""
    return jnp.exp(jnp.clip(x, -300.0, 300.0))


def _g_of(E: Array, A: int) -> Array:
    """g_a = E^a e^{−E} for a = 0..A−1 from E = e^x ≥ 0, on a new leading axis: (A, *E.shape).

    E is capped at 1e20 (where every g_a is 0 in float64), so E^a e^{−E} never meets inf·0."""
    E = jnp.minimum(E, 1e20)
    out = [jnp.exp(-E)]
    for _ in range(1, A):
        out.append(out[-1] * E)
    return jnp.stack(out)  # (A, ...)


def _g_outer(w: Array, s: Array, A: int) -> Array:
    """g_a(w_i + s_k) for a = 0..A−1: (A, n_w, n_s), one exponential per entry (e^w e^s)."""
    c = jnp.mean(w)  # centring keeps both factors in range
    return _g_of(_expo(w - c)[:, None] * _expo(s + c)[None, :], A)  # (A, n_w, n_s)


def _price_coefficients(A: int):
    """Index arrays for g_a' = a g_a − g_{a+1}, g_a'' = a² g_a − (2a+1) g_{a+1} + g_{a+2}."""
    a = np.arange(A, dtype=np.float64)
    return a, a**2, 2 * a + 1


def _score_nodes(m: Array, sd: Array, n: int, window: float):
    """Trapezoid nodes s (n,) on m ± window·sd with normalised Gaussian weights p (n,)."""
    z = jnp.linspace(-window, window, n, dtype=m.dtype)  # (n,)
    p = jnp.exp(-0.5 * z**2)
    return m + sd * z, p / p.sum()  # (n,), (n,)


# --------------------------------------------------------------------- one score: e_a(w) = E g_a
@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4, 5))
def _moments1(m: Array, var: Array, w: Array, A: int, n_s: int, window: float) -> Array:
    """e[t, a, i] = E g_a(w[t, i] + s), s ~ N(m[t], var[t]): (T, A, n_w)."""

    def one(m, var, w):
        s, p = _score_nodes(m, jnp.sqrt(jnp.maximum(var, 0.0)), n_s, window)  # (n_s,) ×2
        return _g_outer(w, s, A) @ p  # (A, n_w)

    return jax.vmap(one)(sg(m), sg(var), sg(w))


@_moments1.defjvp
def _moments1_jvp(A, n_s, window, primals, tangents):
    m, var, w = primals
    dm, dvar, dw = tangents
    E = _moments1(m, var, w, A + 2, n_s, window)  # (T, A+2, n_w)
    a, a2, a21 = (jnp.asarray(c)[None, :, None] for c in _price_coefficients(A))
    e0, e1, e2 = E[:, :A], E[:, 1 : A + 1], E[:, 2 : A + 2]  # (T, A, n_w) each
    d1 = a * e0 - e1  # E g_a'
    d2 = a2 * e0 - a21 * e1 + e2  # E g_a''
    shift = dm[:, None, None] + dw[:, None, :]  # (T, 1, n_w)
    return e0, shift * d1 + 0.5 * dvar[:, None, None] * d2


TAYLOR = 8  # terms of the Taylor interpolation of a blurred kernel between table nodes


@functools.cache
def _derivative_coefficients(A: int) -> np.ndarray:
    """c[b, k, j] with d^k/dx^k g_b = Σ_j c[b, k, j] g_{b+j} (from g_a' = a g_a − g_{a+1})."""
    c = np.zeros((A, TAYLOR, TAYLOR))
    c[:, 0, 0] = 1.0
    for b in range(A):
        for k in range(TAYLOR - 1):
            for j in range(k + 1):
                c[b, k + 1, j] += (b + j) * c[b, k, j]
                c[b, k + 1, j + 1] -= c[b, k, j]
    return c


def _blur_table(tau: Array, lo: Array, hi: Array, A: int, quad: Quadrature):
    """Taylor coefficients D[b, k, i] = G_b^(k)(t_i)/k! of G_b(y) = E_z g_b(y + τz), b < A, on
    ``n_table`` nodes t (lo..hi): (A, 8, n_t), and the nodes t (n_t,).

    τ < 0.95: an ``n_inner``-node trapezoid in z (spacing min(0.7, 2π/(21τ + 6)): its aliasing
    reaches g_b only beyond frequency ≈ 21), with the derivatives as combinations of g_{b..b+7}.
    τ ≥ 0.95: the convolution ∫ g_b(x) ∂_t^k N(x − t; τ) dx by the trapezoid rule on
    ``n_table`` nodes in x (spacing ≤ τ/2), with ∂_t^k N = τ^{−k} He_k((x − t)/τ) N."""
    n = quad.n_table
    dtype = lo.dtype
    t = jnp.linspace(lo, hi, n, dtype=dtype)  # (n_t,)
    fact = jnp.asarray([float(np.prod(range(1, k + 1))) for k in range(TAYLOR)], dtype)

    def inner(_):
        nz = quad.n_inner
        hz = jnp.minimum(0.7, 2 * np.pi / (21.0 * tau + 6.0))
        z = hz * (jnp.arange(nz, dtype=dtype) - 0.5 * (nz - 1))  # (n_z,)
        q = jnp.exp(-0.5 * z**2)
        q = q / q.sum()
        c = 0.5 * (lo + hi)
        E = jnp.minimum(_expo(t - c)[:, None] * _expo(tau * z + c)[None, :], 1e20)  # (n_t, n_z)
        g = jnp.exp(-E) * q  # (n_t, n_z)
        rows = []
        for _ in range(A + TAYLOR - 1):
            rows.append(g.sum(-1))  # (n_t,)
            g = g * E
        T = jnp.stack(rows)  # (A+7, n_t): G_a on the nodes
        coef = jnp.asarray(_derivative_coefficients(A), dtype)  # (A, 8, 8)
        idx = np.arange(A)[:, None] + np.arange(TAYLOR)[None, :]  # (A, 8)
        return jnp.einsum("bkj,bjt->bkt", coef, T[idx]) / fact[:, None]  # (A, 8, n_t)

    def conv(_):
        x = jnp.linspace(lo - 8.5 * tau, jnp.maximum(hi, X_CUT + 1.0), n, dtype=dtype)  # (n_x,)
        dx = x[1] - x[0]
        u = (x[None, :] - t[:, None]) / tau  # (n_t, n_x)
        K0 = jnp.exp(-0.5 * u**2) * (dx / (tau * np.sqrt(2 * np.pi)))  # (n_t, n_x)
        He = [jnp.ones_like(u), u]
        for k in range(1, TAYLOR - 1):
            He.append(u * He[k] - k * He[k - 1])
        K = jnp.stack(He) * K0 / (tau ** jnp.arange(TAYLOR, dtype=dtype))[:, None, None]
        c = jnp.mean(x)
        G = _g_of(_expo(x - c) * _expo(c), A)  # (A, n_x)
        return jnp.einsum("bx,ktx->bkt", G, K) / fact[:, None]  # (A, 8, n_t)

    return jax.lax.cond(tau < 0.95, inner, conv, None), t


def _blurred_at(y: Array, tau: Array, A: int, quad: Quadrature) -> Array:
    """G_b(y) = E_z g_b(y + τz), z ~ N(0, 1), b = 0..A−1, at any points y: (A, *y.shape).

    From :func:`_blur_table` over the range of y where G_b varies (G_0 = 1 and G_{b>0} = 0
    below it, all 0 above it): the Taylor series of order 7 about the nearest node (error
    ≈ (δ/2)⁸/8! · |G⁽⁸⁾| at spacing δ)."""
    lo = jnp.maximum(jnp.min(y), -42.0 - 8.5 * tau)
    hi = jnp.maximum(jnp.minimum(jnp.max(y), X_CUT + 1.0 + 8.5 * tau), lo + 1.0)
    D, t = _blur_table(tau, lo, hi, A, quad)  # (A, 8, n_t), (n_t,)
    dt = t[1] - t[0]
    pos = (jnp.clip(y, lo, hi) - lo) / dt
    i = jnp.clip(jnp.round(pos), 0, quad.n_table - 1).astype(jnp.int32)  # (...)
    eps = y - (lo + i * dt)  # (...)
    Dk = D[:, :, i]  # (A, 8, ...)
    out = Dk[:, -1]
    for k in range(TAYLOR - 2, -1, -1):
        out = out * eps + Dk[:, k]  # Horner
    below = (y < lo)[None]
    first = (jnp.arange(A) == 0).reshape((A,) + (1,) * y.ndim)
    out = jnp.where(below, jnp.where(first, 1.0, 0.0), out)
    return jnp.where((y > hi)[None], 0.0, out)  # (A, ...)


# ----------------------------------------------------------- a pair: F_ab(w, v) = E g_a g_b
def _pair_table(m, C, w, v, A, quad: Quadrature):
    """F[a, b, i, j] = E g_a(w_i + s_1) g_b(v_j + s_2), s ~ N(m, C) (one token; no gradient)."""
    n, Z = quad.n_s, quad.window
    swap = C[1, 1] > C[0, 0]  # the outer score is the one with the larger variance
    m = jnp.where(swap, m[::-1], m)
    C = jnp.where(swap, C[::-1, ::-1], C)
    w, v = jnp.where(swap, v, w), jnp.where(swap, w, v)
    c11, c12, c22 = C[0, 0], 0.5 * (C[0, 1] + C[1, 0]), C[1, 1]
    pos = c11 > 0
    beta = jnp.where(pos, c12 / jnp.where(pos, c11, 1.0), 0.0)
    tau = jnp.sqrt(jnp.maximum(c22 - beta * c12, 0.0))
    sd2 = jnp.sqrt(jnp.maximum(c22, 0.0))
    s1, p1 = _score_nodes(m[0], jnp.sqrt(jnp.maximum(c11, 0.0)), n, Z)  # (n_s,) ×2
    mu = m[1] + beta * (s1 - m[0])  # (n_s,) conditional means of s_2
    Ga = _g_outer(w, s1, A)  # (A, n_w, n_s)
    spacing = 2 * Z * sd2 / (n - 1)

    def grid(_):  # tensor grid, P[k, k'] = p(s1_k) p(s2_k' | s1_k)
        s2 = m[1] + sd2 * jnp.linspace(-Z, Z, n, dtype=m.dtype)  # (n_s,)
        r = (s2[None, :] - mu[:, None]) / jnp.maximum(tau, 1e-300)  # (n_s, n_s)
        P = jnp.exp(-0.5 * r**2)
        P = P * (p1 / jnp.maximum(P.sum(1), 1e-300))[:, None]  # (n_s, n_s)
        Gb = _g_outer(v, s2, A)  # (A, n_w, n_s)
        return jnp.einsum("aik,bjk->abij", Ga @ P, Gb)  # (A, A, n_w, n_w)

    def inner(_):  # s_2 = μ(s_1) + τ z: G_b(y) = E_z g_b(y + τz) tabulated, then Taylor
        Gb = _blurred_at(v[:, None] + mu[None, :], tau, A, quad)  # (A, n_w, n_s)
        return jnp.einsum("aik,k,bjk->abij", Ga, p1, Gb)  # (A, A, n_w, n_w)

    F = jax.lax.cond((tau >= quad.resolve * spacing) & (tau > 0), grid, inner, None)
    return jnp.where(swap, jnp.transpose(F, (1, 0, 3, 2)), F)  # (A, A, n_w, n_w)


@functools.partial(jax.custom_jvp, nondiff_argnums=(4, 5))
def _moments2(m: Array, C: Array, w: Array, v: Array, A: int, quad: Quadrature) -> Array:
    """F[t, a, b, i, j] = E g_a(w[t,i] + s_1) g_b(v[t,j] + s_2), s ~ N(m[t], C[t]):
    (T, A, A, n_w, n_w)."""
    xs = (sg(m), sg(C), sg(w), sg(v))
    return jax.lax.map(lambda x: _pair_table(*x, A, quad), xs)


@_moments2.defjvp
def _moments2_jvp(A, quad, primals, tangents):
    m, C, w, v = primals
    dm, dC, dw, dv = tangents
    F = _moments2(m, C, w, v, A + 2, quad)  # (T, A+2, A+2, n, n)
    a, a2, a21 = (jnp.asarray(c) for c in _price_coefficients(A))
    ai, a2i, a21i = (c[None, :, None, None, None] for c in (a, a2, a21))  # along a
    bi, b2i, b21i = (c[None, None, :, None, None] for c in (a, a2, a21))  # along b
    f = lambda i, j: F[:, i : i + A, j : j + A]  # noqa: E731  (T, A, A, n, n)
    F00 = f(0, 0)
    d1 = ai * F00 - f(1, 0)  # E g_a' g_b
    d2 = bi * F00 - f(0, 1)  # E g_a g_b'
    d11 = a2i * F00 - a21i * f(1, 0) + f(2, 0)
    d22 = b2i * F00 - b21i * f(0, 1) + f(0, 2)
    d12 = ai * bi * F00 - ai * f(0, 1) - bi * f(1, 0) + f(1, 1)

    def per_token(x):  # (T,) → (T, 1, 1, 1, 1)
        return x[:, None, None, None, None]

    sh1 = per_token(dm[:, 0]) + dw[:, None, None, :, None]  # (T, 1, 1, n, 1)
    sh2 = per_token(dm[:, 1]) + dv[:, None, None, None, :]  # (T, 1, 1, 1, n)
    c11, c22 = per_token(dC[:, 0, 0]), per_token(dC[:, 1, 1])
    c12 = per_token(dC[:, 0, 1] + dC[:, 1, 0])
    dF = sh1 * d1 + sh2 * d2 + 0.5 * (c11 * d11 + c22 * d22 + c12 * d12)
    return F00, dF


# ------------------------------------------------------------------------- grids in w = log u
def _z_upper(k: int) -> float:
    """z such that Φ̄(z)^k = EPS_TAIL: beyond m + zσ, k noise factors leave at most EPS_TAIL."""
    return statistics.NormalDist().inv_cdf(1.0 - EPS_TAIL ** (1.0 / k))


def _w_grid(
    means: Array,
    var: Array,
    noise_mean: Array,
    noise_var: Array,
    L: int,
    kappa: float,
    quad: Quadrature,
):
    """The w-grid of one head (n_w,) and its weights for tails e^{w} and e^{2w}: (n_w,) ×2.

    ``means``/``var``: every token's score law of this head (noise and hidden), (T,).
    """
    means, var, noise_mean, noise_var = (sg(x) for x in (means, var, noise_mean, noise_var))
    sd = jnp.sqrt(jnp.maximum(var, 0.0))
    lo = -jnp.max(means + quad.window * sd) - quad.tail
    if L >= 3:
        hi = X_CUT - noise_mean + _z_upper(L - 2) * jnp.sqrt(jnp.maximum(noise_var, 0.0))
    else:
        hi = X_CUT - jnp.min(means - quad.window * sd)
    if kappa:
        hi = jnp.minimum(hi, X_CUT)
    hi = jnp.maximum(hi, lo + 1.0)
    w = jnp.linspace(lo, hi, quad.n_w, dtype=means.dtype)  # (n_w,)
    h = w[1] - w[0]
    base = jnp.full((quad.n_w,), h).at[-1].set(0.5 * h)

    def weights(r):  # first weight: h/2 plus the geometric tail Σ_{i≥1} e^{−r i h}
        return base.at[0].set(0.5 * h / jnp.tanh(0.5 * r * h))

    return w, weights(1.0), weights(2.0)


# ------------------------------------------------------------------ laws: the hidden token(s)
def _hidden(M: Array, Q: Array, b: Array, law: LatentLaw):
    """Hidden-token score laws: means (K, H), covariances (K, H, H), weights (K,), by-atom flag."""
    H = M.shape[0]
    if isinstance(law, Gaussian):
        mean = (M @ law.mu + b)[None]  # (1, H)
        cov = (Q + M @ law.sigma @ M.T)[None]  # (1, H, H)
        return mean, cov, jnp.ones(1, M.dtype), False
    atoms = law.atoms.astype(M.dtype)  # (J, F)
    mean = atoms @ M.T + b[None, :]  # (J, H)
    cov = jnp.broadcast_to(Q, (atoms.shape[0], H, H))  # (J, H, H)
    return mean, cov, law.probs.astype(M.dtype), True


# ----------------------------------------------------------------------- softmax and softmax-1
def _per_head_risk(M, Q, b, law, L, kappa, c, quad):
    """R given each hidden-token law (K,) for per-head normalisers (softmax, softmax-1)."""
    H = M.shape[0]
    hm, hC, _, _ = _hidden(M, Q, b, law)  # (K, H), (K, H, H)
    K = hm.shape[0]
    qd = jnp.diagonal(Q)  # (H,)
    hv = jnp.diagonal(hC, axis1=1, axis2=2)  # (K, H)
    # per-head w-grids
    tok_m = jnp.concatenate([b[None, :], hm], axis=0)  # (1+K, H): noise first
    tok_v = jnp.concatenate([qd[None, :], hv], axis=0)  # (1+K, H)
    grids = [_w_grid(tok_m[:, h], tok_v[:, h], b[h], qd[h], L, kappa, quad) for h in range(H)]
    w = jnp.stack([g[0] for g in grids])  # (H, n_w)
    om1 = jnp.stack([g[1] for g in grids])  # (H, n_w)
    om2 = jnp.stack([g[2] for g in grids])  # (H, n_w)
    kap = jnp.exp(-kappa * jnp.exp(w))  # (H, n_w)

    # one score per head and token: e[h, t, a, i]
    T = 1 + K
    e = _moments1(
        tok_m.T.reshape(-1), tok_v.T.reshape(-1), jnp.repeat(w, T, axis=0), 3, quad.n_s,
        quad.window,
    ).reshape(H, T, 3, quad.n_w)  # fmt: skip
    en = e[:, 0]  # (H, 3, n_w) noise
    eh = e[:, 1:]  # (H, K, 3, n_w) hidden
    n0 = en[:, None, 0]  # (H, 1, n_w)
    EA0 = jnp.sum(om1[:, None] * kap[:, None] * eh[:, :, 1] * n0 ** (L - 1), -1)  # (H, K)
    EA0sq = jnp.sum(om2[:, None] * kap[:, None] * eh[:, :, 2] * n0 ** (L - 1), -1)  # (H, K)
    EA1sq = jnp.sum(
        om2[:, None] * kap[:, None] * en[:, None, 2] * n0 ** (L - 2) * eh[:, :, 0], -1
    )  # (H, K)
    sq = jnp.sum(EA0sq + (L - 1) * EA1sq, 0)  # (K,)

    pairs = list(itertools.combinations(range(H), 2))
    cross = jnp.zeros(K, M.dtype)
    if pairs:
        i1 = np.array([p[0] for p in pairs])
        i2 = np.array([p[1] for p in pairs])
        P = len(pairs)
        ij = np.stack([i1, i2], 1)  # (P, 2)
        rows, cols = ij[:, :, None], ij[:, None, :]  # (P, 2, 1), (P, 1, 2)
        pm_n = b[ij][:, None]  # (P, 1, 2)
        pC_n = Q[rows, cols][:, None]  # (P, 1, 2, 2)
        pm_h = jnp.swapaxes(hm[:, ij], 0, 1)  # (P, K, 2)
        pC_h = jnp.swapaxes(hC[:, rows, cols], 0, 1)  # (P, K, 2, 2)
        pm = jnp.concatenate([pm_n, pm_h], 1).reshape(P * T, 2)  # (P·T, 2)
        pC = jnp.concatenate([pC_n, pC_h], 1).reshape(P * T, 2, 2)  # (P·T, 2, 2)
        pw = jnp.repeat(w[i1], T, axis=0)  # (P·T, n_w)
        pv = jnp.repeat(w[i2], T, axis=0)  # (P·T, n_w)
        F = _moments2(pm, pC, pw, pv, 2, quad).reshape(P, T, 2, 2, quad.n_w, quad.n_w)
        Fn00, Fn11 = F[:, 0, 0, 0], F[:, 0, 1, 1]  # (P, n_w, n_w)
        Fh00, Fh11 = F[:, 1:, 0, 0], F[:, 1:, 1, 1]  # (P, K, n_w, n_w)
        omp = om1[i1][:, :, None] * om1[i2][:, None, :]  # (P, n_w, n_w)
        kp = kap[i1][:, :, None] * kap[i2][:, None, :]  # (P, n_w, n_w)
        wgt = (omp * kp)[:, None]  # (P, 1, n_w, n_w)
        t0 = jnp.sum(wgt * Fh11 * Fn00[:, None] ** (L - 1), (-2, -1))  # (P, K)
        t1 = jnp.sum(wgt * Fn11[:, None] * Fn00[:, None] ** (L - 2) * Fh00, (-2, -1))  # (P, K)
        cross = 2.0 * jnp.sum(t0 + (L - 1) * t1, 0)  # (K,)
    return 0.5 * c**2 * (sq + cross) - c * jnp.sum(EA0, 0) + 0.5  # (K,)


# --------------------------------------------------- all heads at one w: E Π_h g_{a_h}(w + s_h)
def _chol_psd(C: Array) -> Array:
    """Lower L with L Lᵀ = C for a symmetric PSD C, singular allowed (a head that depends on the
    earlier ones gets L_hh = 0 and zeros below). No gradient is taken through it."""
    H = C.shape[0]
    scale = jnp.maximum(jnp.max(jnp.diagonal(C)), 1e-300)
    cols = []
    for j in range(H):
        prev = jnp.stack(cols, 1) if cols else jnp.zeros((H, 0), C.dtype)  # (H, j)
        r = C[:, j] - prev @ prev[j]  # (H,)
        d = r[j]
        ok = d > 1e-13 * scale
        ljj = jnp.sqrt(jnp.where(ok, d, 1.0))
        col = jnp.where(ok, r / ljj, 0.0) * (jnp.arange(H) >= j)  # (H,)
        cols.append(col)
    return jnp.stack(cols, 1)  # (H, H)


def _multi_table(m: Array, C: Array, w: Array, A: int, quad: Quadrature) -> Array:
    """T[a_1, …, a_H, i] = E Π_h g_{a_h}(w_i + s_h), s ~ N(m, C) (one token; no gradient).

    s_h = m_h + Σ_{k≤h} L_hk z_k (L from :func:`_chol_psd`): heads 1..H−1 on trapezoid grids of
    ``n_bayes`` nodes in z_k, the last head given the others through its blurred kernel
    (:func:`_blurred_at`). Cost: n_w · n_bayes^{H−1} · A² per token."""
    H = m.shape[0]
    n, Z = quad.n_bayes, quad.window
    Lc = _chol_psd(0.5 * (C + C.T))  # (H, H)
    z = jnp.linspace(-Z, Z, n, dtype=m.dtype)  # (n,)
    p = jnp.exp(-0.5 * z**2)
    p = p / p.sum()

    def coord(h, upto):  # m_h + Σ_{k<upto} L_hk z_k over node axes k_0..k_{upto−1}
        out = m[h]
        for k in range(upto):
            out = out + Lc[h, k] * z.reshape((1,) * k + (n,) + (1,) * (upto - 1 - k))
        return jnp.broadcast_to(out, (n,) * upto)

    mu = coord(H - 1, H - 1)  # (n,)*(H−1)
    X = _blurred_at(w.reshape((-1,) + (1,) * (H - 1)) + mu[None], Lc[H - 1, H - 1], A, quad)
    # X: (A, n_w, n, …, n); contract the node axes from the last head backwards
    letters = "bcdefghopqrstuvxyz"
    for h in range(H - 2, -1, -1):
        s = coord(h, h + 1)  # (n,)*(h+1)
        c = jnp.mean(w)
        E = _expo(w - c).reshape((-1,) + (1,) * (h + 1)) * _expo(s + c)[None]  # (n_w, n…)
        G = _g_of(E, A)  # (A, n_w, n, …, n)
        B = letters[: H - 1 - h]  # the multi-index axes of the later heads
        K = letters[-(h + 1) :]  # node axes k_0..k_h (last one summed)
        X = jnp.einsum(f"aw{K},{B}w{K},{K[-1]}->a{B}w{K[:-1]}", G, X, p)
    return X  # (A,)*H + (n_w,)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def _moments_multi(m: Array, C: Array, w: Array, A: int, quad: Quadrature) -> Array:
    """T[t, a_1..a_H, i] = E Π_h g_{a_h}(w[t, i] + s_h), s ~ N(m[t], C[t]): (T, A…A, n_w)."""
    xs = (sg(m), sg(C), sg(w))
    return jax.lax.map(lambda x: _multi_table(*x, A, quad), xs)


@_moments_multi.defjvp
def _moments_multi_jvp(A, quad, primals, tangents):
    m, C, w = primals
    dm, dC, dw = tangents
    H = m.shape[1]
    F = _moments_multi(m, C, w, A + 2, quad)  # (T, (A+2)×H, n_w)

    def shifted(*offs):  # E Π g_{a_h + off_h}, a_h < A
        sl = [slice(None)] + [slice(o, o + A) for o in offs] + [slice(None)]
        return F[tuple(sl)]

    def ax(h):  # a_h along its axis, broadcastable to (T, A…A, n_w)
        return jnp.arange(A, dtype=F.dtype).reshape((1,) + (1,) * h + (A,) + (1,) * (H - h))

    def e(h, k=1):
        return tuple(k if j == h else 0 for j in range(H))

    T0 = shifted(*(0,) * H)
    bshape = (-1,) + (1,) * H + (1,)  # per token, broadcast over indices and w
    dT = jnp.zeros_like(T0)
    shift = dw.reshape((-1,) + (1,) * H + (w.shape[1],))  # (T, 1…1, n_w): w is every head's
    for h in range(H):
        a = ax(h)
        d1 = a * T0 - shifted(*e(h))  # E ∂_h Π g
        d2 = a**2 * T0 - (2 * a + 1) * shifted(*e(h)) + shifted(*e(h, 2))
        dT = dT + (dm[:, h].reshape(bshape) + shift) * d1 + 0.5 * dC[:, h, h].reshape(bshape) * d2
        for k in range(h + 1, H):
            b = ax(k)
            ek = tuple(int(j == h) + int(j == k) for j in range(H))
            d12 = a * b * T0 - a * shifted(*e(k)) - b * shifted(*e(h)) + shifted(*ek)
            dT = dT + 0.5 * (dC[:, h, k] + dC[:, k, h]).reshape(bshape) * d12
    return T0, dT


# ------------------------------------------------------------------------------- Bayes-softmax
def _bayes_risk(M, Q, b, law, L, c, quad):
    """R given each hidden-token law (K,) for Bayes-softmax: one softmax over tokens of the
    scores y_l = log Σ_h e^{s_hl}, whose token factors E g_a(w + y) expand into multi-head
    moments: g_0(w + y) = Π_h g_0(w + s_h), g_1(w + y) = Σ_h e^{w+s_h} Π_h' g_0(w + s_h'),
    g_2(w + y) = (Σ_h e^{w+s_h})² Π_h' g_0(w + s_h')."""
    H = M.shape[0]
    hm, hC, _, _ = _hidden(M, Q, b, law)  # (K, H), (K, H, H)
    K = hm.shape[0]
    # w-grid from y ∈ [max_h s_h, max_h s_h + log H]
    sdq = jnp.sqrt(jnp.maximum(jnp.diagonal(Q), 0.0))  # (H,)
    sdh = jnp.sqrt(jnp.maximum(jnp.diagonal(hC, axis1=1, axis2=2), 0.0))  # (K, H)
    top = jnp.maximum(jnp.max(b + quad.window * sdq), jnp.max(hm + quad.window * sdh))
    bottom = jnp.max(b - _z_upper(max(L - 2, 1)) * sdq)  # y ≥ s_h for every h
    lo = sg(-top - np.log(H) - quad.tail)
    hi = sg(jnp.maximum(X_CUT - bottom, lo + 1.0))
    nw = quad.n_w_bayes
    w = jnp.linspace(lo, hi, nw, dtype=M.dtype)  # (n_w,)
    h = w[1] - w[0]
    base = jnp.full((nw,), h).at[-1].set(0.5 * h)
    om1 = base.at[0].set(0.5 * h / jnp.tanh(0.5 * h))
    om2 = base.at[0].set(0.5 * h / jnp.tanh(h))
    tok_m = jnp.concatenate([b[None], hm])  # (1+K, H): noise first
    tok_C = jnp.concatenate([Q[None], hC])  # (1+K, H, H)
    T = _moments_multi(tok_m, tok_C, jnp.broadcast_to(w, (1 + K, nw)), 3, quad)  # (1+K, 3…3, n_w)
    zero = (0,) * H
    unit = [tuple(int(j == i) for j in range(H)) for i in range(H)]
    e0 = T[(slice(None), *zero)]  # (1+K, n_w)
    e1 = sum(T[(slice(None), *u)] for u in unit)
    e2 = sum(T[(slice(None), *(x + y for x, y in zip(u, v, strict=True)))]
             for u in unit for v in unit)  # fmt: skip
    en, eh = (e0[0], e1[0], e2[0]), (e0[1:], e1[1:], e2[1:])
    n0 = en[0]  # (n_w,)
    EA0 = jnp.sum(om1 * eh[1] * n0 ** (L - 1), -1)  # (K,)
    EA0sq = jnp.sum(om2 * eh[2] * n0 ** (L - 1), -1)  # (K,)
    EA1sq = jnp.sum(om2 * en[2] * n0 ** (L - 2) * eh[0], -1)  # (K,)
    return 0.5 * c**2 * (EA0sq + (L - 1) * EA1sq) - c * EA0 + 0.5  # (K,)


# ----------------------------------------------------------------------------------- the API
@eqx.filter_jit
def _exact_risk(M, Q, b, activation: Activation, law: LatentLaw, L: int, quad: Quadrature):
    H = M.shape[0]
    c = 1.0 / H if activation.aggregation == "mean" else 1.0
    if isinstance(activation, BayesSoftmax) and H > 1:
        per = _bayes_risk(M, Q, b, law, L, c, quad)
    elif isinstance(activation, BayesSoftmax):  # one head: a softmax head
        per = _per_head_risk(M, Q, b, law, L, 0.0, c, quad)
    else:
        kappa = 1.0 if isinstance(activation, Softmax1) else 0.0
        per = _per_head_risk(M, Q, b, law, L, kappa, c, quad)
    _, _, weights, atoms = _hidden(M, Q, b, law)
    return ExactRisk(weights @ per, per if atoms else jnp.zeros((0,), per.dtype))


@float64
def exact_risk(
    M: Array,
    Q: Array,
    b: Array,
    activation: Activation,
    law: LatentLaw,
    L: int,
    quad: Quadrature = Quadrature(),
) -> ExactRisk:
    """The D → ∞ population risk R(M, Q, b) of SPEC §4 by deterministic quadrature.

    M (H, F), Q (H, H) (PSD, singular allowed; entries treated as independent), b (H,); L ≥ 2
    tokens; a discrete (spike, flipped spike) or Gaussian law; softmax, softmax-1 or
    Bayes-softmax with either aggregation. Jitted (one compilation per shapes, activation, law
    family, L and ``quad``) and differentiable in M, Q, b by ``jax.grad``/``jax.jacfwd`` to any
    order. ``by_atom`` is R given θ = a_j for discrete laws (empty for a Gaussian law).

    Bayes-softmax with H ≥ 2 heads costs n_w_bayes · n_bayes^{H−1} · 25 numbers per token law with
    a gradient; beyond 5e7 it is refused (H = 4: pass ``Quadrature(n_bayes=24)``, accurate only
    while 14·√Q_hh/23 ≲ 0.5).
    """
    if L < 2:
        raise ValueError(f"L must be ≥ 2, got {L}")
    if not isinstance(activation, Softmax | Softmax1 | BayesSoftmax):
        raise TypeError(f"no exact risk for activation {type(activation).__name__}")
    if not (isinstance(law, Gaussian) or law.n_atoms):
        raise TypeError(f"exact_risk needs a discrete or Gaussian law, got {type(law).__name__}")
    H = np.shape(M)[0]
    work = quad.n_w_bayes * quad.n_bayes ** (H - 1) * 25
    if isinstance(activation, BayesSoftmax) and H > 1 and work > 5e7:
        raise ValueError(
            f"Bayes-softmax with H = {H} heads would need {work:.2g} numbers per token law "
            f"(n_w_bayes·n_bayes^(H−1)·25); pass Quadrature(n_bayes=…) with fewer nodes"
        )
    M = jnp.asarray(M, jnp.float64)
    Q = jnp.asarray(Q, jnp.float64)
    b = jnp.asarray(b, jnp.float64).reshape(M.shape[0])
    return _exact_risk(M, Q, b, activation, law, int(L), quad)
