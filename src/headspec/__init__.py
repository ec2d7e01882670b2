"""headspec: the high-dimensional single-location model of multi-head attention.

Layers (each imports only the ones below it; ``lint-imports`` checks it):
``core`` (laws, task, attention, observables, schedules) → ``dynamics`` (SGD engines, the ODE,
Bayes, pruning, analysis) → ``conventions`` (configs → objects, results schema, time grid, I/O)
→ ``apps`` (command line, experiments and report, sweeps, figures).

The short API for notebooks is imported lazily from here:

- :func:`simulate`, :func:`solve` run a config (``SimulateConfig``, ``TheoryConfig``) and return an
  xarray result; :func:`save` writes one, :func:`load` reads it back; :func:`bayes_risk` estimates
  R_B of a law, :func:`run_bayes` the table of ``headspec bayes`` (``BayesRunConfig``);
- :func:`compare` (simulation vs theory: largest deviations) and :func:`prune_result` (greedy and
  random head removal from a result) are what ``headspec compare`` and ``headspec prune`` print;
- :func:`load_config` builds a config from defaults, a TOML file and ``key.path=value`` overrides.

headspec computes in float64 where it must without switching JAX's 64-bit mode on for the
importing process (see :mod:`headspec.core.precision`); ``headspec.float64()`` is that context.

Example:
    >>> import jax
    >>> import headspec as hs
    >>> law = hs.latent.Discrete(atoms=[[2.0, 0.0], [0.0, 2.0]], probs=[0.6, 0.4])
    >>> est = hs.bayes_risk(jax.random.key(0), law, L=10, n=20_000)
    >>> 0.0 < est.mean < 0.45
    True
    >>> cfg = hs.load_config(hs.SimulateConfig, overrides=["task.D=60", "task.L=4", "model.H=2",
    ...     "train.T=0.5", "seeds=2", "record.points=3", "train.engine='reduced'"])
    >>> ds = hs.simulate(cfg)
    >>> ds.risk.shape, ds.attrs["engine"]
    ((2, 4), 'reduced')
"""

from __future__ import annotations

import importlib

from headspec._version import __version__
from headspec.conventions.provenance import run_metadata

# name → (module, attribute or None for the module itself); imported on first use
_LAZY = {
    "simulate": ("headspec.conventions.runs", "simulate"),
    "solve": ("headspec.conventions.runs", "solve"),
    "load": ("headspec.conventions.results", "load"),
    "save": ("headspec.conventions.results", "save"),
    "bayes_risk": ("headspec.dynamics.bayes", "bayes_risk"),
    "run_bayes": ("headspec.conventions.runs", "run_bayes"),
    "compare": ("headspec.conventions.comparison", "compare"),
    "prune_result": ("headspec.conventions.runs", "prune_result"),
    "load_config": ("headspec.conventions.config", "load_config"),
    "SimulateConfig": ("headspec.conventions.config", "SimulateConfig"),
    "TheoryConfig": ("headspec.conventions.config", "TheoryConfig"),
    "BayesRunConfig": ("headspec.conventions.config", "BayesRunConfig"),
    "float64": ("headspec.core.precision", "float64_context"),
    # the modules, by their short names
    "latent": ("headspec.core.latent", None),
    "task": ("headspec.core.task", None),
    "attention": ("headspec.core.attention", None),
    "observables": ("headspec.core.observables", None),
    "bayes": ("headspec.dynamics.bayes", None),
    "ode": ("headspec.dynamics.ode", None),
    "prune": ("headspec.dynamics.prune", None),
    "analysis": ("headspec.dynamics.analysis", None),
    "results": ("headspec.conventions.results", None),
    "config": ("headspec.conventions.config", None),
}

__all__ = ["__version__", "run_metadata", *_LAZY]


def __getattr__(name: str):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'headspec' has no attribute {name!r}") from None
    mod = importlib.import_module(module)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
