"""A split of heads over a law's directions as a fixed point, and its kind (dynamics.splitmap,
the cell of issue 27's map): a constructed stable case, checked by the rule (Re λ against 3 s.e.)
and against the exact method's rate (an independent route: the η-linear drift by quadrature
instead of samples), and a split that is no fixed point."""

import numpy as np
import pytest

from headspec.core.attention import Softmax
from headspec.core.latent import Discrete, Gaussian
from headspec.core.model import Model
from headspec.core.observables import BaseSamples
from headspec.dynamics.problem import DriftProblem, Exact, Sampled
from headspec.dynamics.splitmap import classify_split, split_map, splits_of

LAW = Discrete([[2.5, 0.0], [0.0, 2.5]])  # two orthogonal atoms, equal weights
ATOMS = np.asarray(LAW.atoms)
L, LR = 4, 1.0
# The even split's leading rate by the exact method (Exact(base): η-linear drift by quadrature,
# η² term on the same 2048 Sobol samples), 2026-12-03; recomputed by the slow test below. The
# sampled method's rate scatters around it by its standard error (2e-4 at n = 2048).
EXACT_RATE = -0.0013919


def _problem(method: str) -> DriftProblem:
    base = BaseSamples.sobol(0, LAW, L=L, H=2, n=2048)
    m = Sampled(base, name="qmc") if method == "sampled" else Exact(base)  # as the config builds
    return DriftProblem(Model(Softmax(), LAW, L=L), lr=LR, method=m)


@pytest.fixture(scope="module")
def cells():
    p = _problem("sampled")
    return {sizes: classify_split(p, ATOMS, sizes) for sizes in ((1, 1), (2,))}


@pytest.fixture(scope="module")
def grid():
    """A 3-point map along the amplitude at η = 1 (one guess scale: the cells above found theirs
    at the first)."""
    done = []
    out = split_map(_problem("sampled"), ATOMS, 2, [2.0, 2.5, 3.0], [1.0], scales=(1.0,),
                    progress=lambda i, n: done.append((i, n)))  # fmt: skip
    return out, done


def test_the_even_split_is_a_stable_minimum(cells):
    even = cells[1, 1]
    assert even.found and even.split == "1:1" and even.kind == "minimum"
    assert even.n_unstable == even.n_marginal == 0
    assert even.lead_rate < -3 * even.lead_se  # the rule, with its margin
    assert abs(even.lead_rate - EXACT_RATE) < 3 * even.lead_se


def test_both_heads_on_one_atom_is_no_fixed_point(cells):
    """From every guess scale the solve ends on the common phase (both heads on the atoms' mean
    direction, cosine 0.71 with each: on neither, by the margin), not on the split asked for."""
    both = cells[2,]
    assert not both.found and both.kind == "no fixed point" and both.state is None
    assert both.split == "2:0"
    assert np.isnan(both.risk) and np.isnan(both.lead_rate)


def test_a_setting_from_its_config_is_the_same_classification(cells, tmp_path):
    """The config route (conventions.splitmap: SplitMapConfig → build → classify_splits → a
    dataset) gives the cells above bit for bit: same law, L, η, samples (Sobol seed 0, n = 2048)."""
    from headspec.conventions import results
    from headspec.conventions.config import load_config
    from headspec.conventions.config.splitmap import SplitMapConfig
    from headspec.conventions.splitmap import classify_setting

    cfg = load_config(SplitMapConfig, overrides=[
        'task.latent={kind="discrete", atoms=[[2.5, 0.0], [0.0, 2.5]]}', f"task.L={L}",
        "model.H=2", f"map.lr={LR}", "map.n=2048"])  # fmt: skip
    done = []
    ds = classify_setting(cfg, lambda i, n: done.append((i, n)))
    assert done == [(1, 2), (2, 2)]
    assert ds.split.values.tolist() == ["2:0", "1:1"]
    assert ds.kind.values.tolist() == ["no fixed point", "minimum"]
    assert float(ds.lead_rate.sel(split="1:1")) == cells[1, 1].lead_rate
    assert float(ds.risk.sel(split="1:1")) == cells[1, 1].risk
    assert str(ds.uneven_kind.values) == "none" and str(ds.balanced_kind.values) == "minimum"
    back = results.load(results.save(ds, tmp_path / "cell.nc"), kinds=("splitmap",))
    assert back.lead_se.sel(split="1:1") == cells[1, 1].lead_se


def test_a_group_without_heads_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"sizes \(2, 0\).*fix: list only the directions"):
        classify_split(_problem("sampled"), ATOMS, (2, 0))


@pytest.mark.slow  # test tier: the exact method's Jacobian (~30 s on 2 cores)
def test_the_exact_method_gives_the_same_kind_and_the_quoted_rate():
    cell = classify_split(_problem("exact"), ATOMS, (1, 1))
    assert cell.kind == "minimum"
    (flow,) = split_map(_problem("sampled"), ATOMS, 2, [2.5], [0.0])  # gradient flow: η-linear
    assert {p.sizes: p.kind for p in flow.splits} == {(2,): "no fixed point", (1, 1): "minimum"}
    assert cell.lead_rate == pytest.approx(EXACT_RATE, abs=1e-6)
    assert cell.lead_se < 1e-4


