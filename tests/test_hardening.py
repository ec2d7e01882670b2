"""Issue "Hardening and first contact": refusals that used to come too late or as tracebacks.

Each case: exit code 2, the field or option named with a fix, no traceback, no output file.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from headspec.apps.cli import app

runner = CliRunner()

CASES = {
    # item 3: a run that would take zero SGD steps (T·D/batch < 1) used to "succeed" at t = 0
    "simulate-zero-steps": (
        ["simulate", "--D", "100", "--T", "1", "--seeds", "1", "--set", "train.batch=1000"],
        ("train.batch", "0.1 SGD steps", "fix:"),
    ),
    # item 9: theory --D 2 was refused only after "compiling…", without a fix
    "theory-D-below-heads": (["theory", "--D", "2"], ("task.D", "at least", "fix:")),
    # item 9: compare --until -1 / nan gave a traceback
    "compare-until-negative": (["compare", "a.nc", "b.nc", "--until", "-1"], ("--until", "fix:")),
    "compare-until-nan": (["compare", "a.nc", "b.nc", "--until", "nan"], ("--until", "fix:")),
    # item 9: plot on a folder said "does not exist"
    "plot-a-folder": (["plot", "{tmp}"], ("is a folder", "fix:")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_refused_up_front(name, tmp_path):
    args, expect = CASES[name]
    args = [a.format(tmp=tmp_path) for a in args]
    out = tmp_path / "out.nc"
    if args[0] in ("simulate", "theory"):
        args += ["-o", str(out)]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert all(e in text for e in expect), res.output
    assert "Traceback" not in res.output
    assert not out.exists()


def test_short_help_option():
    """Item 13: -h works like --help, for the program and for a command (real entry point)."""
    for args in (["-h"], ["simulate", "-h"]):
        res = subprocess.run([sys.executable, "-m", "headspec.apps.cli", *args],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert "Usage" in res.stdout
