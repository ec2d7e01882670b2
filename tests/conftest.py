import jax
import pytest

# The tests call low-level functions directly, outside headspec's float64 entry points: run the
# whole test process in JAX's 64-bit mode (the test process's choice; headspec itself does not
# change it — tests/test_reference.py checks that in a fresh process).
jax.config.update("jax_enable_x64", True)


@pytest.fixture
def key():
    return jax.random.key(12345)
