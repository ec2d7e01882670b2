"""Quadrature rules for the exact D → ∞ risk (:mod:`headspec.core.exact`): Gaussian moments of the
kernels g_a(x) = e^{ax − e^x} with Price's-theorem derivatives, and the log-u grids.

Every token of a sequence enters the risk through Gaussian expectations of products of g_a:
one head (:func:`moments1`: E g_a(w + s), s ~ N(m, σ²)), a pair of heads (:func:`moments2`:
E g_a(w + s_h) g_b(v + s_h')), or all heads of a Bayes-softmax
(:func:`~headspec.core.multihead.moments_multi`:
E Π_h g_{a_h}(w + s_h)). Each is a ``jax.custom_jvp`` by Price's theorem,
dE f = E[∇f]·dm + ½ tr(dC E[∇²f]); since g_a' = a g_a − g_{a+1} the tangent needs only the same
moments at a + 1 and a + 2, so no square root of a covariance is ever differentiated and
derivatives of any order are finite at singular covariances. :class:`Quadrature` holds the node
counts (static: one compiled program per choice). The rules themselves are described in
:mod:`headspec.core.exact`.

Example:
    >>> import jax.numpy as jnp
    >>> from headspec.core.precision import float64_context
    >>> with float64_context():              # E exp(−e^{w+s}) for s ~ N(0, 1) at w = 0, 1
    ...     e = moments1(jnp.zeros(1), jnp.ones(1), jnp.array([[0.0, 1.0]]), 1, 160, 7.0)
    >>> e.shape, bool(e[0, 0, 0] > e[0, 0, 1])     # (T, orders a, w): decreasing in w
    ((1, 1, 2), True)
"""

from __future__ import annotations

import functools
import statistics

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
sg = jax.lax.stop_gradient

X_CUT = 3.3  # g_0(x) = exp(−e^x) < 2e-12 beyond this x
EPS_TAIL = 1e-12  # the mass left out by the grids' upper ends
#: node-count factor of the refined rule of :func:`~headspec.core.accuracy.error_bound`
#: (cost ≈ 2–3× the rule's)
REFINE = 1.4


class Quadrature(eqx.Module):
    """Node counts and tolerances of :func:`exact_risk` (all static: one compilation each).

    The accuracy is set by the grids' spacings, which grow like √Q_hh
    (:func:`~headspec.core.accuracy.reach`: up to Q_hh = 25 for softmax, 19.9 for softmax-1 and
    16 for Bayes-softmax at the defaults, R and ∇R stay within ≈ 5e-7 of a much finer rule,
    typically 1e-8 or better; at E1's states ≲ 1e-9). For larger keys raise n_s ≈ 32·√Q_hh
    (softmax; the pair tables cost ∝ n_s² where keys are large), n_w_one (softmax-1) or n_bayes
    (Bayes-softmax).
    n_w sets softmax's log-u grids (48: ∇R to ≈ 3e-9 on E1's common phase, 64: to 1e-12, at
    1.4× the cost); softmax-1 needs more (its e^{−u} factor: 64 by default, 1.6× the cost of 48).
    """

    n_w: int = eqx.field(static=True, default=48)  # log-u nodes per head (softmax)
    n_w_one: int = eqx.field(static=True, default=64)  # log-u nodes per head (softmax-1)
    n_s: int = eqx.field(static=True, default=160)  # nodes per score grid
    n_inner: int = eqx.field(static=True, default=64)  # inner nodes of the blurred-kernel tables
    n_table: int = eqx.field(static=True, default=512)  # nodes of those tables (Bayes-softmax)
    #: nodes of the pair rule's blurred-kernel tables (near-identical heads): the Taylor series
    #: of order 7 between nodes errs by ≈ (δ/2)⁸/8!·|G⁽⁸⁾|; 256 moved R and ∇R by ≤ 6.3e-11 from
    #: 512 on near-identical heads, where the tables were half a pair's cost (2026-12-06)
    n_table_pair: int = eqx.field(static=True, default=256)
    n_bayes: int = eqx.field(static=True, default=64)  # nodes per head but one (Bayes-softmax)
    n_w_bayes: int = eqx.field(static=True, default=128)  # log-u nodes (Bayes-softmax)
    window: float = eqx.field(static=True, default=7.0)  # score grids: m ± window·σ
    tail: float = eqx.field(static=True, default=14.0)  # w below −(top score) down to this
    resolve: float = eqx.field(static=True, default=1.1)  # pair grid: τ ≥ resolve·spacing

    def refined(self, factor: float = REFINE) -> Quadrature:
        """The same rule with every node count × ``factor``: the second rule of
        :func:`~headspec.core.accuracy.error_bound` (its error is far below this one's wherever
        the rule converges: the trapezoid rules here converge exponentially in the node counts).

        >>> Quadrature().refined().n_s, Quadrature().refined().n_w
        (224, 67)
        """
        r = lambda n: max(3, round(n * factor))  # noqa: E731
        return Quadrature(
            n_w=r(self.n_w), n_w_one=r(self.n_w_one), n_s=r(self.n_s), n_inner=r(self.n_inner),
            n_table=r(self.n_table), n_table_pair=r(self.n_table_pair),
            n_bayes=r(self.n_bayes), n_w_bayes=r(self.n_w_bayes), window=self.window,
            tail=self.tail, resolve=self.resolve,
        )  # fmt: skip


