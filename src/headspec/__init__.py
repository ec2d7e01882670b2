"""headspec: the high-dimensional single-location model of multi-head attention.

Importing headspec switches JAX to 64-bit mode (``jax_enable_x64``): the Bayes risks, the
order-parameter theory and the gradient checks need float64. Every array headspec creates has an
explicit dtype, so float32 runs stay float32 where a config asks for them.

Example:
    >>> import jax
    >>> import headspec as hs
    >>> law = hs.latent.Discrete(atoms=[[2.0, 0.0], [0.0, 2.0]], probs=[0.6, 0.4])
    >>> est = hs.bayes.bayes_risk(jax.random.key(0), law, L=10, n=20_000)
    >>> 0.0 < est.mean < 0.45
    True
"""

import jax

jax.config.update("jax_enable_x64", True)

from headspec import attention, bayes, latent, task  # noqa: E402
from headspec._meta import __version__, run_metadata  # noqa: E402

__all__ = ["__version__", "attention", "bayes", "latent", "run_metadata", "task"]
