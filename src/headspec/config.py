"""Validated configurations (pydantic), TOML loading and command-line overrides.

Every config refuses unknown keys, non-finite numbers and out-of-range values with a message that
names the field and the fix (:func:`format_validation_error`). Configs load from TOML files
(:func:`load_config`) and accept dotted overrides such as ``task.L=20`` or
``task.latent={kind="spike", a=[3.0]}`` (values are parsed as TOML values — never evaluated).

Example:
    >>> cfg = load_config(BayesRunConfig, overrides=["task.L=20", "bayes.samples=1000"])
    >>> cfg.task.L, cfg.bayes.samples
    (20, 1000)
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from headspec import latent

PositiveInt = Annotated[int, Strict(), Field(ge=1)]
Vector = Annotated[list[float], Field(min_length=1)]
T = TypeVar("T", bound=BaseModel)
LATENT_KINDS = ("spike", "flipped_spike", "discrete", "gaussian")
SCHEDULE_KINDS = ("constant", "inverse_time")
INIT_KINDS = ("perturbed", "symmetric", "given", "simulation")
_KINDS = {"latent": LATENT_KINDS, "schedule": SCHEDULE_KINDS, "init": INIT_KINDS}
_TAGS = frozenset(LATENT_KINDS + SCHEDULE_KINDS + INIT_KINDS)


class ConfigError(ValueError):
    """A config could not be loaded or is invalid; the message names the field and the fix."""


class StrictModel(BaseModel):
    """Base of all configs: unknown keys and nan/inf are refused; instances are immutable."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


# ----------------------------------------------------------------------------- latent laws
class _LatentBase(StrictModel):
    scale: float = Field(
        1.0, ge=0, description="global signal strength c: θ → cθ (0 removes the signal)"
    )

    @property
    def F(self) -> int:
        raise NotImplementedError

    def build(self) -> latent.LatentLaw:
        """The JAX law, with the scale applied."""
        return self._build().scaled(self.scale)


class SpikeConfig(_LatentBase):
    """θ = a."""

    kind: Literal["spike"] = "spike"
    a: Vector = Field(description="the fixed latent vector (length F)")

    @property
    def F(self):
        return len(self.a)

    def _build(self):
        return latent.Spike(self.a)


class FlippedSpikeConfig(_LatentBase):
    """θ = ±a with probability ½ each."""

    kind: Literal["flipped_spike"] = "flipped_spike"
    a: Vector = Field(description="the latent vector whose sign is flipped (length F)")

    @property
    def F(self):
        return len(self.a)

    def _build(self):
        return latent.FlippedSpike(self.a)


class DiscreteConfig(_LatentBase):
    """θ = atoms[j] with probability probs[j] (uniform when probs is omitted)."""

    kind: Literal["discrete"] = "discrete"
    atoms: Annotated[list[Vector], Field(min_length=1)] = Field(
        description="J atoms, each a list of F numbers"
    )
    probs: Annotated[list[float], Field(min_length=1)] | None = Field(
        None, description="J probabilities summing to 1 (default: uniform)"
    )

    @field_validator("atoms")
    @classmethod
    def _same_length(cls, atoms):
        F = len(atoms[0])
        for j, a in enumerate(atoms):
            if len(a) != F:
                raise ValueError(
                    f"atoms[{j}] has {len(a)} entries but atoms[0] has {F}; "
                    f"fix: give every atom the same number F of entries"
                )
        return atoms

    @field_validator("probs")
    @classmethod
    def _probabilities(cls, probs, info: ValidationInfo):
        if probs is None:
            return probs
        atoms = info.data.get("atoms")
        if atoms is not None and len(probs) != len(atoms):
            raise ValueError(
                f"probs has {len(probs)} entries for {len(atoms)} atoms; "
                f"fix: give one probability per atom"
            )
        neg = [j for j, p in enumerate(probs) if p < 0]
        if neg:
            raise ValueError(
                f"probs[{neg[0]}] = {probs[neg[0]]} is negative; fix: use probabilities ≥ 0"
            )
        total = math.fsum(probs)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(
                f"probs sum to {total:g}, not 1; fix: make them sum to 1 "
                f"(or omit probs for uniform weights)"
            )
        return probs

    @property
    def F(self):
        return len(self.atoms[0])

    def _build(self):
        return latent.Discrete(self.atoms, self.probs)


