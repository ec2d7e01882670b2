"""Malformed input to every command is refused cleanly (issue 13, acceptance).

One table of cases over simulate, theory, bayes, compare, plot, prune, saddles, sweep and
reproduce: bad option values, unknown keys and wrong types in ``--set``/``--axis``, bad TOML
files, missing files, files of the wrong kind, out-of-range values. Each case asserts the house
style of a refusal: exit code 2, no traceback, a message naming the field or option (``expect``),
"fix" in it (unless the refusal is Typer's own usage error, ``fix=False``), and no file left
behind in the case's folder.

Every case must be refused before any computation: the functions that compute (and compile JAX
code) are replaced by ones that fail the test, so the whole file runs in a few seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from typer.testing import CliRunner

from headspec.apps.cli import app
from helpers import cli_output
from results import write_result

runner = CliRunner()


class Case(NamedTuple):
    """One malformed invocation.

    ``args``: the command line; ``{tmp}`` is the case's own (empty) folder, where every output
    goes, and ``{in}`` the folder of the shared input files (results, specs, configs).
    ``expect``: strings the output must contain (the field or option, and what is wrong).
    ``fix``: whether the message must carry a fix (False only for Typer's own usage errors).
    ``files``: files (name → text) written into ``{tmp}`` before the call; they are inputs, not
    leftovers.
    """

    args: tuple[str, ...]
    expect: tuple[str, ...]
    fix: bool = True
    files: dict[str, str] | None = None


def sim(*args: str, **kw) -> Case:
    expect = kw.pop("expect")
    return Case(("simulate", "-o", "{tmp}/out.nc", *args), expect, **kw)


def theory(*args: str, **kw) -> Case:
    expect = kw.pop("expect")
    return Case(("theory", "-o", "{tmp}/out.nc", *args), expect, **kw)


def bayes(*args: str, **kw) -> Case:
    expect = kw.pop("expect")
    return Case(("bayes", "--json", "{tmp}/out.json", *args), expect, **kw)


def saddles(*args: str, **kw) -> Case:
    expect = kw.pop("expect")
    return Case(("saddles", "-o", "{tmp}/out.nc", *args), expect, **kw)


def sweep(*args: str, **kw) -> Case:
    expect = kw.pop("expect")
    return Case(("sweep", *args), expect, **kw)


NOT_TOML = "is not a TOML value"
SPEC = "{in}/spec.toml"  # a valid theory sweep spec; its out folder is given with -o {tmp}/sw

# fmt: off
CASES: dict[str, Case] = {
    # ------------------------------------------------------------ simulate: strict --set values
    "sim-scale-bool": sim("--set", "task.latent.scale=true",
                          expect=("task.latent.scale", "true and false are not numbers")),
    "sim-scale-quoted": sim("--set", 'task.latent.scale="0.5"',
                            expect=("task.latent.scale", "without quotes")),
    "sim-atom-bool": sim("--latent", '{kind="spike", a=[true]}', expect=("task.latent.a.0",)),
    "sim-H-bad-toml": sim("--set", "model.H=[2,", expect=("model.H", NOT_TOML)),
    "sim-sigma0-word": sim("--set", "model.sigma0=abc", expect=("model.sigma0", NOT_TOML)),
    "sim-lr-leading-dot": sim("--set", "train.lr=.5", expect=("train.lr", NOT_TOML)),
    "sim-H-quoted": sim("--set", 'model.H="4"', expect=("model.H", "whole number")),
    "sim-activation-unknown-word": sim("--set", "model.activation=relu",
                                       expect=("model.activation", "softmax1")),
    "sim-key-typo": sim("--set", "model.activaton=softmax1",
                        expect=("model.activaton", "unknown key", "activation")),
    "sim-engine-unknown": sim("--engine", "turbo", expect=("train.engine", "reduced")),
    "sim-dtype-float16": sim("--set", "train.dtype=float16", expect=("train.dtype", "float64")),
    "sim-frame-word": sim("--set", "task.frame=diagonal", expect=("task.frame", "canonical")),
    "sim-T-zero": sim("--T", "0", expect=("train.T",)),
    "sim-seeds-zero": sim("--seeds", "0", expect=("seeds",)),
    "sim-seed-negative": sim("--seed", "-1", expect=("seed",)),
    "sim-no-step": sim("--D", "100", "--T", "1", "--set", "train.batch=1000",
                       expect=("train.batch", "train nothing")),
    "sim-points-zero": sim("--set", "record.points=0", expect=("record.points",)),
    "sim-n-mc-one": sim("--set", "record.n_mc=1", expect=("record.n_mc",)),
    "sim-t0-zero": sim("--set", 'train.schedule={kind="inverse_time", t0=0}',
                       expect=("train.schedule.t0",)),
    "sim-schedule-kind": sim("--set", "train.schedule.kind=cosine",
                             expect=("train.schedule", "inverse_time")),
    "sim-b0-nan": sim("--set", "model.b0=nan", expect=("model.b0", "finite")),
    "sim-reduced-too-small": sim("--engine", "reduced", "--D", "12",
                                 expect=("train.engine", "task.D")),
    "sim-t-min-above-T": sim("--T", "1", "--set", "record.t_min=5", expect=("record.t_min",)),
    "sim-H-abc": sim("--H", "abc", expect=("'--H'",), fix=False),
    "sim-config-missing": sim("-c", "{tmp}/nope.toml", expect=("nope.toml", "does not exist")),
    "sim-config-folder": sim("-c", "{in}", expect=("is a folder",)),
    "sim-config-bad-toml": sim("-c", "{tmp}/c.toml", expect=("c.toml", "not valid TOML"),
                               files={"c.toml": "[model\nH = 2\n"}),
    "sim-config-H-string": sim("-c", "{tmp}/c.toml", expect=("model.H", "whole number"),
                               files={"c.toml": '[model]\nH = "4"\n'}),
    "sim-config-unknown-section": sim("-c", "{tmp}/c.toml", expect=("modle", "unknown key"),
                                      files={"c.toml": "[modle]\nH = 2\n"}),
    "sim-config-is-a-result": sim("-c", "{in}/sim.nc", expect=("sim.nc",)),
    "sim-out-folder-missing": Case(("simulate", "-o", "{tmp}/no/such/out.nc"),
                                   ("the folder of output", "does not exist")),
    "sim-out-is-folder": Case(("simulate", "-o", "{tmp}"), ("is a folder",)),
    # ------------------------------------------------------------ theory
    "theory-D-below-F-plus-H": theory("--D", "4", expect=("task.D", "model.H")),
    "theory-n-one": theory("--n", "1", expect=("theory.n",)),
    "theory-sampler-word": theory("--set", "theory.sampler=quasi",
                                  expect=("theory.sampler", "sobol")),
    "theory-rtol-zero": theory("--set", "theory.rtol=0", expect=("theory.rtol",)),
    "theory-head-cyclic-word": theory("--set", "theory.head_cyclic=maybe",
                                      expect=("theory.head_cyclic: Input should be 'auto' or a "
                                              "valid boolean",)),
    "theory-given-shape": theory("--H", "2", "--set",
                                 'theory.init={kind="given", M=[[1.0]], Q=[[1.0]]}',
                                 expect=("theory.init.M",)),
    "theory-init-kind": theory("--set", "theory.init.kind=random", expect=("theory.init",)),
    "theory-init-from-missing": theory("--init-from", "{tmp}/nope.nc",
                                       expect=("nope.nc", "does not exist")),
    "theory-init-from-folder": theory("--init-from", "{in}", expect=("is a folder",)),
    "theory-init-from-text": theory("--init-from", "{in}/text.nc",
                                    expect=("text.nc", "not a readable netCDF")),
    "theory-lr-bad-toml": theory("--set", "train.lr=1e", expect=("train.lr", NOT_TOML)),
    # ------------------------------------------------------------ bayes (more in test_cli.py)
    "bayes-scale-bool": bayes("--set", "task.latent.scale=false", expect=("task.latent.scale",)),
    "bayes-samples-quoted": bayes("--set", 'bayes.samples="100"',
                                  expect=("bayes.samples", "without quotes")),
    "bayes-samples-float": bayes("--set", "bayes.samples=1e5",
                                 expect=("bayes.samples", "whole number")),
    "bayes-probs-bool": bayes("--latent", '{kind="discrete", atoms=[[1.0], [2.0]], '
                              "probs=[true, false]}", expect=("task.latent.probs.0",)),
    "bayes-route-capital": bayes("--route", "Finite", expect=("bayes.route", "finite")),
    "bayes-finite-D-below-F": bayes("--route", "finite", "--D", "1",
                                    expect=("task.D", "F = 2")),
    "bayes-latent-bad-toml": bayes("--latent", '{kind="spike", a=[1.0}',
                                   expect=("task.latent", NOT_TOML)),
    "bayes-set-no-value": bayes("--set", "task.L=", expect=("task.L", NOT_TOML)),
    # ------------------------------------------------------------ compare
    "compare-missing": Case(("compare", "{tmp}/nope.nc", "{in}/th.nc"),
                            ("nope.nc", "does not exist")),
    "compare-folder": Case(("compare", "{in}", "{in}/th.nc"), ("is a folder",)),
    "compare-text-file": Case(("compare", "{in}/text.nc", "{in}/th.nc"),
                              ("text.nc", "not a readable netCDF")),
    "compare-no-attributes": Case(("compare", "{in}/plain.nc", "{in}/th.nc"),
                                  ("plain.nc", "not a headspec result")),
    "compare-two-simulations": Case(("compare", "{in}/sim.nc", "{in}/sim.nc"), ("sim.nc",)),
    "compare-swapped": Case(("compare", "{in}/th.nc", "{in}/sim.nc"), ("th.nc",)),
    "compare-other-H": Case(("compare", "{in}/sim.nc", "{in}/th_H3.nc"), ("H = 2", "H = 3")),
    "compare-until-negative": Case(("compare", "{in}/sim.nc", "{in}/th.nc", "--until", "-1"),
                                   ("--until",)),
    "compare-until-nan": Case(("compare", "{in}/sim.nc", "{in}/th.nc", "--until", "nan"),
                              ("--until",)),
    "compare-format": Case(("compare", "{in}/sim.nc", "{in}/th.nc", "-f", "gif", "-o", "{tmp}"),
                           ("--format", "gif")),
    "compare-out-dir-is-file": Case(("compare", "{in}/sim.nc", "{in}/th.nc", "-o",
                                     "{in}/spec.toml"), ("--out-dir", "is a file")),
    # ------------------------------------------------------------ plot
    "plot-missing": Case(("plot", "{tmp}/nope.nc"), ("nope.nc", "does not exist")),
    "plot-folder": Case(("plot", "{in}"), ("is a folder",)),
    "plot-empty-file": Case(("plot", "{in}/empty.nc"), ("empty.nc", "not a readable netCDF")),
    "plot-no-attributes": Case(("plot", "{in}/plain.nc"), ("plain.nc", "not a headspec result")),
    "plot-format": Case(("plot", "{in}/sim.nc", "-f", "jpg", "-o", "{tmp}"), ("--format", "jpg")),
    "plot-theory-missing": Case(("plot", "{in}/sim.nc", "--theory", "{tmp}/nope.nc",
                                 "-o", "{tmp}"), ("nope.nc", "does not exist")),
    "plot-theory-is-simulation": Case(("plot", "{in}/sim.nc", "--theory", "{in}/sim.nc",
                                       "-o", "{tmp}"), ("--theory",)),
    "plot-out-dir-is-file": Case(("plot", "{in}/sim.nc", "-o", "{in}/spec.toml"),
                                 ("--out-dir", "is a file")),
    # ------------------------------------------------------------ prune
    "prune-missing": Case(("prune", "{tmp}/nope.nc", "-o", "{tmp}"),
                          ("nope.nc", "does not exist")),
    "prune-text-file": Case(("prune", "{in}/text.nc", "-o", "{tmp}"),
                            ("text.nc", "not a readable netCDF")),
    "prune-seed-absent": Case(("prune", "{in}/sim.nc", "--seed", "99", "-o", "{tmp}"),
                              ("--seed 99", "sim.nc")),
    "prune-n-one": Case(("prune", "{in}/sim.nc", "--n", "1", "-o", "{tmp}"), ("'--n'",),
                        fix=False),
    "prune-orders-negative": Case(("prune", "{in}/sim.nc", "--random-orders", "-1", "-o",
                                   "{tmp}"), ("'--random-orders'",), fix=False),
    "prune-out-dir-is-file": Case(("prune", "{in}/sim.nc", "-o", "{in}/spec.toml"),
                                  ("--out-dir", "is a file")),
    # ------------------------------------------------------------ saddles
    "simulate-out-dash": Case(("simulate", "-o", "-"), ("'-' is not a file name",)),
    "theory-out-dash": Case(("theory", "-o", "-"), ("'-' is not a file name",)),
    "bayes-json-dash": Case(("bayes", "--json", "-"), ("'-' is not a file name",)),
    "saddles-out-dash": Case(("saddles", "-o", "-"), ("'-' is not a file name",)),
    "saddles-n-memory": saddles("--from", "{in}/sim.nc", "--n", "1000000000",
                                expect=("--n = 1,000,000,000", "memory")),
    "saddles-config-n-memory": saddles("--n", "1000000000", expect=("--n", "memory")),
    "saddles-from-missing": saddles("--from", "{tmp}/nope.nc", expect=("nope.nc",
                                                                        "does not exist")),
    "saddles-from-seed-absent": saddles("--from", "{in}/sim.nc", "--seed", "7",
                                        expect=("--seed 7", "sim.nc")),
    "saddles-from-and-config": saddles("--from", "{in}/sim.nc", "--set", "model.H=2",
                                       expect=("--from", "--set")),
    "saddles-out-json": Case(("saddles", "-o", "{tmp}/out.json"), ("--out", ".nc")),
    "saddles-group-cos": saddles("--group-cos", "0.2", expect=("'--group-cos'",), fix=False),
    "saddles-H-zero": saddles("--set", "model.H=0", expect=("model.H",)),
    "saddles-format": saddles("-f", "tiff", expect=("--format", "tiff")),
    "saddles-D-bad-toml": saddles("--set", "task.D=1_", expect=("task.D", NOT_TOML)),
    # ------------------------------------------------------------ sweep
    "sweep-spec-missing": sweep("{tmp}/nope.toml", expect=("nope.toml", "does not exist")),
    "sweep-spec-bad-toml": sweep("{tmp}/s.toml", expect=("s.toml", "not valid TOML"),
                                 files={"s.toml": "[sweep\n"}),
    "sweep-no-axes": sweep("{tmp}/s.toml", expect=("axes", "Field required"),
                           files={"s.toml": '[sweep]\nkind = "theory"\n'}),
    "sweep-kind": sweep("{tmp}/s.toml", expect=("sweep.kind",),
                        files={"s.toml": '[sweep]\nkind = "ode"\n[axes]\n"model.H" = [2]\n'}),
    "sweep-axis-bad-toml": sweep(SPEC, "-o", "{tmp}/sw", "--axis", "model.H=[2,",
                                 expect=("model.H", NOT_TOML, "--axis")),
    "sweep-axis-no-equals": sweep(SPEC, "-o", "{tmp}/sw", "--axis", "model.H",
                                  expect=("--axis", "no '='")),
    "sweep-axis-seed": sweep(SPEC, "-o", "{tmp}/sw", "--axis", "seed=[1, 2]",
                             expect=("seed", "not an axis")),
    "sweep-axis-repeats": sweep(SPEC, "-o", "{tmp}/sw", "--axis", "model.H=[2, 2]",
                                expect=("model.H", "repeats")),
    "sweep-axis-invalid-point": sweep(SPEC, "-o", "{tmp}/sw", "--axis", "model.H=[0, 2]",
                                      expect=("model.H",)),
    "sweep-axis-quoted-number": sweep(SPEC, "-o", "{tmp}/sw", "--axis", 'train.lr=[0.5, "1"]',
                                      expect=("train.lr", "without quotes")),
    "sweep-axis-log-range": sweep(SPEC, "-o", "{tmp}/sw", "--axis",
                                  'task.D={start=0, stop=100, num=3, spacing="log"}',
                                  expect=("task.D", "log")),
    "sweep-axis-range-bool": sweep(SPEC, "-o", "{tmp}/sw", "--axis",
                                   "task.D={start=true, stop=100, num=3}",
                                   expect=("task.D", "start: Input should be a valid number")),
    "sweep-set-seeds-zero": sweep(SPEC, "-o", "{tmp}/sw", "--set", "sweep.seeds=0",
                                  expect=("sweep.seeds",)),
    "sweep-set-config-bool": sweep(SPEC, "-o", "{tmp}/sw", "--set", "config.train.lr=true",
                                   expect=("train.lr",)),
    "sweep-set-bad-toml": sweep(SPEC, "-o", "{tmp}/sw", "--set", "sweep.seeds=x",
                                expect=("sweep.seeds", NOT_TOML)),
    "sweep-base-missing": sweep("{tmp}/s.toml", "-o", "{tmp}/sw",
                                expect=("nope.toml", "does not exist"),
                                files={"s.toml": '[sweep]\nkind = "theory"\nbase = "nope.toml"\n'
                                                 '[axes]\n"model.H" = [2]\n'}),
    "sweep-out-is-file": sweep(SPEC, "-o", "{in}/spec.toml", expect=("--out", "is a file")),
    "sweep-workers-zero": sweep(SPEC, "-o", "{tmp}/sw", "--workers", "0",
                                expect=("'--workers'",), fix=False),
    # issue 51: sizes that cannot fit, refused before any task is sent out or folder made
    "sweep-workers-too-many": sweep(SPEC, "-o", "{tmp}/sw", "--workers", "100000",
                                    expect=("--workers 100000", "runs no faster")),
    "sweep-memory-theory-n": sweep(SPEC, "-o", "{tmp}/sw", "--axis", "theory.n=[1000000000]",
                                   expect=("sweep point", "theory.n", "memory")),
    "sweep-memory-D-full": sweep(SPEC, "-o", "{tmp}/sw", "--set", 'sweep.kind="simulate"',
                                 "--set", 'config."train.engine"="full"',
                                 "--axis", "task.D=[100000000]",
                                 expect=("task.D = 100000000", "memory")),
    "sweep-set-quoted-key": sweep(SPEC, "-o", "{tmp}/sw", "--set", 'config."model.H"=0',
                                  expect=("model.H",)),
    "sweep-status-missing": sweep("status", "{tmp}/nope", expect=("nope",)),
    "sweep-collect-missing": sweep("collect", "{tmp}/nope", expect=("nope",)),
    # ------------------------------------------------------------ reproduce
    "reproduce-scale": Case(("reproduce", "--scale", "huge", "-o", "{tmp}/r"), ("--scale",)),
    "reproduce-only": Case(("reproduce", "--only", "E99", "-o", "{tmp}/r"), ("--only", "E99")),
    "reproduce-out-is-file": Case(("reproduce", "--only", "E4", "-o", "{in}/spec.toml"),
                                  ("--out", "is a file")),
    "reproduce-workers-too-many": Case(("reproduce", "--only", "E4", "--workers", "100000",
                                        "-o", "{tmp}/r"), ("--workers 100000", "cores")),
    "study-workers-too-many": Case(("study", "finite_size", "--workers", "100000",
                                    "-o", "{tmp}/r"), ("--workers 100000", "cores")),
}
# fmt: on


# ---------------------------------------------------------------------- shared input files
@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Input files shared by all cases (never written to by them)."""
    import xarray as xr

    folder = tmp_path_factory.mktemp("inputs")
    write_result(folder / "sim.nc", "simulation")
    write_result(folder / "th.nc", "theory")
    write_result(folder / "th_H3.nc", "theory", "model.H=3")
    (folder / "text.nc").write_text("not netCDF\n")
    (folder / "empty.nc").write_bytes(b"")
    xr.Dataset({"x": ("i", np.arange(3.0))}).to_netcdf(folder / "plain.nc", engine="h5netcdf")
    (folder / "spec.toml").write_text(
        '[sweep]\nkind = "theory"\nout = "unused"\n'
        '[config]\n"train.T" = 1.0\n"task.D" = 50\n'
        '[axes]\n"model.H" = [2, 3]\n'
    )
    return folder


@pytest.fixture(autouse=True)
def no_computation(monkeypatch):
    """Every computing entry point the commands call fails the test: a case that is not refused
    before any work would otherwise compile JAX code (and could write files)."""
    import headspec.apps.experiments as experiments
    import headspec.apps.sweep as sweep_pkg
    import headspec.conventions.runs as runs
    import headspec.conventions.saddles as saddles_mod

    def computed(*args, **kwargs):
        raise AssertionError("the command started computing instead of refusing its input")

    for module, name in ((runs, "simulate"), (runs, "solve"), (runs, "run_bayes"),
                         (runs, "prune_result"), (saddles_mod, "find_saddles"),
                         (sweep_pkg, "run"), (experiments, "reproduce")):  # fmt: skip
        monkeypatch.setattr(module, name, computed)


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_malformed_input_is_refused(case, inputs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default output names would land here, and count as leftovers
    for name, text in (case.files or {}).items():
        (tmp_path / name).write_text(text)
    before = set(tmp_path.rglob("*"))
    inputs_before = {p: p.stat().st_mtime_ns for p in inputs.iterdir()}
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{in}", str(inputs)) for a in case.args]
    result = runner.invoke(app, argv)
    text = cli_output(result)
    assert result.exit_code == 2, (result.exit_code, text, result.exception)
    assert "Traceback" not in text, text
    flat = " ".join(text.split())  # Typer's error box may wrap a long message
    for s in case.expect:
        assert s in flat, f"{s!r} not in the output:\n{text}"
    if case.fix:
        assert "fix:" in flat, text
    assert set(tmp_path.rglob("*")) == before, "left behind: " + str(
        sorted(str(p) for p in set(tmp_path.rglob("*")) - before)
    )
    assert {p: p.stat().st_mtime_ns for p in inputs.iterdir()} == inputs_before


def test_the_suite_covers_every_command_with_enough_cases():
    commands = {c.args[0] for c in CASES.values()}
    assert commands == {"simulate", "theory", "bayes", "compare", "plot", "prune", "saddles",
                        "sweep", "reproduce", "study"}  # fmt: skip
    assert len(CASES) >= 100


# ---------------------------------------------------------------------- strict values (item 10)
def test_bare_words_are_text_only_where_the_field_takes_text():
    """Documented usage keeps working: a bare word is text for a text field (an activation, a
    kind, a path), a whole number is a fine float; the same bare word for a number is refused
    naming the key, the value and the fix."""
    from headspec.conventions.config import (
        ConfigError,
        SimulateConfig,
        TheoryConfig,
        load_config,
        takes_text,
    )

    cfg = load_config(TheoryConfig, overrides=[
        "model.activation=softmax1", "task.frame=canonical", "task.latent.kind=spike",
        "task.latent.a=[3, 1]", "task.latent.scale=2", "theory.head_cyclic=auto",
        "theory.init.kind=simulation", "theory.init.path=/data/run 1.nc",
    ])  # fmt: skip
    assert (cfg.model.activation, cfg.task.frame, cfg.task.latent.kind) == (
        "softmax1", "canonical", "spike",
    )  # fmt: skip
    assert cfg.task.latent.a == [3.0, 1.0] and cfg.task.latent.scale == 2.0
    assert cfg.theory.init.path == "/data/run 1.nc"
    assert takes_text(SimulateConfig, ["model", "H"]) is False
    assert takes_text(SimulateConfig, ["model", "nope"]) is None
    with pytest.raises(ConfigError, match=r"model\.sigma0: 'abc' is not a TOML value.*fix:"):
        load_config(SimulateConfig, overrides=["model.sigma0=abc"])


def test_sweep_axes_and_spec_overrides_parse_like_set(tmp_path):
    """--axis and the sweep's --set use the same strict parser: a bare word is text where the
    run config's field takes text (for the sweep's kind), and bad TOML is refused."""
    from headspec.apps.sweep.spec import load_spec
    from headspec.conventions.config import ConfigError

    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\nkind = "simulate"\n[axes]\n"model.H" = [2, 3]\n')
    s, _ = load_spec(spec, ["config.model.activation=softmax1", "sweep.kind=theory"],
                     ["train.engine=full"])  # fmt: skip
    assert s.sweep.kind == "theory" and s.config == {"model": {"activation": "softmax1"}}
    assert s.axes["train.engine"] == ["full"]
    with pytest.raises(ConfigError, match=r"train\.lr: 'fast' is not a TOML value .* in --axis"):
        load_spec(spec, [], ["train.lr=fast"])