def expo(x: Array) -> Array:
    """e^x with x clipped to ±300: a product of three such factors stays finite and non-zero."""
    return jnp.exp(jnp.clip(x, -300.0, 300.0))


def g_of(E: Array, A: int) -> Array:
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
    return g_of(expo(w - c)[:, None] * expo(s + c)[None, :], A)  # (A, n_w, n_s)


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
def moments1(m: Array, var: Array, w: Array, A: int, n_s: int, window: float) -> Array:
    """e[t, a, i] = E g_a(w[t, i] + s), s ~ N(m[t], var[t]): (T, A, n_w)."""

    def one(m, var, w):
        s, p = _score_nodes(m, jnp.sqrt(jnp.maximum(var, 0.0)), n_s, window)  # (n_s,) ×2
        return _g_outer(w, s, A) @ p  # (A, n_w)

    return jax.vmap(one)(sg(m), sg(var), sg(w))


@moments1.defjvp
def _moments1_jvp(A, n_s, window, primals, tangents):
    m, var, w = primals
    dm, dvar, dw = tangents
    E = moments1(m, var, w, A + 2, n_s, window)  # (T, A+2, n_w)
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


def _blur_table(tau: Array, lo: Array, hi: Array, A: int, quad: Quadrature, n: int):
    """Taylor coefficients D[b, k, i] = G_b^(k)(t_i)/k! of G_b(y) = E_z g_b(y + τz), b < A, on
    ``n`` nodes t (lo..hi): (A, 8, n), and the nodes t (n,).

    τ < 0.95: an ``n_inner``-node trapezoid in z (spacing min(0.7, 2π/(21τ + 6)): its aliasing
    reaches g_b only beyond frequency ≈ 21), with the derivatives as combinations of g_{b..b+7}.
    τ ≥ 0.95: the convolution ∫ g_b(x) ∂_t^k N(x − t; τ) dx by the trapezoid rule on
    ``n`` nodes in x (spacing ≤ τ/2), with ∂_t^k N = τ^{−k} He_k((x − t)/τ) N."""
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
        E = jnp.minimum(expo(t - c)[:, None] * expo(tau * z + c)[None, :], 1e20)  # (n_t, n_z)
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
        G = g_of(expo(x - c) * expo(c), A)  # (A, n_x)
        return jnp.einsum("bx,ktx->bkt", G, K) / fact[:, None]  # (A, 8, n_t)

    return jax.lax.cond(tau < 0.95, inner, conv, None), t


def blurred_at(y: Array, tau: Array, A: int, quad: Quadrature, n: int | None = None) -> Array:
    """G_b(y) = E_z g_b(y + τz), z ~ N(0, 1), b = 0..A−1, at any points y: (A, *y.shape).

    From :func:`_blur_table` over the range of y where G_b varies (G_0 = 1 and G_{b>0} = 0
    below it, all 0 above it): the Taylor series of order 7 about the nearest node (error
    ≈ (δ/2)⁸/8! · |G⁽⁸⁾| at spacing δ) on ``n`` nodes (default ``quad.n_table``)."""
    n = quad.n_table if n is None else n
    lo = jnp.maximum(jnp.min(y), -42.0 - 8.5 * tau)
    hi = jnp.maximum(jnp.minimum(jnp.max(y), X_CUT + 1.0 + 8.5 * tau), lo + 1.0)
    D, t = _blur_table(tau, lo, hi, A, quad, n)  # (A, 8, n), (n,)
    dt = t[1] - t[0]
    pos = (jnp.clip(y, lo, hi) - lo) / dt
    i = jnp.clip(jnp.round(pos), 0, n - 1).astype(jnp.int32)  # (...)
    eps = y - (lo + i * dt)  # (...)
    Dk = D[:, :, i]  # (A, 8, ...)
    out = Dk[:, -1]
    for k in range(TAYLOR - 2, -1, -1):
        out = out * eps + Dk[:, k]  # Horner
    below = (y < lo)[None]
    first = (jnp.arange(A) == 0).reshape((A,) + (1,) * y.ndim)
    out = jnp.where(below, jnp.where(first, 1.0, 0.0), out)
    return jnp.where((y > hi)[None], 0.0, out)  # (A, ...)


