"""Tests of the activations, the predictor and the losses (SPEC §3–§4, headspec.core.attention)."""

from __future__ import annotations

import math

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headspec.core.attention import (
    ACTIVATIONS,
    BayesSoftmax,
    Heads,
    Softmax,
    Softmax1,
    default_bias,
    get_activation,
    loss_finite,
    loss_projected,
    predict,
    scores,
)
from headspec.core.latent import Spike
from headspec.core.task import Task, project, sample_batch

NAMES = ("softmax", "softmax1", "bayes_softmax")
DEFAULT_AGG = {"softmax": "mean", "softmax1": "sum", "bayes_softmax": "sum"}
COMBOS = [(name, agg) for name in NAMES for agg in ("mean", "sum")]

HYP = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)


# ---------------------------------------------------------------- references


def loop_reference(s, name, aggregation):
    """Plain-python attention weights A (H, L) with explicit loops; moderate scores only."""
    s = np.asarray(s, dtype=np.float64)
    H, L = s.shape
    A = np.zeros((H, L))
    if name == "bayes_softmax":
        total = 0.0
        for h in range(H):
            for l in range(L):
                total += math.exp(s[h, l])
        for h in range(H):
            for l in range(L):
                A[h, l] = math.exp(s[h, l]) / total
    else:
        for h in range(H):
            den = 1.0 if name == "softmax1" else 0.0
            for l in range(L):
                den += math.exp(s[h, l])
            for l in range(L):
                A[h, l] = math.exp(s[h, l]) / den
    if aggregation == "mean":
        for h in range(H):
            for l in range(L):
                A[h, l] /= H
    return A


def stable_reference(s, name, aggregation):
    """NumPy max-shifted reference (H, L), valid for any finite scores."""
    s = np.asarray(s, dtype=np.float64)
    H = s.shape[0]
    if name == "softmax":
        e = np.exp(s - s.max(axis=1, keepdims=True))
        A = e / e.sum(axis=1, keepdims=True)
    elif name == "softmax1":
        m = np.maximum(s.max(axis=1, keepdims=True), 0.0)
        e = np.exp(s - m)
        A = e / (np.exp(-m) + e.sum(axis=1, keepdims=True))
    else:
        e = np.exp(s - s.max())
        A = e / e.sum()
    return A / H if aggregation == "mean" else A


def agg_factor(name, aggregation, H):
    """Multiplier of the total mass relative to the default aggregation."""
    if aggregation == DEFAULT_AGG[name]:
        return 1.0
    return H if aggregation == "sum" else 1.0 / H


def weights(name, aggregation, s):
    return np.asarray(get_activation(name, aggregation)(jnp.asarray(s, dtype=jnp.float64)))


score_arrays = st.tuples(st.integers(1, 5), st.integers(2, 8)).flatmap(
    lambda shape: hnp.arrays(
        np.float64,
        shape,
        elements=st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False, width=64),
    )
)


# ---------------------------------------------------------------- 1. total mass


@pytest.mark.parametrize("H,L", [(1, 2), (3, 5), (4, 7)])
def test_softmax_mean_total_mass_is_one(H, L):
    s = np.random.default_rng(H * 10 + L).normal(scale=3.0, size=(H, L))
    A = weights("softmax", None, s)
    assert A.shape == (H, L)
    assert abs(A.sum() - 1.0) < 1e-13
    np.testing.assert_allclose(A.sum(axis=1), np.full(H, 1.0 / H), atol=1e-14)


@pytest.mark.parametrize("H,L", [(1, 2), (3, 5), (4, 7)])
def test_bayes_softmax_total_mass_is_one(H, L):
    s = np.random.default_rng(H * 10 + L + 1).normal(scale=3.0, size=(H, L))
    A = weights("bayes_softmax", None, s)
    assert abs(A.sum() - 1.0) < 1e-13
    # joint normalisation: the head masses are not all equal in general
    if H > 1:
        assert np.ptp(A.sum(axis=1)) > 1e-3


@pytest.mark.parametrize("H,L", [(1, 2), (3, 5), (4, 7)])
def test_softmax1_sum_mass_between_zero_and_H(H, L):
    s = np.random.default_rng(H * 10 + L + 2).normal(scale=3.0, size=(H, L))
    A = weights("softmax1", None, s)
    head = A.sum(axis=1)
    assert np.all(head > 0.0) and np.all(head < 1.0)
    assert 0.0 < A.sum() < H
    # per-head mass is Σe^s / (1 + Σe^s), strictly below 1 (the "1" is a logit 0)
    se = np.exp(s).sum(axis=1)
    np.testing.assert_allclose(head, se / (1.0 + se), rtol=1e-13)


