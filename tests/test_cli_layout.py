"""First contact with the command line (issue 13, item 13): flags, completion, help text, tables
and banners at 80 columns, counts, and a progress bar for `bayes`.

Everything here runs in-process and computes nothing (results are made up; the functions that
compute are replaced), except one tiny `bayes` run for its progress bar.
"""

from __future__ import annotations

import io
import itertools
import re
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest
import typer
from rich.cells import cell_len
from rich.console import Console
from typer.testing import CliRunner

import headspec.apps.cli.common as common
from headspec.apps.cli import app

runner = CliRunner()
WIDTH = 80


def _commands(group=None, path=()):
    """(command path, click command) for every command and sub-command of `headspec`."""
    group = group or typer.main.get_command(app)
    for name, cmd in group.commands.items():
        yield (*path, name), cmd
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*path, name))


COMMANDS = [p for p, _ in _commands()]


def _help(path: tuple[str, ...]) -> str:
    res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)})
    assert res.exit_code == 0, res.output
    return res.output


def _console() -> Console:
    return Console(width=WIDTH, file=io.StringIO(), color_system=None, legacy_windows=False)


def _text(console: Console) -> str:
    return console.file.getvalue()


def _assert_fits(text: str, whole: list[str]) -> None:
    """No line wider than 80 columns, and each string of ``whole`` (numbers with their ± or →
    partner, a head's entry) on one line — never broken across two."""
    lines = text.splitlines()
    assert lines, "nothing printed"
    wide = [line for line in lines if cell_len(line.rstrip()) > WIDTH]
    assert not wide, "\n".join(wide)
    for s in whole:
        assert any(s in line for line in lines), f"{s!r} is broken across lines in:\n{text}"


# ---------------------------------------------------------------------- (a) flags
@pytest.mark.parametrize("path", [(), *COMMANDS], ids=lambda p: " ".join(p) or "headspec")
def test_flags_show_no_type_in_help(path):
    """Typer shows `<bool>` beside flags (--plot/--no-plot, --force, --help), which reads as if
    they took a value; they take none, and the help shows none."""
    text = _help(path)
    assert "--help" in text and "<bool>" not in text, text


def test_a_flag_given_a_value_is_a_usage_error(tmp_path):
    res = runner.invoke(app, ["simulate", "--plot", "true", "-o", str(tmp_path / "x.nc")])
    assert res.exit_code == 2 and "true" in res.output and "Traceback" not in res.output
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------------- (b) completion
def test_show_completion_prints_a_bash_script(monkeypatch):
    # --show-completion is a flag that detects the running shell from the process tree, which
    # differs between a terminal, CI and a background job: the test fixes it to bash
    import typer.completion

    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")
    res = runner.invoke(app, ["--show-completion"])
    assert res.exit_code == 0, res.output
    assert "complete " in res.output and "_HEADSPEC_COMPLETE=complete_bash" in res.output
    assert "--install-completion" in _help(())


def test_completion_completes_command_names():
    env = {"_HEADSPEC_COMPLETE": "complete_bash", "COMP_WORDS": "headspec sim", "COMP_CWORD": "1"}
    res = runner.invoke(app, [], env=env, prog_name="headspec")
    assert res.exit_code == 0 and res.output.split() == ["simulate"], res.output


# ---------------------------------------------------------------------- (f) help paragraphs
def _words(text: str) -> str:
    return " ".join(text.replace("`", "").split())


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_help_paragraphs_are_reflowed_not_broken(path):
    """Each paragraph of a command's docstring is shown whole and re-flowed to the width: a line
    ends only where the next word would not fit (a hard line break of the docstring would end
    a line early, mid-sentence)."""
    cmd = dict(_commands())[path]
    text = _help(path)
    intro = text.split("╭")[0].splitlines()
    shown, current = [], []
    for line in intro[1:]:  # after the usage line
        if line.strip():
            current.append(line.strip())
        elif current:
            shown.append(current)
            current = []
    shown.append(current)
    shown = [p for p in shown if p and not p[0].startswith("Usage:")]
    paragraphs = [_words(p) for p in cmd.help.split("\n\n") if p.strip()]
    assert [_words(" ".join(p)) for p in shown] == paragraphs, text
    room = WIDTH - 2  # one column of margin on each side
    for par in shown:
        for line, nxt in itertools.pairwise(par):
            assert cell_len(line) + 1 + cell_len(nxt.split()[0]) > room, (line, nxt)


