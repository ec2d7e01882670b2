"""The single-location task of SPEC §2 and its D → ∞ projection of SPEC §5.

Finite D: a sequence X = (x_1..x_L) of tokens in R^D, x_l = z_l ~ N(0, I_D) except the hidden
token x_ε = z_ε + K*θ/√D, with ε uniform and θ ~ P_θ. The feature frame K* = √D·U has
orthonormal columns U (D × F): a random orthogonal frame (default) or the first F canonical axes.

D → ∞: only the projections matter. For keys with overlaps (M, Q), a token's
λ_l = (k_h·x_l/√D)_h and ν_l = (k*_f·x_l/√D)_f are jointly N(0, [[Q, M], [Mᵀ, I_F]]), plus the shift
(Mθ, θ) on the hidden token. :func:`sample_projected` draws them.

Example:
    >>> import jax
    >>> from headspec.core.latent import Spike
    >>> task = Task.create(jax.random.key(0), Spike([3.0]), L=4, D=50)
    >>> batch = sample_batch(jax.random.key(1), task, n=8)
    >>> batch.X.shape, batch.eps.shape, batch.theta.shape
    ((8, 4, 50), (8,), (8, 1))
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from headspec.core.latent import LatentLaw
from headspec.core.linalg import psd_root, qr
from headspec.core.precision import float64

Array = jax.Array
FrameKind = Literal["random", "canonical"]


@float64
def make_frame(key: Array, D: int, F: int, kind: FrameKind = "random", dtype=jnp.float64) -> Array:
    """Orthonormal columns U (D, F) of the feature frame; K* = √D U so that K*ᵀK* = D·I_F."""
    if F > D:
        raise ValueError(f"the frame needs D ≥ F, got D={D}, F={F}")
    if kind == "canonical":
        return jnp.eye(D, F, dtype=dtype)  # (D, F)
    if kind != "random":
        raise ValueError(f"unknown frame kind {kind!r}: use 'random' or 'canonical'")
    G = jax.random.normal(key, (D, F), dtype=dtype)  # (D, F)
    U, R = qr(G)  # (D, F), (F, F)
    return U * jnp.sign(jnp.diag(R))[None, :]  # (D, F), Haar-distributed frame


class Task(eqx.Module):
    """A finite-D task: latent law, sequence length L, dimension D and frame U (K* = √D U)."""

    law: LatentLaw
    U: Array  # (D, F)
    L: int = eqx.field(static=True)

    @classmethod
    @float64
    def create(
        cls, key: Array, law: LatentLaw, L: int, D: int, frame: FrameKind = "random", dtype=None
    ) -> Task:
        """Draw the frame from ``key`` (ignored for the canonical frame)."""
        dtype = jnp.float64 if dtype is None else dtype
        return cls(law=law, U=make_frame(key, D, law.F, frame, dtype), L=L)

    @property
    def D(self) -> int:
        return self.U.shape[0]

    @property
    def F(self) -> int:
        return self.U.shape[1]

    @property
    def Kstar(self) -> Array:
        """The feature directions K* = √D U, shape (D, F)."""
        return jnp.sqrt(self.D) * self.U  # (D, F)

    @float64
    def keys_from_overlaps(self, M: Array, Q: Array | None = None, key: Array | None = None):
        """Keys K (H, D) with overlaps K K*/D = M and K Kᵀ/D = Q.

        The part of Q not explained by M (the Schur complement Q − MMᵀ) is put on random
        directions orthogonal to the frame, drawn from ``key``. With ``Q=None`` the keys lie in
        span(K*) (Q = MMᵀ).
        """
        M = jnp.asarray(M, dtype=self.U.dtype)  # (H, F)
        K = jnp.sqrt(self.D) * M @ self.U.T  # (H, D)
        if Q is None:
            return K
        S = psd_root(jnp.asarray(Q, dtype=self.U.dtype) - M @ M.T)  # (H, H)
        H = M.shape[0]
        if self.D < self.F + H:
            raise ValueError(f"need D ≥ F + H = {self.F + H} to realise Q, got D = {self.D}")
        key = jax.random.key(0) if key is None else key
        G = jax.random.normal(key, (self.D, H), dtype=self.U.dtype)  # (D, H)
        V, _ = qr(jnp.concatenate([self.U, G], axis=1))  # (D, F+H)
        V = V[:, self.F :]  # (D, H), orthonormal, ⟂ U
        return K + jnp.sqrt(self.D) * S @ V.T  # (H, D)


class Batch(NamedTuple):
    """n finite-D sequences: tokens, hidden locations, latents, and targets y = x_ε."""

    X: Array  # (n, L, D)
    eps: Array  # (n,) int
    theta: Array  # (n, F)

    @property
    def y(self) -> Array:
        return jnp.take_along_axis(self.X, self.eps[:, None, None], axis=1)[:, 0]  # (n, D)


@float64
def sample_batch(key: Array, task: Task, n: int) -> Batch:
    """Draw n sequences of the task at its finite D (dtype of the frame)."""
    kz, ke, kt = jax.random.split(key, 3)
    D, L = task.D, task.L
    dtype = task.U.dtype
    Z = jax.random.normal(kz, (n, L, D), dtype=dtype)  # (n, L, D)
    eps = jax.random.randint(ke, (n,), 0, L)  # (n,)
    theta = task.law.sample(kt, (n,)).astype(dtype)  # (n, F)
    spike = theta @ task.U.T  # (n, D) = K*θ/√D
    X = Z.at[jnp.arange(n), eps].add(spike)  # (n, L, D): only the hidden token moves
    return Batch(X=X, eps=eps, theta=theta)


def project(task: Task, X: Array) -> Array:
    """ν_l = K*ᵀ x_l / √D for tokens X (..., L, D): shape (..., L, F)."""
    return X @ task.U  # (..., L, F)


class ProjectedBatch(NamedTuple):
    """n sequences in the D → ∞ projected coordinates of SPEC §5."""

    lam: Array  # (n, L, H) head projections λ (H = 0 when no keys were given)
    nu: Array  # (n, L, F) feature projections ν
    eps: Array  # (n,) hidden location
    theta: Array  # (n, F)


@float64
def sample_projected(
    key: Array,
    law: LatentLaw,
    L: int,
    n: int,
    M: Array | None = None,
    Q: Array | None = None,
    *,
    fix_eps: bool = False,
    dtype=jnp.float64,
) -> ProjectedBatch:
    """Draw (λ, ν) for n sequences given key overlaps M (H, F) and Q (H, H).

    ν_l ~ N(0, I_F), λ_l = M ν_l + S ξ_l with S Sᵀ = Q − MMᵀ (eigen-factor: singular Q, e.g. aligned
    heads, is fine), and the hidden token gets (Mθ, θ) added. ``fix_eps`` puts the hidden token
    at l = 0 (allowed by symmetry; it is how the theory evaluates expectations).
    """
    F = law.F
    if M is None:
        M = jnp.zeros((0, F), dtype=dtype)
        Q = jnp.zeros((0, 0), dtype=dtype)
    M = jnp.asarray(M, dtype=dtype)  # (H, F)
    Q = M @ M.T if Q is None else jnp.asarray(Q, dtype=dtype)  # (H, H)
    H = M.shape[0]
    k_nu, k_xi, k_eps, k_th = jax.random.split(key, 4)
    nu = jax.random.normal(k_nu, (n, L, F), dtype=dtype)  # (n, L, F)
    xi = jax.random.normal(k_xi, (n, L, H), dtype=dtype)  # (n, L, H)
    S = psd_root(Q - M @ M.T)  # (H, H)
    eps = jnp.zeros((n,), jnp.int32) if fix_eps else jax.random.randint(k_eps, (n,), 0, L)  # (n,)
    theta = law.sample(k_th, (n,)).astype(dtype)  # (n, F)
    hot = jax.nn.one_hot(eps, L, dtype=dtype)[:, :, None]  # (n, L, 1)
    nu = nu + hot * theta[:, None, :]  # (n, L, F)
    lam = nu @ M.T + xi @ S.T  # (n, L, H): M(ν_noise + θ) = Mν_noise + Mθ
    return ProjectedBatch(lam=lam, nu=nu, eps=eps, theta=theta)
