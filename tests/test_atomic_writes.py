"""Issue 13, item 11 (files): every file headspec writes is atomic (temporary file beside the
real target, fsync, rename, fsync of the folder), honours the umask like ``open()``, keeps an
existing target's mode, writes through a symlinked path, and survives ``kill -9`` between the
write and the rename without leaving a complete-looking partial file."""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from matplotlib.figure import Figure

from headspec.conventions import io, results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@contextlib.contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def temps(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith(".") and n.endswith(".tmp"))


def small_ds(value: float = 1.0, n: int = 10) -> xr.Dataset:
    return xr.Dataset({"x": ("n", np.full(n, value))}, attrs={"value": value})


def tiny_figure() -> Figure:
    fig = Figure(figsize=(1, 1))
    fig.add_subplot().plot([0, 1], [0, 1])
    return fig


def write_png(p: Path) -> None:
    from headspec.apps.plots import write_figure

    write_figure(tiny_figure(), p, dpi=20)


WRITERS = {
    "json": lambda p: io.write_json_atomic(p, {"a": 1}),
    "text": lambda p: io.write_text_atomic(p, "héllo\n"),
    "netcdf": lambda p: results.save(small_ds(), p),
    "png": write_png,
}
SUFFIX = {"json": ".json", "text": ".md", "netcdf": ".nc", "png": ".png"}


# ----------------------------------------------------------------------------- permissions
@pytest.mark.parametrize("mask", [0o022, 0o027])
@pytest.mark.parametrize("kind", list(WRITERS))
def test_new_file_honours_umask_like_open(tmp_path, kind, mask):
    target = tmp_path / f"out{SUFFIX[kind]}"
    with umask(mask):
        WRITERS[kind](target)
        (tmp_path / "plain").touch()  # what a normal open() makes here: 0o666 & ~umask
    assert mode(target) == mode(tmp_path / "plain") == 0o666 & ~mask  # was 0600 (mkstemp)
    assert temps(tmp_path) == []


def test_existing_target_keeps_its_mode_even_read_only(tmp_path):
    target = tmp_path / "r.json"
    io.write_json_atomic(target, {"v": 1})
    os.chmod(target, 0o640)
    with umask(0o022):
        io.write_json_atomic(target, {"v": 2})
    assert mode(target) == 0o640
    os.chmod(target, 0o444)  # read-only: replaced (the folder is writable), still read-only
    io.write_json_atomic(target, {"v": 3})
    assert mode(target) == 0o444 and '"v": 3' in target.read_text()


# ----------------------------------------------------------------------------- fsync order
def test_fsync_file_then_rename_then_fsync_folder(tmp_path, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        calls.append(("fsync-dir" if stat.S_ISDIR(st.st_mode) else "fsync-file", st.st_ino))
        real_fsync(fd)

    def replace(src, dst, *a, **kw):
        calls.append(("rename", Path(src).name, Path(dst)))
        real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "r.nc"
    results.save(small_ds(), target)
    assert [c[0] for c in calls] == ["fsync-file", "rename", "fsync-dir"]
    assert calls[0][1] == os.stat(target).st_ino  # the file fsync'ed is the one renamed
    assert calls[1][1].startswith(".r.nc.") and calls[1][1].endswith(".tmp")
    assert calls[1][2] == target
    assert calls[2][1] == os.stat(tmp_path).st_ino  # then its folder


# ----------------------------------------------------------------------------- symlinks
@pytest.mark.parametrize("kind", ["json", "netcdf", "png"])
def test_symlinked_output_is_written_through(tmp_path, kind):
    real_dir = tmp_path / "store"
    real_dir.mkdir()
    real = real_dir / f"real{SUFFIX[kind]}"
    real.write_bytes(b"old")
    link = tmp_path / f"link{SUFFIX[kind]}"
    link.symlink_to(Path("store") / real.name)  # relative link
    with io.atomic_path(link) as tmp:
        assert tmp.parent == real_dir  # the temporary file is beside the real target
    WRITERS[kind](link)
    assert link.is_symlink() and os.readlink(link) == str(Path("store") / real.name)
    assert real.read_bytes() != b"old" and link.read_bytes() == real.read_bytes()
    if kind == "netcdf":
        with xr.open_dataset(link, engine="h5netcdf") as ds:
            assert ds.attrs["value"] == 1.0
    assert temps(tmp_path) == temps(real_dir) == []


def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "later.json")
    io.write_json_atomic(link, {"a": 1})
    assert link.is_symlink() and (tmp_path / "later.json").read_text().startswith("{")


