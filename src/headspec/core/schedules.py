"""Learning-rate schedules η(t)/η (SPEC §4), shared by the SGD engines and the ODE.

A schedule is a small frozen (hashable) strategy object: it is a static argument of the jitted
loops, so two runs with equal schedules share one compilation. Any hashable pure function of t
works in its place.

Example:
    >>> import jax.numpy as jnp
    >>> float(InverseTime(t0=10.0)(jnp.asarray(10.0)))
    0.5
"""

from __future__ import annotations

import abc
import dataclasses

import jax.numpy as jnp


class Schedule(abc.ABC):
    """η(t)/η as a pure function of the training time t."""

    @abc.abstractmethod
    def __call__(self, t): ...


@dataclasses.dataclass(frozen=True)
class Constant(Schedule):
    """η(t)/η = 1."""

    def __call__(self, t):
        return jnp.ones_like(t)


@dataclasses.dataclass(frozen=True)
class InverseTime(Schedule):
    """η(t)/η = (1 + t/t0)^(−power)."""

    t0: float = 10.0
    power: float = 1.0

    def __call__(self, t):
        return (1.0 + t / self.t0) ** (-self.power)
