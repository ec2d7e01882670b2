"""The SGD noise of the order parameters: mean and covariance of one sample's increment.

One SGD sample moves X = (M, Q, b) by ψ/D (SPEC §4–§5), up to O(1/D²), with, for g = ∂ℓ/∂s,

    ψ_M = −η Σ_l g_l ν_lᵀ,   ψ_Q = −η Σ_l (g_l λ_lᵀ + λ_l g_lᵀ) + η² Σ_l g_l g_lᵀ,
    ψ_b = −η_b Σ_l g_l.

Its mean E ψ is the ODE's drift f(X) (:mod:`headspec.dynamics.ode`); its covariance C(X) = Cov ψ
sets the size of the fluctuations: over a time dt, D·dt independent samples add up to
dX = f dt + C^{1/2} dW / √D (:mod:`headspec.dynamics.engines.diffusion`). Both come from the same
base samples as the drift, with discrete laws exact over their atoms (the covariance includes the
spread between atoms).

At finite D the increment of one exact SGD step (batch 1) is, with G = XXᵀ/D the L × L Gram matrix
of the sequence's tokens and ℓ_D(s) = ½ (W(s) − e_ε)ᵀ G (W(s) − e_ε) the exact loss |ŷ − y|²/(2D),

    ψ_M = −η Σ_l g_l ν_lᵀ,   ψ_Q = −η Σ_l (g_l λ_lᵀ + λ_l g_lᵀ) + η² Σ_ll' g_l G_ll' g_l'ᵀ,
    ψ_b = −η_b Σ_l g_l,      g = ∂ℓ_D/∂s,

exactly: the scores are λ + b at any D, and only G ≠ I distinguishes the finite-D step. In an
orthonormal basis of span(K*, K) (s = F + H directions, in which a token has the coordinates
(ν_l, ξ_l) of the base samples, the hidden one shifted by θ) and of the tokens' parts outside it,
G = (ν νᵀ + ξ ξᵀ)/D + T Tᵀ/D with T Tᵀ ~ Wishart(D − s, I_L) (Bartlett, as in the reduced engine).
:func:`gram_rest` draws T Tᵀ/D once per base sample (common random numbers); with it,
:func:`increment_moments` gives the exact mean and covariance of one SGD step's increment at
dimension D (G → I as D → ∞, which ``gram=None`` takes exactly).

Coordinates: X is flattened to (M row-major, the upper triangle of Q with its diagonal, b), of
size d = H·F + H(H+1)/2 + H, so that Q stays exactly symmetric under any noise.

Example:
    >>> import jax, jax.numpy as jnp, numpy as np
    >>> from headspec.core.latent import Spike
    >>> from headspec.core.attention import Softmax
    >>> from headspec.core.observables import BaseSamples
    >>> from headspec.dynamics.problem import DriftProblem, OrderParameters
    >>> law = Spike([2.0])
    >>> base = BaseSamples.draw(jax.random.key(0), law, L=10, H=2, n=4096)
    >>> problem = DriftProblem.sampled(Softmax(), law, base, lr=1.0)
    >>> at = OrderParameters(M=jnp.array([[0.5], [0.1]]), Q=jnp.array([[0.5, 0.0], [0.0, 0.2]]),
    ...                      b=jnp.zeros(2))
    >>> mom = increment_moments(at, problem)
    >>> mom.root.shape                         # d = H·F + H(H+1)/2 + H = 2 + 3 + 2
    (7, 7)
    >>> f = flat_sym(problem.vector_field(at))
    >>> bool(np.allclose(mom.mean, f))        # the mean increment is the ODE's drift
    True
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from headspec.core.attention import Activation
from headspec.core.linalg import bartlett, psd_root
from headspec.core.observables import BaseSamples, sample_loss, token_projections
from headspec.core.precision import float64
from headspec.dynamics.problem import (
    DriftProblem,
    Exact,
    OrderParameters,
    SampleTerms,
    increment,
)

Array = jax.Array


def sym_size(H: int, F: int) -> int:
    """d = H·F + H(H+1)/2 + H: the free coordinates of (M, Q, b) with Q symmetric."""
    return H * F + H * (H + 1) // 2 + H


def flat_sym(state: OrderParameters) -> Array:
    """(M, Q, b) → (M row-major, upper triangle of Q with its diagonal, b), shape (…, d)."""
    H = state.Q.shape[-1]
    iu = jnp.triu_indices(H)
    lead = state.M.shape[:-2]
    return jnp.concatenate(
        [state.M.reshape(*lead, -1), state.Q[..., iu[0], iu[1]], state.b], axis=-1
    )


def unflat_sym(x: Array, H: int, F: int) -> OrderParameters:
    """The inverse of :func:`flat_sym` for one state (d,) → M (H, F), Q (H, H) symmetric, b (H,)."""
    k = H * (H + 1) // 2
    M = x[: H * F].reshape(H, F)
    iu = jnp.triu_indices(H)
    U = jnp.zeros((H, H), x.dtype).at[iu].set(x[H * F : H * F + k])
    Q = U + jnp.triu(U, 1).T
    return OrderParameters(M, Q, x[H * F + k :])


class FiniteGram(NamedTuple):
    """What a finite D adds to the base samples: the tokens' Gram part outside span(K*, K)."""

    rest: Array  # (n, L, L) T Tᵀ/D, T Tᵀ ~ Wishart(D − F − H, I_L), one per base sample
    inv_D: Array  # () 1/D
    rest_mean: Array  # () (D − F − H)/D: E rest = rest_mean · I


