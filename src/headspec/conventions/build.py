"""The one place where configs become objects: laws, activations, schedules, engines, base
samples and initial states. Everything below this layer takes objects and arrays, never configs.

Example:
    >>> from headspec.conventions.config import SimulateConfig, load_config
    >>> cfg = load_config(SimulateConfig, overrides=["model.activation='softmax1'", "model.H=3"])
    >>> round(initial_bias(cfg.model, cfg.task.L), 4)      # −log(L(H−1)), SPEC §4
    -2.9957
    >>> type(engine(cfg)).__name__
    'FullEngine'
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from headspec.conventions.config.domain import diffusion_head_cyclic, theory_head_cyclic
from headspec.core.attention import Activation, get_activation
from headspec.core.latent import LatentLaw
from headspec.core.model import Model
from headspec.core.observables import BaseSamples
from headspec.core.schedules import Constant, InverseTime, Schedule
from headspec.dynamics.engines import ENGINES, Engine
from headspec.dynamics.eta2 import ScoreSamples
from headspec.dynamics.initial import Given, InitialState, Perturbed, Symmetric
from headspec.dynamics.noise import gram_rest
from headspec.dynamics.problem import FINE, DriftProblem, Exact, Sampled
from headspec.dynamics.splitmap import at_setting

Array = jax.Array


def activation(model) -> Activation:
    """The activation of a :class:`~headspec.conventions.config.ModelConfig`."""
    return get_activation(model.activation, model.aggregation)


def model_of(cfg, law: LatentLaw) -> Model:
    """The model of ``cfg`` (its activation and L) with the built ``law``."""
    return Model(activation(cfg.model), law, cfg.task.L)


def initial_bias(model, L: int) -> float:
    """model.b0, or the activation's SPEC §4 default b_h(0)."""
    return activation(model).default_bias(model.H, L) if model.b0 is None else model.b0


def learning_rates(train) -> tuple[Array, Array]:
    """(η, η_b) as arrays (traced in the jitted loops: a new η does not recompile); η_b = η
    unless train.lr_b is given."""
    return jnp.asarray(train.lr), jnp.asarray(train.lr if train.lr_b is None else train.lr_b)


def schedule(cfg) -> Schedule:
    """η(t)/η from a schedule config (``train.schedule``)."""
    if cfg.kind == "inverse_time":
        return InverseTime(cfg.t0, cfg.power)
    return Constant()