def test_softmax1_head_can_go_silent():
    s = np.array([[-50.0, -60.0, -55.0], [3.0, 1.0, 2.0]])
    A = weights("softmax1", None, s)
    assert A[0].sum() < 1e-20
    assert 0.5 < A[1].sum() < 1.0


@pytest.mark.parametrize("name,aggregation", COMBOS)
def test_other_aggregation_scales_by_H(name, aggregation):
    H, L = 4, 6
    s = np.random.default_rng(7).normal(scale=2.0, size=(H, L))
    A_default = weights(name, None, s)
    A = weights(name, aggregation, s)
    factor = agg_factor(name, aggregation, H)
    np.testing.assert_allclose(A, factor * A_default, rtol=1e-14, atol=0)
    if name == "softmax":
        assert abs(A.sum() - (1.0 if aggregation == "mean" else H)) < 1e-13
    elif name == "bayes_softmax":
        assert abs(A.sum() - (1.0 if aggregation == "sum" else 1.0 / H)) < 1e-13
    else:
        upper = H if aggregation == "sum" else 1.0
        assert 0.0 < A.sum() < upper
        assert np.all(A.sum(axis=1) < upper / H)


def test_default_aggregations():
    assert Softmax().aggregation == "mean"
    assert Softmax1().aggregation == "sum"
    assert BayesSoftmax().aggregation == "sum"
    for name in NAMES:
        act = get_activation(name)
        assert isinstance(act, ACTIVATIONS[name])
        assert act.aggregation == DEFAULT_AGG[name]
        assert get_activation(name, "mean").aggregation == "mean"
        assert get_activation(name, "sum").aggregation == "sum"


def test_token_weights_sum_over_heads():
    s = np.random.default_rng(3).normal(size=(2, 3, 4, 5))  # (batch..., H, L)
    for name, agg in COMBOS:
        act = get_activation(name, agg)
        W = np.asarray(act.token_weights(jnp.asarray(s)))
        assert W.shape == (2, 3, 5)
        np.testing.assert_allclose(W, np.asarray(act(jnp.asarray(s))).sum(axis=-2), rtol=1e-14)


@pytest.mark.parametrize("name,aggregation", COMBOS)
def test_leading_batch_axes_are_independent(name, aggregation):
    """Scores (..., H, L): each sample is normalised on its own (batch axes never mix)."""
    s = np.random.default_rng(11).normal(scale=2.0, size=(3, 2, 4, 5))
    A = np.asarray(get_activation(name, aggregation)(jnp.asarray(s)))
    for i in range(3):
        for j in range(2):
            np.testing.assert_allclose(
                A[i, j], loop_reference(s[i, j], name, aggregation), rtol=1e-12, atol=1e-15
            )


# ---------------------------------------------------------------- 2. invariances


@pytest.mark.parametrize(
    "activation, shifts",
    [
        ("softmax", lambda rng: [rng.normal(scale=30.0, size=(4, 1))]),  # one shift per head
        ("bayes_softmax", lambda rng: [-37.5, 0.3, 120.0]),  # one shift common to every head
    ],
)
def test_weights_invariant_under_their_shifts(activation, shifts):
    rng = np.random.default_rng(20)
    s = rng.normal(scale=2.0, size=(4, 6))
    for c in shifts(rng):
        for agg in ("mean", "sum"):
            np.testing.assert_allclose(
                weights(activation, agg, s + c), weights(activation, agg, s), atol=1e-13
            )


def test_bayes_softmax_not_invariant_under_per_head_shift():
    rng = np.random.default_rng(22)
    s = rng.normal(scale=2.0, size=(3, 5))
    c = np.array([[0.0], [1.0], [-2.0]])
    A0 = weights("bayes_softmax", None, s)
    A1 = weights("bayes_softmax", None, s + c)
    assert np.max(np.abs(A1 - A0)) > 1e-2
    # per-head shifts act as head priors: head masses re-weighted by e^{c_h}
    m0, m1 = A0.sum(axis=1), A1.sum(axis=1)
    ratio = m1 / (m0 * np.exp(c[:, 0]))
    np.testing.assert_allclose(ratio, np.full(3, ratio[0]), rtol=1e-12)
    # within a head, positions keep their relative weights
    np.testing.assert_allclose(A1 / A1.sum(axis=1, keepdims=True), A0 / m0[:, None], rtol=1e-12)


