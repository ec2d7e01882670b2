"""Latent laws P_θ of SPEC §2, with the likelihood ratio Λ(ν) of SPEC §6.

Four families on one abstract base :class:`LatentLaw`:

- :class:`Spike`         θ = a (a fixed vector);
- :class:`FlippedSpike`  θ = s·a, s = ±1 with probability ½;
- :class:`Discrete`      θ = a_j with probability p_j;
- :class:`Gaussian`      θ ~ N(μ, Σ), Σ symmetric positive semi-definite.

Every law is an ``equinox.Module`` (a pytree), so it can be passed straight into jitted code.
A global signal strength c is applied with :meth:`LatentLaw.scaled` (θ → cθ).

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
from jax.scipy.special import logsumexp

Array = jax.Array


class LatentLaw(eqx.Module):
    """Abstract law of the latent vector θ in R^F."""

    @property
    @abc.abstractmethod
    def F(self) -> int:
        """Number of latent features (dimension of θ)."""

    @property
    def is_discrete(self) -> bool:
        """True when the law has finitely many atoms (then :attr:`atoms`, :attr:`probs` exist)."""
        return False

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

    def second_moment(self) -> Array:
        """E θθᵀ, shape (F, F)."""
        m = self.mean()
        return self.cov() + jnp.outer(m, m)


class Discrete(LatentLaw):
    """θ = a_j with probability p_j (j = 1..J); uniform probabilities when ``probs`` is None."""

    atoms: Array  # (J, F)
    probs: Array  # (J,)

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

    @property
    def is_discrete(self) -> bool:
        return True

    def sample(self, key, shape=()):
        idx = self.sample_index(key, shape)  # shape
        return self.atoms[idx]  # (*shape, F)

    def sample_index(self, key, shape=()):
        """Index j of the atom, shape ``shape``."""
        return jax.random.choice(key, self.J, shape=shape, p=self.probs)

    def mean(self):
        return self.probs @ self.atoms  # (F,)

    def cov(self):
        m = self.mean()  # (F,)
        return (self.atoms * self.probs[:, None]).T @ self.atoms - jnp.outer(m, m)  # (F, F)

    def log_weights(self, nu):
        """log p_j + a_j·ν − |a_j|²/2 for every atom: shape (..., J)."""
        half_sq = 0.5 * jnp.sum(self.atoms**2, axis=-1)  # (J,)
        return jnp.log(self.probs) + nu @ self.atoms.T - half_sq  # (..., J)

    def log_lambda(self, nu):
        return logsumexp(self.log_weights(nu), axis=-1)  # (...)

    def scaled(self, c):
        return Discrete(self.atoms * c, self.probs)


class Spike(Discrete):
    """θ = a, a fixed vector (one atom). One softmax head with k = K* a is Bayes-optimal."""

    def __init__(self, a):
        a = jnp.atleast_1d(jnp.asarray(a, dtype=jnp.float64))
        super().__init__(a[None, :], jnp.ones((1,), dtype=jnp.float64))

    def scaled(self, c):
        return Spike(self.atoms[0] * c)


class FlippedSpike(Discrete):
    """θ = s·a with s = ±1 equally likely: two signals in opposite directions."""

    def __init__(self, a):
        a = jnp.atleast_1d(jnp.asarray(a, dtype=jnp.float64))
        super().__init__(jnp.stack([a, -a]), jnp.full((2,), 0.5, dtype=jnp.float64))

    def scaled(self, c):
        return FlippedSpike(self.atoms[0] * c)


class Gaussian(LatentLaw):
    """θ ~ N(μ, Σ) with Σ symmetric positive semi-definite (diagonal when given as ``var``)."""

    mu: Array  # (F,)
    sigma: Array  # (F, F)
    _root: Array  # (F, F), root @ root.T = sigma (eigen-factor: tolerates singular Σ)

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

    def sample(self, key, shape=()):
        xi = jax.random.normal(key, (*shape, self.F), dtype=self.mu.dtype)  # (*shape, F)
        return self.mu + xi @ self._root.T  # (*shape, F)

    def mean(self):
        return self.mu

    def cov(self):
        return self.sigma

    def log_lambda(self, nu):
        A = jnp.eye(self.F, dtype=self.sigma.dtype) + self.sigma  # (F, F), I + Σ
        cho = jax.scipy.linalg.cho_factor(A)
        d = nu - self.mu  # (..., F)
        sol = jax.scipy.linalg.cho_solve(cho, d.reshape(-1, self.F).T).T.reshape(d.shape)
        logdet = 2.0 * jnp.sum(jnp.log(jnp.diag(cho[0])))
        return -0.5 * jnp.sum(d * sol, -1) + 0.5 * jnp.sum(nu * nu, -1) - 0.5 * logdet  # (...)

    def scaled(self, c):
        return Gaussian(self.mu * c, cov=self.sigma * c**2)


def psd_root(S: Array, rtol: float = 1e-12) -> Array:
    """The symmetric square root R = S^{1/2} (so R Rᵀ = S) of a symmetric PSD S.

    Singular S is fine: eigenvalues below ``rtol · max(1, λ_max)`` (round-off of a singular
    matrix) are set to zero, so an exactly rank-deficient S gives an exactly rank-deficient root.
    The symmetric root (not V√Λ) is a smooth function of S wherever S is positive definite, even
    with repeated eigenvalues, so ``jax.jacfwd`` through it is finite there; its derivative is
    infinite only where S is singular (a genuine property of the square root).
    """
    S = 0.5 * (S + S.T)
    if S.shape[0] == 0:
        return S
    return _sym_sqrt(S, rtol)


def _clipped_eigh(S, rtol):
    w, V = jnp.linalg.eigh(S)  # (n,), (n, n)
    cut = rtol * jnp.maximum(1.0, jnp.max(jnp.abs(w)))
    return jnp.where(w > cut, w, 0.0), V


@jax.custom_jvp
def _sym_sqrt(S, rtol):
    w, V = _clipped_eigh(S, rtol)
    return (V * jnp.sqrt(w)[None, :]) @ V.T  # (n, n)


@_sym_sqrt.defjvp
def _sym_sqrt_jvp(primals, tangents):
    S, rtol = primals
    dS, _ = tangents
    w, V = _clipped_eigh(S, rtol)
    r = jnp.sqrt(w)  # (n,)
    R = (V * r[None, :]) @ V.T
    # R dR + dR R = dS  ⇒  in the eigenbasis (dR)_ij = (Vᵀ dS V)_ij / (r_i + r_j)
    A = V.T @ (0.5 * (dS + dS.T)) @ V  # (n, n)
    denom = r[:, None] + r[None, :]
    X = jnp.where(A == 0, 0.0, A / jnp.where(A == 0, 1.0, denom))
    return R, V @ X @ V.T
