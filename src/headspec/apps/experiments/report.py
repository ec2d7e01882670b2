"""The report of `headspec reproduce`: ``index.md``, ``index.html`` rendered from it, and
``outcomes.json`` (every experiment's claims, verdicts, tolerances, tables and figure paths, for
programs: :func:`read_outcomes` reads it back).

The report is written once, in Markdown (claims table, per-experiment sections with figures and
config links, environment); the HTML page is that Markdown rendered by markdown-it-py (CommonMark
with tables, raw HTML off so every text is escaped) inside a minimal page. Figures and configs are
referenced by paths relative to the report folder. Every file (index.md, index.html, the configs'
JSON) is written atomically, UTF-8 (headspec.conventions.io).
"""

from __future__ import annotations

import platform
from pathlib import Path

from markdown_it import MarkdownIt

from headspec.apps.experiments.base import Claim, Outcome
from headspec.conventions.io import write_json_atomic, write_text_atomic

_CSS = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
    "table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top}"
    "th{background:#f4f4f4}img{max-width:100%}pre{background:#f6f6f6;padding:8px;overflow:auto}"
)
_PAGE = (
    "<!doctype html><html><head><meta charset='utf-8'><title>headspec report</title>"
    "<style>{css}</style></head><body>\n{body}</body></html>\n"
)


def environment() -> dict:
    import jax

    from headspec.conventions.provenance import run_metadata

    env = run_metadata()
    env["cpu"] = platform.processor() or platform.machine()
    env["devices"] = ", ".join(str(d) for d in jax.devices())
    return env


