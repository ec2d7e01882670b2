"""The D → ∞ order-parameter ODE of SPEC §5: its Jacobian by autodiff, and its integration.

The vector field is that of a :class:`~headspec.dynamics.problem.DriftProblem` (activation, law,
learning rates, η² term, and the method that evaluates the expectations: sampled — Monte Carlo or
scrambled Sobol, common random numbers — or exact by quadrature). :func:`integrate` solves the
ODE with diffrax (Tsit5, adaptive steps) for a batch of initial states and records the shared
observables on a time grid. The names of :mod:`headspec.dynamics.problem` that every user of the
ODE needs (``OrderParameters``, ``Drift``, ``DriftProblem``, ``flatten``, …) are importable from
here too.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from headspec.core.latent import Spike
    >>> from headspec.core.attention import Softmax
    >>> from headspec.core.observables import BaseSamples
    >>> law = Spike([2.0])
    >>> base = BaseSamples.draw(jax.random.key(0), law, L=10, H=1, n=4096)
    >>> problem = DriftProblem.sampled(Softmax(), law, base, lr=1.0)
    >>> at = OrderParameters(M=jnp.array([[0.5]]), Q=jnp.array([[0.5]]), b=jnp.zeros(1))
    >>> d = problem.drift(at)
    >>> bool(d.dM[0, 0] > 5 * d.dM_se[0, 0])      # the head moves towards the spike
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.attention import Activation
from headspec.core.latent import LatentLaw
from headspec.core.linalg import eigvalsh, jacobian_in_batches
from headspec.core.observables import BaseSamples, Observation, population_risk
from headspec.core.precision import float64, float64_context
from headspec.dynamics.problem import (
    Drift,
    DriftProblem,
    Exact,
    OrderParameters,
    Sampled,
    flatten,
    unflatten,
)

__all__ = [
    "Drift", "DriftProblem", "Exact", "Integration", "OrderParameters", "Sampled", "Solver",
    "drift_and_jacobian", "flatten", "integrate", "unflatten",
]  # fmt: skip

Array = jax.Array


def _tolerance(x) -> Array:
    with float64_context():
        return jnp.asarray(x, jnp.float64)


class Solver(eqx.Module):
    """How the ODE is stepped: diffrax's Tsit5 with a PID step-size controller at ``rtol`` and
    ``atol`` (traced: other tolerances reuse the compiled programs) and at most ``max_steps``
    steps per solve (static). A seed whose solve runs out of steps, or whose state stops being
    finite, is marked failed at the grid point before."""

    rtol: Array = eqx.field(converter=_tolerance, default=1e-5)
    atol: Array = eqx.field(converter=_tolerance, default=1e-7)
    max_steps: int = eqx.field(static=True, default=100_000)

    def controller(self):
        import diffrax

        return diffrax.PIDController(rtol=self.rtol, atol=self.atol)


@float64
def drift_and_jacobian(problem: DriftProblem, state: OrderParameters, jitter=0.0):
    """The drift at ``state`` and its Jacobian ∂(drift)/∂(M, Q, b) by forward mode (in batches
    of directions: :func:`~headspec.core.linalg.jacobian_in_batches`).

    Both act on the flat vector of :func:`flatten` (M row-major, then Q, then b), so fixed points
    can be found (drift = 0) and classified (eigenvalues of the Jacobian). Q's entries are treated
    as independent coordinates; the drift keeps Q symmetric.

    The sampled estimate uses √(Q − MMᵀ), whose derivative is infinite where that matrix is
    singular (keys inside span(K*), e.g. the constructed Bayes-softmax optimum). Such a state is
    refused unless ``jitter`` > 0, which evaluates at Q + jitter·I instead (the exact method's
    η-linear part needs no root; its sampled η² term does, when kept).
    """
    H, F = state.M.shape
    Q = state.Q + jitter * jnp.eye(H, dtype=state.Q.dtype)
    needs_root = not (isinstance(problem.method, Exact) and not problem.eta2)
    smallest = float(eigvalsh(Q - state.M @ state.M.T).min())
    if needs_root and smallest <= 1e-10 * max(1.0, float(jnp.trace(Q))):
        raise ValueError(
            f"Q − MMᵀ is singular here (smallest eigenvalue {smallest:.3g}): the Jacobian of the "
            "sampled drift is infinite; fix: pass jitter > 0 (e.g. 1e-6), or use the exact "
            "method without the η² term"
        )
    x = flatten(OrderParameters(state.M, Q, state.b))
    return _value_and_jacobian(problem, x, H, F)


@eqx.filter_jit
def _value_and_jacobian(problem: DriftProblem, x, H: int, F: int):
    def f(x):
        return flatten(problem.field_at(unflatten(x, H, F)))

    return jacobian_in_batches(f, x)


# ============================================================================ integration
def _rhs(t, y, args):
    problem, schedule = args
    return problem.field_at(OrderParameters(*y), schedule(t))


def _solve(y, t0, t1, saveat, args, solver: Solver):
    """One seed's diffrax solve of the drift from t0 to t1 (Tsit5, PID steps, no throw)."""
    import diffrax

    return diffrax.diffeqsolve(
        diffrax.ODETerm(_rhs),
        diffrax.Tsit5(),
        t0,
        t1,
        None,
        y,
        args=args,
        saveat=saveat,
        stepsize_controller=solver.controller(),
        max_steps=solver.max_steps,
        throw=False,
    )


