"""Pruning on constructed models whose answers are known."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from headspec.conventions.runs import prune_result
from headspec.core.attention import BayesSoftmax, Softmax, Softmax1
from headspec.core.latent import Discrete, FlippedSpike
from headspec.core.observables import BaseSamples
from headspec.dynamics.bayes import constructed_bayes_softmax
from headspec.dynamics.prune import prune_path

LAW = Discrete([[2.5, 0.0], [0.0, 2.5]], [0.6, 0.4])


def _base(H, law=LAW, n=8192):
    return BaseSamples.draw(jax.random.key(0), law, 10, H, n)


def test_bayes_softmax_optimum_with_a_silent_extra_head():
    opt = constructed_bayes_softmax(LAW)
    M = jnp.concatenate([opt.M, jnp.array([[1.0, 1.0]])])  # extra head, far from both atoms
    Q = jnp.block([[opt.Q, opt.M @ jnp.array([[1.0], [1.0]])], [jnp.array([[2.5, 2.5, 2.0]])]])
    b = jnp.concatenate([opt.b, jnp.array([-60.0])])  # e^-60: silent under the joint softmax
    path = prune_path(M, Q, b, BayesSoftmax(), LAW, _base(3))
    assert path["removed"][0] == 2  # the redundant head goes first …
    assert path["risk"][1] == pytest.approx(path["risk"][0], abs=1e-12)  # … at no cost
    # below the number of atoms the risk jumps (one atom's signal is no longer found)
    assert path["risk"][2] > path["risk"][1] + 0.05
    assert path["risk"][-1] == 0.5
    assert path["n_heads"] == [3, 2, 1, 0]


def test_softmax_duplicated_heads_prune_back_to_the_same_risk():
    """Heads (k1, k1, k2, k2) averaged: removing one copy of each gives the same weights
    (A1 + A2)/2, hence exactly the same risk on the same samples."""
    a = np.array([[2.5, 0.0], [2.5, 0.0], [0.0, 2.5], [0.0, 2.5]])
    M = jnp.asarray(a)
    path = prune_path(M, M @ M.T, jnp.zeros(4), Softmax(), LAW, _base(4))
    assert path["risk"][2] == pytest.approx(path["risk"][0], abs=1e-12)
    first_two = sorted(path["removed"][:2])
    assert first_two[0] in (0, 1) and first_two[1] in (2, 3)  # one copy of each
    assert path["risk"][3] > path["risk"][2] + 0.01  # one direction left: worse


def test_random_order_is_a_permutation_with_the_same_endpoints():
    rng = np.random.default_rng(1)
    M = jnp.asarray(rng.normal(size=(4, 2)))
    Q = M @ M.T + 0.3 * jnp.eye(4)
    b = jnp.asarray(rng.normal(size=4))
    g = prune_path(M, Q, b, Softmax1(), LAW, _base(4), order="greedy")
    r = prune_path(M, Q, b, Softmax1(), LAW, _base(4), order="random", key=jax.random.key(5))
    assert sorted(r["removed"]) == [0, 1, 2, 3]
    assert r["risk"][0] == g["risk"][0] and r["risk"][-1] == g["risk"][-1] == 0.5
    assert g["risk"][1] <= r["risk"][1] + 1e-15  # greedy's first removal is the cheapest
    with pytest.raises(ValueError, match="greedy"):
        prune_path(M, Q, b, Softmax1(), LAW, _base(4), order="alphabetical")


def test_flipped_spike_needs_both_signs():
    law = FlippedSpike([2.5])
    opt = constructed_bayes_softmax(law)
    path = prune_path(opt.M, opt.Q, opt.b, BayesSoftmax(), law, _base(2, law))
    assert path["risk"][1] > path["risk"][0] + 0.05


def test_prune_result_of_a_simulation():
    from headspec.conventions.config import SimulateConfig, load_config
    from headspec.conventions.runs import simulate

    cfg = load_config(
        SimulateConfig,
        overrides=["task.D=40", "task.L=4", "model.H=3", "train.T=1.0", "seeds=2",
                   "record.points=2", "record.n_mc=256", "record.n_test=0"],
    )  # fmt: skip
    ds = simulate(cfg)
    out = prune_result(ds, seed_index=1, n=1024, random_orders=3)
    assert out["n_heads"] == [3, 2, 1, 0]
    assert len(out["random"]) == 3
    assert out["greedy"]["risk"][0] == pytest.approx(float(ds.risk.isel(seed=1, t=-1)), abs=0.05)


def _loop_path(M, Q, b, act, base, removed):
    """Reference: the risk of every sub-model along ``removed``, each computed from its own
    heads' scores with the activation's plain token weights (one sub-model at a time)."""
    from headspec.core.precision import float64_context
    from headspec.dynamics.prune import _all_projections

    with float64_context():
        M, Q, b = (jnp.asarray(x, dtype=jnp.float64) for x in (M, Q, b))
        lam, w = _all_projections(M, Q, LAW, base)  # (A, n, H, L)
        left, out = list(range(M.shape[0])), []
        for c in [None, *removed]:
            if c is not None:
                left.remove(c)
            if not left:
                out.append(0.5)
                continue
            idx = jnp.asarray(left)
            W = act.token_weights(lam[:, :, idx] + b[idx][:, None])  # (A, n, L)
            per_atom = (0.5 * jnp.sum((W - jax.nn.one_hot(0, 10)) ** 2, -1)).mean(-1)  # (A,)
            out.append(float(w @ per_atom))
    return out


@pytest.mark.parametrize(
    "act",
    [
        Softmax(),
        Softmax1(),
        BayesSoftmax(),
        pytest.param(Softmax(aggregation="sum"), marks=pytest.mark.slow),
        pytest.param(BayesSoftmax(aggregation="mean"), marks=pytest.mark.slow),
    ],
    ids=lambda a: f"{a.name}-{a.aggregation}",
)  # fmt: skip  (README tier: each activation with its default aggregation; CI runs the others)
def test_path_equals_sub_models_one_at_a_time(act):
    """All removals priced at once (exclusive prefix/suffix sums over heads) = each sub-model
    computed on its own, to rounding; greedy's choice is the cheapest of the loop's."""
    rng = np.random.default_rng(7)
    H = 5
    M = rng.normal(size=(H, 2)) * 2
    Q, b = M @ M.T + 0.5 * np.eye(H), rng.normal(size=H)
    b[2] = 25.0  # a dominant head: the others' weights must survive its removal
    base = _base(H, n=2048)
    for order in ("greedy", "random"):
        p = prune_path(M, Q, b, act, LAW, base, order=order, key=jax.random.key(3))
        np.testing.assert_allclose(p["risk"], _loop_path(M, Q, b, act, base, p["removed"]),
                                   rtol=1e-12, atol=1e-14)  # fmt: skip
    g = prune_path(M, Q, b, act, LAW, base)
    first = [_loop_path(M, Q, b, act, base, [c])[1] for c in range(H)]
    assert g["risk"][1] == pytest.approx(min(first), abs=1e-14)
