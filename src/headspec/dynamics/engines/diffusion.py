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
moments with and without G at D = 100.

Realisable states by construction. The solver integrates (M, C, b) with C = Q − MMᵀ, the Gram
matrix of the keys' parts outside span(K*) (÷ D), not (M, Q, b): by Itô's lemma
dC = dQ − dM Mᵀ − M dMᵀ − Σ_M/D dt (Σ_M the keys' quadratic variation, ``cov_M``), so this is
the same SDE — the same law — in other coordinates, and only its discretisation differs. In
(M, Q) coordinates an explicit step of size dt gets Q and MMᵀ each right to O(dt²) but not their
small difference: with a strong signal (task.latent.scale = 20: M, Q ~ 10³ while C ~ 10⁻²) one Heun
step left λ_min(Q − MMᵀ) at −0.006 (|Q| = 0.015) and cosines at 2. In C coordinates C's noise
vanishes along its null directions and its η² drift is ⪰ 0, so the boundary repels: measured at
scale 20 (η = 1 and 5, D = 10³, t ≤ 20), λ_min(C) stays at +0.009. Nothing is projected away that
the process would have kept. Every solver step is still checked (``_realisable``): a state with
λ_min(C) < −10⁻⁹·max(1, |Q|) (or non-finite) marks its seed failed at that step's time, with
``fail_check`` = 2 (1: non-finite) — the discretisation has broken down there, and a projected
state would follow another law; a state within that round-off is returned projected onto the PSD
cone (a change ≤ 10⁻⁹·|Q|), so that |cos| ≤ 1.

Domain of validity (η, signal, D; dt). The SDE keeps O(1/√D) fluctuations and neglects O(ρ)
corrections with ρ = η·(s² + L)/D, about the most one SGD step changes a score (s² = |cθ|², the
signal's squared size): it is accurate for ρ ≪ 1, degraded up to ρ ~ 10, and refused beyond
(config check, :mod:`headspec.conventions.config.domain`). The explicit solver also needs
dt·η·(s² + L) small enough to resolve the drift; where it is not, the step checks mark the seed
failed (fix: a smaller ``diffusion.dt``) rather than return an impossible state.

The Brownian path of a seed is a :class:`diffrax.VirtualBrownianTree` from its train key: the same
path whatever the recording grid or the grouping of seeds.

Base samples, three ways:
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
- ``exact`` (an :class:`~headspec.dynamics.problem.Exact` method; ``diffusion.drift = "exact"``):
  fixed samples, but the mean is the exact D → ∞ drift plus the samples' finite-D correction
  with a control variate (:func:`~headspec.dynamics.noise.increment_moments`), whose error is
  O(1/(D√n)): on E1's plateau at D = 10⁴, 4·10⁻⁴ of dQ/dt at n = 1024 against 3 % for the
  default sampled mean, for a third of its cost (benchmarks/bench_diffusion_mean.py). Any D, no
  head-cyclic samples needed; the seeds are batched by vmap (each keeps its quadrature branch).

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
    >>> from headspec.core.model import Model
    >>> eng = DiffusionEngine(model=Model(Softmax(), law, L), D=D, H=H, B=1,
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

from headspec.core.linalg import min_eigenvalue, psd_project
from headspec.core.observables import BaseSamples, Observation, population_risk
from headspec.core.precision import float64, float64_context
from headspec.dynamics.engines.base import Engine, given_coordinates
from headspec.dynamics.initial import perturbed_state
from headspec.dynamics.noise import (
    FiniteGram,
    flat_sym,
    increment_moments,
    sym_size,
    unflat_sym,
)
from headspec.dynamics.problem import DriftProblem, Exact, OrderParameters

Array = jax.Array


def _traced_float(x) -> Array:
    """A float64 scalar array (a traced leaf of the jitted engine, not a static field)."""
    with float64_context():
        return jnp.asarray(x, jnp.float64)


class DiffusionState(NamedTuple):
    """Per-seed state of the diffusion engine (leading axis: seed)."""

    M: Array  # (S, H, F)
    Q: Array  # (S, H, H)
    b: Array  # (S, H)
    fail_step: Array  # (S,) step t·D/B of the first solver step that failed a check, −1 if none
    fail_check: Array  # (S,) which check: 0 none, 1 non-finite, 2 not realisable (see CHECKS)


#: What a seed's ``fail_check`` code means (0: the seed did not fail).
CHECKS = {
    1: "the state became non-finite",
    2: "Q − MMᵀ left the positive semi-definite cone (no keys have these overlaps)",
}


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
    # 1: SGD; else tests of the tests. Traced (a float64 array), so another factor compiles
    # nothing new
    noise_factor: jax.Array = eqx.field(default=1.0, converter=_traced_float)
    #: the mean's method: None, the base samples' average of ψ_D; an :class:`Exact` method, the
    #: exact D → ∞ drift plus the samples' finite-D correction (noise.increment_moments)
    exact: Exact | None = eqx.field(kw_only=True, default=None)
    resample: bool = eqx.field(static=True, default=False)  # fresh base samples at every step
    orbit: int = eqx.field(static=True, default=1)  # head-cyclic copies per draw in ``base``

    name: ClassVar[str] = "diffusion"

    def __check_init__(self):
        if self.solver not in ("heun", "euler"):
            raise ValueError(f"solver must be 'heun' or 'euler', got {self.solver!r}")
        if not self.dt > 0 or not self.horizon > 0:
            raise ValueError(f"dt and horizon must be positive, got {self.dt}, {self.horizon}")
        if self.exact is not None and self.resample:
            raise ValueError(
                "an exact mean has no sampling noise to take out of the SGD noise: use fixed "
                "samples (resample = False) with it"
            )
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
        return DiffusionState(*y, jnp.full((S,), -1, jnp.int64), jnp.zeros((S,), jnp.int8))

    @float64
    def start_at(self, keys, state, dtype, noise: float = 0.0) -> DiffusionState:
        """Every seed at the overlaps of the given (M, Q, b)'s keys plus key noise (the exact
        law of :func:`~headspec.dynamics.engines.base.given_coordinates`)."""
        M, Q, b = (jnp.asarray(x, jnp.float64) for x in state)
        S, D = keys["init"].shape[0], self.D

        def one(k):
            X, W = given_coordinates(k, M, Q, D, jnp.float64(noise))  # (H, F), (H, H)
            Dd = jnp.asarray(D, jnp.float64)
            return X / jnp.sqrt(Dd), (X @ X.T + W @ W.T) / Dd

        Ms, Qs = jax.vmap(one)(keys["init"])  # (S, H, F), (S, H, H)
        return DiffusionState(Ms, Qs, jnp.broadcast_to(b, (S, *b.shape)),
                              jnp.full((S,), -1, jnp.int64), jnp.zeros((S,), jnp.int8))  # fmt: skip

    def _term(self, key):
        """The SDE as one diffrax term: one evaluation of the increments' moments gives both
        the drift and the noise of a step (control: (dt, dW))."""
        import diffrax

        H, F = self.H, self.law.F
        if self.exact is None:
            problem = DriftProblem.sampled(self.activation, self.law, self.base, self.lr, self.lr_b)
        else:
            problem = DriftProblem(self.model, self.lr, self.lr_b, self.exact)

        inv_D = self.noise_factor**2 / jnp.asarray(self.D, jnp.float64)

        def moments(t, x):  # x: (M, C = Q − MMᵀ, b) flattened
            M, C, bias = unflat_sym(x, H, F)
            st = OrderParameters(M, C + M @ M.T, bias)
            b = self._fresh_base(sample_key, t) if self.resample else self.base
            m = increment_moments(
                st, problem, self.schedule(t), gram=self.gram,
                resampled=self.D * self.dt if self.resample else None, orbit=self.orbit, base=b,
            )  # fmt: skip
            to_c = functools.partial(_to_realisable, M=M, H=H, F=F)
            zero = jnp.zeros_like
            ito = flat_sym(OrderParameters(zero(M), inv_D * m.cov_M, zero(bias)))  # d⟨M, Mᵀ⟩
            root = jax.vmap(to_c, in_axes=1, out_axes=1)(m.root)  # (d, d)
            return m._replace(mean=to_c(m.mean) - ito, root=root)

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

        def one(M, Q, b, fail, check, key):
            x0 = flat_sym(OrderParameters(M, Q - M @ M.T, b))
            sol = diffrax.diffeqsolve(
                self._term(key),
                diffrax.Heun() if self.solver == "heun" else diffrax.Euler(),
                t0,
                t1,
                self.dt,
                x0,
                saveat=diffrax.SaveAt(steps=True),  # every solver step, each checked
                max_steps=max_steps,
                throw=False,
            )
            taken = jnp.isfinite(sol.ts)  # (max_steps,) steps past the last are padding (inf)
            finite = jnp.all(jnp.isfinite(sol.ys), axis=-1) | ~taken
            real = jax.vmap(lambda x: _realisable(x, H, F))(jnp.where(finite[:, None], sol.ys, 0.0))
            code = jnp.where(~finite, 1, jnp.where(real | ~taken, 0, 2)).astype(jnp.int8)
            bad = code > 0
            first = jnp.argmax(bad)  # the first step that failed a check (0 if none)
            solved = sol.result == diffrax.RESULTS.successful
            ok = solved & ~jnp.any(bad)
            fail_t = sol.ts[first]
            at = jnp.where(solved, jnp.round(fail_t * self.D / self.B).astype(jnp.int64), step0)
            last = jnp.where(taken, jnp.arange(taken.size), -1).max()
            x = sol.ys[jnp.maximum(last, 0)]
            keep = ok & (fail < 0)
            Mn, Cn, bn = unflat_sym(jnp.where(keep, x, x0), H, F)
            Cn = jnp.where(keep, psd_project(Cn), Cn)  # within the tolerance: the nearest PSD
            new = (Mn, Cn + Mn @ Mn.T, bn)
            fresh = (fail < 0) & ~ok
            check = jnp.where(fresh, jnp.where(solved, code[first], 1), check).astype(jnp.int8)
            fail = jnp.where(fresh, at, fail)
            return (*new, fail, check)

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


#: A state is realisable when λ_min(Q − MMᵀ) ≥ −REALISABLE_RTOL · max(1, max |Q|) (round-off of
#: float64 arithmetic on Q and MMᵀ, far below any effect of the dynamics).
REALISABLE_RTOL = 1e-9


def _realisable(x: Array, H: int, F: int) -> Array:
    """Whether the flattened (M, C = Q − MMᵀ, b) is the overlap state of some keys: C ⪰ 0 up to
    :data:`REALISABLE_RTOL` (then also |cos| = |M_hf|/√Q_hh ≤ 1)."""
    M, C, _ = unflat_sym(x, H, F)
    scale = jnp.maximum(1.0, jnp.max(jnp.abs(C + M @ M.T)))
    return min_eigenvalue(C) >= -REALISABLE_RTOL * scale


def _to_realisable(dx: Array, M: Array, H: int, F: int) -> Array:
    """An increment (dM, dQ, db) at keys' overlaps M, flattened, as (dM, dC, db) with
    C = Q − MMᵀ: dC = dQ − dM Mᵀ − M dMᵀ (the linear part; the Itô term is the caller's)."""
    dM, dQ, db = unflat_sym(dx, H, F)
    return flat_sym(OrderParameters(dM, dQ - dM @ M.T - M @ dM.T, db))


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
