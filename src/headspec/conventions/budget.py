"""Size limits: the memory and the work of a run, estimated from its validated config before any
work, and a refusal that names the option, the estimate and a fix when it cannot fit.

The estimates are pure functions of a config (or of a few sizes); they count the arrays a run
holds at its peak (bytes) — the full engine's D-dimensional keys, frames and tokens, the reduced
engine's blocks of random numbers, the base samples of the D → ∞ risk (``record.n_mc``) and of
the drift (``theory.n``) with their per-sample intermediates (vmapped over seeds), `headspec
bayes`' chunks, the recorded grid — each times a small factor for XLA's temporaries beside it
(measured on CPU, see ``tests/test_size_guards.py``). They are meant to be within a
few times the real peak: far enough above it to refuse what would exhaust the machine, close
enough not to refuse today's runs.

:func:`check_budget` compares the estimate with :func:`available_memory` (the memory this process
may still take: MemAvailable, or a cgroup limit if lower, times :data:`SAFETY`; the environment
variable ``HEADSPEC_MEMORY`` — bytes, or e.g. ``64G`` — replaces it, e.g. where a run is
estimated on one machine and runs on another) and refuses:

- a run whose estimate exceeds that memory;
- a simulation of more than :data:`MAX_STEPS` SGD steps (``train.T·task.D/train.batch``; for the
  diffusion engine ``train.T/diffusion.dt``), and any run whose time grid, counted in steps,
  exceeds 2⁵³ (exact in float64 only up to there; ``train.T = 1e30`` overflowed and ran forever);
- any whole-number setting beyond a 64-bit integer (JAX's index type here);
- a sweep of more than :data:`MAX_SWEEP_TASKS` tasks (:func:`check_sweep_size`), before its
  configs are built.

Example:
    >>> from headspec.conventions.config import SimulateConfig, load_config
    >>> cfg = load_config(SimulateConfig, overrides=["task.D=100", "seeds=4"])
    >>> est = estimate(cfg)
    >>> est.total < 2**30, est.work            # under 1 GiB; 20·100 SGD steps
    (True, 2000)
    >>> big = load_config(SimulateConfig, overrides=["seeds=1000000000"])
    >>> try:
    ...     check_budget(big, available=2**34)
    ... except ConfigError as e:
    ...     print(str(e).split("; ")[1])        # the size furthest above its usual value
    the cause is seeds = 1,000,000,000
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

from headspec.conventions.config import (
    BayesRunConfig,
    ConfigError,
    SimulateConfig,
    SplitMapConfig,
    TheoryConfig,
)
from headspec.conventions.config.domain import diffusion_head_cyclic, theory_head_cyclic
from headspec.conventions.refusal import (
    FLOPS,
    MAX_SECONDS,
    SAFETY,
    available_memory,
    check_memory,
    check_time,
    format_bytes,
    parse_bytes,
    refit,
    size_text,
    term_fix,
)

__all__ = ["FLOPS", "MAX_SECONDS", "SAFETY", "available_memory", "check_budget", "check_memory",
           "check_time", "estimate", "format_bytes", "parse_bytes"]  # fmt: skip

MAX_STEPS = 10**12  # SGD steps of one simulation: over 10 days at 1 µs a step
MAX_GRID_STEPS = 2**53  # the time grid counts steps exactly (float64) only up to here
INT64_MAX = 2**63 - 1
MAX_SWEEP_TASKS = 100_000  # tasks of one sweep (each holds a config and a point file)

# Temporaries beside each counted array (peaks measured on CPU, rounded up). Measured extra peak
# resident memory against the estimate: held-out set of 4 seeds at D = 10⁴ 1.11 GB vs 1.34 GB;
# record.n_mc = 2·10⁵ with 2 seeds 0.86 GB vs 1.64 GB; theory.n = 2¹⁶ 0.42 GB vs 0.60 GB;
# diffusion engine, diffusion.n = 2¹⁵ with 4 seeds 0.65 GB vs 1.19 GB.
C_STEP = 3  # tokens of an SGD step: Z, X = Z + spike, and the gradient's products
C_TEST = 5  # held-out tokens, their targets and the prediction's temporaries
C_RISK = 4  # per-sample intermediates of the D → ∞ risk (λ, ν, scores, weights, losses)
C_DRIFT = 8  # the drift's per-sample gradients on top of the risk's intermediates
C_BAYES = 4  # a chunk of `bayes` sequences and the predictors' scores on it
F64 = 8  # bytes of a float64


class Term(NamedTuple):
    """One part of a run's memory (or time): its bytes (or seconds), what it is, the settings it
    grows with (with their values), how to shrink it, and ``factors``: (setting, value, power)
    of the sizes it is proportional to (as size^power), from which the refusal names the cause
    and a value that fits."""

    bytes: float
    what: str
    fields: str
    fix: str
    factors: tuple = ()


@dataclass(frozen=True)
class Estimate:
    """The memory of a run by part (bytes), its work (SGD steps, solver grid steps or samples,
    as ``work_what`` says), and the parts of its compute time that grow fastest (``time``:
    Terms in seconds at :data:`FLOPS`)."""

    command: str
    terms: list[Term] = field(default_factory=list)
    work: int = 0
    work_what: str = ""
    time: list[Term] = field(default_factory=list)

    @property
    def total(self) -> float:
        return float(sum(t.bytes for t in self.terms))

    @property
    def largest(self) -> Term:
        return max(self.terms, key=lambda t: t.bytes)


def _n(x) -> str:
    """A whole number with thousands separators."""
    return f"{int(x):,}"


# ----------------------------------------------------------------------------- estimates
def law_sizes(latent) -> tuple[int, int]:
    """(F, A): features, and the points of the expectation over θ (atoms; 1 if continuous)."""
    F = latent.F
    A = {"spike": 1, "flipped_spike": 2, "discrete": len(getattr(latent, "atoms", [0]))}
    return F, A.get(latent.kind, 1)


def _risk_terms(S: int | None, n: int, L: int, H: int, F: int, A: int, field_n: str) -> list[Term]:
    """The base samples of a D → ∞ risk (n of them) and its evaluation for S states at once
    (S = None: one state, not a number of seeds), over the law's A atoms and L tokens."""
    seeds = S is not None
    S = S or 1
    base = n * (L * (H + F) + F) * F64
    evaluate = S * n * A * L * (H + F) * F64 * C_RISK
    per = (("seeds", S),) if seeds else ()
    return [
        Term(base, "base samples of the D → ∞ risk",
             *term_fix(size_text((field_n, n), ("task.L", L)))),
        Term(evaluate, "evaluating the D → ∞ risk" + (" of every seed at once" if seeds else ""),
             *term_fix(size_text(*per, (field_n, n), ("task.latent.atoms", A), ("task.L", L)))),
    ]  # fmt: skip


