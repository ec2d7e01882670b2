"""Transitional alias (architecture redesign in progress)."""
# ruff: noqa: F401, F403
from headspec.conventions.runs import prune_result
from headspec.dynamics.prune import *
