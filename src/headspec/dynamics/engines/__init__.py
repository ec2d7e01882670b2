"""SGD engines behind one abstract :class:`~headspec.dynamics.engines.base.Engine`: the full
D-dimensional engine and the exact reduced engine (cost per step independent of D)."""

from headspec.dynamics.engines.base import Engine, SGDState, run
from headspec.dynamics.engines.full import FullEngine, seed_keys
from headspec.dynamics.engines.reduced import ReducedEngine

ENGINES: dict[str, type[Engine]] = {cls.name: cls for cls in (FullEngine, ReducedEngine)}

__all__ = ["ENGINES", "Engine", "FullEngine", "ReducedEngine", "SGDState", "run", "seed_keys"]
