"""The diffusion engine: finite-D training at any D for the cost of the ODE
(``train.engine = "diffusion"``).

One exact SGD step (batch 1) moves X = (M, Q, b) by ψ/D, and given X the law of ψ is known: the
base samples of the theory plus the tokens' Gram matrix at dimension D give its mean f_D(X) and
covariance C_D(X) exactly (:mod:`headspec.dynamics.noise`; f_D → f, the ODE's drift, as D → ∞).
Over a time dt, D·dt independent steps add up to the diffusion approximation

    dX = f_D(X) dt + C_D(X)^{1/2} dW / √D,

which this engine integrates from the exact finite-D initial law of (M, Q, b) (Bartlett–Wishart,
the same draw as the reduced engine's for the same seed), one Brownian path per seed, with
diffrax on a fixed step ``dt``. Its cost per unit of t does not depend on D: D = 10^9 costs what
D = 10^3 costs.

What it neglects, all O(1/D) per unit time (against the O(1/√D) fluctuations it keeps):
- the SGD chain's discreteness: steps of size h = B/D follow the flow of f − (h/2)(∂f) f;
- the increments' third and higher cumulants (O(1/D²) per step);
- with the default Heun solver, the Itô correction: SGD is an Itô process (the noise is set where a
  step starts), Heun converges to the Stratonovich solution, and the two differ by
  ½ Σ_j (∂σ_j) σ_j = O(1/D) in the drift; ``solver = "euler"`` (Euler–Maruyama) is Itô but its
  error is O(dt) instead of O(dt²);
- for batches B > 1, the O(B/D) correlations between the sequences of a step.
The D → ∞ drift alone (``gram = None``) would be off by O(L²/D): against 10⁵ real SGD steps from
one state (L = 10, η = 3), 2 % at D = 10³ and 14 % at D = 10²; tests/test_diffusion.py checks the
moments with and without G at D = 100. Where Q − MMᵀ is near-singular, Gaussian noise can push it
slightly out of the PSD cone; √(Q − MMᵀ) clips it.

The Brownian path of a seed is a :class:`diffrax.VirtualBrownianTree` from its train key: the same
path whatever the recording grid or the grouping of seeds.

Base samples, two ways:
- fixed (default): shared by every seed and step (common random numbers, as in the theory), at
  any D. Their O(1/√n) error of f is then a bias that every step repeats: on a plateau, where f is
  small, 2–3 % of dQ/dt at n = 8192 (studies/drift_error.py), which shifts Q's mean as much. Make
  them head-cyclic when D is large against n, or their O(1/√n) head asymmetry outweighs the
  O(1/√D) one that matters.
- ``resample=True``: n fresh Monte-Carlo samples per seed at every step. The drift is then
  unbiased; its sampling error, of covariance V ≈ C/n per evaluation, adds dt·V per unit time of
  noise, which is SGD noise of the right shape: the injected noise is reduced to
  (C − D·dt·V)/D per unit time, so that the total is C/D (needs n ≥ D·dt; a step clipped to end
  on a grid point is compensated as a full one). This is the law-exact mode for D up to n/dt.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from headspec.core.latent import Spike
    >>> from headspec.core.attention import Softmax
    >>> from headspec.core.observables import BaseSamples
    >>> from headspec.core.schedules import Constant
    >>> from headspec.dynamics.engines import seed_keys
    >>> from headspec.dynamics.noise import gram_rest
    >>> law, L, H, D = Spike([2.0]), 4, 2, 10**9
    >>> base = BaseSamples.draw(jax.random.key(1), law, L=L, H=H, n=512)
    >>> eng = DiffusionEngine(law=law, activation=Softmax(), L=L, D=D, H=H, B=1,
    ...                       lr=jnp.asarray(1.0), lr_b=jnp.asarray(1.0), schedule=Constant(),
    ...                       base=base, gram=gram_rest(jax.random.key(2), 512, L, D, law.F + H),
    ...                       dt=0.1, horizon=1.0)
    >>> keys = seed_keys([0, 1])
    >>> state = eng.init(keys, sigma0=0.1, b0=0.0, dtype=jnp.float64)
    >>> state = eng.advance(state, keys["train"], jnp.int64(0), jnp.int64(D))   # to t = 1
    >>> state.M.shape, state.fail_step.tolist()
    ((2, 2, 1), [-1, -1])
"""