def _record_term(S: int, points: int, H: int, F: int, A: int) -> Term:
    per = H * F + H * H + H + 4 + 2 * A  # M, Q, b, risks (and per atom)
    return Term(
        S * (points + 1) * per * F64 * 2,
        "the recorded time series",
        f"seeds × record.points = {_n(S)} × {_n(points)}",
        "fewer seeds or fewer record.points",
        (("seeds", S, 1), ("record.points", points, 1)),
    )


def _steps(cfg) -> float:
    return cfg.train.T * cfg.task.D / cfg.train.batch


def estimate_simulate(cfg: SimulateConfig) -> Estimate:
    """Memory of `headspec simulate` (full engine: D-dimensional keys, frames and tokens per
    seed; reduced engine: coordinates in span(K*, K) and blocks of random numbers; diffusion
    engine: the drift's and the increments' per-sample values on diffusion.n base samples)."""
    from headspec.dynamics.engines import ENGINES

    S, D, L, H, B = cfg.seeds, cfg.task.D, cfg.task.L, cfg.model.H, cfg.train.batch
    F, A = law_sizes(cfg.task.latent)
    isz = 4 if cfg.train.dtype == "float32" else 8
    terms = _risk_terms(S, cfg.record.n_mc, L, H, F, A, "record.n_mc")
    terms.append(_record_term(S, cfg.record.points, H, F, A))
    if cfg.train.engine == "full":
        fix_D = "a smaller task.D, or another engine: train.engine = reduced or diffusion"
        terms += [
            Term(
                S * D * (H + F) * (isz + F64),
                "keys and feature frames of every seed (and their float64 copies)",
                f"seeds × (model.H + F) × task.D = {_n(S)} × {H + F} × {_n(D)}",
                f"fewer seeds, {fix_D}",
                (("seeds", S, 1), ("task.D", D, 1)),
            ),
            Term(
                S * B * (L + 1) * D * isz * C_STEP,
                "the tokens of one SGD step of every seed",
                f"seeds × train.batch × task.L × task.D = {_n(S)} × {_n(B)} × {_n(L)} × {_n(D)}",
                f"fewer seeds, a smaller train.batch, {fix_D}",
                (("seeds", S, 1), ("train.batch", B, 1), ("task.L", L, 1), ("task.D", D, 1)),
            ),
        ]
        n_test = cfg.record.n_test
        if n_test is None:  # the engine's default: ≤ 256 within 256 MiB for all seeds
            n_test = min(256, 256 * 2**20 // max(1, S * L * D * isz))
        if n_test >= 2:
            terms.append(
                Term(
                    S * n_test * (L + 1) * D * isz * C_TEST,
                    "the held-out sequences of every seed",
                    f"seeds × record.n_test × task.L × task.D = {_n(S)} × {_n(n_test)} × "
                    f"{_n(L)} × {_n(D)}",
                    "a smaller record.n_test (0 disables it), fewer seeds",
                )
            )
    elif cfg.train.engine == "diffusion":
        opts = cfg.diffusion
        n = sobol_n(opts.n) if opts.sampler == "sobol" else opts.n
        cyclic = diffusion_head_cyclic(cfg)
        terms += _drift_terms(S, n * H if cyclic else n, cyclic, L, H, F, A, "diffusion")
        d = H * F + H * (H + 1) // 2 + H  # increments ψ of (M, Q, b) and their covariance
        terms.append(
            Term(
                S * (n * H if cyclic else n) * A * d * F64 * 3 + S * d * d * F64 * 4,
                "the increments' covariance of every seed",
                f"seeds × diffusion.n × model.H² = {_n(S)} × {_n(n)} × {H}²",
                "fewer seeds or a smaller diffusion.n",
            )
        )
        steps = cfg.train.T / opts.dt
        return Estimate("simulate", terms, int(min(steps, 2**63)), "Euler–Maruyama steps")
    else:
        s = F + H
        block = ENGINES["reduced"].block
        terms += [
            Term(
                S * s * s * (isz + F64) * 2,
                "reduced keys and frames of every seed",
                f"seeds × (F + model.H)² = {_n(S)} × {s}²",
                "fewer seeds",
            ),
            Term(
                S * block * B * L * (s + B * L) * isz * C_STEP,
                f"the random numbers of {block} SGD steps of every seed",
                f"seeds × train.batch² × task.L² = {_n(S)} × {_n(B)}² × {_n(L)}²",
                "fewer seeds or a smaller train.batch",
            ),
        ]
    return Estimate("simulate", terms, int(min(_steps(cfg), 2**63)), "SGD steps")


def sobol_n(n: int) -> int:
    """Scrambled Sobol samples come in powers of 2: n rounded up."""
    return 2 ** max(1, math.ceil(math.log2(n)))


def _drift_terms(
    S: int, m: int, cyclic: bool, L: int, H: int, F: int, A: int, section: str
) -> list[Term]:
    """The drift's m base samples (already × H when head-cyclic) and their per-sample gradients
    for S states at once (the ODE's drift, or the diffusion engine's increments)."""
    cyc = " × model.H (head-cyclic)" if cyclic else ""
    fix = f"a smaller {section}.n" + (f" or {section}.head_cyclic = false" if cyclic else "")
    return [
        Term(
            m * (L * (H + F) + F) * F64 * 3,
            "base samples of the drift",
            f"{section}.n{cyc} = {_n(m)}",
            fix,
            ((f"{section}.n", m, 1), ("task.L", L, 1)),
        ),
        Term(
            S * m * A * L * (H + F) * F64 * C_DRIFT,
            "the drift's per-sample gradients for every seed at once",
            f"seeds × {section}.n{cyc} × atoms × task.L = {_n(S)} × {_n(m)} × {_n(A)} × {_n(L)}",
            f"fewer seeds or {fix}",
            (("seeds", S, 1), (f"{section}.n", m, 1), ("task.latent.atoms", A, 1),
             ("task.L", L, 1)),
        ),
    ]  # fmt: skip


def theory_samples(cfg: TheoryConfig) -> tuple[int, bool]:
    """(drift base samples, head-cyclic) as :mod:`~headspec.conventions.build` makes them."""
    n = cfg.theory.n
    if cfg.theory.method != "mc":  # qmc and the exact method's η² term: scrambled Sobol
        n = sobol_n(n)
    return n, theory_head_cyclic(cfg)


def estimate_theory(cfg: TheoryConfig) -> Estimate:
    """Memory of `headspec theory`: the drift's base samples (× H when head-cyclic) and their
    per-sample gradients for every seed, and the recorded risk."""
    L, H = cfg.task.L, cfg.model.H
    F, A = law_sizes(cfg.task.latent)
    init = cfg.theory.init
    S = max(cfg.seeds, len(getattr(init, "seeds", None) or []))
    n, cyclic = theory_samples(cfg)
    terms = _risk_terms(S, cfg.record.n_mc, L, H, F, A, "record.n_mc")
    terms.append(_record_term(S, cfg.record.points, H, F, A))
    terms += _drift_terms(S, n * H if cyclic else n, cyclic, L, H, F, A, "theory")
    return Estimate("theory", terms, int(min(_steps(cfg), 2**63)), "grid steps")


def estimate_bayes(cfg: BayesRunConfig) -> Estimate:
    """Memory of `headspec bayes`: one chunk of sequences (projected: about 2·10⁶ numbers, at
    least one sequence; finite: about 2·10⁷ numbers, at least one sequence of L·D) and every
    predictor's per-sample losses (kept for the paired standard errors)."""
    L, D, n = cfg.task.L, cfg.task.D, cfg.bayes.samples
    F, A = law_sizes(cfg.task.latent)
    chunk = 1
    discrete = cfg.task.latent.kind != "gaussian"
    heads = 1 + (A if discrete else 0)  # mean head, Bayes-softmax head per atom
    P = 5  # predictors: zero, uniform, mean head, Bayes-softmax, posterior
    per_seq = L * (F + heads + 1 + A)
    terms = [
        Term(
            P * n * F64 * 2,
            "every predictor's per-sample losses",
            f"bayes.samples = {_n(n)}",
            "a smaller bayes.samples",
        )
    ]
    Ht = heads  # the heads of every predictor together: mean head and one per atom
    terms.append(  # the predictors' joint overlaps (Ht × Ht) and their eigen-factor, per chunk
        Term(Ht * Ht * F64 * 4, "the joint overlaps of the predictors' heads (one per atom)",
             *term_fix(size_text(("task.latent.atoms", max(A, 1), 2))))
    )  # fmt: skip
    if cfg.bayes.route == "projected":
        chunk = max(1, 2_000_000 // (L * (F + heads + 1)))
        terms.append(
            Term(
                chunk * per_seq * F64 * C_BAYES,
                "one chunk of projected sequences",
                f"task.L = {_n(L)}",
                "a smaller task.L",
                (("task.L", L, 1),),
            )
        )
    else:
        chunk = max(1, 20_000_000 // (L * D))
        terms += [
            Term(
                chunk * L * D * F64 * C_BAYES,
                "one chunk of D-dimensional sequences",
                f"task.L × task.D = {_n(L)} × {_n(D)}",
                "a smaller task.D or task.L, or the projected route: bayes.route = projected",
            ),
            Term(
                D * (F + heads) * F64 * 3,
                "the feature frame and the predictors' keys",
                f"task.D = {_n(D)}",
                "a smaller task.D, or the projected route: bayes.route = projected",
            ),
        ]
    chunks = -(-n // chunk)  # each draws λ = ν Mᵀ + ξ Sᵀ and factorises Q − MMᵀ afresh
    if cfg.bayes.route == "projected":  # an eigh of Ht × Ht and λ = ν Mᵀ + ξ Sᵀ per chunk
        seconds = chunks * (10 * Ht**3 + 2 * chunk * L * Ht * (Ht + F)) / FLOPS
    else:  # λ = X Kᵀ per chunk
        seconds = chunks * 2 * chunk * L * D * (Ht + F) / FLOPS
    time = [
        Term(
            seconds,
            "factorising and sampling the heads' overlaps for every chunk",
            *term_fix(size_text(("task.latent.atoms", A, 2), ("bayes.samples", n), ("task.L", L))),
        )
    ]
    return Estimate("bayes", terms, n, "samples", time)  # fmt: skip


def estimate_prune(n: int, L: int, H: int, F: int, A: int, random_orders: int = 0) -> Estimate:
    """Memory of pruning: the risk's ``n`` base samples (``prune.n``) and their evaluation, and
    the paths of ``random_orders`` random removal orders (each a few lists of H numbers)."""
    terms = _risk_terms(None, n, L, H, F, A, "prune.n")
    terms.append(
        Term(
            random_orders * (H + 1) * 200,
            "the removal paths of the random orders",
            f"prune.random_orders = {_n(random_orders)}",
            "fewer prune.random_orders",
        )
    )
    return Estimate("prune", terms, n * (1 + random_orders) * H * H, "risk samples")


def estimate_jacobian(n: int, L: int, H: int, F: int, A: int, field: str = "saddles.n") -> Estimate:
    """Memory of a Jacobian of the drift on ``n`` samples (saddles, the split map: ``field``): every
    sample's P × P Jacobian (P = HF + H² + H; per atom, twice while joined) and one chunk of
    :func:`~headspec.dynamics.jacobian.drift_jacobian` (≤ ~1 GiB). Measured 2026-12-06 (E1,
    L = 10, n = 2048): peak 2.44 GB at H = 8 (this: 1.3 GB + ~1.3 GB of process), 11.0 GB at
    H = 16 (this: 6.7 GB)."""
    from headspec.dynamics.jacobian import auto_chunk, sample_bytes

    P = H * F + H * H + H
    base, _ = _drift_terms(1, n, False, L, H, F, A, field.removesuffix(".n"))
    base = base._replace(fields=f"{field} = {_n(n)}", factors=((field, n, 1), ("task.L", L, 1)))
    kept = Term(2 * A * n * P * P * F64, "every sample's Jacobian (for the eigenvalues' s.e.)",
                f"atoms × {field} × P², P = H·F + H² + H = {_n(A)} × {_n(n)} × {_n(P)}²",
                f"a smaller {field} or fewer heads (model.H)",
                ((field, n, 1), ("task.latent.atoms", A, 1), ("model.H", H, 4)))  # fmt: skip
    chunk = Term(auto_chunk(H, F, L) * sample_bytes(H, F, L),
                 "one chunk of per-sample intermediates (≤ 1 GiB, or one sample)",
                 f"about 20 × task.L × P² numbers a sample (model.H = {H}, task.L = {L})",
                 "fewer heads (model.H) or a shorter task.L",
                 (("model.H", H, 4), ("task.L", L, 1)))  # fmt: skip
    return Estimate("the Jacobian", [base, kept, chunk], P * n, "drift samples")


def estimate_splitmap(cfg: SplitMapConfig) -> Estimate:
    """Memory of one setting of the split map: its Jacobians (:func:`estimate_jacobian`)."""
    F, A = law_sizes(cfg.task.latent)
    n = cfg.map.n if cfg.map.method == "mc" else sobol_n(cfg.map.n)
    est = estimate_jacobian(n, cfg.task.L, cfg.model.H, F, A, "map.n")
    return Estimate("the split map", est.terms, est.work, est.work_what)


def estimate(cfg) -> Estimate:
    """The estimate of a validated simulate, theory, bayes or split-map config."""
    if isinstance(cfg, SimulateConfig):
        return estimate_simulate(cfg)
    if isinstance(cfg, TheoryConfig):
        return estimate_theory(cfg)
    if isinstance(cfg, BayesRunConfig):
        return estimate_bayes(cfg)
    if isinstance(cfg, SplitMapConfig):
        return estimate_splitmap(cfg)
    raise TypeError(f"no estimate for {type(cfg).__name__}")


# ----------------------------------------------------------------------------- checks
def _check_ints(data, path: str = "") -> None:
    """Every whole number of a config must fit a 64-bit integer."""
    if isinstance(data, dict):
        for k, v in data.items():
            _check_ints(v, f"{path}.{k}" if path else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            _check_ints(v, f"{path}[{i}]")
    elif isinstance(data, int) and not isinstance(data, bool) and abs(data) > INT64_MAX:
        raise ConfigError(
            f"{path} = {data} does not fit a 64-bit integer (the largest is {INT64_MAX:,}); "
            f"fix: give a smaller value"
        )


def check_work(cfg) -> None:
    """Refuse whole numbers beyond 64 bits and step counts that overflow or never finish."""
    _check_ints(cfg.model_dump(mode="python"))
    if not isinstance(cfg, SimulateConfig | TheoryConfig):
        return
    steps = _steps(cfg)
    where = f"train.T·task.D/train.batch = {cfg.train.T:g}·{_n(cfg.task.D)}/{_n(cfg.train.batch)}"
    fix = "fix: lower train.T or task.D, or raise train.batch"
    if isinstance(cfg, SimulateConfig) and cfg.train.engine != "diffusion" and steps > MAX_STEPS:
        raise ConfigError(
            f"{where} = {steps:.3g} SGD steps, beyond the {MAX_STEPS:.0e} any run can finish "
            f"(over 10 days at 1 µs a step); {fix}"
        )
    if isinstance(cfg, SimulateConfig) and cfg.train.engine == "diffusion":
        em = cfg.train.T / cfg.diffusion.dt
        if em > MAX_STEPS:
            raise ConfigError(
                f"train.T/diffusion.dt = {cfg.train.T:g}/{cfg.diffusion.dt:g} = {em:.3g} "
                f"Euler–Maruyama steps, beyond the {MAX_STEPS:.0e} any run can finish; fix: "
                f"raise diffusion.dt or lower train.T"
            )
    if steps > MAX_GRID_STEPS:
        raise ConfigError(
            f"{where} = {steps:.3g} steps on the time grid, beyond 2^53 (where whole steps are "
            f"no longer exact); {fix}"
        )


def check_budget(cfg, available: int | None = None) -> Estimate | None:
    """Refuse (:class:`ConfigError`) a run that cannot fit or never ends, before any work.

    ``available``: bytes the run may use (default: :func:`available_memory` × :data:`SAFETY`).
    Returns the estimate of a run that fits (None for a config that is not a run's).
    """
    check_work(cfg)
    if not isinstance(cfg, SimulateConfig | TheoryConfig | BayesRunConfig):
        return None  # a config of no run: only its numbers are checked
    est = estimate(cfg)
    check_memory(est, available, refit(cfg, estimate))  # from refusal, as check_time
    check_time(est)
    return est


def check_sweep_task(cfg) -> None:
    """A sweep task's config, refused before any task is sent out: numbers beyond 64 bits, step
    counts that never finish, and memory beyond what this machine's workers have (as
    :func:`check_budget`, HEADSPEC_MEMORY raising the limit for a cluster's larger workers).
    Not its time: a sweep point may run for long on purpose."""
    check_work(cfg)
    if isinstance(cfg, SimulateConfig | TheoryConfig | BayesRunConfig | SplitMapConfig):
        est = estimate(cfg)
        check_memory(est, None, refit(cfg, estimate))


def check_sweep_size(points: int, tasks: int) -> None:
    """Refuse a sweep of more than :data:`MAX_SWEEP_TASKS` tasks before building its configs."""
    if tasks > MAX_SWEEP_TASKS:
        raise ConfigError(
            f"axes, sweep.seeds_per_task: the sweep has {points:,} grid points (the product of "
            f"the axes' lengths) in {tasks:,} tasks (seed blocks), more than the "
            f"{MAX_SWEEP_TASKS:,} one sweep may hold; fix: fewer axis values, more seeds per "
            f"task (sweep.seeds_per_task), or split the sweep"
        )
