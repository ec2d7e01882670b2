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
  Cost: O(n_w² n + n_w n²) per pair of heads and token law, sequentially over them, on the
  coarsest of the score grids n ∈ {¼, ⅜, ½, ¾, 1}·n_s whose spacing stays ≤ 0.36 at the pair's
  larger spread (:func:`~headspec.core.quadrature.pair_nodes`: small keys need few nodes; it
  moved R and ∇R by ≤ 4.5e-11 on random states). The gradient contracts each pair's Price
  tangents inside the loop (:func:`_pair_terms`).
- Bayes-softmax: the token factors expand into the multi-head moments E Π_h g_{a_h}(w + s_h),
  computed along s_h = m_h + Σ_{k≤h} L_hk z_k (a Cholesky factor that tolerates singular C):
  heads 1..H−1 on ``n_bayes``-node grids, the last through its blurred kernel. The cost grows
  like n_w · n_bayes^{H−1} · A^H (A = 3, 5 with a gradient, 7 with a Hessian): fine for H ≤ 3,
  heavy at H = 4 (lower ``n_bayes``), out of reach beyond; see :func:`exact_risk`.

Derivatives: every Gaussian expectation has a ``jax.custom_jvp`` by Price's theorem,
dE f = E[∇f]·dm + ½ tr(dC E[∇²f]), evaluated by the same rule (g_a' = a g_a − g_{a+1}, so the
derivatives of e_a, F_ab are again e, F with a + 1, a + 2). No square root of Q is ever
differentiated: gradients and Jacobians are finite and correct at singular Q (identical heads,
keys inside span(K*), the Bayes construction). Softmax and softmax-1 with H ≥ 2 heads have
first and second derivatives only (the pair terms loop over pairs; see :func:`_pair_second`);
one head and Bayes-softmax, any order.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from headspec.core.latent import Spike
    >>> from headspec.core.attention import Softmax
    >>> M, Q, b = jnp.array([[2.0]]), jnp.array([[4.0]]), jnp.zeros(1)   # the head k = K*a
    >>> from headspec.core.model import Model
    >>> model = Model(Softmax(), Spike([2.0]), L=10)
    >>> r = exact_risk(M, Q, b, model)
    >>> round(float(r.mean), 4)      # one softmax head on the spike is Bayes-optimal
    0.2234
    >>> r = exact_risk(M, Q, b, model, certify=True)     # with an error bound (2 rules)
    >>> bool(r.err < 1e-9)
    True
    >>> from headspec.core.precision import float64_context
    >>> with float64_context():      # gradients, here at a singular Q (two heads)
    ...     M2, Q2 = jnp.array([[2.0], [2.0]]), jnp.full((2, 2), 4.0)
    ...     R = lambda Q: exact_risk(M2, Q, jnp.zeros(2), model).mean
    ...     g = jax.grad(R)(Q2)
    >>> bool(jnp.isfinite(g).all())
    True
