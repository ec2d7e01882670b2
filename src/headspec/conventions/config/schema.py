"""The run configs: task, model, training, recording, theory, Bayes (SPEC §2–§5, §8).

Every config refuses unknown keys, non-finite numbers and out-of-range values with a message that
names the field and the fix. Numerical code never sees these objects: :mod:`headspec.conventions.
build` turns them into laws, activations, engines and initial states.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, Strict, field_validator, model_serializer, model_validator

from headspec.conventions.config.base import PositiveInt, StrictModel
from headspec.conventions.config.domain import (
    beyond_exact,
    check_diffusion_domain,
    check_resample,
    resolve_diffusion,
    resolve_theory,
)
from headspec.conventions.config.latent import (
    MAX_SIGNAL,
    LatentConfig,
    check_range,
    default_latent,
)
from headspec.conventions.config.starts import (
    GivenStart,
    Init,
    PerturbedInit,
    RandomStart,
    check_given,
)
from headspec.core.names import ACTIVATION_NAMES, ENGINE_NAMES, reduced_fits


# ----------------------------------------------------------------------------- task
class TaskConfig(StrictModel):
    """The single-location task of SPEC §2."""

    L: Annotated[int, Strict(), Field(ge=2, description="tokens per sequence (≥ 2)")] = 10
    D: PositiveInt = Field(1000, description="token dimension (finite-D routes)")
    frame: Literal["random", "canonical"] = Field(
        "random", description="feature frame K*: random orthogonal or the first F axes"
    )
    latent: LatentConfig = Field(default_factory=default_latent)

    @model_validator(mode="after")
    def _check(self):
        if self.D < self.latent.F:
            raise ValueError(
                f"task.D = {self.D} is smaller than the number of latent features F = "
                f"{self.latent.F}; fix: use task.D ≥ {self.latent.F}"
            )
        return self


class BayesOptions(StrictModel):
    """How `headspec bayes` estimates risks."""

    samples: Annotated[int, Strict(), Field(ge=2)] = Field(
        100_000, description="Monte-Carlo sequences (≥ 2)"
    )
    route: Literal["projected", "finite"] = Field(
        "projected", description="'projected' (D → ∞) or 'finite' (exact loss at task.D)"
    )


class BayesRunConfig(StrictModel):
    """Everything `headspec bayes` needs."""

    task: TaskConfig = Field(default_factory=TaskConfig)
    bayes: BayesOptions = Field(default_factory=BayesOptions)
    seed: Annotated[int, Strict(), Field(ge=0, le=2**63 - 1)] = 0


# ----------------------------------------------------------------------------- simulate
class ModelConfig(StrictModel):
    """The multi-head attention of SPEC §3 and its initialisation (§4)."""

    H: PositiveInt = Field(4, description="number of heads")
    activation: Literal[ACTIVATION_NAMES] = "softmax"  # every registered activation
    aggregation: Literal["mean", "sum"] | None = Field(
        None, description="head aggregation; default mean for softmax, sum otherwise"
    )
    sigma0: float = Field(
        0.1,
        ge=0,
        description="initial keys k_h ~ N(0, sigma0² I_D); plausible range 0 … 1000",
    )
    b0: float | None = Field(
        None,
        description="initial biases; default 0, and −log(L(H−1)) for softmax1 (SPEC §4); "
        "plausible range −1000 … 1000",
    )

    @field_validator("sigma0")
    @classmethod
    def _sigma0_range(cls, sigma0):
        return check_range(
            sigma0,
            MAX_SIGNAL,
            "the scale of the initial keys, whose overlaps are O(sigma0²)",
            "use 0 ≤ model.sigma0 ≤ 1000 (default 0.1)",
            low=0.0,
        )

    @field_validator("b0")
    @classmethod
    def _b0_range(cls, b0):
        if b0 is None:
            return b0
        return check_range(
            b0,
            MAX_SIGNAL,
            "initial biases, added to scores of order one",
            "use |model.b0| ≤ 1000, or omit it for the SPEC §4 default",
        )


class ConstantSchedule(StrictModel):
    """η(t) = η."""

    kind: Literal["constant"] = "constant"


class InverseTimeSchedule(StrictModel):
    """η(t) = η · (1 + t/t0)^(−power)."""

    kind: Literal["inverse_time"] = "inverse_time"
    t0: float = Field(10.0, gt=0, description="time scale of the decay")
    power: float = Field(1.0, ge=0, description="decay exponent")


Schedule = Annotated[ConstantSchedule | InverseTimeSchedule, Field(discriminator="kind")]


class TrainConfig(StrictModel):
    """Online SGD (SPEC §4)."""

    T: float = Field(20.0, gt=0, description="training time horizon, in t = samples/D")
    lr: float = Field(1.0, gt=0, description="learning rate η of the keys")
    lr_b: float | None = Field(None, gt=0, description="learning rate η_b of the biases (= η)")
    batch: PositiveInt = Field(1, description="fresh sequences per step (summed, not averaged)")
    schedule: Schedule = Field(default_factory=ConstantSchedule)
    dtype: Literal["float32", "float64"] = Field("float32", description="simulation precision")
    engine: Literal[ENGINE_NAMES] = Field(  # every registered engine
        "full",
        description="'full' (D-dimensional keys and tokens), 'reduced' (exact, coordinates "
        "in span(K*, K): per-step cost independent of D; needs D − F − H ≥ batch·L) or "
        "'diffusion' (the order parameters' SDE with the exact first two moments of an SGD step: "
        "cost per unit t independent of D; options in [diffusion])",
    )


class RecordConfig(StrictModel):
    """The shared time grid of SPEC §8 and how observables are estimated on it."""

    grid: Literal["log", "linear"] = "log"
    points: Annotated[int, Strict(), Field(ge=1, le=100_000)] = Field(
        60, description="grid points after t = 0"
    )
    t_min: float = Field(0.05, gt=0, description="first non-zero time of the log grid")
    n_mc: Annotated[int, Strict(), Field(ge=2)] = Field(
        4096, description="Monte-Carlo samples for the D → ∞ risk of the current (M, Q, b)"
    )
    mc_seed: Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)] = Field(
        0,
        description="seed of the base samples of the D → ∞ risk; shared by all seeds and runs "
        "(common random numbers), so a seed's curves do not depend on how seeds are grouped",
    )
    n_test: Annotated[int, Strict(), Field(ge=0)] | None = Field(
        None,
        description="held-out sequences per seed (finite-D test risk); default ≤ 256 "
        "within a 256 MiB budget; 0 disables",
    )


def _check_steps(train: TrainConfig, D: int) -> None:
    """A run must take at least one SGD step: T·D/batch ≥ 1."""
    steps = train.T * D / train.batch
    if steps < 1:
        raise ValueError(
            f"train.T·task.D/train.batch = {train.T:g}·{D}/{train.batch} = {steps:.3g} SGD "
            f"steps, so the run would train nothing; fix: raise train.T or task.D, or lower "
            f"train.batch"
        )


def _check_grid(record: RecordConfig, train: TrainConfig) -> None:
    """The log grid's first time must lie below the horizon."""
    if record.grid == "log" and record.t_min >= train.T:
        raise ValueError(
            f"record.t_min = {record.t_min} is not below train.T = {train.T}; "
            f"fix: lower record.t_min or raise train.T"
        )


