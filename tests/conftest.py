"""Test session set-up: tiers, JAX's settings, one compilation cache for every process, and the
smoke reproduction in a child process.

Tiers (markers, assigned here by file; see docs/tests.md):
- ``unit``: in-process numerics (every test file not listed below): ``pytest -m unit``;
- ``integration``: the command line, docs, sweeps with one worker, reports, the smoke
  reproduction — files in :data:`INTEGRATION`, and the doctests of the Markdown (README, docs/);
- ``slow``: law tests, Dask clusters, packaging, scaling (marked in their files):
  ``pytest -m slow``. The README's ``pytest`` runs unit + integration; .ci/run runs both commands.
"""

import os
import re

# As the command line does (headspec/apps/cli/__init__.py), before equinox is imported: failed
# runtime checks inside compiled programs give NaN instead of a host callback, so every program
# can be written to the persistent compilation cache (the diffusion engine's step was not).
os.environ.setdefault("EQX_ON_ERROR", "nan")

import shutil
import tempfile
from pathlib import Path

import jax
import pytest

# One persistent compilation cache for every test session of this user and every process a
# session starts (command-line subprocesses, the smoke reproduction, Dask workers, pytest-xdist
# workers): a program compiled once is read back by the others, and by the next `pytest` — in
# this checkout or in another clone — so a rerun after a one-line change compiles only the
# programs that change touched (JAX's cache key is the program's HLO, the XLA flags and the
# jax/jaxlib versions, so a changed program never reads a stale entry, whatever checkout wrote
# it). Folder: $XDG_CACHE_HOME/headspec/jax-tests (default ~/.cache/headspec/jax-tests; delete
# it to measure a cold run), apart from the command line's ~/.cache/headspec/jax so that the
# tests' thousands of small entries never evict a user's programs; bounded to CACHE_MAX_BYTES
# with least-recently-used eviction and used with JAX's file lock
# (headspec.conventions.provenance), so processes never read each other's half-written entries.
# (Earlier crashes blamed on this cache were processes running out of memory mappings: see
# release_if_crowded below.) HEADSPEC_JAX_CACHE chooses another folder, or "off". Where the home
# folder cannot be written (a CI runner's read-only home), the checkout's .jax_cache/ (ignored by
# git) serves instead: without any cache every child process — the smoke reproduction, the
# command-line tests, Dask workers — compiles all its programs again, which doubled the suite.
from headspec.conventions.provenance import (
    enable_compilation_cache,
    user_cache_folder,
    writable_folder,
)
from headspec.core.compiles import collect_less, release_if_crowded

if "HEADSPEC_JAX_CACHE" not in os.environ:
    _folder = user_cache_folder("jax-tests")
    if not writable_folder(_folder):
        _folder = Path(__file__).resolve().parents[1] / ".jax_cache"
    os.environ["HEADSPEC_JAX_CACHE"] = str(_folder)

# every program, however quick to compile: the suite compiles thousands of small ones (JAX reads
# the variable in every process the session starts; enable_compilation_cache keeps it)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
enable_compilation_cache()

# The tests call low-level functions directly, outside headspec's float64 entry points: run the
# whole test process in JAX's 64-bit mode (the test process's choice; headspec itself does not
# change it — tests/test_reference.py checks that in a fresh process).
jax.config.update("jax_enable_x64", True)

# Files of the integration tier (and every recipe's file, test_recipe_e<N>*.py, and every Markdown
# doctest file: the README, docs/*.md); every other test not marked slow is a unit test.
INTEGRATION = {
    "test_cli.py", "test_cli_layout.py", "test_cli_simulate.py", "test_docs.py",
    "test_experiments.py", "test_plan.py", "test_late_refusals.py", "test_result_checks.py",
    "test_size_guards.py", "test_atomic_writes.py", "test_interrupts.py", "test_malformed.py",
    "test_packaging.py", "test_paths.py", "test_project_files.py",
    "test_sweep.py",
}  # fmt: skip


# XLA's optimisation level. With the compilation cache warm (every run after the first: the cache
# is per user, shared by clones), what is left of the suite's time is tracing and running the
# programs, so the tests keep XLA's default optimisation: the README's command took 320 s warm
# this way against 367 s with LLVM -O0 (2026-12-02, 2 cores, an hour apart; back to back on
# test_docs, test_saddles and test_sweep: 64 s against 78 s). A cold run is the
# other way round (-O0 compiles ~2.5× faster and runs ~2–3× slower: 736 s cold with -O0, 1154 s
# with the default), so `.ci/run`, which always starts cold, sets HEADSPEC_TEST_XLA_FLAGS to
# FAST_COMPILE for the README's command. HEADSPEC_TEST_XLA_FLAGS (or an XLA_FLAGS of your own)
# is set here before JAX starts its backend (collection imports the test modules, which
# compute) and inherited by every process the session starts.
FAST_COMPILE = "--xla_backend_optimization_level=0"


def pytest_configure(config):
    flags = os.environ.get("HEADSPEC_TEST_XLA_FLAGS", "")
    if "XLA_FLAGS" not in os.environ and flags:
        os.environ["XLA_FLAGS"] = flags
    for name, text in (
        ("unit", "in-process numerics on canonical tiny problems: `pytest -m unit`"),
        ("integration", "command line, docs, sweeps with one worker, reports, smoke reproduction"),
    ):
        config.addinivalue_line("markers", f"{name}: {text}")


def _tier(item) -> str:
    if item.get_closest_marker("slow"):
        return "slow"
    name = Path(str(item.fspath)).name
    recipe = re.match(r"test_recipe_e\d", name) is not None  # a recipe's test: smoke reproduction
    return "integration" if name in INTEGRATION or recipe or name.endswith(".md") else "unit"


@pytest.fixture
def key():
    return jax.random.key(12345)


@pytest.fixture(autouse=True)
def _release_compiled_programs():
    """Drop JAX's compiled programs when the process holds half the memory mappings the system
    allows (each program keeps ~22; a session that compiles ~3000 programs would otherwise crash
    inside XLA, as fresh-clone runs did late in 2026-11). Cheap when there is no pressure."""
    yield
    release_if_crowded(0.5)


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
    """Mark each test with its tier, before ``-m`` selects among them; the tests that read the
    smoke reproduction go last (in this order pytest-xdist workers report their collection) and
    are listed for the xdist scheduler below."""
    for item in items:
        tier = _tier(item)
        if tier != "slow":
            item.add_marker(getattr(pytest.mark, tier))
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
    """Collect cycles less often from here on (every module is imported now: headspec.core.compiles
    .collect_less; its garbage collector took ~6 % of a tracing-heavy process by default), and
    start the smoke reproduction (once per session) if a selected test reads it."""
    collect_less()
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
        pytest.fail("the smoke reproduction was not started (see conftest.py)")
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
