"""The report of `headspec reproduce`: ``index.md``, ``index.html`` rendered from it, and
``outcomes.json`` (every experiment's claims as data — id, statement, measure, value, s.e., unit,
verdict, tolerance — tables and figure paths, for programs: :func:`read_outcomes` reads it back).

Everything is rendered from the claims' data (:mod:`headspec.apps.experiments.claims`). The
report is written once, in Markdown: a compact claims table (one line per claim: experiment,
statement, value ± s.e., verdict), then per experiment its claims, each with what it measures, its
tolerance and the reason, the check that decided it and its parts, then figures, tables and config
links, then the environment. The HTML page is that Markdown rendered by markdown-it-py (CommonMark
with tables, raw HTML off so every text is escaped) inside a minimal page; the verdict cells get a
CSS class (``v-yes``, ``v-no``, ``v-none``: green, red, grey) on the parsed tokens, so no HTML is
written by hand. Figures and configs are referenced by paths relative to the report folder. Every
file (index.md, index.html, the configs' JSON) is written atomically, UTF-8
(headspec.conventions.io).
"""

from __future__ import annotations

import platform
from pathlib import Path

from markdown_it import MarkdownIt

from headspec.apps.experiments.base import Outcome
from headspec.apps.experiments.claims import Claim, verdict_text
from headspec.conventions.io import write_json_atomic, write_text_atomic

_CSS = (
    "body{font-family:sans-serif;font-size:15px;max-width:1320px;margin:1em auto;"
    "padding:0 1em;line-height:1.35}h1{font-size:1.6em;margin:.3em 0}"
    "table{border-collapse:collapse;margin:.6em 0}"
    "td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top}"
    "th{background:#f4f4f4}img{max-width:100%}pre{background:#f6f6f6;padding:8px;overflow:auto}"
    "td.v-yes{background:#e3f4e3;color:#1b5e20;font-weight:bold}"
    "td.v-no{background:#fde0e0;color:#b71c1c;font-weight:bold}td.v-none{color:#888}"
    "details>summary{cursor:pointer}details>ul{margin-top:.2em}table.data{font-size:13px}"
)
_PAGE = (
    "<!doctype html><html><head><meta charset='utf-8'><title>headspec report</title>"
    "<style>{css}</style></head><body>\n{body}</body></html>\n"
)
VERDICT_CLASS = {"yes": "v-yes", "NO": "v-no", "—": "v-none"}  # verdict cell → its CSS class
OUTCOMES = "outcomes.json"


def _cpu_model() -> str:
    """The processor's model name (Linux: /proc/cpuinfo), else what :mod:`platform` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(datadir: Path | None = None) -> dict:
    """Provenance of the report: package version, git revision, …, the machine (CPU model and
    cores) and, from ``datadir``'s result files, the CPU seconds its runs took (``cpu_s``)."""
    import os

    import jax

    from headspec.conventions.provenance import run_metadata

    env = run_metadata()
    env["cpu"] = _cpu_model()
    env["cores"] = os.cpu_count()
    env["devices"] = ", ".join(str(d) for d in jax.devices())
    if datadir is not None:
        env["runs_cpu_s"] = round(runs_cpu_seconds(datadir), 1)
    return env


def runs_cpu_seconds(datadir: Path) -> float:
    """The CPU seconds of the runs in ``datadir`` (each result file's ``cpu_s``; 0 where a file
    has none, as those written before it existed): every run the folder holds, those reused from
    an earlier invocation included."""
    import xarray as xr

    from headspec.conventions.timing import COMPUTE_CPU_SECONDS

    total = 0.0
    for path in sorted(Path(datadir).glob("*.nc")):
        try:  # a file that is not a readable result (a partial or foreign one) counts nothing
            with xr.open_dataset(path, engine="h5netcdf") as ds:
                total += float(ds.attrs.get(COMPUTE_CPU_SECONDS, 0.0))
        except (OSError, ValueError):
            continue
    return total


def _md(text) -> str:
    """Text as literal Markdown on one line: the characters that would start emphasis, code, a
    link or a table cell escaped, newlines flattened.

    >>> _md("K*E[θ] | k_h")
    'K\\\\*E\\\\[θ\\\\] \\\\| k\\\\_h'
    """
    out = str(text).replace("\\", "\\\\")
    for ch in "`*_[]|<":
        out = out.replace(ch, "\\" + ch)
    return out.replace("\n", " ")