@pytest.mark.parametrize(
    "H, J, want",
    [(4, 2, [(4,), (3, 1), (2, 2)]), (3, 2, [(3,), (2, 1)]), (5, 2, [(5,), (4, 1), (3, 2)]),
     (6, 2, [(6,), (5, 1), (4, 2), (3, 3)]), (3, 3, [(3,), (2, 1), (1, 1, 1)]), (1, 3, [(1,)]),
     (4, 3, [(4,), (3, 1), (2, 2), (2, 1, 1)])],
)  # fmt: skip
def test_splits_of_lists_every_split_once_most_uneven_first(H, J, want):
    got = splits_of(H, J)
    assert got == want
    assert all(sum(s) == H and len(s) <= J and list(s) == sorted(s, reverse=True) for s in got)


def test_splits_of_refuses_no_heads():
    with pytest.raises(ValueError, match="fix: both at least 1"):
        splits_of(0, 2)


def test_the_map_is_the_cells_computed_one_by_one(grid, cells):
    """Two routes to the same numbers: the grid at amplitude 2.5, η = 1 is classify_split there."""
    out, done = grid
    assert [(c.amplitude, c.eta) for c in out] == [(2.0, 1.0), (2.5, 1.0), (3.0, 1.0)]
    assert done == [(1, 3), (2, 3), (3, 3)]
    first = {c.sizes: c for c in out[1].splits}
    assert list(first) == [(2,), (1, 1)]
    for sizes, direct in cells.items():
        assert first[sizes].kind == direct.kind
        assert first[sizes].lead_rate == pytest.approx(direct.lead_rate, rel=1e-9, nan_ok=True)


def test_the_even_split_stays_a_minimum_along_the_small_grid(grid):
    """A stronger signal keeps 1:1 a stable minimum and 2:0 no fixed point; the even split's
    risk falls as the atoms grow (a stronger signal is easier)."""
    out, _ = grid
    for c in out:
        s = {p.sizes: p for p in c.splits}
        assert s[1, 1].kind == "minimum" and not s[2,].found, (c.amplitude, c.eta)
    even = [c.splits[1].risk for c in out]
    assert even[0] > even[1] > even[2]


def test_the_map_refuses_a_law_it_cannot_scale():
    law = Gaussian([0.0, 0.0], var=[1.0, 1.0])
    base = BaseSamples.sobol(0, law, L=L, H=2, n=64)
    p = DriftProblem(Model(Softmax(), law, L=L), lr=LR, method=Sampled(base))
    with pytest.raises(ValueError, match="fix: give a problem on a discrete law"):
        split_map(p, np.eye(2), 2, [1.0], [1.0])


def test_a_boundary_needs_a_sign_change_between_its_ends():
    """The even split stays a minimum from a = 2 to 3: no boundary to bisect (two probes)."""
    from headspec.dynamics.splitmap import locate_boundary

    with pytest.raises(ValueError, match=r"1:1: Re λ has the same sign.*fix: choose ends"):
        locate_boundary(_problem("sampled"), ATOMS, (1, 1), 2.0, 3.0, eta=LR)
    with pytest.raises(ValueError, match="fix: 0 < low < high"):
        locate_boundary(_problem("sampled"), ATOMS, (1, 1), 3.0, 2.0, eta=LR)


def test_an_excursion_needs_a_fixed_point(cells):
    from headspec.dynamics.splitmap import excursion

    with pytest.raises(ValueError, match=r"2:0 has no fixed point.*fix"):
        excursion(_problem("sampled"), cells[2,], ATOMS)


# Four heads on the flipped spike ±a at L = 4 (E6's law, a short sequence: ~20 s a setting).
SPIKE = Discrete([[1.0], [-1.0]])


def _spike_problem() -> DriftProblem:
    base = BaseSamples.sobol(0, SPIKE, L=4, H=4, n=2048)
    return DriftProblem(Model(Softmax(), SPIKE, L=4), lr=1.0, method=Sampled(base, name="qmc"))


@pytest.mark.slow  # test tier: an ODE excursion from a 4-head saddle (~1 min on 2 cores)
def test_misplaced_heads_rearrange_from_a_saddle_to_the_even_split():
    """The paper's rearrangement, as the ODE shows it: at a = 1.5 the 3:1 split is a saddle
    (measured 2026-12-03: +0.0069 ± 0.0009), and from it nudged by 10⁻³ along its leading mode,
    on both sides, the heads end in the even split 2:2 at a lower risk (0.3316 against 0.3451),
    changing split at t ≈ 1300 after a bump of ~10⁻⁶ in the risk."""
    from headspec.dynamics.splitmap import at_setting, excursion

    q, dirs = at_setting(_spike_problem(), np.asarray(SPIKE.atoms), 1.5, 1.0)
    p = classify_split(q, dirs, (3, 1))
    assert p.kind == "saddle" and p.lead_rate > 3 * p.lead_se
    for e in excursion(q, p, dirs):
        assert (e.start_split, e.end_split, e.failed) == ("3:1", "2:2", False)
        assert e.end_risk < e.start_risk - 0.01  # the even split is better by ~0.013
        assert 0 < e.t_change < e.T and e.max_risk >= e.start_risk