# ---------------------------------------------------------------------- (c) tables, banners
def _result(kind: str, H: int = 2, F: int = 2, S: int = 2):
    """A made-up result of the real schema (nothing is computed): F one-hot atoms, risks with
    standard errors of four significant digits (the tables must round them, not cut them)."""
    from results import made_result

    atoms = [[float(i == j) for j in range(F)] for i in range(F)]
    rng = np.random.default_rng(1)
    return made_result(
        kind, f"model.H={H}", "task.D=50", f"task.latent={{kind='discrete', atoms={atoms}}}",
        seeds=S, M=0.4 * rng.normal(size=(S, 3, H, F)), risk=0.3 + 0.01 * rng.random((S, 3)),
        risk_se=1.234e-3, test_risk=0.3123 if kind == "simulation" else np.nan,
        test_risk_se=2.345e-3, bayes_risk=0.2753, extra={"bayes_risk_se": 0.0012},
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["simulation", "theory"])
def test_summary_table_fits_80_columns(kind):
    from headspec.apps.cli.run import _summary

    ds = _result(kind, H=8, F=4, S=3)
    console = _console()
    console.print(_summary(ds))
    text = _text(console)
    last = ds.isel(t=-1)
    whole = [f"{r:.4f} ± {s:.4f}" for r, s in zip(last.risk.values, last.risk_se.values,
                                                    strict=True)]  # fmt: skip
    whole += [f"h{h}→" for h in range(8)]
    heads = re.findall(r"h\d+→f\d+\([+-]\d\.\d\d\)", text)
    assert len(heads) == 8 * 3, text  # every head's entry whole, on one line
    if kind == "simulation":
        whole.append("0.3123 ± 0.0023")
    else:
        assert "held-out" not in text
    _assert_fits(text, [*whole, "R_B = 0.2753 ± 0.0012"])


def test_bayes_risk_table_fits_80_columns():
    from headspec.apps.cli.run import _risk_table
    from headspec.conventions.config import BayesRunConfig, load_config

    cfg = load_config(BayesRunConfig, overrides=['bayes.route="finite"', "task.D=1000000",
                                                 "bayes.samples=10000000000"])  # fmt: skip
    names = ["ŷ = 0", "uniform attention 1/L", "softmax head on K*E[θ]",
             "Bayes-softmax, head per atom", "Bayes posterior (R_B)"]  # fmt: skip
    rows = [dict(description=d, heads=2, risk=0.27533, se=0.00014, excess_over_bayes=0.05288,
                 excess_se=0.0001) for d in names]  # fmt: skip
    console = _console()
    console.print(_risk_table(cfg, {"results": rows}))
    _assert_fits(_text(console), ["0.27533", "0.00014", "+0.05288 ± 0.00010", "10,000,000,000"])
    # the D → ∞ route adds the exact column ("—" where there is no exact route)
    cfg = load_config(BayesRunConfig, overrides=["bayes.samples=10000000000"])
    rows = [{**r, "exact": 0.27508 if i else None, "exact_err": 3e-11 if i else None}
            for i, r in enumerate(rows)]  # fmt: skip
    console = _console()
    console.print(_risk_table(cfg, {"results": rows}))
    _assert_fits(_text(console), ["0.27533", "+0.05288 ± 0.00010", "0.27508", "—",
                                  "error bounds ≤ 3e-11"])  # fmt: skip


