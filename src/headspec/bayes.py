"""Transitional alias (architecture redesign in progress)."""
# ruff: noqa: F401, F403
from headspec.conventions.runs import run_bayes
from headspec.core.stats import MCEstimate
from headspec.dynamics.bayes import *
