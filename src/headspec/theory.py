"""The D → ∞ description of SPEC §5: risk (and, to come, drift) as functions of (M, Q, b).

For a token l let λ_l = (k_h·x_l/√D)_h and ν_l = (k*_f·x_l/√D)_f. For l ≠ ε they are jointly
N(0, [[Q, M], [Mᵀ, I_F]]); the hidden token gets the shift (Mθ, θ). Expectations are Monte-Carlo
averages over fixed base samples (common random numbers: the same samples at every (M, Q, b), so
the functions are deterministic and smooth), with ε fixed at the first token by symmetry, and
exactly over the atoms of a discrete law (θ is not sampled).

Example:
    >>> import jax, jax.numpy as jnp
    >>> from headspec.latent import Spike
    >>> from headspec.attention import Softmax
    >>> law = Spike([2.0])
    >>> base = BaseSamples.draw(jax.random.key(0), law, L=10, H=1, n=20_000)
    >>> M, Q, b = jnp.array([[2.0]]), jnp.array([[4.0]]), jnp.zeros(1)   # the head k = K*a
    >>> r = population_risk(M, Q, b, Softmax(), law, base)
    >>> abs(float(r.mean) - 0.224) < 0.01   # one softmax head on the spike is Bayes-optimal
    True
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.attention import Activation, loss_projected
from headspec.latent import LatentLaw, psd_root

Array = jax.Array


class BaseSamples(eqx.Module):
    """Fixed standard-normal base samples for D → ∞ expectations (common random numbers)."""

    nu: Array  # (n, L, F) feature projections of the tokens, before the signal shift
    xi: Array  # (n, L, H) independent normals for the head projections
    theta: Array  # (n, F) latent draws (unused for discrete laws: their atoms are exact)

    @classmethod
    def draw(cls, key, law: LatentLaw, L: int, H: int, n: int, dtype=jnp.float64):
        k1, k2, k3 = jax.random.split(key, 3)
        return cls(
            nu=jax.random.normal(k1, (n, L, law.F), dtype=dtype),  # (n, L, F)
            xi=jax.random.normal(k2, (n, L, H), dtype=dtype),  # (n, L, H)
            theta=law.sample(k3, (n,)).astype(dtype),  # (n, F)
        )

    @property
    def n(self) -> int:
        return self.nu.shape[0]

    def head_cyclic(self) -> BaseSamples:
        """The samples closed under cyclic shifts of the head axis (n → n·H).

        With them the estimated drift of a state that is symmetric under permuting the heads
        is itself exactly symmetric: identical heads stay identical, as in the exact ODE (plain
        samples break the symmetry at O(1/√n)).
        """
        H = self.xi.shape[-1]
        xi = jnp.concatenate([jnp.roll(self.xi, c, axis=-1) for c in range(H)])  # (nH, L, H)
        return BaseSamples(
            nu=jnp.tile(self.nu, (H, 1, 1)), xi=xi, theta=jnp.tile(self.theta, (H, 1))
        )


class RiskEstimate(NamedTuple):
    mean: Array  # ()
    se: Array  # () Monte-Carlo standard error
    by_atom: Array  # (J,) risk given θ = a_j (discrete laws; empty otherwise)


def _projections(M, S, theta, base):
    """ν (n, L, F) and λ (n, H, L) with θ (n, F) on the hidden token l = 0; S = √(Q − MMᵀ)."""
    L = base.nu.shape[1]
    shift = jax.nn.one_hot(0, L, dtype=base.nu.dtype)[None, :, None] * theta[:, None, :]
    nu = base.nu + shift  # (n, L, F)
    lam = jnp.einsum("nlf,hf->nhl", nu, M) + jnp.einsum("nlk,hk->nhl", base.xi, S)  # (n, H, L)
    return nu, lam


def _per_sample_losses(M, Q, b, activation, theta, base):
    """Losses (n,) with θ given per sample (n, F), hidden token at l = 0."""
    _, lam = _projections(M, psd_root(Q - M @ M.T), theta, base)
    W = activation.token_weights(lam + b[:, None])  # (n, L)
    return loss_projected(W, jnp.zeros(W.shape[0], jnp.int32))  # (n,)


def population_risk(
    M: Array, Q: Array, b: Array, activation: Activation, law: LatentLaw, base: BaseSamples
) -> RiskEstimate:
    """R(M, Q, b) = E ½ Σ_l (W_l − 1[l=ε])² of SPEC §5, with its Monte-Carlo standard error."""
    n = base.n
    if law.is_discrete:
        th = jnp.broadcast_to(law.atoms[:, None, :], (law.J, n, law.F))  # (J, n, F)
        per = jax.vmap(lambda t: _per_sample_losses(M, Q, b, activation, t, base))(th)  # (J, n)
        by_atom = per.mean(axis=1)  # (J,)
        losses = law.probs.astype(per.dtype) @ per  # (n,)
    else:
        losses = _per_sample_losses(M, Q, b, activation, base.theta, base)  # (n,)
        by_atom = jnp.zeros((0,), losses.dtype)
    mean = losses.mean()
    se = losses.std(ddof=1) / jnp.sqrt(n)
    return RiskEstimate(mean, se, by_atom)


# ============================================================================ drift (SPEC §5)
class State(NamedTuple):
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


def _ell(s: Array, activation: Activation) -> Array:
    """Per-sample D → ∞ loss ℓ(s) = ½ Σ_l (W_l(s) − 1[l = 0])² for scores s (H, L)."""
    W = activation.token_weights(s)  # (L,)
    return 0.5 * jnp.sum((W - jax.nn.one_hot(0, W.shape[-1], dtype=W.dtype)) ** 2)


def _scores_and_grads(M, b, S, activation, theta, base):
    """ν (n, L, F), λ (n, H, L), ℓ (n,) and g = ∂ℓ/∂s (n, H, L), hidden token at l = 0."""
    nu, lam = _projections(M, S, theta, base)
    ell, g = jax.vmap(jax.value_and_grad(_ell), in_axes=(0, None))(lam + b[:, None], activation)
    return nu, lam, ell, g


def _atom_expect(fn, law: LatentLaw, base: BaseSamples):
    """fn(θ per sample) averaged exactly over a discrete law's atoms (fn(sampled θ) otherwise)."""
    if law.is_discrete:
        th = jnp.broadcast_to(law.atoms[:, None, :], (law.J, base.n, law.F))  # (J, n, F)
        per = jax.vmap(fn)(th)  # each (J, …)
        p = law.probs.astype(base.nu.dtype)
        return jax.tree.map(lambda x: jnp.tensordot(p, x, axes=1), per)
    return fn(base.theta)