CHUNKS = 8  # the grid is integrated in this many solves (progress between them)


class Integration(NamedTuple):
    """What :func:`integrate` returns."""

    obs: list[Observation]  # one per grid point
    fail_t: np.ndarray  # (S,) each seed's failure time (NaN: none)
    n_steps: int  # solver steps (max over seeds, summed over solves)
    #: (S, K) the exact method's η-linear vector-field error bound (largest entry of
    #: :func:`~headspec.core.accuracy.error_bound` of the field and the field on the refined
    #: rule) at the K times ``err_t`` between its solves (``certify``); else (S, 0)
    drift_err: np.ndarray
    err_t: np.ndarray  # (K,)

    def path_err(self) -> np.ndarray:
        """(S,) ∫ drift_err dt over the run (trapezoid over ``err_t``): the state error the
        quadrature's errors add up to when none is amplified (a plateau's unstable direction
        amplifies them by e^{λt}; the ODE's own tolerances are separate). NaN: not measured."""
        if self.drift_err.shape[1] < 2:
            return np.full(self.drift_err.shape[0], np.nan)
        e, t = self.drift_err, self.err_t
        return np.sum(0.5 * (e[:, 1:] + e[:, :-1]) * np.diff(t), axis=1)


@eqx.filter_jit
def _field_error(y, t, args):
    """Every seed's vector-field error bound at time t (its largest entry; 0 where the state is
    beyond the exact method's reach, where the field is sampled): (S,). The η-linear part's
    bound — the η² term is an estimate with its own standard error — which keeps this second
    program small (the refined rule's field with its η² estimator took 12 s to compile at
    E1's H = 4, about as long as the run's own field)."""
    problem, schedule = args
    lr, lr_b = problem.lr * schedule(t), problem.lr_b * schedule(t)

    def one(M, Q, b):
        err, _ = problem.method.linear_error(problem, OrderParameters(M, Q, b), lr, lr_b)
        return jnp.max(flatten(err))

    return jax.vmap(one)(*y)


