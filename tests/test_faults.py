"""Faults of the machine, not of the input (issue 51): a full disk, a folder removed during the
run, a second writer in the same folder. Each ends in one line that names the file, the cause
and the fix, a non-zero exit, no traceback and no file left half-written; what was finished
before stays.

The full disk is injected without a small file system: the writer raises ENOSPC as the kernel
would (``results.save`` hands its writer to ``io.write_atomic``), or the free-space probe says
the disk is full (HDF5 can crash the process on a real ENOSPC, so a write of known size is
checked first: ``disk.check_room``). A real tmpfs is tried too where it can be mounted (slow
tier: needs root).
"""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from typer.testing import CliRunner

from headspec.apps.cli import app
from headspec.conventions import disk, io

runner = CliRunner()


def _small() -> xr.Dataset:
    return xr.Dataset({"x": ("i", np.arange(4.0))})


def test_enospc_inside_the_writer_is_one_write_error_and_no_file(tmp_path):
    """The writer fails as on a full disk: WriteError naming the file and the cause, the
    temporary file removed, the old file (if any) untouched."""
    target = tmp_path / "r.nc"
    target.write_text("old")

    def full(tmp):
        with open(tmp, "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(disk.WriteError, match=r"r\.nc.*the disk is full.*fix:"):
        io.write_atomic(target, full)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.nc"]
    assert target.read_text() == "old"


@pytest.mark.parametrize(
    "error",
    [OSError(errno.ENOSPC, "No space left on device"), OSError("encoder error -2 when writing")],
    ids=["enospc", "pillow-encoder"],
)
def test_a_figure_on_a_full_disk_is_one_write_error_and_no_file(error, tmp_path, monkeypatch):
    """Figures go through the same atomic writer (issue 51: --plot on a full disk gave an
    89-line Pillow traceback): the error is one WriteError and no partial PNG is left."""
    from matplotlib.figure import Figure

    from headspec.apps.plots import write_figure

    def savefig(self, tmp, **kw):
        Path(tmp).write_bytes(b"\x89PNG partial")
        raise error

    monkeypatch.setattr(Figure, "savefig", savefig)
    with pytest.raises(disk.WriteError, match=r"f\.png.*fix:"):
        write_figure(Figure(), tmp_path / "f.png")
    assert list(tmp_path.iterdir()) == []


def test_a_library_wrapping_enospc_in_its_message_is_recognised(tmp_path):
    """h5py and Pillow raise their own errors with the OS's words in the message."""

    def h5py_like(tmp):
        raise OSError("Can't write data (file write failed: errno = 28, error message = 'No "
                      "space left on device')")  # fmt: skip

    with pytest.raises(disk.WriteError, match="the disk is full"):
        io.write_atomic(tmp_path / "a.nc", h5py_like)
    assert list(tmp_path.iterdir()) == []


def test_a_write_of_known_size_is_refused_when_the_disk_has_no_room(tmp_path, monkeypatch):
    monkeypatch.setattr(disk, "free_bytes", lambda folder: 100_000)
    called = []
    with pytest.raises(disk.WriteError, match=r"the disk is full \(0\.1 MiB free"):
        io.write_atomic(tmp_path / "a.nc", called.append, size=50_000)
    assert called == [] and list(tmp_path.iterdir()) == []  # the writer never ran


def test_a_folder_removed_during_the_run_is_one_write_error(tmp_path):
    gone = tmp_path / "gone"
    with pytest.raises(disk.WriteError, match="folder no longer exists"):
        io.write_atomic(gone / "a.json", lambda tmp: tmp.write_text("{}"))


def test_simulate_on_a_full_disk_exits_1_with_one_line(tmp_path, monkeypatch, capsys):
    """The whole command through its entry point: the run finishes, saving finds the disk full
    (the probe says so once the run is done), one line on stderr, exit 1, no file and no
    traceback."""
    import headspec.apps.cli as cli
    from headspec.conventions import results

    real_save = results.save

    def full_save(ds, path):
        monkeypatch.setattr(disk, "free_bytes", lambda folder: 1000)
        return real_save(ds, path)

    monkeypatch.setattr(results, "save", full_save)
    out = tmp_path / "x.nc"
    monkeypatch.setattr(sys, "argv", ["headspec", "simulate", "--D", "50", "--T", "0.1", "--H",
                                      "2", "--set", "seeds=1", "--engine", "reduced", "-o",
                                      str(out)])  # fmt: skip
    with pytest.raises(SystemExit) as e:
        cli.main()
    text = " ".join(capsys.readouterr().err.split())
    assert e.value.code == 1, text
    assert "could not write" in text and "the disk is full" in text and "fix:" in text
    assert "Traceback" not in text
    assert list(tmp_path.iterdir()) == []


def test_an_output_on_a_full_disk_is_refused_before_any_work(tmp_path, monkeypatch):
    import headspec.conventions.runs as runs

    monkeypatch.setattr(disk, "free_bytes", lambda folder: 1000)
    monkeypatch.setattr(runs, "simulate", lambda *a, **k: pytest.fail("computed"))
    r = runner.invoke(app, ["simulate", "-o", str(tmp_path / "x.nc")])
    assert r.exit_code == 2, r.output
    assert "is full" in r.output and "fix:" in r.output
    assert list(tmp_path.iterdir()) == []


def test_an_os_error_of_a_write_outside_atomic_writes_is_one_line(tmp_path, monkeypatch):
    """A folder made by the command itself (mkdir) on a full disk: the entry point turns the OS
    error into the same one line and exit 1."""
    import headspec.apps.cli as cli

    def boom(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "R" / "data"))

    monkeypatch.setattr(cli, "app", boom)
    monkeypatch.setattr(sys, "argv", ["headspec", "--help"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 1


def test_reproduce_refuses_a_folder_another_reproduce_is_writing(tmp_path):
    """Two `reproduce --out same` at once: the second is refused (the folder lock of sweeps)."""
    from headspec.apps.sweep import SweepError
    from headspec.apps.sweep.manifest import folder_lock

    with folder_lock(tmp_path, "headspec reproduce or study"):
        with pytest.raises(SweepError, match="another headspec reproduce or study is running"):
            with folder_lock(tmp_path, "headspec reproduce or study"):
                raise AssertionError("a second lock of the same folder was taken")


@pytest.mark.slow  # needs root to mount a tmpfs; a few seconds
def test_simulate_on_a_real_full_tmpfs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:  # fmt: skip
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        cmd = [sys.executable, "-m", "headspec.apps.cli", "simulate", "--D", "50", "--T", "0.1",
               "--H", "2", "--engine", "reduced", "-o", str(mnt / "x.nc")]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert r.returncode == 2, r.stderr
        assert "is full" in r.stderr and "Traceback" not in r.stderr
        assert list(mnt.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize("command", ["prune", "saddles"])
def test_a_diverged_seed_has_no_trained_state_to_analyse(command, tmp_path):
    """prune and saddles of a seed that diverged: one line naming the time and a seed that did
    not, exit 3, nothing written (before: NaN tables with exit 0, or empty tables)."""
    from results import write_result

    write_result(tmp_path / "div.nc", "simulation", failed=[0])
    args = [command, str(tmp_path / "div.nc")] if command == "prune" else [
        command, "--from", str(tmp_path / "div.nc"), "-o", str(tmp_path / "s.nc")]  # fmt: skip
    r = runner.invoke(app, args)
    text = " ".join(r.output.split())
    assert r.exit_code == 3, (text, r.exception)
    assert "seed 0" in text and "diverged at t = 0.5" in text and "--seed 1" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["div.nc"]


def test_a_scheduler_without_workers_is_refused_not_waited_on(monkeypatch):
    """A Dask scheduler with no workers: tasks sent to it would wait for ever, silently. The
    client waits WORKER_WAIT seconds for a first worker, then one line naming the fix."""
    from distributed import LocalCluster

    from headspec.apps.sweep import SweepError, cluster

    monkeypatch.setattr(cluster, "WORKER_WAIT", 1.0)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as lc:
        with pytest.raises(SweepError, match=r"has no workers.*fix: start some"):
            with cluster.dask_client(lc.scheduler_address, timeout=1.0):
                raise AssertionError("a client of a scheduler without workers was handed out")


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda ds: ds.risk.values.__setitem__((0, 1), -0.2), "'risk' is negative"),
        (lambda ds: ds.risk_se.values.__setitem__((1, 2), -1e-3), "'risk_se' is negative"),
        (lambda ds: ds.cos.values.__setitem__((0, 1, 0, 0), 7.0), "'cos' is beyond ±1"),
        (lambda ds: ds.fail_t.values.__setitem__(1, 0.3), "but is not marked failed"),
        (lambda ds: ds.M.values.__setitem__((0, 2), 0.1), "has finite overlaps after it"),
    ],
    ids=["negative-risk", "negative-se", "cos-7", "time-without-mark", "finite-after-failure"],
)
def test_a_result_edited_to_impossible_values_is_refused(edit, words, tmp_path):
    """Numbers no run can produce are refused when read (exit 2 in every command), naming the
    variable (issue 51: they were read with exit 0)."""
    from headspec.conventions import results
    from results import write_result, write_unchecked

    write_result(tmp_path / "r.nc", "simulation", failed=[0])
    ds = xr.load_dataset(tmp_path / "r.nc", engine="h5netcdf")
    edit(ds)
    write_unchecked(ds, tmp_path / "edited.nc")
    results.load(tmp_path / "r.nc")  # the file as written is fine
    with pytest.raises(results.ResultError, match="numbers no run can produce") as e:
        results.load(tmp_path / "edited.nc")
    assert words in str(e.value)


