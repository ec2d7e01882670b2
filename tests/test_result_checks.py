"""Issue "Hardening and first contact", items 4, 5, 7, 8 and 9 (scheduler): result files checked
on load, compare/plot of mismatched files, risks worse than ŷ = 0 and NaN estimates, sweep exit
codes, bad --scheduler addresses and TLS options.

Every refusal: exit code 2 (3 for NaN), no traceback, the field/option/file named, a fix, no
output left. No test here runs JAX work: results are fabricated with numpy in the schema of
headspec.conventions.results, and the sweep tests use folders whose points are already written.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from typer.testing import CliRunner

from headspec.apps import sweep
from headspec.apps.cli import app
from headspec.conventions import results
from headspec.conventions.config import (
    BayesRunConfig,
    SimulateConfig,
    TheoryConfig,
    load_config,
)
from results import made_result, write_unchecked

runner = CliRunner()
TINY = ["task.D=40", "task.L=4", "model.H=2", "train.T=1.0", "record.points=2"]


def _make(kind="simulation", *overrides, **given) -> xr.Dataset:
    """A made-up result of the real schema (one seed unless told; tests/results.py)."""
    return made_result(kind, *TINY, *overrides, **({"seeds": 1} | given))


def _text(res) -> str:
    return " ".join(((res.stdout or "") + (res.stderr or "")).split())


def _refused(res, *expect, code=2) -> str:
    text = _text(res)
    assert res.exit_code == code, (res.exit_code, text, res.exception)
    assert "Traceback" not in text, text
    assert isinstance(res.exception, SystemExit), res.exception  # an exit, not a crash
    assert "fix" in text, text
    for e in expect:
        assert e in text, f"{e!r} not in: {text}"
    return text


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A good simulation and theory result, and the same simulation as a dataset."""
    d = tmp_path_factory.mktemp("results")
    sim = _make()
    paths = {
        "sim": d / "sim.nc",
        "theory": d / "theory.nc",
        "sim2": d / "sim2.nc",
        "theory_softmax1": d / "theory_softmax1.nc",
        "theory_H3": d / "theory_H3.nc",
        "theory_D_lr": d / "theory_D_lr.nc",
    }
    results.save(sim, paths["sim"])
    results.save(_make("theory"), paths["theory"])
    results.save(_make("simulation", "seed=5"), paths["sim2"])
    results.save(_make("theory", "model.activation='softmax1'"), paths["theory_softmax1"])
    results.save(_make("theory", "model.H=3"), paths["theory_H3"])
    results.save(_make("theory", "task.D=400", "train.lr=2.0"), paths["theory_D_lr"])
    return sim, {k: str(v) for k, v in paths.items()}


# ----------------------------------------------------------------------------- item 8: schema
def _no_vars(ds):
    return xr.Dataset(attrs=ds.attrs)


def _theory_config(ds):
    return ds.assign_attrs(config_json=_make("theory").attrs["config_json"])


def _swap_risk_dims(ds):
    return ds.assign(risk=(("t", "seed"), ds.risk.values.T))


def _reverse_t(ds):
    return ds.assign_coords(t=ds.t.values[::-1].copy())


def _text_risk(ds):
    return ds.assign(risk=(("seed", "t"), np.full(ds.risk.shape, "x", dtype=object).astype(str)))


def _config(**changes):
    def craft(ds):
        raw = json.loads(ds.attrs["config_json"])
        for key, value in changes.items():
            section, name = key.split("__")
            raw[section][name] = value
        return ds.assign_attrs(config_json=json.dumps(raw))

    return craft


def _drop_attr(name):
    def craft(ds):
        ds = ds.copy()
        del ds.attrs[name]
        return ds

    return craft


