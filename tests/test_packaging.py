"""Installed from a wheel, headspec works outside the repository: the E1–E6 recipes ship inside
the package (importlib.resources), nothing is looked up relative to the source tree or the
working directory, and scipy is a declared dependency."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_dependencies_declared():
    """What the default path imports is a declared dependency (scipy: Sobol samples, Hungarian
    matching; markdown-it-py: the report's HTML)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip() for d in deps}
    assert {"scipy", "markdown-it-py", "jax", "diffrax", "xarray", "h5py"} <= names


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory):
    """The package built as a wheel and unpacked into a folder of its own (no dependencies)."""
    tmp = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip"]
    build = subprocess.run(
        [*pip, "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(ROOT)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if build.returncode != 0:
        pytest.skip(f"could not build the wheel here: {build.stderr[-500:]}")
    (whl,) = (tmp / "dist").glob("headspec-*.whl")
    subprocess.run(
        [*pip, "install", "-q", "--no-deps", "--target", str(tmp / "site"), str(whl)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return tmp / "site"


@pytest.mark.slow  # test tier: packaging (builds and unpacks a wheel, ~14 s)
def test_wheel_carries_the_recipes_and_runs_outside_the_repository(wheel_site, tmp_path):
    code = (
        "import headspec, os, pathlib\n"
        "from headspec.apps.experiments import RECIPES, experiments_dir\n"
        "site = pathlib.Path(os.environ['PYTHONPATH'])\n"
        "assert pathlib.Path(headspec.__file__).is_relative_to(site), headspec.__file__\n"
        "names = {p.name for p in experiments_dir().iterdir()}\n"
        "assert len(RECIPES) >= 7 and {r.file for r in RECIPES.values()} <= names, names\n"
        "from headspec.apps.studies import STUDIES\n"
        "from headspec.apps.experiments.runner import check\n"
        "check(list(STUDIES), 'full')  # the studies' TOMLs ship too, and validate\n"
        "print('ok', len(names))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(wheel_site)}
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("ok")


@pytest.mark.slow  # test tier: packaging (builds and unpacks a wheel, ~14 s)
def test_wheel_metadata_and_version_option_outside_a_checkout(wheel_site, tmp_path):
    """The wheel's metadata version is headspec.__version__ (hatchling reads it from
    src/headspec/_version.py), the wheel carries LICENSE, and its `headspec --version`, run
    outside any git checkout, prints the version alone."""
    import headspec

    (dist_info,) = wheel_site.glob("headspec-*.dist-info")
    meta = (dist_info / "METADATA").read_text(encoding="utf-8")
    (version,) = [ln.split(":", 1)[1].strip() for ln in meta.splitlines()
                  if ln.startswith("Version:")]  # fmt: skip
    assert version == headspec.__version__
    assert "MIT License" in "".join(p.read_text() for p in dist_info.rglob("LICENSE*"))
    env = {**os.environ, "PYTHONPATH": str(wheel_site), "HEADSPEC_JAX_CACHE": "off"}
    res = subprocess.run(
        [sys.executable, "-c", "from headspec.apps.cli import main; main()", "--version"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == f"headspec {headspec.__version__}"


@pytest.mark.slow
def test_pip_install_then_reproduce_e4_from_another_directory(tmp_path):
    """The issue's acceptance: `python -m venv v && v/bin/pip install . && cd /tmp && v/bin/headspec
    reproduce --only E4` (a fresh virtual environment: dependencies from the package index), at
    smoke scale and with the session's compilation cache: the installed copy's programs are the
    checkout's, so it reads back what the smoke reproduction compiled (quick scale with no cache
    took 191 s of CI's slow tier; what this test checks is the installed package, not E4)."""
    venv = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(ROOT)], check=True, timeout=1800
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    res = subprocess.run(
        [str(venv / "bin" / "headspec"), "reproduce", "--only", "E4", "--scale", "smoke",
         "--out", "report"],
        cwd=work, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert (work / "report" / "index.html").is_file()
    assert "E4" in (work / "report" / "index.md").read_text()
