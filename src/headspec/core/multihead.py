"""All heads of a Bayes-softmax at once: the multi-head moments E Π_h g_{a_h}(w + s_h) of one
token's scores s ~ N(m, C), with Price's-theorem derivatives (the rule is described in
:mod:`headspec.core.exact`; the one-head and pair moments are in :mod:`headspec.core.quadrature`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from headspec.core.quadrature import Quadrature, blurred_at, expo, g_of, per_token

Array = jax.Array
sg = jax.lax.stop_gradient


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
    (:func:`blurred_at`). Cost: n_w · n_bayes^{H−1} · A² per token."""
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
    X = blurred_at(w.reshape((-1,) + (1,) * (H - 1)) + mu[None], Lc[H - 1, H - 1], A, quad)
    # X: (A, n_w, n, …, n); contract the node axes from the last head backwards
    letters = "bcdefghopqrstuvxyz"
    for h in range(H - 2, -1, -1):
        s = coord(h, h + 1)  # (n,)*(h+1)
        c = jnp.mean(w)
        E = expo(w - c).reshape((-1,) + (1,) * (h + 1)) * expo(s + c)[None]  # (n_w, n…)
        G = g_of(E, A)  # (A, n_w, n, …, n)
        B = letters[: H - 1 - h]  # the multi-index axes of the later heads
        K = letters[-(h + 1) :]  # node axes k_0..k_h (last one summed)
        X = jnp.einsum(f"aw{K},{B}w{K},{K[-1]}->a{B}w{K[:-1]}", G, X, p)
    return X  # (A,)*H + (n_w,)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4))
def moments_multi(m: Array, C: Array, w: Array, A: int, quad: Quadrature) -> Array:
    """T[t, a_1..a_H, i] = E Π_h g_{a_h}(w[t, i] + s_h), s ~ N(m[t], C[t]): (T, A…A, n_w)."""
    return per_token(functools.partial(_multi_table, A=A, quad=quad), sg(m), sg(C), sg(w))


@moments_multi.defjvp
def _moments_multi_jvp(A, quad, primals, tangents):
    m, C, w = primals
    dm, dC, dw = tangents
    H = m.shape[1]
    F = moments_multi(m, C, w, A + 2, quad)  # (T, (A+2)×H, n_w)

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