SCHEMA_CASES = {
    # item 8 as reported: the right attributes but no variables at all
    "no-variables": (_no_vars, "plot", ["variable 'risk' is missing"]),
    "config-not-json": (
        lambda ds: ds.assign_attrs(config_json="{task: 1"),
        "compare",
        ["config_json is not JSON"],
    ),
    "config-of-a-theory": (_theory_config, "prune", ["SimulateConfig", "theory: unknown key"]),
    "config-of-bayes": (
        lambda ds: ds.assign_attrs(config_json=BayesRunConfig().model_dump_json()),
        "init-from",
        ["config_json", "bayes: unknown key"],
    ),
    "config-not-a-table": (
        lambda ds: ds.assign_attrs(config_json="[1, 2]"),
        "saddles",
        ["not a JSON object"],
    ),
    "config-bad-value": (_config(train__lr=-1.0), "compare", ["train.lr"]),
    "config-other-H": (_config(model__H=3), "plot", ["model.H = 3", "2 heads"]),
    "risk-wrong-dims": (_swap_risk_dims, "plot", ["variable 'risk' has dimensions"]),
    "risk-not-numbers": (_text_risk, "plot", ["'risk' is not numeric"]),
    "no-bayes-risk": (_drop_attr("bayes_risk"), "prune", ["attribute 'bayes_risk' is missing"]),
    "no-step": (lambda ds: ds.drop_vars("step"), "saddles", ["variable 'step' is missing"]),
    "t-backwards": (_reverse_t, "plot", ["t is not finite and increasing"]),
    "no-seeds": (lambda ds: ds.isel(seed=slice(0, 0)), "prune", ["dimension 'seed' is empty"]),
    "schema-garbage": (
        lambda ds: ds.assign_attrs(schema_version="abc"),
        "compare",
        ["result schema abc"],
    ),
    "kind-saddles": (lambda ds: ds.assign_attrs(kind="saddles"), "plot", ["a saddles file"]),
    "kind-sweep": (lambda ds: ds.assign_attrs(kind="sweep"), "init-from", ["a collected sweep"]),
    "kind-unknown": (lambda ds: ds.assign_attrs(kind="x"), "plot", ["not a headspec result"]),
}


def _command(which: str, path: str, files: dict, out: Path) -> list[str]:
    return {
        "plot": ["plot", path, "-o", str(out)],
        "compare": ["compare", path, files["theory"], "-o", str(out)],
        "prune": ["prune", path, "--n", "64", "-o", str(out)],
        "init-from": ["theory", "--init-from", path, "-o", str(out / "theory.nc")],
        "saddles": ["saddles", "--from", path, "-o", str(out / "saddles.nc")],
    }[which]


@pytest.mark.parametrize("case", list(SCHEMA_CASES))
def test_a_crafted_result_is_refused_in_one_line(case, files, tmp_path):
    craft, which, expect = SCHEMA_CASES[case]
    sim, paths = files
    path = write_unchecked(craft(sim), tmp_path / "crafted.nc")
    out = tmp_path / "out"
    out.mkdir()
    res = runner.invoke(app, _command(which, path, paths, out))
    _refused(res, "crafted.nc", *expect)
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr  # one line
    assert not list(out.iterdir())


def test_the_writers_agree_with_the_schema(files):
    """What simulate/theory write (from_observations) passes; the validator is not vacuous: it
    refuses the same dataset with one variable gone."""
    sim, paths = files
    for p in (paths["sim"], paths["theory"]):
        results.load(p)
    results.validate(sim, "sim")
    with pytest.raises(results.ResultError, match="variable 'cos' is missing"):
        results.validate(sim.drop_vars("cos"), "sim")
    with pytest.raises(results.ResultError, match=r"a simulation result .* not a theory result"):
        results.load(paths["sim"], kinds=("theory",))


def test_a_saddles_file_validates_as_saddles(files):
    from headspec.conventions.saddles import to_dataset

    sd = to_dataset([], files[0], 0, eta2=True, group_cos=0.98, n=16, source="x")
    results.validate(sd, "saddles.nc", kinds=("saddles",))
    with pytest.raises(results.ResultError, match=r"a saddles file .* not a simulation result"):
        results.validate(sd, "saddles.nc", kinds=results.RUN_KINDS)