@float64
def gram_rest(key, n: int, L: int, D: int, s: int, copies: int = 1) -> FiniteGram:
    """T Tᵀ/D for n base samples (T: Bartlett factor with D − s degrees of freedom), repeated
    ``copies`` times along the sample axis (head-cyclic base samples share it: (n·copies, L, L)).
    Needs D − s ≥ L."""
    if D - s < L:
        raise ValueError(f"the finite-D Gram matrix needs D − s ≥ L, got D = {D}, s = {s}, L = {L}")
    T = jax.vmap(lambda k: bartlett(k, D - s, L))(jax.random.split(key, n))  # (n, L, L)
    rest = jnp.einsum("nlk,nmk->nlm", T, T) / D  # (n, L, L)
    return FiniteGram(
        jnp.tile(rest, (copies, 1, 1)), jnp.asarray(1.0 / D), jnp.asarray((D - s) / D)
    )


def _loss_gram(s: Array, activation: Activation, G: Array) -> Array:
    """Exact finite-D loss ½ (W − e_0)ᵀ G (W − e_0) for scores s (H, L), hidden token l = 0."""
    W = activation.token_weights(s)  # (L,)
    r = W - jax.nn.one_hot(0, W.shape[-1], dtype=W.dtype)  # (L,)
    return 0.5 * r @ G @ r


def _psi(g, G, nu, lam, eta, eta_b) -> Array:
    """ψ per sample from g = ∂ℓ/∂s (n, H, L) and the Gram matrices G (n, L, L; None: I),
    flattened as in :func:`flat_sym`: (n, d)."""
    if G is None:
        g_g = jnp.einsum("nhl,nkl->nhk", g, g)  # (n, H, H)
    else:
        g_g = jnp.einsum("nhl,nlm,nkm->nhk", g, G, g)  # (n, H, H)
    terms = SampleTerms(
        jnp.zeros(g.shape[0], g.dtype),
        jnp.einsum("nhl,nlf->nhf", g, nu),  # (n, H, F)
        jnp.einsum("nhl,nkl->nhk", g, lam),  # (n, H, H)
        g_g,
        g.sum(-1),  # (n, H)
    )
    return flat_sym(increment(terms, eta, eta_b, True))  # (n, d)


