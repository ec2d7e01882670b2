"""The model of SPEC §2–§4 as one object: which attention activation, which latent law, how many
tokens. Everything the D → ∞ description computes from a state (M, Q, b) — the exact risk, the
η² term's shadows, the drift — depends on these three and on nothing else of the task, so core
and dynamics take a :class:`Model` whole instead of the three loose (the learning rates, the
method and the state are the problem's and the run's, not the model's).

Example:
    >>> import jax.numpy as jnp
    >>> from headspec.core.attention import Softmax
    >>> from headspec.core.latent import Spike
    >>> from headspec.core.exact import exact_risk
    >>> model = Model(Softmax(), Spike([2.0]), L=10)
    >>> model.L, type(model.activation).__name__
    (10, 'Softmax')
    >>> r = exact_risk(jnp.array([[2.0]]), jnp.array([[4.0]]), jnp.zeros(1), model)
    >>> round(float(r.mean), 4)      # one softmax head k = K*a on the spike: Bayes-optimal
    0.2234
"""

from __future__ import annotations

import equinox as eqx

from headspec.core.attention import Activation
from headspec.core.latent import LatentLaw


class Model(eqx.Module):
    """The activation, the latent law and the sequence length L (static: shapes depend on it).

    An ``eqx.Module``: the law's atoms and probabilities are traced leaves, so one compiled
    program serves every law of the same family and shapes; L and the activation's kind are
    part of the program."""

    activation: Activation
    law: LatentLaw
    L: int = eqx.field(static=True)

    def __init__(self, activation: Activation, law: LatentLaw, L: int):
        if not isinstance(activation, Activation):
            raise TypeError(f"activation: an Activation, got {type(activation).__name__}")
        if not isinstance(law, LatentLaw):
            raise TypeError(f"law: a LatentLaw, got {type(law).__name__}")
        self.activation, self.law, self.L = activation, law, int(L)
