"""Render a reproduction report in headless Chromium at 1400 × 900 px and check what a reader
sees first (issue 30): the verdicts of E1–E3 on the first screen, and no table cell taller than
three lines (claims' measures and reasons are folded under ``<details>``).

Run:  python scripts/check_report_screen.py [REPORT_FOLDER] [--screenshot first.png]
      (default folder: docs/gallery; needs Chromium: ``apt-get install chromium``)

The page is measured by a probe script appended to a temporary copy of index.html: for every
table cell, its table, row, column header, text, top, bottom and number of lines (the distinct
line boxes of its text); Chromium prints the DOM after the script ran (``--dump-dom``), at the
window size given. Exit status 0 when both checks hold, 1 otherwise (each failure printed), 2
without Chromium.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH, HEIGHT = 1400, 900
MAX_LINES = 3
FIRST_SCREEN = ("E1", "E2", "E3")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars")  # fmt: skip

PROBE = """<script>
window.addEventListener('load', () => {
  const cells = [];
  document.querySelectorAll('table').forEach((table, ti) => {
    const head = [...table.querySelectorAll('th')].map(th => th.textContent.trim());
    table.querySelectorAll('tbody tr').forEach((tr, ri) => {
      [...tr.children].forEach((td, ci) => {
        // the cell's own text (a cell stretches to its row's height): its line boxes
        const r = td.getBoundingClientRect(), range = document.createRange();
        range.selectNodeContents(td);
        const tops = new Set([...range.getClientRects()].map(q => Math.round(q.top)));
        cells.push({table: ti, row: ri, col: head[ci] || String(ci),
                    text: td.textContent.trim().slice(0, 80), top: r.top + window.scrollY,
                    bottom: r.bottom + window.scrollY, lines: tops.size});
      });
    });
  });
  const pre = document.createElement('pre');
  pre.id = 'headspec-probe';
  pre.textContent = JSON.stringify(cells);
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str | None:
    """The Chromium executable, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


def measure(html: Path, browser: str, screenshot: Path | None = None) -> list[dict]:
    """The probe's cells of ``html`` rendered at WIDTH × HEIGHT (and a screenshot if asked)."""
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "index.html"
        page.write_text(html.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"))
        for item in html.parent.iterdir():  # figures/, configs/: relative links keep working
            if item.name != "index.html":
                (Path(tmp) / item.name).symlink_to(item.resolve())
        common = [browser, *FLAGS, f"--user-data-dir={tmp}/profile",
                  f"--window-size={WIDTH},{HEIGHT}"]  # fmt: skip
        out = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True,
                             text=True, timeout=120, check=True).stdout  # fmt: skip
        if screenshot is not None:
            subprocess.run([*common, f"--screenshot={screenshot.resolve()}", html.as_uri()],
                           capture_output=True, timeout=120, check=True)  # fmt: skip
    m = re.search(r'<pre id="headspec-probe">(.*?)</pre>', out, re.S)
    if m is None:
        raise RuntimeError("the probe wrote nothing: did the page load?")
    import html as html_lib

    return json.loads(html_lib.unescape(m.group(1)))


def check(cells: list[dict]) -> list[str]:
    """The failures of the two checks (empty: both hold)."""
    problems = []
    verdicts = [c for c in cells if c["table"] == 0 and c["col"] == "verdict"]
    exps = {(c["row"]): c["text"] for c in cells if c["table"] == 0 and c["col"] == "exp."}
    for c in verdicts:
        if exps.get(c["row"]) in FIRST_SCREEN and c["bottom"] > HEIGHT:
            problems.append(
                f"{exps[c['row']]} verdict of claims-table row {c['row'] + 1} ends at "
                f"y = {c['bottom']:.0f} px, below the first screen ({HEIGHT} px)"
            )
    if not verdicts:
        problems.append("no claims table with a 'verdict' column found")
    for c in cells:
        if c["lines"] > MAX_LINES:
            problems.append(f"table {c['table'] + 1}, row {c['row'] + 1}, column {c['col']!r}: "
                            f"{c['lines']} lines ({c['text']!r}…)")  # fmt: skip
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", default="docs/gallery", type=Path)
    ap.add_argument("--screenshot", type=Path, help="also save the first screen as a PNG")
    args = ap.parse_args(argv)
    browser = chromium()
    if browser is None:
        print("check_report_screen: Chromium not found (apt-get install chromium)")
        return 2
    cells = measure((args.folder / "index.html").resolve(), browser, args.screenshot)
    problems = check(cells)
    n = sum(c["table"] == 0 and c["col"] == "verdict" for c in cells)
    tallest = max((c["lines"] for c in cells), default=0)
    for p in problems:
        print("check_report_screen:", p)
    if not problems:
        print(
            f"check_report_screen: {n} claims; the verdicts of {', '.join(FIRST_SCREEN)} on "
            f"the first {WIDTH}×{HEIGHT} screen; tallest table cell {tallest} lines"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
