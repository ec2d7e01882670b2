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


# what a help screen, --version and a config check must not load: JAX alone takes ~2 s
HEAVY = ("jax", "equinox", "diffrax", "xarray", "matplotlib")
LOADED = f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"


def test_help_version_and_config_checks_load_no_numerics():
    """`headspec -h`, `headspec simulate -h` and `--version` answer without importing JAX (0.7 s
    against 2.5 s on 2 cores, 2026-12-03), and a config is validated — names of activations and
    engines included — without it too (so refusals of bad input could be as fast); a command
    that computes still sets JAX up (64-bit)."""
    for argv in (["-h"], ["simulate", "-h"], ["--version"]):
        code = ("import sys; from headspec.apps.cli import main; sys.argv = ['headspec', *"
                f"{argv!r}]\ntry:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0\n"
                f"{LOADED}")  # fmt: skip
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert res.returncode == 0 and res.stdout.strip().endswith("[]"), (argv, res.stderr)
    code = ("import sys; from headspec.conventions.config import SimulateConfig, load_config; "
            "load_config(SimulateConfig, overrides=['model.activation=\"softmax1\"', "
            f"'train.engine=\"reduced\"', 'task.D=500']); {LOADED}")  # fmt: skip
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stderr


def test_the_configs_names_are_the_registries_names():
    """The configs take their activation and engine names from a JAX-free list; each registry
    checks at import that the list is its keys (here: they agree, and the check can fail)."""
    from headspec.core.attention import ACTIVATIONS
    from headspec.core.names import ACTIVATION_NAMES, ENGINE_NAMES, check_registry
    from headspec.dynamics.engines import ENGINES

    assert tuple(ACTIVATIONS) == ACTIVATION_NAMES and tuple(ENGINES) == ENGINE_NAMES
    with pytest.raises(RuntimeError, match="fix: list the new one in both"):
        check_registry(ENGINE_NAMES, {**ENGINES, "new": object}, "engines")


def test_simulate_and_theory_take_scale_and_list_the_law_kinds(tmp_path):
    """Item 13: `simulate --scale` exists like `bayes --scale` (here it reaches the config: a
    negative scale is refused naming task.latent.scale), and --latent's help lists the kinds."""
    for cmd in ("simulate", "theory"):
        res = runner.invoke(app, [cmd, "--scale", "-1", "-o", str(tmp_path / "x.nc")])
        assert res.exit_code == 2 and "task.latent.scale" in res.output, res.output
        helptext = " ".join(runner.invoke(app, [cmd, "--help"]).output.split())
        assert all(k in helptext for k in ("spike", "flipped_spike", "discrete", "gaussian"))


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_counts_are_singular_for_one(tmp_path):
    """Item 13: "1 seed", not "1 seeds"; theory's summary has no always-empty held-out column."""
    res = runner.invoke(app, ["theory", "--D", "50", "--L", "4", "--H", "2", "--T", "0.3",
                              "--n", "64", "-o", str(tmp_path / "t.nc")])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "held-out" not in res.output
    res = runner.invoke(app, ["simulate", "--D", "40", "--L", "4", "--H", "2", "--T", "0.2",
                              "--seeds", "1", "-o", str(tmp_path / "s.nc")])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "1 seed," in " ".join(res.output.split()) and "1 seeds" not in res.output


UNWRITABLE = {
    # item 1: outputs were checked only after the computation
    "simulate": ["simulate", "--D", "40", "--L", "4", "--H", "2", "--T", "0.2", "--seeds", "1",
                 "-o", "/proc/headspec-test.nc"],
    "theory": ["theory", "--D", "40", "--L", "4", "--H", "2", "--T", "0.2", "-o",
               "/proc/headspec-test.nc"],
    "bayes-json": ["bayes", "-n", "100", "--json", "/proc/headspec-test.json"],
    "reproduce": ["reproduce", "--only", "E4", "-o", "/proc/headspec-report"],
    "compare-out-dir": ["compare", "a.nc", "b.nc", "--out-dir", "/proc/headspec-figures"],
}  # fmt: skip


@pytest.mark.parametrize("name", list(UNWRITABLE))
def test_unwritable_outputs_are_refused_before_any_work(name):
    """A path in a folder where nothing can be created (/proc, even for root) is refused with
    exit 2 before anything is computed or loaded."""
    res = runner.invoke(app, UNWRITABLE[name])
    assert res.exit_code == 2, res.output
    assert "cannot write in" in " ".join(res.output.split()) and "fix:" in res.output
    assert "Traceback" not in res.output
