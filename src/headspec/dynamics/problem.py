"""The drift problem: what the order-parameter vector field of SPEC §5 needs besides the state.

A :class:`DriftProblem` holds the model (:class:`~headspec.core.model.Model`: the activation, the
latent law and L), the learning rates (traced: any
η reuses the compiled programs), whether the η² term is kept, and the *method* that evaluates the
expectations — one strategy object, so the drift, its Jacobian, the fixed points, the saddles and
the diffusion engine's moments all go through the same code:

- :class:`Sampled` ("mc", "qmc"): every expectation is an average over fixed base samples
  (plain Monte Carlo or scrambled Sobol; common random numbers, exact over a discrete law's
  atoms), with its sampling error;
- :class:`Exact` ("exact"): the population risk R(M, Q, b) by deterministic quadrature
  (:func:`headspec.core.exact.exact_risk`) and the η-linear drift as its metric gradient
  (SPEC §5 (i)): with G = R_Q + R_Qᵀ (Q's entries as independent coordinates),

      dM = −η (R_M + G M),   dQ_lin = −η [(R_M Mᵀ + G Q) + (R_M Mᵀ + G Q)ᵀ],   db = −η_b R_b;

  only the η² term η² E[Σ_l g_l g_lᵀ] (a mean of a positive quantity) is sampled.

One sample's increment ψ (its mean is the drift) is written once, in
:mod:`headspec.dynamics.terms` (:func:`expect_terms`, :func:`increment`; re-exported here with
``OrderParameters``, ``Drift`` and ``flatten``).

Example:
    >>> import jax, jax.numpy as jnp
    >>> from headspec.core.latent import Spike
    >>> from headspec.core.attention import Softmax
    >>> from headspec.core.observables import BaseSamples
    >>> law = Spike([2.0])
    >>> base = BaseSamples.sobol(0, law, L=10, H=1, n=4096)
    >>> at = OrderParameters(M=jnp.array([[0.5]]), Q=jnp.array([[0.5]]), b=jnp.zeros(1))
    >>> from headspec.core.model import Model
    >>> model = Model(Softmax(), law, L=10)
    >>> sampled = DriftProblem(model, lr=1.0, method=Sampled(base))
    >>> exact = DriftProblem(model, lr=1.0, method=Exact(base))
    >>> d_s, d_e = sampled.drift(at), exact.drift(at)
    >>> bool(abs(d_s.dM[0, 0] - d_e.dM[0, 0]) < 3 * d_s.dM_se[0, 0])   # same drift, two routes
    True
    >>> float(d_e.dM_se[0, 0])                                         # no sampling error left
    0.0
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from headspec.core.accuracy import error_bound
from headspec.core.accuracy import reach as quadrature_reach
from headspec.core.attention import Activation
from headspec.core.exact import Quadrature, exact_risk
from headspec.core.latent import LatentLaw
from headspec.core.model import Model
from headspec.core.observables import (
    BaseSamples,
    RiskEstimate,
    population_risk,
)
from headspec.core.precision import float64, float64_context
from headspec.core.stats import sample_mean_se
from headspec.dynamics.eta2 import RiskGradient, ScoreSamples, eta2_traced
from headspec.dynamics.terms import (
    Drift,
    OrderParameters,
    SampleTerms,
    expect_terms,
    flatten,
    increment,
    mean_terms,
    per_sample_terms,
    unflatten,
)

__all__ = [  # the per-sample pieces live in headspec.dynamics.terms; importable from here too
    "Drift", "DriftProblem", "Exact", "Method", "OrderParameters", "SampleTerms", "Sampled",
    "expect_terms", "flatten", "increment", "mean_terms", "per_sample_terms", "unflatten",
]  # fmt: skip

Array = jax.Array


# ------------------------------------------------------------------------------- methods
class Method(eqx.Module):
    """How the expectations of the drift are evaluated (a strategy of :class:`DriftProblem`):
    from per-sample :class:`SampleTerms` of the state (on the method's ``base`` samples)."""

    base: BaseSamples
    name: str = eqx.field(static=True)
    #: absolute accuracy of the drift and of its Jacobian's entries beyond their standard errors
    #: (0: sampling error only)
    accuracy: ClassVar[float] = 0.0
    jacobian_accuracy: ClassVar[float] = 0.0

    @abc.abstractmethod
    def drift_from(self, problem: DriftProblem, state, terms, lr, lr_b) -> Drift:
        """The drift and R at ``state``; ``terms(contract)`` gives the base samples' terms of the
        state, contracted by :func:`per_sample_terms` or :func:`mean_terms` (only if needed)."""

    def vector_field_from(self, problem: DriftProblem, state, terms, lr, lr_b):
        """The drift only (what an ODE solver calls); by default the means of
        :meth:`drift_from`."""
        d = self.drift_from(problem, state, terms, lr, lr_b)
        return OrderParameters(d.dM, d.dQ, d.db)


class Sampled(Method):
    """Every expectation averaged over fixed base samples: plain Monte Carlo ("mc") or scrambled
    Sobol quasi-Monte Carlo ("qmc"), whichever ``base`` holds."""

    def __init__(self, base: BaseSamples, name: str = "sampled"):
        self.base, self.name = base, name

    def drift_from(self, problem, state, terms, lr, lr_b):
        t = terms(per_sample_terms)
        psi = increment(t, lr, lr_b, problem.eta2)  # each (n, …)
        means, ses = zip(*(sample_mean_se(x) for x in (*psi, t.loss)), strict=True)
        return Drift(*means, *ses, *(jnp.zeros_like(m) for m in means))

    def vector_field_from(self, problem, state, terms, lr, lr_b):
        return increment(terms(mean_terms), lr, lr_b, problem.eta2)


#: a finer quadrature for analyses (fixed points, Jacobians, saddles): ~1.9× the default's cost
FINE = Quadrature(n_w=64, n_w_one=96, n_s=224)


class Exact(Method):
    """R by quadrature (:func:`~headspec.core.exact.exact_risk`), the η-linear drift as its
    metric gradient; the η² term T = E[Σ_l g_l g_lᵀ] sampled (its standard error is the only
    one): on ``scores`` when given, by :mod:`headspec.dynamics.eta2`'s estimator (randomised QMC
    on the score vectors with control variates whose means are exact: ∇R, which the η-linear
    drift computes anyway, and the symmetric and independent shadows; ~100× less error than
    ``base`` at E1's plateau for 1.4× its cost, benchmarks/bench_eta2.py), else averaged over
    ``base``. The estimator is for the ODE's vector field; a Jacobian (``jax.jacfwd`` of the
    drift) takes the ``base`` route, which stays differentiable where heads coincide.

    ``cyclic`` (with ``scores``): the estimate averaged over the H cyclic relabellings of the
    heads (cost × H), so that it treats all heads alike, as head-cyclic ``base`` samples do:
    heads that are alike in distribution (same M rows, exchangeable Q) stay alike. Without it
    the estimator's points break that symmetry at the size of its error.

    ``symmetric``: the state stays invariant under relabelling the heads (a symmetric start),
    and the drift is projected so (the average of its H cyclic relabellings, cost × 1). In exact
    arithmetic that changes nothing; in floating point it removes the quadrature's asymmetric
    error (~1e-9), which a plateau's unstable direction amplifies: two identical Bayes-softmax
    heads (H = 2) came 3e-7 apart by t = 5 without it (tests/test_theory.py)."""

    quad: Quadrature
    scores: ScoreSamples | None
    cyclic: bool = eqx.field(static=True)
    symmetric: bool = eqx.field(static=True)
    accuracy: float = eqx.field(static=True)
    jacobian_accuracy: float = eqx.field(static=True)
    #: the largest Q_hh where the drift is by quadrature (:meth:`in_reach`); None: the rule's
    #: own per activation (:func:`~headspec.core.accuracy.reach` of ``reach_rule``)
    reach: float | None = eqx.field(static=True)
    #: the rule whose reach applies (``quad``; the default's on :meth:`refined`)
    reach_rule: Quadrature = eqx.field(static=True)

    def __init__(
        self,
        base: BaseSamples,
        quad: Quadrature | None = None,
        *,
        scores: ScoreSamples | None = None,
        cyclic: bool = False,
        symmetric: bool = False,
        reach: float | None = None,
        reach_rule: Quadrature | None = None,
    ):
        self.base, self.name, self.scores, self.cyclic = base, "exact", scores, bool(cyclic)
        self.symmetric = bool(symmetric)
        self.quad = Quadrature() if quad is None else quad
        fine = self.quad.n_w >= FINE.n_w and self.quad.n_s >= FINE.n_s
        # measured against a finer quadrature (n_w, n_s) = (96, 320) at E1's common phase (H = 2,
        # η = 2) and in benchmarks/bench_exact.py: the drift (∇R, times η ≤ 3) to ≤ 1e-8 at the
        # default nodes, Jacobian entries to 1.8e-5 at the default and 3e-8 at FINE; the
        # floors of their "standard errors" in fixed-point tests and eigenvalue verdicts
        self.accuracy = 1e-9 if fine else 1e-8
        self.jacobian_accuracy = 1e-7 if fine else 3e-5
        self.reach = None if reach is None else float(reach)
        self.reach_rule = self.quad if reach_rule is None else reach_rule

    def refined(self) -> Exact:
        """The same method on the refined rule (:meth:`Quadrature.refined`) and with the same
        reach (both take the same route at every state): the second evaluation of every
        error bound."""
        return Exact(self.base, self.quad.refined(), scores=self.scores, cyclic=self.cyclic,
                     symmetric=self.symmetric, reach=self.reach,
                     reach_rule=self.reach_rule)  # fmt: skip

    def reach_of(self, activation) -> float:
        """The largest Q_hh where ``activation``'s drift is by quadrature: :attr:`reach` if given,
        else :func:`~headspec.core.accuracy.reach` of :attr:`reach_rule` (25.0 for softmax,
        19.9 for softmax-1, 16.0 for Bayes-softmax at the default nodes)."""
        return quadrature_reach(self.reach_rule, activation) if self.reach is None else self.reach

    def in_reach(self, problem, state) -> Array:
        """Whether the quadrature keeps its accuracy at ``state``: every Q_hh ≤
        :meth:`reach_of` the problem's activation. Beyond it (large keys: sharp attention) the
        grids are too coarse and the drift is wrong by far more than :attr:`accuracy`
        (∂R/∂Q₁₁ = 0.00334 against 0.00037 at Q_hh = 128), so :meth:`drift_from` and
        :meth:`vector_field_from` take the sampled route on ``base`` there instead, with its
        standard errors (SPEC §5: never an unbounded value).
        """
        return jnp.max(jnp.diagonal(state.Q)) <= self.reach_of(problem.activation)

    def fallback(self) -> Sampled:
        """The sampled method beyond :attr:`reach`: every term on ``base`` (head-cyclic where the
        estimate is, so that heads alike stay alike)."""
        return Sampled(self.base.head_cyclic() if self.cyclic else self.base, name="qmc")

    def risk_and_gradient(self, problem, state) -> RiskGradient:
        """R and (R_M, R_Q, R_b) by quadrature (Q's entries as independent coordinates)."""

        def R(M, Q, b):
            return exact_risk(M, Q, b, problem.model, self.quad).mean

        R, (R_M, R_Q, R_b) = jax.value_and_grad(R, argnums=(0, 1, 2))(*state)
        return RiskGradient(R, R_M, R_Q, R_b)

    def linear(self, problem, state, lr, lr_b, grad=None) -> tuple[Array, OrderParameters]:
        """R and the η-linear drift (SPEC §5 (i)): −η(R_M + GM), −η[(R_M Mᵀ + GQ) + ᵀ], −η_b R_b."""
        M, Q, _ = state
        R, R_M, R_Q, R_b = self.risk_and_gradient(problem, state) if grad is None else grad
        G = R_Q + R_Q.T  # (H, H)
        P = R_M @ M.T + G @ Q  # (H, H)
        return R, OrderParameters(-lr * (R_M + G @ M), -lr * (P + P.T), -lr_b * R_b)

    def linear_error(self, problem, state, lr, lr_b) -> tuple[OrderParameters, Array]:
        """Error bounds of the η-linear drift (dM, dQ_lin, db) and of R: :func:`error_bound` of
        :meth:`linear` on this rule and on :meth:`refined`; 0 beyond :attr:`reach` (the drift is
        sampled there, with its standard errors)."""
        (R, lin), (R_fine, lin_fine) = (
            m.linear(problem, state, lr, lr_b) for m in (self, self.refined())
        )
        err = error_bound((*lin, R), (*lin_fine, R_fine))
        inside = self.in_reach(problem, state)
        err = jax.tree.map(lambda e: jnp.where(inside, e, 0.0), err)
        return OrderParameters(*err[:3]), err[3]

    def eta2_term(self, problem, state, grad: RiskGradient, terms, with_se: bool):
        """T (H, H) and its standard error (None unless ``with_se`` on the ``base`` route)."""
        if self.scores is not None:
            tol = jnp.asarray(self.accuracy, state[0].dtype)

            def estimate(c: int):  # T of the heads relabelled h → h + c, labels put back
                M, Q, b = _roll(state.M, c), _roll(state.Q, c, 2), _roll(state.b, c)
                g = RiskGradient(grad.R, _roll(grad.R_M, c), _roll(grad.R_Q, c, 2),
                                 _roll(grad.R_b, c))  # fmt: skip
                est = eta2_traced(M, Q, b, g, problem.model, self.scores, quad=self.quad,
                                  mean_tol=tol)  # fmt: skip
                return _roll(est.mean, -c, 2), _roll(est.se, -c, 2)  # (H, H) ×2

            # symmetric: the state is invariant, so every relabelled estimate is the same one,
            # and the drift's projection (_projected) already averages the relabellings
            shifts = range(state.M.shape[0] if self.cyclic and not self.symmetric else 1)
            means, ses = zip(*(estimate(c) for c in shifts), strict=True)
            return sum(means) / len(means), sum(ses) / len(ses)  # s.e.: an upper bound
        if with_se:
            return sample_mean_se(terms(per_sample_terms).g_g)  # (H, H) each
        return terms(mean_terms).g_g, None

    def drift_from(self, problem, state, terms, lr, lr_b):
        return jax.lax.cond(
            self.in_reach(problem, state),
            lambda: self._exact_drift(problem, state, terms, lr, lr_b),
            lambda: self._sampled(problem, state, lr, lr_b, field=False),
        )

    def vector_field_from(self, problem, state, terms, lr, lr_b):
        return jax.lax.cond(
            self.in_reach(problem, state),
            lambda: self._exact_field(problem, state, terms, lr, lr_b),
            lambda: self._sampled(problem, state, lr, lr_b, field=True),
        )

    def _sampled(self, problem, state, lr, lr_b, field: bool):
        """The fallback's drift (``field``: its vector field only) on its own samples."""
        m = self.fallback()
        law, act = problem.law, problem.activation
        terms = lambda contract: expect_terms(state, act, law, m.base, contract)  # noqa: E731
        return (m.vector_field_from if field else m.drift_from)(problem, state, terms, lr, lr_b)

    def _exact_drift(self, problem, state, terms, lr, lr_b):
        grad = self.risk_and_gradient(problem, state)
        R, lin = self.linear(problem, state, lr, lr_b, grad)
        zero = jnp.zeros_like
        dQ, dQ_se = lin.Q, zero(lin.Q)
        if problem.eta2:
            T, T_se = self.eta2_term(problem, state, grad, terms, with_se=True)  # (H, H) each
            dQ, dQ_se = dQ + lr**2 * T, lr**2 * T_se
        dM, dQ, db = self._projected(OrderParameters(lin.M, dQ, lin.b))
        se = (zero(lin.M), dQ_se, zero(lin.b), zero(R))
        return Drift(dM, dQ, db, R, *se, *se)  # error bounds: DriftProblem.drift fills them

    def _exact_field(self, problem, state, terms, lr, lr_b):
        grad = self.risk_and_gradient(problem, state)
        _, lin = self.linear(problem, state, lr, lr_b, grad)
        if not problem.eta2:
            return self._projected(lin)
        T, _ = self.eta2_term(problem, state, grad, terms, with_se=False)  # (H, H)
        return self._projected(OrderParameters(lin.M, lin.Q + lr**2 * T, lin.b))

    def _projected(self, d: OrderParameters) -> OrderParameters:
        """``d`` averaged over the H cyclic relabellings of the heads where ``symmetric``."""
        if not self.symmetric:
            return d
        H = d.M.shape[0]

        def average(x: Array, axes: int) -> Array:
            return sum(_roll(x, c, axes) for c in range(H)) / H  # H = 2: bitwise alike

        return OrderParameters(average(d.M, 1), average(d.Q, 2), average(d.b, 1))


def _roll(x: Array, c: int, head_axes: int = 1) -> Array:
    """Relabel the heads h → h + c (mod H) along the first ``head_axes`` axes: 1 for M (H, F)
    and b (H,), 2 for Q (H, H)."""
    return jnp.roll(x, (c,) * head_axes, axis=tuple(range(head_axes))) if c else x


def _rate(x) -> Array:
    with float64_context():
        return jnp.asarray(x, jnp.float64)


class DriftProblem(eqx.Module):
    """The vector field of SPEC §5 for one ``model`` (activation, law, L), learning rates η, η_b
    (traced), with or without the η² term, evaluated by ``method`` (:class:`Sampled` or
    :class:`Exact`). ``lr_b`` defaults to ``lr``."""

    model: Model
    lr: Array = eqx.field(converter=_rate)
    lr_b: Array = eqx.field(converter=_rate)
    method: Method
    eta2: bool = eqx.field(static=True)

    def __init__(self, model: Model, lr=1.0, lr_b=None, method=None, eta2=True):
        if not isinstance(model, Model):
            raise TypeError(f"model: a headspec.core.model.Model, got {type(model).__name__}")
        if method is None:
            raise ValueError("give a method: Sampled(base) or Exact(base)")
        self.model = model
        self.lr = lr
        self.lr_b = lr if lr_b is None else lr_b
        self.method, self.eta2 = method, bool(eta2)

    @classmethod
    def sampled(cls, activation, law, base: BaseSamples, lr=1.0, lr_b=None, eta2=True):
        """The problem with every expectation averaged over ``base`` (L from its shape)."""
        return cls(Model(activation, law, base.nu.shape[1]), lr, lr_b, Sampled(base), eta2)

    @property
    def activation(self) -> Activation:
        return self.model.activation

    @property
    def law(self) -> LatentLaw:
        return self.model.law

    @property
    def L(self) -> int:
        return self.model.L

    @property
    def base(self) -> BaseSamples:
        """The method's base samples."""
        return self.method.base

    def with_lr(self, lr, lr_b=None) -> DriftProblem:
        """The same problem at other learning rates (η_b = η unless given)."""
        return dataclasses.replace(self, lr=lr, lr_b=lr if lr_b is None else lr_b)

    def refined(self) -> DriftProblem:
        """The same problem with its method's quadrature refined (:meth:`Exact.refined`; a
        sampled method has none and is returned as is)."""
        if not isinstance(self.method, Exact):
            return self
        return dataclasses.replace(self, method=self.method.refined())

    def linear(self) -> DriftProblem:
        """The same problem without the η² term (the gradient-flow limit's drift)."""
        return dataclasses.replace(self, eta2=False)

    def terms(self, state: OrderParameters):
        """``contract ↦`` the contracted terms of ``state`` on the method's base samples."""
        return lambda contract: expect_terms(state, self.activation, self.law, self.base, contract)

    def drift_at(self, state: OrderParameters, factor=1.0) -> Drift:
        """The drift (learning rates times ``factor``), traceable: for use inside jitted code."""
        lr, lr_b = self.lr * factor, self.lr_b * factor
        return self.method.drift_from(self, state, self.terms(state), lr, lr_b)

    def field_at(self, state: OrderParameters, factor=1.0) -> OrderParameters:
        """d(M, Q, b)/dt only, Q's part symmetrised; traceable (the ODE's right-hand side)."""
        lr, lr_b = self.lr * factor, self.lr_b * factor
        d = self.method.vector_field_from(self, state, self.terms(state), lr, lr_b)
        return OrderParameters(d.M, 0.5 * (d.Q + d.Q.T), d.b)

    @float64
    def risk(self, state: OrderParameters) -> RiskEstimate:
        """R(M, Q, b) by the method: exact (standard error 0) or on its base samples."""
        return _risk(self, _as64(state))

    @float64
    def drift(self, state: OrderParameters, factor=1.0) -> Drift:
        """The drift and R at ``state``, with standard errors and, for the exact method, error
        bounds (the same drift on the refined rule too: ≈ 3× the cost of one evaluation)."""
        return _drift(self, _as64(state), jnp.asarray(factor, jnp.float64))

    @float64
    def vector_field(self, state: OrderParameters, factor=1.0) -> OrderParameters:
        """d(M, Q, b)/dt only (one compiled program)."""
        return _field(self, _as64(state), jnp.asarray(factor, jnp.float64))


def _as64(state) -> OrderParameters:
    return OrderParameters(*(jnp.asarray(x, jnp.float64) for x in state))


@eqx.filter_jit
def _drift(problem: DriftProblem, state: OrderParameters, factor) -> Drift:
    d = problem.drift_at(state, factor)
    if not isinstance(problem.method, Exact):
        return d
    lr, lr_b = problem.lr * factor, problem.lr_b * factor
    if problem.method.scores is None:  # the η² term is on samples, the same on either rule
        lin_err, R_err = problem.method.linear_error(problem, state, lr, lr_b)
        err = (*lin_err, R_err)
    else:  # the η² estimator's control variates are quadratures too
        fine = problem.refined().drift_at(state, factor)
        err = error_bound((d.dM, d.dQ, d.db, d.R), (fine.dM, fine.dQ, fine.db, fine.R))
    return d._replace(dM_err=err[0], dQ_err=err[1], db_err=err[2], R_err=err[3])


@eqx.filter_jit
def _risk(problem: DriftProblem, state: OrderParameters) -> RiskEstimate:
    M, Q, b = state
    if isinstance(problem.method, Exact):
        r = exact_risk(M, Q, b, problem.model, problem.method.quad)
        return RiskEstimate(r.mean, jnp.zeros_like(r.mean), r.by_atom)
    base = problem.base
    H, k = M.shape[0], base.xi.shape[-1]
    if k < H:  # identical heads of a group share their projections: repeat the columns
        base = BaseSamples(base.nu, jnp.tile(base.xi, (1, 1, -(-H // k)))[..., :H], base.theta)
    return population_risk(M, Q, b, problem.activation, problem.law, base)


@eqx.filter_jit
def _field(problem: DriftProblem, state: OrderParameters, factor) -> OrderParameters:
    return problem.field_at(state, factor)