FULL_DISK_COMMANDS = {  # every command that writes, with its output in {tmp}
    "simulate": ["simulate", "-o", "{tmp}/x.nc"],
    "theory": ["theory", "-o", "{tmp}/x.nc"],
    "bayes": ["bayes", "--json", "{tmp}/x.json"],
    "saddles": ["saddles", "-o", "{tmp}/x.nc"],
    "prune": ["prune", "{in}", "--out-dir", "{tmp}/figs"],
    "plot": ["plot", "{in}", "--out-dir", "{tmp}/figs"],
    "reproduce": ["reproduce", "--only", "E4", "--scale", "smoke", "-o", "{tmp}/R"],
    "study": ["study", "finite_size", "--scale", "smoke", "-o", "{tmp}/R"],
}


@pytest.mark.parametrize("name", sorted(FULL_DISK_COMMANDS))
def test_every_command_refuses_a_full_disk_before_any_work(name, tmp_path, monkeypatch):
    """Less than 1 MiB free where a command would write: exit 2 before any computation, one
    line naming the path and the fix, nothing made (the disk is probed, not filled)."""
    import headspec.apps.experiments as experiments
    import headspec.conventions.runs as runs
    import headspec.conventions.saddles as saddles_mod
    from results import write_result

    src = tmp_path / "in"
    src.mkdir()
    write_result(src / "sim.nc", "simulation")
    out = tmp_path / "out"
    out.mkdir()
    for module, fn in ((runs, "simulate"), (runs, "solve"), (runs, "run_bayes"),
                       (runs, "prune_result"), (saddles_mod, "find_saddles"),
                       (experiments, "reproduce")):  # fmt: skip
        monkeypatch.setattr(module, fn, lambda *a, **k: pytest.fail("computed"))
    monkeypatch.setattr(disk, "free_bytes", lambda folder: 1000)
    args = [a.replace("{tmp}", str(out)).replace("{in}", str(src / "sim.nc"))
            for a in FULL_DISK_COMMANDS[name]]  # fmt: skip
    r = runner.invoke(app, args)
    text = " ".join(r.output.split())
    assert r.exit_code == 2, (text, r.exception)
    assert "is full" in text and "fix:" in text and "Traceback" not in text
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [["reproduce", "--out", ""], ["simulate", "-o="], ["bayes", "--json", " "],
     ["prune", "r.nc", "--out-dir", ""], ["saddles", "--from", ""]],
)  # fmt: skip
def test_an_empty_path_option_is_refused(argv, tmp_path, monkeypatch, capsys):
    """`--out ''` was read as the current folder (and written into); now exit 2, naming it."""
    import headspec.apps.cli as cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["headspec", *argv])
    with pytest.raises(SystemExit) as e:
        cli.main()
    assert e.value.code == 2
    assert "is empty; fix:" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # ~1 min: the ODE at η = 10⁶ (issue 51: it sat at t = 0 for hours)
def test_theory_at_a_huge_learning_rate_ends_with_its_warnings(tmp_path):
    """The keys grow beyond the exact quadrature's reach within the first grid step; the drift is
    then sampled (cheap), so the run ends, says where it left the reach and that it learned
    nothing, and writes its result."""
    out = tmp_path / "t.nc"
    cmd = [sys.executable, "-m", "headspec.apps.cli", "theory", "--H", "2", "--T", "1", "--lr",
           "1e6", "--set", "seeds=1", "-o", str(out)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    text = " ".join(r.stderr.split())
    assert r.returncode in (0, 3), text
    assert "beyond the exact quadrature's reach" in text and "Traceback" not in text
    assert out.is_file()
