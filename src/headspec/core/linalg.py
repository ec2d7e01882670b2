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


def principal_root(S: Array, rtol: float = 1e-12) -> Array:
    """A root C (C Cᵀ = S) of a symmetric PSD S whose columns are its principal axes √λ_k v_k,
    by decreasing eigenvalue λ_k (clipped to 0 below ``rtol · max(1, λ_max)``, as
    :func:`psd_root`), each column's sign fixed so that its entries sum to ≥ 0.

    For quasi-Monte Carlo: with s = m + C z the first coordinates of z carry most of the
    variance. Its derivative is that of ``eigh``: infinite where eigenvalues coincide.
    """
    S = 0.5 * (S + S.T)
    if S.shape[0] == 0:
        return S
    w, V = _clipped_eigh(S, rtol)  # ascending
    C = (V * jnp.sqrt(w)[None, :])[:, ::-1]  # (n, n), decreasing variance
    sign = jnp.where(jnp.sum(C, axis=0) < 0, -1.0, 1.0)  # (n,)
    return C * sign[None, :]


def min_eigenvalue(S: Array) -> Array:
    """The smallest eigenvalue of a symmetric S (n, n) (its symmetric part), batched by a loop
    under ``vmap`` as :func:`psd_root`'s eigh (no batched LAPACK call: see ``_eigh``)."""
    return _eigh(0.5 * (S + S.T))[0][0]


def psd_project(S: Array) -> Array:
    """S (n, n) symmetric with its negative eigenvalues set to 0: the nearest PSD matrix."""
    w, V = _eigh(0.5 * (S + S.T))
    return (V * jnp.maximum(w, 0.0)[None, :]) @ V.T


# ------------------------------------------------------------------- LAPACK, one matrix a call
# On CPU (jaxlib 0.10.2) every batched LAPACK kernel (eigh, Cholesky, LU and so solve, QR, SVD,
# triangular solves: each takes XLA's intra-op thread pool) splits its batch over that pool and
# waits for the pieces on a pool thread. Two such calls running at once (XLA runs independent
# operations concurrently) each hold a thread and wait for the other's pieces: with two pool
# threads (a 2-core machine) they wait forever. It hung the test suite (a batched eigh) and the
# diffusion engine's default exact drift with 16 seeds (a batched LU: the control-variate solve
# of dynamics/eta2.py, under vmap over seeds). Every LAPACK call of the package therefore goes
# through the wrappers below: one matrix per call, a loop under ``vmap`` and over leading axes
# (tests/test_linalg_deadlock.py; a structural test keeps other modules off jnp.linalg's
# decompositions). For the small matrices here the loop costs the same (400 eighs of 13 × 13:
# 7.7 s vs 8.2 s per 1000).


def _one_at_a_time(fn):
    """``fn`` of one matrix (its last two axes), looped over any leading axes and under ``vmap``
    (``sequential_vmap``): never a batched LAPACK call."""
    looped = jax.custom_batching.sequential_vmap(fn)

    def call(A, *rest):
        if A.ndim > 2:  # explicit leading axes: vmap → the sequential rule → a loop
            axes = [0 if jnp.ndim(r) == A.ndim else None for r in rest]  # batched like A, or shared
            return jax.vmap(call, in_axes=(0, *axes))(A, *rest)
        return looped(A, *rest)

    call.__doc__ = fn.__doc__
    call.__name__ = fn.__name__
    return call


@_one_at_a_time
def _eigh(S):
    """``jnp.linalg.eigh`` of one symmetric matrix: eigenvalues ascending, eigenvectors."""
    return jnp.linalg.eigh(S)


@_one_at_a_time
def cholesky(S: Array) -> Array:
    """The lower-triangular Cholesky factor of a symmetric positive-definite S (…, n, n)."""
    return jnp.linalg.cholesky(S)


@_one_at_a_time
def qr(A: Array) -> tuple[Array, Array]:
    """The reduced QR factorisation of A (…, m, n): Q (…, m, k), R (…, k, n)."""
    return jnp.linalg.qr(A)


@_one_at_a_time
def svd(A: Array) -> tuple[Array, Array, Array]:
    """The SVD U, σ, Vᵀ of A (…, m, n) (full matrices, as ``jnp.linalg.svd``)."""
    return jnp.linalg.svd(A)


@_one_at_a_time
def _lu_solve(A: Array, B: Array) -> Array:
    return jnp.linalg.solve(A, B)


@jax.custom_jvp
def solve(A: Array, B: Array) -> Array:
    """X with A X = B for a square A (…, n, n) and B (…, n, k) (LU with partial pivoting).

    Differentiable in both arguments, forward and reverse: the tangent dX = A⁻¹(dB − dA X) is
    written with A⁻¹ as a primal value (a product, linear in the tangents), so no LAPACK call is
    ever differentiated or transposed."""
    return _lu_solve(A, B)


@solve.defjvp
def _solve_jvp(primals, tangents):
    A, B = primals
    dA, dB = tangents
    X = _lu_solve(A, B)
    eye = jnp.broadcast_to(jnp.eye(A.shape[-1], dtype=A.dtype), A.shape)
    Ainv = _lu_solve(A, eye)  # (…, n, n)
    return X, Ainv @ (dB - dA @ X)