class DiffusionOptions(StrictModel):
    """The diffusion engine (``train.engine = "diffusion"``): dX = f dt + C^{1/2} dW/√D, with f and
    C the exact mean and covariance of one SGD step's increment at task.D, estimated on base
    samples as the theory's drift."""

    n: Annotated[int, Strict(), Field(ge=2)] | None = Field(
        None,
        description="base samples of the drift and noise (common random numbers); default: "
        "1024 with the exact drift, 8192 with the sampled one. A sampled drift's relative error "
        "is largest where it is small (plateaus): 2048 Sobol samples biased dQ/dt on E1's "
        "common phase by ~15 %, 16384 by < 2 %",
    )
    sampler: Literal["mc", "sobol"] = Field(
        "sobol", description="plain Monte Carlo or scrambled Sobol quasi-Monte Carlo"
    )
    sample_seed: Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)] = 0
    dt: float = Field(0.1, gt=0, le=1, description="fixed step of the SDE solver, in t")
    solver: Literal["heun", "euler"] = Field(
        "heun",
        description="heun (2 evaluations per step, error O(dt²) in the drift; converges to the "
        "Stratonovich solution, which differs from SGD's Itô one by O(1/D)) or euler "
        "(Euler–Maruyama: Itô, 1 evaluation, error O(dt))",
    )
    head_cyclic: Literal["auto"] | bool = Field(
        "auto",
        description="base samples closed under cyclic shifts of the heads (cost × H). auto: with "
        "a sampled drift when task.D > diffusion.n, where the samples' O(1/√n) head asymmetry "
        "would exceed the O(1/√D) fluctuations that make heads separate (never with resample: "
        "fresh samples' asymmetry is noise, counted in the SGD noise; nor with the exact drift)",
    )
    resample: bool = Field(
        False,
        description='draw n fresh Monte-Carlo base samples (sampler = "mc") at every step of '
        "every seed: the drift is then unbiased, and its sampling noise, of covariance C/n per "
        "step, is part of the SGD noise the step must carry (the injected noise is reduced to "
        "C/D − dt·C/n per unit time); needs n ≥ task.D·dt. false: fixed samples (common random "
        "numbers, any D), whose O(1/√n) drift error is a bias shared by every step and seed",
    )
    drift: Literal["auto", "sampled", "exact"] = Field(
        "auto",
        description="the mean increment. auto: exact, except with resample and for "
        "Bayes-softmax with model.H ≥ 4 heads (out of the quadrature's reach), which take "
        "sampled. sampled: the base samples' average (its O(1/√n) error "
        "is a bias on plateaus: 2.9 % of dQ/dt on E1's common phase at D = 10⁴, n = 8192); "
        "exact, the exact D → ∞ drift (the quadrature of theory.method = exact, its η² term on "
        "eta2_n score points) plus the finite-D correction averaged over the base samples with "
        "a control variate, error O(1/(D√n)) (and the η² term's): 4e-4 of dQ/dt there at "
        "n = 1024, for half the cost per unit t of sampled at n = 8192 (H = 2 and 4; its "
        "compilation takes 2–4× longer: benchmarks/bench_diffusion_mean.py). The noise comes "
        "from the samples either way. Not with resample. Results of runs made before auto "
        "existed (no drift in their config) were sampled, and are read so",
    )
    eta2_n: Annotated[int, Strict(), Field(ge=2)] | None = Field(
        None,
        description='score points of the exact drift\'s η² term (diffusion.drift = "exact" '
        "only); default: n. Its error is the exact drift's largest on plateaus: 4.2e-4 of dQ/dt "
        "on E1's common phase at 1024, 1.1e-4 at 8192 for 2.3× the cost per evaluation "
        "(benchmarks/bench_diffusion_mean.py)",
    )
    noise_factor: float = Field(
        1.0,
        gt=0,
        description="multiplies the injected noise: 1 is SGD's; another value is a deliberately "
        "wrong noise (√2: covariance C × 2), which shows that a validation against the reduced "
        "engine can fail (studies/diffusion_vs_reduced.py)",
    )


