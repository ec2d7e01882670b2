"""The conventions of research software (issue 29), checked so they cannot drift apart: LICENSE
is the MIT text pyproject.toml declares, CITATION.cff is valid Citation File Format 1.2.0 with the
package's version and the paper it implements, CHANGELOG.md has the version's section, the version
is written in one place (src/headspec/_version.py), and `headspec --version` prints it with the
git commit of the checkout it runs from.

The wheel's metadata version and `headspec --version` outside a checkout: tests/test_packaging.py.
"""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml  # PyYAML: a dependency of dask, itself a dependency of headspec
from typer.testing import CliRunner

import headspec
from headspec.apps.cli import app
from headspec.conventions import provenance

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
CHANGELOG = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+[^\]]*)\] - (\d{4}-\d{2}-\d{2})$", re.M)


def citation() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))


# ============================================================================ LICENSE
def test_license_is_the_mit_text_pyproject_declares():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n\nCopyright (c) 2026 the headspec developers\n")
    assert "Permission is hereby granted, free of charge" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in text
    assert PROJECT["project"]["license"] == {"text": "MIT"}


# ============================================================================ CITATION.cff
def test_citation_cff_has_the_required_keys_and_the_package_version():
    cff = citation()
    # the keys CFF 1.2.0 requires, and the software's own
    assert cff["cff-version"] == "1.2.0"
    assert {"message", "title", "authors"} <= set(cff)
    assert cff["title"] == "headspec" and cff["type"] == "software"
    assert cff["version"] == headspec.__version__
    assert cff["license"] == "MIT"
    # a date as a string (a YAML date would be an object, not the string the schema asks for)
    assert isinstance(cff["date-released"], str)
    datetime.date.fromisoformat(cff["date-released"])
    # every author is a person (family-names) or an entity (name)
    assert cff["authors"] == [{"name": "the headspec developers"}]
    for ref in cff["references"]:
        assert ref["authors"] and all("family-names" in a or "name" in a for a in ref["authors"])


def test_citation_cff_cites_the_paper_beside_the_software():
    """The paper is a reference, not the preferred citation: who uses the code cites the code
    and the paper, not the paper instead of the code. Its title is the one docs/model.md (the
    SPEC) gives."""
    cff = citation()
    assert "preferred-citation" not in cff
    (paper,) = [r for r in cff["references"] if r.get("url", "").endswith("2603.03993")]
    assert paper["type"] == "article" and paper["year"] == 2026
    assert [a["family-names"] for a in paper["authors"]] == ["Sagitova", "Duranthon", "Zdeborová"]
    assert {"type": "other", "value": "arXiv:2603.03993"}.items() <= paper["identifiers"][0].items()
    model = " ".join((ROOT / "docs" / "model.md").read_text(encoding="utf-8").split())
    assert f'"{paper["title"]}", arXiv:2603.03993' in model


# ============================================================================ CHANGELOG.md
def test_changelog_has_unreleased_and_this_version_with_the_citation_date():
    """Keep a Changelog: an [Unreleased] section first, then the releases, newest first, each
    `## [X.Y.Z] - YYYY-MM-DD`; the newest is the package's version, dated as CITATION.cff."""
    assert CHANGELOG.startswith("# Changelog\n")
    assert CHANGELOG.index("## [Unreleased]") < RELEASE.search(CHANGELOG).start()
    releases = RELEASE.findall(CHANGELOG)
    assert releases[0] == (headspec.__version__, citation()["date-released"])
    dates = [d for _, d in releases]
    assert dates == sorted(dates, reverse=True)


# ============================================================================ one version
def test_the_version_is_written_once():
    """pyproject.toml takes the version from src/headspec/_version.py (hatchling), and
    headspec.__version__ is that file's string."""
    assert "version" not in PROJECT["project"]
    assert "version" in PROJECT["project"]["dynamic"]
    assert PROJECT["tool"]["hatch"]["version"]["path"] == "src/headspec/_version.py"
    (written,) = re.findall(
        r'^__version__ = "([^"]+)"$',
        (ROOT / "src" / "headspec" / "_version.py").read_text(encoding="utf-8"),
        re.M,
    )
    assert headspec.__version__ == written == provenance.__version__


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()


def test_version_option_prints_the_version_and_the_checkout_commit():
    """In this checkout (a fresh clone in CI): `headspec --version` is the version, the commit of
    `git rev-parse --short HEAD` and +dirty exactly when a tracked file has changes."""
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0, res.output
    line = res.stdout.strip()
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    assert line == f"headspec {headspec.__version__} (git {commit}{'+dirty' * dirty})"
    assert provenance.git_revision() == _git("rev-parse", "HEAD") + "-dirty" * dirty


def test_the_console_entry_point_prints_the_same_line():
    """`headspec --version` through the real entry point (headspec.apps.cli:main) in a process
    of its own, from another folder: the same line, exit 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HEADSPEC_JAX_CACHE": "off"}
    res = subprocess.run(
        [sys.executable, "-c", "from headspec.apps.cli import main; main()", "--version"],
        cwd=ROOT.parent, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == provenance.version_line()