def eigvalsh(S: Array) -> Array:
    """The eigenvalues of a symmetric S (…, n, n) (its symmetric part), ascending."""
    return _eigh(0.5 * (S + jnp.swapaxes(S, -1, -2)))[0]


def _clipped_eigh(S, rtol):
    w, V = _eigh(S)  # (n,), (n, n)
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
    # R dR + dR R = dS  ⇒  in the eigenbasis (dR)_ij = (Vᵀ dS V)_ij / (r_i + r_j). Where
    # r_i + r_j = 0 (both eigenvalues clipped: directions in which S is singular) the entry is
    # set to 0. The mask depends on the primal only, so the rule is linear in the tangent and
    # transposes: reverse mode (jax.grad) works through the root.
    A = V.T @ (0.5 * (dS + dS.T)) @ V  # (n, n)
    denom = r[:, None] + r[None, :]  # (n, n)
    keep = denom > 0
    X = A / jnp.where(keep, denom, 1.0) * keep  # (n, n)
    return R, V @ X @ V.T


#: tangent directions per forward-mode pass of :func:`jacobian_in_batches`
JACOBIAN_BATCH = 32


def jacobian_in_batches(f, x: Array, batch: int = JACOBIAN_BATCH) -> tuple[Array, Array]:
    """f(x) (m,) and its Jacobian ∂f/∂x (m, n) by forward mode, ``batch`` of the n directions
    per pass (``jax.jacfwd`` pushes all n at once: its memory grows like n × the tangent of
    every intermediate, which for the exact drift's Jacobian at H = 16, n = 304, was tens of
    GB). Each pass recomputes f's primal: cost ≈ (n/batch) f + n tangents.

    >>> J = jacobian_in_batches(lambda x: jnp.stack([x[0] * x[1], x[2] ** 2]),
    ...                         jnp.array([1.0, 2.0, 3.0]), batch=2)[1]
    >>> J.tolist()
    [[2.0, 1.0, 0.0], [0.0, 0.0, 6.0]]
    """
    n = x.shape[0]
    basis = jnp.eye(n, dtype=x.dtype)  # (n, n)
    cols = jax.lax.map(lambda e: jax.jvp(f, (x,), (e,))[1], basis, batch_size=min(batch, n))
    return f(x), cols.T  # (m,), (m, n)


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


def chi2(
    key: Array, dof: Array, shape: tuple[int, ...], dtype=jnp.float64, draws=jnp.float32
) -> Array:
    """Exact χ²(dof) draws of shape ``shape`` (``dof`` ≥ 2 broadcast to it), for large dof fast.

    χ²(k) = 2·Gamma(k/2), drawn by Marsaglia & Tsang's rejection method (ACM TOMS 26, 2000) for
    shape α = k/2 ≥ 1: with d = α − 1/3, c = 1/√(9d), x ~ N(0, 1) and u ~ U(0, 1), the candidate
    d(1 + cx)³ is accepted when log u < x²/2 + d − d v + d log v, v = (1 + cx)³. For large α
    almost every candidate is accepted (rejection rate ≈ 0.05/k; measured 5·10⁻⁴ at k = 100 and
    5·10⁻⁵ at k = 1000), so one round draws nearly all and a loop redraws the rare rejected
    ones — the law is exact; unlike ``jax.random.gamma``'s general loop it costs about two
    normal draws. The acceptance test is
    written with ``log1p`` in float64 (d − dv + d log v cancels to O(x²) for large d); the
    normal and uniform draws are in ``draws`` precision (float32: 3× cheaper on CPU).
    """
    rdt = draws
    a = jnp.broadcast_to(jnp.asarray(dof, jnp.float64) / 2.0, shape)  # (shape,)
    d = a - 1.0 / 3.0
    c = 1.0 / jnp.sqrt(9.0 * d)

    def draw(k):
        k1, k2 = jax.random.split(k)
        x = jax.random.normal(k1, shape, rdt).astype(jnp.float64)
        u = jax.random.uniform(k2, shape, rdt, minval=jnp.finfo(rdt).tiny).astype(jnp.float64)
        w = c * x
        # d − d v + d log v with v = (1 + w)³:  d(3 log1p(w) − 3w − 3w² − w³)
        ok = (w > -1.0) & (
            jnp.log(u) < 0.5 * x**2 + d * (3 * jnp.log1p(w) - 3 * w - 3 * w**2 - w**3)
        )
        return ok, d * (1.0 + w) ** 3

    ok, g = draw(jax.random.fold_in(key, 0))

    def again(carry):
        i, ok, g = carry
        ok_i, g_i = draw(jax.random.fold_in(key, i))
        return i + 1, ok | ok_i, jnp.where(ok, g, g_i)

    _, _, g = jax.lax.while_loop(lambda c: ~jnp.all(c[1]), again, (1, ok, g))
    return (2.0 * g).astype(dtype)
