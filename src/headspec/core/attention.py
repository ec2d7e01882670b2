"""Activations and the multi-head attention predictor of SPEC §3, with the losses of SPEC §4.

Scores s_hl = k_h·x_l/√D + b_h. An :class:`Activation` turns scores of shape (..., H, L) into
attention weights A of the same shape; the predictor is ŷ = Σ_h Σ_l A_hl x_l, i.e. token weights
W_l = Σ_h A_hl applied to the tokens (values are the identity).

| activation            | per-head normalisation                         | default aggregation |
|-----------------------|------------------------------------------------|---------------------|
| :class:`Softmax`      | e^{s_hl} / Σ_l' e^{s_hl'}                     | mean (mass 1)       |
| :class:`Softmax1`     | e^{s_hl} / (1 + Σ_l' e^{s_hl'})               | sum (mass in (0,H)) |
| :class:`BayesSoftmax` | e^{s_hl} / Σ_{h',l'} e^{s_h'l'} (joint)        | sum (mass 1)        |

*Modelling choice* (SPEC §3): heads are averaged for softmax and summed for softmax-1 and
Bayes-softmax; ``aggregation="mean"|"sum"`` selects the other choice. All three are computed
through log-sum-exp, so any finite score (|s| = 1e4 included) gives finite weights and gradients.

Example:
    >>> import jax.numpy as jnp
    >>> s = jnp.array([[0.0, 1e4, -1e4]])          # (H=1, L=3)
    >>> Softmax()(s).tolist(), Softmax1()(s).sum().item()
    ([[0.0, 1.0, 0.0]], 1.0)
"""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from headspec.core.names import ACTIVATION_NAMES, check_registry
from headspec.core.precision import float64

Array = jax.Array


class Activation(eqx.Module):
    """Abstract activation: scores (..., H, L) → attention weights A (..., H, L)."""

    aggregation: str = eqx.field(static=True, default="")
    name: ClassVar[str]
    default_aggregation: ClassVar[str]
    #: κ: the normaliser's constant term, e^0 of softmax-1's extra logit (0 for the others)
    extra_logit: ClassVar[float] = 0.0

    def __post_init__(self):
        if self.aggregation == "":
            object.__setattr__(self, "aggregation", self.default_aggregation)
        if self.aggregation not in ("mean", "sum"):
            raise ValueError(f"aggregation must be 'mean' or 'sum', got {self.aggregation!r}")

    @abc.abstractmethod
    def log_normalised(self, s: Array) -> Array:
        """log of the weights before aggregation, shape (..., H, L)."""

    def normalised(self, s: Array) -> Array:
        """The weights before aggregation, shape (..., H, L) (one exp per score)."""
        return jnp.exp(self.log_normalised(s))

    def head_weight(self, H: int) -> float:
        """c: each of H heads' share in the aggregation, 1/H (mean) or 1 (sum)."""
        return 1.0 / H if self.aggregation == "mean" else 1.0

    def __call__(self, s: Array) -> Array:
        A = self.normalised(s)  # (..., H, L)
        if self.aggregation == "mean":
            A = A / s.shape[-2]
        return A

    def token_weights(self, s: Array) -> Array:
        """W_l = Σ_h A_hl, shape (..., L)."""
        return jnp.sum(self(s), axis=-2)  # (..., L)

    def default_bias(self, H: int, L: int) -> float:
        """SPEC §4 default initial bias b_h(0): 0 (softmax-1 overrides it)."""
        return 0.0

    def token_weights_without(self, s: Array, mask: Array) -> Array:
        """Token weights of the heads in ``mask`` (H,) bool with head c left out, for every c:
        (..., H, L) → (..., H, L) [c, l] (c outside the mask: the mask's own weights; no head
        left: W = 0, i.e. ŷ = 0).

        All H sub-models at the cost of one (pruning, SPEC §7 E5): the heads' summed weights
        less head c's. Each head's weights lie in [0, 1], so the difference is exact to H·ε in
        absolute terms; the mean aggregation divides by the heads left."""
        A = jnp.where(mask[:, None], self.normalised(s), 0.0)  # (..., H, L)
        W = jnp.sum(A, axis=-2, keepdims=True) - A  # (..., H, L)
        return self._aggregate_others(W, mask)  # (..., H, L)

    def _aggregate_others(self, W: Array, mask: Array) -> Array:
        if self.aggregation == "mean":
            left = jnp.sum(mask) - mask  # (H,) heads left without c
            W = W / jnp.maximum(left, 1)[:, None]  # (..., H, L)
        return W


