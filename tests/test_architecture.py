"""The layer contract of docs/architecture.md: core → dynamics → conventions → apps.

`lint-imports` (import-linter, configured in pyproject.toml) enforces that each layer imports only
layers below it; these tests check that the contract holds, that it really catches an upward
import, that no module imports itself back through others (no cycles), and that no module grows
past the size one person can read in one sitting.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "headspec"
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(pythonpath), "HOME": str(cwd)}
    return subprocess.run(
        [str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_layer_contract_holds():
    res = _lint(ROOT, ROOT / "src")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


def test_layer_contract_catches_an_upward_import(tmp_path):
    """A copy of the package with one deliberate upward import (core → apps) is refused."""
    shutil.copytree(
        SRC, tmp_path / "src" / "headspec", ignore=shutil.ignore_patterns("__pycache__")
    )
    latent = tmp_path / "src" / "headspec" / "core" / "latent.py"
    latent.write_text(latent.read_text() + "\nimport headspec.apps.cli  # deliberate: upward\n")
    res = _lint(tmp_path, tmp_path / "src")
    assert res.returncode != 0
    assert "BROKEN" in res.stdout and "headspec.core.latent -> headspec.apps.cli" in res.stdout


def _cycle(graph: grimp.ImportGraph) -> list[str] | None:
    """One import cycle among headspec's modules (any import, function-local ones included)."""
    modules = sorted(graph.modules)
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.find_modules_directly_imported_by(m)):
            if not n.startswith("headspec"):
                continue
            if state.get(n) == 1:
                return [*stack[stack.index(n) :], n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in modules:
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycles():
    graph = grimp.build_graph("headspec", cache_dir=None)
    # a package's __init__ importing its own submodules is not a cycle of concerns: drop those
    for m in list(graph.modules):
        for n in list(graph.find_modules_directly_imported_by(m)):
            if n.startswith(m + ".") or m.startswith(n + "."):
                graph.remove_import(importer=m, imported=n)
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " → ".join(cycle)


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_modules_stay_readable(path):
    """One concern per module: none over 500 lines (docs/architecture.md)."""
    assert len(path.read_text().splitlines()) <= 500


def _registered_runs():
    """Every registered ``run`` of a recipe or a study (decorated ``@recipe`` or ``@study``)."""
    for path in sorted((SRC / "apps").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and getattr(d.func, "id", "") in ("recipe", "study")
                for d in node.decorator_list
            ):
                yield path, node


def test_recipes_and_studies_stay_short():
    """A recipe's or study's ``run`` reads in one screen (≤ 80 lines: helpers carry the rest), and
    a study, a module of apps/studies or a script of studies/, stays ≤ 300 lines (issue 30)."""
    found = list(_registered_runs())
    assert len(found) >= 11, [p.name for p, _ in found]  # E1–E9 and the three studies
    for path, node in found:
        assert node.end_lineno - node.lineno + 1 <= 80, (path.name, node.name)
    for path in [*(SRC / "apps/studies").glob("*.py"), *(ROOT / "studies").glob("*.py")]:
        assert len(path.read_text().splitlines()) <= 300, path.name


def _strings_outside_docstrings(tree: ast.AST):
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node


def test_below_apps_no_message_names_a_command_line_option():
    """core, dynamics and conventions know configs, not the CLI: their messages name settings
    (task.D, prune.n) and the CLI shows its own options beside them (apps.cli.common.with_flags).
    A string such as "(--D)" below apps would be wrong for the Python API and for a command
    without that option."""
    import re

    flag = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")
    found = []
    for layer in ("core", "dynamics", "conventions"):
        for path in sorted((SRC / layer).rglob("*.py")):
            for node in _strings_outside_docstrings(ast.parse(path.read_text())):
                if " " not in node.value:  # one word: an argument of a program (git --short)
                    continue
                hits = [h for h in flag.findall(node.value) if h not in ("-1", "-0")]
                hits = [h for h in hits if not h[1:2].isdigit()]
                if any(h.startswith("--") or re.fullmatch(r"-[A-Za-z]", h) for h in hits):
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value!r}")
    assert not found, "\n".join(found)
