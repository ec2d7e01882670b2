"""The grouped exact risk (core/grouped.py) against the full one at the expanded state: two
routes through the same quadrature (G(G + 1)/2 kinds of pairs with multiplicities vs H(H − 1)/2
pairs). The full route is not exactly symmetric among identical heads: in a pair the first and
the second head take different roles in the quadrature (outer score, blurred kernel), whose
errors differ by ~1e-12 (measured: R_M of three identical softmax-1 heads ±1.5e-12 apart), while
the grouped route counts each kind of pair once. So the grouped gradient is compared with the
full one averaged over the heads of each group (and over each kind of Q entry), to round-off
(1e-13 relative to the largest entry), and the full route's spread about it is bounded by 1e-10."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from headspec.core.attention import BayesSoftmax, Softmax, Softmax1
from headspec.core.exact import exact_risk
from headspec.core.grouped import expand_groups, grouped_risk_and_gradient
from headspec.core.latent import Discrete, Gaussian
from headspec.core.model import Model
from headspec.core.precision import float64_context
from helpers import covering

LAWS = {
    "discrete": Discrete([[3.0, 0.0], [0.0, 3.0]], [0.7, 0.3]),
    "gaussian": Gaussian([1.0, 0.5], var=[1.0, 0.3]),
}
TOL = 1e-13  # round-off of sums of ~10² terms in another order
SPREAD = 1e-10  # the full route's asymmetry among identical heads (measured ≤ 1.5e-12)


def _state(G: int, seed: int):
    rng = np.random.default_rng(seed)
    M = 0.7 * rng.normal(size=(G, 2))
    A = 0.5 * rng.normal(size=(G, G))
    Q = M @ M.T + A @ A.T + 0.2 * np.eye(G)
    return jnp.asarray(M), jnp.asarray(Q), jnp.asarray(0.3 * rng.normal(size=G))


def _full_gradient(M, Q, b, model):
    return jax.value_and_grad(lambda *s: exact_risk(*s, model).mean, argnums=(0, 1, 2))(M, Q, b)


def _close(a, b, tol=TOL):
    a, b = np.asarray(a), np.asarray(b)
    assert np.abs(a - b).max() <= tol * max(1.0, np.abs(b).max()), np.abs(a - b).max()


def _symmetrised(R_M, R_Q, R_b, sizes):
    """The full gradient averaged over each group's heads (R_M, R_b rows) and over each kind of
    Q entry (a head's own, two heads of one group, one head of g and one of g')."""
    idx = np.repeat(np.arange(len(sizes)), sizes)
    R_M, R_Q, R_b = (np.asarray(x) for x in (R_M, R_Q, R_b))
    avg = lambda x, mask: x[mask].mean(0)  # noqa: E731
    M = np.stack([avg(R_M, idx == g) for g in idx])
    b = np.array([avg(R_b, idx == g) for g in idx])
    rows, cols = np.meshgrid(idx, idx, indexing="ij")
    kind = np.stack([rows, cols, np.eye(len(idx), dtype=int)], -1)  # (H, H, 3)
    Q = np.array([[avg(R_Q, (kind == kind[i, j]).all(-1)) for j in range(len(idx))]
                  for i in range(len(idx))])  # fmt: skip
    return M, Q, b


_ACTS_LAWS = [
    (Softmax(), "discrete"),
    (Softmax1(), "discrete"),
    (Softmax(aggregation="sum"), "gaussian"),
]


@pytest.mark.parametrize(
    ("act", "law", "sizes"),
    covering(
        _ACTS_LAWS,
        [(3, 1), (2, 2), (1, 2, 1)],
        ids=lambda a, s: f"{a[0].name}-{a[0].aggregation}-{a[1]}-{'.'.join(map(str, s))}",
    ),
)  # README tier: each activation with one grouping, each grouping once (helpers.covering)
def test_grouped_risk_and_gradient_equal_the_full_ones(act, law, sizes):
    model = Model(act, LAWS[law], L=10)
    with float64_context():
        M, Q, b = _state(len(sizes), seed=len(sizes))
        g = grouped_risk_and_gradient(M, Q, b, sizes, model)
        R, (R_M, R_Q, R_b) = _full_gradient(*expand_groups(M, Q, b, sizes), model)
    _close(g.R, R)
    sym = _symmetrised(R_M, R_Q, R_b, sizes)
    for got, want, full in zip((g.R_M, g.R_Q, g.R_b), sym, (R_M, R_Q, R_b), strict=True):
        _close(got, want)
        _close(full, want, SPREAD)


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_second_derivatives_along_the_reduced_coordinates():
    """jacfwd of the grouped gradient = jacfwd of the full gradient at expand(x) (chain rule),
    symmetrised as above."""
    sizes = (3, 1)
    model = Model(Softmax(), LAWS["discrete"], L=10)
    with float64_context():
        M, Q, b = _state(2, seed=3)

        def grouped(M, Q, b):
            return grouped_risk_and_gradient(M, Q, b, sizes, model)[1:]

        def full(M, Q, b):
            return _full_gradient(*expand_groups(M, Q, b, sizes), model)[1]

        got = jax.jacfwd(grouped, argnums=(0, 1, 2))(M, Q, b)  # [output][input]
        want = jax.jacfwd(full, argnums=(0, 1, 2))(M, Q, b)
    for k in range(3):  # each input: the outputs R_M, R_Q, R_b, symmetrised over the groups
        sym = _symmetrised(want[0][k], want[1][k], want[2][k], sizes)
        for out in range(3):
            _close(got[out][k], sym[out])


def test_bayes_softmax_is_refused():
    model = Model(BayesSoftmax(), LAWS["discrete"], L=10)
    with pytest.raises(TypeError, match="couple in pairs"):
        grouped_risk_and_gradient(*_state(2, seed=0), (2, 2), model)


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_a_third_derivative_of_the_pair_terms_raises_instead_of_giving_zero():
    """The second derivatives loop over pairs; differentiating them once more would silently
    give 0 (a custom JVP inside lax.map, JAX 0.10: 0.0 against 0.0028 by finite differences of
    the second derivative, measured), so forward mode raises (reverse mode, grad∘grad∘grad,
    still gives 0: documented as not supported in core/exact.py)."""
    model = Model(Softmax(), LAWS["discrete"], L=10)
    with float64_context():
        M, Q, b = _state(2, seed=1)

        def f(s):
            return exact_risk(M, Q.at[0, 1].add(s).at[1, 0].add(s), b, model).mean

        d2 = jax.jacfwd(jax.grad(f))
        assert np.isfinite(float(d2(0.0)))
        with pytest.raises(NotImplementedError, match="third and higher derivatives"):
            jax.jacfwd(d2)(0.0)