def test_saddles_tables_fit_80_columns(monkeypatch):
    import xarray as xr

    import headspec.dynamics.saddles as dynamics_saddles
    from headspec.apps.cli.saddles import _table

    words = "head-difference mode along features 0 and 1, heads 0 − 1 against 2 − 3"
    monkeypatch.setattr(dynamics_saddles, "describe_mode", lambda *a, **k: words)
    lead = NS(eigenvalue=complex(0.01234, 0.0), se=0.00123, err=4e-9, zero=False)
    found = [
        NS(leading=lead, escape_time=lambda D: np.log(D) / (2 * 0.01234), t_start=0.3123,
           t_end=123.45, level=0.30001, risk=0.29987, drift_before=1.23e-2, drift_after=3e-8,
           max_z=12.1, is_fixed=False, groups=[[0, 1], [2], [3]], unstable=[1, 2], n_zero=1,
           modes=[lead])
    ] * 3  # fmt: skip
    sd = xr.Dataset(coords={"head": np.arange(4), "feature": np.arange(2)},
                    attrs={"D": 100000, "eta2": 1, "seed": 0, "n": 2048})  # fmt: skip
    console = _console()
    console.print(_table(found, sd))
    _assert_fits(_text(console), ["0.3000 → 0.2999", "1.2e-02 → 3e-08", "+0.0123 ± 0.0012",
                                  "0.312–123", "12.1 quasi", "1: 4.0e-09"])  # fmt: skip


@pytest.fixture
def narrow(monkeypatch):
    """The commands' stdout console, 80 columns wide, writing into a buffer."""
    console = _console()
    for module in ("analyse", "reproduce", "sweep"):
        monkeypatch.setattr(f"headspec.apps.cli.{module}.out", console)
    return console


def test_compare_table_fits_80_columns(tmp_path, narrow, monkeypatch):
    import headspec.apps.plots as plots
    from headspec.conventions import results

    sim, th = tmp_path / "sim.nc", tmp_path / "th.nc"
    results.save(_result("simulation"), sim)
    results.save(_result("theory"), th)
    for name in ("plot_risk", "plot_compare_overlaps"):
        monkeypatch.setattr(plots, name, lambda *a, **k: None)
    monkeypatch.setattr("headspec.apps.cli.analyse.write_figures", lambda *a, **k: None)
    res = runner.invoke(app, ["compare", str(sim), str(th), "--until", "0.75"])
    assert res.exit_code == 0, res.output
    text = _text(narrow)
    assert re.search(r"\d+\.\d\d %", text), text
    _assert_fits(text, ["relative to theory", "absolute, worst entry"])


def test_prune_table_fits_80_columns(tmp_path, narrow, monkeypatch):
    import headspec.apps.plots as plots
    import headspec.conventions.runs as runs
    from headspec.conventions import results

    path = tmp_path / "a_rather_long_result_file_name_of_a_simulation_with_eight_heads.nc"
    results.save(_result("simulation", H=8), path)
    fake = {"n_heads": list(range(8, 0, -1)),
            "greedy": {"risk": [0.2712 + 0.01 * k for k in range(8)], "removed": list(range(7))},
            "random": [{"risk": [0.2712 + 0.02 * k for k in range(8)]}]}  # fmt: skip
    monkeypatch.setattr(runs, "prune_result", lambda *a, **k: fake)
    monkeypatch.setattr(plots, "plot_prune", lambda *a, **k: None)
    monkeypatch.setattr("headspec.apps.cli.analyse.write_figures", lambda *a, **k: None)
    res = runner.invoke(app, ["prune", str(path)])
    assert res.exit_code == 0, res.output
    _assert_fits(_text(narrow), ["0.2712", "0.3412", "0.4112"])


