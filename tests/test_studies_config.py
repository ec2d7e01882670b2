"""The studies set what they vary through config, never by patching library internals."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import headspec as hs
from headspec.conventions import build

ROOT = Path(__file__).resolve().parents[1]


def _assigned_attributes(path: Path) -> list[str]:
    """Targets like ``build.engine = …`` or ``runs.build.drift_base = …``: attributes of a name
    that an import bound (a module, a class or a function of the library), not of a local
    object such as ``ctx.outcome.table``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {(a.asname or a.name).split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import | ast.ImportFrom) for a in node.names}  # fmt: skip
    out = []
    for node in ast.walk(tree):
        for t in node.targets if isinstance(node, ast.Assign) else []:
            root = t
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(t, ast.Attribute) and isinstance(root, ast.Name) and root.id in imported:
                out.append(ast.unparse(t))
    return out


def test_the_check_finds_a_patched_module_attribute(tmp_path):
    path = tmp_path / "s.py"
    path.write_text(
        "from headspec.conventions import build\nimport headspec.conventions.runs\n"
        "build.engine = None\nheadspec.conventions.runs.x = 1\nctx.outcome.t = 2\n"
    )
    assert _assigned_attributes(path) == ["build.engine", "headspec.conventions.runs.x"]


STUDIES = [*(ROOT / "studies").glob("*.py"), *(ROOT / "src/headspec/apps/studies").glob("*.py")]


@pytest.mark.parametrize("path", sorted(STUDIES), ids=lambda p: p.name)
def test_a_study_patches_no_library_attribute(path):
    assert _assigned_attributes(path) == []


def test_the_diffusion_noise_factor_is_config():
    ov = ["train.engine='diffusion'", "task.D=100", "model.H=2", "diffusion.n=64"]
    assert build.engine(hs.load_config(hs.SimulateConfig, overrides=ov)).noise_factor == 1.0
    cfg = hs.load_config(hs.SimulateConfig, overrides=[*ov, "diffusion.noise_factor=1.5"])
    assert build.engine(cfg).noise_factor == 1.5
    with pytest.raises(Exception, match="noise_factor"):
        hs.load_config(hs.SimulateConfig, overrides=[*ov, "diffusion.noise_factor=0"])
