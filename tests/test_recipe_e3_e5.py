"""Recipes E3 (activations), E4 (Bayes-softmax optimality), E5 (pruning): each end to end at
smoke scale, and their helpers on inputs whose answer is known."""

from pathlib import Path

import numpy as np
import pytest

from headspec.apps.experiments.annealed import eta_end, final_excess
from headspec.apps.experiments.pruning import atom_scale as _atom_scale
from headspec.apps.experiments.pruning import increase as _increase
from headspec.apps.experiments.pruning import path_dev as _path_dev
from headspec.conventions import results
from helpers import assert_reasoned, claims_by_id

EXPECTED = {
    "E3": [
        "E3.discrete.stalls",
        "E3.discrete.lower",
        "E3.discrete.reaches",
        "E3.discrete.eta_excess",
        "E3.discrete.ode_beside",
        "E3.flipped_spike.reaches",
        "E3.opposite",
    ],
    "E4": [
        "E4.constructed",
        "E4.reaches",
        "E4.eta_excess",
        "E4.shrinks",
        "E4.pm_directions.sim",
        "E4.pm_directions.ode",
    ],
    "E5": ["E5.softmax.prune", "E5.softmax1.prune", "E5.bayes_softmax.prune"],
}


@pytest.fixture(scope="module")
def smoke(smoke_report):
    """exp → (report folder, outcome) of the smoke reproduction (tests/smoke_plugin.py)."""
    folder, outcomes = smoke_report
    return {exp: (folder, outcomes[exp]) for exp in ("E3", "E4", "E5")}


@pytest.mark.parametrize("exp", ["E3", "E4", "E5"])
def test_recipe_runs_at_smoke_scale_with_claims_tolerances_and_figures(smoke, exp):
    _, o = smoke[exp]
    assert o.error is None
    assert set(EXPECTED[exp]) <= set(claims_by_id(o)), [c.id for c in o.claims]
    for c in o.claims:
        assert_reasoned(c)  # every verdict says its tolerance and why
    assert o.figures and all(Path(f).stat().st_size > 1000 for f in o.figures)
    sims = [k for k, v in o.configs.items() if "theory" not in v]
    assert sims and all(o.configs[k]["train"]["engine"] == "reduced" for k in sims)
    for k in sims:  # every simulation has its ODE beside it, from its seeds' initial states
        assert o.configs[f"{k}_ode"]["theory"]["init"]["kind"] == "simulation"


def test_claim_statements_and_parts(smoke):
    c3, c5 = claims_by_id(smoke["E3"][1]), claims_by_id(smoke["E5"][1])
    assert c3["E3.discrete.stalls"].statement == "[discrete] softmax stalls on a plateau above R_B"
    assert [p.id for p in c3["E3.discrete.stalls"].all_of] == [
        "E3.discrete.stalls.sim", "E3.discrete.stalls.ode"]  # fmt: skip
    assert c5["E5.softmax.prune"].statement == (
        "Softmax tolerates heavy pruning (redundant heads), 2 of 6 kept"
    )
    assert [p.id for p in c5["E5.softmax1.prune"].all_of] == [
        f"E5.softmax1.prune.{k}.{w}" for k in ("sim", "ode") for w in ("keep", "sharp")
    ]
    keep, sharp = c5["E5.softmax1.prune"].all_of[:2]
    assert (keep.tolerance.kind, keep.tolerance.bound, keep.tolerance.k) == ("at_most", 0.1, 3)
    assert (sharp.tolerance.kind, sharp.tolerance.bound, sharp.tolerance.k) == (
        "at_least", 0.5, 3)  # fmt: skip
    assert c3["E3.discrete.ode_beside"].verdict is None  # measured only


def test_reach_claim_tolerance_names_its_parts(smoke):
    _, o = smoke["E4"]
    c = claims_by_id(o)["E4.reaches"]
    assert c.statement == "Bayes-softmax reaches R_B with an annealed η"
    parts = {p.id.removeprefix("E4.reaches."): p for p in c.all_of}
    assert set(parts) == {"sim", "ode", "sim_at_T", "ode_at_T"}
    assert all(p.tolerance.kind == "at_most" for p in parts.values())
    assert parts["sim"].tolerance.k == parts["ode"].tolerance.k == 3
    assert parts["sim"].tolerance.bound >= 0 and parts["ode"].tolerance.bound == 0  # |finite-D|
    assert parts["sim_at_T"].tolerance.bound == parts["ode_at_T"].tolerance.bound == 0.02
    for part in ("x0", "3 s.e.", "finite-D", "2 %"):
        assert part in parts["sim"].tolerance.why


def _optimal_state(ds):
    """ds with every seed's final state replaced by the constructed Bayes-softmax optimum of the
    flipped spike ±a: k = ±K*a, b = log ½ − |a|²/2."""
    a = float(np.asarray(results.config_of(ds)["task"]["latent"]["a"])[0])
    M = np.array([[a], [-a]])
    Q = M @ M.T
    b = np.full(2, np.log(0.5) - a**2 / 2)
    ds = ds.copy(deep=True)
    ds["M"][:, -1] = M
    ds["Q"][:, -1] = Q
    ds["b"][:, -1] = b
    return ds


def test_final_excess_is_zero_at_the_optimum_and_positive_away_from_it(smoke):
    folder, _ = smoke["E4"]
    ds = results.load(folder / "data" / "E4_anneal.nc")
    opt = final_excess(_optimal_state(ds), n=4096)
    assert np.allclose(opt["seeds"], 0.0, atol=1e-10)  # same function as the posterior
    assert opt["se_mc"] < 1e-10 and opt["rb"] > 0
    worse = _optimal_state(ds)
    worse["b"][:, -1, 0] = worse["b"][:, -1, 0] + 1.0  # one bias off (a common shift cancels)
    ex = final_excess(worse, n=4096)
    assert np.all(ex["seeds"] > 5 * ex["se_mc"]) and ex["se"] >= ex["se_mc"]


def test_eta_end_of_the_inverse_time_schedule():
    assert eta_end(2.0, 30.0, 1.0, 600.0) == pytest.approx(2.0 * 30 / 630)
    assert eta_end(1.0, 10.0, 0.5, 30.0) == pytest.approx(0.5)


def test_increase_reads_the_greedy_path_by_heads_kept():
    paths = [{"greedy": {"risk": [0.2, 0.2, 0.21, 0.3, 0.5]}}, None]  # H = 4
    got = _increase(paths, 2)
    assert got[0] == pytest.approx(0.05) and np.isnan(got[1])
    assert _increase(paths, 4)[0] == 0.0 and _increase(paths, 0)[0] == pytest.approx(1.5)
    assert _increase(paths, 1, relative=False)[0] == pytest.approx(0.1)


def test_path_deviation_between_simulation_and_ode():
    sim = [{"greedy": {"risk": [0.2, 0.4]}}]
    ode = [{"greedy": {"risk": [0.2, 0.5]}}]
    assert _path_dev({"sim": sim, "ode": ode}) == pytest.approx(20.0)


def test_atom_scale_of_the_constructed_optimum(smoke):
    folder, _ = smoke["E5"]
    ds = results.load(folder / "data" / "E5_softmax.nc")
    d_atom, path = _atom_scale(ds, 4096)
    r = np.asarray(path["risk"])
    assert path["n_heads"][0] == 3 and r[-1] == 0.5  # one head per atom; no head: ŷ = 0
    assert d_atom == pytest.approx(r[1] - r[0]) and d_atom > 0.2 * r[0]  # an atom lost costs
    assert r[0] == pytest.approx(ds.attrs["bayes_risk"], rel=0.05)  # the optimum is at R_B
