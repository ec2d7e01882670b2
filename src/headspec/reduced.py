"""The exact reduced engine of `headspec simulate`: online SGD at a per-step cost free of D.

Everything the dynamics depends on is an inner product among the keys k_h, the feature directions
k*_f and the tokens x_l, and the tokens are isotropic Gaussian apart from the spike, which lies in
span(K*). So the engine keeps only coordinates in an orthonormal basis of S ⊇ span(K*, K) of
dimension s = F + H:

- a token's projection on S is N(0, I_s) (plus the spike on the hidden token);
- the parts of the B·L tokens of a step orthogonal to S are i.i.d. Gaussian vectors in D − s
  dimensions; by the Bartlett decomposition their coordinates in the orthonormal basis that
  Gram–Schmidt makes of them are the rows of a lower-triangular T with T_jj = √χ²(D − s − j + 1)
  and N(0, 1) below the diagonal — exactly;
- the exact loss |ŷ − y|²/(2D) and its gradient are computed in these s + B·L coordinates, keys and
  biases are updated, and span(K*, K) is re-orthonormalised back to s coordinates by a QR
  factorisation (any orthonormal basis will do: future tokens are isotropic).

The initial keys k_h ~ N(0, σ0² I_D) are represented the same way: Gaussian components along K*,
and orthogonal parts given by σ0 times a Bartlett factor in D − F dimensions. The law of every
recorded quantity is that of the full engine (tests compare them); the per-step cost is
O((s + BL)²·(F + H)), whatever D. It needs D − s ≥ B·L.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from headspec.attention import loss_finite, predict

Array = jax.Array


class ReducedState(NamedTuple):
    """Per-seed state in basis coordinates (leading axis: seed); s = F + H."""

    Cs: Array  # (S, F, s) the unit feature directions u_f = k*_f/√D
    C: Array  # (S, H, s) the keys k_h
    b: Array  # (S, H) biases
    fail_step: Array  # (S,) first step whose update was non-finite, −1 if none


def bartlett(key: Array, dof: int, n: int, dtype=jnp.float64) -> Array:
    """Lower-triangular T (n, n) with T Tᵀ ~ Wishart(dof, I_n): the coordinates of n i.i.d.
    N(0, I_dof) vectors in the orthonormal basis Gram–Schmidt makes of them (needs dof ≥ n)."""
    k1, k2 = jax.random.split(key)
    df = (dof - jnp.arange(n)).astype(dtype)  # (n,)
    diag = jnp.sqrt(2.0 * jax.random.gamma(k1, df / 2.0, (n,), dtype=dtype))  # √χ²(dof − j)
    low = jnp.tril(jax.random.normal(k2, (n, n), dtype=dtype), -1)  # (n, n)
    return low + jnp.diag(diag)  # (n, n)


def check_dimensions(D: int, F: int, H: int, L: int, B: int) -> None:
    """The reduced engine needs D − (F + H) ≥ B·L (and D − F ≥ H for the initial keys)."""
    if D - (F + H) < B * L:
        raise ValueError(
            f"the reduced engine needs D − (F + H) ≥ B·L, got D = {D}, F + H = {F + H}, "
            f'B·L = {B * L}; fix: use train.engine = "full" at this small D'
        )


def initial_state(keys_init: Array, F: int, H: int, D: int, sigma0: float, b0, dtype):
    """Exact law of the full engine's initial keys k_h ~ N(0, σ0² I_D), in coordinates."""

    def one(key):
        k1, k2 = jax.random.split(key)
        G = jax.random.normal(k1, (H, F), dtype=dtype)  # components along u_1..u_F
        T = bartlett(k2, D - F, H, dtype)  # orthogonal parts, in H fresh directions
        C = sigma0 * jnp.concatenate([G, T], axis=1)  # (H, F + H)
        Cs = jnp.eye(F, F + H, dtype=dtype)  # (F, F + H)
        return Cs, C

    Cs, C = jax.vmap(one)(keys_init)
    S = C.shape[0]
    return ReducedState(Cs, C, jnp.full((S, H), b0, dtype), jnp.full((S,), -1, jnp.int64))


BLOCK = 32  # steps whose random numbers are drawn together (amortises per-call RNG overhead)


class StepRandoms(NamedTuple):
    z: Array  # (B, L, s) token projections on S (before the spike)
    T: Array  # (B, L, B·L) Bartlett coordinates of the parts orthogonal to S
    eps: Array  # (B,) hidden locations
    theta: Array  # (B, F) latents