class _RunConfig(StrictModel):
    """The sections simulation and theory share: task, model, train, record, first seed."""

    task: TaskConfig = Field(default_factory=TaskConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    record: RecordConfig = Field(default_factory=RecordConfig)
    seed: Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)] = Field(0, description="first seed")


class SimulateConfig(_RunConfig):
    """Everything `headspec simulate` needs."""

    seeds: PositiveInt = Field(8, description="independent runs: seeds seed, seed+1, …")
    diffusion: DiffusionOptions = Field(default_factory=DiffusionOptions)
    init: Annotated[RandomStart | GivenStart, Field(discriminator="kind")] = Field(
        default_factory=RandomStart,
        description="where SGD starts: random (SPEC §4, the default) or given — every seed at "
        "the same order parameters (M, Q, b), realised by keys of dimension task.D, plus "
        "init.noise·N(0, I_D) per key and seed (a prepared split, a fixed point)",
    )

    @model_serializer(mode="wrap")
    def _without_default_start(self, handler):
        """The default random start is left out of the dump (config_json, the hashes of sweep
        tasks and of the reproduction's reusable runs): configs written before ``init`` existed
        keep their hashes, and their files stay reusable."""
        data = handler(self)
        if isinstance(data, dict) and isinstance(self.init, RandomStart):
            data.pop("init", None)
        if isinstance(data, dict) and self.train.engine != "diffusion":  # drift: the diffusion
            data.get("diffusion", {}).pop("drift", None)  # engine's alone (domain.recorded)
        if isinstance(data, dict) and data.get("diffusion", {}).get("eta2_n", 0) is None:
            data["diffusion"].pop("eta2_n")  # left at its default (n): the older dumps' meaning
        return data

    @model_validator(mode="after")
    def _check(self):
        resolve_diffusion(self)
        F, H, L, D, B = self.task.latent.F, self.model.H, self.task.L, self.task.D, self.train.batch
        if isinstance(self.init, GivenStart):
            w = check_given(self.init, H, F, "init")
            if self.train.engine == "reduced" and self.init.noise == 0:
                if w <= 1e-9 * max(1.0, float(np.abs(np.asarray(self.init.Q)).max())):
                    raise ValueError(
                        "init: Q − MMᵀ is singular (identical heads, or keys inside the features' "
                        f"span; smallest eigenvalue {w:.3g}) and init.noise = 0: the reduced "
                        "engine needs the keys' parts off the features to span H dimensions, "
                        "and SGD never separates identical heads; fix: give init.noise > 0 "
                        "(e.g. 0.1, the random start's key scale)"
                    )
        if self.train.engine == "reduced" and not reduced_fits(D, F, H, L, B):
            raise ValueError(
                f'train.engine = "reduced" needs task.D − F − model.H ≥ train.batch·task.L, got '
                f'{D} − {F} − {H} < {B * L}; fix: use train.engine = "full" or a larger task.D'
            )
        if self.train.engine == "diffusion" and D - F - H < L:
            raise ValueError(
                f'train.engine = "diffusion" needs task.D − F − model.H ≥ task.L (the tokens\' '
                f"Gram matrix outside span(K*, K)), got {D} − {F} − {H} < {L}; fix: raise task.D "
                f'to at least {F + H + L}, or use train.engine = "full"'
            )
        if self.train.engine == "diffusion":
            check_diffusion_domain(self)
        if self.train.engine == "diffusion" and self.diffusion.resample:
            check_resample(self.diffusion, D)
        exact = self.train.engine == "diffusion" and self.diffusion.drift == "exact"
        if self.diffusion.eta2_n is not None and not exact:
            raise ValueError(
                f"diffusion.eta2_n = {self.diffusion.eta2_n} sets the score points of the exact "
                'drift\'s η² term, and this run has none (it needs train.engine = "diffusion" '
                'and diffusion.drift = "exact"); fix: remove diffusion.eta2_n, or set those two'
            )
        if exact and beyond_exact(self.model):
            raise ValueError(
                f'diffusion.drift = "exact" cannot integrate Bayes-softmax with model.H = {H} '
                "heads (its one normaliser couples all heads: an H-dimensional quadrature, out of "
                'reach for H ≥ 4); fix: use diffusion.drift = "sampled", or at most 3 heads'
            )
        _check_steps(self.train, D)
        _check_grid(self.record, self.train)
        return self