def _integrate_in_chunks(y0, ts, args, solver: Solver, *, fail_t, record, check) -> int:
    """The integration, for every method: each seed solved through ``CHUNKS`` stretches of the
    grid, each one diffrax solve that saves at its grid points (padded to one length: one
    program), so the step size carries over between grid points. Per grid point a solver restart
    costs an initial step-size search and at least one step: on a 40-point log grid that was
    ~2.5× the evaluations of the exact drift (45 ms each at H = 4, L = 10). The sampled drift was
    integrated with a restart per grid point until 2026-12-07: E1's config with qmc at H = 4,
    T = 150, 4 seeds took 126 steps and 49.9 s warm that way, 41 steps and 13.8 s this way
    (16 seeds: 195 → 55 s), trajectories within 5.5e-5 (the solver's rtol is 1e-5)."""
    S = y0.M.shape[0]
    n = len(ts)
    c = max(1, -(-(n - 1) // CHUNKS))  # grid points per solve
    y, alive, n_steps = y0, np.ones(S, bool), 0
    record(y, ts[0])
    check(y, ts[0])
    for i in range(1, n, c):
        chunk = np.asarray(ts[i : i + c], np.float64)
        m = len(chunk)
        padded = np.concatenate([chunk, np.full(c - m, chunk[-1])])  # (c,) non-decreasing
        ys, ok, nst = _stretch(y, jnp.asarray(ts[i - 1]), jnp.asarray(padded), args, solver)
        ok, n_steps = np.asarray(ok), n_steps + int(np.asarray(nst).max())  # ok: (S, c)
        for k in range(m):
            newly = alive & ~ok[:, k]
            fail_t[newly] = ts[i + k - 1]
            alive &= ok[:, k]
            y = _keep_alive(jnp.asarray(alive), jax.tree.map(lambda a, k=k: a[:, k], ys), y)
            record(y, chunk[k])
        check(y, chunk[-1])
    return n_steps


@eqx.filter_jit
def _stretch(y, t0, ts, args, solver: Solver):
    """Every seed's state at the times ``ts`` (c,) from t0, one seed after another, each with
    its own adaptive steps (vmapped, every seed would take as many steps as the slowest; with
    the exact drift both cost the same, measured: H = 2, 4 seeds); returns states with a time
    axis (S, c, …), ok (S, c) and steps (S,)."""
    import diffrax

    def one(y):
        sol = _solve(y, t0, ts[-1], diffrax.SaveAt(ts=ts), args, solver)
        flat = jax.vmap(lambda *a: flatten(OrderParameters(*a)))(*sol.ys)  # (c, P)
        ok = jnp.all(jnp.isfinite(flat), axis=1)  # (c,) times not reached are saved as inf
        return sol.ys, ok, sol.stats["num_steps"]

    return jax.lax.map(one, y)


@eqx.filter_jit
def _observe(y, activation: Activation, law: LatentLaw, base: BaseSamples):
    """The population risk of every seed's state (vmap over seeds)."""
    return jax.vmap(lambda M, Q, b: population_risk(M, Q, b, activation, law, base))(*y)


def _keep_alive(alive: Array, new, old):
    """Per seed: the new state where the seed is still alive, else the last good one."""
    return jax.tree.map(
        lambda n, o: jnp.where(alive.reshape((-1,) + (1,) * (n.ndim - 1)), n, o), new, old
    )


@float64
def integrate(
    y0: OrderParameters,
    ts: np.ndarray,
    problem: DriftProblem,
    risk_base: BaseSamples,
    schedule: Callable,
    *,
    solver: Solver | None = None,
    progress: Callable[[float, float], None] | None = None,
    certify: bool = False,
) -> Integration:
    """Integrate every initial state of ``y0`` (leading seed axis) along the grid ``ts``: the
    drift of ``problem`` at learning rates η·schedule(t), stepped by ``solver`` (default
    :class:`Solver`: rtol 1e-5, atol 1e-7, 100 000 steps).

    Returns an :class:`Integration`: the observations at each grid point (NumPy; the risk on
    ``risk_base``, no held-out loss), each seed's failure time (NaN if none: the solver failed
    or the state became non-finite; the seed's state is kept at its last good value), the
    solver steps taken (max over seeds, summed over solves) and, for the exact method with
    ``certify``, the η-linear vector field's error bound between its solves (one more compiled
    program: ≈ 7 s at E1's H = 4; then 0.15 s per check). ``progress(t, T)`` is called at
    every grid point.
    """
    S = y0.M.shape[0]
    law = problem.law
    J = law.n_atoms
    args = (problem, schedule)
    solver = Solver() if solver is None else solver
    fail_t = np.full(S, np.nan)
    obs = []

    def record(y, t):
        r = _observe(y, problem.activation, law, risk_base)
        nanS = np.full(S, np.nan)
        obs.append(
            Observation(
                M=np.asarray(y[0]),
                Q=np.asarray(y[1]),
                b=np.asarray(y[2]),
                risk=np.asarray(r.mean),
                risk_se=np.asarray(r.se),
                risk_by_atom=np.asarray(r.by_atom).reshape(S, J),
                test_risk=nanS,
                test_risk_se=nanS,
                test_risk_by_atom=np.full((S, J), np.nan),
            )
        )
        if progress is not None:
            progress(float(t), float(ts[-1]))

    errs, err_t = [], []
    exact = isinstance(problem.method, Exact)

    def check(y, t):
        if certify and exact:
            errs.append(np.asarray(_field_error(y, jnp.asarray(t, jnp.float64), args)))
            err_t.append(float(t))

    n_steps = _integrate_in_chunks(y0, ts, args, solver, fail_t=fail_t, record=record, check=check)
    errs = np.stack(errs, 1) if errs else np.zeros((S, 0))
    return Integration(obs, fail_t, n_steps, errs, np.asarray(err_t))