class GaussianConfig(_LatentBase):
    """θ ~ N(mean, cov) (or a diagonal covariance given by var; identity if neither)."""

    kind: Literal["gaussian"] = "gaussian"
    mean: Vector = Field(description="μ, length F")
    cov: Annotated[list[Vector], Field(min_length=1)] | None = Field(
        None, description="Σ, F×F symmetric positive semi-definite"
    )
    var: Annotated[list[Annotated[float, Field(ge=0)]], Field(min_length=1)] | None = Field(
        None, description="diagonal of Σ (alternative to cov), F numbers ≥ 0"
    )

    @field_validator("var")
    @classmethod
    def _var_shape(cls, var, info: ValidationInfo):
        mean = info.data.get("mean")
        if var is not None and mean is not None and len(var) != len(mean):
            raise ValueError(
                f"var has {len(var)} entries but mean has {len(mean)}; "
                f"fix: give F = {len(mean)} variances"
            )
        return var

    @field_validator("cov")
    @classmethod
    def _cov_psd(cls, cov, info: ValidationInfo):
        mean = info.data.get("mean")
        if cov is None or mean is None:
            return cov
        F = len(mean)
        if len(cov) != F or any(len(r) != F for r in cov):
            lengths = ", ".join(str(len(r)) for r in cov)
            raise ValueError(
                f"cov has {len(cov)} rows (of lengths {lengths}) but mean has F = {F} entries; "
                f"fix: give a {F}×{F} matrix"
            )
        C = np.asarray(cov, dtype=np.float64)
        tol = 1e-9 * max(1.0, float(np.abs(C).max()))
        if not np.allclose(C, C.T, rtol=0, atol=tol):
            raise ValueError("cov is not symmetric; fix: make cov[i][j] equal cov[j][i]")
        wmin = float(np.linalg.eigvalsh(C).min())
        if wmin < -tol:
            raise ValueError(
                f"cov is not positive semi-definite (smallest eigenvalue {wmin:.3g}); "
                f"fix: give a valid covariance matrix"
            )
        return cov

    @model_validator(mode="after")
    def _one_of(self):
        if self.cov is not None and self.var is not None:
            raise ValueError("both cov and var are given; fix: give only one of them")
        return self

    @property
    def F(self):
        return len(self.mean)

    def _build(self):
        return latent.Gaussian(self.mean, cov=self.cov, var=self.var)


LatentConfig = Annotated[
    SpikeConfig | FlippedSpikeConfig | DiscreteConfig | GaussianConfig,
    Field(discriminator="kind"),
]


def _default_latent() -> DiscreteConfig:
    return DiscreteConfig(atoms=[[2.0, 0.0], [0.0, 2.0]], probs=[0.6, 0.4])