def unusual_settings(cfg) -> list[str]:
    """Settings of a run config (simulate or theory) far beyond the usual ones though within the
    plausible ranges — the likely cause of a divergence besides the learning rate: initial keys
    (model.sigma0 > 10), biases (|model.b0| > 50) or a signal (|c·θ_f| > 50, c²·Var θ > 2500)
    much larger than the usual O(1)."""
    out = []
    m = cfg.model
    if m.sigma0 > 10:
        out.append(f"model.sigma0 = {m.sigma0:g} (initial keys; usually 0.1)")
    if m.b0 is not None and abs(m.b0) > 50:
        out.append(f"model.b0 = {m.b0:g} (initial biases; usually of order one)")
    signal, var = cfg.task.latent.signal_size()
    if signal > 50 or var > 2500:
        out.append(
            f"task.latent (scaled θ with entries up to {signal:g}, variances up to {var:g}; "
            f"usually a few units) — see task.latent.scale"
        )
    return out


# ----------------------------------------------------------------------------- theory
class TheoryOptions(StrictModel):
    """How the ODE's expectations are estimated and integrated."""

    method: Literal["auto", "exact", "qmc", "mc"] = Field(
        "auto",
        description="how the drift's expectations are evaluated: exact (the risk by quadrature, "
        "the η-linear drift as its gradient; only the η² term sampled, on n scrambled Sobol "
        "samples of the scores with control variates of exact means), qmc (every term on n "
        "scrambled Sobol samples), mc (on n Monte-Carlo samples). "
        "auto: exact where the quadrature reaches, else qmc (Bayes-softmax with model.H ≥ 4 "
        "heads: its one normaliser couples all heads). A whole exact trajectory costs about "
        "what qmc at n = 8192 costs (1.0–1.5×; 10–45× qmc's per evaluation at n = 1024, in "
        "3× fewer solver steps) at a far smaller drift error on plateaus (2e-4 against 0.067 "
        "relative); the resolved method is what a result records",
    )
    n: Annotated[int, Strict(), Field(ge=2)] | None = Field(
        None,
        description="base samples of the sampled expectations (common random numbers): every "
        "term for qmc and mc, the η² term for exact. Unset: 1024 for exact, 8192 for qmc and mc "
        "(the resolved n is what a result records)",
    )
    sample_seed: Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)] = 0
    rtol: float = Field(1e-5, gt=0, description="relative tolerance of the adaptive solver")
    atol: float = Field(1e-7, gt=0, description="absolute tolerance of the adaptive solver")
    max_steps: Annotated[int, Strict(), Field(ge=1)] = Field(
        100_000, description="solver steps allowed between two grid points"
    )
    certify: bool = Field(
        False,
        description="exact method: record the vector field's quadrature error bound between "
        "the solver's solves and its integral over the path (result attributes "
        "quadrature_drift_err, quadrature_path_err); costs a second compiled program (≈ 7 s "
        "at H = 4), hence off by default",
    )
    init: Init = Field(default_factory=PerturbedInit)
    _sampler = model_validator(mode="before")(lambda data: _legacy_sampler(data))
    head_cyclic: Literal["auto"] | bool = Field(
        "auto",
        description="drift samples closed under cyclic shifts of the heads (cost × H), so that "
        "the estimated drift treats all heads alike (exact: its η² estimate averaged over the "
        "H cyclic relabellings of the heads instead). auto: for a symmetric init, and for the "
        "perturbed init when task.D > theory.n — there the samples' O(1/√n) asymmetry would "
        "exceed the initial O(1/√D) head differences and decide when heads separate",
    )