# ----------------------------------------------------------------------------- item 5: pairs
PAIR_CASES = {
    "compare-two-simulations": (
        ["compare", "{sim}", "{sim2}"],
        ["sim2.nc is a simulation result", "compare needs a theory"],
    ),
    "compare-swapped": (
        ["compare", "{theory}", "{sim}"],
        ["simulation first", "fix: headspec compare", "sim.nc"],
    ),
    "compare-two-theories": (["compare", "{theory}", "{theory}"], ["needs a simulation"]),
    "compare-other-activation": (
        ["compare", "{sim}", "{theory_softmax1}"],
        ["model.activation: 'softmax' vs 'softmax1'", "--force"],
    ),
    "compare-other-H-even-forced": (
        ["compare", "{sim}", "{theory_H3}", "--force"],
        ["H = 2", "H = 3"],
    ),
    "plot-theory-is-a-simulation": (
        ["plot", "{sim}", "--theory", "{sim2}"],
        ["--theory", "is a simulation result"],
    ),
    "plot-theory-other-lr": (
        ["plot", "{sim}", "--theory", "{theory_D_lr}"],
        ["train.lr: 1 vs 2", "--force"],
    ),
}


@pytest.mark.parametrize("case", list(PAIR_CASES))
def test_mismatched_pairs_are_refused(case, files, tmp_path):
    args, expect = PAIR_CASES[case]
    out = tmp_path / "figs"
    res = runner.invoke(app, [a.format(**files[1]) for a in args] + ["-o", str(out)])
    text = _refused(res, *expect)
    assert "task.D" not in text  # D may differ (theory is D → ∞)
    assert not out.exists()


def test_dynamics_differences_allow_D_and_resolve_defaults():
    a = load_config(SimulateConfig, overrides=[*TINY, "model.activation='softmax1'"])
    same = ["task.D=4000", "train.T=5.0", "model.activation='softmax1'",
            "model.aggregation='sum'", "train.lr_b=1.0"]  # fmt: skip
    b = load_config(TheoryConfig, overrides=[*TINY, *same])
    assert results.dynamics_differences(a, b) == []  # default aggregation and η_b spelled out
    c = load_config(TheoryConfig, overrides=[*TINY, "task.latent.scale=2.0", "model.b0=-1.0",
                                             "model.activation='softmax1'"])  # fmt: skip
    diffs = results.dynamics_differences(a, c)
    assert [d.split(":")[0] for d in diffs] == ["task.latent", "model.b0"], diffs


def test_compare_forced_warns_and_runs(files, tmp_path):
    res = runner.invoke(app, ["compare", files[1]["sim"], files[1]["theory_D_lr"], "--force",
                              "-o", str(tmp_path)])  # fmt: skip
    text = _text(res)
    assert res.exit_code == 0, text
    assert "warning:" in text and "train.lr: 1 vs 2" in text and "task.D" not in text
    assert (tmp_path / "sim_vs_theory_D_lr_risk.png").exists()


# ----------------------------------------------------------------------------- item 4: alarms
def test_final_risk_alarms():
    rising = _make(risk=[[0.45, 0.5, 0.597]])  # the reported `--lr 1000`: worse than ŷ = 0
    warnings, errors = results.final_risk_alarms(rising)
    assert errors == [] and len(warnings) == 1
    assert "0.597" in warnings[0] and "ŷ = 0" in warnings[0] and "train.lr" in warnings[0]
    assert results.final_risk_alarms(_make(risk=[[0.45, 0.4, 0.49]])) == ([], [])  # below ½
    # a NaN final risk no divergence explains, and a NaN Bayes risk, are errors
    nan = _make(risk=[[0.3, 0.3, np.nan]], bayes_risk=float("nan"))
    warnings, errors = results.final_risk_alarms(nan)
    assert len(errors) == 2 and "seed(s) [0]" in errors[0] and "Bayes risk" in errors[1]
    # a diverged seed's NaN is reported as a divergence, not here
    assert results.final_risk_alarms(_make(risk=[[0.3, 0.3, 0.3]], failed=[0])) == ([], [])


