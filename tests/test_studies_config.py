"""The studies set what they vary through config, never by patching library internals."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import headspec as hs
from headspec.conventions import build

ROOT = Path(__file__).resolve().parents[1]


def _assigned_attributes(path: Path) -> list[str]:
    """Targets like ``build.engine = …`` or ``runs.build.drift_base = …`` (module attributes)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = node.targets if isinstance(node, ast.Assign) else []
        out += [ast.unparse(t) for t in targets if isinstance(t, ast.Attribute)]
    return out


@pytest.mark.parametrize("path", sorted((ROOT / "studies").glob("*.py")), ids=lambda p: p.name)
def test_a_study_patches_no_library_attribute(path):
    assert _assigned_attributes(path) == []


def test_the_diffusion_noise_factor_is_config():
    ov = ["train.engine='diffusion'", "task.D=100", "model.H=2", "diffusion.n=64"]
    assert build.engine(hs.load_config(hs.SimulateConfig, overrides=ov)).noise_factor == 1.0
    cfg = hs.load_config(hs.SimulateConfig, overrides=[*ov, "diffusion.noise_factor=1.5"])
    assert build.engine(cfg).noise_factor == 1.5
    with pytest.raises(Exception, match="noise_factor"):
        hs.load_config(hs.SimulateConfig, overrides=[*ov, "diffusion.noise_factor=0"])
