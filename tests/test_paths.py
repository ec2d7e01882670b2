"""Issue 26, "Never destroy a user's file": output paths are checked before any work.

1. An output that is an input (the same file after resolving ``./``, ``..``, symlinks and hard
   links), another output, or part of a folder the command keeps for itself (a sweep's manifest
   and points, a report's files) is refused; so are files in a sweep or report folder that no
   sweep or report wrote.
2. An output that cannot be written is refused up front: a symlink loop, a symlink into a
   missing folder, a name over NAME_MAX, a device or pipe, a write-protected file.
7. ``reproduce --only``: empty refused, repeats dropped.
8. A UTF-8 byte-order mark is accepted (UTF-16 named); a refused sweep leaves no ``.lock``;
   ``sweep status`` on a malformed manifest is a clear error; saddles says why a point with
   z ≤ 3 is quasi-fixed.

Every refusal asserts: exit 2, no traceback, the field/option/path named, a fix, and every file
of the case's folder byte-identical afterwards with nothing added. No case computes: the
functions that compute are replaced by ones that fail the test (as in test_malformed.py), and
results are fabricated with numpy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace as NS
from typing import NamedTuple

import numpy as np
import pytest
from typer.testing import CliRunner

from headspec.apps import sweep
from headspec.apps.cli import app
from headspec.conventions import io
from headspec.conventions.config import SimulateConfig, load_config
from results import write_result

runner = CliRunner()
TINY = ["task.D=40", "task.L=4", "model.H=2", "train.T=1.0", "record.points=2", "seeds=1"]
SPEC = (
    '[sweep]\nkind = "theory"\nout = "u"\n'
    '[config]\n"train.T" = 1.0\n"task.D" = 40\n"task.L" = 4\n'
    '[axes]\n"model.H" = [2, 3]\n'
)


# ----------------------------------------------------------------------------- fixtures
def _result(path: Path, kind: str = "simulation", cfg=None) -> None:
    """A small result of the real schema (made-up observations: no computation; one seed unless
    ``cfg`` says otherwise)."""
    write_result(path, kind, *TINY, config=cfg)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A simulation and a theory result, copied into each case's folder."""
    folder = tmp_path_factory.mktemp("made")
    _result(folder / "a.nc", "simulation")
    _result(folder / "th.nc", "theory")
    return folder


@pytest.fixture(autouse=True)
def no_computation(monkeypatch):
    """Every computing entry point fails the test: a refusal must come before any work."""
    import headspec.apps.experiments as experiments
    import headspec.conventions.runs as runs
    import headspec.conventions.saddles as saddles_mod

    def computed(*args, **kwargs):
        raise AssertionError("the command started computing instead of refusing its output")

    for module, name in ((runs, "simulate"), (runs, "solve"), (runs, "run_bayes"),
                         (runs, "prune_result"), (saddles_mod, "find_saddles"),
                         (sweep, "run"), (sweep, "collect"),
                         (experiments, "reproduce")):  # fmt: skip
        monkeypatch.setattr(module, name, computed)


def _snapshot(folder: Path) -> dict[str, str]:
    """Every entry under ``folder``: a file's SHA-256, a link's target, a folder's mode."""
    snap = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root) / name
            rel = str(p.relative_to(folder))
            if p.is_symlink():
                snap[rel] = "-> " + os.readlink(p)
            elif p.is_dir():
                snap[rel] = "dir"
            elif stat.S_ISREG(p.stat().st_mode):
                snap[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                snap[rel] = stat.filemode(p.stat().st_mode)
    return snap


def _text(res) -> str:
    text = res.output
    try:
        stderr = res.stderr
    except (ValueError, AttributeError):
        stderr = ""
    return " ".join((text if stderr in text else text + stderr).split())


def _refused(res, expect: tuple[str, ...], code: int = 2) -> str:
    text = _text(res)
    assert res.exit_code == code, (res.exit_code, text, res.exception)
    assert "Traceback" not in text and isinstance(res.exception, SystemExit), text
    assert "fix:" in text, text
    for e in expect:
        assert e in text, f"{e!r} not in: {text}"
    return text


# ----------------------------------------------------------------------------- case set-ups
def _symlink(target: str, name: str) -> Callable[[Path], None]:
    return lambda d: os.symlink(target, d / name)


def _hardlink(target: str, name: str) -> Callable[[Path], None]:
    return lambda d: os.link(d / target, d / name)


def _file(name: str, text: str = "x = 1\n") -> Callable[[Path], None]:
    def make(d: Path) -> None:
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)

    return make


