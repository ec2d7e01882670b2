"""The D → ∞ order-parameter ODE of SPEC §5: drift, its Jacobian, and its integration.

With g_hl = ∂ℓ/∂s_hl of the per-sample loss ℓ(s) = ½ Σ_l (W_l(s) − 1[l=ε])²:

    dM/dt = −η   E[ Σ_l g_l ν_lᵀ ]
    dQ/dt = −η   E[ Σ_l (g_l λ_lᵀ + λ_l g_lᵀ) ] + η² E[ Σ_l g_l g_lᵀ ]
    db/dt = −η_b E[ Σ_l g_l ]

The expectations are averages over fixed base samples (:class:`headspec.core.observables.
BaseSamples`: Monte Carlo or scrambled Sobol, common random numbers), exact over a discrete law's
atoms; g comes from ``jax.grad``. :func:`integrate` solves the ODE with diffrax (Tsit5, adaptive
steps) for a batch of initial states and records the shared observables on a time grid.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from headspec.core.latent import Spike
    >>> from headspec.core.attention import Softmax
    >>> from headspec.core.observables import BaseSamples
    >>> law = Spike([2.0])
    >>> base = BaseSamples.draw(jax.random.key(0), law, L=10, H=1, n=4096)
    >>> at = OrderParameters(M=jnp.array([[0.5]]), Q=jnp.array([[0.5]]), b=jnp.zeros(1))
    >>> d = drift(at, Softmax(), law, base, lr=1.0)
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
from headspec.core.linalg import psd_root
from headspec.core.observables import (
    BaseSamples,
    Observation,
    population_risk,
    sample_loss,
    token_projections,
)
from headspec.core.precision import float64
from headspec.core.stats import sample_mean_se

Array = jax.Array


class OrderParameters(NamedTuple):
    """Order parameters: M (H, F) head–feature, Q (H, H) head–head overlaps, b (H,) biases."""

    M: Array  # (H, F)
    Q: Array  # (H, H)
    b: Array  # (H,)


class Drift(NamedTuple):
    """d(M, Q, b)/dt and R at one state, with Monte-Carlo standard errors (same shapes)."""

    dM: Array  # (H, F)
    dQ: Array  # (H, H)
    db: Array  # (H,)
    R: Array  # ()
    dM_se: Array
    dQ_se: Array
    db_se: Array
    R_se: Array


def _scores_and_grads(M, b, S, activation, theta, base):
    """ν (n, L, F), λ (n, H, L), ℓ (n,) and g = ∂ℓ/∂s (n, H, L), hidden token at l = 0."""
    nu, lam = token_projections(M, S, theta, base)
    ell, g = jax.vmap(jax.value_and_grad(sample_loss), in_axes=(0, None))(
        lam + b[:, None], activation
    )
    return nu, lam, ell, g


def _sample_terms(
    state: OrderParameters, activation: Activation, law: LatentLaw, base: BaseSamples
):
    """Per-sample integrands (averaged over atoms): ℓ (n,), Σ_l g_l ν_lᵀ (n, H, F),
    Σ_l g_l λ_lᵀ (n, H, H), Σ_l g_l g_lᵀ (n, H, H), Σ_l g_l (n, H), g = ∂ℓ/∂s by ``jax.grad``."""
    M, Q, b = state
    S = psd_root(Q - M @ M.T)  # (H, H): tolerates singular Q (aligned heads)

    def one(theta):
        nu, lam, ell, g = _scores_and_grads(M, b, S, activation, theta, base)
        return (
            ell,
            jnp.einsum("nhl,nlf->nhf", g, nu),
            jnp.einsum("nhl,nkl->nhk", g, lam),
            jnp.einsum("nhl,nkl->nhk", g, g),
            g.sum(-1),
        )

    return law.expect(one, base.theta)


def _mean_terms(state: OrderParameters, activation, law, base):
    """E[Σ_l g ν_lᵀ] (H, F), E[Σ_l g λ_lᵀ] (H, H), E[Σ_l g gᵀ] (H, H), E[Σ_l g] (H,).

    Means only (no per-sample arrays): each is one contraction over samples and tokens.
    """
    M, Q, b = state
    S = psd_root(Q - M @ M.T)  # (H, H)

    def one(theta):
        nu, lam, _, g = _scores_and_grads(M, b, S, activation, theta, base)
        n = nu.shape[0]
        return (
            jnp.einsum("nhl,nlf->hf", g, nu) / n,
            jnp.einsum("nhl,nkl->hk", g, lam) / n,
            jnp.einsum("nhl,nkl->hk", g, g) / n,
            g.sum((0, 2)) / n,
        )

    return law.expect(one, base.theta)


@float64
def drift(
    state: OrderParameters,
    activation: Activation,
    law: LatentLaw,
    base: BaseSamples,
    lr: float = 1.0,
    lr_b: float | None = None,
    eta2: bool = True,
) -> Drift:
    """The vector field of SPEC §5 at ``state``, with the Monte-Carlo standard error of each entry.

        dM/dt = −η E[Σ_l g_l ν_lᵀ]
        dQ/dt = −η E[Σ_l (g_l λ_lᵀ + λ_l g_lᵀ)] + η² E[Σ_l g_l g_lᵀ]
        db/dt = −η_b E[Σ_l g_l]

    ``eta2=False`` drops the η² term (the "η-linear part", which vanishes at a minimiser).
    """
    lr_b = lr if lr_b is None else lr_b
    ell, g_nu, g_lam, g_g, g_sum = _sample_terms(state, activation, law, base)
    dQ_i = -lr * (g_lam + jnp.swapaxes(g_lam, -1, -2))  # (n, H, H)
    if eta2:
        dQ_i = dQ_i + lr**2 * g_g
    per = (-lr * g_nu, dQ_i, -lr_b * g_sum, ell)
    means, ses = zip(*(sample_mean_se(x) for x in per), strict=True)
    return Drift(*means, *ses)


@float64
def vector_field(
    state: OrderParameters, activation, law, base, lr, lr_b, factor=1.0
) -> OrderParameters:
    """d(M, Q, b)/dt only (no errors): the right-hand side the ODE solver calls."""
    lr_b = lr if lr_b is None else lr_b
    eta, eta_b = lr * factor, lr_b * factor
    g_nu, gl, g_g, g_sum = _mean_terms(state, activation, law, base)
    dQ = -eta * (gl + gl.T) + eta**2 * g_g
    return OrderParameters(-eta * g_nu, 0.5 * (dQ + dQ.T), -eta_b * g_sum)


def flatten(state: OrderParameters) -> Array:
    """(M, Q, b) → one vector (H·F + H·H + H,)."""
    return jnp.concatenate([state.M.ravel(), state.Q.ravel(), state.b.ravel()])


def unflatten(x: Array, H: int, F: int) -> OrderParameters:
    M = x[: H * F].reshape(H, F)
    Q = x[H * F : H * F + H * H].reshape(H, H)
    return OrderParameters(M, Q, x[H * F + H * H :])


@float64
def drift_and_jacobian(
    state: OrderParameters, activation, law, base, lr=1.0, lr_b=None, jitter=0.0
):
    """The drift at ``state`` and its Jacobian ∂(drift)/∂(M, Q, b) by ``jax.jacfwd``.

    Both act on the flat vector of :func:`flatten` (M row-major, then Q, then b), so fixed points
    can be found (drift = 0) and classified (eigenvalues of the Jacobian). Q's entries are treated
    as independent coordinates; the drift keeps Q symmetric.

    The common-random-number estimate uses √(Q − MMᵀ), whose derivative is infinite where that
    matrix is singular (keys inside span(K*), e.g. the constructed Bayes-softmax optimum). Such a
    state is refused unless ``jitter`` > 0, which evaluates at Q + jitter·I instead.
    """
    H, F = state.M.shape
    Q = state.Q + jitter * jnp.eye(H, dtype=state.Q.dtype)
    smallest = float(jnp.linalg.eigvalsh(Q - state.M @ state.M.T).min())
    if smallest <= 1e-10 * max(1.0, float(jnp.trace(Q))):
        raise ValueError(
            f"Q − MMᵀ is singular here (smallest eigenvalue {smallest:.3g}): the Jacobian of the "
            "Monte-Carlo drift is infinite; fix: pass jitter > 0 (e.g. 1e-6)"
        )
    state = OrderParameters(state.M, Q, state.b)

    def f(x):
        return flatten(vector_field(unflatten(x, H, F), activation, law, base, lr, lr_b))

    x = flatten(state)
    return f(x), jax.jacfwd(f)(x)


# ============================================================================ integration
def _rhs(t, y, args):
    activation, law, base, lr, lr_b, schedule = args
    return vector_field(OrderParameters(*y), activation, law, base, lr, lr_b, schedule(t))


@eqx.filter_jit
def _segment(y, t0, t1, args, rtol, atol, max_steps):
    """Integrate every seed's state from t0 to t1 (vmap over seeds); returns state, ok, steps."""
    import diffrax

    def one(y):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(_rhs),
            diffrax.Tsit5(),
            t0,
            t1,
            None,
            y,
            args=args,
            saveat=diffrax.SaveAt(t1=True),
            stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
            max_steps=max_steps,
            throw=False,
        )
        last = jax.tree.map(lambda x: x[-1], sol.ys)
        ok = (sol.result == diffrax.RESULTS.successful) & jnp.all(
            jnp.isfinite(flatten(OrderParameters(*last)))
        )
        return last, ok, sol.stats["num_steps"]

    return jax.vmap(one)(y)


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
    activation: Activation,
    law: LatentLaw,
    drift_base: BaseSamples,
    risk_base: BaseSamples,
    lr,
    lr_b,
    schedule: Callable,
    rtol: float = 1e-5,
    atol: float = 1e-7,
    max_steps: int = 100_000,
    progress: Callable[[float, float], None] | None = None,
) -> tuple[list[Observation], np.ndarray, int]:
    """Integrate every initial state of ``y0`` (leading seed axis) along the grid ``ts``.

    Returns the observations at each grid point (NumPy; the risk on ``risk_base``, no held-out
    loss), each seed's failure time (NaN if none: the solver failed or the state became
    non-finite; the seed's state is kept at its last good value) and the solver steps taken
    (max over seeds, summed over segments). ``progress(t, T)`` is called at every grid point.
    """
    S = y0.M.shape[0]
    J = law.n_atoms
    args = (activation, law, drift_base, jnp.asarray(lr), jnp.asarray(lr_b), schedule)
    y = y0
    fail_t = np.full(S, np.nan)
    alive = np.ones(S, bool)
    n_steps = 0
    obs = []
    for k, t in enumerate(ts):
        if k > 0:
            y_new, ok, nst = _segment(  # times as arrays: one compilation for all segments
                y, jnp.asarray(ts[k - 1]), jnp.asarray(t), args,
                jnp.asarray(rtol), jnp.asarray(atol), max_steps,
            )  # fmt: skip
            ok = np.asarray(ok)
            n_steps += int(np.asarray(nst).max())
            newly = alive & ~ok
            fail_t[newly] = ts[k - 1]
            alive &= ok
            y = _keep_alive(jnp.asarray(alive), y_new, y)
        r = _observe(y, activation, law, risk_base)
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
    return obs, fail_t, n_steps
