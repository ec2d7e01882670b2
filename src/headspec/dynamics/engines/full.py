"""The full engine: finite-D online SGD on D-dimensional keys and tokens (SPEC §3–§4).

Each step draws B fresh sequences (:func:`headspec.core.task.sample_batch`), takes ``jax.grad`` of
the exact loss Σ_batch |ŷ − y|²/(2D) and applies the update of :class:`.base.SGDEngine`. Its cost
per step grows like B·L·D (drawing the tokens dominates on a CPU). It also keeps a held-out batch
per seed, on which the exact finite-D loss is recorded beside the D → ∞ risk.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from headspec.core.latent import Spike
    >>> from headspec.core.attention import Softmax
    >>> from headspec.core.schedules import Constant
    >>> from headspec.core.model import Model
    >>> eng = FullEngine(model=Model(Softmax(), Spike([2.0]), L=4), D=50, H=2, B=1,
    ...                  lr=jnp.asarray(1.0), lr_b=jnp.asarray(1.0), schedule=Constant())
    >>> keys = seed_keys([0, 1])
    >>> state = eng.init(keys, sigma0=0.1, b0=0.0, dtype=jnp.float32)
    >>> state = eng.advance(state, keys["train"], jnp.int64(0), jnp.int64(10))
    >>> state.keys.shape, state.keys.dtype, state.fail_step.tolist()
    ((2, 2, 50), dtype('float32'), [-1, -1])
"""

from __future__ import annotations

import functools
from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from headspec.core.attention import loss_finite, predict
from headspec.core.latent import LatentLaw
from headspec.core.linalg import psd_root, qr
from headspec.core.observables import BaseSamples, Observation, population_risk
from headspec.core.precision import float64
from headspec.core.stats import sample_mean_se
from headspec.core.task import Task, make_frame, sample_batch
from headspec.dynamics.engines.base import SGDEngine, SGDState

Array = jax.Array


def seed_keys(seed_ids) -> dict[str, Array]:
    """Per-seed keys: frame, init, train, test (each of shape (S,)), split from key(seed)."""
    ks = _split_seeds(jnp.asarray(seed_ids))  # (S, 4)
    return {"frame": ks[:, 0], "init": ks[:, 1], "train": ks[:, 2], "test": ks[:, 3]}


@jax.jit
def _split_seeds(seed_ids):
    return jax.vmap(lambda s: jax.random.split(jax.random.key(s), 4))(seed_ids)  # (S, 4)


class HeldOutSet(NamedTuple):
    X: Array  # (S, n, L, D)
    y: Array  # (S, n, D)
    atom: Array  # (S, n) index of θ among the law's atoms (0 for continuous laws)


@float64
def make_test_set(keys: Array, law: LatentLaw, U: Array, L: int, n: int) -> HeldOutSet:
    """n held-out sequences per seed, with the frame U (S, D, F) of each seed."""
    return _make_test_set(keys, law, U, int(L), int(n))


@eqx.filter_jit
def _make_test_set(keys: Array, law: LatentLaw, U: Array, L: int, n: int) -> HeldOutSet:

    def one(key, U):
        bt = sample_batch(key, Task(law, U, L), n)
        return bt.X, bt.y, law.atom_index(bt.theta)

    return HeldOutSet(*jax.vmap(one)(keys, U))


