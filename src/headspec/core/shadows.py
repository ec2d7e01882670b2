"""Exact means of the η² term's two shadows (SPEC §5): T = E[Σ_l g_l g_lᵀ] for heads made identical
and for heads made independent, each by one-dimensional quadratures.

:mod:`headspec.dynamics.eta2` estimates T by sampling the L score vectors s_l ∈ R^H; these are
the exact means of two control variates it samples beside T on the same points:

- the **symmetric shadow** (:func:`symmetric_eta2`): the integrand for H identical heads whose
  scores are the heads' mean score x_l = mean_h s_hl. For identical heads T = t·11ᵀ with
  t = γ² E[Σ_l p_l² (r_l − ρ)²], a combination of E[p_0^j Π_i S_{k_i}], S_k = Σ_l p_l^k, each
  expanded over coinciding tokens into products of per-token moments of the u-integral
  1/Z^K = ∫ u^{K−1} e^{−uZ} du / Γ(K) (:func:`headspec.core.quadrature.moments1`). Exactly T
  when the heads are identical (a common phase);
- the **independent shadow** (:func:`independent_eta2`): the integrand for heads whose scores
  are independent across heads, head h's with its own variance. The polynomial in the weights is
  expanded over coinciding tokens; each head's factor is one w-integral (per head for softmax and
  softmax-1, one shared integral for Bayes-softmax's joint normaliser). Exactly T when Q (and the
  hidden token's covariance) is diagonal.

Both are exact over a discrete law's atoms; a Gaussian law is folded into the hidden token.

Example (identical heads: the symmetric shadow is T; with H = 1 both shadows are T):
    >>> import numpy as np
    >>> from headspec.core.attention import Softmax
    >>> from headspec.core.latent import Discrete
    >>> law = Discrete(3.0 * np.eye(3), [0.5, 0.3, 0.2])
    >>> m = np.array([[1.0, 0.8, 0.5]])
    >>> from headspec.core.model import Model
    >>> model = Model(Softmax(), law, L=6)
    >>> t = symmetric_eta2(m, m @ m.T + 0.3, np.zeros(1), model)
    >>> T = independent_eta2(m, m @ m.T + 0.3, np.zeros(1), model)
    >>> T.shape, bool(abs(float(T[0, 0]) - float(t)) < 1e-9 * float(t)), float(t) > 0
    ((1, 1), True, True)
"""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.attention import Activation, BayesSoftmax, Softmax, Softmax1
from headspec.core.latent import Gaussian, LatentLaw
from headspec.core.model import Model
from headspec.core.precision import float64
from headspec.core.quadrature import X_CUT, Quadrature, first_weight, moments1, w_grid, z_upper

Array = jax.Array
sg = jax.lax.stop_gradient


# ------------------------------------------------------------------------- shared constants
def head_constants(activation: Activation, H: int):
    """(κ, β, γ, joint): per-head normaliser κ + Σ e^s; for identical heads W = β p and
    g = γ p (r − ρ); ``joint`` for Bayes-softmax's one normaliser over heads and tokens."""
    c = activation.head_weight(H)
    if isinstance(activation, BayesSoftmax):
        return 0.0, c, c / H, True
    if isinstance(activation, Softmax1):
        return 1.0, c * H, c, False
    if isinstance(activation, Softmax):
        return 0.0, c * H, c, False
    raise TypeError(f"no η² shadow for activation {type(activation).__name__}")


def token_laws(M: Array, Q: Array, b: Array, law: LatentLaw):
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


def symmetric_mean(M, Q, b, model: Model, quad: Quadrature) -> Array:
    """:func:`symmetric_eta2` without its float64 entry (traceable: called inside jit)."""
    activation, law, L = model.activation, model.law, model.L
    H = M.shape[0]
    kappa, beta, gamma, _ = head_constants(activation, H)
    hm, Ch, _, wts = token_laws(M, Q, b, law)
    one = jnp.ones(H, M.dtype) / H
    mh, vh = hm @ one, jnp.full(hm.shape[0], one @ Ch @ one)  # (K,) ×2: the shadow's laws
    mn, vn = jnp.mean(b), one @ Q @ one
    K = mh.shape[0]
    w, _, _ = w_grid(jnp.concatenate([mn[None], mh]), jnp.concatenate([vn[None], vh]),
                      mn, vn, L=L, kappa=kappa, quad=quad)  # fmt: skip
    h = w[1] - w[0]
    base = jnp.full(w.shape, h).at[-1].set(0.5 * h)
    kap = jnp.exp(-kappa * jnp.exp(w))  # (n_w,)
    e = moments1(
        jnp.concatenate([mn[None], mh]), jnp.concatenate([vn[None], vh]),
        jnp.broadcast_to(w, (1 + K, w.shape[0])), A_MAX, quad.n_s, quad.window,
    )  # fmt: skip
    en, eh = e[0], e[1:]  # (A, n_w), (K, A, n_w)

    def moment(j: int, powers: list[int]) -> Array:
        """E[p_0^j Σ_{distinct l_1..l_m} Π_i p_{l_i}^{P_i}] per atom (K,)."""
        m, tot = len(powers), j + sum(powers)
        wt = base.at[0].set(first_weight(h, tot)) * kap / math.gamma(tot)
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
    M: Array, Q: Array, b: Array, model: Model, quad: Quadrature = Quadrature()
) -> Array:
    """E of the symmetric shadow: T (a scalar t, T = t·11ᵀ) for H identical heads whose scores
    are the mean head's, x_l = mean_h s_hl (noise N(b̄, 1ᵀQ1/H²), hidden N(mean_h(Mθ + b),
    1ᵀC1/H²), C the hidden covariance). Exactly T itself when the heads are identical."""
    M, Q, b = (jnp.asarray(x, jnp.float64) for x in (M, Q, b))
    return _symmetric_jit(M, Q, b, model, quad)