def _read_only(name: str) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        (d / name).write_text("{}\n")
        os.chmod(d / name, 0o444)

    return make


def _sweep_folder(d: Path) -> None:
    """``u/``: a sweep folder (manifest of pending tasks, points/), as `sweep.prepare` makes."""
    (d / "spec.toml").write_text(SPEC)
    plan = sweep.resolve(*sweep.load_spec(d / "spec.toml"), d / "u")
    sweep.prepare(plan)


def _foreign(name: str, content: bytes | Callable[[Path], None]) -> Callable[[Path], None]:
    """``u/NAME``, a file no sweep wrote, beside spec.toml."""

    def make(d: Path) -> None:
        (d / "spec.toml").write_text(SPEC)
        (d / "u").mkdir()
        if callable(content):
            content(d / "u" / name)
        else:
            (d / "u" / name).write_bytes(content)

    return make


def _spec_in_out(name: str) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        (d / "u").mkdir()
        (d / "u" / name).write_text(SPEC)

    return make


LONG = "n" * 256 + ".nc"  # one byte over NAME_MAX with the suffix: 259 bytes


class Case(NamedTuple):
    """``args`` run in the case's folder (the current directory), after ``setup`` made its
    files there (a.nc: a simulation, th.nc: a theory, c.toml: a config, always present)."""

    args: tuple[str, ...]
    expect: tuple[str, ...]
    setup: tuple[Callable[[Path], None], ...] = ()