def per_token(table, *xs: Array) -> Array:
    """``table`` on each slice along the leading (token) axis of ``xs``, one after another —
    and one after another under ``vmap`` too: a batched call runs ``table`` on each
    (batch, token) pair in turn, so the ``lax.cond`` inside (the branch a token's score spread
    needs) stays a branch instead of becoming a ``select`` that evaluates both branches for
    every element (3.4× slower for the diffusion engine at H = 2, measured). Callers may
    ``vmap`` over seeds and states freely; nested ``vmap`` flattens into the same loop."""

    @jax.custom_batching.custom_vmap
    def each(*xs):
        return jax.lax.map(lambda x: table(*x), xs)

    @each.def_vmap
    def rule(size, batched, *xs):
        xs = [
            x if b else jnp.broadcast_to(x, (size, *x.shape))
            for x, b in zip(xs, batched, strict=True)
        ]
        out = per_token(table, *(x.reshape(-1, *x.shape[2:]) for x in xs))  # (size·T, …)
        return out.reshape(size, -1, *out.shape[1:]), True

    return each(*xs)


# ----------------------------------------------------------- a pair: F_ab(w, v) = E g_a g_b
#: the pair rule's coarser score grids: fractions of ``n_s`` (the full grid above them), each
#: used for a pair whose larger score spread σ keeps the grid's spacing 2·window·σ/(n − 1) ≤
#: :data:`LEVEL_SPACING` on the default rule's 160 nodes (one σ threshold for every rule, so that
#: a finer rule is finer at every state and :func:`~headspec.core.accuracy.error_bound` holds).
#: The pair tables cost n_w·n² + n_w²·n per order pair and dominate ∇R at many heads, while small
#: keys need few nodes. At spacing 0.36 (the trapezoid's error ~e^{−π²/0.36} ≈ 1e-12, against
#: 2e-10 at the reach's SPACING 0.44) R and ∇R moved by ≤ 4.5e-11 from the full grid on random
#: states (H = 2, 3; softmax and softmax-1; Q_hh from 0.002 to 8; 2026-12-06), while E1's ∇R at
#: H = 16 (Q_hh ≈ 1.3) took 106 ms instead of 384.
LEVELS = (0.25, 0.375, 0.5, 0.75)
LEVEL_SPACING = 0.36


def pair_nodes(quad: Quadrature) -> tuple[tuple[int, float], ...]:
    """The pair rule's score grids: (nodes, largest σ it serves) per level, coarsest first; the
    last, ``n_s`` itself, serves every σ.

    >>> [(n, round(cap, 2)) for n, cap in pair_nodes(Quadrature())]
    [(40, 1.0), (60, 1.52), (80, 2.03), (120, 3.06), (160, inf)]
    """
    cap = lambda f: LEVEL_SPACING * (round(f * 160) - 1) / (2 * quad.window)  # noqa: E731
    levels = [(max(3, round(f * quad.n_s)), cap(f)) for f in LEVELS]
    return (*levels, (quad.n_s, float("inf")))