# ----------------------------------------------------------------------------- task
class TaskConfig(StrictModel):
    """The single-location task of SPEC §2."""

    L: Annotated[int, Strict(), Field(ge=2, description="tokens per sequence (≥ 2)")] = 10
    D: PositiveInt = Field(1000, description="token dimension (finite-D routes)")
    frame: Literal["random", "canonical"] = Field(
        "random", description="feature frame K*: random orthogonal or the first F axes"
    )
    latent: LatentConfig = Field(default_factory=_default_latent)

    @model_validator(mode="after")
    def _check(self):
        if self.D < self.latent.F:
            raise ValueError(
                f"D = {self.D} is smaller than the number of latent features F = {self.latent.F}; "
                f"fix: use D ≥ {self.latent.F}"
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


# ----------------------------------------------------------------------------- loading
_HINTS = {
    "missing": "fix: add this field",
    "finite_number": "fix: use a finite number (nan and inf are not allowed)",
    "int_type": "fix: give a whole number",
    "int_parsing": "fix: give a whole number",
    "int_from_float": "fix: give a whole number",
    "float_type": "fix: give a number",
    "float_parsing": "fix: give a number",
    "list_type": "fix: give a list, e.g. [1.0, 0.0]",
    "too_short": "fix: give at least one entry",
}
_TABLE_HINT = 'fix: give a table of keys, e.g. {kind = "spike", a = [2.0]}'


def _allowed_keys(model: type[BaseModel] | None, loc: tuple) -> list[str]:
    """The keys a config table accepts, found by walking ``loc`` (without its last entry)."""
    from typing import get_args

    def models_in(annotation):
        args = get_args(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for a in args for m in models_in(a)]

    for p in loc[:-1]:
        if model is None or not isinstance(p, str):
            return []
        if p in _TAGS:
            continue
        field = model.model_fields.get(p)
        if field is None:
            return []
        candidates = models_in(field.annotation)
        kind = next((q for q in loc if q in _TAGS), None)
        model = next(
            (
                m
                for m in candidates
                if kind is None
                or m.model_fields.get("kind") is None
                or m.model_fields["kind"].default == kind
            ),
            None,
        )
    return sorted(model.model_fields) if model is not None else []


def format_validation_error(err: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line per problem: ``field.path: message; fix: …``."""
    lines = []
    for e in err.errors(include_url=False):
        loc = [str(p) for p in e["loc"] if str(p) not in _TAGS]
        where = ".".join(loc) or "(config)"
        msg = e["msg"].removeprefix("Value error, ")
        typ = e["type"]
        ctx = e.get("ctx") or {}
        hint = _HINTS.get(typ, "")
        if typ in ("union_tag_invalid", "union_tag_not_found"):
            kinds = ", ".join(_KINDS.get(loc[-1] if loc else "", LATENT_KINDS))
            verb = "set kind to" if typ == "union_tag_invalid" else "add kind ="
            hint = f"fix: {verb} one of {kinds}"
        elif typ in ("model_type", "model_attributes_type", "dict_type"):
            hint = (
                _TABLE_HINT
                if loc and loc[-1] == "latent"
                else "fix: give a table of keys (a [section] in TOML)"
            )
        elif typ == "extra_forbidden":
            msg = "unknown key"
            allowed = _allowed_keys(model, tuple(e["loc"]))
            hint = "fix: remove it or correct its spelling" + (
                f" (allowed here: {', '.join(allowed)})" if allowed else ""
            )
        elif typ in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
            op = {"greater_than_equal": "≥", "greater_than": ">", "less_than_equal": "≤"}.get(
                typ, "<"
            )
            bound = next(ctx[k] for k in ("ge", "gt", "le", "lt") if k in ctx)
            hint = f"fix: use a value {op} {bound}"
        elif typ == "literal_error":
            hint = f"fix: use one of {ctx.get('expected')}"
        elif "fix:" in msg:
            hint = ""
        got = "" if typ in ("missing", "value_error") else f" (got {e.get('input')!r})"
        if typ == "extra_forbidden":
            got = ""
        lines.append(f"{where}: {msg}{got}" + (f"; {hint}" if hint else ""))
    return "\n".join(lines)


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file; missing files and syntax errors become :class:`ConfigError`."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(
            f"config file {str(path)!r} does not exist; fix: check the path"
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"config {str(path)!r} is a folder; fix: give a TOML file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e}); fix: correct the syntax") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file; fix: give a TOML file") from None


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b.c=VALUE`` → (["a", "b", "c"], value); VALUE is a TOML value or else a bare string."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} has no '='; fix: write it as key.path=value")
    key, raw = item.split("=", 1)
    path = [p.strip() for p in key.strip().split(".")]
    if not all(path):
        raise ConfigError(f"override {item!r} has an empty key; fix: write it as key.path=value")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return path, value


def merge(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Recursively lay ``new`` over ``base``. A table whose ``kind`` changes is replaced whole
    (a spike law does not inherit the atoms of a default discrete law)."""
    out = dict(base)
    for k, v in new.items():
        old = out.get(k)
        if (
            isinstance(v, dict)
            and isinstance(old, dict)
            and v.get("kind", old.get("kind")) == old.get("kind")
        ):
            out[k] = merge(old, v)
        else:
            out[k] = v
    return out


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Set dotted keys in a nested dict (new nested tables are created as needed).

    A table value (``task.latent={kind="spike", a=[1.0]}``) replaces that table whole; setting
    a ``kind`` to a new value empties its table; any other value is set in place.
    """
    for item in overrides:
        path, value = parse_override(item)
        data = set_key(data, path, value, what=f"override {item!r}")
    return data


def set_key(data: dict[str, Any], path: list[str], value: Any, what: str = "key") -> dict[str, Any]:
    """Set one dotted key (as a list of parts) to a parsed value, with the rules of
    :func:`apply_overrides`; returns the updated dict (``data`` may be modified)."""
    node = data
    for i, p in enumerate(path[:-1]):
        node = node.get(p, {})
        if not isinstance(node, dict):
            where = ".".join(path[: i + 1])
            raise ConfigError(f"{what}: {where} is a value, not a table; fix: check the key path")
    if isinstance(value, dict):  # a table given whole replaces the table
        node = data
        for p in path[:-1]:
            node = node.setdefault(p, {})
        node[path[-1]] = value
        return data
    if path[-1] == "kind":
        return _set_kind(data, path, value)
    patch: Any = value
    for p in reversed(path):
        patch = {p: patch}
    return merge(data, patch)


def _set_kind(data, path, value):
    """Setting ``…kind`` to a new value starts that table afresh (other keys no longer apply)."""
    node = data
    for p in path[:-2]:
        node = node.setdefault(p, {})
    table = node.get(path[-2])
    if not isinstance(table, dict) or table.get("kind") != value:
        node[path[-2]] = {"kind": value}
    return data


def load_config(
    model: type[T],
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    base: dict[str, Any] | None = None,
) -> T:
    """Build a validated config: defaults, then ``base`` (a dict), the TOML file, the overrides."""
    data = model.model_construct().model_dump() if _has_defaults(model) else {}
    if base is not None:
        data = merge(data, base)
    if path is not None:
        data = merge(data, read_toml(path))
    data = apply_overrides(data, list(overrides or []))
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, model)) from None


def _has_defaults(model) -> bool:
    return all(not f.is_required() for f in model.model_fields.values())


# ----------------------------------------------------------------------------- simulate
class ModelConfig(StrictModel):
    """The multi-head attention of SPEC §3 and its initialisation (§4)."""

    H: PositiveInt = Field(4, description="number of heads")
    activation: Literal["softmax", "softmax1", "bayes_softmax"] = "softmax"
    aggregation: Literal["mean", "sum"] | None = Field(
        None, description="head aggregation; default mean for softmax, sum otherwise"
    )
    sigma0: float = Field(0.1, ge=0, description="initial keys k_h ~ N(0, sigma0² I_D)")
    b0: float | None = Field(
        None, description="initial biases; default 0, and −log(L(H−1)) for softmax1 (SPEC §4)"
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
    engine: Literal["full", "reduced"] = Field(
        "full",
        description="'full' (D-dimensional keys and tokens) or 'reduced' (exact, coordinates "
        "in span(K*, K): per-step cost independent of D; needs D − F − H ≥ batch·L)",
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


def _check_grid(record: RecordConfig, train: TrainConfig) -> None:
    """The log grid's first time must lie below the horizon."""
    if record.grid == "log" and record.t_min >= train.T:
        raise ValueError(
            f"record.t_min = {record.t_min} is not below train.T = {train.T}; "
            f"fix: lower record.t_min or raise train.T"
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

    @model_validator(mode="after")
    def _check(self):
        F, H, L, D, B = self.task.latent.F, self.model.H, self.task.L, self.task.D, self.train.batch
        if self.train.engine == "reduced" and D - F - H < B * L:
            raise ValueError(
                f'train.engine = "reduced" needs task.D − F − model.H ≥ train.batch·task.L, got '
                f'{D} − {F} − {H} < {B * L}; fix: use train.engine = "full" or a larger task.D'
            )
        _check_grid(self.record, self.train)
        return self


# ----------------------------------------------------------------------------- theory
class PerturbedInit(StrictModel):
    """The exact law of the finite-D initial overlaps: k_h ~ N(0, σ0² I_D) at D = task.D.

    M_hf ~ N(0, σ0²/D) and Q = MMᵀ + σ0² W/D with W ~ Wishart(D − F, I_H): a symmetric state plus a
    seeded perturbation of size σ0/√D (one per seed).
    """

    kind: Literal["perturbed"] = "perturbed"


class SymmetricInit(StrictModel):
    """M = 0, Q = σ0² I, b = b0: the D → ∞ initial state; identical heads never specialise.

    The drift's base samples are then closed under cyclic shifts of the heads (cost × H), so the
    estimated drift keeps the heads exactly identical.
    """

    kind: Literal["symmetric"] = "symmetric"


class GivenInit(StrictModel):
    """A user-given state (M, Q, b); Q and the joint covariance [[Q, M], [Mᵀ, I]] must be PSD."""

    kind: Literal["given"] = "given"
    M: Annotated[list[Vector], Field(min_length=1)] = Field(description="H rows of F numbers")
    Q: Annotated[list[Vector], Field(min_length=1)] = Field(description="H×H, symmetric")
    b: Vector | None = Field(None, description="H biases (default: model.b0 rule)")


class SimulationInit(StrictModel):
    """The exact initial (M, Q, b) of the seeds of a simulation result file."""

    kind: Literal["simulation"] = "simulation"
    path: str = Field(description="a result file written by `headspec simulate`")
    seeds: list[Annotated[int, Strict()]] | None = Field(
        None, description="seed ids to start from (default: all seeds of the file)"
    )


Init = Annotated[
    PerturbedInit | SymmetricInit | GivenInit | SimulationInit, Field(discriminator="kind")
]


class TheoryOptions(StrictModel):
    """How the ODE's expectations are estimated and integrated."""

    n: Annotated[int, Strict(), Field(ge=2)] = Field(
        8192, description="base samples of the drift's expectations (common random numbers)"
    )
    sampler: Literal["mc", "sobol"] = Field(
        "sobol", description="plain Monte Carlo or scrambled Sobol quasi-Monte Carlo"
    )
    sample_seed: Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)] = 0
    rtol: float = Field(1e-5, gt=0, description="relative tolerance of the adaptive solver")
    atol: float = Field(1e-7, gt=0, description="absolute tolerance of the adaptive solver")
    max_steps: Annotated[int, Strict(), Field(ge=1)] = Field(
        100_000, description="solver steps allowed between two grid points"
    )
    init: Init = Field(default_factory=PerturbedInit)


class TheoryConfig(_RunConfig):
    """Everything `headspec theory` needs (task, model, train, record as for `simulate`)."""

    theory: TheoryOptions = Field(default_factory=TheoryOptions)
    seeds: PositiveInt = Field(1, description="perturbed initial states: seeds seed, seed+1, …")

    @model_validator(mode="after")
    def _check(self):
        _check_grid(self.record, self.train)
        init = self.theory.init
        if init.kind == "given":
            H, F = self.model.H, self.task.latent.F
            if len(init.M) != H or any(len(r) != F for r in init.M):
                raise ValueError(
                    f"theory.init.M must be {H}×{F} (model.H × latent F); fix: give H rows of "
                    f"F numbers"
                )
            if len(init.Q) != H or any(len(r) != H for r in init.Q):
                raise ValueError(f"theory.init.Q must be {H}×{H}; fix: give an H×H matrix")
            if init.b is not None and len(init.b) != H:
                raise ValueError(f"theory.init.b must have H = {H} entries; fix: give {H} biases")
            M, Q = np.asarray(init.M), np.asarray(init.Q)
            tol = 1e-9 * max(1.0, float(np.abs(Q).max()))
            if not np.allclose(Q, Q.T, atol=tol, rtol=0):
                raise ValueError("theory.init.Q is not symmetric; fix: make Q[i][j] = Q[j][i]")
            w = float(np.linalg.eigvalsh(Q - M @ M.T).min())
            if w < -tol:
                raise ValueError(
                    f"theory.init: Q − MMᵀ is not positive semi-definite (smallest eigenvalue "
                    f"{w:.3g}), so no keys have these overlaps; fix: give Q ⪰ MMᵀ (|k_h|² ≥ "
                    f"|M_h|²)"
                )
        return self
