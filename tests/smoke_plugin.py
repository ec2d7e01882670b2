"""The smoke reproduction of every recipe, once per test session, as a pytest plugin (registered
by tests/conftest.py): a child process runs ``reproduce(scale="smoke")`` beside the suite, the
tests that read it (fixture ``smoke_report``) run last, and pytest-xdist hands them out as one
last group."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# ------------------------------------------------ every recipe at its smoke scale, once
# `reproduce(scale="smoke")` runs in a child process started when the first process of the
# session (the only one, or the first pytest-xdist worker) finds a selected test that asks for
# `smoke_report`, beside the rest of the suite at a lower priority (nice 10): the recipes' few
# hundred JIT compiles stay out of the test processes and use the CPU the tests leave idle. The
# tests that use it run last (pytest_collection_modifyitems) and read the report back from its
# files (outcomes.json, configs/, data/, figures/). The child's folder is shared by every
# worker (HEADSPEC_TEST_SMOKE, set by the controlling process before workers start); it is
# removed after a session that passed, kept (and named) after one that failed.
SMOKE_FIXTURE = "smoke_report"
# The child reads and writes the session's compilation cache like the test processes (the Python
# API leaves JAX's cache off; only the command line turns it on): without it every rerun of the
# suite compiled the recipes' ~500 programs again (E3 alone: 178 programs, 66 of its 150 s).
SMOKE_CHILD = (
    "import sys; from headspec.conventions.provenance import enable_compilation_cache; "
    "enable_compilation_cache(); "
    "from headspec.apps.experiments import reproduce; "
    "from headspec.core.compiles import collect_less; collect_less(); "
    "outs = reproduce(scale='smoke', outdir=sys.argv[1], log=lambda s: print(s, flush=True)); "
    "sys.exit(0 if all(o.error is None for o in outs) else 3)"
)
# The shell writes the child's exit status to `rc` even when the child dies of a signal.
SMOKE_SHELL = (
    'nice -n 10 "$0" -c "$1" "$2/report" > "$2/log" 2>&1; echo $? > "$2/rc.part"; '
    'mv "$2/rc.part" "$2/rc"'
)
# made (and removed) by the controlling process; xdist workers inherit it. A folder given in
# HEADSPEC_TEST_SMOKE is the caller's: read (a report already in it is used), never removed.
_SMOKE_OWNED = "HEADSPEC_TEST_SMOKE" not in os.environ
if _SMOKE_OWNED:
    os.environ["HEADSPEC_TEST_SMOKE"] = tempfile.mkdtemp(prefix="headspec_smoke_report_")


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def _smoke_folder() -> Path:
    return Path(os.environ["HEADSPEC_TEST_SMOKE"])


def _wants_smoke(items) -> bool:
    return any(SMOKE_FIXTURE in getattr(i, "fixturenames", ()) for i in items)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """The tests that read the smoke reproduction go last (in this order pytest-xdist workers
    report their collection) and are listed for the xdist scheduler below."""
    items.sort(key=lambda i: SMOKE_FIXTURE in getattr(i, "fixturenames", ()))  # stable: last
    smoke = [i.nodeid for i in items if SMOKE_FIXTURE in getattr(i, "fixturenames", ())]
    if smoke and _is_worker(config):
        tmp = _smoke_folder() / f"ids.{os.getpid()}"
        tmp.write_text("\n".join(smoke))
        os.replace(tmp, _smoke_folder() / "ids")  # every worker writes the same list


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Whole files per worker (module fixtures computed once), except that the tests reading the
    smoke reproduction form one last group of their own: a worker takes them only when every
    other file has been handed out, instead of waiting for the child while work is left."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SmokeLast(LoadFileScheduling):
        _smoke: set | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._smoke is None:
                ids = _smoke_folder() / "ids"
                self._smoke = set(ids.read_text().split("\n")) if ids.exists() else set()
            return "~smoke" if nodeid in self._smoke else super()._split_scope(nodeid)

    return SmokeLast(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """Start the smoke reproduction (once per session) if a selected test reads it."""
    if not _wants_smoke(session.items):
        return
    folder = _smoke_folder()
    try:  # the first process to get here starts the child; the others read its files
        os.close(os.open(folder / "started", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    import subprocess
    import sys

    proc = subprocess.Popen(
        ["sh", "-c", SMOKE_SHELL, sys.executable, SMOKE_CHILD, str(folder)],
        stdin=subprocess.DEVNULL, env={**os.environ, "MPLBACKEND": "Agg"},
        start_new_session=True,  # its own process group: pytest_sessionfinish stops it whole
    )  # fmt: skip
    (folder / "pgid").write_text(str(proc.pid))


def pytest_sessionfinish(session, exitstatus):
    folder = _smoke_folder()
    if _is_worker(session.config) or not _SMOKE_OWNED or not folder.exists():
        return
    pgid = folder / "pgid"
    if pgid.exists() and not (folder / "rc").exists():
        import contextlib
        import signal

        with contextlib.suppress(ProcessLookupError, ValueError):  # already gone
            os.killpg(int(pgid.read_text()), signal.SIGKILL)
    if exitstatus == 0 or not pgid.exists():
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def smoke_report():
    """(report folder, {experiment id: Outcome}) of every recipe at its smoke scale."""
    import time

    from headspec.apps.experiments.report import read_outcomes

    folder = _smoke_folder()
    if not (folder / "started").exists():
        pytest.fail("the smoke reproduction was not started (see tests/smoke_plugin.py)")
    deadline = time.monotonic() + 1800
    while not (folder / "rc").exists():
        if time.monotonic() > deadline:
            pytest.fail(f"the smoke reproduction in {folder} ran past 30 min")
        time.sleep(1.0)
    rc = int((folder / "rc").read_text())
    report = folder / "report"
    if rc not in (0, 3) or not (report / "outcomes.json").exists():
        log = (folder / "log").read_text() if (folder / "log").exists() else ""
        pytest.fail(f"the smoke reproduction in {report} failed (exit {rc}):\n{log[-4000:]}")
    return report, {o.id: o for o in read_outcomes(report)}