def _sample_terms(state: State, activation: Activation, law: LatentLaw, base: BaseSamples):
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

    return _atom_expect(one, law, base)


def _mean_terms(state: State, activation, law, base):
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

    return _atom_expect(one, law, base)


def drift(
    state: State,
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
    n = base.n
    means = [x.mean(0) for x in per]
    ses = [x.std(0, ddof=1) / jnp.sqrt(n) for x in per]
    return Drift(*means, *ses)


def vector_field(state: State, activation, law, base, lr, lr_b, factor=1.0) -> State:
    """d(M, Q, b)/dt only (no errors): the right-hand side the ODE solver calls."""
    lr_b = lr if lr_b is None else lr_b
    eta, eta_b = lr * factor, lr_b * factor
    g_nu, gl, g_g, g_sum = _mean_terms(state, activation, law, base)
    dQ = -eta * (gl + gl.T) + eta**2 * g_g
    return State(-eta * g_nu, 0.5 * (dQ + dQ.T), -eta_b * g_sum)


def flatten(state: State) -> Array:
    """(M, Q, b) → one vector (H·F + H·H + H,)."""
    return jnp.concatenate([state.M.ravel(), state.Q.ravel(), state.b.ravel()])


def unflatten(x: Array, H: int, F: int) -> State:
    M = x[: H * F].reshape(H, F)
    Q = x[H * F : H * F + H * H].reshape(H, H)
    return State(M, Q, x[H * F + H * H :])


def drift_and_jacobian(state: State, activation, law, base, lr=1.0, lr_b=None, jitter=0.0):
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
    state = State(state.M, Q, state.b)

    def f(x):
        return flatten(vector_field(unflatten(x, H, F), activation, law, base, lr, lr_b))

    x = flatten(state)
    return f(x), jax.jacfwd(f)(x)


# ============================================================================ base samples
def sobol_base(seed: int, law: LatentLaw, L: int, H: int, n: int) -> BaseSamples:
    """Scrambled Sobol quasi-Monte-Carlo base samples (n rounded up to a power of 2).

    The Sobol points are mapped to normals by the inverse CDF. Standard errors computed from them
    as if they were independent are conservative (QMC errors are usually smaller).
    """
    from scipy.special import ndtri
    from scipy.stats import qmc

    F = law.F
    extra = 0 if law.is_discrete else F
    d = L * F + L * H + extra
    m = max(1, int(np.ceil(np.log2(n))))
    u = qmc.Sobol(d, scramble=True, seed=seed).random_base2(m)  # (2^m, d)
    z = ndtri(np.clip(u, 1e-12, 1 - 1e-12))  # (2^m, d)
    N = z.shape[0]
    nu = z[:, : L * F].reshape(N, L, F)
    xi = z[:, L * F : L * F + L * H].reshape(N, L, H)
    if law.is_discrete:
        theta = np.zeros((N, F))
    else:
        theta = np.asarray(law.mean()) + z[:, L * F + L * H :] @ np.asarray(law._root).T
    return BaseSamples(nu=jnp.asarray(nu), xi=jnp.asarray(xi), theta=jnp.asarray(theta))


def drift_base(options, law: LatentLaw, L: int, H: int) -> BaseSamples:
    """The drift's base samples from :class:`headspec.config.TheoryOptions`."""
    if options.sampler == "sobol":
        return sobol_base(options.sample_seed, law, L, H, options.n)
    key = jax.random.fold_in(jax.random.key(options.sample_seed), 0x6472)  # "dr"
    return BaseSamples.draw(key, law, L, H, options.n)


# ============================================================================ initial states
def bartlett_wishart(key: Array, dof: int, H: int) -> Array:
    """W ~ Wishart(dof, I_H) by the Bartlett decomposition W = A Aᵀ (needs dof ≥ H)."""
    k1, k2 = jax.random.split(key)
    df = dof - jnp.arange(H)  # (H,)
    chi = jnp.sqrt(2.0 * jax.random.gamma(k1, df / 2.0, (H,)))  # (H,): √χ²(dof − i)
    A = jnp.tril(jax.random.normal(k2, (H, H)), -1) + jnp.diag(chi)  # (H, H)
    return A @ A.T  # (H, H)


def perturbed_state(key: Array, H: int, F: int, D: int, sigma0: float, b0: float) -> State:
    """The exact law of (M, Q) for keys k_h ~ N(0, σ0² I_D) at dimension D (see PerturbedInit)."""
    if D - F < H:
        raise ValueError(f"the perturbed initial state needs D − F ≥ H, got D={D}, F={F}, H={H}")
    k1, k2 = jax.random.split(key)
    M = sigma0 / jnp.sqrt(D) * jax.random.normal(k1, (H, F))  # (H, F)
    Q = M @ M.T + sigma0**2 * bartlett_wishart(k2, D - F, H) / D  # (H, H)
    return State(M, Q, jnp.full((H,), b0))


def initial_states(cfg) -> tuple[State, np.ndarray]:
    """Initial states (leading seed axis) and their seed ids for a TheoryConfig."""
    from headspec.attention import default_bias

    H, F, D, L = cfg.model.H, cfg.task.latent.F, cfg.task.D, cfg.task.L
    b0 = default_bias(cfg.model.activation, H, L) if cfg.model.b0 is None else cfg.model.b0
    init = cfg.theory.init
    sigma0 = cfg.model.sigma0
    if init.kind == "perturbed":
        ids = np.arange(cfg.seed, cfg.seed + cfg.seeds)
        keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(s), 0x696E))(ids)  # "in"
        return jax.vmap(lambda k: perturbed_state(k, H, F, D, sigma0, b0))(keys), ids
    if init.kind == "symmetric":
        st = State(jnp.zeros((H, F)), sigma0**2 * jnp.eye(H), jnp.full((H,), b0))
        return jax.tree.map(lambda x: x[None], st), np.array([cfg.seed])
    if init.kind == "given":
        b = jnp.full((H,), b0) if init.b is None else jnp.asarray(init.b, dtype=jnp.float64)
        st = State(jnp.asarray(init.M, jnp.float64), jnp.asarray(init.Q, jnp.float64), b)
        return jax.tree.map(lambda x: x[None], st), np.array([cfg.seed])
    return simulation_states(init.path, init.seeds, H, F)