def _increments(
    state: OrderParameters,
    problem: DriftProblem,
    theta,
    base,
    *,
    eta,
    eta_b,
    gram: FiniteGram | None,
    with_limit: bool = False,
):
    """ψ per base sample for latents θ (n, F), flattened as in :func:`flat_sym`: (n, d); with
    ``with_limit`` also each sample's control for an exact mean, ψ_∞ + J·(G − G₀) (n, d): ψ_∞ the
    D → ∞ increment (G = I, mean f), J·(G − G₀) the first-order change of ψ_D with the Wishart
    part of G around its mean G₀ = E[G | ν, ξ] (mean 0: that part is drawn independently).
    ψ_D minus it is O(L/D) per sample, so the correction's average has error O(1/(D√n))."""
    M, Q, b = state
    activation = problem.activation
    S = psd_root(Q - M @ M.T)  # (H, H)
    nu, lam = token_projections(M, S, theta, base)  # (n, L, F), (n, H, L)
    s = lam + b[:, None]  # (n, H, L) scores

    def limit():
        g = jax.vmap(jax.grad(sample_loss), in_axes=(0, None))(s, activation)  # (n, H, L)
        return _psi(g, None, nu, lam, eta, eta_b)

    if gram is None:  # D → ∞: G = I
        psi = limit()
        return (psi, psi) if with_limit else psi
    span = (
        jnp.einsum("nlf,nmf->nlm", nu, nu) + jnp.einsum("nlh,nmh->nlm", base.xi, base.xi)
    ) * gram.inv_D  # (n, L, L) the tokens' Gram part inside span(K*, K)
    G = span + gram.rest  # (n, L, L) = XXᵀ/D

    def at(G):  # ψ_D for Gram matrices G (n, L, L)
        g = jax.vmap(jax.grad(_loss_gram), in_axes=(0, None, 0))(s, activation, G)  # (n, H, L)
        return _psi(g, G, nu, lam, eta, eta_b)

    psi = at(G)
    if not with_limit:
        return psi
    G0 = span + gram.rest_mean * jnp.eye(G.shape[-1], dtype=G.dtype)  # (n, L, L) E[G | ν, ξ]
    _, first = jax.jvp(at, (G0,), (G - G0,))  # (n, d) J·(G − G₀)
    return psi, limit() + first


class IncrementMoments(NamedTuple):
    """Mean E ψ (d,) (the drift), a root R (d, d) of C = Cov ψ (R Rᵀ = C, R symmetric PSD), the
    Monte-Carlo standard error of the noise's size √tr C relative to it (()), and the keys'
    quadratic variation Σ_f Cov(ψ_M[h, f], ψ_M[k, f]) (H, H) of the whole SGD noise (with fresh
    samples: before the sampling noise is taken out of R; the Itô term of d(MMᵀ))."""

    mean: Array  # (d,)
    root: Array  # (d, d)
    scale_rel_se: Array  # ()
    cov_M: Array  # (H, H)


