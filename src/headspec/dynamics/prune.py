"""Head pruning (SPEC §7 E5): the risk of a trained model after removing heads.

Heads are removed one at a time, either greedily (each time the head whose removal raises the
D → ∞ risk least) or in a random order, down to no head at all (ŷ = 0, risk ½). The remaining
heads keep their keys and biases; the aggregation follows the activation: softmax heads are
re-averaged over the remaining heads, Bayes-softmax is normalised jointly over the remaining heads,
softmax-1 heads are summed.

All risks of one model are evaluated on the same samples: the head projections λ of all H heads
are drawn once from (M, Q) (exact over a discrete law's atoms), and a subset of heads uses its
columns of λ — the exact joint law, so differences between subsets are paired.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from headspec.core.latent import Discrete
    >>> from headspec.core.attention import Softmax
    >>> from headspec.core.observables import BaseSamples
    >>> law = Discrete([[2.0, 0.0], [0.0, 2.0]])
    >>> M = jnp.array([[2.0, 0.0], [2.0, 0.0], [2.0, 0.0]])      # three identical heads
    >>> base = BaseSamples.draw(jax.random.key(0), law, L=10, H=3, n=4096)
    >>> path = prune_path(M, M @ M.T, jnp.zeros(3), Softmax(), law, base)
    >>> [round(r, 6) for r in path["risk"][:3]] == [round(path["risk"][0], 6)] * 3
    True
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from headspec.core.attention import Activation
from headspec.core.latent import LatentLaw
from headspec.core.linalg import psd_root
from headspec.core.observables import BaseSamples, token_projections
from headspec.core.precision import float64


def _all_projections(M, Q, law: LatentLaw, base: BaseSamples):
    """λ (A, n, H, L) for every atom (A = J, or 1 for a continuous law), hidden token at l = 0,
    and the atom weights (A,)."""
    S = psd_root(Q - M @ M.T)  # (H, H)
    thetas, weights = law.quadrature(base.theta)  # (A, n, F), (A,)
    lam = jax.vmap(lambda th: token_projections(M, S, th, base)[1])(thetas)  # (A, n, H, L)
    return lam, weights  # (A, n, H, L), (A,)


_all_projections_jit = eqx.filter_jit(_all_projections)


@eqx.filter_jit
def _path(lam, weights, b, activation: Activation, perm, greedy: bool):
    """Risks (H + 1,) along a removal order and the heads removed (H,), in one program.

    Each step prices every head's removal at once (:meth:`Activation.token_weights_without`:
    O(A·n·H·L), not H sub-models), then removes the cheapest (``greedy``) or ``perm[step]``."""
    s = lam + b[:, None]  # (A, n, H, L)
    target = jax.nn.one_hot(0, s.shape[-1], dtype=s.dtype)  # (L,)

    def risk(W):  # (A, n, ..., L) → (...)
        return jnp.tensordot(weights, 0.5 * jnp.sum((W - target) ** 2, axis=-1).mean(1), 1)

    def step(mask, k):  # mask (H,) bool: the heads left
        r = risk(activation.token_weights_without(s, mask))  # (H,) the last head gone: ½
        c = jnp.argmin(jnp.where(mask, r, jnp.inf)) if greedy else perm[k]  # ()
        return mask.at[c].set(False), (r[c], c)

    H = s.shape[2]
    _, (risks, removed) = jax.lax.scan(step, jnp.ones(H, bool), jnp.arange(H))
    full = risk(activation.token_weights(s))  # () all heads
    return jnp.concatenate([full[None], risks]), removed  # (H + 1,), (H,)


@float64
def prune_path(
    M, Q, b, activation: Activation, law: LatentLaw, base: BaseSamples, *, order="greedy",
    key=None,
) -> dict:  # fmt: skip
    """Risk for every number of remaining heads H, H−1, …, 0 along a removal order.

    ``order``: "greedy" (fewest harm first; ties to the lowest index) or "random" (a permutation
    drawn from ``key``). Returns {"n_heads": [H … 0], "risk": [...], "removed": [head removed at
    each step]}. Cost: H steps of O(A·n·H·L) in one compiled program per (H, n, activation).
    """
    M, Q, b = (jnp.asarray(x, dtype=jnp.float64) for x in (M, Q, b))
    H = M.shape[0]
    if order == "random":
        perm = jax.random.permutation(jax.random.key(0) if key is None else key, H)
    elif order == "greedy":
        perm = jnp.arange(H)  # unused
    else:
        raise ValueError(f"order must be 'greedy' or 'random', got {order!r}")
    lam, weights = _all_projections_jit(M, Q, law, base)
    risks, removed = _path(lam, weights, b, activation, perm, order == "greedy")
    return {"n_heads": list(range(H, -1, -1)), "risk": [float(r) for r in risks],
            "removed": [int(c) for c in removed]}  # fmt: skip
