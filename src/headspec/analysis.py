"""Transitional alias (architecture redesign in progress): this module lives at headspec.dynamics.analysis."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("headspec.dynamics.analysis")