@pytest.mark.slow  # test tier: bisection of a boundary, four classifications (~2 min on 2 cores)
def test_the_3_1_boundary_is_located_by_bisection_in_the_amplitude():
    """3:1 is a saddle at a = 2.5 and stable at 3.5 (η = 1, L = 4); bisection to a quarter
    locates the sign change of its leading rate between 2.75 and 3.0 (measured 2026-12-03: rate
    +0.00004 ± 0.0003 at 2.75, −0.00029 at 3.0 — at 2.75 within its error of zero, so the
    boundary is where the estimate on these samples changes sign, within a band of ~0.3 in a)."""
    from headspec.dynamics.splitmap import locate_boundary

    seen = []
    b = locate_boundary(_spike_problem(), np.asarray(SPIKE.atoms), (3, 1), 2.5, 3.5, eta=1.0,
                        tol=0.25, progress=lambda a, p: seen.append(a))  # fmt: skip
    assert seen == [2.5, 3.5, 3.0, 2.75]
    assert (b.low, b.high) == (2.75, 3.0) and b.middle == 2.875
    assert b.at_low.lead_rate > 0 > b.at_high.lead_rate
    assert [a for a, _ in b.probes] == seen


def test_a_recipe_runs_a_setting_of_the_map_and_reuses_its_file(tmp_path):
    """A recipe's "splitmap" run takes the base config's task and model only (its train, record
    and theory tables belong to the other runs), and a second call loads the file."""
    from headspec.apps.experiments.base import Context, Run

    spec = {"config": {"task": {"L": L, "latent": {"kind": "discrete", "atoms": ATOMS.tolist()}},
                       "model": {"H": 2}, "train": {"lr": 3.0, "T": 5.0},
                       "record": {"points": 5}, "theory": {"n": 64}}}  # fmt: skip
    ctx = Context("E9", spec, "quick", tmp_path)
    run = Run("map_a2.5", "splitmap", {"map.lr": LR, "map.n": 2048, "map.scales": [1.0]})
    ds = ctx.runs([run])["map_a2.5"]
    assert ds.kind.values.tolist() == ["no fixed point", "minimum"]
    assert ctx.outcome.configs["map_a2.5"]["map"]["lr"] == LR
    assert set(ctx.outcome.configs["map_a2.5"]) == {"task", "model", "map", "seed", "seeds"}
    second = Context("E9", spec, "quick", tmp_path)
    again = second.runs([run])["map_a2.5"]
    assert second.outcome.reused == 1
    assert float(again.lead_rate.sel(split="1:1")) == float(ds.lead_rate.sel(split="1:1"))


@pytest.mark.slow  # test tier: SGD from a saddle's fixed point, 32 seeds (~3 min on 2 cores)
def test_sgd_started_at_a_saddle_leaves_it_for_the_split_the_ode_predicts():
    """The map's verdict confirmed by simulation, at a scale a CI run affords: the 3:1 split of
    four softmax heads on ±1.5 at L = 4, η = 1 is a saddle (Re λ = +0.0069 ± 0.0009); SGD (the
    exact reduced engine, D = 1000, 32 seeds) started at its fixed point leaves it — each seed by
    its own noise — for the even split 2:2, as the ODE's excursion does. The saddle's escape time
    is about ln(D)/(2λ) ≈ 500 (studies/split_map_confirm.py does E6's setting at D = 2000).
    Tolerance: ≥ 16 of 32 seeds by T = 1500 (an escape time of 3× the estimate would still pass;
    a stable point would give 0), and every seed that left ends in 2:2."""
    from headspec.conventions.config import SplitMapConfig, load_config
    from headspec.conventions.runs import simulate
    from headspec.conventions.splitmap import prepared_run, rearrangement
    from headspec.dynamics.splitmap import at_setting

    q, dirs = at_setting(_spike_problem(), np.asarray(SPIKE.atoms), 1.5, 1.0)
    p = classify_split(q, dirs, (3, 1))
    assert p.kind == "saddle"
    cfg = load_config(SplitMapConfig, overrides=[
        'task.latent={kind="flipped_spike", a=[1.0]}', "task.latent.scale=1.5", "task.L=4",
        "model.H=4", "map.lr=1.0"])  # fmt: skip
    sim = simulate(prepared_run(cfg, p.state, D=1000, T=1500.0, seeds=32, points=30))
    r = rearrangement(sim, dirs)
    assert r["start"] == ["3:1"]
    assert r["left"] >= 16, r
    assert set(r["end_splits"]) == {"2:2"}, r