def _pair_table(m, C, w, v, *, A, quad: Quadrature, combos=None):
    """F[a, b, i, j] = E g_a(w_i + s_1) g_b(v_j + s_2), s ~ N(m, C) (one token; no gradient),
    on the coarsest score grid of :func:`pair_nodes` that serves the pair's larger spread;
    only the orders (a, b) in ``combos`` (static; None: all), the others 0."""
    combos = tuple((a, b) for a in range(A) for b in range(A)) if combos is None else combos
    swapped = tuple((b, a) for a, b in combos)  # the same orders after exchanging the heads
    if set(swapped) != set(combos):
        raise ValueError(f"pair orders must be symmetric under exchange, got {combos}")
    ia, ib = (np.array(x) for x in zip(*combos, strict=True))  # (o,) ×2: orders a, b
    Z = quad.window
    swap = C[1, 1] > C[0, 0]  # the outer score is the one with the larger variance
    m = jnp.where(swap, m[::-1], m)
    C = jnp.where(swap, C[::-1, ::-1], C)
    w, v = jnp.where(swap, v, w), jnp.where(swap, w, v)
    c11, c12, c22 = C[0, 0], 0.5 * (C[0, 1] + C[1, 0]), C[1, 1]
    pos = c11 > 0
    beta = jnp.where(pos, c12 / jnp.where(pos, c11, 1.0), 0.0)
    tau = jnp.sqrt(jnp.maximum(c22 - beta * c12, 0.0))
    sd1 = jnp.sqrt(jnp.maximum(c11, 0.0))
    sd2 = jnp.sqrt(jnp.maximum(c22, 0.0))

    def on(n: int, _):  # the table on n-node score grids
        s1, p1 = _score_nodes(m[0], sd1, n, Z)  # (n,) ×2
        mu = m[1] + beta * (s1 - m[0])  # (n,) conditional means of s_2
        Ga = _g_outer(w, s1, A)  # (A, n_w, n)
        spacing = 2 * Z * sd2 / (n - 1)

        def grid(_):  # tensor grid, P[k, k'] = p(s1_k) p(s2_k' | s1_k)
            s2 = m[1] + sd2 * jnp.linspace(-Z, Z, n, dtype=m.dtype)  # (n,)
            r = (s2[None, :] - mu[:, None]) / jnp.maximum(tau, 1e-300)  # (n, n)
            P = jnp.exp(-0.5 * r**2)
            P = P * (p1 / jnp.maximum(P.sum(1), 1e-300))[:, None]  # (n, n)
            Gb = _g_outer(v, s2, A)  # (A, n_w, n)
            return jnp.einsum("oik,ojk->oij", (Ga @ P)[ia], Gb[ib])  # (o, n_w, n_w)

        def inner(_):  # s_2 = μ(s_1) + τ z: G_b(y) = E_z g_b(y + τz) tabulated, then Taylor
            Gb = blurred_at(v[:, None] + mu[None, :], tau, A, quad, quad.n_table_pair)
            return jnp.einsum("oik,k,ojk->oij", Ga[ia], p1, Gb[ib])  # (o, n_w, n_w)

        return jax.lax.cond((tau >= quad.resolve * spacing) & (tau > 0), grid, inner, None)

    levels = pair_nodes(quad)
    caps = jnp.asarray([cap for _, cap in levels[:-1]], sd1.dtype)  # (levels − 1,)
    level = jnp.sum(sd1 > caps)  # the first level whose cap holds σ
    F = jax.lax.switch(level, [functools.partial(on, n) for n, _ in levels], None)  # (o, …)
    full = jnp.zeros((A, A, *F.shape[1:]), F.dtype).at[ia, ib].set(F)  # (A, A, n_w, n_w)
    return jnp.where(swap, jnp.transpose(full, (1, 0, 3, 2)), full)


@functools.partial(jax.custom_jvp, nondiff_argnums=(4, 5))
def moments2(m: Array, C: Array, w: Array, v: Array, A: int, quad: Quadrature) -> Array:
    """F[t, a, b, i, j] = E g_a(w[t,i] + s_1) g_b(v[t,j] + s_2), s ~ N(m[t], C[t]):
    (T, A, A, n_w, n_w)."""
    return pair_tables(m, C, w, v, A=A, quad=quad)


def pair_tables(
    m: Array, C: Array, w: Array, v: Array, *, A: int, quad: Quadrature, combos=None
) -> Array:
    """:func:`moments2` without its derivative (every argument under stop_gradient), to be
    called where a caller's own custom JVP differentiates it: (T, A, A, n_w, n_w), only the
    orders (a, b) in ``combos`` (a static tuple closed under a ↔ b; None: all) computed, the
    others 0 (the n_w²·n_s work of a table is per order pair)."""
    table = functools.partial(_pair_table, A=A, quad=quad, combos=combos)
    return per_token(table, sg(m), sg(C), sg(w), sg(v))


#: the orders (a, b) of the tables that the derivatives of E g_a g_b, (a, b) ∈ {(0, 0), (1, 1)},
#: need (:func:`price_parts`: a + i, b + j with i + j ≤ 2): 11 of the 16 below order 4
_SHIFTS = ((0, 0), (1, 0), (0, 1), (2, 0), (0, 2), (1, 1))
PRICE_COMBOS = tuple(sorted({(a + i, a + j) for a in (0, 1) for i, j in _SHIFTS}))


