"""Transitional alias (architecture redesign in progress)."""
# ruff: noqa: F401
from headspec.conventions.build import mc_key
from headspec.conventions.runs import assemble, divergence_message, simulate
from headspec.core.observables import Observation
from headspec.dynamics.engines.full import TestSet, default_n_test, make_test_set, seed_keys
