"""The abstract engine, and the SGD engines' one update rule, divergence rule and loop (SPEC §4).

An :class:`Engine` holds everything a run needs that is not state (the model — activation, law,
L —, sizes, learning rates, schedule) and says how to start (``init``), how to move every seed
from one step to a later one (``advance``) and what to record (``observe``); :func:`run` walks
any engine along the recording grid. Steps count SGD steps, t = step·B/D, whatever the engine:
the diffusion engine (:mod:`.diffusion`) integrates an SDE in t between the same grid points.

An :class:`SGDEngine` trains by online SGD. Concrete SGD engines say how a step's random numbers
are drawn, how the loss of a step is computed from them, and how (M, Q) are read off the state;
this module does the rest for all of them:

- the update k_h ← k_h − η(t) ∇_{k_h} ℓ, b_h ← b_h − (η_b(t)/D) ∂_{b_h} ℓ with ``jax.grad``
  (:meth:`Engine.sgd_update`);
- divergence: the first step whose loss, biases or key norms are non-finite is recorded per seed
  and that seed's state is frozen there (:func:`_advance_one`);
- the jitted loop over steps, ``vmap`` over seeds, random numbers drawn ``block`` steps at a time
  (:meth:`Engine.advance`), and the walk along the recording grid (:func:`run`).

Every seed s has its own stream: step n of seed s uses ``fold_in(train_key_s, n)`` (or, for an
engine that draws a block of steps at once, entry n mod block of the block drawn from
``fold_in(train_key_s, n // block)``), whatever the chunking, so the same seed gives the same run
however seeds and grid points are grouped.
Adding an engine = one module with a subclass (see :mod:`.full`, :mod:`.reduced` and
:mod:`.diffusion`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.attention import Activation
from headspec.core.latent import LatentLaw
from headspec.core.linalg import bartlett, cholesky, psd_root
from headspec.core.model import Model
from headspec.core.observables import BaseSamples, Observation
from headspec.core.precision import float64, float64_context

Array = jax.Array


def dimension(D) -> Array:
    """The token dimension D as an int64 scalar array: a traced value in the jitted loops, so
    runs at another D reuse the compiled programs (no shape of the reduced or diffusion engine
    depends on D; the full engine reads its shapes from its arrays)."""
    with float64_context():
        return jnp.asarray(D, jnp.int64)


@jax.jit
def given_coordinates(key: Array, M: Array, Q: Array, D, noise) -> tuple[Array, Array]:
    """Keys with the overlaps (M (H, F), Q (H, H)) at dimension D, plus ``noise``·N(0, I_D) each,
    in the reduced engine's coordinates: along the F feature directions X (H, F) = √D·M + noise·Z,
    and their orthogonal parts' lower-triangular Gram factor W (H, H): W Wᵀ = (√D·R + noise·A)
    (…)ᵀ + noise²·T Tᵀ, R Rᵀ = Q − MMᵀ, with Z, A ~ N(0, 1) and T Tᵀ ~ Wishart(D − F − H, I_H)
    the noise's parts outside the keys' span (exact, as the random start's Bartlett factor). With
    ``noise`` = 0, W = √D·R (identical heads stay identical: then SGD keeps them so)."""
    H, F = M.shape
    dtype = M.dtype
    Dd = jnp.asarray(D, dtype)
    nu = jnp.asarray(noise, dtype)
    k1, k2, k3 = jax.random.split(key, 3)
    R = jnp.sqrt(Dd) * psd_root(Q - M @ M.T)  # (H, H)
    X = jnp.sqrt(Dd) * M + nu * jax.random.normal(k1, (H, F), dtype)  # (H, F)
    P = R + nu * jax.random.normal(k2, (H, H), dtype)  # (H, H): inside the keys' span
    T = bartlett(k3, jnp.asarray(D, jnp.int64) - F - H, H, dtype)  # (H, H): outside it
    G = P @ P.T + nu**2 * (T @ T.T)  # (H, H)
    W = jnp.where(nu > 0, cholesky(G), R)  # (H, H)
    return X, W


class SGDState(NamedTuple):
    """Per-seed state of an engine (leading axis: seed), in the engine's coordinates."""

    frame: Array  # (S, …) the feature directions (full: U (S, D, F); reduced: (S, F, s))
    keys: Array  # (S, H, …) the keys k_h (full: (S, H, D); reduced: (S, H, s))
    b: Array  # (S, H) biases
    fail_step: Array  # (S,) first step whose update was non-finite, −1 if none


class Engine(eqx.Module):
    """How a run of multi-head attention training evolves: the model, the sizes, the learning
    rates and the schedule; subclasses say how to start, advance and observe every seed."""

    model: Model  # the activation, the latent law and L
    D: Array = eqx.field(converter=dimension)  # () traced: another D compiles nothing new
    H: int = eqx.field(static=True)
    B: int = eqx.field(static=True)
    lr: Array  # () learning rates: traced, so a sweep over η compiles once
    lr_b: Array  # ()
    schedule: Callable  # η(t)/η: a Schedule (traced parameters) or a hashable pure function
    frame_kind: str = eqx.field(static=True, default="random")  # K*: "random" | "canonical"

    name: ClassVar[str]
    #: whether advancing n steps in pieces gives, bit for bit, one advance of n steps (SGD
    #: engines: their random numbers follow the step index; not the diffusion engine, which
    #: clips its solver steps to each piece's end)
    any_chunking: ClassVar[bool] = False

    @property
    def law(self) -> LatentLaw:
        return self.model.law

    @property
    def activation(self) -> Activation:
        return self.model.activation

    @property
    def L(self) -> int:
        return self.model.L

    @property
    def dim(self) -> int:
        """D as a Python int, for shapes and checks outside jitted code."""
        return int(self.D)

    @abc.abstractmethod
    def init(self, keys: dict[str, Array], sigma0: float, b0: float, dtype):
        """Initial state of SPEC §4 (keys k_h ~ N(0, σ0² I_D), biases b0) for every seed; a
        NamedTuple with a ``fail_step`` (S,) field (−1: no divergence)."""

    def start_at(self, keys: dict[str, Array], state, dtype, noise: float = 0.0):
        """Every seed at the given order parameters ``state`` = (M (H, F), Q (H, H), b (H,)),
        realised by keys of dimension D, plus ``noise``·N(0, I_D) added to each key (a new draw
        per seed: it breaks the symmetry of identical heads, which SGD alone keeps; overlaps move
        by O(noise/√D) and Q's diagonal by noise²). Q − MMᵀ must be positive semi-definite."""
        raise NotImplementedError(f"the {self.name} engine cannot start from a given state")

    @abc.abstractmethod
    def advance(self, state, train_keys: Array, step0, n):
        """Every seed from step ``step0`` to step ``step0 + n`` (t = step·B/D)."""

    @abc.abstractmethod
    def observe(self, state, base: BaseSamples, test=None) -> Observation:
        """Order parameters (float64) and risks of every seed."""

    def test_set(self, keys: Array, state, n: int | None):
        """(held-out batch per seed or None, its size): for the exact finite-D loss; engines
        without one return (None, 0)."""
        return None, 0


class SGDEngine(Engine):
    """Online SGD of multi-head attention, one step at a time (SPEC §4)."""

    any_chunking: ClassVar[bool] = True
    block: ClassVar[int] = 1  # steps whose random numbers are drawn in one call
    unroll: ClassVar[int] = 1  # loop unrolling inside a block

    # -- what an SGD engine defines ------------------------------------------------------------
    @abc.abstractmethod
    def randoms(self, key: Array, frame: Array):
        """The random numbers of one step of one seed, from that step's key."""

    #: Optional: ``randoms_block(key, frame)`` → the random numbers of ``block`` steps at once
    #: (leading axis: step), from the block's key — fewer, larger random draws than ``block``
    #: calls of ``randoms`` (an engine whose step is cheap pays mostly for the draws).
    randoms_block: ClassVar[Callable | None] = None

    @abc.abstractmethod
    def step(
        self, frame: Array, keys: Array, b: Array, rnd, t
    ) -> tuple[Array, Array, Array, Array]:
        """One SGD step of one seed: new (frame, keys, b) and the loss before the update."""

    # -- shared by every SGD engine ----------------------------------------------------------------
    def sgd_update(self, loss_fn, K: Array, b: Array, t) -> tuple[Array, Array, Array]:
        """The SGD rule of SPEC §4 on keys K (H, …) and biases b (H,); returns new K, b, loss."""
        loss, (gK, gb) = jax.value_and_grad(loss_fn, argnums=(0, 1))(K, b)
        f = self.schedule(t)
        lr, lr_b = jnp.asarray(self.lr, K.dtype), jnp.asarray(self.lr_b, K.dtype)
        K_new = K - (lr * f) * gK  # (H, …)
        b_new = b - (lr_b * f / self.D) * gb  # (H,)
        return K_new, b_new, loss

    @float64
    @eqx.filter_jit
    def advance(self, state: SGDState, train_keys: Array, step0, n) -> SGDState:
        """Run steps step0 … step0+n−1 for every seed (vmap over seeds, one jitted loop)."""
        return jax.vmap(_advance_one, in_axes=(None, 0, 0, None, None))(
            self, state, train_keys, step0, n
        )


def _advance_one(engine: SGDEngine, state: SGDState, train_key, step0, n) -> SGDState:
    """Steps step0 … step0+n−1 of one seed (``state`` without its seed axis), in blocks of
    ``engine.block`` steps (steps of a block outside that range are computed, not applied). A
    non-finite update freezes the seed.

    Random numbers: per step from ``fold_in(train_key, step)``, or, for an engine with
    ``randoms_block``, per block from ``fold_in(train_key, step // block)`` with blocks aligned
    to multiples of ``block`` (so that any chunking of the steps draws the same numbers)."""
    dtype = state.keys.dtype
    size = engine.block
    by_block = engine.randoms_block is not None

    def body(carry, inp):
        frame, keys, b, fail = carry
        step, rnd = inp
        t = (step * engine.B / engine.D).astype(dtype)
        frame_n, keys_n, b_n, loss = engine.step(frame, keys, b, rnd, t)
        ok = jnp.isfinite(loss) & jnp.all(jnp.isfinite(b_n)) & jnp.isfinite(jnp.sum(keys_n**2))
        active = (step >= step0) & (step < step0 + n)
        fail = jnp.where(active & (~ok) & (fail < 0), step, fail)
        keep = active & (fail < 0)
        new = (frame_n, keys_n, b_n)
        frame, keys, b = (jnp.where(keep, x, y) for x, y in zip(new, (frame, keys, b), strict=True))
        return (frame, keys, b, fail), None

    first = step0 - step0 % size if by_block else step0  # start of the first block

    def block(j, carry):
        steps = first + j * size + jnp.arange(size)  # (block,)
        if by_block:
            rnds = engine.randoms_block(jax.random.fold_in(train_key, steps[0] // size), carry[0])
        else:
            step_keys = jax.vmap(lambda st: jax.random.fold_in(train_key, st))(steps)
            rnds = jax.vmap(lambda k: engine.randoms(k, carry[0]))(step_keys)  # each (block, …)
        carry, _ = jax.lax.scan(body, carry, (steps, rnds), unroll=engine.unroll)
        return carry

    n_blocks = (step0 + n - first + size - 1) // size
    return SGDState(*jax.lax.fori_loop(0, n_blocks, block, tuple(state)))


@float64
def run(
    engine: Engine,
    state,
    train_keys: Array,
    steps: np.ndarray,
    base: BaseSamples,
    *,
    test=None,
    progress: Callable[[int, int], None] | None = None,
    done: list[Observation] | None = None,
    at: int | None = None,
    after: Callable[[list[Observation], object, int], None] | None = None,
    piece: int | None = None,
) -> tuple[list[Observation], object]:
    """Advance every seed along the recording grid ``steps`` (step 0 first) and observe it at
    each grid point (as NumPy arrays); ``progress(steps_done, steps_total)`` after each. Any
    engine: SGD or diffusion. ``done``: the observations of the first grid points, already made
    (a resumed run: ``state`` is then the state at step ``at``, by default the last of those
    grid points); ``after(obs, state, steps_done)``: called after each advance (a checkpoint);
    ``piece``: advance at most this many steps at a time (only for an engine with
    ``any_chunking``: the result is the same)."""
    obs = list(done or [])
    if at is None:
        at = int(steps[len(obs) - 1]) if obs else 0
    total = int(steps[-1])
    for target in steps[len(obs) :]:
        while target > at:
            n = int(target) - at if piece is None else min(int(target) - at, int(piece))
            state = engine.advance(state, train_keys, jnp.int64(at), jnp.int64(n))
            at += n
            if at < target:  # inside an interval: progress and a checkpoint, no observation
                if progress is not None:
                    progress(at, total)
                if after is not None:
                    after(obs, state, at)
        obs.append(jax.tree.map(np.asarray, engine.observe(state, base, test)))
        if progress is not None:
            progress(at, total)
        if after is not None:
            after(obs, state, at)
    return obs, state
