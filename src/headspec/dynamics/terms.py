"""What one state and one sample contribute to the drift of SPEC §5: the order parameters, the
drift with its errors, and the per-sample terms (split out of :mod:`headspec.dynamics.problem`,
which re-exports every name here).

With g_hl = ∂ℓ/∂s_hl of the per-sample loss ℓ(s) = ½ Σ_l (W_l(s) − 1[l=0])², one sample's
increment ψ (its mean is the drift) is, on the flat layout (M row-major, all H² entries of Q, b)
of :func:`flatten`,

    ψ_M = −η Σ_l g_l ν_lᵀ,   ψ_Q = −η Σ_l (g_l λ_lᵀ + λ_l g_lᵀ) + η² Σ_l g_l g_lᵀ,
    ψ_b = −η_b Σ_l g_l,

written once: :func:`expect_terms` (g by ``jax.grad``) and :func:`increment`.

Example:
    >>> import jax.numpy as jnp
    >>> st = OrderParameters(M=jnp.ones((2, 3)), Q=jnp.eye(2), b=jnp.zeros(2))
    >>> x = flatten(st)                      # (H·F + H² + H,)
    >>> x.shape, unflatten(x, 2, 3).M.shape
    ((12,), (2, 3))
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from headspec.core.latent import LatentLaw
from headspec.core.linalg import psd_root
from headspec.core.observables import BaseSamples, sample_loss, token_projections

Array = jax.Array


class OrderParameters(NamedTuple):
    """Order parameters: M (H, F) head–feature, Q (H, H) head–head overlaps, b (H,) biases."""

    M: Array  # (H, F)
    Q: Array  # (H, H)
    b: Array  # (H,)


class Drift(NamedTuple):
    """d(M, Q, b)/dt and R at one state, with their standard errors (same shapes; 0 where a
    method computes a term exactly) and the error bounds of their deterministic parts (the
    exact method's quadrature, :func:`~headspec.core.accuracy.error_bound`; 0 for sampled
    terms, whose error is their standard error)."""

    dM: Array  # (H, F)
    dQ: Array  # (H, H)
    db: Array  # (H,)
    R: Array  # ()
    dM_se: Array
    dQ_se: Array
    db_se: Array
    R_se: Array
    dM_err: Array
    dQ_err: Array
    db_err: Array
    R_err: Array


def flatten(state: OrderParameters) -> Array:
    """(M, Q, b) → one vector (H·F + H·H + H,)."""
    return jnp.concatenate([state.M.ravel(), state.Q.ravel(), state.b.ravel()])


def unflatten(x: Array, H: int, F: int) -> OrderParameters:
    """The inverse of :func:`flatten`."""
    M = x[: H * F].reshape(H, F)
    Q = x[H * F : H * F + H * H].reshape(H, H)
    return OrderParameters(M, Q, x[H * F + H * H :])


# ------------------------------------------------------------------ the per-sample integrand
class SampleTerms(NamedTuple):
    """What one sample contributes (leading axes: samples), g = ∂ℓ/∂s by ``jax.grad``."""

    loss: Array  # (…,) ℓ
    g_nu: Array  # (…, H, F) Σ_l g_l ν_lᵀ
    g_lam: Array  # (…, H, H) Σ_l g_l λ_lᵀ
    g_g: Array  # (…, H, H) Σ_l g_l g_lᵀ
    g_sum: Array  # (…, H) Σ_l g_l


def increment(terms: SampleTerms, lr, lr_b, eta2: bool) -> OrderParameters:
    """One sample's increment ψ (its mean is the drift) from its terms (any leading axes)."""
    gl = terms.g_lam
    dQ = -lr * (gl + jnp.swapaxes(gl, -1, -2))  # (…, H, H)
    if eta2:
        dQ = dQ + lr**2 * terms.g_g
    return OrderParameters(-lr * terms.g_nu, dQ, -lr_b * terms.g_sum)


def expect_terms(state: OrderParameters, activation, law: LatentLaw, base: BaseSamples, contract):
    """E over the law (exact over a discrete law's atoms) of ``contract(ν, λ, ℓ, g)`` on the base
    samples: ν (n, L, F), λ (n, H, L), ℓ (n,), g = ∂ℓ/∂s (n, H, L), hidden token at l = 0.
    √(Q − MMᵀ) tolerates singular Q (aligned heads)."""
    M, Q, b = state
    S = psd_root(Q - M @ M.T)  # (H, H)

    def one(theta):  # θ (n, F)
        nu, lam = token_projections(M, S, theta, base)  # (n, L, F), (n, H, L)
        ell, g = jax.vmap(jax.value_and_grad(sample_loss), in_axes=(0, None))(
            lam + b[:, None], activation
        )  # (n,), (n, H, L)
        return contract(nu, lam, ell, g)

    return law.expect(one, base.theta)


def per_sample_terms(nu, lam, ell, g) -> SampleTerms:
    """The contraction of :func:`expect_terms` keeping the sample axis (for standard errors)."""
    return SampleTerms(
        ell,
        jnp.einsum("nhl,nlf->nhf", g, nu),  # (n, H, F)
        jnp.einsum("nhl,nkl->nhk", g, lam),  # (n, H, H)
        jnp.einsum("nhl,nkl->nhk", g, g),  # (n, H, H)
        g.sum(-1),  # (n, H)
    )


def mean_terms(nu, lam, ell, g) -> SampleTerms:
    """The contraction of :func:`expect_terms` to means: one contraction over samples and
    tokens each (no per-sample arrays)."""
    n = nu.shape[0]
    return SampleTerms(
        ell.mean(),
        jnp.einsum("nhl,nlf->hf", g, nu) / n,  # (H, F)
        jnp.einsum("nhl,nkl->hk", g, lam) / n,  # (H, H)
        jnp.einsum("nhl,nkl->hk", g, g) / n,  # (H, H)
        g.sum((0, 2)) / n,  # (H,)
    )