_symmetric_jit = eqx.filter_jit(symmetric_mean)


# ------------------------------------------------ the exact T of independent heads
@functools.cache
def _independent_table(H: int, L: int, joint: bool, c: float):
    """T_hk for independent heads as Σ_n coef_n · E[Π_h (head h's pattern n)]: the patterns'
    pair (N,), per-head signature index (N, H), coefficient (N,) and the signatures
    (hidden power, noise powers): each a distinct-token moment E[a_0^j Π_B a_{l_B}^{P_B}] of one
    head's weights. Built by expanding c² Σ_l a_hl a_kl (r_l − ρ_h)(r_l − ρ_k), r_l =
    c Σ_j a_jl − 1[l=0], ρ_h = Σ_m (a_hm or Σ_j a_jm) r_m, over the set partitions of the token
    sums (which indices coincide) and the places of the hidden token."""

    def r(slot):
        return [(c, ((j, slot),), frozenset()) for j in range(H)] + [(-1.0, (), frozenset([slot]))]

    def rho(h, slot):
        return [(cf, ((j, slot), *fs), ds) for j in (range(H) if joint else [h])
                for cf, fs, ds in r(slot)]  # fmt: skip

    def mul(A, B):
        return [(a[0] * b[0], a[1] + b[1], a[2] | b[2]) for a in A for b in B]

    def minus(A, B):
        return A + [(-x[0], x[1], x[2]) for x in B]

    acc: dict = {}
    pairs = [(h, k) for h in range(H) for k in range(h, H)]
    for pi, (h, k) in enumerate(pairs):
        terms = mul(
            mul([(c * c, ((h, "l"), (k, "l")), frozenset())], minus(r("l"), rho(h, "m"))),
            minus(r("l"), rho(k, "n")),
        )
        for cf, fs, ds in terms:
            slots = sorted({x for _, x in fs} | set(ds))
            for part in _partitions(slots):
                t = len(part)
                fixed = [i for i, B in enumerate(part) if set(B) & ds]  # must be the hidden token
                if len(fixed) > 1:
                    continue
                if fixed:
                    cases = [(fixed[0], _falling(L - 1, t - 1))]
                else:
                    cases = [(None, _falling(L - 1, t))]
                    cases += [(i, _falling(L - 1, t - 1)) for i in range(t)]
                for hid, count in cases:
                    if count == 0:
                        continue
                    sigs = []
                    for hh in range(H):
                        pw = [sum(1 for j, x in fs if j == hh and x in B) for B in part]
                        noise = tuple(sorted(P for i, P in enumerate(pw) if i != hid and P))
                        sigs.append((pw[hid] if hid is not None else 0, noise))
                    key = (pi, tuple(sigs))
                    acc[key] = acc.get(key, 0.0) + cf * count
    acc = {k: v for k, v in acc.items() if v != 0.0}
    signatures = sorted({sg_ for _, ss in acc for sg_ in ss})
    index = {sg_: i for i, sg_ in enumerate(signatures)}
    pair = np.array([k[0] for k in acc], np.int32)  # (N,)
    sig = np.array([[index[x] for x in k[1]] for k in acc], np.int32)  # (N, H)
    coef = np.array(list(acc.values()))  # (N,)
    return pair, sig, coef, signatures


def _signature_factors(eh, en, w, signatures, L):
    """F[h, J, S, n_w] = E over head h's tokens of the pattern's product of g-kernels at w:
    hidden e_j · Π_B noise e_{P_B} · (noise e_0)^{L−1−#B}; and each signature's power K (S,)."""
    S = len(signatures)
    width = max(1, max(len(x[1]) for x in signatures))
    A = en.shape[1]
    js = np.array([x[0] for x in signatures])  # (S,)
    pads = np.full((S, width), A)  # index A: a factor 1
    for i, (_, noise) in enumerate(signatures):
        pads[i, : len(noise)] = noise
    rest = np.array([L - 1 - len(x[1]) for x in signatures])  # (S,)
    K = np.array([x[0] + sum(x[1]) for x in signatures])  # (S,)
    en1 = jnp.concatenate([en, jnp.ones_like(en[:, :1])], 1)  # (H, A+1, n_w)
    noise = jnp.prod(en1[:, pads], 2) * en[:, None, 0] ** rest[None, :, None]  # (H, S, n_w)
    return eh[:, :, js] * noise[:, None], K  # (H, J, S, n_w), (S,)


