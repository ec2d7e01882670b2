"""Float64 where headspec needs it, without touching the importing process's JAX settings.

Bayes risks, the order-parameter theory and the gradient checks need float64, which JAX gives
only in its 64-bit mode. headspec does not switch that mode on for the whole process (a user's
other JAX code would change behaviour); instead its entry points run inside
``jax.enable_x64(True)``, a thread-local context, through the :func:`float64` decorator. Every
array headspec makes has an explicit dtype, so float32 simulations stay float32.

Lower-level functions called directly from user code outside such a call should be wrapped the
same way: ``with headspec.float64(): ...`` (or turn on ``jax_enable_x64`` yourself).

Example:
    >>> import jax, jax.numpy as jnp
    >>> @float64
    ... def f():
    ...     return jnp.ones(2, jnp.float64).dtype
    >>> str(f())
    'float64'
"""

from __future__ import annotations

import functools

import jax


def float64_context():
    """A context in which JAX computes in 64-bit mode (thread-local; nests)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # JAX before 0.6 kept it there

    return enable_x64(True)


def float64(fn):
    """Run ``fn`` in JAX's 64-bit mode (see the module docstring)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with float64_context():
            return fn(*args, **kwargs)

    return wrapper