def test_softmax1_not_shift_invariant():
    rng = np.random.default_rng(23)
    s = rng.normal(scale=1.0, size=(3, 5))
    A0 = weights("softmax1", None, s)
    for c in (-2.0, 1.5):
        A1 = weights("softmax1", None, s + c)
        assert np.max(np.abs(A1 - A0)) > 1e-2
        if c > 0:
            assert np.all(A1.sum(axis=1) > A0.sum(axis=1))
        else:
            assert np.all(A1.sum(axis=1) < A0.sum(axis=1))


# ---------------------------------------------------------------- 3. loop reference


@pytest.mark.parametrize("name,aggregation", COMBOS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agrees_with_loop_reference(name, aggregation, seed):
    rng = np.random.default_rng(100 + seed)
    H, L = int(rng.integers(1, 6)), int(rng.integers(2, 9))
    s = rng.normal(scale=3.0, size=(H, L))
    A = weights(name, aggregation, s)
    assert A.dtype == np.float64
    np.testing.assert_allclose(A, loop_reference(s, name, aggregation), rtol=1e-12, atol=1e-15)


def test_docstring_example_extreme_scores():
    s = jnp.array([[0.0, 1e4, -1e4]])
    assert Softmax()(s).tolist() == [[0.0, 1.0, 0.0]]
    assert Softmax1()(s).sum().item() == 1.0


# ---------------------------------------------------------------- 4. extreme scores


@jax.jit
def _all_weights_and_grads(s, R):
    """Weights and ∇_s Σ A∘R for every (activation, aggregation); one compile per shape."""
    out = {}
    for name, agg in COMBOS:
        act = get_activation(name, agg)
        out[name, agg] = (act(s), jax.grad(lambda x, act=act: jnp.sum(act(x) * R))(s))
    return out


def _fixed_matrix(shape):
    return np.random.default_rng(shape[0] * 100 + shape[1]).normal(size=shape)


@HYP
@given(s=score_arrays)
def test_weights_and_gradients_finite_bounded_at_extreme_scores(s):
    """One example's weights (finite, in their bounds, equal to the stable reference, the right
    total mass) and the gradient of a fixed linear functional of them (finite), every activation
    and aggregation: both from one evaluation, so each drawn shape is traced once."""
    H, L = s.shape
    out = _all_weights_and_grads(jnp.asarray(s), jnp.asarray(_fixed_matrix(s.shape)))
    for name, aggregation in COMBOS:
        A = np.asarray(out[name, aggregation][0])
        factor = agg_factor(name, aggregation, H)
        hmax = 1.0 if aggregation == "sum" else 1.0 / H  # bound on one head's mass
        assert A.shape == (H, L)
        assert np.all(np.isfinite(A))
        assert np.all(A >= 0.0) and np.all(A <= hmax * (1 + 1e-12))
        np.testing.assert_allclose(A, stable_reference(s, name, aggregation), rtol=1e-9, atol=1e-10)
        total = A.sum()
        if name == "softmax":
            assert abs(total - factor) < 1e-10
            np.testing.assert_allclose(A.sum(axis=1), np.full(H, hmax), atol=1e-10)
        elif name == "bayes_softmax":
            assert abs(total - factor) < 1e-10
        else:
            assert np.all(A.sum(axis=1) <= hmax * (1 + 1e-12))
            assert 0.0 <= total <= H * hmax * (1 + 1e-12)
        g = np.asarray(out[name, aggregation][1])
        assert g.shape == s.shape
        assert np.all(np.isfinite(g)), (name, aggregation)


@pytest.mark.parametrize("name,aggregation", COMBOS)
def test_explicit_extreme_case(name, aggregation):
    s = np.array([[0.0, 1e4, -1e4]])
    A = weights(name, aggregation, s)
    # H = 1: every activation puts (numerically) all the mass on position 1
    np.testing.assert_array_equal(A, [[0.0, 1.0, 0.0]])
    act = get_activation(name, aggregation)
    R = jnp.asarray([[0.3, -1.2, 0.7]])
    g = np.asarray(jax.grad(lambda x: jnp.sum(act(x) * R))(jnp.asarray(s)))
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, 0.0, atol=1e-300)

    s2 = np.array([[0.0, 1e4, -1e4], [-1e4, -1e4, -1e4], [1e4, 1e4, -1e4]])
    A2 = weights(name, aggregation, s2)
    assert np.all(np.isfinite(A2))
    np.testing.assert_allclose(A2, stable_reference(s2, name, aggregation), atol=1e-12)
    g2 = np.asarray(jax.grad(lambda x: jnp.sum(act(x) ** 2))(jnp.asarray(s2)))
    assert np.all(np.isfinite(g2))


