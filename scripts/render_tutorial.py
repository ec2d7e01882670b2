"""Render the tutorial's figures for the documentation site.

    python scripts/render_tutorial.py

Runs the code cells of docs/tutorial.md (its ```python blocks) in order, in one namespace, in a
temporary folder — as tests/test_docs.py::test_tutorial_runs does, with the same helpers — then
copies the PNG figures the cells saved into docs/figures/tutorial/, where the tutorial page embeds
them (figures left there from an earlier rendering that the cells no longer save are removed).
Re-run it after changing the tutorial or the plots, and commit the figures:
tests/test_docs.py checks that the page embeds exactly the figures its cells save, and that each
is in docs/figures/tutorial/.

The figures are saved at DPI dots per inch (matplotlib's ``savefig.dpi``), so that each stays
well under 150 kB.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial.md"
FIGURES = ROOT / "docs" / "figures" / "tutorial"  # the page embeds figures/tutorial/NAME.png
DPI = 90

# a fenced block: its language and its body (the same pattern as tests/test_docs.py's FENCE)
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
# a figure a cell saves: `….savefig("NAME.png")`
SAVEFIG = re.compile(r"""\.savefig\(\s*["']([^"'/]+\.png)["']""")


def code_cells(text: str) -> list[str]:
    """The code cells of a jupytext Markdown notebook: the bodies of its ```python blocks, in
    order."""
    return [body for lang, body in FENCE.findall(text) if lang == "python"]


def saved_figures(cell: str) -> list[str]:
    """The file names of the PNG figures a code cell saves (``….savefig("NAME.png")``)."""
    return SAVEFIG.findall(cell)


def run_cells(cells: list[str], source: str = "docs/tutorial.md") -> dict:
    """Run the cells in order, in one namespace, in the current folder; returns the namespace."""
    ns: dict = {"__name__": "__main__"}
    for i, cell in enumerate(cells):
        exec(compile(cell, f"{source}, cell {i}", "exec"), ns)
    return ns


def render(tutorial: Path = TUTORIAL, out: Path = FIGURES, dpi: int = DPI) -> list[Path]:
    """Run the tutorial in a temporary folder and copy the figures it saved into ``out``; returns
    the copied files. Fails if the cells wrote a PNG that no ``savefig("NAME.png")`` names, or
    the reverse (then the page's check could not see it)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["savefig.dpi"] = dpi
    cells = code_cells(tutorial.read_text(encoding="utf-8"))
    names = [name for cell in cells for name in saved_figures(cell)]
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        run_cells(cells, tutorial.name)
        written = sorted(p.name for p in Path(tmp).glob("*.png"))
        if set(written) != set(names):
            raise RuntimeError(f"the cells wrote {written}, their savefig calls name {names}")
        out.mkdir(parents=True, exist_ok=True)
        for stale in out.glob("*.png"):
            if stale.name not in names:
                stale.unlink()
        return [Path(shutil.copy2(Path(tmp) / name, out / name)) for name in names]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args:  # no options: it renders docs/tutorial.md into docs/figures/tutorial/
        print(__doc__, file=sys.stderr)
        return 2
    for path in render():
        print(f"{path.relative_to(ROOT)}  {path.stat().st_size / 1024:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