def _tail_weights(w: Array, K: np.ndarray) -> Array:
    """Trapezoid weights on the uniform grid w (…, n_w) for integrands ∝ e^{Kw} below it,
    divided by Γ(K): (…, S, n_w) for the powers K (S,) (K = 0: the grid is not used)."""
    h = (w[..., 1] - w[..., 0])[..., None, None]  # (…, 1, 1)
    Kf = jnp.asarray(np.maximum(K, 1), w.dtype)[:, None]  # (S, 1)
    base = jnp.ones((*w.shape[:-1], len(K), w.shape[-1]), w.dtype) * h
    base = base.at[..., -1].multiply(0.5)
    base = base.at[..., 0].set(first_weight(h, Kf)[..., 0])
    return base / jnp.asarray([math.gamma(max(k, 1)) for k in K], w.dtype)[:, None]


def independent_mean(M, Q, b, model: Model, quad: Quadrature) -> Array:
    """:func:`independent_eta2` without its float64 entry (traceable: called inside jit)."""
    activation, law, L = model.activation, model.law, model.L
    H = M.shape[0]
    kappa, _, _, joint = head_constants(activation, H)
    cf = activation.head_weight(H)
    hm, Ch, _, wts = token_laws(M, Q, b, law)  # (J, H), (H, H), _, (J,)
    J = hm.shape[0]
    vn, vh = jnp.diagonal(Q), jnp.diagonal(Ch)  # (H,) ×2
    pair, sig, coef, signatures = _independent_table(H, int(L), joint, cf)
    tok_m = jnp.concatenate([b[None], hm], 0).T  # (H, 1+J): noise first
    tok_v = jnp.concatenate([vn[None], jnp.broadcast_to(vh, (J, H))], 0).T  # (H, 1+J)
    if joint:  # one grid for the joint normaliser (as core.exact's Bayes-softmax)
        sd = jnp.sqrt(jnp.maximum(tok_v, 0.0))
        lo = sg(-jnp.max(tok_m + quad.window * sd) - np.log(H) - quad.tail)
        bottom = jnp.max(b - z_upper(max(L - 2, 1)) * sd[:, 0])
        hi = sg(jnp.maximum(X_CUT - bottom, lo + 1.0))
        w = jnp.broadcast_to(
            jnp.linspace(lo, hi, quad.n_w_bayes, dtype=M.dtype), (H, quad.n_w_bayes)
        )
    else:
        w = jnp.stack([w_grid(tok_m[h], tok_v[h], b[h], vn[h], L=L, kappa=kappa, quad=quad)[0]
                       for h in range(H)])  # fmt: skip
    n_w = w.shape[-1]
    e = moments1(
        tok_m.reshape(-1), tok_v.reshape(-1), jnp.repeat(w, 1 + J, axis=0), A_MAX, quad.n_s,
        quad.window,
    ).reshape(H, 1 + J, A_MAX, n_w)  # fmt: skip
    F, K = _signature_factors(e[:, 1:], e[:, 0], w, signatures, L)  # (H, J, S, n_w), (S,)
    if joint:
        Kn = K[sig].sum(1)  # (N,)
        om = _tail_weights(w[0], Kn)  # (N, n_w)
        prod = om[None]
        for h in range(H):
            prod = prod * F[h][:, sig[:, h]]  # (J, N, n_w)
        value = jnp.sum(prod, -1)  # (J, N)
    else:
        om = _tail_weights(w, K) * jnp.exp(-kappa * jnp.exp(w))[:, None]  # (H, S, n_w)
        I = jnp.sum(om[:, None] * F, -1)  # (H, J, S)
        I = jnp.where(jnp.asarray(K == 0)[None, None], 1.0, I)
        value = math.prod(I[h][:, sig[:, h]] for h in range(H))  # (J, N)
    P = H * (H + 1) // 2
    t = jax.ops.segment_sum((value * coef[None]).T, pair, num_segments=P)  # (P, J)
    iu, ju = np.triu_indices(H)
    v = t @ wts  # (P,)
    return jnp.zeros((H, H), M.dtype).at[iu, ju].set(v).at[ju, iu].set(v)


@float64
def independent_eta2(
    M: Array, Q: Array, b: Array, model: Model, quad: Quadrature = Quadrature()
) -> Array:
    """E of the independent shadow (H, H): T for heads whose scores are independent across
    heads, head h's with its own variance (noise N(b_h, Q_hh), hidden N((Mθ + b)_h, C_hh)).
    Exactly T itself when Q (and the hidden covariance) is diagonal. Every head's moments are
    one-dimensional w-integrals (per head for softmax and softmax-1, one shared integral over
    all heads for Bayes-softmax)."""
    M, Q, b = (jnp.asarray(x, jnp.float64) for x in (M, Q, b))
    return _independent_jit(M, Q, b, model, quad)


_independent_jit = eqx.filter_jit(independent_mean)
