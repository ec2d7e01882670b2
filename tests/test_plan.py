"""What a reproduction will run, and its price, before anything runs (`reproduce --dry-run`)."""

import json
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from headspec.apps.cli import app
from headspec.apps.experiments import RECIPES
from headspec.apps.experiments.plan import estimate, planned
from headspec.conventions import cost
from headspec.conventions.config import SimulateConfig, TheoryConfig, load_config
from headspec.conventions.config.domain import recorded as _recorded


def recorded(config: dict, kind: str) -> dict:
    """A config of tests/data/cost_runs.json as it was meant (a sweep kind's name)."""
    return _recorded(config, {"simulate": "simulation"}.get(kind, kind))


def _ran(folder, exp_id) -> set[str]:
    """The runs recipe ``exp_id`` wrote into the report ``folder``."""
    return {p.stem.removeprefix(f"{exp_id}_") for p in (folder / "data").glob(f"{exp_id}_*.nc")}


def test_every_recipe_planned_exactly_the_runs_it_ran(smoke_report):
    """Each recipe's declared plan is what its run asked for at the smoke scale: the same runs
    (their result files) with the same resolved configs (the ODEs' starts point into the same
    folder). The report's configs also hold in-process computations (E4's constructed
    Bayes-softmax), which are no runs."""
    folder, outcomes = smoke_report
    for exp_id in RECIPES:
        runs = planned(exp_id, "smoke", outdir=folder)
        assert sorted(r.name for r, _ in runs) == sorted(_ran(folder, exp_id)), exp_id
        for r, c in runs:
            recorded = outcomes[exp_id].configs[r.name]
            assert json.loads(c.model_dump_json()) == recorded, (exp_id, r.name)


def test_dry_run_counts_finished_runs_as_reused(smoke_report):
    folder = smoke_report[0]
    res = CliRunner().invoke(app, ["reproduce", "--scale", "smoke", "--dry-run", "-o",
                                   str(folder)])  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = {}
    for line in res.output.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if cells and cells[0] in RECIPES:
            rows[cells[0]] = cells
    for exp_id in RECIPES:  # runs, reused, CPU-hours: every run is finished, nothing to compute
        n = str(len(_ran(folder, exp_id)))
        assert rows[exp_id][1:4] == [n, n, "0.00"], rows[exp_id]