def simulation_states(path, seeds, H: int, F: int) -> tuple[State, np.ndarray]:
    """The exact initial (M, Q, b) of chosen seeds of a simulation result."""
    from headspec import results

    ds = results.load(path)
    if ds.attrs["kind"] != "simulation":
        raise ValueError(f"{path} is a {ds.attrs['kind']} result; fix: give a simulation result")
    if ds.sizes["head"] != H or ds.sizes["feature"] != F:
        raise ValueError(
            f"{path} has H = {ds.sizes['head']}, F = {ds.sizes['feature']} but the theory config "
            f"has H = {H}, F = {F}; fix: use the simulation's model and latent law"
        )
    available = [int(s) for s in ds.seed.values]
    chosen = available if seeds is None else list(seeds)
    missing = [s for s in chosen if s not in available]
    if missing:
        raise ValueError(f"seed {missing[0]} is not in {path}; fix: use one of {available}")
    sel = ds.sel(seed=chosen).isel(t=0)
    st = State(*(jnp.asarray(sel[v].values, jnp.float64) for v in ("M", "Q", "b")))
    return st, np.asarray(chosen)


# ============================================================================ integration
def _rhs(t, y, args):
    activation, law, base, lr, lr_b, schedule = args
    return vector_field(State(*y), activation, law, base, lr, lr_b, schedule(t))


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
            jnp.isfinite(flatten(State(*last)))
        )
        return last, ok, sol.stats["num_steps"]

    return jax.vmap(one)(y)


