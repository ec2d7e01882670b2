"""Check a built documentation site: every image loads and every internal link lands.

    python scripts/check_site.py SITE_DIR

Reads every HTML page under SITE_DIR (what `mkdocs build` wrote) and fails (exit 1, one line per
problem) on:

- an image (``<img src>``, ``<source srcset>``) whose file is not in the site, or is empty;
- a link (``<a href>``, and the stylesheets and scripts a page loads) to a file of the site that
  does not exist — a folder counts when it has an ``index.html``, and a path from ``/`` is read
  from the site's root;
- a link to an anchor (``page.html#part``, ``#part``) that no ``id`` or ``name`` of the target page
  defines.

External addresses (``https:``, ``mailto:``, ``data:``, …) are not followed: this checks the site
itself, offline. `mkdocs build --strict` already refuses dead links and anchors in the Markdown;
this checks what the browser gets — links written by the theme and by mkdocstrings, images in
raw HTML, and the files the links point to after the build.

Only the standard library, so that it runs wherever the site was built.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

# (tag, attribute) pairs whose value is a URL to check; images are reported as images
LINKS = {("a", "href"), ("link", "href"), ("script", "src"), ("iframe", "src")}
IMAGES = {("img", "src"), ("source", "srcset"), ("img", "srcset")}


class _Page(HTMLParser):
    """The ids (and names) a page defines, and the URLs it refers to."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value)
            if (tag, name) in IMAGES:
                # srcset: "a.png 1x, b.png 2x" — each candidate's URL
                urls = [c.split()[0] for c in value.split(",") if c.strip()]
                self.images.extend(urls if name == "srcset" else [value])
            elif (tag, name) in LINKS:
                self.links.append(value)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    page.close()
    return page


def _external(url: str) -> bool:
    parts = urlsplit(url)
    return bool(parts.scheme) or url.startswith("//")


def check_site(root: Path) -> list[str]:
    """Every problem of the site built in ``root``, one line each (empty: the site is sound)."""
    root = root.resolve()
    pages = {p.resolve(): _parse(p) for p in sorted(root.rglob("*.html"))}
    if not pages:
        return [f"{root}: no HTML pages (was the site built here?)"]
    problems = []

    def target_of(page: Path, url: str) -> tuple[Path, str]:
        parts = urlsplit(url)
        path = unquote(parts.path)
        if path.startswith("/"):  # from the site's root (the 404 page's links)
            target = (root / path.lstrip("/")).resolve()
        else:
            target = (page.parent / path).resolve() if path else page
        if target.is_dir():
            target = target / "index.html"
        return target, unquote(parts.fragment)

    for page, parsed in pages.items():
        name = page.relative_to(root).as_posix()
        for kind, urls in (("image", parsed.images), ("link", parsed.links)):
            for url in urls:
                if _external(url):
                    continue
                target, anchor = target_of(page, url)
                if not target.is_relative_to(root):
                    problems.append(f"{name}: {kind} {url}: outside the site")
                elif not target.is_file():
                    problems.append(f"{name}: {kind} {url}: no such file in the site")
                elif kind == "image" and target.stat().st_size == 0:
                    problems.append(f"{name}: image {url}: the file is empty")
                elif kind == "link" and anchor and target.suffix == ".html":
                    ids = pages[target].ids if target in pages else _parse(target).ids
                    if anchor not in ids:
                        problems.append(f"{name}: link {url}: no anchor #{anchor} in that page")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[0], "\nusage: check_site.py SITE_DIR", file=sys.stderr)
        return 2
    root = Path(argv[0])
    problems = check_site(root)
    for line in problems:
        print(line, file=sys.stderr)
    n_pages = len(list(root.rglob("*.html")))
    if problems:
        print(f"check_site: {len(problems)} problem(s) in {root}", file=sys.stderr)
        return 1
    print(f"check_site: {n_pages} pages, every image and internal link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