def write_report(outcomes: list[Outcome], outdir: Path, scale: str, seconds: float,
                 study: str | None = None) -> Path:  # fmt: skip
    """report/index.md and report/index.html: claims table, figures, environment, configs
    (``study``: the report of that study, ``headspec study NAME``, not of the reproduction)."""
    cfgdir = outdir / "configs"
    cfgdir.mkdir(parents=True, exist_ok=True)
    for o in outcomes:
        for name, c in o.configs.items():
            write_json_atomic(cfgdir / f"{o.id}_{name}.json", c)
    env = environment(outdir / "data")
    md = markdown(outcomes, env, scale, seconds, study)
    write_json_atomic(outdir / OUTCOMES, outcomes_json(outcomes, outdir, env, scale, seconds))
    write_text_atomic(outdir / "index.md", md)
    write_text_atomic(outdir / "index.html", to_html(md))
    return outdir / "index.html"


def _plain(x):
    """A table cell as JSON: NumPy scalars as Python numbers, anything else as its text."""
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if hasattr(x, "item"):  # NumPy scalar
        return x.item()
    return str(x)


def outcomes_json(outcomes: list[Outcome], outdir: Path, env: dict, scale: str, seconds: float):
    """The outcomes as plain JSON data; each claim as :meth:`Claim.as_dict` (verdict and
    tolerance included), figure paths relative to ``outdir``, configs by name (each is
    ``configs/<id>_<name>.json``)."""

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
                "reused_runs": o.reused,
                "reused_seconds": o.reused_seconds,
                "error": o.error,
                "claims": [c.as_dict() for c in o.claims],
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
    paths and each config read from ``configs/``; each claim's verdict is recomputed from its
    data.

    Example:
        >>> import tempfile
        >>> from headspec.apps.experiments.claims import Tolerance
        >>> d = Path(tempfile.mkdtemp())
        >>> c = Claim("E9.c", "a claim", "a quantity", 1.0, 0.1, Tolerance("above", 0, k=3))
        >>> _ = write_report([Outcome("E9", "a title", claims=[c])], d, "smoke", 1.0)
        >>> (back,) = read_outcomes(d)[0].claims
        >>> back == c, back.verdict
        (True, True)
    """
    import json

    folder = Path(folder)
    data = json.loads((folder / OUTCOMES).read_text(encoding="utf-8"))
    old = [c for e in data["experiments"] for c in e["claims"] if "id" not in c]
    if old:  # written before claims were data: a claim's text and its recipe's verdict only
        raise ValueError(
            f"{folder / OUTCOMES} was written by an older headspec (claims as text, without "
            "ids, values and tolerances); fix: run `headspec reproduce` again to regenerate it"
        )
    out = []
    for e in data["experiments"]:
        configs = {
            n: json.loads((folder / "configs" / f"{e['id']}_{n}.json").read_text("utf-8"))
            for n in e["configs"]
        }
        out.append(
            Outcome(
                e["id"], e["title"], claims=[Claim.from_dict(c) for c in e["claims"]],
                figures=[folder / f for f in e["figures"]], configs=configs,
                seconds=e["seconds"], error=e["error"], reused=e.get("reused_runs", 0),
                reused_seconds=e.get("reused_seconds", 0.0),
                table=[tuple(r) for r in e["table"]] if e["table"] is not None else None,
                table_header=tuple(e["table_header"]) if e["table_header"] else None,
            )
        )  # fmt: skip
    return out


def _machine_text(env: dict) -> str:
    """The header's ' on <CPU> (<n> cores); the runs took <h> CPU-hours', from ``env`` (CPU
    minutes below a tenth of an hour; every run in the data folder, reused ones included).

    >>> _machine_text({"cpu": "Xeon", "cores": 2, "runs_cpu_s": 13810.2})
    ' on Xeon (2 cores); the runs in its data folder took 3.84 CPU-hours'
    >>> _machine_text({"runs_cpu_s": 47.0})
    '; the runs in its data folder took 0.8 CPU-minutes'
    """
    out = f" on {_md(env['cpu'])}" if env.get("cpu") else ""
    out += f" ({env['cores']} cores)" if env.get("cores") else ""
    cpu = env.get("runs_cpu_s")
    if cpu:
        amount = f"{cpu / 3600:.2f} CPU-hours" if cpu >= 360 else f"{cpu / 60:.1f} CPU-minutes"
        out += f"; the runs in its data folder took {amount}"
    return out


def markdown(outcomes: list[Outcome], env: dict, scale: str, seconds: float,
             study: str | None = None) -> str:  # fmt: skip
    """The whole report as Markdown text (``study``: of that study, not the reproduction)."""
    held = sum(c.verdict is True for o in outcomes for c in o.claims)
    failed = sum(c.verdict is False for o in outcomes for c in o.claims)
    what = f"study {study}" if study else "reproduction of the paper's findings"
    md = [f"# headspec — {what} ({scale} scale)", ""]
    errors = sum(o.error is not None for o in outcomes)
    md += [f"{held} claim{' holds' if held == 1 else 's hold'}, {failed} do not, at this scale; "
           f"{errors} experiment{'' if errors == 1 else 's'} failed to run. "
           f"Total time {seconds / 60:.1f} min{_machine_text(env)}"
           f"{_reuse_text(outcomes, ' min')}.", ""]  # fmt: skip
    md += ["## Claims", "", *claims_table(outcomes), "",
           "What each claim measures, its tolerance and why, and the check that decided it: "
           "under its experiment below."]  # fmt: skip
    overlapped = sum(o.seconds for o in outcomes) > 1.05 * seconds  # recipes ran concurrently
    for o in outcomes:
        side = " (side by side with the others)" if overlapped else ""
        md += ["", f"## {o.id} — {_md(o.title)}", "",
               f"Run time {o.seconds:.0f} s{side}{_reuse_text([o], ' s')}."]  # fmt: skip
        if o.error:
            md += ["", "**This experiment failed:**", "", "```", o.error, "```"]
        if o.claims:
            md += ["", f"### Claims of {o.id}", ""]
            for c in o.claims:
                md += claim_details(c)
        for fig in o.figures:
            md += ["", f"![{fig.stem}](figures/{fig.name})"]
        if o.table:
            head = o.table_header or ("seed", "split after specialisation", "final split",
                                      "moves at t", "risk bump")  # fmt: skip
            md += ["", "| " + " | ".join(_md(h) for h in head) + " |", "|" + "---|" * len(head)]
            md += ["| " + " | ".join(_md(x) for x in row) + " |" for row in o.table]
        if o.configs:
            md += ["", "Configs: " + ", ".join(
                f"[{n}](configs/{o.id}_{n}.json)" for n in o.configs)]  # fmt: skip
    md += ["", "## Environment", "", "| | |", "|---|---|"]
    md += [f"| {_md(k)} | {_md(v)} |" for k, v in env.items()]
    md += [
        "",
        f"Re-run: `headspec {f'study {study}' if study else 'reproduce'} --scale {scale}`; "
        "every config above can be re-run "
        "with `headspec simulate` / `headspec theory --config` after converting it to TOML.",
    ]
    return "\n".join(md) + "\n"


def _reuse_text(outcomes: list[Outcome], unit: str) -> str:
    """ ", counting N runs reused from an earlier invocation (X to compute then)" or "".

    >>> _reuse_text([Outcome("E1", "t", reused=3, reused_seconds=600.0)], " min")
    '; 3 runs were reused from an earlier invocation (they took 10.0 min to compute then)'
    """
    n = sum(o.reused for o in outcomes)
    if n == 0:
        return ""
    s = sum(o.reused_seconds for o in outcomes)
    took = f"{s / 60:.1f} min" if unit == " min" else f"{s:.0f} s"
    return (f"; {n} run{' was' if n == 1 else 's were'} reused from an earlier invocation "
            f"({'it' if n == 1 else 'they'} took {took} to compute then)")  # fmt: skip


def claims_table(outcomes: list[Outcome]) -> list[str]:
    """The compact claims table as Markdown lines, one per claim: experiment, statement,
    value ± s.e., verdict (a failed experiment: one NO line with its error's first line).

    >>> from headspec.apps.experiments.claims import Tolerance
    >>> c = Claim("E9.c", "A beats B", "R_B − R_A", 0.031, 0.004, Tolerance("above", 0, k=3))
    >>> claims_table([Outcome("E9", "t", claims=[c])])[2]
    '| E9 | A beats B | 0.031 ± 0.004 | yes |'
    """
    md = ["| exp. | claim | value ± s.e. | verdict |", "|---|---|---|---|"]
    for o in outcomes:
        if o.error:
            md.append(f"| {o.id} | (experiment failed) | `{_md(o.error.splitlines()[0])}` | NO |")
        for c in o.claims:
            cells = (o.id, _md(c.statement), _md(c.value_text()), verdict_text(c.verdict))
            md.append("| " + " | ".join(cells) + " |")
    return md


def claim_details(c: Claim, indent: str = "", parent: Claim | None = None) -> list[str]:
    """A claim as a Markdown list item: verdict, statement (a part: its name in the claim), id
    and value, then what it measures, its tolerance (rule, reason, whether set after seeing data),
    the check and any detail, then its parts the same way (a part's reason left out where it
    repeats the previous part's)."""
    name = _md(parent.label(c) if parent is not None else c.statement)
    head = f"{indent}- **{verdict_text(c.verdict)}** · {name}"
    if parent is None:
        head += f" (`{c.id}`)"
    if not c.all_of:
        head += f": {_md(c.value_text())}"
    sub = indent + "  "
    md = [head, f"{sub}- measured: {_md(c.measure)}"]
    t = c.tolerance
    if t is not None:
        after = " *(tolerance set after seeing data)*" if t.set_after_data else ""
        md.append(f"{sub}- tolerance: {_md(t.rule(c.unit))}{after}")
        if t.why and (parent is None or _previous_why(parent, c) != t.why):
            md.append(f"{sub}- why: {_md(t.why)}")
        md.append(f"{sub}- check: {_md(c.reason)}")
    elif not c.all_of:
        md.append(f"{sub}- measured only: no tolerance, no verdict")
    if c.detail:
        md.append(f"{sub}- detail: {_md(c.detail)}")
    for part in c.all_of:
        md += claim_details(part, sub, c)
    return md


def _previous_why(parent: Claim, part: Claim) -> str | None:
    """The reason of the part before ``part`` in ``parent`` (None for the first part)."""
    k = parent.all_of.index(part)
    prev = parent.all_of[k - 1].tolerance if k > 0 else None
    return prev.why if prev is not None else None


def to_html(md: str) -> str:
    """A Markdown report as a standalone HTML page, its verdict cells coloured.

    >>> page = to_html("| claim | verdict |\\n|---|---|\\n| a | yes |\\n| b | NO |\\n")
    >>> '<td class="v-yes">yes</td>' in page and '<td class="v-no">NO</td>' in page
    True
    """
    parser = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = _fold_claims(parser.parse(md))
    _colour_verdicts(tokens)
    return _PAGE.format(css=_CSS, body=parser.renderer.render(tokens, parser.options, {}))


def _fold_claims(tokens: list) -> list:
    """Each claim of a list (an item whose text starts with its verdict in bold, as
    :func:`claim_details` writes it) as an HTML ``<details>``: the verdict, statement and value
    are the summary, what it measures, its tolerance, reason and check fold under it, so that
    an experiment's claims can be scanned. Input Markdown's own HTML stays escaped (the parser
    has ``html`` off; only these tags are added).

    >>> page = to_html("- **yes** · A beats B: 0.3\\n  - measured: R_B − R_A\\n")
    >>> "<details><summary>" in page and "</summary>" in page and "measured: R_B" in page
    True
    >>> "<details>" in to_html("- an ordinary item\\n  - with a sub-item\\n")
    False
    """
    from markdown_it.token import Token

    def html(text: str, level: int) -> Token:
        t = Token("html_block", "", 0)
        t.content, t.level = text, level
        return t

    verdicts = tuple(f"**{v}**" for v in VERDICT_CLASS)
    out, open_items = [], []  # open_items: for each open list item, whether it is folded
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.type == "list_item_open":
            para = tokens[i + 1 : i + 3]
            text = para[1].content if [t.type for t in para] == ["paragraph_open", "inline"] else ""
            # a claim's sub-list (measured, tolerance, …) follows its paragraph directly
            nested = i + 4 < len(tokens) and tokens[i + 4].type == "bullet_list_open"
            folded = text.startswith(verdicts) and nested
            open_items.append(folded)
            if folded:  # <li><details><summary> paragraph </summary> sub-list </details></li>
                out += [tok, html("<details><summary>", tok.level + 1), *tokens[i + 1 : i + 4],
                        html("</summary>\n", tok.level + 1)]  # fmt: skip
                i += 4
                continue
        elif tok.type == "list_item_close" and open_items.pop():
            out.append(html("</details>\n", tok.level + 1))
        out.append(tok)
        i += 1
    return out


def _colour_verdicts(tokens) -> None:
    """Give each cell of a table's "verdict" column the CSS class of its verdict, and every
    table without one (the recipes' data tables) the class "data" (a smaller font)."""
    col, k = None, 0
    for i, tok in enumerate(tokens):
        if tok.type == "table_open":
            col = None
            head = []
            for t in tokens[i + 1 :]:
                if t.type == "thead_close":
                    break
                head += [t.content] if t.type == "inline" else []
            if "verdict" not in head:
                tok.attrSet("class", "data")
        elif tok.type == "tr_open":
            k = 0
        elif tok.type in ("th_open", "td_open"):
            text = tokens[i + 1].content if tokens[i + 1].type == "inline" else ""
            if tok.type == "th_open" and text == "verdict":
                col = k
            elif tok.type == "td_open" and k == col:
                tok.attrSet("class", VERDICT_CLASS.get(text, "v-none"))
            k += 1