def default_n_test(seeds: int, L: int, D: int, itemsize: int, budget=256 * 2**20) -> int:
    """Held-out sequences per seed: ≤ 256 (so recording stays a small part of a run) and
    within a memory budget for all seeds together."""
    return int(min(256, budget // (seeds * L * D * itemsize)))


@functools.partial(jax.jit, static_argnames=("F", "H", "D", "frame_kind"))
def _full_init(frame_keys, init_keys, *, F: int, H: int, D: int, frame_kind: str, sigma0, b0):
    """Frames U (S, D, F), keys K ~ N(0, σ0² I_D) (S, H, D), biases b0 (S, H): one program."""
    dtype = sigma0.dtype
    U = jax.vmap(lambda k: make_frame(k, D, F, frame_kind, dtype))(frame_keys)  # (S, D, F)
    K = sigma0 * jax.vmap(lambda k: jax.random.normal(k, (H, D), dtype))(init_keys)  # (S, H, D)
    S = K.shape[0]
    b = jnp.full((S, H), b0, dtype)  # (S, H)
    return SGDState(U, K, b, jnp.full((S,), -1, jnp.int64))


@functools.partial(jax.jit, static_argnames=("D", "frame_kind"))
def _full_start(frame_keys, init_keys, *, D: int, frame_kind: str, M, Q, b, noise):
    """Every seed at (M, Q, b): k_h = √D (U M_hᵀ + V R_hᵀ) + noise·N(0, I_D), with R Rᵀ = Q − MMᵀ
    and V (D, H) orthonormal, orthogonal to the seed's frame U (random per seed)."""
    H, F = M.shape
    dtype = M.dtype
    R = psd_root(Q - M @ M.T)  # (H, H)

    def one(kf, ki):
        k1, k2 = jax.random.split(ki)
        U = make_frame(kf, D, F, frame_kind, dtype)  # (D, F)
        G = jax.random.normal(k1, (D, H), dtype)  # (D, H)
        G = G - U @ (U.T @ G)  # (D, H) orthogonal to the frame
        V, _ = qr(G)  # (D, H)
        K = jnp.sqrt(jnp.asarray(D, dtype)) * (M @ U.T + R @ V.T)  # (H, D)
        return U, K + noise * jax.random.normal(k2, (H, D), dtype)  # (D, F), (H, D)

    U, K = jax.vmap(one)(frame_keys, init_keys)  # (S, D, F), (S, H, D)
    S = K.shape[0]
    return SGDState(U, K, jnp.broadcast_to(b, (S, H)), jnp.full((S,), -1, jnp.int64))


class FullEngine(SGDEngine):
    """Keys (H, D) and tokens (B, L, D) in the full D-dimensional space."""

    name: ClassVar[str] = "full"

    @float64
    def init(self, keys, sigma0, b0, dtype):
        sigma0, b0 = jnp.asarray(sigma0, dtype), jnp.asarray(b0, dtype)
        F, H = self.law.F, self.H
        return _full_init(keys["frame"], keys["init"], F=F, H=H, D=self.dim,
                          frame_kind=self.frame_kind, sigma0=sigma0, b0=b0)  # fmt: skip

    @float64
    def start_at(self, keys, state, dtype, noise: float = 0.0):
        """Every seed at the given (M, Q, b) plus key noise, in float64, then cast to ``dtype``."""
        M, Q, b = (jnp.asarray(x, jnp.float64) for x in state)
        st = _full_start(keys["frame"], keys["init"], D=self.dim, frame_kind=self.frame_kind,
                         M=M, Q=Q, b=b, noise=jnp.float64(noise))  # fmt: skip
        return SGDState(*(x.astype(dtype) for x in st[:3]), st.fail_step)

    def loss(self, K: Array, b: Array, X: Array, y: Array) -> Array:
        """Σ over the batch of the exact loss |ŷ − y|²/(2D); X (B, L, D), y (B, D)."""
        return jnp.sum(loss_finite(predict(K, b, X, self.activation), y))  # ()

    def randoms(self, key, frame):
        """The B sequences of one step (X (B, L, D), y (B, D)) with the seed's frame U (D, F)."""
        bt = sample_batch(key, Task(self.law, frame, self.L), self.B)
        return bt.X, bt.y  # (B, L, D), (B, D)

    def step(self, frame, keys, b, rnd, t):
        X, y = rnd
        K_new, b_new, value = self.sgd_update(lambda K, b: self.loss(K, b, X, y), keys, b, t)
        return frame, K_new, b_new, value

    @float64
    def test_set(self, keys, state, n):
        S = state.keys.shape[0]
        if n is None:
            n = default_n_test(S, self.L, self.dim, jnp.dtype(state.keys.dtype).itemsize)
        return (make_test_set(keys, self.law, state.frame, self.L, n) if n >= 2 else None), n

    @float64
    @eqx.filter_jit
    def observe(self, state, base: BaseSamples, test: HeldOutSet | None = None) -> Observation:
        """Order parameters and risks of every seed (float64); held-out loss if ``test``."""
        J = self.law.n_atoms
        act, law = self.activation, self.law

        def one(U, K, b, tX, ty, tatom):
            D = K.shape[-1]
            K64, U64, b64 = K.astype(jnp.float64), U.astype(jnp.float64), b.astype(jnp.float64)
            M = K64 @ U64 / jnp.sqrt(D)  # (H, F)
            Q = K64 @ K64.T / D  # (H, H)
            r = population_risk(M, Q, b64, act, law, base)
            if tX is None:
                nan = jnp.full((), jnp.nan)
                return M, Q, b64, r.mean, r.se, r.by_atom, nan, nan, jnp.full((J,), jnp.nan)
            losses = loss_finite(predict(K, b, tX, act), ty).astype(jnp.float64)  # (n,)
            onehot = jax.nn.one_hot(tatom, J, dtype=jnp.float64)  # (n, J)
            by_atom = (onehot.T @ losses) / jnp.maximum(onehot.sum(0), 1.0)  # (J,)
            mean, se = sample_mean_se(losses)
            return M, Q, b64, r.mean, r.se, r.by_atom, mean, se, by_atom

        tX, ty, ta = (None, None, None) if test is None else test
        in_axes = (0, 0, 0) + ((None, None, None) if test is None else (0, 0, 0))
        out = jax.vmap(one, in_axes=in_axes)(state.frame, state.keys, state.b, tX, ty, ta)
        return Observation(*out)
