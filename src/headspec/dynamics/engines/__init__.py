"""Engines behind one abstract :class:`~headspec.dynamics.engines.base.Engine`: the full
D-dimensional SGD engine, the exact reduced SGD engine (cost per step independent of D) and the
diffusion engine (the order parameters' SDE: cost per unit t independent of D)."""

from headspec.core.names import ENGINE_NAMES, check_registry
from headspec.dynamics.engines.base import Engine, SGDEngine, SGDState, run
from headspec.dynamics.engines.diffusion import DiffusionEngine, DiffusionState
from headspec.dynamics.engines.full import FullEngine, seed_keys
from headspec.dynamics.engines.reduced import ReducedEngine

ENGINES: dict[str, type[Engine]] = {
    cls.name: cls for cls in (FullEngine, ReducedEngine, DiffusionEngine)
}
check_registry(ENGINE_NAMES, ENGINES, "engines")  # the configs' names, JAX-free

__all__ = [
    "ENGINES",
    "DiffusionEngine",
    "DiffusionState",
    "Engine",
    "FullEngine",
    "ReducedEngine",
    "SGDEngine",
    "SGDState",
    "run",
    "seed_keys",
]
