"""Test session set-up: tiers, JAX's settings, one compilation cache for every process; the
smoke reproduction in a child process is the plugin tests/smoke_plugin.py, registered here.

Tiers (markers, assigned here by file, and by fixture for the smoke reproduction; see
docs/tests.md):
- ``unit``: in-process numerics (every test file not listed below): ``pytest -m unit``;
- ``integration``: the command line, docs, sweeps with one worker, reports — files in
  :data:`INTEGRATION`, and the doctests of the Markdown (README, docs/);
- ``slow``: law tests, Dask clusters, packaging, scaling (marked in their files), and every test
  that reads the smoke reproduction of E1–E9 (fixture ``smoke_report``): ``pytest -m slow``.
  The README's ``pytest`` runs unit + integration; .ci/run runs both commands.
"""

import os
import re

# As the command line does (headspec/apps/cli/__init__.py), before equinox is imported: failed
# runtime checks inside compiled programs give NaN instead of a host callback, so every program
# can be written to the persistent compilation cache (the diffusion engine's step was not).
os.environ.setdefault("EQX_ON_ERROR", "nan")

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
    config.pluginmanager.import_plugin("smoke_plugin")  # tests/ is on sys.path, as for helpers
    flags = os.environ.get("HEADSPEC_TEST_XLA_FLAGS", "")
    if "XLA_FLAGS" not in os.environ and flags:
        os.environ["XLA_FLAGS"] = flags
    for name, text in (
        ("unit", "in-process numerics on canonical tiny problems: `pytest -m unit`"),
        ("integration", "command line, docs, sweeps with one worker, reports"),
    ):
        config.addinivalue_line("markers", f"{name}: {text}")


def _tier(item) -> str:
    from smoke_plugin import SMOKE_FIXTURE  # registered by pytest_configure (assertions rewritten)

    # the smoke reproduction of every recipe costs ~340 CPU-s cold (at -O0, 2026-12-07): the
    # README's command took 669 s cold with its 14 tests, 448 s without them; they run in the
    # slow tier (docs/tests.md), and the README's first command runs the recipes themselves
    if item.get_closest_marker("slow") or SMOKE_FIXTURE in getattr(item, "fixturenames", ()):
        return "slow"
    name = Path(str(item.fspath)).name
    recipe = re.match(r"test_recipe_e\d", name) is not None  # a recipe's verdict code
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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Mark each test with its tier, before ``-m`` selects among them."""
    for item in items:
        item.add_marker(getattr(pytest.mark, _tier(item)))  # "slow" again: harmless


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """Collect cycles less often from here on (every module is imported now: headspec.core.compiles
    .collect_less; its garbage collector took ~6 % of a tracing-heavy process by default)."""
    collect_less()
