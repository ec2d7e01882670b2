"""Provenance recorded next to every result: package version, git revision, platform."""

from __future__ import annotations

import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    __version__ = version("headspec")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0+unknown"


def git_revision() -> str:
    """The git commit of the headspec source tree (with ``-dirty`` if modified), or ``unknown``."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        )
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_metadata() -> dict[str, str]:
    """Version, git revision and environment of this run, as plain strings (JSON-ready)."""
    import jax

    return {
        "headspec_version": __version__,
        "git_revision": git_revision(),
        "python": platform.python_version(),
        "jax_version": jax.__version__,
        "jax_backend": jax.default_backend(),
        "platform": platform.platform(),
    }