def _legacy_sampler(data):
    """``theory.sampler`` (before the exact method): "sobol" is method = "qmc", "mc" is "mc".
    Accepted on input, so that older configs and result files still load."""
    if not isinstance(data, dict) or "sampler" not in data:
        return data
    data = dict(data)
    sampler = data.pop("sampler")
    if sampler not in ("sobol", "mc"):
        raise ValueError(
            f"theory.sampler = {sampler!r} is not one of 'sobol', 'mc'; fix: use theory.method "
            '= "qmc" (scrambled Sobol), "mc" or "exact" (theory.sampler is the older name)'
        )
    method = {"sobol": "qmc", "mc": "mc"}[sampler]
    if data.get("method", "auto") not in ("auto", method):
        raise ValueError(
            f"theory.sampler = {sampler!r} contradicts theory.method = {data['method']!r}; fix: "
            "give theory.method alone"
        )
    data["method"] = method
    return data


class TheoryConfig(_RunConfig):
    """Everything `headspec theory` needs (task, model, train, record as for `simulate`)."""

    theory: TheoryOptions = Field(default_factory=TheoryOptions)
    seeds: PositiveInt = Field(1, description="perturbed initial states: seeds seed, seed+1, …")

    @model_validator(mode="after")
    def _check(self):
        resolve_theory(self)
        _check_grid(self.record, self.train)
        init = self.theory.init
        F, H, D = self.task.latent.F, self.model.H, self.task.D
        if self.theory.method == "exact" and beyond_exact(self.model):
            raise ValueError(
                f"theory.method = exact cannot integrate Bayes-softmax with model.H = {H} heads "
                "(its one normaliser couples all heads: an H-dimensional quadrature, out of reach "
                'for H ≥ 4); fix: use theory.method = "qmc", or at most 3 heads'
            )
        if init.kind == "perturbed" and D - F < H:
            raise ValueError(
                f"theory.init = perturbed draws the initial overlaps of {H} keys at task.D = {D}, "
                f"which needs task.D − F ≥ model.H ({D} − {F} < {H}); fix: raise task.D to at "
                f'least {F + H}, or use theory.init = {{kind = "symmetric"}}'
            )
        if init.kind == "given":
            check_given(init, self.model.H, self.task.latent.F, "theory.init")
        return self