class Softmax(Activation):
    """Softmax over positions, per head."""

    name: ClassVar[str] = "softmax"
    default_aggregation: ClassVar[str] = "mean"

    def log_normalised(self, s):
        return jax.nn.log_softmax(s, axis=-1)  # (..., H, L)

    def normalised(self, s):
        return jax.nn.softmax(s, axis=-1)  # (..., H, L)


class Softmax1(Activation):
    """Softmax with an extra logit 0 per head ("softmax-1"): a head can put its mass nowhere."""

    name: ClassVar[str] = "softmax1"
    default_aggregation: ClassVar[str] = "sum"
    extra_logit: ClassVar[float] = 1.0

    def log_normalised(self, s):
        lse = logsumexp(s, axis=-1, keepdims=True)  # (..., H, 1)
        return s - jnp.logaddexp(0.0, lse)  # (..., H, L)

    def default_bias(self, H, L):
        """b0 = −log(L(H−1)): initial total mass 1 at k = 0 (b0 = 0 when H = 1)."""
        return -float(jnp.log(L * (H - 1))) if H > 1 else 0.0

    def normalised(self, s):
        m = jax.lax.stop_gradient(jnp.maximum(jnp.max(s, axis=-1, keepdims=True), 0.0))
        e = jnp.exp(s - m)  # (..., H, L), ≤ 1
        return e / (jnp.exp(-m) + jnp.sum(e, axis=-1, keepdims=True))  # (..., H, L)


class BayesSoftmax(Activation):
    """Softmax jointly over heads and positions."""

    name: ClassVar[str] = "bayes_softmax"
    default_aggregation: ClassVar[str] = "sum"

    def log_normalised(self, s):
        return s - logsumexp(s, axis=(-2, -1), keepdims=True)  # (..., H, L)

    def normalised(self, s):
        m = jax.lax.stop_gradient(jnp.max(s, axis=(-2, -1), keepdims=True))
        e = jnp.exp(s - m)  # (..., H, L)
        return e / jnp.sum(e, axis=(-2, -1), keepdims=True)  # (..., H, L)

    def token_weights_without(self, s, mask):
        """As :meth:`Activation.token_weights_without`, the joint normalisation redone over the
        heads left. Scores are shifted by the top head's largest score (the largest term is 1,
        so sums less one head are exact to H·L·ε against a normaliser ≥ 1); leaving out the top
        head itself, the others are summed afresh, shifted by the runner-up's score (a dominant
        head leaves the others' weights exact, not 0/0)."""
        H = s.shape[-2]
        s = jnp.where(mask[:, None], s, -jnp.inf)  # (..., H, L) a masked head weighs nothing
        head_max = jnp.max(s, axis=-1)  # (..., H)
        top = jnp.argmax(head_max, axis=-1)  # (...)
        is_top = jnp.arange(H) == top[..., None]  # (..., H)
        m1 = jnp.max(head_max, axis=-1)  # (...)
        m2 = jnp.max(jnp.where(is_top, -jnp.inf, head_max), axis=-1)  # (...) the runner-up
        m1, m2 = (jnp.where(jnp.isfinite(m), m, 0.0) for m in (m1, m2))  # no head: no shift
        e = jnp.exp(s - m1[..., None, None])  # (..., H, L) ≤ 1
        num = jnp.sum(e, axis=-2, keepdims=True) - e  # (..., H, L) without head c
        rest = jnp.where(is_top[..., None], 0.0, jnp.exp(s - m2[..., None, None]))  # (..., H, L)
        num_top = jnp.sum(rest, axis=-2)  # (..., L) without the top head
        num = jnp.where(is_top[..., None], num_top[..., None, :], num)  # (..., H, L)
        z = jnp.sum(num, axis=-1, keepdims=True)  # (..., H, 1) 0 where no head is left
        W = num / jnp.where(z > 0, z, 1.0)  # (..., H, L)
        return self._aggregate_others(W, mask)  # (..., H, L)


ACTIVATIONS: dict[str, type[Activation]] = {
    cls.name: cls for cls in (Softmax, Softmax1, BayesSoftmax)
}
check_registry(ACTIVATION_NAMES, ACTIVATIONS, "activations")  # the configs' names, JAX-free


def get_activation(name: str, aggregation: str | None = None) -> Activation:
    """Activation by name ('softmax', 'softmax1', 'bayes_softmax'), default aggregation if None."""
    try:
        cls = ACTIVATIONS[name]
    except KeyError:
        raise ValueError(
            f"unknown activation {name!r}: choose one of {sorted(ACTIVATIONS)}"
        ) from None
    return cls(aggregation=aggregation or "")


