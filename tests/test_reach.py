"""The exact drift never answers outside its reach (issue 52, SPEC §5: "it never returns an
unbounded value silently").

The quadrature's score grids have a spacing 2·window·√Q_hh/(n_s − 1); above 0.5 its error grows
fast (``core.quadrature.reach``: Q_hh ≤ 32.2 for the default nodes). At Q_hh = 128 the old
default gave ∂R/∂Q₁₁ = 0.00334 where finer grids agree on 0.00037, and the ODE moved Q_hh by
−0.28 where qmc moved it by −0.08. Beyond the reach ``Exact`` now takes the sampled route on its
own base samples (with standard errors), and a theory result records where that happened.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from headspec.core.attention import Softmax
from headspec.core.exact import Quadrature
from headspec.core.latent import Discrete
from headspec.core.model import Model
from headspec.core.observables import BaseSamples
from headspec.core.quadrature import reach
from headspec.dynamics.problem import DriftProblem, Exact, OrderParameters, Sampled

LAW = Discrete(atoms=[[3.0, 0.0], [0.0, 3.0]], probs=[0.7, 0.3])
FAR = OrderParameters(  # the reproducer: specialised heads with large keys
    M=jnp.array([[6.8, 0.0], [0.0, 6.8]]),
    Q=jnp.array([[128.0, 12.8], [12.8, 128.0]]),
    b=jnp.zeros(2),
)
NEAR = OrderParameters(M=jnp.array([[0.6, 0.1], [0.2, 0.5]]),
                       Q=jnp.array([[1.0, 0.1], [0.1, 0.9]]), b=jnp.zeros(2))  # fmt: skip


def test_reach_follows_the_grid_spacing():
    assert reach(Quadrature()) == pytest.approx(32.246, abs=1e-3)
    assert reach(Quadrature(n_s=224)) == pytest.approx(63.43, abs=1e-2)
    method = Exact(BaseSamples.sobol(0, LAW, 10, 2, 64))
    assert bool(method.in_reach(NEAR)) and not bool(method.in_reach(FAR))


def test_beyond_its_reach_the_exact_drift_is_the_sampled_one_and_right():
    """At FAR the default method gives the sampled drift on its base samples (same numbers, with
    standard errors), and that drift agrees with an independent 2¹⁶-point qmc reference within
    their combined standard errors (4 s.e.): the old quadrature's dQ₁₁ was off by ~3×."""
    base = BaseSamples.sobol(0, LAW, 10, 2, 1024)
    exact = DriftProblem(Model(Softmax(), LAW, L=10), lr=1.0, method=Exact(base)).drift(FAR)
    sampled = DriftProblem(Model(Softmax(), LAW, L=10), lr=1.0, method=Sampled(base)).drift(FAR)
    np.testing.assert_allclose(exact.dQ, sampled.dQ, rtol=1e-12, atol=1e-14)
    assert float(jnp.max(exact.dQ_se)) > 0  # says it is sampled
    ref_base = BaseSamples.sobol(7, LAW, 10, 2, 2**16)
    ref = DriftProblem(Model(Softmax(), LAW, L=10), lr=1.0, method=Sampled(ref_base)).drift(FAR)
    se = np.hypot(np.asarray(exact.dQ_se), np.asarray(ref.dQ_se))
    assert np.all(np.abs(np.asarray(exact.dQ) - np.asarray(ref.dQ)) <= 4 * se + 1e-12)


def test_within_its_reach_the_exact_drift_is_exact():
    base = BaseSamples.sobol(0, LAW, 10, 2, 1024)
    d = DriftProblem(Model(Softmax(), LAW, L=10), lr=1.0, method=Exact(base), eta2=False).drift(
        NEAR
    )
    assert float(jnp.max(d.dQ_se)) == 0.0 and float(jnp.max(d.dM_se)) == 0.0
