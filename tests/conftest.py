import os
from pathlib import Path

import jax
import pytest

# The CLI and the sweep workers keep JAX's compiled programs on disk; the tests do not: a test
# process reading back an entry of that persistent cache crashed (segmentation fault in
# jax/_src/compilation_cache.py) twice on 2026-11-30, once with the user's cache and once with a
# fresh folder of the session's own, in doctests after the CLI tests. Under investigation; the
# tests run without it (in-memory compilation caching is unaffected).
os.environ.setdefault("HEADSPEC_JAX_CACHE", "off")

# The tests call low-level functions directly, outside headspec's float64 entry points: run the
# whole test process in JAX's 64-bit mode (the test process's choice; headspec itself does not
# change it — tests/test_reference.py checks that in a fresh process).
jax.config.update("jax_enable_x64", True)


@pytest.fixture
def key():
    return jax.random.key(12345)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test module. One process compiling the whole
    suite's programs (the recipe smoke tests add hundreds) died late in fresh-clone runs with a
    segmentation fault inside XLA's compile or executable load — consistent with running out of
    memory mappings for JIT code; released programs give theirs back."""
    yield
    jax.clear_caches()


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


def pytest_collection_modifyitems(session, config, items):
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
    if "log" in _smoke:
        _smoke["log"].close()
        import shutil

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