@pytest.mark.parametrize("name,aggregation", COMBOS)
def test_gradient_matches_finite_differences(name, aggregation):
    rng = np.random.default_rng(5)
    s = rng.normal(scale=1.5, size=(3, 4))
    R = rng.normal(size=(3, 4))
    act = get_activation(name, aggregation)
    g = np.asarray(jax.grad(lambda x: jnp.sum(act(x) * R))(jnp.asarray(s)))

    def f(x):
        return float(np.sum(loop_reference(x, name, aggregation) * R))

    fd = np.zeros_like(s)
    h = 1e-6
    for i in range(3):
        for j in range(4):
            e = np.zeros_like(s)
            e[i, j] = h
            fd[i, j] = (f(s + e) - f(s - e)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------- 5. predictor and losses


def _random_problem(seed, n=3, H=3, L=5, D=7):
    rng = np.random.default_rng(seed)
    K = rng.normal(size=(H, D))
    b = rng.normal(scale=0.5, size=(H,))
    X = rng.normal(size=(n, L, D))
    return K, b, X


def test_scores_explicit():
    K, b, X = _random_problem(30)
    n, L, D = X.shape
    H = K.shape[0]
    s = np.asarray(scores(jnp.asarray(K), jnp.asarray(b), jnp.asarray(X)))
    assert s.shape == (n, H, L)
    for i in range(n):
        for h in range(H):
            for l in range(L):
                ref = sum(K[h, d] * X[i, l, d] for d in range(D)) / math.sqrt(D) + b[h]
                assert abs(s[i, h, l] - ref) < 1e-12


@pytest.mark.parametrize("name,aggregation", COMBOS)
def test_predict_matches_explicit_loop(name, aggregation):
    K, b, X = _random_problem(31)
    n, L, D = X.shape
    H = K.shape[0]
    act = get_activation(name, aggregation)
    yhat = np.asarray(predict(jnp.asarray(K), jnp.asarray(b), jnp.asarray(X), act))
    assert yhat.shape == (n, D)
    for i in range(n):
        s = np.zeros((H, L))
        for h in range(H):
            for l in range(L):
                s[h, l] = float(np.dot(K[h], X[i, l])) / math.sqrt(D) + b[h]
        A = loop_reference(s, name, aggregation)
        y = np.zeros(D)
        for h in range(H):
            for l in range(L):
                y += A[h, l] * X[i, l]
        np.testing.assert_allclose(yhat[i], y, rtol=1e-12, atol=1e-13)

    # unbatched tokens (L, D) give the same as one row of the batch
    y0 = np.asarray(predict(jnp.asarray(K), jnp.asarray(b), jnp.asarray(X[0]), act))
    np.testing.assert_allclose(y0, yhat[0], rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("name,aggregation", COMBOS)
def test_heads_token_weights_match_predict(name, aggregation):
    L, D, H = 6, 40, 3
    task = Task.create(jax.random.key(0), Spike([2.0, -1.0]), L=L, D=D)
    batch = sample_batch(jax.random.key(1), task, n=16)
    rng = np.random.default_rng(32)
    M = jnp.asarray(rng.normal(size=(H, task.F)))
    b = jnp.asarray(rng.normal(scale=0.7, size=(H,)))
    K = task.keys_from_overlaps(M)  # (H, D)
    act = get_activation(name, aggregation)

    lam = batch.X @ K.T / jnp.sqrt(D)  # (n, L, H)
    nu = project(task, batch.X)  # (n, L, F)
    W = Heads(M, b, act).token_weights(lam, nu)  # (n, L)
    assert W.shape == (16, L)
    yhat_heads = jnp.einsum("nl,nld->nd", W, batch.X)
    yhat = predict(K, b, batch.X, act)
    np.testing.assert_allclose(np.asarray(yhat_heads), np.asarray(yhat), rtol=1e-11, atol=1e-12)

    # keys realised from the overlaps have K K*/D = M
    np.testing.assert_allclose(np.asarray(K @ task.Kstar / D), np.asarray(M), atol=1e-12)


def test_heads_defaults():
    heads = Heads([[1.0, 2.0], [0.5, -1.0]])
    assert heads.n_heads == 2
    np.testing.assert_array_equal(np.asarray(heads.b), [0.0, 0.0])
    np.testing.assert_allclose(np.asarray(heads.Q), np.asarray(heads.M @ heads.M.T))
    assert isinstance(heads.activation, Softmax)


def test_loss_finite_explicit():
    rng = np.random.default_rng(40)
    yhat, y = rng.normal(size=(4, 9)), rng.normal(size=(4, 9))
    ell = np.asarray(loss_finite(jnp.asarray(yhat), jnp.asarray(y)))
    assert ell.shape == (4,)
    for i in range(4):
        ref = sum((yhat[i, d] - y[i, d]) ** 2 for d in range(9)) / (2 * 9)
        assert abs(ell[i] - ref) < 1e-14
    # ŷ = 0 and y of squared norm D gives ½
    y1 = np.ones((1, 9))
    assert abs(float(loss_finite(jnp.zeros((1, 9)), jnp.asarray(y1))[0]) - 0.5) < 1e-15


def test_loss_projected_explicit():
    rng = np.random.default_rng(41)
    W = rng.uniform(size=(5, 6))
    eps = rng.integers(0, 6, size=5)
    ell = np.asarray(loss_projected(jnp.asarray(W), jnp.asarray(eps)))
    assert ell.shape == (5,)
    for i in range(5):
        ref = 0.5 * sum((W[i, l] - (1.0 if l == eps[i] else 0.0)) ** 2 for l in range(6))
        assert abs(ell[i] - ref) < 1e-14
    # SPEC §4 reference values: W = 0 → ½, uniform → ½(1 − 1/L)
    L = 6
    z = loss_projected(jnp.zeros((1, L)), jnp.asarray([2]))
    u = loss_projected(jnp.full((1, L), 1.0 / L), jnp.asarray([4]))
    assert abs(float(z[0]) - 0.5) < 1e-15
    assert abs(float(u[0]) - 0.5 * (1 - 1 / L)) < 1e-15


def test_losses_agree_for_orthogonal_tokens():
    """With x_l·x_l' = D δ_ll', |Σ W_l x_l − x_ε|²/(2D) = ½ Σ_l (W_l − 1[l=ε])² exactly."""
    rng = np.random.default_rng(42)
    n, L, D = 4, 5, 12
    X = np.stack([np.linalg.qr(rng.normal(size=(D, L)))[0].T * math.sqrt(D) for _ in range(n)])
    W = rng.normal(size=(n, L))
    eps = rng.integers(0, L, size=n)
    yhat = np.einsum("nl,nld->nd", W, X)
    y = X[np.arange(n), eps]
    np.testing.assert_allclose(
        np.asarray(loss_finite(jnp.asarray(yhat), jnp.asarray(y))),
        np.asarray(loss_projected(jnp.asarray(W), jnp.asarray(eps))),
        rtol=1e-12,
    )


@pytest.mark.parametrize("H,L", [(1, 4), (2, 3), (3, 5), (8, 10)])
def test_default_bias_values(H, L):
    assert default_bias("softmax", H, L) == 0.0
    assert default_bias("bayes_softmax", H, L) == 0.0
    b0 = default_bias("softmax1", H, L)
    assert isinstance(b0, float)
    if H == 1:
        assert b0 == 0.0
    else:
        assert abs(b0 - (-math.log(L * (H - 1)))) < 1e-14


@pytest.mark.parametrize("H,L", [(2, 3), (3, 5), (8, 10), (5, 2)])
def test_softmax1_default_bias_gives_initial_mass_one(H, L):
    """SPEC §4: with k = 0 and b_h = b0 every head carries 1/H, total mass 1."""
    D = 11
    K = jnp.zeros((H, D))
    b = jnp.full((H,), default_bias("softmax1", H, L))
    X = jnp.asarray(np.random.default_rng(H + L).normal(size=(4, L, D)))
    act = get_activation("softmax1")
    A = np.asarray(act(scores(K, b, X)))  # (4, H, L)
    np.testing.assert_allclose(A.sum(axis=(-2, -1)), 1.0, atol=1e-14)
    np.testing.assert_allclose(A.sum(axis=-1), 1.0 / H, atol=1e-14)
    np.testing.assert_allclose(A, 1.0 / (H * L), atol=1e-15)


def test_softmax1_H1_default_bias_mass():
    L = 4
    b0 = default_bias("softmax1", 1, L)
    A = weights("softmax1", None, np.full((1, L), b0))
    assert abs(A.sum() - L / (L + 1)) < 1e-14


# ---------------------------------------------------------------- 6. get_activation errors


def test_unknown_activation_raises_naming_choices():
    with pytest.raises(ValueError) as info:
        get_activation("relu")
    msg = str(info.value)
    assert "relu" in msg
    for name in NAMES:
        assert repr(name) in msg


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad", ["max", "Mean", "avg"])
def test_bad_aggregation_raises_naming_choices(name, bad):
    with pytest.raises(ValueError) as info:
        get_activation(name, bad)
    msg = str(info.value)
    assert "'mean'" in msg and "'sum'" in msg and bad in msg
    with pytest.raises(ValueError):
        ACTIVATIONS[name](aggregation=bad)
