"""Transitional alias (architecture redesign in progress): this module lives at headspec.conventions.provenance."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("headspec.conventions.provenance")