"""

from __future__ import annotations

import functools
import itertools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.accuracy import SPACING, error_bound
from headspec.core.attention import BayesSoftmax, Softmax, Softmax1
from headspec.core.latent import Gaussian, LatentLaw
from headspec.core.model import Model
from headspec.core.multihead import moments_multi
from headspec.core.precision import float64
from headspec.core.quadrature import (
    PRICE_COMBOS,
    X_CUT,
    Quadrature,
    first_weight,
    moments1,
    moments2,
    pair_tables,
    price_parts,
    w_grid,
    z_upper,
)

Array = jax.Array
sg = jax.lax.stop_gradient


class ExactRisk(NamedTuple):
    mean: Array  # () R = E_θ R(θ)
    by_atom: Array  # (J,) risk given θ = a_j (discrete laws; empty otherwise)
    err: Array  # () error bound of ``mean`` (``certify=True``; NaN: not estimated)
    by_atom_err: Array  # (J,) error bounds of ``by_atom`` (NaN: not estimated)


# ------------------------------------------------------------------ the kernels g_a(x) = e^{ax−e^x}


def hidden_laws(M: Array, Q: Array, b: Array, law: LatentLaw):
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
def per_head_risk(M, Q, b, law, L, quad, *, kappa, c, sizes=None, within=None):
    """R given each hidden-token law (K,) for per-head normalisers (softmax, softmax-1).

    ``sizes`` (static): the rows are G groups of identical heads, group g standing for
    ``sizes[g]`` heads, two of whose keys have the overlap ``within[g]`` (= Q_gg, a coordinate
    of its own): R of Σ sizes heads from G(G + 1)/2 kinds of pairs (core.grouped)."""
    H = M.shape[0]
    n = np.ones(H) if sizes is None else np.asarray(sizes, np.float64)  # (G,) multiplicities
    hm, hC, _, _ = hidden_laws(M, Q, b, law)  # (K, H), (K, H, H)
    K = hm.shape[0]
    qd = jnp.diagonal(Q)  # (H,)
    hv = jnp.diagonal(hC, axis1=1, axis2=2)  # (K, H)
    # per-head w-grids
    tok_m = jnp.concatenate([b[None, :], hm], axis=0)  # (1+K, H): noise first
    tok_v = jnp.concatenate([qd[None, :], hv], axis=0)  # (1+K, H)
    grids = [w_grid(tok_m[:, h], tok_v[:, h], b[h], qd[h], L=L, kappa=kappa, quad=quad)
             for h in range(H)]  # fmt: skip
    w = jnp.stack([g[0] for g in grids])  # (H, n_w)
    om1 = jnp.stack([g[1] for g in grids])  # (H, n_w)
    om2 = jnp.stack([g[2] for g in grids])  # (H, n_w)
    kap = jnp.exp(-kappa * jnp.exp(w))  # (H, n_w)

    # one score per head and token: e[h, t, a, i]
    T = 1 + K
    e = moments1(
        tok_m.T.reshape(-1), tok_v.T.reshape(-1), jnp.repeat(w, T, axis=0), 3, quad.n_s,
        quad.window,
    ).reshape(H, T, 3, w.shape[1])  # fmt: skip
    en = e[:, 0]  # (H, 3, n_w) noise
    eh = e[:, 1:]  # (H, K, 3, n_w) hidden
    n0 = en[:, None, 0]  # (H, 1, n_w)
    EA0 = jnp.sum(om1[:, None] * kap[:, None] * eh[:, :, 1] * n0 ** (L - 1), -1)  # (H, K)
    EA0sq = jnp.sum(om2[:, None] * kap[:, None] * eh[:, :, 2] * n0 ** (L - 1), -1)  # (H, K)
    EA1sq = jnp.sum(
        om2[:, None] * kap[:, None] * en[:, None, 2] * n0 ** (L - 2) * eh[:, :, 0], -1
    )  # (H, K)
    sq = jnp.sum(n[:, None] * (EA0sq + (L - 1) * EA1sq), 0)  # (K,)

    pairs = list(itertools.combinations(range(H), 2))  # and a group's pairs with itself:
    pairs += [(g, g) for g in range(H) if n[g] > 1]
    cross = jnp.zeros(K, M.dtype)
    if pairs:
        ij = np.array(pairs)  # (P, 2)
        i1, i2 = ij[:, 0], ij[:, 1]
        mult = np.where(i1 == i2, n[i1] * (n[i1] - 1) / 2, n[i1] * n[i2])  # (P,) pairs of heads
        rows, cols = ij[:, :, None], ij[:, None, :]  # (P, 2, 1), (P, 1, 2)
        Qp = Q[rows, cols]  # (P, 2, 2); two heads of one group: their own overlap off-diagonal
        if within is not None:
            same = jnp.asarray(i1 == i2)[:, None, None] & ~jnp.eye(2, dtype=bool)
            Qp = jnp.where(same, within[i1][:, None, None], Qp)
        pm = jnp.concatenate([b[ij][:, None], jnp.swapaxes(hm[:, ij], 0, 1)], 1)  # (P, T, 2)
        if within is None:
            hp = jnp.swapaxes(hC[:, rows, cols], 0, 1)  # (P, K, 2, 2)
        else:  # a Gaussian law's hidden tokens: Q's block (with ``within``) + MΣMᵀ's
            hp = Qp[:, None] + jnp.swapaxes((hC - Q)[:, rows, cols], 0, 1)
        pC = jnp.concatenate([Qp[:, None], hp], 1)  # (P, T, 2, 2)
        omp = om1[i1][:, :, None] * om1[i2][:, None, :]  # (P, n_w, n_w)
        kp = kap[i1][:, :, None] * kap[i2][:, None, :]  # (P, n_w, n_w)
        terms = _pair_terms(pm, pC, sg(w[i1]), sg(w[i2]), sg(omp * kp), L, quad)  # (P, K)
        cross = 2.0 * jnp.sum(jnp.asarray(mult)[:, None] * terms, 0)  # (K,)
    return 0.5 * c**2 * (sq + cross) - c * jnp.sum(n[:, None] * EA0, 0) + 0.5  # (K,)


def _pair_sum(F: Array, wgt: Array, L: int) -> Array:
    """One pair's cross terms Σ_ij wgt·[F¹¹_hid (F⁰⁰_noi)^{L−1} + (L−1) F¹¹_noi (F⁰⁰_noi)^{L−2}
    F⁰⁰_hid] per hidden-token law, from its tokens' tables F (T, 2, 2, n_w, n_w) (noise first)
    and the weights wgt (n_w, n_w) of its two log-u grids: (K,)."""
    n00, n11 = F[0, 0, 0], F[0, 1, 1]  # (n_w, n_w)
    h00, h11 = F[1:, 0, 0], F[1:, 1, 1]  # (K, n_w, n_w)
    t0 = jnp.sum(wgt * h11 * n00 ** (L - 1), (-2, -1))  # (K,)
    t1 = jnp.sum(wgt * n11 * n00 ** (L - 2) * h00, (-2, -1))  # (K,)
    return t0 + (L - 1) * t1


def _pair_coefficients(F: Array, wgt: Array, L: int) -> tuple[Array, Array]:
    """One pair's :func:`_pair_sum` (K,) and its derivatives along each token's score law
    (K, T, 5): along m₁, m₂, C₁₁/2, C₂₂/2 and (C₁₂ + C₂₁)/2, from its tables up to order 4,
    F (T, 4, 4, n_w, n_w) (Price's theorem: :func:`~headspec.core.quadrature.price_parts`)."""
    val, pull = jax.vjp(lambda F: _pair_sum(F, wgt, L), F[:, :2, :2])
    G = jax.vmap(pull)(jnp.eye(val.shape[0], dtype=val.dtype))[0]  # (K, T, 2, 2, n_w, n_w)
    parts = jnp.stack(price_parts(F, 2), 1)  # (T, 5, 2, 2, n_w, n_w)
    return val, jnp.einsum("ktabij,tqabij->ktq", G, parts)


def _pair_loop(fn, m, C, w, v, wgt):
    """``fn(m, C, w, v, wgt)`` of each pair in turn, the grids broadcast over its tokens."""

    def one(x):
        m, C, w, v, wgt = x
        T = m.shape[0]
        return fn(m, C, jnp.broadcast_to(w, (T, w.size)), jnp.broadcast_to(v, (T, v.size)), wgt)

    return jax.lax.map(one, (m, C, sg(w), sg(v), sg(wgt)))


@functools.partial(jax.custom_jvp, nondiff_argnums=(5, 6))
def _pair_terms(m, C, w, v, wgt, L: int, quad: Quadrature) -> Array:
    """:func:`_pair_sum` of every pair of heads: its tokens' score laws m (P, T, 2), C (P, T, 2, 2)
    (noise first), its heads' log-u grids w, v (P, n_w) and their weights wgt (P, n_w, n_w),
    which carry no derivative (functions of the state under stop_gradient; their tangents are
    not used): (P, K).

    One pair after another, and so is the JVP (:func:`_pair_derivatives`): each pair's Price
    tangents are contracted with ∂(its terms)/∂F inside the loop, leaving 5 numbers per token
    and hidden law. Formed for all pairs at once (as :func:`~headspec.core.quadrature.moments2`'s
    own JVP does), those tangents were (P, T, 2, 2, n_w, n_w) arrays (26 MB each at H = 16),
    and allocating and walking them cost as much as the tables: ∇R at H = 16 took 3.7× longer.
    The loops call the tables without their custom JVP (a ``jax.custom_jvp`` inside
    ``lax.map`` loses its second derivative: JAX 0.10, both orders of nesting); second and
    higher derivatives go through :func:`_pair_derivatives`'s JVP instead."""
    tables = functools.partial(pair_tables, A=2, quad=quad, combos=((0, 0), (1, 1)))
    return _pair_loop(lambda m, C, w, v, wgt: _pair_sum(tables(m, C, w, v), wgt, L),
                      m, C, w, v, wgt)  # fmt: skip


@_pair_terms.defjvp
def _pair_terms_jvp(L, quad, primals, tangents):
    dm, dC = tangents[:2]  # (P, T, 2), (P, T, 2, 2); the grids' tangents are zero (see above)
    val, coef = _pair_derivatives(*primals, L, quad)  # (P, K), (P, K, T, 5)
    cross = dC[..., 0, 1] + dC[..., 1, 0]  # (P, T)
    tan = jnp.stack(
        [dm[..., 0], dm[..., 1], 0.5 * dC[..., 0, 0], 0.5 * dC[..., 1, 1], 0.5 * cross], -1
    )  # (P, T, 5)  fmt: skip
    return val, jnp.einsum("pktq,ptq->pk", coef, tan)


@functools.partial(jax.custom_jvp, nondiff_argnums=(5, 6))
def _pair_derivatives(m, C, w, v, wgt, L: int, quad: Quadrature) -> tuple[Array, Array]:
    """:func:`_pair_coefficients` of every pair, one after another: (P, K), (P, K, T, 5). Its
    derivative (a second derivative of R: Jacobians of the drift), :func:`_pair_second`, goes
    one pair at a time too, so a Jacobian's tangents hold one pair's tables each (the all-pairs
    form needed 5 GB for a Jacobian at H = 8, ~90 GB at H = 16)."""
    tables = functools.partial(pair_tables, A=4, quad=quad, combos=PRICE_COMBOS)
    return _pair_loop(lambda m, C, w, v, wgt: _pair_coefficients(tables(m, C, w, v), wgt, L),
                      m, C, w, v, wgt)  # fmt: skip


@_pair_derivatives.defjvp
def _pair_derivatives_jvp(L, quad, primals, tangents):
    return _pair_second(*primals, *tangents[:2], L, quad)


@functools.partial(jax.custom_jvp, nondiff_argnums=(7, 8))
def _pair_second(m, C, w, v, wgt, dm, dC, L: int, quad: Quadrature):
    """:func:`_pair_derivatives` and its tangent along (dm, dC), pair by pair. A third derivative
    of R would differentiate this (the tables' custom JVP inside ``lax.map``: it would be 0), so
    forward mode raises; reverse mode (grad∘grad∘grad) still gives 0: not supported."""

    def one_pair(m, C, w, v, wgt):  # (T, 2), (T, 2, 2), (n_w,) ×2, (n_w, n_w)
        T = m.shape[0]
        W, V = (jnp.broadcast_to(x, (T, x.size)) for x in (w, v))  # (T, n_w)
        return _pair_coefficients(moments2(m, C, W, V, 4, quad), wgt, L)

    def each(x):
        m, C, w, v, wgt, dm, dC = x
        zero = jnp.zeros_like  # the grids and weights carry no derivative (see _pair_terms)
        return jax.jvp(one_pair, (m, C, sg(w), sg(v), sg(wgt)),
                       (dm, dC, zero(w), zero(v), zero(wgt)))  # fmt: skip

    return jax.lax.map(each, (m, C, w, v, wgt, dm, dC))


@_pair_second.defjvp
def _pair_second_jvp(L, quad, primals, tangents):
    raise NotImplementedError(
        "third and higher derivatives of the exact risk's pair terms are not available (its "
        "second derivatives go one pair at a time, inside lax.map); gradients and Hessians are"
    )


# --------------------------------------------------- all heads at one w: E Π_h g_{a_h}(w + s_h)
def _bayes_risk(M, Q, b, law, L, quad, *, c, factor=None, n_z=0):
    """R given each hidden-token law (K,) for Bayes-softmax: one softmax over tokens of the
    scores y_l = log Σ_h e^{s_hl}, whose token factors are E g_a(w + y), a = 0, 1, 2. With
    S = Σ_h e^{w+s_h}: g_0(w + y) = e^{−S} = Π_h g_0(w + s_h), g_1(w + y) = S e^{−S},
    g_2(w + y) = S² e^{−S}.

    Without ``factor`` they expand into the multi-head moments E Π_h g_{a_h}(w + s_h)
    (:func:`~headspec.core.multihead.moments_multi`: differentiable, cost n_bayes^{H−1}).
    With ``factor`` B (H, r), B Bᵀ = Q, of a discrete law (every token's covariance is Q):
    s = m + B z, z ~ N(0, I_r) on a tensor trapezoid grid of ``n_z`` nodes per axis, and S e^{−S}
    etc. evaluated there directly — cost n_z^r · H per token law and w, whatever H (no
    derivatives: B is a concrete factor)."""
    H = M.shape[0]
    hm, hC, _, _ = hidden_laws(M, Q, b, law)  # (K, H), (K, H, H)
    K = hm.shape[0]
    # w-grid from y ∈ [max_h s_h, max_h s_h + log H]
    sdq = jnp.sqrt(jnp.maximum(jnp.diagonal(Q), 0.0))  # (H,)
    sdh = jnp.sqrt(jnp.maximum(jnp.diagonal(hC, axis1=1, axis2=2), 0.0))  # (K, H)
    top = jnp.maximum(jnp.max(b + quad.window * sdq), jnp.max(hm + quad.window * sdh))
    bottom = jnp.max(b - z_upper(max(L - 2, 1)) * sdq)  # y ≥ s_h for every h
    lo = sg(-top - np.log(H) - quad.tail)
    hi = sg(jnp.maximum(X_CUT - bottom, lo + 1.0))
    nw = quad.n_w_bayes
    w = jnp.linspace(lo, hi, nw, dtype=M.dtype)  # (n_w,)
    h = w[1] - w[0]
    base = jnp.full((nw,), h).at[-1].set(0.5 * h)
    om1 = base.at[0].set(first_weight(h, 1.0))
    om2 = base.at[0].set(first_weight(h, 2.0))
    tok_m = jnp.concatenate([b[None], hm])  # (1+K, H): noise first
    if factor is None:
        tok_C = jnp.concatenate([Q[None], hC])  # (1+K, H, H)
        W = jnp.broadcast_to(w, (1 + K, nw))
        T = moments_multi(tok_m, tok_C, W, 3, quad)  # (1+K, 3…3, n_w)
        zero = (0,) * H
        unit = [tuple(int(j == i) for j in range(H)) for i in range(H)]
        e0 = T[(slice(None), *zero)]  # (1+K, n_w)
        e1 = sum(T[(slice(None), *u)] for u in unit)
        e2 = sum(T[(slice(None), *(x + y for x, y in zip(u, v, strict=True)))]
                 for u in unit for v in unit)  # fmt: skip
    else:
        e0, e1, e2 = _low_rank_factors(tok_m, factor, w, n_z, quad.window)  # (1+K, n_w) ×3
    en, eh = (e0[0], e1[0], e2[0]), (e0[1:], e1[1:], e2[1:])
    n0 = en[0]  # (n_w,)
    EA0 = jnp.sum(om1 * eh[1] * n0 ** (L - 1), -1)  # (K,)
    EA0sq = jnp.sum(om2 * eh[2] * n0 ** (L - 1), -1)  # (K,)
    EA1sq = jnp.sum(om2 * en[2] * n0 ** (L - 2) * eh[0], -1)  # (K,)
    return 0.5 * c**2 * (EA0sq + (L - 1) * EA1sq) - c * EA0 + 0.5  # (K,)


def _low_rank_factors(tok_m: Array, B: Array, w: Array, n_z: int, window: float):
    """E[S^a e^{−S}], S = Σ_h e^{w + s_h}, s = m + B z, a = 0, 1, 2, per token law and w:
    (1+K, n_w) ×3, on the tensor trapezoid grid of n_z nodes per axis of z ∈ [−window, window]^r
    (normalised Gaussian weights), one w at a time (memory n_z^r · H)."""
    r = B.shape[1]
    z1 = jnp.linspace(-window, window, n_z, dtype=B.dtype)  # (n_z,)
    p1 = jnp.exp(-0.5 * z1**2)
    p1 = p1 / p1.sum()
    grids = jnp.meshgrid(*([z1] * r), indexing="ij")
    Z = jnp.stack([g.ravel() for g in grids], 1)  # (n_z^r, r)
    P = functools.reduce(jnp.multiply, jnp.meshgrid(*([p1] * r), indexing="ij")).ravel()
    X = tok_m[:, None, :] + (Z @ B.T)[None]  # (1+K, n_z^r, H) scores
    c = jnp.max(X)  # e^{w + x} = e^{w + c} e^{x − c}: no overflow before the sum
    E = jnp.exp(X - c)  # (1+K, n_z^r, H)
    Esum = E.sum(-1)  # (1+K, n_z^r)

    def at(wi):  # (1+K,) ×3 at one w
        S = jnp.minimum(jnp.exp(jnp.clip(wi + c, -300.0, 300.0)) * Esum, 1e20)  # (1+K, n_z^r)
        g0 = jnp.exp(-S) * P
        return g0.sum(-1), (S * g0).sum(-1), (S * S * g0).sum(-1)

    e0, e1, e2 = jax.lax.map(at, w)  # (n_w, 1+K) ×3
    return e0.T, e1.T, e2.T


def low_rank_factor(Q, tol: float = 1e-10) -> np.ndarray:
    """B (H, r) with B Bᵀ = Q for a concrete PSD Q, r its numerical rank (eigenvalues above
    tol·max): the factor of :func:`_bayes_risk`'s low-rank route."""
    vals, vecs = np.linalg.eigh(0.5 * (np.asarray(Q) + np.asarray(Q).T))
    keep = vals > tol * max(float(vals.max()), 1e-300)
    return vecs[:, keep] * np.sqrt(vals[keep])


# ----------------------------------------------------------------------------------- the API
@eqx.filter_jit
def _exact_risk(M, Q, b, model: Model, quad: Quadrature):
    activation, law, L = model.activation, model.law, model.L
    H = M.shape[0]
    c = activation.head_weight(H)
    if isinstance(activation, BayesSoftmax) and H > 1:
        per = _bayes_risk(M, Q, b, law, L, quad, c=c)
    elif isinstance(activation, BayesSoftmax):  # one head: a softmax head
        per = per_head_risk(M, Q, b, law, L, quad, kappa=0.0, c=c)
    else:
        kappa = activation.extra_logit
        per = per_head_risk(M, Q, b, law, L, quad, kappa=kappa, c=c)
    _, _, weights, atoms = hidden_laws(M, Q, b, law)
    return weights @ per, per if atoms else jnp.zeros((0,), per.dtype)  # (), (J,)


@float64
def exact_risk(
    M: Array,
    Q: Array,
    b: Array,
    model: Model,
    quad: Quadrature = Quadrature(),
    *,
    certify: bool = False,
) -> ExactRisk:
    """The D → ∞ population risk R(M, Q, b) of SPEC §4 by deterministic quadrature.

    M (H, F), Q (H, H) (PSD, singular allowed; entries treated as independent), b (H,); the
    ``model``'s L ≥ 2 tokens, a discrete (spike, flipped spike) or Gaussian law and softmax,
    softmax-1 or Bayes-softmax with either aggregation. Jitted (one compilation per shapes,
    activation, law family, L and ``quad``); gradients and Hessians in M, Q, b by ``jax.grad``/
    ``jax.jacfwd`` (higher orders: see the module). ``by_atom`` is R given θ = a_j for discrete
    laws (empty for a Gaussian law).

    ``certify``: also evaluate the rule :meth:`~headspec.core.quadrature.Quadrature.refined`
    (≈ 2–3× the cost) and give ``err``/``by_atom_err`` as
    :func:`~headspec.core.accuracy.error_bound` of the two (else NaN: not estimated).

    Bayes-softmax with H ≥ 2 heads costs n_w_bayes · n_bayes^{H−1} · 25 numbers per token law with
    a gradient; beyond 5e7 (H ≥ 4 at the default nodes) a discrete law's risk takes the low-rank
    route instead where it can: every token's covariance is Q, so with Q = B Bᵀ of rank r the
    scores are m + Bz, z ∈ R^r, and the cost is n_z^r · H per token law and w — polynomial in H
    (the constructed Bayes-softmax of J atoms in F dimensions has r ≤ F). That route needs
    concrete arguments (no gradient through it); where it does not apply (a traced or full-rank
    Q too large for it, a Gaussian law) the call is refused, naming the size.
    """
    activation, law, L = model.activation, model.law, model.L
    if L < 2:
        raise ValueError(f"L must be ≥ 2, got {L}")
    if not isinstance(activation, Softmax | Softmax1 | BayesSoftmax):
        raise TypeError(f"no exact risk for activation {type(activation).__name__}")
    if not (isinstance(law, Gaussian) or law.n_atoms):
        raise TypeError(f"exact_risk needs a discrete or Gaussian law, got {type(law).__name__}")
    H = np.shape(M)[0]
    work = quad.n_w_bayes * quad.n_bayes ** (H - 1) * 25
    low_rank = isinstance(activation, BayesSoftmax) and H > 1 and work > 5e7
    if low_rank and _low_rank_nodes(M, Q, law, quad) is None:
        raise ValueError(
            f"Bayes-softmax with H = {H} heads would need {work:.2g} numbers per token law "
            f"(n_w_bayes·n_bayes^(H−1)·25), and the low-rank route does not apply (it needs a "
            f"discrete law and a concrete Q of low rank); pass Quadrature(n_bayes=…) with "
            f"fewer nodes"
        )
    M = jnp.asarray(M, jnp.float64)
    Q = jnp.asarray(Q, jnp.float64)
    b = jnp.asarray(b, jnp.float64).reshape(M.shape[0])

    def evaluate(quad: Quadrature):
        if not low_rank:
            return _exact_risk(M, Q, b, model, quad)
        B, n_z = _low_rank_nodes(M, Q, law, quad)
        return _low_rank_risk(M, Q, b, jnp.asarray(B, jnp.float64), model=model, quad=quad, n_z=n_z)

    mean, by_atom = evaluate(quad)
    if not certify:
        nan = jnp.nan
        return ExactRisk(mean, by_atom, jnp.full_like(mean, nan), jnp.full_like(by_atom, nan))
    err = error_bound((mean, by_atom), evaluate(quad.refined()))
    return ExactRisk(mean, by_atom, *err)


LOW_RANK_SIZE = 2e7  # the low-rank route's largest grid: n_z^r · H · (1 + atoms) numbers


def _low_rank_nodes(M, Q, law, quad: Quadrature):
    """(B, n_z) of the low-rank route, or None where it does not apply (a traced argument, a
    Gaussian law, a grid above :data:`LOW_RANK_SIZE`). n_z: the score grids' spacing rule
    (≤ SPACING along every axis of z), at least ``n_bayes``, scaled by n_bayes/64 so that a
    refined rule refines z too."""
    if isinstance(Q, jax.core.Tracer) or isinstance(M, jax.core.Tracer) or not law.n_atoms:
        return None
    B = low_rank_factor(Q)  # (H, r)
    H, r = B.shape
    reach = 2 * quad.window * float(np.abs(B).max(initial=0.0)) / SPACING + 1
    n_z = int(np.ceil(max(quad.n_bayes, reach * quad.n_bayes / 64)))
    if n_z**r * H * (1 + law.n_atoms) > LOW_RANK_SIZE:
        return None
    return B, n_z


@eqx.filter_jit
def _low_rank_risk(M, Q, b, B, *, model: Model, quad: Quadrature, n_z: int):
    """:func:`exact_risk` of Bayes-softmax heads by the low-rank route (see there)."""
    H = M.shape[0]
    c = model.activation.head_weight(H)
    per = _bayes_risk(M, Q, b, model.law, model.L, quad, c=c, factor=B, n_z=n_z)
    _, _, weights, _ = hidden_laws(M, Q, b, model.law)
    return weights @ per, per  # (), (J,)
