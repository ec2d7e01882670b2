"""Observables shared by simulation and theory (SPEC §5, §8): base samples, token projections,
the D → ∞ loss and population risk, and the record of one grid point.

For a token l let λ_l = (k_h·x_l/√D)_h and ν_l = (k*_f·x_l/√D)_f. For l ≠ ε they are jointly
N(0, [[Q, M], [Mᵀ, I_F]]); the hidden token gets the shift (Mθ, θ). Expectations are averages over
fixed base samples (common random numbers: the same samples at every (M, Q, b), so the functions
are deterministic and smooth), with ε fixed at the first token by symmetry, and exactly over the
atoms of a discrete law (the law's own :meth:`~headspec.core.latent.LatentLaw.expect`).

Example:
    >>> import jax, jax.numpy as jnp
    >>> from headspec.core.latent import Spike
    >>> from headspec.core.attention import Softmax
    >>> law = Spike([2.0])
    >>> base = BaseSamples.draw(jax.random.key(0), law, L=10, H=1, n=20_000)
    >>> M, Q, b = jnp.array([[2.0]]), jnp.array([[4.0]]), jnp.zeros(1)   # the head k = K*a
    >>> r = population_risk(M, Q, b, Softmax(), law, base)
    >>> abs(float(r.mean) - 0.224) < 0.01   # one softmax head on the spike is Bayes-optimal
    True
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.attention import Activation, loss_projected
from headspec.core.latent import LatentLaw
from headspec.core.linalg import psd_root
from headspec.core.precision import float64
from headspec.core.stats import sample_mean_se

Array = jax.Array


class BaseSamples(eqx.Module):
    """Fixed standard-normal base samples for D → ∞ expectations (common random numbers)."""

    nu: Array  # (n, L, F) feature projections of the tokens, before the signal shift
    xi: Array  # (n, L, H) independent normals for the head projections
    theta: Array  # (n, F) latent draws (unused for discrete laws: their atoms are exact)

    @classmethod
    @float64
    def draw(cls, key, law: LatentLaw, L: int, H: int, n: int, dtype=jnp.float64):
        """Plain Monte-Carlo samples from ``key`` (one compiled program per shape)."""
        return _draw(key, law, int(L), int(H), int(n), jnp.dtype(dtype))

    @classmethod
    @float64
    def sobol(cls, seed: int, law: LatentLaw, L: int, H: int, n: int) -> BaseSamples:
        """Scrambled Sobol quasi-Monte-Carlo samples (n rounded up to a power of 2).

        The Sobol points are mapped to normals by the inverse CDF. Standard errors computed from
        them as if they were independent are conservative (QMC errors are usually smaller).
        """
        from scipy.special import ndtri
        from scipy.stats import qmc

        F = law.F
        extra = F if law.n_atoms == 0 else 0  # θ is sampled only for continuous laws
        d = L * F + L * H + extra
        m = max(1, int(np.ceil(np.log2(n))))
        u = qmc.Sobol(d, scramble=True, seed=seed).random_base2(m)  # (2^m, d)
        z = ndtri(np.clip(u, 1e-12, 1 - 1e-12))  # (2^m, d)
        N = z.shape[0]
        nu = z[:, : L * F].reshape(N, L, F)  # (N, L, F)
        xi = z[:, L * F : L * F + L * H].reshape(N, L, H)  # (N, L, H)
        theta = law.theta_from_normals(z[:, L * F + L * H :])  # (N, F)
        return cls(nu=jnp.asarray(nu), xi=jnp.asarray(xi), theta=jnp.asarray(theta))

    @property
    def n(self) -> int:
        return self.nu.shape[0]

    def head_cyclic(self) -> BaseSamples:
        """The samples closed under cyclic shifts of the head axis (n → n·H).

        With them the estimated drift of a state that is symmetric under permuting the heads
        is itself exactly symmetric: identical heads stay identical, as in the exact ODE (plain
        samples break the symmetry at O(1/√n)).
        """
        H = self.xi.shape[-1]
        xi = jnp.concatenate([jnp.roll(self.xi, c, axis=-1) for c in range(H)])  # (nH, L, H)
        return BaseSamples(
            nu=jnp.tile(self.nu, (H, 1, 1)), xi=xi, theta=jnp.tile(self.theta, (H, 1))
        )


@eqx.filter_jit
def _draw(key, law: LatentLaw, L: int, H: int, n: int, dtype) -> BaseSamples:
    k1, k2, k3 = jax.random.split(key, 3)
    return BaseSamples(
        nu=jax.random.normal(k1, (n, L, law.F), dtype=dtype),  # (n, L, F)
        xi=jax.random.normal(k2, (n, L, H), dtype=dtype),  # (n, L, H)
        theta=law.sample(k3, (n,)).astype(dtype),  # (n, F)
    )


def token_projections(M: Array, S: Array, theta: Array, base: BaseSamples):
    """ν (n, L, F) and λ (n, H, L) with θ (n, F) on the hidden token l = 0; S = √(Q − MMᵀ)."""
    L = base.nu.shape[1]
    shift = jax.nn.one_hot(0, L, dtype=base.nu.dtype)[None, :, None] * theta[:, None, :]
    nu = base.nu + shift  # (n, L, F)
    lam = jnp.einsum("nlf,hf->nhl", nu, M) + jnp.einsum("nlk,hk->nhl", base.xi, S)  # (n, H, L)
    return nu, lam


def sample_loss(s: Array, activation: Activation) -> Array:
    """Per-sample D → ∞ loss ℓ(s) = ½ Σ_l (W_l(s) − 1[l = 0])² for scores s (H, L)."""
    W = activation.token_weights(s)  # (L,)
    return 0.5 * jnp.sum((W - jax.nn.one_hot(0, W.shape[-1], dtype=W.dtype)) ** 2)


class RiskEstimate(NamedTuple):
    mean: Array  # ()
    se: Array  # () Monte-Carlo standard error
    by_atom: Array  # (J,) risk given θ = a_j (discrete laws; empty otherwise)


def _per_sample_losses(M, Q, b, activation, theta, base):
    """Losses (n,) with θ given per sample (n, F), hidden token at l = 0."""
    _, lam = token_projections(M, psd_root(Q - M @ M.T), theta, base)
    W = activation.token_weights(lam + b[:, None])  # (n, L)
    return loss_projected(W, jnp.zeros(W.shape[0], jnp.int32))  # (n,)


@float64
def population_risk(
    M: Array, Q: Array, b: Array, activation: Activation, law: LatentLaw, base: BaseSamples
) -> RiskEstimate:
    """R(M, Q, b) = E ½ Σ_l (W_l − 1[l=ε])² of SPEC §5, with its Monte-Carlo standard error."""
    losses, by_atom = law.expect_by_atom(  # (n,), (J,)
        lambda th: _per_sample_losses(M, Q, b, activation, th, base), base.theta
    )
    mean, se = sample_mean_se(losses)
    return RiskEstimate(mean, se, by_atom)


class Observation(NamedTuple):
    """What every engine and the ODE record at one grid point (leading axis: seed)."""

    M: Array  # (S, H, F)
    Q: Array  # (S, H, H)
    b: Array  # (S, H)
    risk: Array  # (S,)
    risk_se: Array  # (S,)
    risk_by_atom: Array  # (S, J)
    test_risk: Array  # (S,)
    test_risk_se: Array  # (S,)
    test_risk_by_atom: Array  # (S, J)