def default_bias(activation: str, H: int, L: int) -> float:
    """SPEC §4 default b_h(0) of the activation named ``activation`` (see
    :meth:`Activation.default_bias`)."""
    return get_activation(activation).default_bias(H, L)


def scores(K: Array, b: Array, X: Array, D: int | None = None) -> Array:
    """s_hl = k_h·x_l/√D + b_h for keys K (H, D), biases b (H,), tokens X (..., L, D).

    Returns shape (..., H, L). ``D`` defaults to the last axis of X; give it when keys and tokens
    are coordinates in a smaller basis of the D-dimensional space (the reduced engine).
    """
    D = X.shape[-1] if D is None else D
    lam = jnp.einsum("...ld,hd->...hl", X, K) / jnp.sqrt(D)  # (..., H, L)
    return lam + b[:, None]  # (..., H, L)


def predict(K: Array, b: Array, X: Array, activation: Activation, D: int | None = None) -> Array:
    """ŷ(X) = Σ_h Σ_l A_hl x_l, shape (..., D) (``D`` as in :func:`scores`)."""
    W = activation.token_weights(scores(K, b, X, D))  # (..., L)
    return jnp.einsum("...l,...ld->...d", W, X)  # (..., D)


def loss_finite(yhat: Array, y: Array, D: int | None = None) -> Array:
    """Exact finite-D loss |ŷ − y|²/(2D) per sample: (..., D) → (...); ``D`` as in scores."""
    D = y.shape[-1] if D is None else D
    return 0.5 * jnp.sum((yhat - y) ** 2, axis=-1) / D  # (...)


def loss_projected(W: Array, eps: Array) -> Array:
    """D → ∞ loss ½ Σ_l (W_l − 1[l=ε])² for token weights W (..., L) and locations ε (...)."""
    target = jax.nn.one_hot(eps, W.shape[-1], dtype=W.dtype)  # (..., L)
    return 0.5 * jnp.sum((W - target) ** 2, axis=-1)  # (...)


class Predictor(eqx.Module):
    """Anything that weights tokens from their projections: ŷ = Σ_l W_l x_l.

    ``token_weights(lam, nu)`` takes the head projections λ (n, L, H) and feature projections
    ν (n, L, F); the same function serves the finite-D route (λ = K x/√D, ν = Uᵀx computed from
    the tokens) and the D → ∞ route (λ, ν sampled from (M, Q)).
    """

    @property
    def n_heads(self) -> int:
        return 0

    def overlaps(self, F: int) -> tuple[Array, Array]:
        """(M (H, F), Q (H, H)) of the predictor's keys; empty for key-free predictors."""
        return jnp.zeros((0, F)), jnp.zeros((0, 0))

    @abc.abstractmethod
    def token_weights(self, lam: Array, nu: Array) -> Array:
        """W, shape (n, L)."""


class Heads(Predictor):
    """Multi-head attention given by its order parameters: overlaps M (H, F), Q (H, H), biases b.

    At finite D the keys are realised by :meth:`headspec.core.task.Task.keys_from_overlaps`.
    """

    M: Array  # (H, F)
    Q: Array  # (H, H)
    b: Array  # (H,)
    activation: Activation

    @float64
    def __init__(self, M, b=None, activation=None, Q=None):
        self.M = jnp.atleast_2d(jnp.asarray(M, dtype=jnp.float64))
        H = self.M.shape[0]
        self.Q = self.M @ self.M.T if Q is None else jnp.asarray(Q, dtype=jnp.float64)
        self.b = jnp.zeros((H,)) if b is None else jnp.asarray(b, dtype=jnp.float64).reshape(H)
        self.activation = Softmax() if activation is None else activation

    @property
    def n_heads(self):
        return self.M.shape[0]

    def overlaps(self, F):
        return self.M, self.Q

    def token_weights(self, lam, nu):
        s = jnp.swapaxes(lam, -1, -2) + self.b[:, None]  # (n, H, L)
        return self.activation.token_weights(s)  # (n, L)


class Uniform(Predictor):
    """W_l = 1/L: risk ½(1 − 1/L) as D → ∞."""

    def token_weights(self, lam, nu):
        return jnp.full(nu.shape[:-1], 1.0 / nu.shape[-2], dtype=nu.dtype)  # (n, L)


class Zero(Predictor):
    """ŷ = 0: risk ½ as D → ∞."""

    def token_weights(self, lam, nu):
        return jnp.zeros(nu.shape[:-1], dtype=nu.dtype)  # (n, L)
