"""The exact risk of a grouped state — G groups of identical heads — at the cost of G heads.

Fixed points of the symmetry-reduced ansatz (SPEC §7 E6/E7 and ``headspec saddles``: heads
within a group taken as identical) have H heads in G ≪ H groups. For softmax and softmax-1 the
risk couples heads only in pairs (:mod:`headspec.core.exact`), and at such a state the
H(H − 1)/2 pairs are of G(G + 1)/2 kinds: two heads of group g, or one of g and one of g',
each kind counted with its multiplicity (n_g(n_g − 1)/2 or n_g n_g'). So R and its gradient
cost G(G + 1)/2 pair tables instead of H(H − 1)/2: at H = 16 in two groups 3 instead of 120.

The gradient is returned in the coordinates of the full state (M, Q, b) of H heads, with Q's
entries independent (what the drift of SPEC §5 takes): by symmetry every head of a group has
the same derivatives, and the grouped risk's derivatives are their sums over the group —
∂R/∂M_h = ∂R_G/∂M_g / n_g, ∂R/∂Q_hh = ∂R_G/∂Q_gg / n_g, ∂R/∂Q_hh' = ∂R_G/∂Q_gg' / (n_g n_g')
between groups and ∂R_G/∂r_g / (n_g(n_g − 1)) within one, where r_g is the overlap of two keys
of group g (equal to Q_gg at the state, but a coordinate of its own). Second derivatives along
the reduced coordinates (a fixed-point solver's Jacobian) follow by differentiating this.

Example:
    >>> import jax.numpy as jnp
    >>> from headspec.core import attention, latent, model as mdl
    >>> from headspec.core.exact import exact_risk
    >>> from headspec.core.precision import float64_context
    >>> M, Q, b = jnp.array([[1.0], [0.5]]), jnp.array([[2.0, 0.3], [0.3, 1.0]]), jnp.zeros(2)
    >>> with float64_context():
    ...     model = mdl.Model(attention.Softmax(), latent.Spike([2.0]), L=10)
    ...     g = grouped_risk_and_gradient(M, Q, b, (3, 1), model)
    ...     full = exact_risk(*expand_groups(M, Q, b, (3, 1)), model).mean
    >>> g.R_Q.shape, bool(abs(g.R - full) < 1e-13)     # four heads, the risk of four heads
    ((4, 4), True)
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.attention import Softmax, Softmax1
from headspec.core.exact import hidden_laws, per_head_risk
from headspec.core.model import Model
from headspec.core.precision import float64
from headspec.core.quadrature import Quadrature

Array = jax.Array


class GroupedGradient(NamedTuple):
    """R and its gradient in the full state's coordinates: R_M (H, F), R_Q (H, H), R_b (H,)."""

    R: Array
    R_M: Array
    R_Q: Array
    R_b: Array


def groupable(model: Model) -> bool:
    """Whether :func:`grouped_risk_and_gradient` applies: activations whose heads couple only in
    pairs (softmax, softmax-1; Bayes-softmax's one normaliser couples all heads at once)."""
    return isinstance(model.activation, Softmax | Softmax1)


def group_index(sizes: tuple[int, ...]) -> np.ndarray:
    """Group of each head (H,) for group sizes such as (3, 1)."""
    if not sizes or any(int(s) < 1 for s in sizes):
        raise ValueError(f"group sizes must be positive integers, got {sizes}")
    return np.repeat(np.arange(len(sizes)), sizes)


def expand_groups(M: Array, Q: Array, b: Array, sizes: tuple[int, ...]):
    """The full state (H heads) of G group representatives: rows repeated ``sizes`` times, two
    heads of one group with overlap Q_gg (identical keys)."""
    idx = group_index(sizes)  # (H,)
    return M[idx], Q[np.ix_(idx, idx)], b[idx]


@eqx.filter_jit
def _grouped_risk(M, Q, within, b, *, model: Model, quad: Quadrature, sizes: tuple[int, ...]):
    H = sum(sizes)
    c = model.activation.head_weight(H)
    kappa = model.activation.extra_logit
    per = per_head_risk(
        M, Q, b, model.law, model.L, quad, kappa=kappa, c=c, sizes=sizes, within=within
    )  # (K,)  fmt: skip
    return hidden_laws(M, Q, b, model.law)[2] @ per  # ()


@float64
def grouped_risk_and_gradient(
    M: Array, Q: Array, b: Array, sizes: tuple[int, ...], model: Model,
    quad: Quadrature = Quadrature(),
) -> GroupedGradient:  # fmt: skip
    """R and ∇R of the H = Σ ``sizes`` heads whose G groups have the representatives M (G, F),
    Q (G, G), b (G,), each group's heads identical (see module): the gradient in the full state's
    coordinates, (H, F), (H, H), (H,), heads ordered group by group. Differentiable in M, Q, b
    (once more: second derivatives along the reduced coordinates)."""
    if not groupable(model):
        raise TypeError(f"no grouped risk for {type(model.activation).__name__}: its heads do "
                        "not couple in pairs; use exact_risk on the full state")  # fmt: skip
    sizes = tuple(int(s) for s in sizes)
    M, Q, b = (jnp.asarray(x, jnp.float64) for x in (M, Q, b))
    R, (gM, gQ, gW, gb) = jax.value_and_grad(_grouped_risk, argnums=(0, 1, 2, 3))(
        M, Q, jnp.diagonal(Q), b, model=model, quad=quad, sizes=sizes
    )
    n = jnp.asarray(sizes, M.dtype)  # (G,)
    idx = group_index(sizes)  # (H,)
    per_entry = gQ / (n[:, None] * n[None, :])  # (G, G) between groups
    diag = jnp.diagonal(gQ) / n  # (G,) a head's own Q_hh
    inside = gW / jnp.maximum(n * (n - 1), 1.0)  # (G,) two heads of one group
    R_Q = per_entry[np.ix_(idx, idx)]  # (H, H)
    same = idx[:, None] == idx[None, :]  # (H, H)
    R_Q = jnp.where(same, inside[idx][:, None], R_Q)
    R_Q = R_Q.at[np.arange(len(idx)), np.arange(len(idx))].set(diag[idx])
    return GroupedGradient(R, (gM / n[:, None])[idx], R_Q, (gb / n)[idx])
