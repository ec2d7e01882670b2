"""The exact reduced engine: online SGD at a per-step cost free of D (``train.engine = "reduced"``).

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
  biases are updated, and the basis is made anew: the F feature directions stay its first F
  vectors (the frame never changes), and the keys' parts orthogonal to them, H vectors in
  H + B·L coordinates, are written in the orthonormal basis that Gram–Schmidt makes of them: the
  Cholesky factor of their H × H Gram matrix, computed in float64 (any orthonormal basis will do:
  future tokens are isotropic). So
  a key's coordinates are (√D·M_h, W_h) with W lower-triangular, W Wᵀ = D (Q − MMᵀ).

Random numbers come in blocks (``randoms_block``): the normals of ``block`` steps in one draw,
the Bartlett diagonals by :func:`headspec.core.linalg.chi2` (an exact χ² sampler that is cheap
for large degrees of freedom).

The initial keys k_h ~ N(0, σ0² I_D) are represented the same way: Gaussian components along K*,
and orthogonal parts given by σ0 times a Bartlett factor in D − F dimensions. The law of every
recorded quantity is that of the full engine (tests compare them); the per-step cost is
O((s + BL)²·H), whatever D. It needs D − s ≥ B·L.
"""

from __future__ import annotations

import functools
from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from headspec.core.attention import loss_finite, predict
from headspec.core.linalg import bartlett, chi2, cholesky
from headspec.core.names import reduced_fits
from headspec.core.observables import BaseSamples, Observation, population_risk
from headspec.core.precision import float64
from headspec.dynamics.engines.base import SGDEngine, SGDState, given_coordinates

Array = jax.Array


class StepRandoms(NamedTuple):
    z: Array  # (B, L, s) token projections on S (before the spike)
    T: Array  # (B, L, B·L) Bartlett coordinates of the parts orthogonal to S
    eps: Array  # (B,) hidden locations
    theta: Array  # (B, F) latents


@functools.partial(jax.jit, static_argnums=(1, 2))
def _reduced_init(init_keys, F: int, H: int, D, sigma0, b0) -> SGDState:
    """Every seed's initial coordinates (one program for every D, σ0, b0): frame (S, F, F + H),
    keys (S, H, F + H), biases (S, H)."""
    dtype = sigma0.dtype

    def one(key):
        k1, k2 = jax.random.split(key)
        G = jax.random.normal(k1, (H, F), dtype=dtype)  # components along u_1..u_F
        T = bartlett(k2, D - F, H, dtype)  # orthogonal parts, in H fresh directions
        C = sigma0 * jnp.concatenate([G, T], axis=1)  # (H, F + H)
        Cs = jnp.eye(F, F + H, dtype=dtype)  # (F, F + H)
        return Cs, C

    Cs, C = jax.vmap(one)(init_keys)
    S = C.shape[0]
    return SGDState(Cs, C, jnp.full((S, H), b0, dtype), jnp.full((S,), -1, jnp.int64))


@jax.jit
def _reduced_start(init_keys, D, M, Q, b, noise) -> SGDState:
    """Every seed at (M, Q, b) plus its key noise: keys (X_h, W_h) of
    :func:`~headspec.dynamics.engines.base.given_coordinates` (any orthonormal completion of the
    frame will do, tokens being isotropic), frame the first F coordinates."""
    S, (H, F) = init_keys.shape[0], M.shape
    X, W = jax.vmap(lambda k: given_coordinates(k, M, Q, D, noise))(init_keys)  # (S,H,F),(S,H,H)
    C = jnp.concatenate([X, W], axis=2)  # (S, H, F + H)
    Cs = jnp.broadcast_to(jnp.eye(F, F + H, dtype=M.dtype), (S, F, F + H))  # (S, F, F + H)
    return SGDState(Cs, C, jnp.broadcast_to(b, (S, H)), jnp.full((S,), -1, jnp.int64))


