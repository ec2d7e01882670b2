"""The `headspec bayes` command line: malformed input is refused cleanly, valid input runs.

Contract under test (src/headspec/apps/cli/): bad input gives a message naming the field (or the
option) and the fix, exit code 2, no traceback and no output file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from typer.testing import CliRunner

from headspec.apps.cli import app
from helpers import cli_output

runner = CliRunner()


class Case(NamedTuple):
    """One malformed invocation of ``headspec bayes``.

    ``args`` may contain ``{tmp}`` (replaced by the test's tmp_path); ``files`` are written to
    tmp_path first; ``expect`` must appear in the combined output; ``fix`` says whether the
    message comes from headspec's own config layer (and must therefore carry a "fix:" hint).
    """

    args: tuple[str, ...]
    expect: tuple[str, ...]
    fix: bool = True
    files: dict[str, str] | None = None


def _latent(table: str, *expect: str) -> Case:
    return Case(("--latent", table), expect)


def _toml(text: str, *expect: str) -> Case:
    return Case(("--config", "{tmp}/cfg.toml"), expect, files={"cfg.toml": text})


# fmt: off
MALFORMED: dict[str, Case] = {
    # ------------------------------------------------------------------ bad option values
    "L-1": Case(("--L", "1"), ("task.L", "≥ 2")),
    "L-abc": Case(("--L", "abc"), ("'--L'", "Invalid value"), fix=False),
    "L-float": Case(("--L", "2.5"), ("'--L'", "Invalid value"), fix=False),
    "D-0": Case(("--D", "0"), ("task.D", "≥ 1")),
    "samples-1": Case(("--samples", "1"), ("bayes.samples", "≥ 2")),
    "samples-abc": Case(("-n", "many"), ("'--samples'", "Invalid value"), fix=False),
    "route-x": Case(("--route", "x"), ("bayes.route", "projected")),
    "scale-nan": Case(("--scale", "nan"), ("task.latent.scale", "finite")),
    "scale-inf": Case(("--scale", "inf"), ("task.latent.scale", "finite")),
    "scale-negative": Case(("--scale", "-1"), ("task.latent.scale", "≥ 0")),
    "seed-negative": Case(("--seed", "-3"), ("seed", "≥ 0")),
    "unknown-option": Case(("--bogus", "1"), ("--bogus",), fix=False),
    # ------------------------------------------------------------------ bad --set overrides
    "set-unknown-top": Case(
        ("--set", "bogus=1"), ("bogus: unknown key", "allowed here: bayes, seed, task")
    ),
    "set-unknown-task": Case(
        ("--set", "task.bogus=1"), ("task.bogus: unknown key", "allowed here: D, L, frame")
    ),
    "set-unknown-bayes": Case(
        ("--set", "bayes.bogus=1"), ("bayes.bogus: unknown key", "route, samples")
    ),
    "set-unknown-latent": Case(
        ("--set", "task.latent.bogus=1"), ("task.latent.bogus: unknown key", "atoms")
    ),
    "set-through-int": Case(("--set", "task.L.x=3"), ("task.L is a value, not a table",)),
    "set-through-seed": Case(("--set", "seed.x=1"), ("seed is a value, not a table",)),
    "set-through-list": Case(
        ("--set", "task.latent.atoms.x=1"), ("task.latent.atoms is a value, not a table",)
    ),
    "set-task-not-table": Case(("--set", "task=3"), ("task:", "table")),
    "set-missing-equals": Case(("--set", "task.L"), ("'task.L'", "has no '='")),
    "set-empty-key": Case(("--set", "task..L=3"), ("'task..L=3'", "empty key")),
    "set-L-float": Case(("--set", "task.L=2.5"), ("task.L", "whole number")),
    "set-L-bool": Case(("--set", "task.L=true"), ("task.L", "whole number")),
    "set-seed-float": Case(("--set", "seed=1e3"), ("seed", "whole number")),
    "set-frame-x": Case(("--set", "task.frame=x"), ("task.frame", "canonical")),
    "set-kind-without-a": Case(("--set", 'task.latent.kind="spike"'), ("task.latent.a", "add")),
    "set-samples-inf": Case(("--set", "bayes.samples=inf"), ("bayes.samples",)),
    # ------------------------------------------------------------------ bad --latent tables
    "latent-unknown-kind": _latent('{kind="nope", a=[1.0]}', "task.latent", "set kind to"),
    # --latent replaces the whole table, so a table without kind is refused for that reason.
    "latent-missing-kind": _latent("{a=[1.0]}", "task.latent", "add kind"),
    "latent-spike-missing-a": _latent('{kind="spike"}', "task.latent.a", "Field required"),
    "latent-spike-empty-a": _latent('{kind="spike", a=[]}', "task.latent.a", "at least one"),
    "latent-spike-a-inf": _latent('{kind="spike", a=[inf]}', "task.latent.a.0", "finite"),
    "latent-spike-unknown-key": _latent(
        '{kind="spike", a=[1.0], b=2}', "task.latent.b: unknown key", "allowed here: a, kind"
    ),
    "latent-flipped-a-nan": _latent(
        '{kind="flipped_spike", a=[1.0, nan]}', "task.latent.a.1", "finite"
    ),
    "latent-atoms-ragged": _latent(
        '{kind="discrete", atoms=[[1.0, 0.0], [1.0]]}', "task.latent.atoms", "same number"
    ),
    "latent-atoms-nan": _latent(
        '{kind="discrete", atoms=[[1.0], [nan]]}', "task.latent.atoms.1.0", "finite"
    ),
    "latent-probs-negative": _latent(
        '{kind="discrete", atoms=[[1.0], [2.0]], probs=[1.5, -0.5]}',
        "task.latent.probs", "negative",
    ),
    "latent-probs-sum": _latent(
        '{kind="discrete", atoms=[[1.0], [2.0]], probs=[0.3, 0.3]}',
        "task.latent.probs", "sum to 1",
    ),
    "latent-probs-count": _latent(
        '{kind="discrete", atoms=[[1.0], [2.0]], probs=[1.0]}',
        "task.latent.probs", "one probability per atom",
    ),
    "latent-cov-asymmetric": _latent(
        '{kind="gaussian", mean=[0.0, 0.0], cov=[[1.0, 0.5], [0.0, 1.0]]}',
        "task.latent.cov", "not symmetric",
    ),
    "latent-cov-not-psd": _latent(
        '{kind="gaussian", mean=[0.0, 0.0], cov=[[1.0, 2.0], [2.0, 1.0]]}',
        "task.latent.cov", "positive semi-definite",
    ),
    "latent-cov-shape": _latent(
        '{kind="gaussian", mean=[0.0, 0.0], cov=[[1.0]]}', "task.latent.cov", "2×2"
    ),
    "latent-var-negative": _latent(
        '{kind="gaussian", mean=[0.0, 0.0], var=[1.0, -1.0]}', "task.latent.var.1", "≥ 0"
    ),
    "latent-var-length": _latent(
        '{kind="gaussian", mean=[0.0, 0.0], var=[1.0]}', "task.latent.var", "F = 2"
    ),
    "latent-cov-and-var": _latent(
        '{kind="gaussian", mean=[0.0], var=[1.0], cov=[[1.0]]}',
        "task.latent", "both cov and var",
    ),
    "latent-gaussian-no-mean": _latent('{kind="gaussian"}', "task.latent.mean", "add"),
    # ------------------------------------------------------------------ bad TOML config files
    "toml-syntax": _toml("[task\nL = 3\n", "cfg.toml", "not valid TOML"),
    "toml-unknown-top": _toml("bogus = 1\n", "bogus: unknown key", "allowed here"),
    "toml-unknown-task": _toml("[task]\nLL = 3\n", "task.LL: unknown key", "L, frame"),
    "toml-unknown-bayes": _toml("[bayes]\nroutes = 'finite'\n", "bayes.routes: unknown key"),
    "toml-nan": _toml(
        '[task.latent]\nkind = "spike"\na = [nan]\n', "task.latent.a.0", "finite"
    ),
    "toml-L-float": _toml("[task]\nL = 2.5\n", "task.L", "whole number"),
    "toml-L-string": _toml('[task]\nL = "10"\n', "task.L", "whole number"),
    "toml-D-below-F": _toml(
        '[task]\nD = 2\n[task.latent]\nkind = "spike"\na = [1.0, 2.0, 3.0]\n',
        "D = 2 is smaller than", "F = 3",
    ),
    "toml-not-utf8": Case(
        ("--config", "{tmp}/cfg.toml"), ("not a UTF-8",), files={"cfg.toml": "\udcff"}
    ),
    "config-missing-file": Case(
        ("--config", "{tmp}/missing.toml"), ("missing.toml", "does not exist")
    ),
    "config-is-folder": Case(("--config", "{tmp}"), ("is a folder",)),
    # ------------------------------------------------------------------ bad output path
    "json-folder-missing": Case(
        ("--json", "{tmp}/no/such/folder/out.json"), ("the folder of output", "does not exist")
    ),
    "json-is-folder": Case(("--json", "{tmp}"), ("is a folder", "file name")),
}
# fmt: on


def _write(tmp: Path, files: dict[str, str] | None) -> None:
    for name, text in (files or {}).items():
        # surrogateescape lets a case write bytes that are not UTF-8
        (tmp / name).write_bytes(text.encode("utf-8", "surrogateescape"))


def _invoke(tmp: Path, args: tuple[str, ...]):
    argv = [a.replace("{tmp}", str(tmp)) for a in args]
    if "--json" not in argv:
        argv += ["--json", str(tmp / "out.json")]
    return runner.invoke(app, ["bayes", *argv])


def _assert_refused(tmp: Path, case: Case, result) -> str:
    text = cli_output(result)
    assert result.exit_code == 2, (result.exit_code, text, result.exception)
    assert "Traceback" not in text, text
    for s in case.expect:
        assert s in text, f"{s!r} not in output:\n{text}"
    if case.fix:
        assert "fix" in text, text
    written = {p.name for p in tmp.rglob("*")} - set(case.files or {})
    assert not (tmp / "out.json").exists()
    assert not any("out.json" in name for name in written), written  # no temp files either
    return text


@pytest.mark.parametrize("case", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_input_is_refused(tmp_path, case):
    _write(tmp_path, case.files)
    _assert_refused(tmp_path, case, _invoke(tmp_path, case.args))


def test_enough_malformed_cases():
    assert len(MALFORMED) >= 30


def test_config_error_goes_to_stderr_with_error_prefix(tmp_path):
    result = _invoke(tmp_path, ("--L", "1"))
    assert result.exit_code == 2
    assert result.stdout.strip() == ""
    assert result.stderr.startswith("error: task.L")


# ---------------------------------------------------------------------- former bugs
# Inputs that once crashed or gave a garbled message (found while writing these tests), each with
# the defect it showed; all are fixed, and these tests keep them refused cleanly.
REGRESSIONS: dict[str, tuple[Case, str]] = {
    "rich-markup-closing-tag-in-value": (
        Case(("--route", "[/x]"), ("bayes.route", "[/x]")),
        "fail() prints with Rich markup on: a user value like '[/x]' raises MarkupError (exit 1)",
    ),
    "rich-markup-closing-tag-in-path": (
        Case(("--config", "{tmp}/[/x].toml"), ("does not exist",)),
        "a config path containing '[/x]' raises MarkupError instead of the missing-file message",
    ),
    "rich-markup-swallows-user-text": (
        Case(("--set", 'task.frame="[bold]oops"'), ("task.frame", "[bold]oops")),
        "Rich markup in the echoed input is interpreted: the message shows 'oops', not the input",
    ),
    "rich-markup-swallows-hint": (
        _latent(
            '{kind="gaussian", mean=[0.0, 0.0], cov=[[1.0, 0.5], [0.0, 1.0]]}',
            "cov[i][j] equal cov[j][i]",
        ),
        "the hint 'make cov[i][j] equal cov[j][i]' is printed as 'make cov equal cov'",
    ),
    "seed-too-large": (
        Case(("--seed", str(2**63), "--samples", "2"), ("seed",)),
        "seed has no upper bound; seeds ≥ 2**63 pass validation and crash in jax.random.key "
        "with OverflowError (exit 1, traceback)",
    ),
    "latent-not-a-table-has-no-fix": (
        _latent("nonsense", "task.latent"),
        "pydantic 'model_attributes_type' has no entry in config._HINTS: no 'fix:' hint",
    ),
}


@pytest.mark.parametrize("case", [c for c, _ in REGRESSIONS.values()], ids=list(REGRESSIONS))
def test_former_bugs_stay_fixed(tmp_path, case):
    _assert_refused(tmp_path, case, _invoke(tmp_path, case.args))


# ---------------------------------------------------------------------- valid input runs
def _bayes_row(data: dict, name: str) -> dict:
    return next(r for r in data["results"] if r["predictor"] == name)


def test_valid_toml_config_runs(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        "seed = 7\n"
        "[task]\nL = 10\n"
        '[task.latent]\nkind = "flipped_spike"\na = [2.0]\n'
        "[bayes]\nsamples = 2000\n"
    )
    out = tmp_path / "out.json"
    result = runner.invoke(app, ["bayes", "--config", str(cfg), "--json", str(out)])
    assert result.exit_code == 0, (cli_output(result), result.exception)
    assert "Traceback" not in cli_output(result)
    data = json.loads(out.read_text())
    assert {"config", "seed", "metadata", "results", "bayes_risk"} <= set(data)
    assert {"git_revision", "headspec_version"} <= set(data["metadata"])
    assert data["seed"] == 7
    assert data["config"]["task"]["latent"] == {"kind": "flipped_spike", "a": [2.0], "scale": 1.0}
    assert data["config"]["bayes"]["samples"] == 2000
    assert 0 < data["bayes_risk"]["mean"] < 0.45
    assert data["bayes_risk"]["n"] == 2000
    assert _bayes_row(data, "bayes")["risk"] == data["bayes_risk"]["mean"]
    # the D → ∞ route also gives R_B without sampling (tests/test_bayes.py: within 3 s.e.)
    rb = data["bayes_risk"]
    assert abs(rb["exact"] - rb["mean"]) < 4 * rb["se"] and _bayes_row(data, "bayes")["exact"]
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_set_overrides_switch_the_law(tmp_path):
    out = tmp_path / "out.json"
    result = runner.invoke(
        app,
        [
            "bayes",
            "--set",
            'task.latent.kind="spike"',
            "--set",
            "task.latent.a=[3.0]",
            "--samples",
            "2000",
            "--L",
            "10",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, (cli_output(result), result.exception)
    data = json.loads(out.read_text())
    assert data["config"]["task"]["latent"] == {"kind": "spike", "a": [3.0], "scale": 1.0}
    assert data["config"]["task"]["L"] == 10
    assert 0 < data["bayes_risk"]["mean"] < 0.45


# ---------------------------------------------------------------------- the real entry point
def test_console_script_refuses_bad_L(tmp_path):
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "headspec.apps.cli", "bayes", "--L", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc
    assert "task.L" in proc.stderr
    assert "fix" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not out.exists()


def test_a_law_table_with_its_kind_replaces_the_default_law(tmp_path):
    """A TOML law given by its kind and atoms (no probs) is uniform, not merged with the default
    law's probs; a table without kind changes only its keys."""
    import numpy as np

    from headspec.conventions.config import SimulateConfig, load_config

    whole = tmp_path / "whole.toml"
    whole.write_text('[task.latent]\nkind = "discrete"\natoms = [[2.0, 0.0], [0.0, 2.0], '
                     "[-2.0, 0.0]]\n")  # fmt: skip
    law = load_config(SimulateConfig, whole).task.latent
    assert law.probs is None
    np.testing.assert_allclose(np.asarray(law.build().mean()), [0.0, 2.0 / 3.0], atol=1e-12)
    part = tmp_path / "part.toml"
    part.write_text("[task.latent]\nscale = 2.0\n")
    default = SimulateConfig().task.latent
    law = load_config(SimulateConfig, part).task.latent
    assert law.scale == 2.0 and law.atoms == default.atoms and law.probs == default.probs
