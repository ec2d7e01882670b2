"""Provenance recorded next to every result: package version, git revision, platform."""

from __future__ import annotations

import os
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


def enable_compilation_cache() -> None:
    """Keep JAX's compiled programs on disk, so a repeated command skips most compile time.

    Folder: $HEADSPEC_JAX_CACHE, else ~/.cache/headspec/jax; HEADSPEC_JAX_CACHE=off disables it.
    Used by the CLI and by every sweep worker.
    """
    import jax

    folder = os.environ.get("HEADSPEC_JAX_CACHE", str(Path.home() / ".cache/headspec/jax"))
    if folder.lower() in ("", "0", "off", "none"):
        return
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", folder)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    except OSError:  # read-only home: run without the cache
        pass
