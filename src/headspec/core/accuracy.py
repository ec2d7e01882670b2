"""How accurate the exact quadrature is: the error bound of every deterministic value and the
reach of the default rules.

- :func:`error_bound`: a value's bound from the same value on
  :meth:`~headspec.core.quadrature.Quadrature.refined` (SAFETY × the difference + a round-off
  floor): the trapezoid rules converge exponentially, so the refined rule's error is far below
  the rule's wherever it converges;
- :func:`reach`: the largest Q_hh at which a rule's grids keep R and ∇R within ≈ 5e-7, per
  activation (beyond it the drift is sampled: :meth:`headspec.dynamics.problem.Exact.in_reach`).

Example:
    >>> from headspec.core.quadrature import Quadrature
    >>> round(reach(Quadrature()), 1)        # softmax's score grids at the default nodes
    25.0
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from headspec.core.attention import BayesSoftmax, Softmax1
from headspec.core.quadrature import X_CUT, Quadrature

#: the error bound is SAFETY × |value − refined value| + FLOOR·max(1, |value|): on random states
#: (tests/test_certified.py) the true error (against a rule with 3× the nodes) was 0.98–1.00 ×
#: the difference wherever it exceeded round-off, the rules converging exponentially
SAFETY = 2.0
FLOOR = 1e-12


def error_bound(value, refined):
    """The error bound of a quadrature ``value`` from the same quantity by
    :meth:`Quadrature.refined` (any matching pytrees of arrays): SAFETY·|Δ| + round-off floor.

    >>> round(float(error_bound(jnp.array(0.5), jnp.array(0.5 + 1e-3))), 6)
    0.002
    """
    return jax.tree.map(
        lambda v, r: SAFETY * jnp.abs(v - r) + FLOOR * jnp.maximum(1.0, jnp.abs(v)), value, refined
    )


#: the largest grid spacings (score units) at which the default rules kept R and ∇R within
#: ≈ 5e-7 of a rule with 3× the nodes, median ≲ 1e-8 (measured 2026-12-06 on random states:
#: H = 2, 3; three atoms, two atoms and a spike; M and b random, Q_hh from 6 to 32; 6–8 states
#: per point): the score grids (n_s; softmax: worst 1.5e-7 at Q_hh = 24, 1.5e-6 at 32, where
#: the w- and s-grids alias), the log-u grid of softmax-1 (n_w_one, whose e^{−u} factor needs a
#: w-spacing ≲ 0.77: worst 4e-7 at Q_hh = 17–20 for 64 nodes; 48 nodes gave 2e-7 already at
#: Q_hh = 6) and the head grids of Bayes-softmax (n_bayes: worst 9.5e-8 at Q_hh = 16, 1e-6 at 20)
SPACING = 0.44
W_SPACING = 0.77
BAYES_SPACING = 0.89


def reach(quad: Quadrature, activation=None) -> float:
    """The largest Q_hh at which ``quad``'s grids keep R and ∇R within ≈ 5e-7 for
    ``activation`` (an :class:`~headspec.core.attention.Activation`; None: the score grids only).

    - every activation: score-grid spacing 2·window·√Q_hh/(n_s − 1) ≤ :data:`SPACING`;
    - softmax-1: the w-grid, whose span grows like window·√Q_hh + tail + X_CUT, at spacing
      ≤ :data:`W_SPACING` over ``n_w_one`` nodes;
    - Bayes-softmax (H ≥ 2): head-grid spacing 2·window·√Q_hh/(n_bayes − 1) ≤ :data:`BAYES_SPACING`.

    Softmax 25.0, softmax-1 19.9, Bayes-softmax 16.0 at the default nodes:

    >>> round(reach(Quadrature()), 1), round(reach(Quadrature(), Softmax1()), 1)
    (25.0, 19.9)
    >>> round(reach(Quadrature(), BayesSoftmax()), 1)
    16.0
    """
    out = (SPACING * (quad.n_s - 1) / (2 * quad.window)) ** 2
    if isinstance(activation, Softmax1):
        sd = (W_SPACING * (quad.n_w_one - 1) - quad.tail - X_CUT) / quad.window
        out = min(out, max(sd, 0.0) ** 2)
    if isinstance(activation, BayesSoftmax):
        out = min(out, (BAYES_SPACING * (quad.n_bayes - 1) / (2 * quad.window)) ** 2)
    return out
