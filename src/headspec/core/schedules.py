"""Learning-rate schedules η(t)/η (SPEC §4), shared by the SGD engines and the ODE.

A schedule is a small strategy object (an ``equinox.Module``): its parameters are arrays, traced
in the jitted loops, so runs with other schedule parameters (another t0, another power) reuse the
same compiled program; only the kind of schedule is part of the program. Any hashable pure
function of t also works in its place (it is then a static argument: one program per function).

Example:
    >>> import jax.numpy as jnp
    >>> float(InverseTime(t0=10.0)(jnp.asarray(10.0)))
    0.5
    >>> import jax, equinox as eqx
    >>> [x.dtype.name for x in jax.tree.leaves(InverseTime(t0=10.0))]    # traced parameters
    ['float64', 'float64']
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp

from headspec.core.precision import float64_context


def _param(x) -> jax.Array:
    """A schedule parameter as a float64 array (a traced leaf, not a static value)."""
    with float64_context():
        return jnp.asarray(x, jnp.float64)


class Schedule(eqx.Module):
    """η(t)/η as a pure function of the training time t."""

    @abc.abstractmethod
    def __call__(self, t): ...


class Constant(Schedule):
    """η(t)/η = 1."""

    def __call__(self, t):
        return jnp.ones_like(t)


class InverseTime(Schedule):
    """η(t)/η = (1 + t/t0)^(−power)."""

    t0: jax.Array = eqx.field(converter=_param, default=10.0)
    power: jax.Array = eqx.field(converter=_param, default=1.0)

    def __call__(self, t):
        t0, power = self.t0.astype(t.dtype), self.power.astype(t.dtype)
        return (1.0 + t / t0) ** (-power)
