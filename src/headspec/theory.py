"""The D → ∞ description of SPEC §5: risk (and, to come, drift) as functions of (M, Q, b).

For a token l let λ_l = (k_h·x_l/√D)_h and ν_l = (k*_f·x_l/√D)_f. For l ≠ ε they are jointly
N(0, [[Q, M], [Mᵀ, I_F]]); the hidden token gets the shift (Mθ, θ). Expectations are Monte-Carlo
averages over fixed base samples (common random numbers: the same samples at every (M, Q, b), so
the functions are deterministic and smooth), with ε fixed at the first token by symmetry, and
exactly over the atoms of a discrete law (θ is not sampled).

Example:
    >>> import jax, jax.numpy as jnp
    >>> from headspec.latent import Spike
    >>> from headspec.attention import Softmax
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

from headspec.attention import Activation, loss_projected
from headspec.latent import LatentLaw, psd_root

Array = jax.Array


class BaseSamples(eqx.Module):
    """Fixed standard-normal base samples for D → ∞ expectations (common random numbers)."""

    nu: Array  # (n, L, F) feature projections of the tokens, before the signal shift
    xi: Array  # (n, L, H) independent normals for the head projections
    theta: Array  # (n, F) latent draws (unused for discrete laws: their atoms are exact)

    @classmethod
    def draw(cls, key, law: LatentLaw, L: int, H: int, n: int, dtype=jnp.float64):
        k1, k2, k3 = jax.random.split(key, 3)
        return cls(
            nu=jax.random.normal(k1, (n, L, law.F), dtype=dtype),  # (n, L, F)
            xi=jax.random.normal(k2, (n, L, H), dtype=dtype),  # (n, L, H)
            theta=law.sample(k3, (n,)).astype(dtype),  # (n, F)
        )

    @property
    def n(self) -> int:
        return self.nu.shape[0]


class RiskEstimate(NamedTuple):
    mean: Array  # ()
    se: Array  # () Monte-Carlo standard error
    by_atom: Array  # (J,) risk given θ = a_j (discrete laws; empty otherwise)


def _per_sample_losses(M, Q, b, activation, theta, base):
    """Losses (n,) with θ given per sample (n, F), hidden token at l = 0."""
    S = psd_root(Q - M @ M.T)  # (H, H)
    L = base.nu.shape[1]
    shift = jax.nn.one_hot(0, L, dtype=base.nu.dtype)[None, :, None] * theta[:, None, :]
    nu = base.nu + shift  # (n, L, F)
    lam = nu @ M.T + base.xi @ S.T  # (n, L, H)
    s = jnp.swapaxes(lam, -1, -2) + b[:, None]  # (n, H, L)
    W = activation.token_weights(s)  # (n, L)
    return loss_projected(W, jnp.zeros(W.shape[0], jnp.int32))  # (n,)


def population_risk(
    M: Array, Q: Array, b: Array, activation: Activation, law: LatentLaw, base: BaseSamples
) -> RiskEstimate:
    """R(M, Q, b) = E ½ Σ_l (W_l − 1[l=ε])² of SPEC §5, with its Monte-Carlo standard error."""
    n = base.n
    if law.is_discrete:
        th = jnp.broadcast_to(law.atoms[:, None, :], (law.J, n, law.F))  # (J, n, F)
        per = jax.vmap(lambda t: _per_sample_losses(M, Q, b, activation, t, base))(th)  # (J, n)
        by_atom = per.mean(axis=1)  # (J,)
        losses = law.probs.astype(per.dtype) @ per  # (n,)
    else:
        losses = _per_sample_losses(M, Q, b, activation, base.theta, base)  # (n,)
        by_atom = jnp.zeros((0,), losses.dtype)
    mean = losses.mean()
    se = losses.std(ddof=1) / jnp.sqrt(n)
    return RiskEstimate(mean, se, by_atom)