class ReducedEngine(SGDEngine):
    """Keys and feature directions as coordinates in an orthonormal basis of span(K*, K).

    State: ``frame`` (S, F, s) the unit feature directions u_f = k*_f/√D, ``keys`` (S, H, s) the
    keys, s = F + H.
    """

    name: ClassVar[str] = "reduced"
    block: ClassVar[int] = 128  # random numbers of 128 steps in one draw (measured best on CPU)
    unroll: ClassVar[int] = 2

    def __check_init__(self):
        F, H, D, L, B = self.law.F, self.H, self.D, self.L, self.B
        if not reduced_fits(D, F, H, L, B):
            raise ValueError(
                f"the reduced engine needs D − (F + H) ≥ B·L, got D = {D}, F + H = {F + H}, "
                f'B·L = {B * L}; fix: use train.engine = "full" at this small D'
            )

    @float64
    def init(self, keys, sigma0, b0, dtype):
        """Exact law of the full engine's initial keys k_h ~ N(0, σ0² I_D), in coordinates."""
        return _reduced_init(keys["init"], self.law.F, self.H, self.D,
                             jnp.asarray(sigma0, dtype), jnp.asarray(b0, dtype))  # fmt: skip

    @float64
    def start_at(self, keys, state, dtype, noise: float = 0.0):
        """Every seed at the given (M, Q, b) plus key noise (in float64, then cast to ``dtype``)."""
        M, Q, b = (jnp.asarray(x, jnp.float64) for x in state)
        st = _reduced_start(keys["init"], self.D, M, Q, b, jnp.float64(noise))
        return SGDState(*(x.astype(dtype) for x in st[:3]), st.fail_step)

    def randoms(self, key, frame) -> StepRandoms:
        """The random numbers of one step (the block of one step: see :meth:`randoms_block`)."""
        return jax.tree.map(lambda x: x[0], self._draw(key, frame, 1))

    def randoms_block(self, key, frame) -> StepRandoms:
        """The random numbers of ``block`` steps in one draw per kind (leading axis: step)."""
        return self._draw(key, frame, self.block)

    def _draw(self, key, frame, size) -> StepRandoms:
        # The classic (non-partitionable) threefry stream: about twice as fast on CPU for these
        # small per-seed draws (measured in benchmarks/bench_reduced.py); set while tracing, so it
        # touches nothing outside this function.
        with jax.threefry_partitionable(False):
            return self._draw_numbers(key, frame, size)

    def _draw_numbers(self, key, frame, size) -> StepRandoms:
        B, L, s, dtype = self.B, self.L, frame.shape[1], frame.dtype
        BL = B * L
        rows, cols = jnp.tril_indices(BL, -1)
        k1, k2, k3, k4 = jax.random.split(key, 4)
        # all normals of the block in one draw, in float32 (3× cheaper than float64 on CPU; a
        # normal's 24-bit resolution is far below anything a run can resolve)
        g = jax.random.normal(k1, (size, BL * s + rows.size), jnp.float32).astype(dtype)
        diag = jnp.sqrt(chi2(k2, self.D - s - jnp.arange(BL), (size, BL), dtype))  # (size, BL)
        T = jnp.zeros((size, BL, BL), dtype).at[:, rows, cols].set(g[:, BL * s :])
        T = T + diag[:, :, None] * jnp.eye(BL, dtype=dtype)  # Bartlett: T Tᵀ ~ Wishart(D − s)
        return StepRandoms(
            z=g[:, : BL * s].reshape(size, B, L, s),
            T=T.reshape(size, B, L, BL),
            eps=jax.random.randint(k3, (size, B), 0, L),
            theta=self.law.sample(k4, (size, B)).astype(dtype),
        )

    def step(self, frame, keys, b, rnd: StepRandoms, t):
        """One exact SGD step in coordinates (see the module docstring)."""
        C = keys  # (H, s): along u_1…u_F, then a lower-triangular orthogonal part
        F = frame.shape[0]
        B, D = self.B, self.D
        BL = rnd.T.shape[-1]
        z = rnd.z.at[jnp.arange(B), rnd.eps, :F].add(rnd.theta)  # spike K*θ/√D = Σ_f θ_f u_f
        X = jnp.concatenate([z, rnd.T], axis=-1)  # (B, L, s + BL)
        y = X[jnp.arange(B), rnd.eps]  # (B, s + BL)
        K = jnp.pad(C, ((0, 0), (0, BL)))  # (H, s + BL)

        def loss(K, b):
            return jnp.sum(loss_finite(predict(K, b, X, self.activation, D), y, D))

        K_new, b_new, value = self.sgd_update(loss, K, b, t)  # (H, s + BL), (H,), ()
        # the keys' parts orthogonal to span(K*), P (H, H + BL), in the orthonormal basis that
        # Gram–Schmidt makes of them: the Cholesky factor of their Gram matrix, in float64 (heads
        # that nearly coincide make it ill-conditioned; float32 would lose their difference)
        P = K_new[:, F:].astype(jnp.float64)  # (H, H + BL)
        W = cholesky(P @ P.T).astype(C.dtype)  # (H, H) lower-triangular, W Wᵀ = P Pᵀ
        return frame, jnp.concatenate([K_new[:, :F], W], axis=1), b_new, value

    @float64
    @eqx.filter_jit
    def observe(self, state, base: BaseSamples, test=None) -> Observation:
        """Order parameters and the D → ∞ risk (the reduced engine has no held-out batch)."""
        J = self.law.n_atoms
        M, Q = overlaps(state, self.D)
        b = state.b.astype(jnp.float64)
        act, law = self.activation, self.law
        r = jax.vmap(lambda M, Q, b: population_risk(M, Q, b, act, law, base))(M, Q, b)
        S = M.shape[0]
        nan = jnp.full((S,), jnp.nan)
        return Observation(M, Q, b, r.mean, r.se, r.by_atom, nan, nan, jnp.full((S, J), jnp.nan))


def overlaps(state: SGDState, D: int):
    """M (S, H, F) = k_h·k*_f/D and Q (S, H, H) = k_h·k_h'/D, in float64."""
    C = state.keys.astype(jnp.float64)
    Cs = state.frame.astype(jnp.float64)
    M = jnp.einsum("shi,sfi->shf", C, Cs) / jnp.sqrt(D)  # (S, H, F)
    Q = jnp.einsum("shi,ski->shk", C, C) / D  # (S, H, H)
    return M, Q