@pytest.mark.parametrize(("risk", "code"), [([0.45, 0.5, 0.597], 0), ([0.45, 0.4, np.nan], 3)])
def test_simulate_warns_of_a_risk_worse_than_zero_and_exits_3_on_nan(risk, code, monkeypatch,
                                                                     tmp_path):  # fmt: skip
    import headspec.conventions.runs as runs

    monkeypatch.setattr(
        runs, "simulate", lambda cfg, progress=None, checkpoint=None: _make(risk=[risk])
    )
    out = tmp_path / "s.nc"
    res = runner.invoke(app, ["simulate", "--D", "40", "--L", "4", "--H", "2", "--T", "1",
                              "--seeds", "1", "-o", str(out)])  # fmt: skip
    text = _text(res)
    assert res.exit_code == code, text
    assert "Traceback" not in text
    assert ("warning:" in text and "worse than predicting ŷ = 0" in text) == (code == 0)
    assert ("error:" in text and "NaN" in text) == (code == 3)
    assert out.exists()  # the work is kept either way


def test_bayes_nan_exits_3_and_writes_nothing(monkeypatch, tmp_path):
    import headspec.conventions.runs as runs

    def nan_risks(cfg, progress=None):
        row = {"predictor": "bayes", "description": "Bayes posterior (R_B)", "heads": None,
               "risk": float("nan"), "se": float("nan"), "excess_over_bayes": 0.0,
               "excess_se": 0.0}  # fmt: skip
        return {"results": [row]}

    monkeypatch.setattr(runs, "run_bayes", nan_risks)
    out = tmp_path / "b.json"
    res = runner.invoke(app, ["bayes", "-n", "100", "--json", str(out)])
    _refused(res, "NaN", "Bayes posterior", "no file written", code=3)
    assert not out.exists()


@pytest.mark.slow
def test_simulate_lr_1000_warns_for_real(tmp_path):
    """The reported case itself (JAX compiles: slow)."""
    res = runner.invoke(app, ["simulate", "-a", "softmax1", "--lr", "1000", "--D", "100", "--T",
                              "1", "--seeds", "1", "-o", str(tmp_path / "s.nc")])  # fmt: skip
    text = _text(res)
    assert res.exit_code in (0, 3), text
    assert "worse than predicting ŷ = 0" in text or "diverged" in text, text


# ----------------------------------------------------------------------------- item 7: sweep exit
def _spec_file(tmp_path: Path) -> Path:
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'[sweep]\nkind = "simulate"\nout = "{tmp_path / "out"}"\n'
        '[config]\n"task.D" = 40\n"task.L" = 4\n"model.H" = 2\n"train.T" = 1.0\n'
        '"record.points" = 2\n"seeds" = 1\n'
        '[axes]\n"train.lr" = [0.5, 1.0]\n'
    )
    return spec


def _prewritten_sweep(tmp_path: Path) -> Path:
    """A sweep folder whose points are all written (one diverged), as after a crash before the
    driver recorded them: a rerun checks them (config hash) and starts no cluster."""
    spec = _spec_file(tmp_path)
    sw = sweep.resolve(*sweep.load_spec(spec))
    (sw.out / "points").mkdir(parents=True)
    for k, t in enumerate(sw.tasks):
        ds = _make("simulation", f"train.lr={t.config.train.lr}", failed=[0] if k == 1 else [])
        assert sweep.config_hash("simulate", t.config) == t.hash
        results.save(ds.assign_attrs(config_json=t.config.model_dump_json()), sw.out / t.file)
    return spec


