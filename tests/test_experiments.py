"""The report of `headspec reproduce`: structure, figures that render, failure isolation."""

import re

import pytest
from typer.testing import CliRunner

from headspec.apps import experiments
from headspec.apps.cli import app
from headspec.apps.experiments import Claim

PNG = b"\x89PNG\r\n\x1a\n"


def _check_html(folder):
    page = (folder / "index.html").read_text()
    images = re.findall(r"<img src=[\"']([^\"']+)[\"']", page)
    for src in images:
        data = (folder / src).read_bytes()
        assert data[:8] == PNG and len(data) > 1000, src
    for href in re.findall(r"<a href='([^']+)'", page):
        assert (folder / href).is_file(), href
    return page, images


@pytest.fixture(scope="module")
def e4_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    outcomes = experiments.reproduce(scale="smoke", outdir=out, only=["E4"])
    return out, outcomes


def test_report_has_claims_figures_configs_and_environment(e4_report):
    out, outcomes = e4_report
    (o,) = outcomes
    assert o.error is None and any(c.claim.startswith("The constructed Bayes") for c in o.claims)
    assert all(c.tolerance for c in o.claims if c.holds is not None)
    page, images = _check_html(out)
    assert images, "no figure in the report"
    md = (out / "index.md").read_text()
    for text in ("## Claims", "## Environment", "git_revision", "E4", "constructed Bayes-softmax"):
        assert text in md
    assert "Environment" in page and "jax_version" in page
    assert any(p.name.startswith("E4_") for p in (out / "configs").iterdir())


def test_a_failing_experiment_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    def boom(ctx):
        raise RuntimeError("deliberate failure")

    def fine(ctx):
        ctx.claim("a claim that holds", "a quantity", "42", True)

    monkeypatch.setattr(experiments, "RECIPES", {"E1": boom, "E4": fine})
    outcomes = experiments.reproduce(scale="smoke", outdir=tmp_path, only=["E1", "E4"])
    assert outcomes[0].error and "deliberate failure" in outcomes[0].error
    assert outcomes[1].error is None and outcomes[1].claims == [
        Claim("a claim that holds", "a quantity", "42", True)
    ]
    md = (tmp_path / "index.md").read_text()
    assert "This experiment failed" in md and "deliberate failure" in md
    assert "a claim that holds" in md
    _check_html(tmp_path)


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--scale", "huge"], "--scale"),
        (["--only", "E9"], "E9"),
        (["--scheduler", "nonsense://host"], "--scheduler"),
        (["--tls-cert", "cert.pem"], "--scheduler"),
    ],
)
def test_reproduce_refuses_bad_options(tmp_path, args, expect):
    r = CliRunner().invoke(app, ["reproduce", *args, "--out", str(tmp_path / "r")])
    assert r.exit_code == 2 and expect in (r.stdout + r.stderr) and "fix" in (r.stdout + r.stderr)
    assert not (tmp_path / "r").exists()


def test_numpy_verdicts_count_as_verdicts():
    import numpy as np

    assert Claim("c", "q", "v", np.float64(1.0) > 0).holds is True
    assert Claim("c", "q", "v", np.bool_(False)).holds is False
    assert Claim("c", "q", "v", None).holds is None
