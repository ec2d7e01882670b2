"""Test session set-up: tiers, JAX's settings, one compilation cache for every process, and the
smoke reproduction in a child process.

Tiers (markers, assigned here by file; see README "Tests"):
- ``unit``: in-process numerics (every test file not listed below): ``pytest -m unit``;
- ``integration``: the command line, docs, sweeps with one worker, reports, the smoke
  reproduction — files in :data:`INTEGRATION`;
- ``slow``: law tests, Dask clusters, packaging, scaling (marked in their files):
  ``pytest -m slow``. The README's ``pytest`` runs unit + integration; .ci/run runs both commands.
"""

import os
import shutil
import tempfile
from pathlib import Path

import jax
import pytest

from headspec.core.compiles import release_if_crowded

# One persistent compilation cache for the session and every process it starts (command-line
# subprocesses, the smoke reproduction, Dask workers): a program compiled by one of them is read
# back by the others. JAX's cache is used with its file lock (headspec.conventions.provenance),
# so processes never read each other's half-written entries. (Earlier crashes blamed on this
# cache were processes running out of memory mappings: see release_if_crowded below.)
if "HEADSPEC_JAX_CACHE" not in os.environ:
    _CACHE = Path(tempfile.mkdtemp(prefix="headspec_test_jax_cache_"))
    os.environ["HEADSPEC_JAX_CACHE"] = str(_CACHE)
else:
    _CACHE = None

from headspec.conventions.provenance import enable_compilation_cache

enable_compilation_cache()

# The tests call low-level functions directly, outside headspec's float64 entry points: run the
# whole test process in JAX's 64-bit mode (the test process's choice; headspec itself does not
# change it — tests/test_reference.py checks that in a fresh process).
jax.config.update("jax_enable_x64", True)

# Files of the integration tier; every other test not marked slow is a unit test.
INTEGRATION = {
    "README.md", "test_cli.py", "test_cli_polish.py", "test_cli_simulate.py", "test_docs.py",
    "test_experiments.py", "test_hardening.py", "test_hardening_files.py",
    "test_hardening_guards.py", "test_hardening_io.py", "test_malformed.py", "test_packaging.py",
    "test_recipe_e1_e2.py", "test_recipe_e3_e5.py", "test_recipe_e6.py", "test_recipe_e7.py",
    "test_sweep.py",
}  # fmt: skip


# The unit and integration tiers compile thousands of small programs and run each briefly, so
# they ask XLA for less optimisation (LLVM -O0: compiles ~2.5× faster, runs ~2–3× slower,
# measured on this project's 2-core machine); the slow tier, whose law tests run long, keeps
# XLA's default. Set here before JAX starts its backend (collection imports the test modules,
# which compute); inherited by every process the session starts. HEADSPEC_TEST_XLA_FLAGS or an
# XLA_FLAGS of your own replaces it.
FAST_COMPILE = "--xla_backend_optimization_level=0"


def _selects_slow(config) -> bool:
    expr = (config.getoption("markexpr") or "").replace("not slow", "")
    return "slow" in expr or "exhaustive" in expr.replace("not exhaustive", "")


def pytest_configure(config):
    if "XLA_FLAGS" not in os.environ:
        flags = os.environ.get("HEADSPEC_TEST_XLA_FLAGS")
        if flags is None:
            flags = "" if _selects_slow(config) else FAST_COMPILE
        if flags:
            os.environ["XLA_FLAGS"] = flags
    for name, text in (
        ("unit", "in-process numerics on canonical tiny problems: `pytest -m unit`"),
        ("integration", "command line, docs, sweeps with one worker, reports, smoke reproduction"),
    ):
        config.addinivalue_line("markers", f"{name}: {text}")


def _tier(item) -> str:
    if item.get_closest_marker("slow"):
        return "slow"
    return "integration" if Path(str(item.fspath)).name in INTEGRATION else "unit"


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
# `reproduce(scale="smoke")` runs in a child process started when the session starts (if any
# selected test asks for `smoke_report`), beside the rest of the suite at a lower priority
# (nice 10; nice 19 with one XLA thread measured slower, 903 s against 863 s for the suite): the
# serial suite leaves part of the two CI cores idle, and the recipes' few hundred JIT compiles
# stay out of the test process. The tests that use it run last (pytest_collection_modifyitems)
# and read the report back from its files (outcomes.json, configs/, data/, figures/); the
# folder is removed after a session that passed, kept (and named) after one that failed.
SMOKE_FIXTURE = "smoke_report"
SMOKE_CHILD = (
    "import sys; from headspec.apps.experiments import reproduce; "
    "outs = reproduce(scale='smoke', outdir=sys.argv[1], log=lambda s: print(s, flush=True)); "
    "sys.exit(0 if all(o.error is None for o in outs) else 3)"
)
_smoke: dict = {}


def _wants_smoke(items) -> bool:
    return any(SMOKE_FIXTURE in getattr(i, "fixturenames", ()) for i in items)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Mark each test with its tier, before ``-m`` selects among them."""
    for item in items:
        tier = _tier(item)
        if tier != "slow":
            item.add_marker(getattr(pytest.mark, tier))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """Start the smoke reproduction if a selected test reads it; those tests run last."""
    items = session.items
    if not _wants_smoke(items):
        return
    items.sort(key=lambda i: SMOKE_FIXTURE in getattr(i, "fixturenames", ()))  # stable: last
    import subprocess
    import sys
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="headspec_smoke_report_"))
    log = open(folder.parent / f"{folder.name}.log", "w")  # closed in pytest_sessionfinish
    env = {**os.environ, "MPLBACKEND": "Agg"}
    _smoke.update(
        folder=folder, log=log,
        proc=subprocess.Popen(
            ["nice", "-n", "10", sys.executable, "-c", SMOKE_CHILD, str(folder / "report")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
        ),
    )  # fmt: skip


def pytest_sessionfinish(session, exitstatus):
    proc = _smoke.get("proc")
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
    if _CACHE is not None:
        shutil.rmtree(_CACHE, ignore_errors=True)
    if "log" in _smoke:
        _smoke["log"].close()
        if exitstatus == 0:
            shutil.rmtree(_smoke["folder"], ignore_errors=True)
            Path(_smoke["log"].name).unlink(missing_ok=True)


@pytest.fixture(scope="session")
def smoke_report():
    """(report folder, {experiment id: Outcome}) of every recipe at its smoke scale."""
    from headspec.apps.experiments.report import read_outcomes

    if "proc" not in _smoke:
        pytest.fail("the smoke reproduction was not started (see conftest.py)")
    proc = _smoke["proc"]
    try:
        rc = proc.wait(timeout=1800)
    except Exception:
        proc.kill()
        raise
    _smoke["log"].flush()
    log = Path(_smoke["log"].name).read_text()
    folder = _smoke["folder"] / "report"
    if rc not in (0, 3) or not (folder / "outcomes.json").exists():
        pytest.fail(f"the smoke reproduction in {folder} failed (exit {rc}):\n{log[-4000:]}")
    return folder, {o.id: o for o in read_outcomes(folder)}