from __future__ import annotations

import functools
from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from headspec.core.observables import BaseSamples, Observation, population_risk
from headspec.core.precision import float64
from headspec.dynamics.engines.base import Engine
from headspec.dynamics.initial import perturbed_state
from headspec.dynamics.noise import (
    FiniteGram,
    flat_sym,
    increment_moments,
    sym_size,
    unflat_sym,
)
from headspec.dynamics.problem import DriftProblem, OrderParameters

Array = jax.Array


class DiffusionState(NamedTuple):
    """Per-seed state of the diffusion engine (leading axis: seed)."""

    M: Array  # (S, H, F)
    Q: Array  # (S, H, H)
    b: Array  # (S, H)
    fail_step: Array  # (S,) first step (t·D/B) of the segment where the state became non-finite


class DiffusionEngine(Engine):
    """The SDE of the order parameters at dimension D (see the module docstring).

    ``base``: the drift's and noise's base samples; ``gram``: their finite-D Gram parts
    (:func:`~headspec.dynamics.noise.gram_rest`; None: the D → ∞ increments); ``dt``, ``solver``:
    the fixed step and "heun" or "euler"; ``horizon``: the end of the Brownian paths (≥ the last
    time the run reaches); ``noise_factor``: multiplies the noise (1 is SGD; √2 is the
    deliberately wrong noise C × 2 that shows the validation tests can fail).
    """

    base: BaseSamples = eqx.field(kw_only=True)
    gram: FiniteGram | None = eqx.field(kw_only=True, default=None)
    dt: float = eqx.field(static=True, default=0.1)
    solver: str = eqx.field(static=True, default="heun")  # "heun" | "euler"
    horizon: float = eqx.field(static=True, default=1.0)
    noise_factor: float = eqx.field(static=True, default=1.0)  # 1: SGD; else tests of the tests
    resample: bool = eqx.field(static=True, default=False)  # fresh base samples at every step
    orbit: int = eqx.field(static=True, default=1)  # head-cyclic copies per draw in ``base``

    name: ClassVar[str] = "diffusion"

    def __check_init__(self):
        if self.solver not in ("heun", "euler"):
            raise ValueError(f"solver must be 'heun' or 'euler', got {self.solver!r}")
        if not self.dt > 0 or not self.horizon > 0:
            raise ValueError(f"dt and horizon must be positive, got {self.dt}, {self.horizon}")
        if self.D - self.law.F < self.H:
            raise ValueError(
                f"the diffusion engine draws the initial overlaps of {self.H} keys at D = "
                f"{self.D}, which needs D − F ≥ H; fix: raise D to at least {self.law.F + self.H}"
            )

    @float64
    def init(self, keys, sigma0, b0, dtype) -> DiffusionState:
        """The exact law of the finite-D initial (M, Q, b) (the reduced engine's draw)."""
        F, H, D = self.law.F, self.H, self.D
        y = jax.vmap(lambda k: perturbed_state(k, H, F, D, sigma0, b0))(keys["init"])
        S = y.M.shape[0]
        return DiffusionState(*y, jnp.full((S,), -1, jnp.int64))

    def _term(self, key):
        """The SDE as one diffrax term: one evaluation of the increments' moments gives both
        the drift and the noise of a step (control: (dt, dW))."""
        import diffrax

        H, F = self.H, self.law.F
        problem = DriftProblem.sampled(self.activation, self.law, self.base, self.lr, self.lr_b)

        def moments(t, x):
            st = unflat_sym(x, H, F)
            b = self._fresh_base(sample_key, t) if self.resample else self.base
            return increment_moments(
                st, problem, self.schedule(t), self.gram,
                resampled=self.D * self.dt if self.resample else None, orbit=self.orbit, base=b,
            )  # fmt: skip

        sample_key = jax.random.fold_in(key, 0x7273)  # "rs": the seed's fresh samples

        bm = diffrax.VirtualBrownianTree(
            0.0,
            self.horizon,
            tol=self.dt / 16,
            shape=(sym_size(H, F),),
            key=key,
            levy_area=diffrax.BrownianIncrement,
        )
        scale = self.noise_factor / jnp.sqrt(jnp.asarray(self.D, jnp.float64))
        return _term_class()(moments, bm, scale)

    def _fresh_base(self, key, t) -> BaseSamples:
        """The seed's fresh base samples at time t (a function of the exact float t: Heun's
        corrector at the end of a step and the next step's predictor share them)."""
        bits = jax.lax.bitcast_convert_type(jnp.asarray(t, jnp.float64), jnp.uint32)  # (2,)
        k = jax.random.fold_in(jax.random.fold_in(key, bits[0]), bits[1])
        n0 = self.base.n // self.orbit
        fresh = BaseSamples.draw(k, self.law, self.L, self.H, n0)  # (n0, …)
        return fresh.head_cyclic() if self.orbit > 1 else fresh

    @float64
    @eqx.filter_jit
    def advance(self, state: DiffusionState, train_keys, step0, n) -> DiffusionState:
        """Integrate every seed from t = step0·B/D to (step0 + n)·B/D."""
        import diffrax

        H, F = self.H, self.law.F
        t0 = (step0 * self.B / self.D).astype(jnp.float64)
        t1 = ((step0 + n) * self.B / self.D).astype(jnp.float64)
        max_steps = int(self.horizon / self.dt) + 16

        def one(M, Q, b, fail, key):
            x0 = flat_sym(OrderParameters(M, Q, b))
            sol = diffrax.diffeqsolve(
                self._term(key),
                diffrax.Heun() if self.solver == "heun" else diffrax.Euler(),
                t0,
                t1,
                self.dt,
                x0,
                saveat=diffrax.SaveAt(t1=True),
                max_steps=max_steps,
                throw=False,
            )
            x = sol.ys[-1]
            ok = (sol.result == diffrax.RESULTS.successful) & jnp.all(jnp.isfinite(x))
            keep = ok & (fail < 0)
            new = unflat_sym(jnp.where(keep, x, x0), H, F)
            fail = jnp.where((fail < 0) & ~ok, step0, fail)
            return (*new, fail)

        return DiffusionState(*jax.vmap(one)(*state, train_keys))

    @float64
    @eqx.filter_jit
    def observe(self, state: DiffusionState, base: BaseSamples, test=None) -> Observation:
        """Order parameters and the D → ∞ risk (no held-out batch)."""
        J = self.law.n_atoms
        act, law = self.activation, self.law
        r = jax.vmap(lambda M, Q, b: population_risk(M, Q, b, act, law, base))(
            state.M, state.Q, state.b
        )
        S = state.M.shape[0]
        nan = jnp.full((S,), jnp.nan)
        return Observation(
            state.M, state.Q, state.b, r.mean, r.se, r.by_atom, nan, nan, jnp.full((S, J), jnp.nan)
        )


@functools.cache
def _term_class():
    """The diffrax term class (built on first use: diffrax is imported only when needed)."""
    import diffrax

    class IncrementTerm(diffrax.AbstractTerm):
        """dX = mean dt + scale · root dW, with (mean, root) from one evaluation at X."""

        moments: object  # (t, x) → IncrementMoments
        bm: diffrax.AbstractBrownianPath
        scale: Array  # () 1/√D

        def vf(self, t, y, args):
            m = self.moments(t, y)
            return m.mean, m.root  # (d,), (d, d)

        def contr(self, t0, t1, **kwargs):
            return t1 - t0, self.bm.evaluate(t0, t1)  # (), (d,)

        def prod(self, vf, control):
            (mean, root), (dt, dw) = vf, control
            return mean * dt + self.scale * (root @ dw)  # (d,)

    return IncrementTerm