def _md(text) -> str:
    """A Markdown table cell: pipes escaped, newlines flattened."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _verdict(h):
    return "yes" if h is True else ("NO" if h is False else "—")


def write_report(outcomes: list[Outcome], outdir: Path, scale: str, seconds: float) -> Path:
    """report/index.md and report/index.html: claims table, figures, environment, configs."""
    cfgdir = outdir / "configs"
    cfgdir.mkdir(parents=True, exist_ok=True)
    for o in outcomes:
        for name, c in o.configs.items():
            write_json_atomic(cfgdir / f"{o.id}_{name}.json", c)
    env = environment()
    md = markdown(outcomes, env, scale, seconds)
    write_json_atomic(outdir / OUTCOMES, outcomes_json(outcomes, outdir, env, scale, seconds))
    write_text_atomic(outdir / "index.md", md)
    write_text_atomic(outdir / "index.html", to_html(md))
    return outdir / "index.html"


OUTCOMES = "outcomes.json"


def _plain(x):
    """A table cell as JSON: NumPy scalars as Python numbers, anything else as its text."""
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if hasattr(x, "item"):  # NumPy scalar
        return x.item()
    return str(x)


def outcomes_json(outcomes: list[Outcome], outdir: Path, env: dict, scale: str, seconds: float):
    """The outcomes as plain JSON data; figure paths relative to ``outdir``, configs by name
    (each is ``configs/<id>_<name>.json``)."""
    import dataclasses

    def rel(p: Path) -> str:
        p = Path(p)
        return p.relative_to(outdir).as_posix() if p.is_relative_to(outdir) else str(p)

    return {
        "scale": scale,
        "seconds": seconds,
        "environment": env,
        "experiments": [
            {
                "id": o.id,
                "title": o.title,
                "seconds": o.seconds,
                "error": o.error,
                "claims": [dataclasses.asdict(c) for c in o.claims],
                "figures": [rel(f) for f in o.figures],
                "configs": sorted(o.configs),
                "table_header": list(o.table_header) if o.table_header else None,
                "table": [[_plain(v) for v in r] for r in o.table] if o.table else None,
            }
            for o in outcomes
        ],
    }


def read_outcomes(folder: str | Path) -> list[Outcome]:
    """The outcomes of the report in ``folder`` (its ``outcomes.json``), with absolute figure
    paths and each config read from ``configs/``.

    Example:
        >>> import tempfile
        >>> from headspec.apps.experiments.base import Claim, Outcome
        >>> d = Path(tempfile.mkdtemp())
        >>> o = Outcome("E9", "a title", claims=[Claim("c", "q", "1.0", True, tolerance="t")])
        >>> _ = write_report([o], d, "smoke", 1.0)
        >>> read_outcomes(d)[0].claims == o.claims
        True
    """
    import json

    folder = Path(folder)
    data = json.loads((folder / OUTCOMES).read_text(encoding="utf-8"))
    out = []
    for e in data["experiments"]:
        configs = {
            n: json.loads((folder / "configs" / f"{e['id']}_{n}.json").read_text("utf-8"))
            for n in e["configs"]
        }
        out.append(
            Outcome(
                e["id"], e["title"], claims=[Claim(**c) for c in e["claims"]],
                figures=[folder / f for f in e["figures"]], configs=configs,
                seconds=e["seconds"], error=e["error"],
                table=[tuple(r) for r in e["table"]] if e["table"] is not None else None,
                table_header=tuple(e["table_header"]) if e["table_header"] else None,
            )
        )  # fmt: skip
    return out


def markdown(outcomes: list[Outcome], env: dict, scale: str, seconds: float) -> str:
    """The whole report as Markdown text."""
    held = sum(c.holds is True for o in outcomes for c in o.claims)
    failed = sum(c.holds is False for o in outcomes for c in o.claims)
    md = [f"# headspec — reproduction of the paper's findings ({scale} scale)", ""]
    errors = sum(o.error is not None for o in outcomes)
    md += [f"{held} claim{' holds' if held == 1 else 's hold'}, {failed} do not, at this scale; "
           f"{errors} experiment{'' if errors == 1 else 's'} failed to run. "
           f"Total time {seconds / 60:.1f} min.", ""]  # fmt: skip
    md += ["## Claims", "", "| exp. | claim | measured | value | tolerance (why) | holds |",
           "|---|---|---|---|---|---|"]  # fmt: skip
    for o in outcomes:
        if o.error:
            md.append(
                f"| {o.id} | (experiment failed) | — | `{_md(o.error.splitlines()[0])}` | — | NO |"
            )
        for c in o.claims:
            note = f" ({c.note})" if c.note else ""
            cells = (o.id, c.claim, c.quantity + note, c.value, c.tolerance or "—",
                     _verdict(c.holds))  # fmt: skip
            md.append("| " + " | ".join(_md(x) for x in cells) + " |")
    overlapped = sum(o.seconds for o in outcomes) > 1.05 * seconds  # recipes ran concurrently
    for o in outcomes:
        side = " (side by side with the others)" if overlapped else ""
        md += ["", f"## {o.id} — {o.title}", "", f"Run time {o.seconds:.0f} s{side}."]
        if o.error:
            md += ["", "**This experiment failed:**", "", "```", o.error, "```"]
        for fig in o.figures:
            md += ["", f"![{fig.stem}](figures/{fig.name})"]
        if o.table:
            head = o.table_header or ("seed", "split after specialisation", "final split",
                                      "moves at t", "risk bump")  # fmt: skip
            md += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            md += ["| " + " | ".join(_md(x) for x in row) + " |" for row in o.table]
        if o.configs:
            md += ["", "Configs: " + ", ".join(
                f"[{n}](configs/{o.id}_{n}.json)" for n in o.configs)]  # fmt: skip
    md += ["", "## Environment", "", "| | |", "|---|---|"]
    md += [f"| {_md(k)} | {_md(v)} |" for k, v in env.items()]
    md += [
        "",
        f"Re-run: `headspec reproduce --scale {scale}`; every config above can be re-run "
        "with `headspec simulate` / `headspec theory --config` after converting it to TOML.",
    ]
    return "\n".join(md) + "\n"


def to_html(md: str) -> str:
    """A Markdown report as a standalone HTML page."""
    parser = MarkdownIt("commonmark", {"html": False})
    return _PAGE.format(css=_CSS, body=parser.enable("table").render(md))
