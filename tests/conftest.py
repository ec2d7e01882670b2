import jax
import pytest

import headspec  # noqa: F401  (enables float64)


@pytest.fixture
def key():
    return jax.random.key(12345)