def step_randoms(sgd, key: Array, s: int, dtype) -> StepRandoms:
    """The random numbers of one step, from that step's key (``fold_in(train_key, step)``)."""
    B, L = sgd.B, sgd.L
    k1, k2, k3, k4 = jax.random.split(key, 4)
    return StepRandoms(
        z=jax.random.normal(k1, (B, L, s), dtype=dtype),
        T=bartlett(k2, sgd.D - s, B * L, dtype).reshape(B, L, B * L),
        eps=jax.random.randint(k3, (B,), 0, L),
        theta=sgd.law.sample(k4, (B,)).astype(dtype),
    )


def _step(sgd, Cs, C, b, rnd: StepRandoms, t):
    """One exact SGD step in coordinates; returns re-orthonormalised (Cs, C), b and the loss."""
    F = Cs.shape[0]
    B, D = sgd.B, sgd.D
    BL = rnd.T.shape[-1]
    z = rnd.z.at[jnp.arange(B), rnd.eps].add(rnd.theta @ Cs)  # spike K*θ/√D = Σ_f θ_f u_f
    X = jnp.concatenate([z, rnd.T], axis=-1)  # (B, L, s + BL)
    y = X[jnp.arange(B), rnd.eps]  # (B, s + BL)
    K = jnp.pad(C, ((0, 0), (0, BL)))  # (H, s + BL)

    def loss(K, b):
        return jnp.sum(loss_finite(predict(K, b, X, sgd.activation, D), y, D))

    value, (gK, gb) = jax.value_and_grad(loss, argnums=(0, 1))(K, b)
    f = sgd.schedule(t)
    lr, lr_b = jnp.asarray(sgd.lr, K.dtype), jnp.asarray(sgd.lr_b, K.dtype)
    K_new = K - (lr * f) * gK  # (H, s + BL)
    b_new = b - (lr_b * f / D) * gb  # (H,)
    A = jnp.concatenate([jnp.pad(Cs, ((0, 0), (0, BL))), K_new], axis=0)  # (F + H, s + BL)
    basis, _ = jnp.linalg.qr(A.T)  # (s + BL, F + H): orthonormal, spans all of A's rows
    return A[:F] @ basis, K_new @ basis, b_new, value


def _advance_one(sgd, Cs, C, b, fail, train_key, step0, n):
    """Steps step0 … step0+n−1 in blocks of BLOCK (steps past the end are computed, not applied)."""
    s = Cs.shape[1]
    dtype = C.dtype

    def block(j, carry):
        first = step0 + j * BLOCK
        steps = first + jnp.arange(BLOCK)  # (BLOCK,)
        keys = jax.vmap(lambda st: jax.random.fold_in(train_key, st))(steps)
        rnds = jax.vmap(lambda k: step_randoms(sgd, k, s, dtype))(keys)

        def body(carry, inp):
            Cs, C, b, fail = carry
            step, rnd = inp
            t = (step * sgd.B / sgd.D).astype(dtype)
            Cs_n, C_n, b_n, loss = _step(sgd, Cs, C, b, rnd, t)
            ok = jnp.isfinite(loss) & jnp.all(jnp.isfinite(b_n)) & jnp.isfinite(jnp.sum(C_n * C_n))
            active = step < step0 + n
            fail = jnp.where(active & (~ok) & (fail < 0), step, fail)
            keep = active & (fail < 0)
            return (
                jnp.where(keep, Cs_n, Cs),
                jnp.where(keep, C_n, C),
                jnp.where(keep, b_n, b),
                fail,
            ), None

        carry, _ = jax.lax.scan(body, carry, (steps, rnds), unroll=8)
        return carry

    n_blocks = (n + BLOCK - 1) // BLOCK
    return jax.lax.fori_loop(0, n_blocks, block, (Cs, C, b, fail))


@eqx.filter_jit
def advance(sgd, state: ReducedState, train_keys: Array, step0, n) -> ReducedState:
    """Run steps step0 … step0+n−1 for every seed (vmap over seeds, one jitted loop)."""
    out = jax.vmap(_advance_one, in_axes=(None, 0, 0, 0, 0, 0, None, None))(
        sgd, state.Cs, state.C, state.b, state.fail_step, train_keys, step0, n
    )
    return ReducedState(*out)


def overlaps(state: ReducedState, D: int):
    """M (S, H, F) = k_h·k*_f/D and Q (S, H, H) = k_h·k_h'/D, in float64."""
    C = state.C.astype(jnp.float64)
    Cs = state.Cs.astype(jnp.float64)
    M = jnp.einsum("shi,sfi->shf", C, Cs) / jnp.sqrt(D)  # (S, H, F)
    Q = jnp.einsum("shi,ski->shk", C, C) / D  # (S, H, H)
    return M, Q
