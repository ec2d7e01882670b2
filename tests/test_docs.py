"""The documentation, run or checked so it cannot go stale (issues 13 and 29): the README (quick
start, first steps, links into the site), the site's pages docs/*.md (the text that moved out of
the README: commands, engines, tests, architecture; every link and anchor, every command and option
named, the first steps and the `headspec bayes` examples run as written), docs/model.md (the SPEC,
kept in step with ../shared/SPEC.md), the tutorial notebook docs/tutorial.md (run, and showing
the figures it saves, which scripts/render_tutorial.py copies into docs/figures/tutorial/), and
scripts/check_site.py, which .ci/run runs on the site that `mkdocs build --strict` built.

The Python examples (```pycon blocks) of the README and of the site's pages are doctests that
pytest collects from the Markdown itself (``--doctest-glob=*.md`` and the testpaths in
pyproject.toml; checked below). The commands here run in-process through
``typer.testing.CliRunner``, at the pages' own sizes. MkDocs itself is not needed here.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import tomllib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from headspec.apps.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"  # the site's pages (mkdocs.yml: docs_dir)
MODEL = DOCS / "model.md"
TUTORIAL = DOCS / "tutorial.md"
GETTING_STARTED = DOCS / "getting-started.md"
BAYES = DOCS / "bayes.md"
CHOICES = DOCS / "modelling-choices.md"
PAGES = sorted(DOCS.rglob("*.md"))  # every page of the site
SPEC = ROOT.parent / "shared" / "SPEC.md"  # the project's SPEC, beside the repository

runner = CliRunner()


# ============================================================================ Markdown helpers
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


def sections(text: str) -> dict[str, str]:
    """Heading text → the section's body (up to the next heading of any level), ## and deeper;
    fenced blocks are skipped when looking for headings."""
    out, name, buf, fenced = {}, "", [], False
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"^(#{1,6}) (.*)$", line)
        if m:
            out[name] = "".join(buf)
            name, buf = m.group(2).strip(), []
        else:
            buf.append(line)
    out[name] = "".join(buf)
    return out


def blocks(text: str, *langs: str) -> list[str]:
    """The bodies of the fenced code blocks of the given languages, in order."""
    return [body for lang, body in FENCE.findall(text) if lang in langs]


def github_slug(heading: str) -> str:
    """GitHub's anchor of a heading: inline markup dropped, lower case, punctuation removed,
    spaces → hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown file (duplicates get GitHub's -1, -2 … suffixes)."""
    seen: dict[str, int] = {}
    out = set()
    for name in sections(text):
        if not name:
            continue
        slug = github_slug(name)
        k = seen.get(slug, 0)
        seen[slug] = k + 1
        out.add(slug if k == 0 else f"{slug}-{k}")
    return out


def model_body(text: str) -> str:
    """docs/model.md without its header: everything after the first rule line ``---``."""
    _, sep, body = text.partition("\n---\n\n")
    assert sep, "docs/model.md: no '---' rule after the header"
    return body


def command_lines(text: str) -> list[list[str]]:
    """Every `headspec …` command of the README: lines of bash/console blocks (a leading `$ ` and
    trailing `# comments` dropped) and inline code spans starting with `headspec `."""
    found = []
    for body in blocks(text, "bash", "console", "sh"):
        for line in body.splitlines():
            line = line.removeprefix("$ ").strip()
            if line.startswith(("headspec ", ".venv/bin/headspec ")):
                found.append(shlex.split(line, comments=True))
            elif "&& .venv/bin/headspec " in line:
                found.append(shlex.split(line.split("&& ")[-1], comments=True))
    for span in re.findall(r"(?<!\\)`(headspec [^`]*)`", text):  # not an escaped \` (reports)
        found.append(shlex.split(span.replace("[", " ").replace("]", " ")))
    return found


def click_command(words: list[str]):
    """The click command a README command line names: (command, its path of names, the rest of
    the words)."""
    cmd, path, rest = typer.main.get_command(app), [], list(words[1:])
    while rest and hasattr(cmd, "commands") and rest[0] in cmd.commands:
        path.append(rest.pop(0))
        cmd = cmd.commands[path[-1]]
    if path == ["sweep"] and rest and not rest[0].startswith("-"):  # `headspec sweep SPEC.toml`
        path.append("run")
        cmd = cmd.commands["run"]
    assert path or all(w.startswith("-") for w in rest), f"`{shlex.join(words)}`: no command"
    return cmd, path, rest


def option_names(cmd) -> set[str]:
    """Every option name of a click command, --help included."""
    return {
        o
        for p in cmd.get_params(cmd.context_class(cmd))
        if p.param_type_name == "option"
        for o in (*p.opts, *p.secondary_opts)
    }


def _script(name: str):
    """A module of scripts/ (not a package), imported from its file."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ============================================================================ docs/model.md
def test_model_md_is_the_spec():
    """docs/model.md is SPEC.md verbatim below its header (where ../shared/SPEC.md exists: a
    fresh clone, as in CI, has no ../shared)."""
    if not SPEC.is_file():
        pytest.skip(f"{SPEC} does not exist here (fresh clone): nothing to keep in step with")
    body = model_body(MODEL.read_text(encoding="utf-8"))
    assert body == SPEC.read_text(encoding="utf-8"), (
        "docs/model.md differs from ../shared/SPEC.md; fix: copy SPEC.md below the header rule"
    )


def test_model_md_header_says_how_it_is_kept_in_step():
    text = MODEL.read_text(encoding="utf-8")
    header = text.partition("\n---\n\n")[0]
    for words in ("Kept in step", "SPEC.md", "verbatim", "tests/test_docs.py"):
        assert words in header, words
    assert model_body(text).startswith("# The model"), "the body must start with SPEC's title"


def modelling_choices(spec: str) -> list[tuple[str, str]]:
    """(section number, clause) for every point SPEC marks ``*Modelling choice(s)*:``: the marked
    sentence split at top-level semicolons (those outside parentheses)."""
    out = []
    for m in re.finditer(r"\*Modelling choices?\*:\s*(.*?\.)(?:\s|$)", spec, re.S):
        sec = re.findall(r"^## (\d+)\.", spec[: m.start()], re.M)[-1]
        sentence, depth, clause = " ".join(m.group(1).split()), 0, ""
        for ch in sentence:
            depth += (ch == "(") - (ch == ")")
            if ch == ";" and depth == 0:
                out.append((sec, clause.strip()))
                clause = ""
            else:
                clause += ch
        out.append((sec, clause.strip().rstrip(".")))
    return out


# each SPEC clause marked *modelling choice* → the bold name of its bullet in the list of
# docs/modelling-choices.md (a new marked clause in SPEC fails the test below until added here)
CHOICE_BULLETS = {
    "heads are averaged for softmax": "Aggregation of heads",
    "every head has a trainable bias": "Biases",
}


def test_spec_modelling_choices_are_listed_in_the_docs():
    """Every point SPEC marks *modelling choice* has its bullet in docs/modelling-choices.md,
    citing SPEC's section (with a link into docs/model.md)."""
    choices = modelling_choices(model_body(MODEL.read_text(encoding="utf-8")))
    assert len(choices) >= 2, choices  # the parser found SPEC §3's two choices at least
    listing = sections(CHOICES.read_text(encoding="utf-8"))["Modelling choices"]
    bullets = re.findall(r"^- \*\*(.+?)\*\*(.*?)(?=^- |\Z)", listing, re.S | re.M)
    by_name = {name: rest for name, rest in bullets}
    for sec, clause in choices:
        names = [b for start, b in CHOICE_BULLETS.items() if clause.startswith(start)]
        assert names, f"SPEC §{sec} marks a modelling choice the docs do not list: {clause!r}"
        rest = by_name.get(names[0])
        assert rest is not None, f"{CHOICES.name} has no bullet **{names[0]}**"
        assert f"[§{sec}](model.md#" in rest, f"**{names[0]}** does not cite §{sec}"


# ============================================================================ links
@pytest.mark.parametrize("doc", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve_inside_the_repository(doc):
    """Every relative link (and image) of the README names a file of this repository (nothing
    outside it, e.g. ../shared), every link of a site page a file of the site (docs/: nothing
    else is built), and every #anchor names a heading of the target (GitHub's anchors, which the
    site's are too: mkdocs.yml's slugify)."""
    text = FENCE.sub("", doc.read_text(encoding="utf-8"))
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    if doc in (README, MODEL, TUTORIAL, GETTING_STARTED):
        assert links
    home = ROOT if doc == README else DOCS
    for link in links:
        if re.match(r"^[a-z]+:", link):  # http(s), mailto: not ours to check
            continue
        path, _, anchor = link.partition("#")
        target = (doc.parent / path).resolve() if path else doc
        assert target.is_relative_to(home), f"{doc.name}: {link} points outside {home.name}/"
        assert target.exists(), f"{doc.name}: {link}: no such file"
        if anchor and target.suffix == ".md":
            assert anchor in anchors(target.read_text(encoding="utf-8")), (
                f"{doc.name}: {link}: no heading with this anchor"
            )


def test_readme_points_at_the_shipped_docs():
    """The README fits on two screens (≤ 150 lines) and links into every page of the site (the
    home page and the changelog page aside: it links CHANGELOG.md itself; of the API reference,
    its first page, which links the others)."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150, len(text.splitlines())
    assert "](docs/model.md)" in text and "](docs/tutorial.md)" in text
    assert "../shared" not in text
    assert "(in progress)" not in text
    linked = {m.partition("#")[0] for m in re.findall(r"\]\((docs/[^)\s]+)\)", text)}
    pages = {p.relative_to(ROOT).as_posix() for p in PAGES}
    pages = {p for p in pages if not p.startswith("docs/reference/")} | {"docs/reference/index.md"}
    missing = pages - linked - {"docs/index.md", "docs/changelog.md"}
    assert not missing, f"the README links no page {sorted(missing)}"


def test_every_page_is_in_the_site_navigation():
    """mkdocs.yml's nav names every page of docs/ and only those (mkdocs --strict refuses a page
    left out too, but only where MkDocs is installed)."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config[config.index("\nnav:\n") :]
    named = re.findall(r":\s+(\S+\.md)\s*$", nav, re.M)
    assert len(named) == len(set(named)), named
    assert {(DOCS / n).resolve() for n in named} == {p.resolve() for p in PAGES}


def test_moved_figure_is_the_studys():
    """The finite-size figure of docs/engine-diffusion.md is a copy (the site holds only docs/) of
    what `headspec study finite_size` draws: re-copy it after re-running the study."""
    study = ROOT / "studies" / "out" / "finite_size" / "figures" / "finite_size_t_esc.png"
    assert (DOCS / "figures" / "finite_size.png").read_bytes() == study.read_bytes()


# ============================================================================ quick start
def test_quick_start_commands_are_what_ci_and_pytest_run():
    """The two set-up commands (minutes each: a venv, then `reproduce` or the whole suite) are
    checked, not run: command 2 is the line .ci/run runs verbatim, command 1 installs the same
    way and runs a real `headspec` command through the installed entry point; `pytest` there
    collects the doctests of the README and the site's pages. Getting started shows the same
    two commands."""
    (setup,) = blocks(sections(README.read_text(encoding="utf-8"))["Quick start"], "bash")
    page = sections(GETTING_STARTED.read_text(encoding="utf-8"))["Quick start"]
    assert blocks(page, "bash") == [setup], "docs/getting-started.md: not the README's commands"
    commands = [ln for ln in setup.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(commands) == 2, commands
    run_cmd, test_cmd = commands
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_cmd in ci, f"{test_cmd!r} is not a line of .ci/run"
    venv, install, run = run_cmd.split(" && ")
    ci_venv, ci_install, ci_pytest = test_cmd.split(" && ")
    assert (venv, install) == (ci_venv, ci_install.replace('".[test]"', "."))
    assert run.startswith(".venv/bin/headspec ") and ci_pytest == ".venv/bin/pytest -n auto"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["scripts"]["headspec"] == "headspec.apps.cli:main"
    assert "test" in project["project"]["optional-dependencies"]
    pytest_cfg = project["tool"]["pytest"]["ini_options"]
    assert {"README.md", "docs"} <= set(pytest_cfg["testpaths"])
    assert "--doctest-glob=*.md" in pytest_cfg["addopts"]
    _, path, rest = click_command(shlex.split(run.removeprefix(".venv/bin/")))
    assert path == ["reproduce"] and not rest


def test_every_command_and_option_named_exists():
    """Each `headspec CMD --opt` of the README and of the site's pages (code blocks and inline
    code) names a real command and real options of it; its `--help` runs and shows them."""
    found = {doc: command_lines(doc.read_text(encoding="utf-8")) for doc in [README, *PAGES]}
    assert len(found[README]) >= 5, found[README]
    lines = [words for doc_lines in found.values() for words in doc_lines]
    assert len(lines) > 20, len(lines)
    helps: dict[str, str] = {}
    for words in lines:
        if len(words) > 1 and words[1].isupper():  # `headspec COMMAND --help`: a placeholder
            continue
        cmd, path, rest = click_command(words)
        opts = {w.split("=")[0] for w in rest if w.startswith("-") and not w[1:2].isdigit()}
        unknown = opts - option_names(cmd)
        assert not unknown, f"`{shlex.join(words)}`: no such option(s) {sorted(unknown)}"
        key = " ".join(path)
        if key not in helps:
            res = runner.invoke(app, [*path, "--help"], terminal_width=200)
            assert res.exit_code == 0, res.output
            helps[key] = res.output
        for o in opts:
            assert o in helps[key], f"`headspec {key} --help` does not show {o}"


def _numbers(text: str) -> list[str]:
    return re.findall(r"[+-]?\d+\.\d{5}", text)


def test_bayes_examples_print_what_the_docs_show():
    """The `headspec bayes` page's console examples, run: the same title, the same risks (all
    printed digits) and, for the refusal, the same one-line error and exit code 2."""
    (ok, refused) = blocks(sections(BAYES.read_text(encoding="utf-8"))["`headspec bayes`"],
                           "console")  # fmt: skip
    cmd, *shown = ok.splitlines()
    res = runner.invoke(app, shlex.split(cmd.removeprefix("$ "))[1:])
    assert res.exit_code == 0, res.output
    assert shown[0].strip() == res.stdout.splitlines()[0].strip(), res.stdout
    assert _numbers("\n".join(shown)) == _numbers(res.stdout), f"docs are stale:\n{res.stdout}"
    cmd, message, echo, code = refused.splitlines()
    res = runner.invoke(app, shlex.split(cmd.removeprefix("$ "))[1:])
    assert echo == "$ echo $?" and res.exit_code == int(code), res.output
    assert res.stderr.strip() == message, f"docs are stale: {res.stderr}"
    assert "Traceback" not in res.output


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_first_steps_run_as_written(tmp_path, monkeypatch):
    """Every command of "First steps on the command line" (Getting started, and the same block in
    the README), run as written (from a copy of the repository's experiments/), exits 0 and
    writes what the page says; the numbers the README and the page quote hold."""
    first = sections(GETTING_STARTED.read_text(encoding="utf-8"))["First steps on the command line"]
    (body,) = blocks(first, "bash")
    readme = sections(README.read_text(encoding="utf-8"))["First steps on the command line"]
    assert blocks(readme, "bash") == [body], "the README's first steps differ from the site's"
    shutil.copytree(ROOT / "experiments", tmp_path / "experiments")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    outputs = {}
    for line in body.splitlines():
        words = shlex.split(line, comments=True)
        assert words[0] == "headspec", line
        res = runner.invoke(app, words[1:])
        assert res.exit_code == 0, f"{line}\n{res.output}"
        assert "Traceback" not in res.output
        outputs[words[1]] = res.stdout
    assert set(outputs) == {"bayes", "simulate", "theory", "compare", "prune"}
    for f in ("sim.nc", "theory.nc", "sim_risk.png", "sim_overlaps.png",
              "sim_vs_theory_risk.png", "sim_prune.png"):  # fmt: skip
        assert (tmp_path / f).stat().st_size > 0, f
    # "bayes prints R_B ≈ 0.101", "ends … at risk ≈ 0.20", "within a few per cent" (both pages)
    # the row's first number: at 80 columns "(R_B)" wraps onto the row's second line
    (r_b,) = re.findall(r"Bayes posterior\D*?(\d\.\d+)", outputs["bayes"])
    assert round(float(r_b), 3) == 0.101
    import headspec as hs

    sim, theory = hs.load(tmp_path / "sim.nc"), hs.load(tmp_path / "theory.nc")
    assert round(float(sim.risk.isel(t=-1).mean()), 2) == 0.20
    assert hs.compare(sim, theory)["risk"]["max_dev"] < 0.1


# ============================================================================ the tutorial
render_tutorial = _script("render_tutorial")  # the cells, as scripts/render_tutorial.py runs them
TUTORIAL_FIGURES = DOCS / "figures" / "tutorial"  # what it copies the cells' figures into
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def tutorial_cells() -> list[str]:
    return render_tutorial.code_cells(TUTORIAL.read_text(encoding="utf-8"))


def tutorial_embedded_figures() -> list[str]:
    """The names of the figures the tutorial page embeds from figures/tutorial/ (outside code)."""
    text = FENCE.sub("", TUTORIAL.read_text(encoding="utf-8"))
    return [
        link.removeprefix("figures/tutorial/")
        for link in IMAGE.findall(text)
        if link.startswith("figures/tutorial/")
    ]


def test_tutorial_is_a_jupytext_notebook():
    """The front matter jupytext reads (`jupytext --to ipynb docs/tutorial.md`), and every code
    cell compiles."""
    yaml = pytest.importorskip("yaml")
    text = TUTORIAL.read_text(encoding="utf-8")
    assert text.startswith("---\njupyter:\n  jupytext:\n    text_representation:\n")
    meta = yaml.safe_load(text.split("---\n")[1])
    rep = meta["jupyter"]["jupytext"]["text_representation"]
    assert (rep["extension"], rep["format_name"]) == (".md", "markdown")
    assert meta["jupyter"]["kernelspec"]["language"] == "python"
    cells = tutorial_cells()
    assert len(cells) >= 10
    for i, cell in enumerate(cells):
        compile(cell, f"docs/tutorial.md, cell {i}", "exec")


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_tutorial_runs(tmp_path, monkeypatch):
    """The tutorial's code cells, run in order in one namespace in a fresh folder: bayes →
    simulate → theory → compare → prune, every figure written, and those the page embeds only."""
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    ns = render_tutorial.run_cells(tutorial_cells())
    for f in ("sim_risk.png", "sim_overlaps.png", "sim_vs_theory_risk.png",
              "sim_vs_theory_overlaps.png", "sim_prune.png"):  # fmt: skip
        assert (tmp_path / f).stat().st_size > 0, f
    written = {p.name for p in tmp_path.glob("*.png")}
    assert written == set(tutorial_embedded_figures()), "the page shows other figures than it makes"
    assert ns["pruned"]["n_heads"] == [4, 3, 2, 1, 0]
    assert ns["dev"]["risk"]["max_dev"] < 0.1


def test_tutorial_shows_every_figure_it_saves():
    """Each figure a code cell of the tutorial saves (`fig.savefig("NAME.png")`) is embedded as
    `![…](figures/tutorial/NAME.png)` in the Markdown right after that cell (before the next code
    cell or heading), and no other figure of figures/tutorial/ is; each is a PNG under 150 kB in
    docs/figures/tutorial/, which holds these only. Text only: scripts/render_tutorial.py re-runs
    the notebook and re-copies the figures."""
    text = TUTORIAL.read_text(encoding="utf-8")
    fences = list(FENCE.finditer(text))
    saved, shown_after = [], []
    for k, m in enumerate(fences):
        if m.group(1) != "python":
            continue
        names = render_tutorial.saved_figures(m.group(2))
        gap = text[m.end() : fences[k + 1].start() if k + 1 < len(fences) else len(text)]
        gap = re.split(r"^#{1,6} ", gap, maxsplit=1, flags=re.M)[0]  # up to the next heading
        after = [
            link.removeprefix("figures/tutorial/")
            for link in IMAGE.findall(gap)
            if link.startswith("figures/tutorial/")
        ]
        assert after == names, f"the cell saving {names} is followed by the images {after}"
        saved += names
        shown_after += after
    assert len(saved) >= 5 and len(set(saved)) == len(saved), saved
    assert sorted(tutorial_embedded_figures()) == sorted(shown_after), (
        "the tutorial embeds a figure of figures/tutorial/ away from the cell that saves it"
    )
    for name in saved:
        png = TUTORIAL_FIGURES / name
        assert png.is_file(), f"{png.relative_to(ROOT)}: run python scripts/render_tutorial.py"
        data = png.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) < 150_000, (name, len(data))
    assert {p.name for p in TUTORIAL_FIGURES.iterdir()} == set(saved), (
        "docs/figures/tutorial/ holds figures the tutorial no longer saves"
    )


# ============================================================================ Markdown doctests
def test_every_python_example_of_the_docs_runs_as_a_doctest():
    """Every Markdown file with a ```pycon example (the README, docs/*.md) lies where pytest
    collects it as a doctest file (testpaths, --doctest-glob=*.md); the README's Python first
    steps are the beginning of Getting started's, which continues them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    cfg = project["tool"]["pytest"]["ini_options"]
    globs = re.findall(r"--doctest-glob=(\S+)", cfg["addopts"])
    roots = [(ROOT / p).resolve() for p in cfg["testpaths"]]
    with_examples = [d for d in [README, *PAGES] if blocks(d.read_text(encoding="utf-8"), "pycon")]
    assert {README, GETTING_STARTED, DOCS / "python-api.md"} <= set(with_examples)
    for doc in with_examples:
        assert any(doc == r or doc.is_relative_to(r) for r in roots), f"{doc}: not in testpaths"
        assert any(Path(doc.name).match(g) for g in globs), f"{doc.name}: no --doctest-glob"
    readme = sections(README.read_text(encoding="utf-8"))["First steps in Python"]
    (short,) = blocks(readme, "pycon")
    page = sections(GETTING_STARTED.read_text(encoding="utf-8"))["First steps in Python"]
    (full,) = blocks(page, "pycon")
    rest = iter(full.splitlines())  # the README's lines, in order, among the page's
    assert all(line in rest for line in short.splitlines() if line.strip()), (
        "the README's Python first steps are not the beginning of Getting started's"
    )


# ============================================================================ the site checker
def _check_site_module():
    return _script("check_site")


def test_site_checker_finds_missing_images_and_dead_links(tmp_path, capsys):
    """scripts/check_site.py (run by .ci/run on the built site) on a small site: what resolves
    passes, and each missing image, missing page and missing anchor is one line."""
    check = _check_site_module()
    site = tmp_path / "site"
    (site / "sub").mkdir(parents=True)
    (site / "figure.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (site / "empty.png").write_bytes(b"")
    (site / "sub" / "index.html").write_text('<h1 id="top">sub</h1><a name="old">x</a>')
    (site / "index.html").write_text(
        '<h1 id="home">home</h1>'
        '<img src="figure.png"><a href="sub/#top">ok</a><a href="sub/index.html#old">ok</a>'
        '<a href="#home">ok</a><a href="/sub/">ok</a><a href="https://example.org/x">external</a>'
        '<img src="data:image/png;base64,AAAA"><img src="missing.png"><img src="empty.png">'
        '<a href="nowhere.html">dead</a><a href="sub/index.html#gone">dead</a>'
        '<a href="#nothing">dead</a><picture><source srcset="gone.webp 1x, figure.png 2x">'
        "</picture>"
    )
    problems = check.check_site(site)
    assert problems == [
        "index.html: image missing.png: no such file in the site",
        "index.html: image empty.png: the file is empty",
        "index.html: image gone.webp: no such file in the site",
        "index.html: link nowhere.html: no such file in the site",
        "index.html: link sub/index.html#gone: no anchor #gone in that page",
        "index.html: link #nothing: no anchor #nothing in that page",
    ], problems
    assert check.main([str(site)]) == 1
    assert "6 problem(s)" in capsys.readouterr().err
    for bad in ("missing.png", "empty.png", "nowhere.html", "#gone", "#nothing", "gone.webp"):
        text = (site / "index.html").read_text()
        (site / "index.html").write_text(re.sub(rf"<[^<]*{re.escape(bad)}[^>]*>", "", text))
    assert check.check_site(site) == []
    assert check.main([str(site)]) == 0
    assert check.check_site(tmp_path / "empty") != []  # no pages: not a built site