def test_reproduce_and_sweep_tables_fit_80_columns(tmp_path, narrow, monkeypatch):
    import headspec.apps.experiments as experiments
    from headspec.apps.cli.sweep import _print_report
    from headspec.apps.experiments.base import Outcome
    from headspec.apps.experiments.claims import Claim, Tolerance

    claims = [Claim("E4.constructed", "The constructed Bayes-softmax (one head per atom) attains "
                    "R_B", "q", 6.7e-16, 0.0, Tolerance("below", 1e-9)),
              Claim("E4.order", "Heads pick up features in decreasing order of Var θ_f", "q",
                    0.18969, 0.00078)]  # fmt: skip
    monkeypatch.setattr(experiments, "reproduce",
                        lambda **k: [Outcome("E4", "t", claims=claims)])  # fmt: skip
    res = runner.invoke(app, ["reproduce", "--only", "E4", "-o", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    report = NS(total=1200, skipped=600, done=500, diverged=100, failed=[], dataset_path=None)
    _print_report(NS(out=tmp_path / "sweep"), report)
    _assert_fits(_text(narrow), ["6.7e-16", "0.18969 ± 0.00078", "1200", "600", "100"])


def test_banner_wraps_between_parts_only(monkeypatch):
    console = _console()
    monkeypatch.setattr(common, "err", console)
    parts = ["bayes_softmax", "H = 16", "L = 100", "D = 1000000", "gaussian law", "η = 0.0005",
             "T = 2000", "1 seed", "float64", "reduced engine"]  # fmt: skip
    common.banner("simulate", parts)
    text = _text(console)
    assert len(text.splitlines()) == 2
    _assert_fits(text, parts)


# ---------------------------------------------------------------------- (d) counts
def test_plural():
    assert common.plural(1, "seed") == "1 seed" and common.plural(2, "worker") == "2 workers"
    assert common.plural(0, "point") == "0 points"


def test_no_count_is_written_with_a_fixed_plural():
    """Counts in the command line's messages go through plural(): no ``{n} seeds`` f-string
    (which prints "1 seeds")."""
    cli = Path(common.__file__).parent
    pattern = re.compile(r"\{[^{}]*\} (seed|worker|point|task|head|step|experiment|file)s\b")
    found = [f"{p.name}: {m.group(0)}" for p in sorted(cli.glob("*.py"))
             for m in pattern.finditer(p.read_text())]  # fmt: skip
    assert not found, found


# ---------------------------------------------------------------------- (e) bayes progress
def test_estimate_risks_reports_each_chunk(monkeypatch):
    """The Monte-Carlo estimate calls ``progress(done, n)`` after each chunk (the chunk's losses
    are replaced by zeros: this is about the loop, not the numbers)."""
    import jax

    import headspec.dynamics.bayes as bayes
    from headspec.core.attention import Zero
    from headspec.core.latent import Spike
    from headspec.dynamics.bayes import estimate_risks

    monkeypatch.setattr(bayes, "_projected_chunk", lambda *a, chunk, **kw: np.zeros((1, chunk)))
    calls = []
    estimate_risks(jax.random.key(0), Spike([1.0]), 3, {"zero": Zero()}, n=50, chunk=20,
                   progress=lambda done, total: calls.append((done, total)))  # fmt: skip
    assert calls == [(20, 50), (40, 50), (50, 50)]


def test_bayes_shows_a_progress_bar(monkeypatch):
    """`bayes` passes a progress callback and draws a bar of the sequences done (the estimate
    itself is replaced: the chunks' callback is tested above)."""
    import headspec.conventions.runs as runs

    rows = [dict(description="ŷ = 0", heads=None, risk=0.5, se=0.0, excess_over_bayes=0.2,
                 excess_se=0.001)]  # fmt: skip

    def fake_run_bayes(cfg, progress=None):
        for done in (100, 200, cfg.bayes.samples):
            progress(done, cfg.bayes.samples)
        return {"results": rows}

    monkeypatch.setattr(runs, "run_bayes", fake_run_bayes)
    res = runner.invoke(app, ["bayes", "-n", "300"])
    assert res.exit_code == 0, res.output
    assert "estimating risks" in res.output and "300/300 sequences" in res.output, res.output