def engine(cfg, schedule_fn: Callable | None = None) -> Engine:
    """The SGD engine of a :class:`~headspec.conventions.config.SimulateConfig`
    (``schedule_fn``, a hashable pure function of t, replaces the config's schedule)."""
    lr, lr_b = learning_rates(cfg.train)
    law = cfg.task.latent.build()
    extra = {}
    if cfg.train.engine == "diffusion":
        opts = cfg.diffusion
        H, L, D = cfg.model.H, cfg.task.L, cfg.task.D
        base = drift_base(opts, law, L, H)
        copies = H if diffusion_head_cyclic(cfg) else 1
        if copies > 1:
            base = base.head_cyclic()  # heads treated alike (cost × H)
        key = jax.random.fold_in(jax.random.key(opts.sample_seed), 0x6772)  # "gr"
        gram = gram_rest(key, base.n // copies, L, D, law.F + H, copies)
        exact = None
        if opts.drift == "exact":  # the η² term on eta2_n (or n) score points, averaged over
            n2 = opts.n if opts.eta2_n is None else opts.eta2_n  # the heads' relabellings
            exact = Exact(base, scores=ScoreSamples.rqmc(opts.sample_seed, L, H, n2), cyclic=True)
        extra = {"base": base, "gram": gram, "dt": opts.dt, "solver": opts.solver,
                 "horizon": cfg.train.T, "resample": opts.resample, "orbit": copies,
                 "noise_factor": opts.noise_factor, "exact": exact}  # fmt: skip
    return ENGINES[cfg.train.engine](
        model=model_of(cfg, law),
        D=cfg.task.D,
        H=cfg.model.H,
        B=cfg.train.batch,
        lr=lr,
        lr_b=lr_b,
        schedule=schedule_fn or schedule(cfg.train.schedule),
        frame_kind=cfg.task.frame,
        **extra,
    )


def mc_key(mc_seed: int) -> Array:
    """Key of the D → ∞ risk's base samples: disjoint from every run seed's stream."""
    return jax.random.fold_in(jax.random.key(mc_seed), 0x6D63)  # "mc"


def risk_base(record, law: LatentLaw, L: int, H: int, n: int | None = None) -> BaseSamples:
    """The base samples of the recorded D → ∞ risk (``record.mc_seed``, ``record.n_mc``), shared
    by every seed, run and the theory (common random numbers)."""
    return BaseSamples.draw(mc_key(record.mc_seed), law, L, H, record.n_mc if n is None else n)


def drift_base(options, law: LatentLaw, L: int, H: int) -> BaseSamples:
    """The drift's base samples from :class:`~headspec.conventions.config.TheoryOptions` (scrambled
    Sobol unless theory.method = "mc") or the diffusion engine's
    :class:`~headspec.conventions.config.DiffusionOptions` (its ``sampler``)."""
    sampler = getattr(options, "sampler", None) or ("mc" if options.method == "mc" else "sobol")
    if sampler == "sobol":
        return BaseSamples.sobol(options.sample_seed, law, L, H, options.n)
    key = jax.random.fold_in(jax.random.key(options.sample_seed), 0x6472)  # "dr"
    return BaseSamples.draw(key, law, L, H, options.n)


def drift_problem(cfg, law: LatentLaw, init: InitialState | None = None) -> DriftProblem:
    """The ODE's :class:`~headspec.dynamics.problem.DriftProblem` of a TheoryConfig: activation,
    law, L, η and η_b, and the method of theory.method on the drift's base samples (head-cyclic
    where :func:`head_cyclic` says)."""
    H, L = cfg.model.H, cfg.task.L
    base = drift_base(cfg.theory, law, L, H)
    cyclic = init is not None and theory_head_cyclic(cfg)
    method = cfg.theory.method  # resolved from "auto" by the config (domain.resolve_theory)
    lr, lr_b = learning_rates(cfg.train)
    if method == "exact":  # the η² term by the control-variate estimator on n score samples
        scores = ScoreSamples.rqmc(cfg.theory.sample_seed, L, H, cfg.theory.n)
        symmetric = init is not None and init.symmetric  # identical heads stay identical
        strategy = Exact(base, scores=scores, cyclic=cyclic, symmetric=symmetric)
    else:  # cyclic: heads treated alike, identical heads stay identical (cost × H)
        strategy = Sampled(base.head_cyclic() if cyclic else base, name=method)
    return DriftProblem(model_of(cfg, law), lr, lr_b, strategy)


def analysis_problem(
    cfg, law: LatentLaw, H: int, n: int, method: str = "exact", eta2: bool = True,
    cyclic: bool = False, sample_seed: int = 0,
) -> DriftProblem:  # fmt: skip
    """The DriftProblem that analyses a result of ``cfg`` (saddles, fixed points, Jacobians) at
    the run's learning rates: ``method`` "exact" (η² term, if kept, on ``n`` scrambled Sobol
    samples; the finer quadrature FINE: Jacobian entries to ~3e-8), "qmc" or "mc" (everything
    on ``n`` samples); ``cyclic``: head-cyclic samples."""
    if method == "mc":
        key = jax.random.fold_in(jax.random.key(sample_seed), 0x6472)  # "dr"
        base = BaseSamples.draw(key, law, cfg.task.L, H, n)
    else:
        base = BaseSamples.sobol(sample_seed, law, cfg.task.L, H, n)
    if cyclic:
        base = base.head_cyclic()
    lr, lr_b = learning_rates(cfg.train)
    strategy = Exact(base, FINE) if method == "exact" else Sampled(base, name=method)
    return DriftProblem(model_of(cfg, law), lr, lr_b, strategy, eta2)


def split_map_problem(cfg) -> tuple[DriftProblem, np.ndarray]:
    """The DriftProblem of one setting of the map of uneven splits
    (:class:`~headspec.conventions.config.splitmap.SplitMapConfig`) and the directions heads
    split over (the law's atoms, scaled, (J, F)). At ``map.lr`` = 0 the drift is the η-linear
    one at η = 1 (gradient flow: rates per unit η); else the full drift at η = η_b = map.lr.
    Base samples as :func:`analysis_problem` (Sobol scrambled by ``cfg.seed``; mc: drawn)."""
    law = cfg.task.latent.build()
    H, L, opts = cfg.model.H, cfg.task.L, cfg.map
    if opts.method == "mc":
        key = jax.random.fold_in(jax.random.key(cfg.seed), 0x6472)  # "dr"
        base = BaseSamples.draw(key, law, L, H, opts.n)
    else:
        base = BaseSamples.sobol(cfg.seed, law, L, H, opts.n)
    strategy = Exact(base, FINE) if opts.method == "exact" else Sampled(base, name=opts.method)
    problem = DriftProblem(model_of(cfg, law), method=strategy)
    atoms = np.asarray(law.atoms, np.float64)  # (J, F): the directions
    # η = 0 → the η-linear drift at η = 1: the one rule of dynamics.splitmap.at_setting (the
    # amplitude is the law's own, so its atoms are unchanged)
    return at_setting(problem, atoms, float(np.linalg.norm(atoms[0])), opts.lr)


def given_overlaps(model, init, L: int):
    """The order parameters (M, Q, b) of a given start (``theory.init`` or a simulation's
    ``init`` of kind "given"), in float64; b defaults to the model's initial bias rule."""
    b0 = initial_bias(model, L)
    b = jnp.full((model.H,), b0) if init.b is None else jnp.asarray(init.b)
    f64 = jnp.float64
    return jnp.asarray(init.M, f64), jnp.asarray(init.Q, f64), b.astype(f64)


def start(cfg, engine: Engine, keys: dict[str, Array], dtype):
    """The SGD engines' initial state of a SimulateConfig: SPEC §4's random start, or every seed
    at the given overlaps (``init`` of kind "given")."""
    if cfg.init.kind == "given":
        overlaps = given_overlaps(cfg.model, cfg.init, cfg.task.L)
        return engine.start_at(keys, overlaps, dtype, cfg.init.noise)
    return engine.init(keys, cfg.model.sigma0, initial_bias(cfg.model, cfg.task.L), dtype)


def initial_state(cfg) -> InitialState:
    """The ODE's initial-state strategy of a :class:`~headspec.conventions.config.TheoryConfig`."""
    init, model = cfg.theory.init, cfg.model
    b0 = initial_bias(model, cfg.task.L)
    if init.kind == "perturbed":
        return Perturbed(D=cfg.task.D, sigma0=model.sigma0, b0=b0)
    if init.kind == "symmetric":
        return Symmetric(sigma0=model.sigma0, b0=b0)
    if init.kind == "given":
        M, Q, b = given_overlaps(model, init, cfg.task.L)
        return Given(M[None], Q[None], b[None], ids=np.array([cfg.seed]))
    from headspec.conventions.results import simulation_states

    return simulation_states(init.path, init.seeds, model.H, cfg.task.latent.F)
