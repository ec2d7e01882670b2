"""Validated configurations (pydantic), TOML loading and command-line overrides.

Every config refuses unknown keys, non-finite numbers and out-of-range values with a message that
names the field and the fix (:func:`format_validation_error`). Configs load from TOML files
(:func:`load_config`) and accept dotted overrides such as ``task.L=20`` or
``task.latent={kind="spike", a=[3.0]}`` (values are parsed as TOML values — never evaluated).

Example:
    >>> cfg = load_config(SimulateConfig, overrides=["task.D=200", "model.activation='softmax1'"])
    >>> cfg.task.D, cfg.model.activation, cfg.train.engine
    (200, 'softmax1', 'full')
"""

from headspec.conventions.config.base import (
    INIT_KINDS,
    LATENT_KINDS,
    SCHEDULE_KINDS,
    ConfigError,
    PositiveInt,
    StrictModel,
    Vector,
)
from headspec.conventions.config.latent import (
    DiscreteConfig,
    FlippedSpikeConfig,
    GaussianConfig,
    LatentConfig,
    SpikeConfig,
)
from headspec.conventions.config.overrides import (
    apply_overrides,
    format_validation_error,
    load_config,
    merge,
    parse_override,
    parse_value,
    read_toml,
    set_key,
    takes_text,
)
from headspec.conventions.config.schema import (
    BayesOptions,
    BayesRunConfig,
    ConstantSchedule,
    InverseTimeSchedule,
    ModelConfig,
    RecordConfig,
    Schedule,
    SimulateConfig,
    TaskConfig,
    TheoryConfig,
    TheoryOptions,
    TrainConfig,
)
from headspec.conventions.config.splitmap import MapOptions, SplitMapConfig
from headspec.conventions.config.starts import (
    GivenInit,
    GivenStart,
    Init,
    PerturbedInit,
    RandomStart,
    SimulationInit,
    SymmetricInit,
)

__all__ = [
    "INIT_KINDS",
    "LATENT_KINDS",
    "SCHEDULE_KINDS",
    "BayesOptions",
    "BayesRunConfig",
    "ConfigError",
    "ConstantSchedule",
    "DiscreteConfig",
    "FlippedSpikeConfig",
    "GaussianConfig",
    "GivenInit",
    "GivenStart",
    "Init",
    "InverseTimeSchedule",
    "LatentConfig",
    "MapOptions",
    "ModelConfig",
    "PerturbedInit",
    "PositiveInt",
    "RandomStart",
    "RecordConfig",
    "Schedule",
    "SimulateConfig",
    "SimulationInit",
    "SpikeConfig",
    "SplitMapConfig",
    "StrictModel",
    "SymmetricInit",
    "TaskConfig",
    "TheoryConfig",
    "TheoryOptions",
    "TrainConfig",
    "Vector",
    "apply_overrides",
    "format_validation_error",
    "load_config",
    "merge",
    "parse_override",
    "parse_value",
    "read_toml",
    "set_key",
    "takes_text",
]
