import os

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