# fmt: off
CASES = {
    # ---- class 1: an output that is an input
    "theory-init-from-same": Case(("theory", "--init-from", "a.nc", "-o", "a.nc"),
                                  ("--out 'a.nc'", "--init-from 'a.nc'", "destroy")),
    "theory-init-from-dot": Case(("theory", "--init-from", "a.nc", "-o", "./a.nc"),
                                 ("--out 'a.nc'", "--init-from")),
    "theory-init-from-dotdot": Case(("theory", "--init-from", "a.nc", "-o", "sub/../a.nc"),
                                    ("--out 'sub/../a.nc'", "--init-from"), (_file("sub/k"),)),
    "theory-init-from-symlink": Case(("theory", "--init-from", "a.nc", "-o", "l.nc"),
                                     ("--out 'l.nc'", "--init-from 'a.nc'"),
                                     (_symlink("a.nc", "l.nc"),)),
    "theory-init-from-hardlink": Case(("theory", "--init-from", "a.nc", "-o", "h.nc"),
                                      ("--out 'h.nc'", "same file as --init-from"),
                                      (_hardlink("a.nc", "h.nc"),)),
    "theory-init-path-key": Case(("theory", "--set",
                                  'theory.init={kind="simulation", path="a.nc"}', "-o", "a.nc"),
                                 ("--out 'a.nc'", "theory.init.path")),
    "theory-config": Case(("theory", "-c", "c.toml", "-o", "c.toml"), ("--config 'c.toml'",)),
    "theory-plot-figure-is-init": Case(("theory", "--init-from", "a.nc", "-o", "t.nc", "--plot"),
                                       ("the figure 't_risk.png'", "--init-from"),
                                       (_symlink("a.nc", "t_risk.png"),)),
    "saddles-from-same": Case(("saddles", "--from", "a.nc", "-o", "a.nc"),
                              ("--out 'a.nc'", "--from 'a.nc'")),
    "saddles-from-symlink-dir": Case(("saddles", "--from", "a.nc", "-o", "ln/a.nc"),
                                     ("--out 'ln/a.nc'", "--from"), (_symlink(".", "ln"),)),
    "saddles-json-is-config": Case(("saddles", "-c", "s.json", "-o", "s.nc"),
                                   ("the JSON beside --out 's.json'", "--config 's.json'"),
                                   (_file("s.json", "[train]\nT = 1.0\n"),)),
    "saddles-figure-is-from": Case(("saddles", "--from", "a.nc", "-o", "s.nc", "-f", "svg"),
                                   ("the figure 's_saddles.svg'", "--from 'a.nc'"),
                                   (_hardlink("a.nc", "s_saddles.svg"),)),
    "bayes-json-is-config": Case(("bayes", "-c", "c.toml", "--json", "c.toml"),
                                 ("--json 'c.toml'", "--config 'c.toml'")),
    "simulate-out-is-config": Case(("simulate", "-c", "c.toml", "-o", "c.toml"),
                                   ("--out 'c.toml'", "--config 'c.toml'")),
    "simulate-figure-is-config": Case(("simulate", "-c", "c.toml", "-o", "r.nc", "--plot"),
                                      ("the figure 'r_overlaps.png'", "--config"),
                                      (_symlink("c.toml", "r_overlaps.png"),)),
    "prune-figure-is-result": Case(("prune", "a.nc"), ("the figure 'a_prune.png'", "RESULT"),
                                   (_symlink("a.nc", "a_prune.png"),)),
    "plot-figure-is-theory": Case(("plot", "a.nc", "--theory", "th.nc", "-f", "pdf"),
                                  ("the figure 'a_head_similarity.pdf'", "--theory 'th.nc'"),
                                  (_symlink("th.nc", "a_head_similarity.pdf"),)),
    "compare-figure-is-sim": Case(("compare", "a.nc", "th.nc"),
                                  ("a_vs_th_risk.png", "SIM.nc 'a.nc'"),
                                  (_hardlink("a.nc", "a_vs_th_risk.png"),)),
    # ---- class 1: part of a folder the command keeps for itself
    "collect-into-manifest": Case(("sweep", "collect", "u", "-o", "u/manifest.json"),
                                  ("--out 'u/manifest.json'", "the sweep's manifest"),
                                  (_sweep_folder,)),
    "collect-into-points": Case(("sweep", "collect", "u", "-o", "u/points/x.nc"),
                                ("--out 'u/points/x.nc'", "inside the sweep's points folder"),
                                (_sweep_folder,)),
    "collect-over-its-figure": Case(("sweep", "collect", "u", "-o", "u/sweep_final_risk.png"),
                                    ("the figure", "same", "--out"), (_sweep_folder,)),
    "sweep-foreign-manifest-forced": Case(("sweep", "spec.toml", "-o", "u", "--force"),
                                          ("u/manifest.json is not a headspec sweep manifest",),
                                          (_foreign("manifest.json", b'{"mine": true}\n'),)),
    "sweep-foreign-manifest-list": Case(("sweep", "spec.toml", "-o", "u"),
                                        ("u/manifest.json", "not a headspec sweep manifest"),
                                        (_foreign("manifest.json", b"[1, 2]\n"),)),
    "sweep-foreign-collected-forced": Case(("sweep", "spec.toml", "-o", "u", "--force"),
                                           ("u/sweep.nc is not a collected sweep",),
                                           (_foreign("sweep.nc", lambda p: _result(p)),)),
    "sweep-foreign-figure": Case(("sweep", "spec.toml", "-o", "u"),
                                 ("u/sweep_final_risk.png was not written by a sweep",),
                                 (_foreign("sweep_final_risk.png", b"\x89PNG mine"),)),
    "sweep-spec-is-managed": Case(("sweep", "u/sweep.nc", "-o", "u"),
                                  ("SPEC.toml 'u/sweep.nc'", "the sweep's combined dataset"),
                                  (_spec_in_out("sweep.nc"),)),
    "reproduce-foreign-index": Case(("reproduce", "--only", "E4", "-o", "site"),
                                    ("--out 'site'", "index.html", "no report"),
                                    (_file("site/index.html", "<html>mine</html>"),)),
    # ---- class 2: resolved before the work
    "simulate-symlink-loop": Case(("simulate", "-o", "loop.nc"), ("--out 'loop.nc'", "loop"),
                                  (_symlink("loop.nc", "loop.nc"),)),
    "theory-symlink-loop-2": Case(("theory", "-o", "x.nc"), ("--out 'x.nc'", "symlink loop"),
                                  (_symlink("y.nc", "x.nc"), _symlink("x.nc", "y.nc"))),
    "simulate-dangling-missing-folder": Case(("simulate", "-o", "d.nc"),
                                             ("--out 'd.nc'", "missing/r.nc",
                                              "folder does not exist"),
                                             (_symlink("missing/r.nc", "d.nc"),)),
    "simulate-name-too-long": Case(("simulate", "-o", LONG), ("--out", "259 bytes", "255")),
    "bayes-folder-name-too-long": Case(("bayes", "--json", "f" * 300 + "/r.json"),
                                       ("--json", "300 bytes")),
    "saddles-name-too-long": Case(("saddles", "--from", "a.nc", "-o", "s" * 252 + ".nc"),
                                  ("--out", "255 bytes per name")),
    "simulate-fifo": Case(("simulate", "-o", "pipe.nc"), ("--out 'pipe.nc'", "not a regular"),
                          (lambda d: os.mkfifo(d / "pipe.nc"),)),
    "bayes-json-write-protected": Case(("bayes", "--json", "ro.json"),
                                       ("--json 'ro.json'", "write-protected", "chmod u+w"),
                                       (_read_only("ro.json"),)),
    "saddles-json-write-protected": Case(("saddles", "--from", "a.nc", "-o", "ro.nc"),
                                         ("the JSON beside --out 'ro.json'", "write-protected"),
                                         (_read_only("ro.json"),)),
    "collect-out-loop": Case(("sweep", "collect", "u", "-o", "loop.nc"),
                             ("--out 'loop.nc'", "symlink loop"),
                             (_sweep_folder, _symlink("loop.nc", "loop.nc"))),
    "compare-out-dir-loop": Case(("compare", "a.nc", "th.nc", "-o", "lp"),
                                 ("lp/a_vs_th_risk.png", "symlink loop"),
                                 (_symlink("lp", "lp"),)),
    # ---- class 7: selections
    "reproduce-only-empty": Case(("reproduce", "--only", "", "-o", "r"),
                                 ("--only ''", "names no experiment", "E1, E2")),
    "reproduce-only-commas": Case(("reproduce", "--only", " , ", "-o", "r"),
                                  ("--only ' , '", "E7")),
    # ---- class 8
    "toml-utf16-bom": Case(("simulate", "-c", "w.toml", "-o", "r.nc"),
                           ("w.toml", "UTF-16 byte-order mark", "UTF-8"),
                           (lambda d: (d / "w.toml").write_bytes("x = 1\n".encode("utf-16")),)),
    "status-manifest-list": Case(("sweep", "status", "u"),
                                 ("u/manifest.json", "not a readable sweep manifest", "list"),
                                 (_foreign("manifest.json", b"[]\n"),)),
    "status-manifest-task-without-status": Case(
        ("sweep", "status", "u"), ("u/manifest.json", "task 0 has no status"),
        (_foreign("manifest.json", json.dumps({"manifest_version": 1, "spec": {},
                                               "spec_hash": "x", "tasks": [7]}).encode()),)),
}
# fmt: on


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_refused_before_any_work_and_nothing_touched(case, made, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("a.nc", "th.nc"):
        shutil.copy(made / name, tmp_path / name)
    (tmp_path / "c.toml").write_text("seed = 3\n")
    for make in case.setup:
        make(tmp_path)
    before = _snapshot(tmp_path)
    res = runner.invoke(app, list(case.args))
    _refused(res, case.expect)
    assert _snapshot(tmp_path) == before  # every input byte-identical, nothing added


def test_the_cases_cover_every_command():
    assert len(CASES) >= 40
    assert {c.args[0] for c in CASES.values()} == {"simulate", "theory", "bayes", "saddles",
                                                    "compare", "plot", "prune", "sweep",
                                                    "reproduce"}  # fmt: skip


# ----------------------------------------------------------------------------- write-protection
@pytest.mark.parametrize(
    ("mode", "euid", "uid", "gid", "groups", "protected"),
    [
        (0o644, 1000, 1000, 1000, [1000], False),  # owner may write
        (0o444, 1000, 1000, 1000, [1000], True),  # owner made it read-only
        (0o464, 1000, 2000, 50, [50], False),  # group may write
        (0o644, 1000, 2000, 50, [50], True),  # group may not
        (0o646, 1000, 2000, 60, [50], False),  # others may
        (0o664, 1000, 2000, 60, [50], True),  # others may not
        (0o600, 0, 2000, 60, [0], False),  # root: any write bit is enough
        (0o444, 0, 2000, 60, [0], True),  # root: no write bit at all is a protected file
    ],
)
def test_write_protected_reads_the_mode_bits(mode, euid, uid, gid, groups, protected):
    """The check uses the mode bits and the caller's class, not os.access (which is always true
    for root, and these tests may run as root): so it is tested here with made-up callers, and
    a read-only file is refused by the commands for root too (cases *-write-protected)."""
    st = os.stat_result((stat.S_IFREG | mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))
    assert io.write_protected(st, euid=euid, groups=groups) is protected


def test_a_read_only_output_is_refused_with_its_mode(tmp_path):
    p = tmp_path / "r.nc"
    p.write_text("mine")
    p.chmod(0o444)
    with pytest.raises(io.PathError, match=r"write-protected \(mode -r--r--r--\)"):
        io.check_outputs([("--out", p)])
    p.chmod(0o644)
    assert io.check_outputs([("--out", p)]) == [p.resolve()]


# ----------------------------------------------------------------------------- long names
def test_a_legal_name_of_255_bytes_is_written(tmp_path):
    """The temporary file beside it would pass NAME_MAX: its name is shortened, not the
    target's (and a leftover of it is still found and removed)."""
    p = tmp_path / ("é" * 124 + "x.json")  # 2·124 + 6 = 254 bytes
    assert len(os.fsencode(p.name)) <= 255
    io.check_outputs([("--json", p)])
    io.write_json_atomic(p, {"a": 1})
    assert json.loads(p.read_text()) == {"a": 1}
    assert sorted(x.name for x in tmp_path.iterdir()) == [p.name]


# ----------------------------------------------------------------------------- selections
@pytest.mark.parametrize(
    ("only", "ids"), [("E1,E1", ["E1"]), ("e3, E1 ,E3,e1,", ["E3", "E1"]), ("E2", ["E2"])]
)
def test_reproduce_only_drops_repeats_and_keeps_order(only, ids, tmp_path, monkeypatch):
    import headspec.apps.experiments as experiments

    got = {}

    def reproduce(**kw):
        got["only"] = kw["only"]
        return []

    monkeypatch.setattr(experiments, "reproduce", reproduce)
    res = runner.invoke(app, ["reproduce", "--only", only, "-o", str(tmp_path / "r"),
                              "--workers", "1"])  # fmt: skip
    assert res.exit_code == 0, _text(res)
    assert got["only"] == ids


# ----------------------------------------------------------------------------- class 8
def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    p = tmp_path / "bom.toml"
    p.write_bytes("\ufeff[train]\nT = 2.5\n".encode())
    assert load_config(SimulateConfig, p).train.T == 2.5


def test_a_refused_sweep_leaves_no_lock_and_no_folder_change(made, tmp_path, monkeypatch):
    """Another spec's folder: refused by the command and by the API, before the lock."""
    monkeypatch.chdir(tmp_path)
    _sweep_folder(tmp_path)
    before = _snapshot(tmp_path)
    res = runner.invoke(app, ["sweep", "spec.toml", "-o", "u", "--axis", "model.H=[2, 4]"])
    _refused(res, ("u holds a sweep with another spec", "axis model.H: [2, 3] → [2, 4]"))
    changed = sweep.resolve(*sweep.load_spec("spec.toml", axes=["model.H=[2, 4]"]), Path("u"))
    monkeypatch.undo()  # the real sweep.run: it must refuse before starting anything
    monkeypatch.chdir(tmp_path)
    with pytest.raises(sweep.SweepError, match="another spec"):
        sweep.run(changed)
    assert _snapshot(tmp_path) == before
    assert not (tmp_path / "u" / ".lock").exists()


def test_a_sweeps_own_files_are_not_foreign(tmp_path):
    """The checks above refuse only what no sweep wrote: a folder with its manifest, points,
    collected sweep.nc and figure passes, with --force too."""
    from headspec.apps.sweep.collect import collect, save_collected, save_figure

    (tmp_path / "spec.toml").write_text(SPEC)
    plan = sweep.resolve(*sweep.load_spec(tmp_path / "spec.toml"), tmp_path / "u")
    (plan.out / "points").mkdir(parents=True)
    for t in plan.tasks:  # written, not yet recorded: prepare finds them by config hash
        _result(plan.out / t.file, "theory", t.config)
    manifest, todo = sweep.prepare(plan)
    assert todo == [] and {e["status"] for e in manifest["tasks"]} == {"done"}
    ds = collect(plan.out)
    save_collected(ds, plan.out / sweep.COLLECTED)
    save_figure(ds, plan.out)
    assert sweep.check_folder(plan)["spec_hash"] == plan.spec_hash
    assert sweep.check_folder(plan, force=True) is not None


def test_the_lock_file_goes_with_the_lock(tmp_path):
    from headspec.apps.sweep.manifest import folder_lock

    with folder_lock(tmp_path):
        assert (tmp_path / ".lock").exists()
        with pytest.raises(sweep.SweepError, match="another headspec sweep is running"):
            with folder_lock(tmp_path):
                raise AssertionError("a second lock of the same folder was granted")
        assert (tmp_path / ".lock").exists()  # the refused one did not take it away
    assert not (tmp_path / ".lock").exists()
    with folder_lock(tmp_path):  # and it can be taken again
        assert (tmp_path / ".lock").exists()
    assert list(tmp_path.iterdir()) == []


def test_saddles_says_why_a_point_with_small_z_is_quasi_fixed():
    import xarray as xr
    from rich.console import Console

    from headspec.apps.cli.saddles import _table

    found = [
        NS(leading=None, escape_time=lambda D: float("inf"), t_start=1.0, t_end=2.0, level=0.3,
           risk=0.29, drift_before=1e-2, drift_after=1e-6, max_z=z, is_fixed=fixed,
           groups=[[0], [1]], unstable=[], n_zero=0, modes=[])
        for z, fixed in ((2.6, False), (1.0, True), (7.5, False))
    ]  # fmt: skip
    sd = xr.Dataset(coords={"head": np.arange(2), "feature": np.arange(2)},
                    attrs={"D": 1000, "eta2": 1, "seed": 0, "n": 256})  # fmt: skip
    console = Console(width=80, record=True)
    console.print(_table(found, sd))
    text = " ".join(console.export_text().split())
    assert "2.6 quasi*" in text and "7.5 quasi " in text and "1.0 " in text
    assert "the solver did not converge (#1)" in text
    assert "fixed: the solver converged and z ≤ 3" in text
