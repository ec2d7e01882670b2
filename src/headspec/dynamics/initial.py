"""Initial states of the ODE (SPEC §5), as small strategy objects.

Each strategy returns a batch of :class:`~headspec.dynamics.ode.OrderParameters` (leading seed
axis) and the seed ids it stands for; ``symmetric`` says whether the state is invariant under
permuting the heads (then the drift's base samples are made head-cyclic, so the estimated drift
keeps identical heads identical).

Example:
    >>> import numpy as np
    >>> init = Perturbed(D=100, sigma0=0.1, b0=0.0)
    >>> y, ids = init.states(H=2, F=1, seed_ids=np.arange(3))
    >>> y.Q.shape, ids.tolist()
    ((3, 2, 2), [0, 1, 2])
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.linalg import bartlett
from headspec.core.precision import float64
from headspec.dynamics.ode import OrderParameters

Array = jax.Array


class InitialState(abc.ABC):
    """How the ODE starts: ``states(H, F, seed_ids) -> (OrderParameters batch, seed ids)``."""

    symmetric: ClassVar[bool] = False

    @abc.abstractmethod
    @float64
    def states(self, H: int, F: int, seed_ids: np.ndarray) -> tuple[OrderParameters, np.ndarray]:
        """The initial states, leading axis one per returned seed id."""


@float64
def perturbed_state(key: Array, H: int, F: int, D: int, sigma0: float, b0: float):
    """The exact law of (M, Q) for keys k_h ~ N(0, σ0² I_D) at dimension D (see Perturbed)."""
    if D - F < H:
        raise ValueError(
            f"the perturbed initial state needs D − F ≥ H, got D={D}, F={F}, H={H}; fix: raise "
            f"task.D to at least {F + H}"
        )
    k1, k2 = jax.random.split(key)
    M = sigma0 / jnp.sqrt(D) * jax.random.normal(k1, (H, F))  # (H, F)
    T = bartlett(k2, D - F, H)  # (H, H): T Tᵀ ~ Wishart(D − F, I_H)
    Q = M @ M.T + sigma0**2 * (T @ T.T) / D  # (H, H)
    return OrderParameters(M, Q, jnp.full((H,), b0, jnp.float64))


@dataclasses.dataclass(frozen=True)
class Perturbed(InitialState):
    """The exact law of the finite-D initial overlaps of k_h ~ N(0, σ0² I_D): M_hf ~ N(0, σ0²/D),
    Q = MMᵀ + σ0² W/D with W ~ Wishart(D − F, I_H); one state per seed (key fold_in(seed, "in"))."""

    D: int
    sigma0: float
    b0: float

    @float64
    def states(self, H, F, seed_ids):
        ids = np.asarray(seed_ids)
        keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(s), 0x696E))(ids)  # "in"
        y = jax.vmap(lambda k: perturbed_state(k, H, F, self.D, self.sigma0, self.b0))(keys)
        return y, ids


@dataclasses.dataclass(frozen=True)
class Symmetric(InitialState):
    """M = 0, Q = σ0² I, b = b0: the D → ∞ initial state; identical heads never specialise."""

    sigma0: float
    b0: float
    symmetric: ClassVar[bool] = True

    @float64
    def states(self, H, F, seed_ids):
        st = OrderParameters(
            jnp.zeros((H, F)), self.sigma0**2 * jnp.eye(H), jnp.full((H,), self.b0, jnp.float64)
        )
        return jax.tree.map(lambda x: x[None], st), np.asarray(seed_ids)[:1]


@dataclasses.dataclass(frozen=True, eq=False)
class Given(InitialState):
    """Given states: M (S, H, F), Q (S, H, H), b (S, H) with their seed ids (S,) (a user's
    state, or a simulation's exact initial overlaps)."""

    M: np.ndarray
    Q: np.ndarray
    b: np.ndarray
    ids: np.ndarray

    @float64
    def states(self, H, F, seed_ids):
        y = OrderParameters(*(jnp.asarray(x, jnp.float64) for x in (self.M, self.Q, self.b)))
        if y.M.shape[1:] != (H, F):
            raise ValueError(f"given states have shape {y.M.shape[1:]}, expected (H, F) = {H, F}")
        return y, np.asarray(self.ids)
