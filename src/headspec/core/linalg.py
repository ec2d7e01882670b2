"""Two pieces of linear algebra the model needs everywhere: the symmetric square root of a PSD
matrix (singular allowed) and the Bartlett factor of a Wishart matrix.

Example:
    >>> import jax, jax.numpy as jnp
    >>> R = psd_root(jnp.array([[4.0, 0.0], [0.0, 0.0]]))       # singular is fine
    >>> R.tolist()
    [[2.0, 0.0], [0.0, 0.0]]
    >>> T = bartlett(jax.random.key(0), dof=50, n=3)              # T Tᵀ ~ Wishart(50, I_3)
    >>> T.shape, bool(jnp.all(jnp.triu(T, 1) == 0))
    ((3, 3), True)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from headspec.core.precision import float64

Array = jax.Array


def psd_root(S: Array, rtol: float = 1e-12) -> Array:
    """The symmetric square root R = S^{1/2} (so R Rᵀ = S) of a symmetric PSD S.

    Singular S is fine: eigenvalues below ``rtol · max(1, λ_max)`` (round-off of a singular
    matrix) are set to zero, so an exactly rank-deficient S gives an exactly rank-deficient root.
    The symmetric root (not V√Λ) is a smooth function of S wherever S is positive definite, even
    with repeated eigenvalues, so ``jax.jacfwd`` through it is finite there; its derivative is
    infinite only where S is singular (a genuine property of the square root).
    """
    S = 0.5 * (S + S.T)
    if S.shape[0] == 0:
        return S
    return _sym_sqrt(S, rtol)


def _clipped_eigh(S, rtol):
    w, V = jnp.linalg.eigh(S)  # (n,), (n, n)
    cut = rtol * jnp.maximum(1.0, jnp.max(jnp.abs(w)))
    return jnp.where(w > cut, w, 0.0), V


@jax.custom_jvp
def _sym_sqrt(S, rtol):
    w, V = _clipped_eigh(S, rtol)
    return (V * jnp.sqrt(w)[None, :]) @ V.T  # (n, n)


@_sym_sqrt.defjvp
def _sym_sqrt_jvp(primals, tangents):
    S, rtol = primals
    dS, _ = tangents
    w, V = _clipped_eigh(S, rtol)
    r = jnp.sqrt(w)  # (n,)
    R = (V * r[None, :]) @ V.T
    # R dR + dR R = dS  ⇒  in the eigenbasis (dR)_ij = (Vᵀ dS V)_ij / (r_i + r_j)
    A = V.T @ (0.5 * (dS + dS.T)) @ V  # (n, n)
    denom = r[:, None] + r[None, :]
    X = jnp.where(A == 0, 0.0, A / jnp.where(A == 0, 1.0, denom))
    return R, V @ X @ V.T


@float64
def bartlett(key: Array, dof: int, n: int, dtype=jnp.float64) -> Array:
    """Lower-triangular T (n, n) with T Tᵀ ~ Wishart(dof, I_n) (Bartlett decomposition).

    T's rows are the coordinates of n i.i.d. N(0, I_dof) vectors in the orthonormal basis that
    Gram–Schmidt makes of them: T_jj = √χ²(dof − j), N(0, 1) below the diagonal (needs dof ≥ n).
    """
    k1, k2 = jax.random.split(key)
    df = (dof - jnp.arange(n)).astype(dtype)  # (n,)
    diag = jnp.sqrt(2.0 * jax.random.gamma(k1, df / 2.0, (n,), dtype=dtype))  # √χ²(dof − j)
    low = jnp.tril(jax.random.normal(k2, (n, n), dtype=dtype), -1)  # (n, n)
    return low + jnp.diag(diag)  # (n, n)
