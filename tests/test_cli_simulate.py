"""`headspec simulate` and `headspec plot` through the CLI."""

import pytest
import xarray as xr
from typer.testing import CliRunner

from headspec.apps.cli import app
from headspec.conventions import results

runner = CliRunner()
TINY = ["--D", "40", "--L", "4", "--H", "2", "--T", "0.5", "--seeds", "2",
        "--set", "record.points=4", "--set", "record.n_mc=256"]  # fmt: skip


def _text(r):
    return (r.stdout or "") + (r.stderr or "")


@pytest.fixture(scope="module")
def sim_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim") / "run.nc"
    r = runner.invoke(app, ["simulate", *TINY, "--out", str(out)])
    assert r.exit_code == 0, (_text(r), r.exception)
    return out


def test_simulate_writes_a_loadable_result_with_provenance(sim_file):
    ds = results.load(sim_file)
    assert ds.attrs["kind"] == "simulation"
    cfg = results.config_of(ds)
    assert cfg["task"]["D"] == 40 and cfg["model"]["H"] == 2 and cfg["seeds"] == 2
    assert {"git_revision", "headspec_version", "seed", "engine"} <= set(ds.attrs)
    assert ds.risk.shape == (2, ds.sizes["t"]) and float(ds.t[-1]) == pytest.approx(0.5)


def test_simulate_prints_summary_and_progress(tmp_path):
    out = tmp_path / "r.nc"
    r = runner.invoke(app, ["simulate", *TINY, "--out", str(out), "--plot"])
    assert r.exit_code == 0, _text(r)
    text = _text(r)
    assert "Bayes risk" in text and "best feature" in text and "steps" in text
    assert (tmp_path / "r_risk.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--H", "0"], "model.H"),
        (["--T", "-1"], "train.T"),
        (["--activation", "relu"], "model.activation"),
        (["--lr", "nan"], "train.lr"),
        (["--set", "train.schedule.kind='cosine'"], "train.schedule"),
        (["--set", "record.grid='weird'"], "record.grid"),
        (["--set", "record.t_min=5", "--T", "1"], "record.t_min"),
        (["--set", "model.sigma0=-1"], "model.sigma0"),
        (["--set", "train.dtype='float16'"], "train.dtype"),
        (["--set", "train.batch=0"], "train.batch"),
        (["--seeds", "0"], "seeds"),
        (["--set", "modle.H=2"], "modle"),
    ],
)
def test_simulate_refuses_bad_options_without_output(tmp_path, args, expect):
    out = tmp_path / "never.nc"
    r = runner.invoke(app, ["simulate", *args, "--out", str(out)])
    assert r.exit_code == 2, _text(r)
    assert expect in _text(r) and "fix" in _text(r) and "Traceback" not in _text(r)
    assert not out.exists()


def test_divergence_is_reported_and_finite_seeds_kept(tmp_path):
    out = tmp_path / "div.nc"
    r = runner.invoke(
        app,
        [
            "simulate",
            *TINY,
            "--activation",
            "softmax1",
            "--lr",
            "1e300",
            "--set",
            "train.dtype='float64'",
            "--out",
            str(out),
        ],
    )
    assert r.exit_code == 3, _text(r)
    text = _text(r)
    assert "diverged at step" in text and "t =" in text and "learning rate" in text
    ds = results.load(out)
    assert int(ds.failed.sum()) >= 1


def test_plot_command_writes_figures(sim_file, tmp_path):
    r = runner.invoke(app, ["plot", str(sim_file), "-o", str(tmp_path), "-f", "png", "-f", "pdf"])
    assert r.exit_code == 0, _text(r)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "run_risk.png" in names and "run_overlaps.pdf" in names
    assert (tmp_path / "run_risk.pdf").read_bytes()[:4] == b"%PDF"


def test_plot_refuses_missing_foreign_and_newer_files(sim_file, tmp_path):
    r = runner.invoke(app, ["plot", str(tmp_path / "nope.nc")])
    assert r.exit_code == 2 and "does not exist" in _text(r)
    foreign = tmp_path / "foreign.nc"
    xr.Dataset({"x": ("a", [1.0, 2.0])}).to_netcdf(foreign, engine="h5netcdf")
    r = runner.invoke(app, ["plot", str(foreign)])
    assert r.exit_code == 2 and "not a headspec result" in _text(r)
    garbage = tmp_path / "garbage.nc"
    garbage.write_bytes(b"not a netcdf file at all")
    r = runner.invoke(app, ["plot", str(garbage)])
    assert r.exit_code == 2 and "not a readable netCDF" in _text(r)
    newer = results.load(sim_file)
    newer.attrs["schema_version"] = results.SCHEMA_VERSION + 1
    results.save(newer, tmp_path / "newer.nc")
    r = runner.invoke(app, ["plot", str(tmp_path / "newer.nc")])
    assert r.exit_code == 2 and "schema" in _text(r)
    r = runner.invoke(app, ["plot", str(sim_file), "-f", "gif", "-o", str(tmp_path)])
    assert r.exit_code == 2 and "png, pdf or svg" in _text(r)


def test_prune_command(sim_file, tmp_path):
    r = runner.invoke(app, ["prune", str(sim_file), "--seed", "1", "--n", "512", "-o",
                            str(tmp_path), "--random-orders", "2"])  # fmt: skip
    assert r.exit_code == 0, _text(r)
    assert "heads kept" in _text(r) and (tmp_path / "run_prune.png").exists()
    r = runner.invoke(app, ["prune", str(sim_file), "--seed", "99"])
    assert r.exit_code == 2 and "--seed 99" in _text(r) and "fix" in _text(r)
    r = runner.invoke(app, ["prune", str(tmp_path / "missing.nc")])
    assert r.exit_code == 2 and "does not exist" in _text(r)