# ----------------------------------------------------------------------------- failures
def test_failing_writer_leaves_old_file_and_no_temp(tmp_path):
    target = tmp_path / "f.png"
    target.write_bytes(b"previous")

    def half_then_fail(tmp):
        tmp.write_bytes(PNG_MAGIC + b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        io.write_atomic(target, half_then_fail)
    assert target.read_bytes() == b"previous" and temps(tmp_path) == []


def test_png_format_from_suffix_not_from_temp_name(tmp_path):
    from headspec.apps.plots import write_figure

    write_figure(tiny_figure(), tmp_path / "a.png", dpi=20)
    write_figure(tiny_figure(), tmp_path / "b.svg")
    write_figure(tiny_figure(), tmp_path / "noext", "png", dpi=20)
    assert (tmp_path / "a.png").read_bytes().startswith(PNG_MAGIC)
    assert b"<svg" in (tmp_path / "b.svg").read_bytes()[:1000]
    assert (tmp_path / "noext").read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(ValueError, match="fix"):
        write_figure(tiny_figure(), tmp_path / "nosuffix")
    assert not (tmp_path / "nosuffix").exists() and temps(tmp_path) == []


# ----------------------------------------------------------------------------- call sites
@pytest.fixture
def renames(monkeypatch):
    """Destinations of every os.replace: a file written atomically is renamed into place."""
    seen: list[Path] = []
    real_replace = os.replace

    def replace(src, dst, *a, **kw):
        assert Path(src).name.endswith(".tmp")
        seen.append(Path(dst))
        real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", replace)
    return seen


def test_reproduce_report_is_written_atomically(tmp_path, renames, monkeypatch):
    from headspec.apps.experiments import report
    from headspec.apps.experiments.base import Outcome

    monkeypatch.setattr(report, "environment", lambda datadir=None: {"python": "3"})
    outcome = Outcome("E1", "title", configs={"run": {"train": {"T": 1}, "name": "é"}})
    with umask(0o022):
        report.write_report([outcome], tmp_path, "quick", 1.0)
    written = {tmp_path / "index.md", tmp_path / "index.html", tmp_path / "outcomes.json",
               tmp_path / "configs/E1_run.json"}  # fmt: skip
    assert set(renames) == written
    assert all(mode(p) == 0o644 for p in written)
    assert '"é"' in (tmp_path / "configs/E1_run.json").read_text(encoding="utf-8")


def test_every_figure_writer_is_atomic(tmp_path, renames, monkeypatch):
    import headspec.apps.plots as plots
    from headspec.apps.cli.figures import write_figures
    from headspec.apps.experiments.base import Context
    from headspec.apps.sweep.collect import save_figure

    write_figures(tmp_path, "s", [("risk", tiny_figure())], ("png", "svg"))
    ctx = Context("E9", {}, "quick", tmp_path / "exp")
    ctx.figure(tiny_figure(), "fig")
    monkeypatch.setattr(plots, "plot_sweep", lambda ds: tiny_figure())
    save_figure(xr.Dataset(attrs={"sweep_kind": "simulate"}), tmp_path)
    expected = [
        tmp_path / "s_risk.png",
        tmp_path / "s_risk.svg",
        tmp_path / "exp/figures/E9_fig.png",
        tmp_path / "sweep_final_risk.png",
    ]
    assert renames == [Path(os.path.realpath(p)) for p in expected]
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in expected if p.suffix == ".png")


# ----------------------------------------------------------------------------- leftovers
def test_live_writer_temp_is_not_removed_by_another_write(tmp_path):
    target = tmp_path / "t.json"
    with io.atomic_path(target) as tmp:
        tmp.write_text('{"outer": 1}')
        io.write_json_atomic(target, {"inner": 1})  # cleans leftovers: must skip the live one
        assert tmp.exists()
    assert "outer" in target.read_text() and temps(tmp_path) == []


_CHILD = textwrap.dedent(
    """
    import os, sys, threading, time
    import numpy as np, xarray as xr
    from headspec.conventions import results

    flags, targets = sys.argv[1], sys.argv[2:]
    real_replace = os.replace

    def paused_replace(src, dst, *a, **kw):  # the moment between write (+ fsync) and rename
        open(os.path.join(flags, os.path.basename(dst)), "w").close()
        time.sleep(120)
        real_replace(src, dst, *a, **kw)

    os.replace = paused_replace
    ds = xr.Dataset({"x": ("n", np.full(500_000, 2.0))}, attrs={"value": 2.0})  # 4 MB
    threads = [threading.Thread(target=results.save, args=(ds, t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    """
)


def test_kill_between_write_and_rename_leaves_old_or_nothing(tmp_path):
    out = tmp_path / "out"
    flags = tmp_path / "flags"
    out.mkdir()
    flags.mkdir()
    old, new = out / "old.nc", out / "new.nc"
    results.save(small_ds(1.0, 500_000), old)
    before = old.read_bytes()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(flags), str(old), str(new)],
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not ((flags / "old.nc").exists() and (flags / "new.nc").exists()):
            assert child.poll() is None, child.stderr.read().decode()
            assert time.monotonic() < deadline, "the child never reached the rename"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL

    # under the target names: the complete previous version, or nothing
    assert not new.exists()
    assert old.read_bytes() == before
    with xr.open_dataset(old, engine="h5netcdf") as ds:
        assert ds.attrs["value"] == 1.0 and float(ds.x.min()) == 1.0
    # the only other files are hidden, clearly temporary ones holding the whole new content
    left = temps(out)
    assert sorted(os.listdir(out)) == sorted([*left, "old.nc"]) and len(left) == 2
    assert sorted(n.split(".")[1] for n in left) == ["new", "old"]
    assert all(n.split(".")[4] == str(child.pid) for n in left)  # .NAME.HOST.PID.RANDOM.tmp
    for name in left:
        with xr.open_dataset(out / name, engine="h5netcdf") as ds:
            assert ds.attrs["value"] == 2.0 and float(ds.x.min()) == 2.0

    # the next write of each target removes its dead writer's leftover
    results.save(small_ds(3.0), old)
    assert [n for n in temps(out) if n.startswith(".old.nc.")] == []
    results.save(small_ds(3.0), new)
    assert temps(out) == [] and sorted(os.listdir(out)) == ["new.nc", "old.nc"]
