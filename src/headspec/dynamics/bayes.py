"""Bayes-optimal prediction of SPEC §6 and Monte-Carlo risks with standard errors.

Posterior of the location: P(ε = l | X) ∝ Λ(ν_l), ν_l = K*ᵀx_l/√D. The Bayes predictor is
E[y | X] = Σ_l P(ε = l | X) x_l and the Bayes risk is R_B = ½ E Σ_l (P_l − 1[l=ε])² (D → ∞).

For a discrete law the Bayes predictor *is* a Bayes-softmax with one head per atom
(:func:`constructed_bayes_softmax`: M_j = a_j, Q = [a_i·a_j], b_j = log p_j − |a_j|²/2).

Risks are estimated by :func:`estimate_risks`, which evaluates several predictors on the *same*
samples, along one of two routes:

- ``"projected"`` (D → ∞): sample (λ, ν) of SPEC §5, loss ½ Σ_l (W_l − 1[l=ε])²;
- ``"finite"``: sample X at finite D, exact loss |ŷ − y|²/(2D) (differs by O(1/D) in mean).

Example:
    >>> import jax
    >>> from headspec.core.latent import Discrete
    >>> law = Discrete([[2.0, 0.0], [0.0, 2.0]], [0.6, 0.4])
    >>> out = estimate_risks(jax.random.key(0), law, L=10, n=10_000,
    ...     predictors={"bayes": Posterior(law), "constructed": constructed_bayes_softmax(law)})
    >>> abs(out["bayes"].mean - out["constructed"].mean) < 1e-12
    True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from headspec.core.attention import (
    BayesSoftmax,
    Heads,
    Predictor,
    Softmax,
    Uniform,
    Zero,
    loss_finite,
    loss_projected,
)
from headspec.core.exact import exact_risk
from headspec.core.latent import Discrete, LatentLaw
from headspec.core.linalg import psd_root
from headspec.core.model import Model
from headspec.core.precision import float64
from headspec.core.quadrature import Quadrature
from headspec.core.stats import MCEstimate
from headspec.core.task import Task, sample_batch, sample_projected

Array = jax.Array


@float64
def log_posterior(law: LatentLaw, nu: Array) -> Array:
    """log P(ε = l | X) from ν (..., L, F): shape (..., L)."""
    return jax.nn.log_softmax(law.log_lambda(nu), axis=-1)  # (..., L)


@float64
def posterior(law: LatentLaw, nu: Array) -> Array:
    """P(ε = l | X) from ν (..., L, F): shape (..., L)."""
    return jnp.exp(log_posterior(law, nu))  # (..., L)


@float64
def bayes_predict(task: Task, X: Array) -> Array:
    """The Bayes-optimal predictor E[y | X] = Σ_l P(ε=l|X) x_l for tokens X (..., L, D)."""
    P = posterior(task.law, X @ task.U)  # (..., L)
    return jnp.einsum("...l,...ld->...d", P, X)  # (..., D)


class Posterior(Predictor):
    """The Bayes-optimal predictor as an attention ``Predictor`` (uses ν only)."""

    law: LatentLaw

    def token_weights(self, lam, nu):
        return posterior(self.law, nu)  # (n, L)


@float64
def constructed_bayes_softmax(law: Discrete) -> Heads:
    """The Bayes-softmax predictor that equals the Bayes predictor for a discrete law (SPEC §6).

    One head per atom: keys k_j = K* a_j (so M = atoms, Q = atoms·atomsᵀ), biases
    b_j = log p_j − |a_j|²/2, heads summed.
    """
    if not law.n_atoms:
        raise ValueError("the constructed Bayes-softmax optimum exists only for discrete laws")
    A = law.atoms  # (J, F)
    b = jnp.log(law.probs) - 0.5 * jnp.sum(A**2, axis=-1)  # (J,)
    return Heads(M=A, Q=A @ A.T, b=b, activation=BayesSoftmax(aggregation="sum"))


def _joint_overlaps(predictors: Mapping[str, Predictor], F: int):
    """Stack all predictors' keys: M (H_tot, F), Q (H_tot, H_tot), and each one's head slice.

    Keys of different predictors share their components along K* (through M); their parts
    orthogonal to K* are taken independent.
    """
    Ms, roots, slices, start = [], [], {}, 0
    for name, p in predictors.items():
        M, Q = p.overlaps(F)
        H = M.shape[0]
        Ms.append(jnp.asarray(M, dtype=jnp.float64).reshape(H, F))
        roots.append(psd_root(jnp.asarray(Q, dtype=jnp.float64) - Ms[-1] @ Ms[-1].T))
        slices[name] = slice(start, start + H)
        start += H
    M_all = jnp.concatenate(Ms, axis=0) if Ms else jnp.zeros((0, F))  # (H_tot, F)
    R = jax.scipy.linalg.block_diag(*roots) if start else jnp.zeros((0, 0))  # (H_tot, H_tot)
    return M_all, M_all @ M_all.T + R @ R.T, slices


def _losses(preds, spans, lam, nu, eps, *, X=None, y=None):
    """Per-sample losses of each predictor, shape (P, m)."""
    out = []
    for p, (a, b) in zip(preds, spans, strict=True):
        W = p.token_weights(lam[..., a:b], nu)  # (m, L)
        if X is None:
            out.append(loss_projected(W, eps))  # (m,)
        else:
            yhat = jnp.einsum("ml,mld->md", W, X)  # (m, D)
            out.append(loss_finite(yhat, y))  # (m,)
    return jnp.stack(out)  # (P, m)


@eqx.filter_jit
def _projected_chunk(key, law, preds, spans, *, M_all, Q_all, L, chunk):
    pb = sample_projected(key, law, L, chunk, M_all, Q_all)
    return _losses(preds, spans, pb.lam, pb.nu, pb.eps)


@eqx.filter_jit
def _finite_chunk(key, task, preds, spans, K_all, chunk):
    batch = sample_batch(key, task, chunk)
    lam = batch.X @ K_all.T / jnp.sqrt(task.D)  # (m, L, H_tot)
    nu = batch.X @ task.U  # (m, L, F)
    return _losses(preds, spans, lam, nu, batch.eps, X=batch.X, y=batch.y)


@float64
def estimate_risks(
    key: Array,
    law: LatentLaw,
    L: int,
    predictors: Mapping[str, Predictor],
    *,
    n: int = 100_000,
    route: str = "projected",
    D: int | None = None,
    frame: str = "random",
    chunk: int | None = None,
    return_samples: bool = False,
    progress: Callable[[int, int], None] | None = None,
):
    """Risks of several predictors on the same n samples: {name: MCEstimate}.

    With ``return_samples=True`` also returns {name: per-sample losses (n,)} (for paired tests).
    Both routes work in chunks of ``chunk`` sequences (default: about 2·10^6 numbers per chunk for
    the projected route, 2·10^7 for the finite one); ``progress(sequences_done, n)`` is called
    after each chunk.
    """
    if not predictors:
        raise ValueError("give at least one predictor")
    F = law.F
    M_all, Q_all, slices = _joint_overlaps(predictors, F)
    names = list(predictors)
    preds = tuple(predictors[k] for k in names)
    spans = tuple((slices[k].start, slices[k].stop) for k in names)
    if route == "projected":
        chunk = chunk or max(1, 2_000_000 // (L * (F + M_all.shape[0] + 1)))

        def one(k):
            return _projected_chunk(k, law, preds, spans, M_all=M_all, Q_all=Q_all, L=L,
                                    chunk=chunk)  # fmt: skip

    elif route == "finite":
        if D is None:
            raise ValueError("the finite route needs D")
        k_frame, k_keys, key = jax.random.split(key, 3)
        task = Task.create(k_frame, law, L, D, frame)
        K_all = task.keys_from_overlaps(M_all, Q_all, k_keys)  # (H_tot, D)
        chunk = chunk or max(1, 20_000_000 // (L * D))
        one = lambda k: _finite_chunk(k, task, preds, spans, K_all, chunk)  # noqa: E731
    else:
        raise ValueError(f"route must be 'projected' or 'finite', got {route!r}")

    n_chunks = -(-n // chunk)
    parts = []
    for i in range(n_chunks):
        parts.append(np.asarray(one(jax.random.fold_in(key, i))))
        if progress is not None:
            progress(min((i + 1) * chunk, n), n)
    samples = np.concatenate(parts, axis=1)[:, :n]  # (P, n)
    est = {name: MCEstimate.of(samples[i]) for i, name in enumerate(names)}
    if return_samples:
        return est, {name: samples[i] for i, name in enumerate(names)}
    return est


@float64
def bayes_risk(
    key: Array, law: LatentLaw, L: int, n: int = 100_000, route: str = "projected", **kw
) -> MCEstimate:
    """The Bayes risk R_B by Monte Carlo, with its standard error."""
    return estimate_risks(key, law, L, {"bayes": Posterior(law)}, n=n, route=route, **kw)["bayes"]


def exact_risk_of(
    pred: Predictor, law: LatentLaw, L: int, quad: Quadrature | None = None, *, certify=False
):
    """A predictor's D → ∞ risk without sampling, or ``None`` where there is no exact route;
    with ``certify`` the pair (risk, error bound) (0 for the closed forms; the quadrature's by
    :func:`~headspec.core.exact.exact_risk`'s ``certify``).

    ŷ = 0: ½; uniform attention: ½(1 − 1/L); heads given by (M, Q, b) and the Bayes posterior of a
    discrete law (the constructed Bayes-softmax, SPEC §6): :func:`~headspec.core.exact.
    exact_risk` by quadrature (four or more atoms by its low-rank route). ``None`` for the
    posterior of a Gaussian law (no finite Bayes-softmax) and for Bayes-softmax heads beyond
    the quadrature's reach (H ≥ 4 heads with a Q of high rank); a Monte-Carlo estimate is then
    the only one.

    Example:
        >>> from headspec.core.latent import Discrete
        >>> law = Discrete([[2.0, 0.0], [0.0, 2.0]], [0.6, 0.4])
        >>> round(exact_risk_of(Posterior(law), law, L=10), 5)
        0.27508
        >>> value, err = exact_risk_of(Posterior(law), law, L=10, certify=True)
        >>> bool(err < 1e-8)
        True
    """
    closed = {Zero: lambda: 0.5, Uniform: lambda: 0.5 * (1.0 - 1.0 / L)}.get(type(pred))
    if closed is not None:
        return (closed(), 0.0) if certify else closed()
    if isinstance(pred, Posterior):
        if not law.n_atoms:
            return None
        pred = constructed_bayes_softmax(law)
    if not isinstance(pred, Heads):
        return None
    try:
        model = Model(pred.activation, law, L)
        r = exact_risk(pred.M, pred.Q, pred.b, model, quad or Quadrature(), certify=certify)
    except (TypeError, ValueError):  # an activation, law or size the quadrature does not cover
        return None
    return (float(r.mean), float(r.err)) if certify else float(r.mean)


@float64
def reference_predictors(law: LatentLaw, L: int) -> dict[str, tuple[Predictor, str]]:
    """The predictors `headspec bayes` compares, each with a one-line description."""
    out: dict[str, tuple[Predictor, str]] = {
        "zero": (Zero(), "ŷ = 0"),
        "uniform": (Uniform(), "uniform attention 1/L"),
    }
    m = law.mean()
    if bool(jnp.any(m != 0)):
        out["mean_head"] = (
            Heads(M=m[None, :], b=jnp.zeros(1), activation=Softmax()),
            "softmax head on K*E[θ]",
        )
    if law.n_atoms:
        out["bayes_softmax"] = (
            constructed_bayes_softmax(law),
            "Bayes-softmax, head per atom",
        )
    out["bayes"] = (Posterior(law), "Bayes posterior (R_B)")
    return out
