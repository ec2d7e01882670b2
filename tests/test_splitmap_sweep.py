"""The map of uneven splits as a sweep (kind "splitmap", issue 27): its config and refusals, a
setting's dataset and JSON, the collected map (settings with different H joined on the split
names, missing settings filled), its figure, and — slow tier — a real cluster run of the map on
a 3-setting grid against the settings computed one by one."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

from headspec.apps import sweep
from headspec.apps.plots import plot_split_map
from headspec.conventions import results
from headspec.conventions.config import ConfigError, load_config
from headspec.conventions.config.splitmap import SplitMapConfig
from headspec.conventions.splitmap import summary, to_dataset, to_json
from headspec.dynamics.splitmap import is_balanced, most_stable_uneven, splits_of
from headspec.dynamics.splits import split_name
from helpers import synthetic_split, synthetic_splits

ORTH = {"kind": "discrete", "atoms": [[1.0, 0.0], [0.0, 1.0]]}


# ----------------------------------------------------------------------------- config
def test_default_config_is_e6s_setting():
    cfg = SplitMapConfig()
    assert (cfg.task.L, cfg.model.H, cfg.model.activation, cfg.map.lr) == (10, 4, "softmax", 2.0)
    assert cfg.task.latent.kind == "flipped_spike" and cfg.task.latent.a == [2.5]


@pytest.mark.parametrize(
    "overrides, expect",
    [
        (['task.latent={kind="gaussian", mean=[1.0]}'], "Gaussian law.*no directions.*fix"),
        (['task.latent={kind="spike", a=[2.0]}'], "one direction.*fix"),
        (['task.latent={kind="discrete", atoms=[[2.0]]}'], "one atom.*fix"),
        (["model.H=1"], r"model.H = 1.*fix: model.H ≥ 2"),
        (["seeds=2"], "seeds"),
        (["map.lr=-1"], "map.lr"),
        (["map.scales=[1.0, 1.0]"], "repeats a scale"),
        (["model.activation=bayes_softmax", "map.method=exact"], "Bayes-softmax.*fix"),
        (["map.max_groups=2"], "apply to arrangements.*fix"),
        (['map.only=["2(+e1)"]'], "apply to arrangements.*fix"),
        (['map.candidates="arrangements"', "map.only=[]"], "map.only"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(overrides, expect):
    with pytest.raises(ConfigError, match=expect):
        load_config(SplitMapConfig, overrides=overrides)


def test_a_sweep_spec_takes_a_whole_law_table_in_its_config(tmp_path):
    """Regression: a quoted dotted key whose value is a table ("task.latent" = {kind, atoms}) was
    expanded key by key and failed with an IndexError on its ``kind``."""
    spec = sweep.spec_from_dict({
        "sweep": {"kind": "splitmap", "out": str(tmp_path / "o")},
        "config": {"task.latent": dict(ORTH), "model.H": 3},
        "axes": {"task.latent.scale": [2.0, 3.0], "map.lr": [0.0, 1.0]},
    })  # fmt: skip
    plan = sweep.resolve(spec)
    assert len(plan.tasks) == 4 and plan.seeds == 1
    cfg = plan.tasks[1].config
    assert cfg.task.latent.atoms == ORTH["atoms"] and cfg.model.H == 3 and cfg.map.lr == 1.0


# ----------------------------------------------------------------------------- one setting
def test_balanced_splits_and_the_most_stable_uneven_one():
    assert [is_balanced(s, 2) for s in splits_of(4, 2)] == [False, False, True]
    assert [is_balanced(s, 2) for s in splits_of(3, 2)] == [False, True]
    assert is_balanced((1, 1), 3) and not is_balanced((2,), 3)  # two heads over three directions
    pts = [synthetic_split((4,), "no fixed point", 0, 0, 4),
           synthetic_split((3, 1), "saddle", 0.004, 0.12, 4),
           synthetic_split((2, 2), "minimum", -0.002, 0.1, 4)]  # fmt: skip
    assert most_stable_uneven(pts, 2).split == "3:1"
    stuck = [*pts, synthetic_split((3, 1), "marginal", -0.0001, 0.12, 4)]
    assert most_stable_uneven(stuck, 2).kind == "marginal"  # marginal before saddle
    assert most_stable_uneven(pts[::2], 2) is None  # no uneven fixed point
    s = summary(pts, [is_balanced(p.sizes, 2) for p in pts])
    assert s["uneven_kind"] == "saddle" and s["balanced_kind"] == "minimum"
    assert s["risk_advantage"] == pytest.approx(0.02)
    assert (s["n_minima"], s["best_minimum"], s["best_risk"]) == (1, "2:2", 0.1)


def test_split_names_count_every_direction():
    assert split_name([0, 0, 0, 0], J=3) == "4:0:0"
    assert split_name([0, 1, 2, 0]) == "2:1:1"
    assert split_name([0, 0, 1, -2]) == "2:1 +1 idle"  # two directions, as before


def test_a_settings_dataset_round_trips_through_its_file_and_json(tmp_path):
    cfg = load_config(SplitMapConfig, overrides=[f"task.latent={_toml(ORTH)}", "task.L=4",
                                                 "task.latent.scale=3.0"])  # fmt: skip
    pts, dirs = synthetic_splits(cfg)
    ds = to_dataset(pts, dirs, cfg)
    path = results.save(ds, tmp_path / "cell.nc")
    back = results.load(path, kinds=("splitmap",))
    assert list(back.split.values) == ["4:0", "3:1", "2:2"]
    assert back.n_heads.values.tolist() == [[4, 0], [3, 1], [2, 2]]
    assert str(back.uneven_kind.values) == "minimum" and str(back.uneven_split.values) == "3:1"
    assert float(back.amplitude) == 3.0 and float(back.eta) == 2.0
    assert np.isnan(back.M.sel(split="4:0")).all() and (back.M.sel(split="3:1") == -0.001).all()
    js = to_json(back)
    assert js["summary"]["uneven_kind"] == "minimum" and js["splits"][0]["risk"] is None
    assert js["config"]["task"]["latent"]["scale"] == 3.0
    with pytest.raises(results.ResultError, match="not a simulation result"):
        results.load(path)  # a setting of the map is not a run


def _toml(d: dict) -> str:
    def v(x):
        return "[" + ", ".join(v(y) for y in x) + "]" if isinstance(x, list) else repr(x)

    return "{" + ", ".join(f"{k}={v(x)!s}".replace("'", '"') for k, x in d.items()) + "}"


# ----------------------------------------------------------------------------- the collected map
@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """A splitmap sweep over amplitude × H × η whose settings are written as a worker writes them
    (synthetic classifications, no solve), one setting left missing; then prepared and collected
    as the driver does."""
    out = tmp_path_factory.mktemp("map") / "out"
    spec = sweep.spec_from_dict({
        "sweep": {"kind": "splitmap", "out": str(out)},
        "config": {"task.latent": dict(ORTH), "task.L": 4},
        "axes": {"task.latent.scale": [2.0, 3.0], "model.H": [3, 4], "map.lr": [0.0, 2.0]},
    })  # fmt: skip
    plan = sweep.resolve(spec)
    missing = plan.tasks[-1]
    (out / "points").mkdir(parents=True)
    for t in plan.tasks:
        if t is not missing:
            pts, dirs = synthetic_splits(t.config)
            results.save(to_dataset(pts, dirs, t.config), out / t.file)
    _manifest, todo = sweep.prepare(plan)
    assert todo == [missing]
    return sweep.collect(out), out


def test_the_collected_map_joins_settings_of_every_H_on_the_split_names(collected):
    ds, _ = collected
    assert ds.attrs["sweep_kind"] == "splitmap" and ds.attrs["points_finished"] == 7
    assert set(ds.split.values) == {"4:0", "3:1", "2:2", "3:0", "2:1"}
    h3 = ds.sel(H=3, scale=2.0, lr=0.0)
    assert str(h3.kind.sel(split="2:1").values) == "minimum"
    assert str(h3.kind.sel(split="3:1").values) == ""  # no such split for three heads
    assert np.isnan(h3.risk.sel(split="3:1"))
    kinds = ds.uneven_kind.sel(H=4, lr=0.0).values.tolist()
    assert kinds == ["saddle", "minimum"]  # the boundary of the synthetic map, at a = 2.5
    last = ds.isel(scale=-1, H=-1, lr=-1)
    assert str(last.status.values) == "pending" and str(last.uneven_kind.values) == ""


def test_the_collected_map_is_a_valid_sweep_file_with_its_figure(collected, tmp_path):
    ds, _out = collected
    path = sweep.save_collected(ds, tmp_path / "sweep.nc")
    back = results.load(path, kinds=("sweep",))
    fig = sweep.save_figure(back, tmp_path)
    assert fig.name == "sweep_split_map.png" and fig.stat().st_size > 10_000
    table = json.loads(sweep.save_table(back, tmp_path).read_text())
    assert table["axes"] == ["scale", "H", "lr"] and len(table["points"]) == 8
    first, last = table["points"][0], table["points"][-1]
    assert (first["scale"], first["H"], first["lr"], first["status"]) == (2.0, 3, 0.0, "done")
    assert set(first["splits"]) == {"3:0", "2:1"}  # H = 3: the splits that exist
    assert first["splits"]["2:1"] == {"kind": "minimum", "risk": 0.1, "lead_rate": -0.002,
                                      "lead_se": 1e-4}  # fmt: skip
    assert first["splits"]["3:0"]["risk"] is None and first["uneven_kind"] == "none"
    assert last["status"] == "pending" and last["splits"] == {}
    f = plot_split_map(back)
    assert len(f.axes) == 2 * 2 + 2  # a row per H (two panels and a colour bar each)
    assert [t.get_text() for t in f.axes[0].texts] == []  # H = 3: no uneven fixed point
    texts = {t.get_text() for t in f.axes[2].texts}  # H = 4: 3:1, a saddle then a minimum
    assert {"3:1\n+0.004", "3:1\n-0.001"} <= texts


@pytest.mark.slow  # test tier: a real Dask cluster classifying three settings (~1 min on 2 cores)
def test_a_splitmap_sweep_on_a_cluster_equals_the_settings_one_by_one(tmp_path):
    from headspec.conventions.splitmap import classify_setting

    spec = sweep.spec_from_dict({
        "sweep": {"kind": "splitmap", "out": str(tmp_path / "out")},
        "config": {"task.latent": {"kind": "discrete", "atoms": [[2.5, 0.0], [0.0, 2.5]]},
                   "task.L": 4, "model.H": 2, "map.lr": 1.0, "map.n": 2048},
        "axes": {"task.latent.scale": [0.8, 1.0, 1.2]},
    })  # fmt: skip
    plan = sweep.resolve(spec)
    with sweep.dask_client(workers=1) as client:
        report = sweep.run(plan, client=client)
    assert (report.total, report.done, report.failed) == (3, 3, [])
    ds = results.load(report.dataset_path, kinds=("sweep",))
    one = classify_setting(plan.tasks[1].config)
    got = ds.isel(scale=1)
    for v in ("risk", "lead_rate", "lead_se"):
        np.testing.assert_allclose(got[v].values, one[v].values, rtol=1e-9, equal_nan=True)
    assert got.kind.values.tolist() == one.kind.values.tolist() == ["no fixed point", "minimum"]
    assert isinstance(ds, xr.Dataset)


# ----------------------------------------------------------------------------- confirmation
def test_a_prepared_run_starts_sgd_at_the_split_with_the_settings_law_and_eta():
    from headspec.conventions.splitmap import prepared_run

    cfg = load_config(SplitMapConfig, overrides=["task.latent.scale=1.5", "map.lr=2.0"])
    M = [[1.5], [1.5], [1.5], [-1.5]]
    Q = (np.asarray(M) @ np.asarray(M).T + 0.1 * np.eye(4)).tolist()
    sim = prepared_run(cfg, (M, Q, [0.0] * 4), D=2000, T=1500.0, seeds=32, seed=7)
    assert (sim.task.D, sim.task.L, sim.task.latent, sim.model) == (
        2000, 10, cfg.task.latent, cfg.model)  # fmt: skip
    assert (sim.train.lr, sim.train.lr_b, sim.train.engine, sim.train.T) == (
        2.0, None, "reduced", 1500.0)  # fmt: skip
    assert sim.init.kind == "given" and sim.init.M == M and (sim.seed, sim.seeds) == (7, 32)
    flow = load_config(SplitMapConfig, overrides=["map.lr=0"])
    with pytest.raises(ValueError, match=r"gradient flow.*fix: confirm the map at .*map.lr > 0"):
        prepared_run(flow, (M, Q, [0.0] * 4), D=2000, T=10.0, seeds=2)


def test_rearrangement_counts_the_seeds_that_left_their_split():
    """Three seeds of four heads on ±1: one stays 3:1, one moves to 2:2 at t = 2, one to 4:0 at
    t = 1 and back to 3:1 by the end (it left and came back: not counted as left)."""
    from headspec.conventions.splitmap import rearrangement

    stay, even, all4 = [1, 1, 1, -1], [1, 1, -1, -1], [1, 1, 1, 1]
    paths = [[stay, stay, stay], [stay, stay, even], [stay, all4, stay]]
    Ms = np.asarray(paths, float)[..., None]  # (S, T, H, F = 1)
    Qs = Ms @ np.swapaxes(Ms, -1, -2) + 0.1 * np.eye(4)  # (S, T, H, H)
    sim = xr.Dataset(
        {"M": (("seed", "t", "head", "feature"), Ms), "Q": (("seed", "t", "head", "head2"), Qs),
         "risk": (("seed", "t"), np.full((3, 3), 0.3))},
        coords={"t": [0.0, 1.0, 2.0]},
    )  # fmt: skip
    r = rearrangement(sim, np.array([[1.0], [-1.0]]))
    assert (r["seeds"], r["left"], r["start"], r["end_splits"]) == (3, 1, ["3:1"], {"2:2": 1})
    assert r["fraction"] == pytest.approx(1 / 3) and r["se"] == pytest.approx(np.sqrt(2 / 27))
    assert r["t_left"][0] != r["t_left"][0] and r["t_left"][1:] == [2.0, 1.0]
    assert r["upper95"] is None


def test_a_settings_excursions_are_kept_per_split_and_side(tmp_path):
    from headspec.dynamics.splitmap import Excursion

    cfg = load_config(SplitMapConfig, overrides=[f"task.latent={_toml(ORTH)}",
                                                 "task.latent.scale=2.0"])  # fmt: skip
    pts, dirs = synthetic_splits(cfg)  # 3:1 a saddle at a = 2
    trips = {
        1: [
            Excursion(1, "3:1", "2:2", 1270.0, 0.345, 0.34501, 0.3316, 3600.0, False),
            Excursion(-1, "3:1", "3:1", float("nan"), 0.345, 0.345, 0.345, 3600.0, True),
        ]
    }
    back = results.load(results.save(to_dataset(pts, dirs, cfg, trips), tmp_path / "c.nc"),
                        kinds=("splitmap",))  # fmt: skip
    row = back.sel(split="3:1")
    assert row.exc_end_split.values.tolist() == ["2:2", "3:1 (solver failed)"]
    assert row.exc_t_change.values[0] == 1270.0 and np.isnan(row.exc_t_change.values[1])
    assert back.exc_end_split.sel(split="2:2").values.tolist() == ["", ""]
    assert np.isnan(back.exc_max_risk.sel(split="4:0")).all()
