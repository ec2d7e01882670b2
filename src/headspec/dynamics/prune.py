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
def _subset_risk(lam, weights, b, activation: Activation, idx):
    """D → ∞ risk of the sub-model of heads ``idx`` (h,), h ≥ 1: one program per h."""
    s = lam[:, :, idx, :] + b[idx][:, None]  # (A, n, h, L)
    W = activation.token_weights(s)  # (A, n, L)
    target = jax.nn.one_hot(0, W.shape[-1], dtype=W.dtype)  # (L,)
    per_atom = 0.5 * jnp.sum((W - target) ** 2, axis=-1).mean(-1)  # (A,)
    return weights @ per_atom  # ()


def _risk(lam, weights, b, activation: Activation, heads) -> float:
    """D → ∞ risk of the sub-model made of ``heads`` (a list of indices)."""
    if len(heads) == 0:
        return 0.5  # ŷ = 0
    return float(_subset_risk(lam, weights, b, activation, jnp.asarray(heads)))


@float64
def prune_path(
    M, Q, b, activation: Activation, law: LatentLaw, base: BaseSamples, *, order="greedy",
    key=None,
) -> dict:  # fmt: skip
    """Risk for every number of remaining heads H, H−1, …, 0 along a removal order.

    ``order``: "greedy" (fewest harm first) or "random" (a permutation drawn from ``key``).
    Returns {"n_heads": [H … 0], "risk": [...], "removed": [head removed at each step]}.
    """
    M, Q, b = (jnp.asarray(x, dtype=jnp.float64) for x in (M, Q, b))
    H = M.shape[0]
    lam, weights = _all_projections_jit(M, Q, law, base)
    remaining = list(range(H))
    risks = [_risk(lam, weights, b, activation, remaining)]
    removed: list[int] = []
    if order == "random":
        key = jax.random.key(0) if key is None else key
        perm = [int(i) for i in jax.random.permutation(key, H)]
    elif order != "greedy":
        raise ValueError(f"order must be 'greedy' or 'random', got {order!r}")
    for step in range(H):
        if order == "greedy":
            trial = [
                (_risk(lam, weights, b, activation, [h for h in remaining if h != c]), c)
                for c in remaining
            ]
            r, c = min(trial)
        else:
            c = perm[step]
            r = _risk(lam, weights, b, activation, [h for h in remaining if h != c])
        remaining.remove(c)
        removed.append(c)
        risks.append(r)
    return {"n_heads": list(range(H, -1, -1)), "risk": risks, "removed": removed}
