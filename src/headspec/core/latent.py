"""Latent laws P_θ of SPEC §2, with the likelihood ratio Λ(ν) of SPEC §6.

Four families on one abstract base :class:`LatentLaw`:

- :class:`Spike`         θ = a (a fixed vector);
- :class:`FlippedSpike`  θ = s·a, s = ±1 with probability ½;
- :class:`Discrete`      θ = a_j with probability p_j;
- :class:`Gaussian`      θ ~ N(μ, Σ), Σ symmetric positive semi-definite.

Every law is an ``equinox.Module`` (a pytree), so it can be passed straight into jitted code.
A global signal strength c is applied with :meth:`LatentLaw.scaled` (θ → cθ). Expectations over θ
go through the law itself (:meth:`LatentLaw.expect`, :meth:`LatentLaw.expect_by_atom`,
:meth:`LatentLaw.quadrature`): exact over the atoms of a discrete law, over sampled θ otherwise —
the one place that knows the difference.

Example:
    >>> import jax, jax.numpy as jnp
    >>> law = Discrete(atoms=[[1.0, 0.0], [0.0, 1.0]], probs=[0.3, 0.7]).scaled(2.0)
    >>> law.sample(jax.random.key(0), (5,)).shape
    (5, 2)
    >>> bool(jnp.allclose(law.mean(), jnp.array([0.6, 1.4])))
    True
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from headspec.core.linalg import eigvalsh, psd_root, solve
from headspec.core.precision import float64

Array = jax.Array


class LatentLaw(eqx.Module):
    """Abstract law of the latent vector θ in R^F."""

    @property
    @abc.abstractmethod
    def F(self) -> int:
        """Number of latent features (dimension of θ)."""

    @abc.abstractmethod
    def sample(self, key: Array, shape: tuple[int, ...] = ()) -> Array:
        """Draw θ with shape ``shape + (F,)``."""

    @abc.abstractmethod
    def mean(self) -> Array:
        """E θ, shape (F,)."""

    @abc.abstractmethod
    def cov(self) -> Array:
        """Cov θ, shape (F, F)."""

    @abc.abstractmethod
    def log_lambda(self, nu: Array) -> Array:
        """log Λ(ν) = log E_θ exp(θ·ν − |θ|²/2) for ν of shape (..., F); returns shape (...)."""

    @abc.abstractmethod
    def scaled(self, c: float) -> LatentLaw:
        """The law of cθ (signal strength c)."""

    @float64
    def second_moment(self) -> Array:
        """E θθᵀ, shape (F, F)."""
        m = self.mean()
        return self.cov() + jnp.outer(m, m)

    # -- expectations over θ (continuous laws: over the sampled θ of the base samples) --------
    @property
    def n_atoms(self) -> int:
        """J for a discrete law, 0 for a continuous one (the size of by-atom results)."""
        return 0

    def expect(self, fn, theta: Array):
        """E_θ of ``fn(θ per sample)`` (a pytree of arrays with a leading sample axis kept):
        here ``fn`` of the sampled θ (n, F); discrete laws average exactly over their atoms."""
        return fn(theta)

    def expect_by_atom(self, fn, theta: Array) -> tuple[Array, Array]:
        """(E_θ fn, fn per atom (J, …)): per-sample values of ``fn`` averaged over the law, and
        split by atom (shape (0,) for a continuous law)."""
        out = fn(theta)
        return out, jnp.zeros((0,), out.dtype)

    def quadrature(self, theta: Array) -> tuple[Array, Array]:
        """Points (A, n, F) and weights (A,) of the expectation over θ: the sampled θ with
        weight 1 (A = 1), or every atom on every sample with its probability (A = J)."""
        return theta[None], jnp.ones(1)

    def atom_index(self, theta: Array) -> Array:
        """Index of the atom each θ (n, F) is, (n,); 0 for a continuous law."""
        return jnp.zeros(theta.shape[:-1], jnp.int32)

    def atoms_or_none(self):
        """The atoms (J, F) of a discrete law, None otherwise (for result files)."""
        return None

    def theta_from_normals(self, z):
        """θ (N, F) from standard normals z (N, F) (NumPy): how quasi-Monte-Carlo points become
        draws of the law. Discrete laws never sample θ (their atoms are exact) and return 0."""
        raise NotImplementedError(f"{type(self).__name__} has no normal parametrisation")


class Discrete(LatentLaw):
    """θ = a_j with probability p_j (j = 1..J); uniform probabilities when ``probs`` is None."""

    atoms: Array  # (J, F)
    probs: Array  # (J,)

    @float64
    def __init__(self, atoms, probs=None):
        atoms = jnp.asarray(atoms, dtype=jnp.float64)
        if atoms.ndim != 2:
            raise ValueError(f"atoms must have shape (J, F), got {atoms.shape}")
        J = atoms.shape[0]
        probs = (
            jnp.full((J,), 1.0 / J, dtype=jnp.float64)
            if probs is None
            else jnp.asarray(probs, dtype=jnp.float64)
        )
        if probs.shape != (J,):
            raise ValueError(f"probs must have shape ({J},), got {probs.shape}")
        self.atoms = atoms
        self.probs = probs

    @property
    def F(self) -> int:
        return self.atoms.shape[1]

    @property
    def J(self) -> int:
        """Number of atoms."""
        return self.atoms.shape[0]

    @float64
    def sample(self, key, shape=()):
        idx = self.sample_index(key, shape)  # shape
        return self.atoms[idx]  # (*shape, F)

    @float64
    def sample_index(self, key, shape=()):
        """Index j of the atom, shape ``shape``."""
        return jax.random.choice(key, self.J, shape=shape, p=self.probs)

    @float64
    def mean(self):
        return self.probs @ self.atoms  # (F,)

    @float64
    def cov(self):
        m = self.mean()  # (F,)
        return (self.atoms * self.probs[:, None]).T @ self.atoms - jnp.outer(m, m)  # (F, F)

    @float64
    def log_weights(self, nu):
        """log p_j + a_j·ν − |a_j|²/2 for every atom: shape (..., J)."""
        half_sq = 0.5 * jnp.sum(self.atoms**2, axis=-1)  # (J,)
        return jnp.log(self.probs) + nu @ self.atoms.T - half_sq  # (..., J)

    @float64
    def log_lambda(self, nu):
        return logsumexp(self.log_weights(nu), axis=-1)  # (...)

    @float64
    def scaled(self, c):
        return Discrete(self.atoms * c, self.probs)

    @property
    def n_atoms(self) -> int:
        return self.J

    def _on_atoms(self, fn, n: int):
        th = jnp.broadcast_to(self.atoms[:, None, :], (self.J, n, self.F))  # (J, n, F)
        return jax.vmap(fn)(th)  # each (J, …)

    def expect(self, fn, theta):
        per = self._on_atoms(fn, theta.shape[0])
        p = self.probs.astype(theta.dtype)
        return jax.tree.map(lambda x: jnp.tensordot(p, x, axes=1), per)

    def expect_by_atom(self, fn, theta):
        per = self._on_atoms(fn, theta.shape[0])  # (J, n, …)
        return self.probs.astype(per.dtype) @ per, per.mean(axis=1)

    def quadrature(self, theta):
        n = theta.shape[0]
        return jnp.broadcast_to(self.atoms[:, None, :], (self.J, n, self.F)), self.probs

    def atom_index(self, theta):
        d = jnp.sum((theta[:, None, :] - self.atoms[None].astype(theta.dtype)) ** 2, -1)
        return jnp.argmin(d, axis=1)  # (n,)

    def atoms_or_none(self):
        return np.asarray(self.atoms)

    def theta_from_normals(self, z):
        return np.zeros((np.shape(z)[0], self.F))


class Spike(Discrete):
    """θ = a, a fixed vector (one atom). One softmax head with k = K* a is Bayes-optimal."""

    @float64
    def __init__(self, a):
        a = jnp.atleast_1d(jnp.asarray(a, dtype=jnp.float64))
        super().__init__(a[None, :], jnp.ones((1,), dtype=jnp.float64))

    @float64
    def scaled(self, c):
        return Spike(self.atoms[0] * c)


class FlippedSpike(Discrete):
    """θ = s·a with s = ±1 equally likely: two signals in opposite directions."""

    @float64
    def __init__(self, a):
        a = jnp.atleast_1d(jnp.asarray(a, dtype=jnp.float64))
        super().__init__(jnp.stack([a, -a]), jnp.full((2,), 0.5, dtype=jnp.float64))

    @float64
    def scaled(self, c):
        return FlippedSpike(self.atoms[0] * c)


class Gaussian(LatentLaw):
    """θ ~ N(μ, Σ) with Σ symmetric positive semi-definite (diagonal when given as ``var``)."""

    mu: Array  # (F,)
    sigma: Array  # (F, F)
    _root: Array  # (F, F), root @ root.T = sigma (eigen-factor: tolerates singular Σ)

    @float64
    def __init__(self, mean, cov=None, var=None):
        mu = jnp.atleast_1d(jnp.asarray(mean, dtype=jnp.float64))
        F = mu.shape[0]
        if cov is not None and var is not None:
            raise ValueError("give either cov or var, not both")
        if var is not None:
            sigma = jnp.diag(jnp.asarray(var, dtype=jnp.float64))
        elif cov is not None:
            sigma = jnp.asarray(cov, dtype=jnp.float64)
        else:
            sigma = jnp.eye(F, dtype=jnp.float64)
        if sigma.shape != (F, F):
            raise ValueError(f"cov must have shape ({F}, {F}), got {sigma.shape}")
        self.mu = mu
        self.sigma = sigma
        self._root = psd_root(sigma)

    @property
    def F(self):
        return self.mu.shape[0]

    @float64
    def sample(self, key, shape=()):
        xi = jax.random.normal(key, (*shape, self.F), dtype=self.mu.dtype)  # (*shape, F)
        return self.mu + xi @ self._root.T  # (*shape, F)

    @float64
    def mean(self):
        return self.mu

    @float64
    def cov(self):
        return self.sigma

    @float64
    def log_lambda(self, nu):
        A = jnp.eye(self.F, dtype=self.sigma.dtype) + self.sigma  # (F, F), I + Σ
        d = nu - self.mu  # (..., F)
        sol = solve(A, d.reshape(-1, self.F).T).T.reshape(d.shape)  # (..., F), (I + Σ)⁻¹ d
        logdet = jnp.sum(jnp.log(eigvalsh(A)))
        return -0.5 * jnp.sum(d * sol, -1) + 0.5 * jnp.sum(nu * nu, -1) - 0.5 * logdet  # (...)

    @float64
    def scaled(self, c):
        return Gaussian(self.mu * c, cov=self.sigma * c**2)

    def theta_from_normals(self, z):
        return np.asarray(self.mean()) + np.asarray(z) @ np.asarray(self._root).T
