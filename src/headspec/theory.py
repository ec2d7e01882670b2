"""Transitional alias (architecture redesign in progress)."""
# ruff: noqa: F401, F403
from headspec.conventions.runs import solve
from headspec.core.observables import BaseSamples, RiskEstimate, population_risk
from headspec.dynamics.ode import *
from headspec.dynamics.ode import OrderParameters as State
