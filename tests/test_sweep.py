"""Sweeps: spec validation, a real Dask LocalCluster against point-by-point runs, resume,
corrupt files, faults (raising and diverging points, a killed worker, a killed sweep process)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from typer.testing import CliRunner

from headspec.apps import sweep
from headspec.apps.cli import app
from headspec.conventions import results
from headspec.conventions.config import ConfigError
from headspec.conventions.runs import config_model, simulate, solve
from helpers import sigint_not_ignored

runner = CliRunner()
HEADSPEC = str(Path(sys.executable).parent / "headspec")
TINY = {
    "task.D": 40,
    "task.L": 4,
    "model.H": 2,
    "train.T": 1.0,
    "record.points": 6,
    "record.n_mc": 256,
}
THEORY = {"theory.method": "qmc", "theory.n": 256, "theory.max_steps": 500}  # one shape: compiled
# once per process; qmc: these tests are about the sweep, and the sampled drift compiles fastest


def _spec(out, kind="simulate", config=None, axes=None, **sweep_keys) -> sweep.SweepSpec:
    return sweep.spec_from_dict(
        {
            "sweep": {"kind": kind, "out": str(out), **sweep_keys},
            "config": {**TINY, **(config or {})},
            "axes": axes or {"task.latent.scale": [0.5, 1.5]},
        }
    )


def _toml_value(v) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(v)


def _write_spec(path: Path, spec: sweep.SweepSpec) -> Path:
    lines = ["[sweep]"]
    lines += [
        f"{k} = {_toml_value(v)}" for k, v in spec.sweep.model_dump().items() if v is not None
    ]
    lines += ["[config]"] + [f'"{k}" = {_toml_value(v)}' for k, v in spec.config.items()]
    lines += ["[axes]"]
    for k, v in spec.axes.items():
        v = v.model_dump() if isinstance(v, sweep.Range) else v
        lines.append(f'"{k}" = {_toml_value(v)}')
    path.write_text("\n".join(lines) + "\n")
    return path


def _point_equal(collected: xr.Dataset, params: dict, one: xr.Dataset, rtol=0.0) -> None:
    """The collected point (padded to the largest H/F/J; its seeds of ``one``) equals a run of
    its own: bit for bit by default."""
    sel = collected.sel(params).sel(seed=one.seed.values)
    crop = {d: slice(0, one.sizes[d]) for d in ("head", "head2", "feature", "atom")}
    sel = sel.isel({d: s for d, s in crop.items() if d in sel.dims})
    for name, var in one.data_vars.items():
        a, b = np.asarray(sel[name], dtype=float), np.asarray(var, dtype=float)
        assert a.shape == b.shape, name
        ok = np.allclose(a, b, rtol=rtol, atol=0, equal_nan=True)
        assert ok, (name, params, np.nanmax(np.abs(a - b)))
    assert str(sel.status.values) in ("done", "diverged")


# ----------------------------------------------------------------------------- spec (no cluster)
def test_range_values_linear_log_and_integer():
    assert sweep.Range(start=0.5, stop=2.0, num=4).values() == [0.5, 1.0, 1.5, 2.0]
    assert sweep.Range(start=100, stop=10000, num=3, spacing="log").values() == [100, 1000, 10000]
    with pytest.raises(ValueError, match="start > 0"):
        sweep.Range(start=0.0, stop=1.0, num=3, spacing="log")
    with pytest.raises(ValueError, match="repeats a value"):  # 1, 1.33→1, 1.67→2, 2
        _spec("x", axes={"model.H": {"start": 1, "stop": 2, "num": 4}})


@pytest.mark.parametrize(
    ("axes", "sweep_keys", "expect"),
    [
        ({}, {}, "no axes"),
        ({"seeds": [1, 2]}, {}, "sweep.seeds"),
        ({"model.H": [2, 2]}, {}, "repeats a value"),
        ({"model.H": []}, {}, "'model.H' needs a non-empty list"),
        ({"model.H": 3}, {}, "'model.H' needs a non-empty list"),
        ({"model.H": {"start": 1}}, {}, "stop: Field required"),
        ({"model.H": [2]}, {"seeds": 0}, "sweep.seeds"),
        ({"model.H": [2]}, {"kind": "train"}, "sweep.kind"),
        ({"model.H": [2]}, {"colour": 1}, "sweep.colour"),
    ],
)
def test_bad_specs_name_the_field(axes, sweep_keys, expect):
    data = {"sweep": {"kind": "simulate", **sweep_keys}, "axes": axes}
    with pytest.raises(ConfigError, match=expect):
        sweep.spec_from_dict(data)


@pytest.mark.parametrize(
    ("axes", "config", "expect"),
    [
        ({"model.H": [2, 0]}, {}, r"sweep point model.H = 0: model.H: .*≥ 1"),
        ({"model.Hx": [2]}, {}, r"model.Hx: unknown key"),
        ({"model.activation": ["softmax", "relu"]}, {}, r'model.activation = "relu"'),
        ({"task.D": [40, 5]}, {"train.engine": "reduced"}, r"sweep point task.D = 5: .*engine"),
        ({"model.H": [2]}, {"train.lr": -1.0}, r"base config: train.lr"),
    ],
)
def test_invalid_points_are_refused_before_any_work(tmp_path, axes, config, expect):
    spec = _spec(tmp_path / "out", axes=axes, config=config)
    with pytest.raises(ConfigError, match=expect):
        sweep.resolve(spec)
    assert not (tmp_path / "out").exists()


def test_resolve_splits_seeds_into_blocks_and_names_axes():
    spec = _spec(
        "o",
        axes={"model.H": [2, 3], "train.schedule.kind": ["constant", "inverse_time"],
              "task.latent.kind": ["discrete"]},
        seeds=5, seed=10, seeds_per_task=2,
    )  # fmt: skip
    sw = sweep.resolve(spec)
    assert [a.name for a in sw.axes] == ["H", "train_schedule_kind", "task_latent_kind"]
    assert sw.shape == (2, 2, 1) and len(sw.points) == 4 and len(sw.tasks) == 12
    for p in range(4):
        blocks = [(t.config.seed, t.config.seeds) for t in sw.tasks if t.point == p]
        assert blocks == [(10, 2), (12, 2), (14, 1)]
    assert len({t.hash for t in sw.tasks}) == 12
    assert [t.config.model.H for t in sw.points] == [2, 2, 3, 3]  # first axis slowest
    # the hash is the resolved config's: same config, same hash, whatever the spec's spelling
    again = sweep.resolve(_spec("other", config={"model.sigma0": 0.1}, axes=spec.axes,
                                seeds=5, seed=10, seeds_per_task=2))  # fmt: skip
    assert [t.hash for t in again.tasks] == [t.hash for t in sw.tasks]


def test_changed_spec_is_refused_unless_forced(tmp_path):
    out = tmp_path / "out"
    sweep.prepare(sweep.resolve(_spec(out, axes={"model.H": [2, 3]})))
    changed = sweep.resolve(_spec(out, axes={"model.H": [2, 4]}, config={"train.T": 2.0}))
    with pytest.raises(sweep.SweepError) as e:
        sweep.prepare(changed)
    msg = str(e.value)
    assert "axis model.H: [2, 3] → [2, 4]" in msg and "base config train.T: 1.0 → 2.0" in msg
    assert "--force" in msg
    manifest, todo = sweep.prepare(changed, force=True)
    assert manifest["spec_hash"] == changed.spec_hash and len(todo) == 2


def test_a_second_run_on_the_same_folder_is_refused(tmp_path):
    import fcntl

    sw = sweep.resolve(_spec(tmp_path / "out"))
    sw.out.mkdir()
    with (sw.out / ".lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running sweep holds it
        with pytest.raises(sweep.SweepError, match="another headspec sweep is running"):
            sweep.run(sw)
    assert not (sw.out / "manifest.json").exists()


def test_unreachable_scheduler_is_a_clear_error(tmp_path):
    import dask.config
    import distributed  # noqa: F401  (its config defaults must exist before config.set)

    sw = sweep.resolve(_spec(tmp_path / "out"))
    with (
        dask.config.set({"distributed.comm.timeouts.connect": "2s"}),
        pytest.raises(sweep.SweepError, match=r"cannot reach the Dask scheduler.*fix"),
    ):
        sweep.run(sw, scheduler="tcp://127.0.0.1:9")


def test_worker_writes_the_point_only_where_the_folder_token_matches(tmp_path):
    task = sweep.resolve(_spec(tmp_path, kind="theory", config=THEORY, seeds=2)).tasks[0]
    (tmp_path / "points").mkdir()
    (tmp_path / sweep.TOKEN).write_text("abc")
    target = tmp_path / task.file
    res = sweep.run_task("theory", task.config.model_dump_json(), str(target), "other")
    assert "dataset" in res and not target.exists()  # another machine's folder: driver writes
    res = sweep.run_task("theory", task.config.model_dump_json(), str(target), "abc")
    assert res.get("written") and "dataset" not in res
    assert sweep.task_is_intact(tmp_path, task, None)  # loads, and its config hashes to the task
    assert results.load(target).attrs["kind"] == "theory"


def test_cli_sweep_bad_input_exits_2_without_output(tmp_path):
    out = tmp_path / "out"
    spec = _write_spec(tmp_path / "s.toml", _spec(out))
    cases = [
        ([str(tmp_path / "missing.toml")], "does not exist"),
        ([str(spec), "--axis", "model.H=[0, 2]"], "model.H = 0"),
        ([str(spec), "--set", "sweep.kind='train'"], "sweep.kind"),
        ([str(spec), "--axis", "model.H"], "--axis"),
    ]
    for args, expect in cases:
        r = runner.invoke(app, ["sweep", *args])
        text = (r.stdout or "") + (r.stderr or "")
        assert r.exit_code == 2, (args, text)
        assert expect in text and "Traceback" not in text, (args, text)
        assert not out.exists()
    r = runner.invoke(app, ["sweep", "collect", str(tmp_path)])
    assert r.exit_code == 2 and "manifest.json" in r.stderr


# ----------------------------------------------------------------------------- a real cluster
@pytest.fixture(scope="module")
def jax_cache():
    """The session's persistent compilation cache (conftest: ~/.cache/headspec/jax-tests), so that
    workers and command-line sweeps read back the programs this and earlier sessions compiled
    instead of compiling each of them cold in every worker process."""
    return os.environ["HEADSPEC_JAX_CACHE"]


@pytest.fixture(scope="module")
def client():
    """A real LocalCluster as `headspec sweep` starts it (worker processes on loopback), with one
    worker: the fast tiers test sweeps with one worker; two workers sharing the tasks (and one of
    them killed) are the slow tier's command-line tests below. The worker inherits the session's
    HEADSPEC_JAX_CACHE (conftest)."""
    with sweep.dask_client(workers=1) as c:
        yield c


@pytest.fixture(scope="module")
def sim_sweep(client, tmp_path_factory):
    """A simulate sweep over scale × H with 2 seeds in blocks of 1 (seed blocks concatenated)."""
    out = tmp_path_factory.mktemp("sim") / "out"
    spec = _spec(out, axes={"task.latent.scale": [0.5, 1.5], "model.H": [2, 3]},
                 seeds=2, seeds_per_task=1)  # fmt: skip
    sw = sweep.resolve(spec)
    report = sweep.run(sw, client=client)
    return sw, report


@pytest.mark.slow  # test tier: a law/statistical, cluster or physics test (docs/tests.md)
def test_sweep_on_local_cluster_equals_point_by_point_runs(sim_sweep):
    sw, report = sim_sweep
    assert (report.total, report.skipped, report.done, report.failed) == (8, 0, 8, [])
    ds = xr.load_dataset(report.dataset_path, engine="h5netcdf")
    assert ds.sizes["scale"] == 2 and ds.sizes["H"] == 2 and ds.sizes["seed"] == 2
    assert ds["scale"].attrs["config_key"] == "task.latent.scale"
    assert np.isnan(ds.M.sel(H=2).isel(head=2)).all()  # padded head of the H = 2 points
    for t in sw.tasks:  # the same tasks run one by one in this process: bit for bit
        one = simulate(t.config)
        _point_equal(ds, t.params, one)
        if t.config.seed == sw.seed:
            assert float(ds.bayes_risk.sel(t.params)) == one.attrs["bayes_risk"]
    # a seed's curves do not depend on how seeds are grouped (common random numbers): the
    # whole point in one run agrees up to the order of sums (float32 held-out loss)
    p = sw.points[-1]
    _point_equal(ds, p.params, simulate(p.config.model_copy(update={"seeds": 2})), rtol=1e-6)


def test_cli_status_collect_and_changed_spec(sim_sweep, tmp_path):
    sw, _ = sim_sweep
    r = runner.invoke(app, ["sweep", "status", str(sw.out)])
    assert r.exit_code == 0 and "done" in r.stdout and "8" in r.stdout
    out = tmp_path / "all.nc"
    r = runner.invoke(app, ["sweep", "collect", str(sw.out), "--out", str(out)])
    assert r.exit_code == 0 and "4 of 4 points finished" in r.stdout
    assert (tmp_path / "sweep_final_risk.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    xr.testing.assert_identical(
        xr.load_dataset(out, engine="h5netcdf").drop_attrs(), sweep.collect(sw.out).drop_attrs()
    )
    changed = _spec(sw.out, axes={"task.latent.scale": [0.5, 2.5], "model.H": [2, 3]},
                    seeds=2, seeds_per_task=1)  # fmt: skip
    spec = _write_spec(tmp_path / "changed.toml", changed)
    before = sorted((sw.out / "points").iterdir())
    r = runner.invoke(app, ["sweep", str(spec)])
    assert r.exit_code == 2, r.stdout
    assert "axis task.latent.scale: [0.5, 1.5] → [0.5, 2.5]" in r.stderr and "--force" in r.stderr
    assert sorted((sw.out / "points").iterdir()) == before


def test_plot_sweep_draws_one_line_per_other_axis_value(sim_sweep):
    from headspec.apps.plots import final_risk, plot_sweep

    ds = sweep.collect(sim_sweep[0].out)
    mean, se = final_risk(ds)
    assert mean.dims == ("scale", "H") and np.all(np.asarray(se) > 0)
    np.testing.assert_allclose(mean.sel(scale=0.5, H=2), ds.risk.sel(scale=0.5, H=2)[:, -1].mean())
    ax = plot_sweep(ds).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["Bayes risk R_B"]
    assert len(ax.containers) == 2  # two error-bar lines: H = 2 and H = 3


@pytest.mark.slow  # test tier: a law/statistical, cluster or physics test (docs/tests.md)
def test_theory_sweep_on_a_scheduler_address_equals_point_by_point_runs(client, tmp_path):
    spec = _spec(tmp_path / "out", kind="theory", config=THEORY, axes={"train.lr": [0.5, 1.0]},
                 seeds=2)  # fmt: skip
    sw = sweep.resolve(spec)
    report = sweep.run(sw, scheduler=client.scheduler.address)  # as --scheduler ADDRESS
    assert report.done == 2 and not report.failed
    ds = sweep.collect(sw.out)
    assert ds.attrs["sweep_kind"] == "theory" and list(ds.lr.values) == [0.5, 1.0]
    for p in sw.points:
        one = solve(p.config)
        _point_equal(ds, p.params, one)
        assert float(ds.bayes_risk.sel(p.params)) == one.attrs["bayes_risk"]


def test_points_with_different_time_grids_collect_on_a_grid_index(client, tmp_path):
    sw = sweep.resolve(_spec(tmp_path / "out", kind="theory", config=THEORY, seeds=2,
                             axes={"task.D": [40, 70]}))  # fmt: skip
    assert sweep.run(sw, client=client).done == 2
    ds = sweep.collect(sw.out)
    assert "t_index" in ds.dims and ds.t.dims == ("D", "t_index")
    for t in sw.tasks:
        one = results.load(sw.out / t.file)
        n = one.sizes["t"]
        np.testing.assert_array_equal(ds.t.sel(D=t.params["D"])[:n], one.t)
        np.testing.assert_array_equal(ds.risk.sel(D=t.params["D"])[:, :n], one.risk)
    assert not np.array_equal(ds.t.sel(D=40), ds.t.sel(D=70), equal_nan=True)


def test_rerun_skips_finished_points_and_recomputes_corrupt_ones(sim_sweep, client):
    sw, _ = sim_sweep
    before = sweep.collect(sw.out)
    files = [sw.out / t.file for t in sw.tasks]
    mtimes = [f.stat().st_mtime_ns for f in files]
    report = sweep.run(sw, client=client)
    assert (report.skipped, report.done) == (8, 0)
    assert [f.stat().st_mtime_ns for f in files] == mtimes  # nothing rewritten
    # truncate one, flip bytes in the middle of another, delete a third; a fourth is intact on
    # disk but unknown to the manifest (driver killed before recording it): kept after a check
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2])
    data = bytearray(files[1].read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
    files[1].write_bytes(bytes(data))
    files[2].unlink()
    manifest = json.loads((sw.out / "manifest.json").read_text())
    del manifest["tasks"][3]["sha256"]
    (sw.out / "manifest.json").write_text(json.dumps(manifest))
    (sw.out / "points" / ".stale.nc.abc.tmp").write_bytes(b"half")
    report = sweep.run(sw, client=client)
    assert (report.skipped, report.done) == (5, 3)
    assert not list((sw.out / "points").glob(".*.tmp"))
    after = sweep.collect(sw.out)
    xr.testing.assert_identical(before.drop_attrs(), after.drop_attrs())


def test_a_sweep_of_an_older_headspec_resumes_without_recomputing(sim_sweep, client, tmp_path):
    """An older headspec lacked a config field that now exists with a None default (here
    model.b0): its spec and point hashes differ from today's, but the results are the same
    runs. The resume accepts the spec and re-uses (renames) every point instead of recomputing
    it; a real spec change is still refused."""
    import shutil

    import h5py

    from headspec.apps.sweep.manifest import file_sha256

    sw, _ = sim_sweep
    out = tmp_path / "old"
    shutil.copytree(sw.out, out)
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["spec"]["base"]["model"]["b0"]
    manifest["spec_hash"] = "older"
    for i, e in enumerate(manifest["tasks"]):  # the older names of the point files
        (out / e["file"]).rename(out / f"points/older{i}.nc")
        e["hash"], e["file"] = f"older{i}", f"points/older{i}.nc"
        with h5py.File(out / e["file"], "r+") as f:
            cfg = json.loads(f.attrs["config_json"])
            del cfg["model"]["b0"]
            f.attrs["config_json"] = json.dumps(cfg)
        e["sha256"] = file_sha256(out / e["file"])  # as the older headspec recorded it
    (out / "manifest.json").write_text(json.dumps(manifest))
    axes = {"task.latent.scale": [0.5, 1.5], "model.H": [2, 3]}
    now = sweep.resolve(_spec(out, axes=axes, seeds=2, seeds_per_task=1))
    report = sweep.run(now, client=client, collect_after=False)  # collected below
    assert (report.skipped, report.done) == (8, 0)
    record = lambda e: {k: v for k, v in e.items() if k not in ("hash", "file")}  # noqa: E731
    kept_records = json.loads((out / "manifest.json").read_text())["tasks"]
    assert [record(e) for e in kept_records] == [record(e) for e in manifest["tasks"]]
    assert sorted(p.name for p in (out / "points").iterdir()) == sorted(
        Path(t.file).name for t in now.tasks
    )
    kept = sweep.collect(out).drop_attrs().drop_vars("config_json")  # as the older one wrote
    xr.testing.assert_identical(sweep.collect(sw.out).drop_attrs().drop_vars("config_json"), kept)
    changed = sweep.resolve(_spec(out, axes={**axes, "model.H": [2, 4]}, seeds=2, seeds_per_task=1))
    with pytest.raises(sweep.SweepError, match="another spec"):
        sweep.run(changed, client=client)


def test_raising_and_diverging_points_are_recorded_and_the_rest_finishes(client, tmp_path):
    axes = {
        "theory.init": [{"kind": "perturbed"}, {"kind": "simulation", "path": "/no/such.nc"}],
        "train.lr": [1.0, 1e9],
    }
    spec = _spec(tmp_path / "out", kind="theory", config=THEORY, axes=axes, seeds=2)
    sw = sweep.resolve(spec)
    report = sweep.run(sw, client=client)
    assert (report.done, report.diverged, len(report.failed)) == (1, 1, 2)
    manifest = sweep.read_manifest(sw.out)
    st = {(json.dumps(e["params"]["init"]), e["params"]["lr"]): e for e in manifest["tasks"]}
    failed = [e for e in manifest["tasks"] if e["status"] == "failed"]
    assert all("does not exist" in e["error"] and "Traceback" in e["traceback"] for e in failed)
    assert st[('{"kind": "perturbed"}', 1e9)]["status"] == "diverged"
    ds = sweep.collect(sw.out)
    assert ds.status.values.tolist() == [["done", "diverged"], ["failed", "failed"]]
    assert np.isnan(ds.risk.isel(init=1)).all() and np.isfinite(ds.risk.isel(init=0, lr=0)).all()
    n_files = len(list((sw.out / "points").glob("*.nc")))
    again = sweep.run(sw, client=client)  # failed points are tried again, finished ones kept
    assert (again.skipped, len(again.failed)) == (2, 2)
    assert len(list((sw.out / "points").glob("*.nc"))) == n_files == 2


# ----------------------------------------------------------------------------- killed processes
SLOW = {"task.D": 200, "train.T": 40.0}  # ≈ 1 s per point on one core after compilation
SLOW_AXES = {"task.latent.scale": [0.5, 1.0, 1.5, 2.0], "train.lr": [0.5, 1.0]}  # 8 points


def _slow_spec_file(tmp_path: Path, out: str = "out") -> Path:
    spec = _spec(tmp_path / out, config=SLOW, axes=SLOW_AXES, seeds=2)
    return _write_spec(tmp_path / "spec.toml", spec)


def _run_to_end(path: Path, jax_cache: str) -> tuple[int, str]:
    proc = _cli_sweep(path, jax_cache)
    try:
        log, _ = proc.communicate(timeout=300)
    finally:
        _cleanup(proc)
    return proc.returncode, log


def _cli_sweep(spec_path: Path, jax_cache: str, *extra) -> subprocess.Popen:
    env = dict(os.environ, HEADSPEC_JAX_CACHE=jax_cache)
    with sigint_not_ignored() as preexec_fn:  # a Ctrl-C must reach it under pytest-xdist too
        return subprocess.Popen(
            [HEADSPEC, "sweep", str(spec_path), "--workers", "2", *extra],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )


def _wait_for_points(folder: Path, n: int, proc: subprocess.Popen, timeout=240.0) -> int:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        k = len(list((folder / "points").glob("*.nc")))
        if k >= n or proc.poll() is not None:
            return k
        time.sleep(0.02)
    raise TimeoutError("the sweep wrote no point in time")


def _cleanup(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):  # the group is gone: no orphans left
        os.killpg(proc.pid, signal.SIGKILL)  # orphans, if any


@pytest.mark.slow  # default-suite time budget (~10 min on 2 cores): run with -m slow
def test_sigkill_of_the_sweep_then_rerun_gives_every_point_once(client, tmp_path, jax_cache):
    path = _slow_spec_file(tmp_path)
    proc = _cli_sweep(path, jax_cache)
    try:
        k = _wait_for_points(tmp_path / "out", 1, proc)
        proc.send_signal(signal.SIGKILL)  # the sweep process only, as a crash would
        proc.wait(timeout=30)
    finally:
        _cleanup(proc)
    sw = sweep.resolve(sweep.load_spec(path)[0])
    done_at_kill = len(list((tmp_path / "out" / "points").glob("*.nc")))
    assert 1 <= k and done_at_kill < len(sw.tasks), "not killed midway"
    rc, log = _run_to_end(path, jax_cache)
    assert rc == 0, log
    assert "resuming" in log
    files = sorted(p.name for p in (tmp_path / "out" / "points").iterdir())
    assert files == sorted(Path(t.file).name for t in sw.tasks)  # each once, nothing else
    manifest = sweep.read_manifest(tmp_path / "out")
    assert [e["status"] for e in manifest["tasks"]] == ["done"] * len(sw.tasks)
    assert len({e["hash"] for e in manifest["tasks"]}) == len(sw.tasks)
    resumed = xr.load_dataset(tmp_path / "out" / "sweep.nc", engine="h5netcdf")
    ref = sweep.resolve(_spec(tmp_path / "ref", config=SLOW, axes=SLOW_AXES, seeds=2))
    sweep.run(ref, client=client)  # uninterrupted
    xr.testing.assert_identical(resumed.drop_attrs(), sweep.collect(ref.out).drop_attrs())


@pytest.mark.slow  # default-suite time budget (~10 min on 2 cores): run with -m slow
def test_a_killed_worker_does_not_stop_the_sweep(tmp_path, jax_cache):
    import psutil

    path = _slow_spec_file(tmp_path)
    proc = _cli_sweep(path, jax_cache)
    try:
        _wait_for_points(tmp_path / "out", 1, proc)

        def worker_pids():
            children = psutil.Process(proc.pid).children(recursive=True)
            return {c.pid for c in children if "spawn_main" in " ".join(c.cmdline())}

        workers = worker_pids()
        assert len(workers) == 2
        os.kill(min(workers), signal.SIGKILL)  # mid-task: one task is running on each
        restarted = False
        while proc.poll() is None and not restarted:
            with contextlib.suppress(psutil.Error):
                restarted = bool(worker_pids() - workers)  # the nanny started a new worker
            time.sleep(0.05)
        log, _ = proc.communicate(timeout=300)
    finally:
        _cleanup(proc)
    assert proc.returncode == 0, log
    assert restarted, "the sweep ended before the killed worker was replaced"
    manifest = sweep.read_manifest(tmp_path / "out")
    assert [e["status"] for e in manifest["tasks"]] == ["done"] * 8
    ds = xr.load_dataset(tmp_path / "out" / "sweep.nc", engine="h5netcdf")
    assert np.isfinite(ds.risk).all()


EXAMPLES = sorted((Path(__file__).parents[1] / "experiments").glob("sweep_*.toml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_sweep_specs_resolve(path):
    spec, root = sweep.load_spec(path)
    sw = sweep.resolve(spec, root)
    assert len(sw.tasks) >= 2 and all(t.hash for t in sw.tasks)


def test_there_is_an_example_sweep_spec():
    assert EXAMPLES


@pytest.mark.slow
def test_ctrl_c_exits_130_and_the_rerun_resumes(tmp_path, jax_cache):
    # points ~10× longer than SLOW's: since another η or signal scale compiles nothing new, the
    # other seven of SLOW's points finished within ~4 s of the first, before the Ctrl-C landed
    spec = _spec(tmp_path / "out", config={**SLOW, "train.T": 400.0}, axes=SLOW_AXES, seeds=2)
    path = _write_spec(tmp_path / "spec.toml", spec)
    proc = _cli_sweep(path, jax_cache)
    try:
        _wait_for_points(tmp_path / "out", 1, proc)
        proc.send_signal(signal.SIGINT)
        log, _ = proc.communicate(timeout=120)
    finally:
        _cleanup(proc)
    assert proc.returncode == 130 and "run the same command again to resume" in log
    kept = len(list((tmp_path / "out" / "points").glob("*.nc")))
    rc, log = _run_to_end(path, jax_cache)
    assert rc == 0 and f"resuming: {kept} of 8 tasks already finished" in log


# ------------------------------------------------------------- reproduce on a scheduler
_RECIPE = """
[experiment]
title = "tiny"
[config]
task = { L = 4, D = 60, latent = { kind = "discrete", atoms = [[2.0, 0.0], [0.0, 2.0]] } }
model = { H = 2 }
train = { T = 1.0, lr = 0.5, engine = "reduced" }
record = { points = 5, n_mc = 512 }
theory = { method = "qmc", n = 256 }
[scale.full]
train = { T = 2.0 }
"""


@pytest.mark.slow  # test tier: a law/statistical, cluster or physics test (docs/tests.md)
def test_reproduce_on_a_scheduler_resumes_without_recomputing(client, tmp_path, monkeypatch):
    """`reproduce --scale full --scheduler ADDRESS` at smoke size: the runs of a recipe go to the
    scheduler's workers (results equal to runs in this process), and after an interruption the
    same command reuses every finished run (files untouched) and computes only the rest."""
    from headspec.apps import experiments
    from headspec.apps.experiments import Claim, Run, Tolerance

    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / experiments.RECIPES["E1"].file).write_text(_RECIPE)
    interrupt = {"on": True}

    def recipe(ctx):
        pairs = ctx.paired([Run("a", "simulate", {"seeds": 2}),
                            Run("b", "simulate", {"seeds": 2, "train.lr": 0.25})])  # fmt: skip
        if interrupt["on"]:
            raise KeyboardInterrupt  # as a Ctrl-C after the first batch
        ctx.runs([Run("c", "theory", {"train.lr": 0.75})])
        ctx.claim(Claim("E1.c", "c", "q", pairs["a"][2]["risk"]["max_dev"], 0.0,
                        Tolerance("at_least", 0.0, why="t")))  # fmt: skip

    stand_in = experiments.Recipe("E1", experiments.RECIPES["E1"].file, recipe)  # title only
    monkeypatch.setitem(experiments.RECIPES, "E1", stand_in)
    out, lines = tmp_path / "report", []
    kw = dict(scale="full", outdir=out, only=["E1"], scheduler=client.scheduler.address,
              folder=folder, log=lines.append)  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        experiments.reproduce(**kw)
    assert len(lines) == 4 and all(" s on a worker (CPU " in x for x in lines), lines
    data = out / "data"
    first = {f.name: f.stat().st_mtime_ns for f in data.iterdir()}
    assert sorted(first) == ["E1_a.nc", "E1_a_ode.nc", "E1_b.nc", "E1_b_ode.nc"]
    a = results.load(data / "E1_a.nc")  # a worker's run equals the same run in this process
    xr.testing.assert_equal(a.drop_attrs(), simulate(config_model(a)).drop_attrs())

    interrupt["on"] = False
    lines.clear()
    (o,) = experiments.reproduce(**kw)
    assert o.error is None and o.claims[0].tolerance.why == "t" and o.claims[0].verdict is True
    assert sorted(lines) == ["E1 a: reused", "E1 a_ode: reused", "E1 b: reused",
                             "E1 b_ode: reused", "E1 c: " + lines[-1].split(": ")[1]]  # fmt: skip
    assert " s on a worker (CPU " in lines[-1]
    assert o.reused == 4  # and the workers' files record their compute time:
    kept = {results.COMPUTE_SECONDS, results.COMPUTE_CPU_SECONDS}  # wall and CPU seconds
    assert all(kept <= results.load(data / f).attrs.keys() for f in first)
    assert {f: data.joinpath(f).stat().st_mtime_ns for f in first} == first  # nothing rewritten
    assert (out / "index.md").exists() and (data / "E1_c.nc").exists()


def test_a_task_whose_workers_kept_dying_is_recorded_with_the_likely_cause_and_the_fix():
    """Dask raises KilledWorker when every worker that ran a task died (a local worker past its
    memory share is killed by its nanny): the manifest's error keeps Dask's words and adds the
    fix (resume with fewer workers); other errors are kept as they are."""
    from types import SimpleNamespace

    from distributed.scheduler import KilledWorker

    from headspec.apps.sweep.driver import _task_error

    killed = KilledWorker("headspec-abc", SimpleNamespace(address="tcp://127.0.0.1:1"), 3)
    text = _task_error(killed)
    assert text.startswith("KilledWorker: Attempted to run task 'headspec-abc' on 4 different")
    assert "memory" in text and "fix: re-run the same command with fewer workers" in text
    assert "your own scheduler's workers more memory" in text  # --scheduler: no --workers
    assert _task_error(ValueError("bad")) == "ValueError: bad"
