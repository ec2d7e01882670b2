"""Every deterministic number carries an error bound that covers its true error (issue 52).

The exact method's values — the risk, the η-linear drift, the Jacobian's eigenvalues, a fixed
point's residual, the ODE's vector field — come with ``accuracy.error_bound``:
SAFETY (2) × |value − the same value on ``Quadrature.refined()`` (1.4× the nodes)| + a round-off
floor. The rules converge exponentially in their node counts, so the refined value's own error is
far smaller than the difference and the bound is ≈ 2× the true error. Here the "true" error is
measured against a third rule with 3× the nodes, on random valid states:

- default tier: one plateau-like state (the bound below 1e-8 and covering the 3× rule), and the
  ODE's path bound against a run redone on the refined rule;
- slow tier: a derandomised hypothesis property (H ≤ 3, F ≤ 3, overlaps 0.01 … the reach,
  biases ±5, the three activations; Bayes-softmax to H = 2 — at H = 3 a 3× rule exceeds the
  quadrature's size guard): the bound covers the true error in every entry of R and the drift;
  and 120 random states: coverage ≥ 95 % and the bound never below a third of the true error
  (the issue's criteria), the certified risk against 2¹⁸ Sobol points within the bound plus
  4 standard errors.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headspec.core.accuracy import reach
from headspec.core.attention import BayesSoftmax, Softmax, Softmax1
from headspec.core.exact import Quadrature, exact_risk
from headspec.core.latent import Discrete
from headspec.core.model import Model
from headspec.core.observables import BaseSamples, population_risk
from headspec.core.precision import float64_context
from headspec.dynamics.problem import DriftProblem, Exact, OrderParameters, Sampled

ACTIVATIONS = {"softmax": Softmax(), "softmax1": Softmax1(), "bayes": BayesSoftmax()}
REFERENCE = Quadrature().refined(3.0)  # the "true" value's rule
L = 8


def _case(rng: np.random.Generator, H: int, F: int, log_scale: float):
    """A random valid state (M, Q ⪰ MMᵀ, b) with max Q_hh = 10^log_scale and a discrete law of
    F atoms ±3·e_f with random probabilities."""
    M = rng.normal(size=(H, F))
    W = rng.normal(size=(H, H))
    Q = M @ M.T + W @ W.T
    c = 10.0**log_scale / np.max(np.diag(Q))
    M, Q = M * np.sqrt(c), Q * c
    b = rng.uniform(-5, 5, H)
    atoms = 3.0 * np.eye(F) * rng.choice([-1.0, 1.0], size=F)
    law = Discrete(atoms=atoms.tolist(), probs=rng.dirichlet(np.ones(F)).tolist())
    return OrderParameters(jnp.asarray(M), jnp.asarray(Q), jnp.asarray(b)), law


def _values(drift) -> np.ndarray:
    return np.concatenate([[float(drift.R)], *(np.ravel(x) for x in drift[:3])])


def _errors(drift) -> np.ndarray:
    return np.concatenate([[float(drift.R_err)], *(np.ravel(x) for x in drift[8:11])])


def _certified_and_true(state, law, activation):
    """(value, bound, reference) of (R, η-linear drift) flattened."""
    model = Model(activation, law, L)
    base = BaseSamples.sobol(0, law, L, state.M.shape[0], 16)
    d = DriftProblem(model, lr=1.0, method=Exact(base), eta2=False).drift(state)
    ref = Exact(base, quad=REFERENCE)
    with float64_context():
        R, lin = ref.linear(DriftProblem(model, lr=1.0, method=ref, eta2=False), state, 1.0, 1.0)
    true = np.concatenate([[float(R)], *(np.ravel(x) for x in lin)])
    return _values(d), _errors(d), true


@pytest.mark.slow  # 5 examples, 3 rules each: 25 s of the README tier's CI (2 cores)
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(
    name=st.sampled_from(sorted(ACTIVATIONS)),
    H=st.integers(1, 3),
    F=st.integers(1, 3),
    log_scale=st.floats(-2.0, np.log10(reach(Quadrature())) - 0.01),
    seed=st.integers(0, 2**16),
)
def test_the_error_bound_covers_the_true_error(name, H, F, log_scale, seed):
    if name == "bayes" and H == 3:
        H = 2  # a 3× reference rule for three Bayes-softmax heads exceeds the size guard
    log_scale = min(log_scale, np.log10(reach(Quadrature(), ACTIVATIONS[name])) - 0.01)
    state, law = _case(np.random.default_rng(seed), H, F, log_scale)
    value, bound, true = _certified_and_true(state, law, ACTIVATIONS[name])
    assert np.all(np.isfinite(bound)) and np.all(bound > 0)
    miss = np.abs(value - true) - bound
    assert np.all(miss <= 0), (
        f"{name} H={H} F={F} max Q_hh=10^{log_scale:.2f}: |error| above the bound by "
        f"{miss.max():.2e} (bound {bound[np.argmax(miss)]:.2e})"
    )


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_certified_risk_of_the_issue_example_and_its_bound():
    """exact_risk(certify=True): the bound is ~2× the error against the 3× rule, far below the
    old stated accuracy (1e-8) at a plateau-like state."""
    law = Discrete(atoms=[[3.0, 0.0], [0.0, 3.0]], probs=[0.7, 0.3])
    model = Model(Softmax(), law, L=10)
    M, Q, b = jnp.full((2, 2), 0.4), jnp.array([[1.0, 0.3], [0.3, 1.0]]), jnp.zeros(2)
    r = exact_risk(M, Q, b, model, certify=True)
    ref = exact_risk(M, Q, b, model, REFERENCE)
    assert abs(float(r.mean) - float(ref.mean)) <= float(r.err) < 1e-8
    assert np.all(np.abs(np.asarray(r.by_atom) - np.asarray(ref.by_atom)) <= r.by_atom_err)
    plain = exact_risk(M, Q, b, model)
    assert float(plain.mean) == float(r.mean) and np.isnan(float(plain.err))


@pytest.mark.slow
def test_coverage_over_random_states_and_against_sobol():
    """120 random states (activations in turn, H ≤ 3, F ≤ 3, max Q_hh from 0.01 to the reach):
    the bound covers the true error in ≥ 95 % of the (state, entry) pairs whose error is above
    round-off, and is never below a third of it; the certified risk agrees with 2¹⁸ Sobol points
    within its bound plus 4 s.e. on every tenth state."""
    rng = np.random.default_rng(52)
    covered, n, worst = 0, 0, 0.0
    names = sorted(ACTIVATIONS)
    for k in range(120):
        name = names[k % 3]
        H = int(rng.integers(1, 3 if name == "bayes" else 4))
        F = int(rng.integers(1, 4))
        top = np.log10(reach(Quadrature(), ACTIVATIONS[name])) - 0.01  # its own reach
        state, law = _case(rng, H, F, rng.uniform(-2.0, top))
        value, bound, true = _certified_and_true(state, law, ACTIVATIONS[name])
        err = np.abs(value - true)
        real = err > 1e-12 * np.maximum(1.0, np.abs(true))  # above round-off
        covered += int(np.sum(err[real] <= bound[real]))
        n += int(real.sum())
        worst = max(worst, float(np.max(err / bound)))
        if k % 10 == 0:
            base = BaseSamples.sobol(k, law, L, H, 2**18)
            with float64_context():
                mc = population_risk(*state, ACTIVATIONS[name], law, base)
            assert abs(float(mc.mean) - value[0]) <= bound[0] + 4 * float(mc.se)
    assert n == 0 or covered / n >= 0.95, f"covered {covered}/{n}"
    assert worst <= 3.0, f"the bound understated an error {worst:.2f}×"


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_the_odes_path_bound_covers_the_path_on_the_refined_rule():
    """integrate(certify=True) with the exact drift records the vector field's bound between its
    solves;
    its integral over t bounds how far the trajectory moves when the whole run is redone on the
    refined rule (two softmax heads, η-linear drift, T = 4: short of any plateau, so nothing
    amplifies the errors), and is far below the old stated accuracy (measured: the path moved
    2.0e-8, its bound 3.9e-8)."""
    from headspec.core.schedules import Constant
    from headspec.dynamics.ode import Solver, integrate

    law = Discrete(atoms=[[3.0, 0.0], [0.0, 3.0]], probs=[0.7, 0.3])
    model = Model(Softmax(), law, L=10)
    base = BaseSamples.sobol(0, law, 10, 2, 16)
    problem = DriftProblem(model, lr=1.0, method=Exact(base), eta2=False)
    y0 = OrderParameters(jnp.array([[[0.3, 0.1], [0.1, 0.2]]]),
                         jnp.array([[[0.5, 0.05], [0.05, 0.4]]]), jnp.zeros((1, 2)))  # fmt: skip
    ts = np.linspace(0.0, 4.0, 9)
    solver = Solver(1e-10, 1e-12)
    run = integrate(y0, ts, problem, base, Constant(), solver=solver, certify=True)
    fine = integrate(y0, ts, problem.refined(), base, Constant(), solver=solver)
    assert fine.drift_err.shape == (1, 0)  # not asked for
    assert run.drift_err.shape[0] == 1 and np.all(np.isfinite(run.drift_err))
    path = float(run.path_err()[0])
    moved = max(np.abs(getattr(run.obs[-1], k) - getattr(fine.obs[-1], k)).max() for k in "MQb")
    assert moved <= path < 1e-6, (moved, path)
    sampled = DriftProblem(model, lr=1.0, method=Sampled(base), eta2=False)
    assert integrate(y0, ts[:2], sampled, base, Constant(), certify=True).drift_err.shape == (1, 0)