def price_parts(F: Array, A: int):
    """The moments of the derivatives of g_a(w + s_1) g_b(v + s_2) from a table F (T, A+2, A+2,
    …) of :func:`moments2`: (d1, d2, d11, d22, d12), each (T, A, A, …): E[∂₁(g_a g_b)],
    E[∂₂(g_a g_b)], E[∂₁²], E[∂₂²], E[∂₁∂₂] (g_a' = a g_a − g_{a+1}). By Price's theorem the
    tangent of E g_a g_b is (dm₁ + dw) d1 + (dm₂ + dv) d2 + ½(dC₁₁ d11 + dC₂₂ d22 + 2 dC₁₂ d12)."""
    extra = (None,) * (F.ndim - 3)
    a, a2, a21 = (jnp.asarray(c) for c in _price_coefficients(A))
    ai, a2i, a21i = (c[(None, slice(None), None, *extra)] for c in (a, a2, a21))  # along a
    bi, b2i, b21i = (c[(None, None, slice(None), *extra)] for c in (a, a2, a21))  # along b
    f = lambda i, j: F[:, i : i + A, j : j + A]  # noqa: E731  (T, A, A, …)
    F00 = f(0, 0)
    d1 = ai * F00 - f(1, 0)  # E g_a' g_b
    d2 = bi * F00 - f(0, 1)  # E g_a g_b'
    d11 = a2i * F00 - a21i * f(1, 0) + f(2, 0)
    d22 = b2i * F00 - b21i * f(0, 1) + f(0, 2)
    d12 = ai * bi * F00 - ai * f(0, 1) - bi * f(1, 0) + f(1, 1)
    return d1, d2, d11, d22, d12


@moments2.defjvp
def _moments2_jvp(A, quad, primals, tangents):
    m, C, w, v = primals
    dm, dC, dw, dv = tangents
    F = moments2(m, C, w, v, A + 2, quad)  # (T, A+2, A+2, n, n)
    d1, d2, d11, d22, d12 = price_parts(F, A)  # (T, A, A, n, n) each

    def per_token(x):  # (T,) → (T, 1, 1, 1, 1)
        return x[:, None, None, None, None]

    sh1 = per_token(dm[:, 0]) + dw[:, None, None, :, None]  # (T, 1, 1, n, 1)
    sh2 = per_token(dm[:, 1]) + dv[:, None, None, None, :]  # (T, 1, 1, 1, n)
    c11, c22 = per_token(dC[:, 0, 0]), per_token(dC[:, 1, 1])
    c12 = per_token(dC[:, 0, 1] + dC[:, 1, 0])
    dF = sh1 * d1 + sh2 * d2 + 0.5 * (c11 * d11 + c22 * d22 + c12 * d12)
    return F[:, :A, :A], dF


# ------------------------------------------------------------------------- grids in w = log u
def z_upper(k: int) -> float:
    """z such that Φ̄(z)^k = EPS_TAIL: beyond m + zσ, k noise factors leave at most EPS_TAIL."""
    return statistics.NormalDist().inv_cdf(1.0 - EPS_TAIL ** (1.0 / k))


def first_weight(h: Array, r) -> Array:
    """The weight of a uniform w-grid's first node for an integrand ∝ e^{rw} below it: the node
    itself (h, as an interior node of the infinite grid) plus its geometric tail
    h Σ_{i≥1} e^{−rih}, i.e. h / (1 − e^{−rh}) ≈ 1/r + h/2 + rh²/12.

    (Until 2026-12-06 this was (h/2)·coth(rh/2) ≈ 1/r + rh²/12: half a node short, an O(h)
    error of size (h/2)·f(lo), ~1e-8 in R at small overlaps, which made the w-rule converge
    like h² instead of exponentially; issue 52.)
    """
    return h / (1.0 - jnp.exp(-r * h))


def w_grid(
    means: Array,
    var: Array,
    noise_mean: Array,
    noise_var: Array,
    *,
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
        hi = X_CUT - noise_mean + z_upper(L - 2) * jnp.sqrt(jnp.maximum(noise_var, 0.0))
    else:
        hi = X_CUT - jnp.min(means - quad.window * sd)
    if kappa:
        hi = jnp.minimum(hi, X_CUT)
    hi = jnp.maximum(hi, lo + 1.0)
    n = quad.n_w_one if kappa else quad.n_w
    w = jnp.linspace(lo, hi, n, dtype=means.dtype)  # (n_w,)
    h = w[1] - w[0]
    base = jnp.full((n,), h).at[-1].set(0.5 * h)

    def weights(r):
        return base.at[0].set(first_weight(h, r))

    return w, weights(1.0), weights(2.0)
