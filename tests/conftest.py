import os
import tempfile

import jax
import pytest

# JAX's compiled programs, which the CLI and the sweep workers keep on disk, go to a folder of
# this test session's own: never a user's cache that another process may be writing (a torn
# entry read back crashed a test process) nor one left by an older JAX.
os.environ.setdefault("HEADSPEC_JAX_CACHE", tempfile.mkdtemp(prefix="headspec-test-jax-"))

# The tests call low-level functions directly, outside headspec's float64 entry points: run the
# whole test process in JAX's 64-bit mode (the test process's choice; headspec itself does not
# change it — tests/test_reference.py checks that in a fresh process).
jax.config.update("jax_enable_x64", True)


@pytest.fixture
def key():
    return jax.random.key(12345)
