"""Recipes E3 (activations), E4 (Bayes-softmax optimality), E5 (pruning): each end to end at
smoke scale, and their helpers on inputs whose answer is known."""

from pathlib import Path

import numpy as np
import pytest

from headspec.apps.experiments.annealed import eta_end, final_excess
from headspec.apps.experiments.e5 import _atom_scale, _increase, _path_dev
from headspec.conventions import results

EXPECTED = {
    "E3": [
        "[discrete] softmax stalls on a plateau above R_B",
        "[discrete] softmax-1 is clearly lower than softmax",
        "[discrete] Bayes-softmax reaches R_B with an annealed η",
        "[discrete] The constant-η excess is the O(η) term, removed by annealing",
        "[flipped_spike] Bayes-softmax reaches R_B with an annealed η",
        "The softmax-1 advantage is largest when signals point in opposite directions",
    ],
    "E4": [
        "The constructed Bayes-softmax (one head per atom) attains R_B",
        "Bayes-softmax reaches R_B with an annealed η",
        "The constant-η excess is the O(η) term, removed by annealing",
        "The constant-η excess shrinks with η (the η² term of dQ/dt)",
        "The two heads take the + and − directions of the feature (simulation)",
        "The two heads take the + and − directions of the feature (ODE)",
    ],
    "E5": [
        "Softmax tolerates heavy pruning (redundant heads), 2 of 6 kept",
        "softmax1 keeps its risk down to the number of needed heads (J = 3 atoms) and degrades "
        "sharply below",
        "bayes_softmax keeps its risk down to the number of needed heads (J = 3 atoms) and "
        "degrades sharply below",
    ],
}


@pytest.fixture(scope="module")
def smoke(smoke_report):
    """exp → (report folder, outcome) of the session's smoke reproduction (tests/conftest.py)."""
    folder, outcomes = smoke_report
    return {exp: (folder, outcomes[exp]) for exp in ("E3", "E4", "E5")}


@pytest.mark.parametrize("exp", ["E3", "E4", "E5"])
def test_recipe_runs_at_smoke_scale_with_claims_tolerances_and_figures(smoke, exp):
    _, o = smoke[exp]
    assert o.error is None
    names = [c.claim for c in o.claims]
    for claim in EXPECTED[exp]:
        assert claim in names, claim
    for c in o.claims:
        if c.holds is not None:
            assert len(c.tolerance) > 20, c.claim  # every verdict says its tolerance and why
    assert o.figures and all(Path(f).stat().st_size > 1000 for f in o.figures)
    sims = [k for k, v in o.configs.items() if "theory" not in v]
    assert sims and all(o.configs[k]["train"]["engine"] == "reduced" for k in sims)
    for k in sims:  # every simulation has its ODE beside it, from its seeds' initial states
        assert o.configs[f"{k}_ode"]["theory"]["init"]["kind"] == "simulation"


def test_reach_claim_tolerance_names_its_parts(smoke):
    _, o = smoke["E4"]
    (c,) = [c for c in o.claims if c.claim == "Bayes-softmax reaches R_B with an annealed η"]
    for part in ("x0", "3 s.e.", "finite-D", "2 %"):
        assert part in c.tolerance


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
