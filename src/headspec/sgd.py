"""Finite-D online SGD of multi-head attention (SPEC §3–§4), recording SPEC §5's order parameters.

Each step draws B fresh sequences, takes ``jax.grad`` of the exact finite-D loss
Σ_batch |ŷ − y|²/(2D), and updates k_h ← k_h − η(t) ∇_{k_h}, b_h ← b_h − (η_b(t)/D) ∂_{b_h}; time
advances by B/D. Independent seeds run side by side under ``vmap``; the steps between two points of
the time grid run inside one jitted loop, so memory does not grow with the horizon T.

Every seed s has its own stream: ``jax.random.key(s)`` is split into the frame K*, the initial
keys, the training stream (step n uses ``fold_in(train_key, n)``, whatever the chunking) and the
held-out test set. Same seed, same machine: identical results.

Example:
    >>> from headspec.config import load_config, SimulateConfig
    >>> cfg = load_config(SimulateConfig, overrides=[
    ...     "task.D=50", "task.L=4", "model.H=2", "train.T=1.0", "seeds=2", "record.points=3"])
    >>> ds = simulate(cfg)
    >>> ds.risk.dims, ds.M.shape
    (('seed', 't'), (2, 4, 2, 2))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.attention import Activation, default_bias, get_activation, loss_finite, predict
from headspec.latent import LatentLaw
from headspec.task import Task, make_frame, sample_batch
from headspec.theory import BaseSamples, population_risk

Array = jax.Array


# ----------------------------------------------------------------------------- schedules
@dataclasses.dataclass(frozen=True)
class Constant:
    """η(t)/η = 1."""

    def __call__(self, t):
        return jnp.ones_like(t)


@dataclasses.dataclass(frozen=True)
class InverseTime:
    """η(t)/η = (1 + t/t0)^(−power)."""

    t0: float = 10.0
    power: float = 1.0

    def __call__(self, t):
        return (1.0 + t / self.t0) ** (-self.power)


def schedule_from_config(cfg) -> Callable:
    if cfg.kind == "constant":
        return Constant()
    return InverseTime(cfg.t0, cfg.power)


# ----------------------------------------------------------------------------- the model
class SGD(eqx.Module):
    """Everything a step needs that is not state: law, sizes, activation, learning rates."""

    law: LatentLaw
    activation: Activation
    L: int = eqx.field(static=True)
    D: int = eqx.field(static=True)
    H: int = eqx.field(static=True)
    B: int = eqx.field(static=True)
    lr: Array  # () learning rates: traced, so a sweep over η compiles once
    lr_b: Array  # ()
    schedule: Callable = eqx.field(static=True)  # hashable pure function of t: η(t)/η

    def loss(self, K: Array, b: Array, X: Array, y: Array) -> Array:
        """Σ over the batch of the exact loss |ŷ − y|²/(2D); X (B, L, D), y (B, D)."""
        return jnp.sum(loss_finite(predict(K, b, X, self.activation), y))  # ()

    def batch(self, train_key: Array, step, U: Array):
        """The B sequences of step ``step`` (deterministic in the key and the step)."""
        b = sample_batch(jax.random.fold_in(train_key, step), Task(self.law, U, self.L), self.B)
        return b.X, b.y  # (B, L, D), (B, D)

    def step(self, K: Array, b: Array, X: Array, y: Array, t) -> tuple[Array, Array, Array]:
        """One SGD update; returns new (K, b) and the loss before the update."""
        loss, (gK, gb) = jax.value_and_grad(self.loss, argnums=(0, 1))(K, b, X, y)
        f = self.schedule(t)
        lr, lr_b = jnp.asarray(self.lr, K.dtype), jnp.asarray(self.lr_b, K.dtype)
        K_new = K - (lr * f) * gK  # (H, D)
        b_new = b - (lr_b * f / self.D) * gb  # (H,)
        return K_new, b_new, loss


class State(NamedTuple):
    """Per-seed state (leading axis: seed)."""

    K: Array  # (S, H, D) keys
    b: Array  # (S, H) biases
    fail_step: Array  # (S,) first step whose update was non-finite, −1 if none


def _advance_one(sgd: SGD, K, b, fail, U, train_key, step0, n):
    def body(i, carry):
        K, b, fail = carry
        step = step0 + i
        X, y = sgd.batch(train_key, step, U)
        t = (step * sgd.B / sgd.D).astype(K.dtype)
        K_new, b_new, loss = sgd.step(K, b, X, y, t)
        ok = (
            jnp.isfinite(loss) & jnp.all(jnp.isfinite(b_new)) & jnp.isfinite(jnp.sum(K_new * K_new))
        )
        fail = jnp.where((~ok) & (fail < 0), step, fail)
        keep = fail < 0
        return jnp.where(keep, K_new, K), jnp.where(keep, b_new, b), fail

    return jax.lax.fori_loop(0, n, body, (K, b, fail))


@eqx.filter_jit
def advance(sgd: SGD, state: State, U: Array, train_keys: Array, step0, n) -> State:
    """Run steps step0 … step0+n−1 for every seed (vmap over seeds, one jitted loop)."""
    K, b, fail = jax.vmap(_advance_one, in_axes=(None, 0, 0, 0, 0, 0, None, None))(
        sgd, state.K, state.b, state.fail_step, U, train_keys, step0, n
    )
    return State(K, b, fail)


# ----------------------------------------------------------------------------- observables
class TestSet(NamedTuple):
    X: Array  # (S, n, L, D)
    y: Array  # (S, n, D)
    atom: Array  # (S, n) index of θ among the law's atoms (0 for continuous laws)


def make_test_set(keys: Array, law: LatentLaw, U: Array, L: int, n: int) -> TestSet:
    def one(key, U):
        bt = sample_batch(key, Task(law, U, L), n)
        if law.is_discrete:
            d = jnp.sum((bt.theta[:, None, :] - law.atoms[None].astype(U.dtype)) ** 2, -1)
            atom = jnp.argmin(d, axis=1)  # (n,)
        else:
            atom = jnp.zeros((n,), jnp.int32)
        return bt.X, bt.y, atom

    return TestSet(*jax.vmap(one)(keys, U))


class Observation(NamedTuple):
    M: Array  # (S, H, F)
    Q: Array  # (S, H, H)
    b: Array  # (S, H)
    risk: Array  # (S,)
    risk_se: Array  # (S,)
    risk_by_atom: Array  # (S, J)
    test_risk: Array  # (S,)
    test_risk_se: Array  # (S,)
    test_risk_by_atom: Array  # (S, J)


@eqx.filter_jit
def observe(sgd: SGD, state: State, U: Array, base: BaseSamples, test: TestSet | None):
    """Order parameters and risks of every seed (float64)."""
    J = sgd.law.J if sgd.law.is_discrete else 0

    def one(K, b, U, tX, ty, tatom):
        D = K.shape[-1]
        K64, U64, b64 = K.astype(jnp.float64), U.astype(jnp.float64), b.astype(jnp.float64)
        M = K64 @ U64 / jnp.sqrt(D)  # (H, F)
        Q = K64 @ K64.T / D  # (H, H)
        r = population_risk(M, Q, b64, sgd.activation, sgd.law, base)
        if tX is None:
            nan = jnp.full((), jnp.nan)
            return M, Q, b64, r.mean, r.se, r.by_atom, nan, nan, jnp.full((J,), jnp.nan)
        losses = loss_finite(predict(K, b, tX, sgd.activation), ty).astype(jnp.float64)  # (n,)
        n = losses.shape[0]
        onehot = jax.nn.one_hot(tatom, J, dtype=jnp.float64)  # (n, J)
        by_atom = (onehot.T @ losses) / jnp.maximum(onehot.sum(0), 1.0)  # (J,)
        se = losses.std(ddof=1) / jnp.sqrt(n)
        return M, Q, b64, r.mean, r.se, r.by_atom, losses.mean(), se, by_atom

    tX, ty, ta = (None, None, None) if test is None else test
    in_axes = (0, 0, 0) + ((None, None, None) if test is None else (0, 0, 0))
    return Observation(*jax.vmap(one, in_axes=in_axes)(state.K, state.b, U, tX, ty, ta))


@eqx.filter_jit
def observe_reduced(sgd: SGD, state, base: BaseSamples) -> Observation:
    """Order parameters and the D → ∞ risk for the reduced engine (no held-out batch)."""
    from headspec.reduced import overlaps

    J = sgd.law.J if sgd.law.is_discrete else 0
    M, Q = overlaps(state, sgd.D)
    b = state.b.astype(jnp.float64)
    r = jax.vmap(lambda M, Q, b: population_risk(M, Q, b, sgd.activation, sgd.law, base))(M, Q, b)
    S = M.shape[0]
    nan = jnp.full((S,), jnp.nan)
    return Observation(M, Q, b, r.mean, r.se, r.by_atom, nan, nan, jnp.full((S, J), jnp.nan))


# ----------------------------------------------------------------------------- time grid
def time_grid(record, T: float, D: int, B: int) -> tuple[np.ndarray, np.ndarray]:
    """Steps and times t = step·B/D of the recording grid (SPEC §8); t = 0 first.

    Times are rounded to whole steps, duplicates dropped; the last point is the horizon T.
    """
    if record.grid == "log":
        ts = np.geomspace(record.t_min, T, record.points)
    else:
        ts = np.linspace(0.0, T, record.points + 1)[1:]
    steps = np.unique(np.concatenate([[0], np.round(ts * D / B).astype(np.int64)]))
    return steps, steps * B / D


def default_n_test(seeds: int, L: int, D: int, itemsize: int, budget=256 * 2**20) -> int:
    """Held-out sequences per seed: ≤ 256 (so recording stays a small part of a run) and
    within a memory budget for all seeds together."""
    return int(min(256, budget // (seeds * L * D * itemsize)))


# ----------------------------------------------------------------------------- driver
def build(cfg, schedule: Callable | None = None):
    """(SGD, law) from a :class:`headspec.config.SimulateConfig`."""
    law = cfg.task.latent.build()
    act = get_activation(cfg.model.activation, cfg.model.aggregation)
    sgd = SGD(
        law=law,
        activation=act,
        L=cfg.task.L,
        D=cfg.task.D,
        H=cfg.model.H,
        B=cfg.train.batch,
        lr=jnp.asarray(cfg.train.lr),
        lr_b=jnp.asarray(cfg.train.lr if cfg.train.lr_b is None else cfg.train.lr_b),
        schedule=schedule or schedule_from_config(cfg.train.schedule),
    )
    return sgd, law


def mc_key(mc_seed: int) -> Array:
    """Key of the D → ∞ risk's base samples: disjoint from every run seed's stream."""
    return jax.random.fold_in(jax.random.key(mc_seed), 0x6D63)  # "mc"


def seed_keys(seed_ids) -> dict[str, Array]:
    """Per-seed keys: frame, init, train, test (each of shape (S,))."""
    ks = jax.vmap(lambda s: jax.random.split(jax.random.key(s), 4))(jnp.asarray(seed_ids))
    return {"frame": ks[:, 0], "init": ks[:, 1], "train": ks[:, 2], "test": ks[:, 3]}


def initial_state(cfg, keys, dtype) -> tuple[State, Array]:
    """Frames U (S, D, F) and the initial state of SPEC §4."""
    D, F, H, L = cfg.task.D, cfg.task.latent.F, cfg.model.H, cfg.task.L
    U = jax.vmap(lambda k: make_frame(k, D, F, cfg.task.frame, dtype))(keys["frame"])
    K = cfg.model.sigma0 * jax.vmap(lambda k: jax.random.normal(k, (H, D), dtype))(keys["init"])
    b0 = default_bias(cfg.model.activation, H, L) if cfg.model.b0 is None else cfg.model.b0
    S = K.shape[0]
    b = jnp.full((S, H), b0, dtype)
    return State(K, b, jnp.full((S,), -1, jnp.int64)), U


def simulate(cfg, progress: Callable[[int, int], None] | None = None, schedule=None):
    """Run a :class:`headspec.config.SimulateConfig`; returns the result dataset (SPEC §8 schema).

    ``progress(steps_done, steps_total)`` is called after every chunk; ``schedule`` (a hashable
    pure function t ↦ η(t)/η) overrides the config's schedule.
    """
    from headspec import reduced

    dtype = jnp.float32 if cfg.train.dtype == "float32" else jnp.float64
    sgd, law = build(cfg, schedule)
    seed_ids = np.arange(cfg.seed, cfg.seed + cfg.seeds)
    keys = seed_keys(seed_ids)
    base = BaseSamples.draw(
        mc_key(cfg.record.mc_seed), law, cfg.task.L, cfg.model.H, cfg.record.n_mc
    )
    engine = cfg.train.engine
    if engine == "reduced":
        F, H, D = law.F, cfg.model.H, cfg.task.D
        reduced.check_dimensions(D, F, H, cfg.task.L, cfg.train.batch)
        b0 = (
            default_bias(cfg.model.activation, H, cfg.task.L)
            if cfg.model.b0 is None
            else (cfg.model.b0)
        )
        state = reduced.initial_state(keys["init"], F, H, D, cfg.model.sigma0, b0, dtype)
        n_test = 0

        def run(state, s0, n):
            return reduced.advance(sgd, state, keys["train"], s0, n)

        def look(state):
            return observe_reduced(sgd, state, base)
    else:
        state, U = initial_state(cfg, keys, dtype)
        n_test = cfg.record.n_test
        if n_test is None:
            n_test = default_n_test(cfg.seeds, cfg.task.L, cfg.task.D, jnp.dtype(dtype).itemsize)
        test = make_test_set(keys["test"], law, U, cfg.task.L, n_test) if n_test >= 2 else None

        def run(state, s0, n):
            return advance(sgd, state, U, keys["train"], s0, n)

        def look(state):
            return observe(sgd, state, U, base, test)

    steps, ts = time_grid(cfg.record, cfg.train.T, cfg.task.D, cfg.train.batch)
    obs = []
    done = 0
    for target in steps:
        if target > done:
            state = run(state, jnp.int64(done), jnp.int64(target - done))
            done = int(target)
        obs.append(jax.tree.map(np.asarray, look(state)))
        if progress is not None:
            progress(done, int(steps[-1]))
    fail_step = np.asarray(state.fail_step)
    return assemble(
        "simulation",
        cfg,
        law,
        ts,
        steps,
        seed_ids,
        obs,
        fail_step,
        np.where(fail_step >= 0, fail_step * cfg.train.batch / cfg.task.D, np.nan),
        {"engine": engine, "n_test": n_test, "dtype": cfg.train.dtype},
    )


def assemble(kind, cfg, law, ts, steps, seed_ids, obs, fail_step, fail_t, extra):
    """The result dataset from per-grid-point observations (shared by simulation and theory):
    stacks them to (seed, t, …) and records the Bayes risk (10^5 sequences) as a reference."""
    from headspec import results
    from headspec.bayes import bayes_risk

    stacked = Observation(*[np.stack(x, axis=1) for x in zip(*obs, strict=True)])  # (S, T, …)
    rb = bayes_risk(jax.random.key(cfg.seed), law, cfg.task.L, n=100_000)
    return results.from_observations(
        kind=kind,
        t=ts,
        steps=steps,
        seeds=seed_ids,
        obs=stacked,
        fail_step=fail_step,
        fail_t=fail_t,
        config=cfg,
        extra_attrs={"bayes_risk": rb.mean, "bayes_risk_se": rb.se, **extra},
        atoms=np.asarray(law.atoms) if law.is_discrete else None,
    )


def divergence_message(ds, seed_index: int) -> str:
    """Human explanation of a diverged seed."""
    lr = ds.attrs.get("lr", "?")
    step = int(ds.fail_step[seed_index])
    t = float(ds.fail_t[seed_index])
    return (
        f"seed {int(ds.seed[seed_index])} diverged at step {step} (t = {t:.4g}): the loss, "
        f"biases or key norms became non-finite; the learning rate (train.lr = {lr}) is "
        f"likely too large — lower train.lr (or train.lr_b); its results stop at t = {t:.4g}"
    )