def test_a_sweep_with_a_diverged_point_exits_3_names_it_and_writes_everything(tmp_path):
    """The real entry point (its exit code is the point): exit 3 like `simulate`, after
    collecting every point."""
    spec = _prewritten_sweep(tmp_path)
    res = subprocess.run([sys.executable, "-m", "headspec.apps.cli", "sweep", str(spec)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    text = " ".join(res.stderr.split())
    assert res.returncode == 3, res.stderr
    assert "Traceback" not in text and "fix" in text
    assert "1 of 2 tasks diverged" in text and "diverged: {'lr': 1.0}, seeds [0]" in text
    collected = results.load(tmp_path / "out" / "sweep.nc", kinds=("sweep",))  # all written
    assert collected.status.values.tolist() == ["done", "diverged"]
    assert (tmp_path / "out" / "sweep_final_risk.png").exists()
    # a collected sweep is not a result: plot names what it is
    res = runner.invoke(app, ["plot", str(tmp_path / "out" / "sweep.nc")])
    _refused(res, "is a collected sweep")


# ----------------------------------------------------------------------------- item 9: scheduler
@contextlib.contextmanager
def _silent_peer():
    """A TCP server that accepts and never answers (not Dask: a hang without a timeout)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    conns = []

    def serve():
        with contextlib.suppress(OSError):
            while True:
                conns.append(srv.accept()[0])

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        srv.close()
        for c in conns:
            c.close()


def _closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return f"tcp://127.0.0.1:{port}"


SCHEDULER_CASES = {
    "unknown-scheme": (["--scheduler", "foo://x"], ["--scheduler 'foo://x'", "unknown scheme"]),
    "no-port": (["--scheduler", "tcp://somehost"], ["--scheduler", "host:port"]),
    "bad-port": (["--scheduler", "somehost:99999"], ["--scheduler", "host:port"]),
    "empty": (["--scheduler", " "], ["--scheduler is empty"]),
    "tls-without-scheduler": (["--tls-cert", "{spec}"], ["--tls-ca-file/--tls-cert/--tls-key"]),
    "timeout-without-scheduler": (["--connect-timeout", "3"], ["--connect-timeout"]),
    "timeout-zero": (["--scheduler", "tcp://h:1", "--connect-timeout", "0"], ["--connect-timeout"]),
    "tls-file-missing": (
        ["--scheduler", "tls://h:1", "--tls-ca-file", "{tmp}/no-ca.pem"],
        ["--tls-ca-file", "no-ca.pem"],
    ),
    "tls-options-on-tcp": (
        ["--scheduler", "tcp://h:8786", "--tls-cert", "{spec}"],
        ["not a TLS address", "tls://h:8786"],
    ),
    "nothing-listens": (
        ["--scheduler", "{closed}", "--connect-timeout", "0.5"],
        ["cannot reach the Dask scheduler", "--scheduler"],
    ),
    "not-a-dask-peer": (
        ["--scheduler", "{peer}", "--connect-timeout", "0.5"],
        ["none answered within 0.5 s", "not a Dask scheduler"],
    ),
}


@pytest.mark.parametrize("case", list(SCHEDULER_CASES))
def test_bad_scheduler_options_are_refused_before_any_folder(case, tmp_path):
    args, expect = SCHEDULER_CASES[case]
    spec = _spec_file(tmp_path)
    with _silent_peer() as peer:
        names = {"spec": str(spec), "tmp": str(tmp_path), "closed": _closed_port(), "peer": peer}
        res = runner.invoke(app, ["sweep", str(spec), *[a.format(**names) for a in args]])
    _refused(res, *expect)
    assert not (tmp_path / "out").exists()


def test_tls_options_reach_the_dask_client(tmp_path, monkeypatch):
    """--tls-* become a distributed.security.Security that reaches the probe and the Client
    (no TLS cluster: both are stand-ins that record what they get)."""
    import distributed

    from headspec.apps.sweep import cluster

    pem = {k: tmp_path / f"{k}.pem" for k in ("ca", "cert", "key")}
    for p in pem.values():
        p.write_text("not read here\n")
    seen = {}

    def probe(address, security, timeout):
        seen["probe"] = (address, security, timeout)

    class Client:
        def __init__(self, address, **kw):
            seen["client"] = (address, kw)
            raise OSError("stand-in: no cluster")

    monkeypatch.setattr(cluster, "probe_scheduler", probe)
    monkeypatch.setattr(distributed, "Client", Client)
    spec = _spec_file(tmp_path)
    res = runner.invoke(app, ["sweep", str(spec), "--scheduler", "tls://10.0.0.1:8786",
                              "--tls-ca-file", str(pem["ca"]), "--tls-cert", str(pem["cert"]),
                              "--tls-key", str(pem["key"]), "--connect-timeout", "2"])  # fmt: skip
    _refused(res, "cannot reach the Dask scheduler", "stand-in")
    assert not (tmp_path / "out").exists()
    address, kw = seen["client"]
    sec = kw["security"]
    assert address == "tls://10.0.0.1:8786" and kw["timeout"] == 2.0
    assert seen["probe"] == (address, sec, 2.0)
    assert sec.require_encryption
    assert (sec.tls_ca_file, sec.tls_client_cert, sec.tls_client_key) == tuple(
        str(pem[k]) for k in ("ca", "cert", "key")
    )