def _keep_alive(alive: Array, new, old):
    """Per seed: the new state where the seed is still alive, else the last good one."""
    return jax.tree.map(
        lambda n, o: jnp.where(alive.reshape((-1,) + (1,) * (n.ndim - 1)), n, o), new, old
    )


def solve(cfg, progress=None, schedule=None):
    """Integrate the ODE of SPEC §5 for a :class:`headspec.config.TheoryConfig`.

    Returns a dataset of the shared result schema (kind "theory") on the same time grid as
    ``headspec simulate`` with the same task/train/record options. The risk at each grid point
    uses the same base samples as the simulator (``record.mc_seed``, ``record.n_mc``).
    ``progress(t_done, T)`` is called at every grid point.
    """
    from headspec.attention import get_activation
    from headspec.sgd import Observation, assemble, mc_key, schedule_from_config, time_grid

    law = cfg.task.latent.build()
    act = get_activation(cfg.model.activation, cfg.model.aggregation)
    H, L = cfg.model.H, cfg.task.L
    lr = cfg.train.lr
    lr_b = lr if cfg.train.lr_b is None else cfg.train.lr_b
    sched = schedule or schedule_from_config(cfg.train.schedule)
    base = drift_base(cfg.theory, law, L, H)
    if cfg.theory.init.kind == "symmetric":
        base = base.head_cyclic()  # identical heads must stay identical (cost × H)
    risk_base = BaseSamples.draw(mc_key(cfg.record.mc_seed), law, L, H, cfg.record.n_mc)
    steps, ts = time_grid(cfg.record, cfg.train.T, cfg.task.D, cfg.train.batch)
    y, seed_ids = initial_states(cfg)
    S = len(seed_ids)
    args = (act, law, base, jnp.asarray(lr), jnp.asarray(lr_b), sched)  # traced η: compiled once
    J = law.J if law.is_discrete else 0

    @jax.jit
    def observe(y):
        r = jax.vmap(lambda M, Q, b: population_risk(M, Q, b, act, law, risk_base))(*y)
        return r

    fail_t = np.full(S, np.nan)
    alive = np.ones(S, bool)
    n_steps = 0
    obs = []
    for k, t in enumerate(ts):
        if k > 0:
            y_new, ok, nst = _segment(  # times as arrays: one compilation for all segments
                y,
                jnp.asarray(ts[k - 1]),
                jnp.asarray(t),
                args,
                jnp.asarray(cfg.theory.rtol),
                jnp.asarray(cfg.theory.atol),
                cfg.theory.max_steps,
            )
            ok = np.asarray(ok)
            n_steps += int(np.asarray(nst).max())
            newly = alive & ~ok
            fail_t[newly] = ts[k - 1]
            alive &= ok
            y = _keep_alive(jnp.asarray(alive), y_new, y)
        r = observe(y)
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
    failed = ~alive
    fail_step = np.where(failed, np.round(np.nan_to_num(fail_t) * cfg.task.D), -1).astype(int)
    extra = {
        "engine": "ode",
        "init": cfg.theory.init.kind,
        "sampler": cfg.theory.sampler,
        "n_drift": int(base.n),
        "solver_steps": n_steps,
    }
    return assemble("theory", cfg, law, ts, steps, seed_ids, obs, fail_step, fail_t, extra)