@float64
def increment_moments(
    state: OrderParameters,
    problem: DriftProblem,
    factor=1.0,
    *,
    gram: FiniteGram | None = None,
    resampled=None,
    orbit: int = 1,
    base: BaseSamples | None = None,
) -> IncrementMoments:
    """Mean and covariance root of one sample's increment ψ at ``state`` (the problem's learning
    rates times the schedule's ``factor``), from the problem's base samples (or ``base``); exact
    over a discrete law's atoms. ``gram``: the finite-D Gram part of every base sample
    (:func:`gram_rest`); None: D → ∞. The η² term is always part of ψ.

    With an :class:`~headspec.dynamics.problem.Exact` method the mean is a control variate:
    f + mean(ψ_D − ψ_∞ − J·(G − G₀)) over the samples, f the exact D → ∞ drift (the problem's
    vector field), ψ_∞ each sample's D → ∞ increment (mean f) and J·(G − G₀) the first-order
    effect of the Gram matrix's Wishart part (mean 0; see :func:`_increments`). What is left
    per sample is O(L/D), so the mean's sampling error is O(1/(D√n)) against O(1/√n) for
    mean(ψ_D) — on a plateau, where the drift is a small difference of O(1) terms, that error
    is the whole bias of fixed samples. The covariance is ψ_D's, from the samples, as without
    it. Fixed samples only (``resampled`` None).

    ``resampled`` = D·dt for an engine that draws fresh Monte-Carlo base samples at every step
    of size dt (None: fixed samples). Each step's estimate of the mean then carries sampling noise
    of covariance V (the spread of the mean over redraws: the per-draw ψ averaged over the atoms
    and over the ``orbit`` head-cyclic copies of each draw, divided by the number of draws), and
    that noise is part of the step's SGD noise dt·C/D; the root returned is that of C − D·dt·V,
    so that the two together have covariance dt·C/D (V ≤ C/n: PSD when D·dt ≤ n)."""
    base = problem.base if base is None else base
    law = problem.law
    eta, eta_b = problem.lr * factor, problem.lr_b * factor
    points, weights = law.quadrature(base.theta)  # (A, n, F), (A,)
    exact = isinstance(problem.method, Exact)
    if exact and resampled is not None:
        raise ValueError("an exact mean has no sampling noise to take out: use fixed samples")
    if exact and not problem.eta2:  # ψ always has the η² term; f would lack it
        raise ValueError("an exact mean needs the problem's η² term (eta2=True), as ψ has it")
    psi = jax.vmap(
        lambda th: _increments(
            state, problem, th, base, eta=eta, eta_b=eta_b, gram=gram, with_limit=exact
        )
    )(points)  # (A, n, d), or a pair of them with an exact mean
    if exact:  # control variate of mean f: the samples give only E(ψ_D − control)
        psi, control = psi
        f = flat_sym(problem.field_at(state, factor))  # (d,)
        shift = f - jnp.einsum("a,and->d", weights.astype(psi.dtype), control) / psi.shape[1]
    A, n, d = psi.shape
    w = weights.astype(psi.dtype)[:, None]  # (A, 1)
    mean = jnp.einsum("a,and->d", weights.astype(psi.dtype), psi) / n  # (d,)
    Z = (psi - mean) * jnp.sqrt(w / n)[..., None]  # (A, n, d): Σ ZᵀZ = C
    Z = Z.reshape(A * n, d)
    C = Z.T @ Z  # (d, d)
    H, F = state.M.shape
    cov_M = jnp.einsum("hfkf->hk", C[: H * F, : H * F].reshape(H, F, H, F))  # (H, H)
    if resampled is not None:  # D·dt (may be traced)
        draws = jnp.einsum("a,and->nd", weights.astype(psi.dtype), psi)  # (n, d) atoms averaged
        draws = draws.reshape(orbit, n // orbit, d).mean(0)  # (n0, d) one row per draw
        n0 = draws.shape[0]
        Y = (draws - draws.mean(0)) / jnp.sqrt(n0 * (n0 - 1))  # (n0, d): YᵀY = V
        C = C - resampled * (Y.T @ Y)  # (d, d)
    # relative s.e. of tr C from the spread of the per-sample squared deviations |ψ − ψ̄|²
    sq = jnp.sum((psi - mean) ** 2, axis=-1)  # (A, n)
    per = jnp.einsum("a,an->n", weights.astype(psi.dtype), sq)  # (n,) atoms averaged per sample
    tr = per.mean()
    tr_se = per.std(ddof=1) / jnp.sqrt(n)
    if exact:  # the covariance is about ψ_D's own mean; the mean returned is f + E(ψ_D − ψ_∞)
        mean = mean + shift
    return IncrementMoments(mean, psd_root(C), 0.5 * tr_se / jnp.maximum(tr, 1e-300), cov_M)