def test_dry_run_prints_the_full_scale_and_writes_nothing(tmp_path):
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["reproduce", "--scale", "full", "--dry-run", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "CPU-hours" in res.output and "E7" in res.output and "of compute in all" in res.output
    assert "Pruning (" in res.output
    assert not out.exists()
    full = estimate(None, "full")
    quick = estimate(None, "quick")
    for exp_id in RECIPES:  # the full scale is the larger one, recipe by recipe (modelled cost)
        assert sum(r.estimate for r in full[exp_id]) > sum(r.estimate for r in quick[exp_id])
    for exp_id in RECIPES:  # pruning is priced for the recipes that prune, and only for them
        prunes = exp_id in ("E5", "E9")
        assert all((r.analysis > 0) == prunes for r in full[exp_id]), exp_id
    e9 = {r.name: r.analysis for r in estimate(["E9"], "overnight")["E9"]}
    # a path step prices all H removals at the cost of one model's H heads; H steps → H²
    assert e9["softmax_H32"] / e9["softmax_H16"] == pytest.approx(4.0)


def test_dry_run_refuses_an_unknown_scale(tmp_path):
    res = CliRunner().invoke(app, ["reproduce", "--scale", "huge", "--dry-run"])
    assert res.exit_code == 2 and "--scale 'huge'" in res.output


@pytest.mark.parametrize("field, factor", [("seeds", 2), ("train.T", 3), ("task.D", 5)])
def test_simulation_work_grows_with_its_sizes(field, factor):
    base = {"seeds": 2, "train.T": 10.0, "task.D": 1000}
    cfg = load_config(SimulateConfig, overrides=[f"{k}={v}" for k, v in base.items()])
    big = load_config(SimulateConfig, overrides=[f"{k}={v * factor if k == field else v}"
                                                 for k, v in base.items()])  # fmt: skip
    t0, t1 = cost.terms("simulate", cfg), cost.terms("simulate", big)
    assert t1["sgd_step"] == pytest.approx(factor * t0["sgd_step"])
    assert t1["run"] == t0["run"] == 1.0


def test_the_ode_of_chosen_seeds_costs_those_seeds_only():
    start = 'theory.init={kind="simulation", path="run.nc"%s}'
    for method, work in (("exact", "ode_exact"), ("qmc", "ode")):
        over = ["seeds=8", f'theory.method="{method}"']
        cfg = load_config(TheoryConfig, overrides=[*over, start % ""])
        some = load_config(TheoryConfig, overrides=[*over, start % ", seeds=[0, 1]"])
        whole, part = cost.terms("theory", cfg)[work], cost.terms("theory", some)[work]
        assert part == pytest.approx(whole / 4)


def test_a_recipe_without_a_plan_is_shown_as_unknown(monkeypatch):
    import dataclasses

    from headspec.apps import experiments

    monkeypatch.setitem(experiments.RECIPES, "E4",
                        dataclasses.replace(experiments.RECIPES["E4"], plan=None))  # fmt: skip
    res = CliRunner().invoke(app, ["reproduce", "--only", "E4,E5", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "declares no plan" in res.output and "E5" in res.output


def test_e2_runs_its_largest_dimensions_on_the_diffusion_engine(tmp_path):
    """`logd_diffusion_from`: the log-D runs at and above it take the diffusion engine, with its
    exact drift."""
    import shutil

    from headspec.apps.experiments.runner import experiments_dir

    for f in experiments_dir().iterdir():
        shutil.copy(f, tmp_path / f.name)
    toml = tmp_path / "e2_order.toml"
    toml.write_text(toml.read_text().replace("[experiment]\n", "[experiment]\n"
                                             "logd_diffusion_from = 60\n", 1))  # fmt: skip
    engines = {r.name: (c.train.engine, c.diffusion.drift)
               for r, c in planned("E2", "smoke", folder=tmp_path)
               if r.name.startswith("logD_")}  # fmt: skip
    assert engines == {"logD_30": ("reduced", "sampled"), "logD_60": ("diffusion", "exact"),
                       "logD_120": ("diffusion", "exact")}  # fmt: skip


def test_the_cost_model_is_within_2x_of_measured_runs_per_experiment():
    """The seconds per unit against the runs they were fitted to (tests/data/cost_runs.json: CPU
    seconds per run of a cold quick and a cold overnight reproduction): per experiment and scale
    the estimate is within 2× of the measured sum (0.61–1.15 when fitted),
    and in all within 1.5×. A change of the work terms or of PER_UNIT that breaks this needs a
    new fit (benchmarks/bench_cost.py)."""

    from headspec.apps.sweep.spec import MODELS

    data = json.loads((Path(__file__).parent / "data" / "cost_runs.json").read_text())
    by = defaultdict(lambda: [0.0, 0.0])
    for r in data["runs"]:
        cfg = MODELS[r["kind"]].model_validate(recorded(r["config"], r["kind"]))
        by[r["recipe"], r["scale"]][0] += r["seconds"]
        by[r["recipe"], r["scale"]][1] += cost.seconds(r["kind"], cfg)
    assert {k for k, _ in by} == set(RECIPES) and {s for _, s in by} == {"quick", "overnight"}
    for key, (measured, est) in by.items():
        assert 0.5 <= est / measured <= 2.0, (key, measured, est)
    total = [sum(v[i] for v in by.values()) for i in (0, 1)]
    assert 1 / 1.5 <= total[1] / total[0] <= 1.5, total


def _main_work(kind: str, cfg) -> tuple[str, float]:
    """A run's main work as a plain count of its sizes, no fitted constant in it: seeds × SGD steps
    (a simulation on the reduced engine), seeds × t × drift samples × sequence width (the ODE and
    the diffusion engine), splits × samples × width (a map)."""
    t = cost.terms(kind, cfg)
    for k in ("diffusion", "map", "ode_exact", "ode", "sgd_step"):
        if k in t:
            return k, t[k]
    raise AssertionError(f"no main work term in {t}")


def _scaled_measurement(exp_id: str, data: dict, full: dict) -> float:
    """The CPU seconds of recipe ``exp_id`` at the full scale from measurements alone: for each kind
    of main work (:func:`_main_work`), seconds = a × runs + b × size solved from the quick and the
    overnight measured totals (a: a run's fixed cost, b: seconds per unit of size), then evaluated
    at the full scale's runs and size. Where the two scales have one size (or the solution is
    negative), the overnight seconds are scaled in proportion to the size (errs large)."""
    import numpy as np

    from headspec.apps.sweep.spec import MODELS

    # kind → scale → (runs, size, seconds)
    seen: dict = defaultdict(lambda: defaultdict(lambda: np.zeros(3)))
    for r in data["runs"]:
        if r["recipe"] == exp_id:
            cfg = MODELS[r["kind"]].model_validate(recorded(r["config"], r["kind"]))
            k, n = _main_work(r["kind"], cfg)
            seen[k][r["scale"]] += (1.0, n, r["seconds"])
    big: dict = defaultdict(lambda: np.zeros(2))  # kind → runs, size at the full scale
    for r in full[exp_id]:
        k, n = _main_work(r.kind, r.config)
        big[k] += (1.0, n)
    assert set(big) <= set(seen), (exp_id, "work of a kind the measured runs do not have")
    total = 0.0
    for k, (runs, size) in big.items():
        q, o = seen[k]["quick"], seen[k]["overnight"]
        assert o[0] > 0, (exp_id, k, "no overnight run measured")
        a, b = 0.0, o[2] / o[1]
        if q[0] > 0 and abs(np.linalg.det([q[:2], o[:2]])) > 1e-9 * q[1] * o[0]:
            ab = np.linalg.solve([q[:2], o[:2]], [q[2], o[2]])
            if (ab >= 0).all():
                a, b = ab
        total += a * runs + b * size
    return float(total)


@pytest.fixture(scope="module")
def full_plan():
    return estimate(None, "full")


#: Recipes whose full-scale estimate is known to miss the measured scaling by more than 2×.
#: E5 was one (0.45, 2026-12-04: its six-head ODEs take 3–4× the fitted PER_UNIT["ode"]) until the
#: SGD step's cost grew a term per head (sgd_heads, 2026-12-06): its H = 6 simulations now weigh
#: more and the estimate is 0.55 of the scaled measurement, inside the 2×.
_FULL_MISSES: set[str] = set()


@pytest.mark.parametrize(
    "exp_id",
    [
        pytest.param(e, marks=pytest.mark.xfail(strict=True)) if e in _FULL_MISSES else e
        for e in RECIPES
    ],
)
def test_the_full_scale_estimate_is_within_2x_of_the_measured_runs_scaled_by_their_sizes(
    exp_id, full_plan
):
    """Issue 28's check of `reproduce --scale full --dry-run`: per recipe, the dry run's estimate
    for the full scale against the measured CPU seconds (tests/data/cost_runs.json: a cold quick and
    a cold overnight reproduction) scaled to the full scale's sizes with no fitted constant
    (:func:`_scaled_measurement`). Within 2× either way (2026-12-04: 0.69–0.91; E5 0.45)."""
    data = json.loads((Path(__file__).parent / "data" / "cost_runs.json").read_text())
    est = sum(r.estimate for r in full_plan[exp_id])
    scaled = _scaled_measurement(exp_id, data, full_plan)
    assert 0.5 <= est / scaled <= 2.0, (exp_id, est, scaled)


def test_an_e7_setting_carries_its_own_horizon():
    """E7's `settings` entries (F, H, T): that setting's simulations and the ODEs beside them
    run to T, a number or a table by activation; a pair (F, H) keeps the scale's train.T."""
    horizons = {r.name: c.train.T for r, c in planned("E7", "overnight")}
    assert {n: t for n, t in horizons.items() if n.startswith("F2_H4")} == dict.fromkeys(
        [f"F2_H4_{a}{o}" for a in ("softmax", "softmax1", "bayes_softmax") for o in ("", "_ode")],
        600.0,
    )
    assert {n: t for n, t in horizons.items() if n.startswith("F3_H6")} == {
        f"F3_H6_{a}{o}": t
        for a, t in (("softmax", 1000.0), ("softmax1", 1000.0), ("bayes_softmax", 2000.0))
        for o in ("", "_ode")
    }
    assert {c.train.T for _, c in planned("E7", "quick")} == {200.0}


def test_an_e7_horizon_table_names_activations_only():
    from pydantic import ValidationError

    from headspec.apps.experiments.e7 import Params

    base = {"a": 2.5, "seeds": 2, "same": 0.9, "active": 0.5, "orth": 0.3, "combo": 1.5,
            "pure": 0.9}  # fmt: skip
    Params.model_validate({**base, "settings": [[3, 6, {"bayes_softmax": 2000}]]})
    with pytest.raises(ValidationError, match="softmax2"):
        Params.model_validate({**base, "settings": [[3, 6, {"softmax2": 2000}]]})
    with pytest.raises(ValidationError, match=r"\(3, 6\) more than once.*fix: keep one entry"):
        Params.model_validate({**base, "settings": [[3, 6], [2, 4], [3, 6, 900]]})


def test_an_e7_partial_horizon_table_leaves_the_others_at_train_T(tmp_path):
    """A table naming some activations: those run to its T, the others to the scale's train.T."""
    import shutil

    from headspec.apps.experiments.runner import experiments_dir

    for f in experiments_dir().iterdir():
        shutil.copy(f, tmp_path / f.name)
    toml = tmp_path / "e7_representation.toml"
    old, new = (
        "[scale.smoke]\nsettings = [[2, 4]]",
        "[scale.smoke]\nsettings = [[2, 4, {bayes_softmax = 7.5}]]",
    )
    assert old in toml.read_text()
    toml.write_text(toml.read_text().replace(old, new, 1))
    horizons = {r.name: c.train.T for r, c in planned("E7", "smoke", folder=tmp_path)}
    default = {c.train.T for _, c in planned("E7", "smoke")}
    assert len(default) == 1 and 7.5 not in default
    assert horizons["F2_H4_bayes_softmax"] == 7.5 == horizons["F2_H4_bayes_softmax_ode"]
    assert horizons["F2_H4_softmax"] == horizons["F2_H4_softmax_ode"] == default.pop()
