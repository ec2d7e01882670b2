"""Claims as data (headspec.apps.experiments.claims): every kind of tolerance just inside and
just outside its bound at its s.e. multiple, measured-only claims, values that are not numbers,
claims with parts, the JSON round trip, and the compact claims table of the report."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from headspec.apps.experiments import Context, Outcome
from headspec.apps.experiments.claims import Claim, Tolerance, number
from headspec.apps.experiments.report import claims_table, markdown, read_outcomes, write_report

# kind → (a value just inside, one just outside) for bound 1, k = 3, se = 0.1: the allowance is
# 0.3, so "above" needs > 1.3, "below" < 0.7, "at_least" ≥ 0.7, "at_most" ≤ 1.3, "within" |v| ≤ 1.3
EDGES = {
    "above": (1.31, 1.29),
    "below": (0.69, 0.71),
    "at_least": (0.71, 0.69),
    "at_most": (1.29, 1.31),
    "within": (-1.29, -1.31),
}


def _claim(value, se=0.1, tol=None, **kw):
    return Claim("E9.x", "a statement", "a measure", value, se, tol, **kw)


@pytest.mark.parametrize("kind", sorted(EDGES))
def test_each_kind_just_inside_and_just_outside_at_k_standard_errors(kind):
    tol = Tolerance(kind, 1.0, k=3, why="a reason")
    inside, outside = EDGES[kind]
    assert _claim(inside, tol=tol).verdict is True
    assert _claim(outside, tol=tol).verdict is False
    assert _claim(outside, tol=tol).reason.endswith("fails")
    # the s.e. multiple counts against a strict claim and for a lenient one: without it the
    # value just outside a strict bound holds, and the one just inside a lenient bound fails
    without = Tolerance(kind, 1.0, why="a reason")
    if kind in ("above", "below"):
        assert _claim(outside, tol=without).verdict is True
    else:
        assert _claim(inside, tol=without).verdict is False


def test_strict_and_non_strict_kinds_at_the_bound_itself():
    assert _claim(4.0, 0.0, Tolerance("at_least", 4)).verdict is True  # "in every seed"
    assert _claim(4.0, 0.0, Tolerance("at_most", 4)).verdict is True
    assert _claim(0.0, 0.0, Tolerance("above", 0)).verdict is False
    assert _claim(1e-9, 0.0, Tolerance("below", 1e-9)).verdict is False


def test_k_zero_ignores_the_se_and_the_floor_widens_the_allowance():
    assert _claim(0.5, float("nan"), Tolerance("at_most", 1.0)).verdict is True
    assert _claim(1.05, 0.0, Tolerance("at_most", 1.0, k=3, floor=0.1)).verdict is True
    assert _claim(1.05, 0.01, Tolerance("at_most", 1.0, k=3)).verdict is False
    assert Tolerance("at_most", 1.0, k=3, floor=0.1).allowance(0.1) == pytest.approx(0.3)


def test_measured_only_claim_has_no_verdict():
    c = _claim(3.0)
    assert c.verdict is None and c.reason == ""
    assert _claim(float("nan")).verdict is None  # nothing measured, nothing claimed


@pytest.mark.parametrize("kind", sorted(EDGES))
def test_a_value_that_is_not_a_number_is_never_yes(kind):
    c = _claim(float("nan"), 0.0, Tolerance(kind, 0.0, why="a reason"))
    assert c.verdict is False and "not a number" in c.reason


def test_an_unknown_se_fails_a_tolerance_that_needs_it():
    for se in (float("nan"), float("inf")):
        c = _claim(5.0, se, Tolerance("at_most", 10.0, k=3))
        assert c.verdict is False and "s.e." in c.reason
    assert _claim(1.0, 0.0, Tolerance("at_most", float("nan"))).verdict is False


def test_numpy_numbers_become_plain_floats_and_verdicts_plain_bools():
    c = _claim(np.float64(2.0), np.float32(0.1), Tolerance("above", np.int64(1), k=np.float64(3)))
    assert type(c.value) is float and type(c.tolerance.bound) is float
    assert c.verdict is True and type(c.verdict) is bool


def test_claim_with_parts_is_decided_by_all_of_them():
    yes = Tolerance("above", 0.0)
    sim = Claim("E9.x.sim", "sim", "m", 1.0, 0.0, yes)
    ode_no = Claim("E9.x.ode", "ode", "m", -1.0, 0.0, yes)
    only = Claim("E9.x.extra", "extra", "m", 1.0)
    assert Claim("E9.x", "s", "m", all_of=(sim, only)).verdict is True
    both = Claim("E9.x", "s", "m", all_of=(sim, ode_no))
    assert both.verdict is False and both.reason.startswith("sim: ") and "ode: " in both.reason
    assert Claim("E9.x", "s", "m", all_of=(only,)).verdict is None
    assert both.value_text() == "sim 1 · ode -1"
    with pytest.raises(ValueError, match="extend its id"):
        Claim("E9.y", "s", "m", all_of=(sim,))
    with pytest.raises(ValueError, match="no tolerance of its own"):
        Claim("E9.x", "s", "m", tolerance=yes, all_of=(sim,))


def test_bad_tolerances_are_refused():
    with pytest.raises(ValueError, match="kind"):
        Tolerance("roughly", 1.0)
    with pytest.raises(ValueError, match="≥ 0"):
        Tolerance("above", 1.0, k=-3)


def test_json_round_trip_keeps_every_field_and_the_verdict():
    tol = Tolerance("at_most", 0.02, k=3, why="why", set_after_data=True)
    parts = (Claim("E9.x.a", "a", "m", 0.01, 0.001, tol, unit="%"),
             Claim("E9.x.b", "b", "m", float("inf"), 0.0, tol),
             Claim("E9.x.c", "c", "m", float("nan")))  # fmt: skip
    c = Claim("E9.x", "s", "m", detail="d", all_of=parts)
    data = c.as_dict()
    assert data["verdict"] is False and data["all_of"][0]["tolerance"] == {
        "kind": "at_most", "bound": 0.02, "k": 3.0, "floor": 0.0, "why": "why",
        "set_after_data": True}  # fmt: skip
    assert data["all_of"][1]["value"] == "inf" and data["all_of"][2]["value"] is None
    back = Claim.from_dict(data)
    assert back.all_of[:2] == c.all_of[:2] and math.isnan(back.all_of[2].value)
    assert back.verdict is False and back.detail == "d"


def test_value_text():
    assert _claim(0.0312, 0.0041, unit="%").value_text() == "3.12 ± 0.41 %"
    assert _claim(3.0, 0.0, unit="of 4 seeds").value_text() == "3 of 4 seeds"
    assert _claim(float("nan")).value_text() == "n/a"
    assert number(1234.5) == "1.23e+03"


def test_context_refuses_a_claim_of_another_experiment_or_a_repeated_id(tmp_path):
    ctx = Context("E9", {}, "smoke", tmp_path)
    ctx.claim(Claim("E9.a", "s", "m", 1.0))
    with pytest.raises(ValueError, match=r"must start with 'E9\.'"):
        ctx.claim(Claim("E8.a", "s", "m", 1.0))
    with pytest.raises(ValueError, match="twice"):
        ctx.claim(Claim("E9.a", "s", "m", 2.0))
    assert [c.id for c in ctx.outcome.claims] == ["E9.a"]


# ------------------------------------------------------------------------------- the report
LONG = "a reason that runs to a whole paragraph, with numbers 0.123 and 4.56 and words, " * 6


def _outcomes():
    tol = Tolerance("above", 0.0, k=3, why=LONG)
    parts = tuple(Claim(f"E9.b.{k}", k, LONG, 0.03, 0.004, tol, unit="%") for k in ("sim", "ode"))
    return [
        Outcome("E9", "nine", claims=[
            Claim("E9.a", "A holds | with a pipe and K*E[θ]", LONG, 3, 0.0,
                  Tolerance("at_least", 4, why=LONG, set_after_data=True), unit="of 4 seeds",
                  detail=LONG),
            Claim("E9.b", "B holds in simulation and ODE", LONG, all_of=parts),
            Claim("E9.c", "C is only measured", LONG, 0.5),
        ]),
        Outcome("E8", "eight", error="RuntimeError: boom\nTraceback …"),
    ]  # fmt: skip


def test_compact_table_has_one_short_line_per_claim():
    rows = claims_table(_outcomes())
    assert rows[0] == "| exp. | claim | value ± s.e. | verdict |"
    body = rows[2:]
    assert len(body) == 3 + 1  # three claims, one failed experiment
    assert body[0] == "| E9 | A holds \\| with a pipe and K\\*E\\[θ\\] | 3 of 4 seeds | NO |"
    assert (
        body[1]
        == "| E9 | B holds in simulation and ODE | sim 3.00 ± 0.40 · ode 3.00 ± 0.40 % | yes |"
    )
    assert body[2].endswith("| 0.5 | — |")
    assert body[3] == "| E8 | (experiment failed) | `RuntimeError: boom` | NO |"
    for row in body:  # no paragraph in a cell: the reasons and measures are not in the table
        cells = re.split(r"(?<!\\)\|", row)[1:-1]
        assert len(cells) == 4 and all(len(c) < 80 for c in cells), row
        assert "paragraph" not in row


def test_details_list_measure_tolerance_reason_check_and_parts():
    md = markdown(_outcomes(), {"python": "3"}, "smoke", 60.0)
    assert "1 claim holds, 1 do not" in md
    section = md[md.index("### Claims of E9") : md.index("## E8")]
    assert "- **NO** · A holds \\| with a pipe and K\\*E\\[θ\\] (`E9.a`): 3 of 4 seeds" in section
    assert "  - tolerance: value ≥ 4 of 4 seeds *(tolerance set after seeing data)*" in section
    assert "  - check: 3 of 4 seeds ≥ 4 of 4 seeds fails" in section
    assert (
        "  - **yes** · sim: 3.00 ± 0.40 %" in section
        and "  - **yes** · ode: 3.00 ± 0.40 %" in section
    )
    assert section.count("- why: ") == 2  # E9.a's, and the parts' shared reason once
    assert "  - measured only: no tolerance, no verdict" in section


def test_html_colours_the_verdicts_and_json_reads_back(tmp_path):
    outcomes = _outcomes()
    write_report(outcomes, tmp_path, "smoke", 60.0)
    page = (tmp_path / "index.html").read_text()
    cells = re.findall(r'<td class="(v-[a-z]+)">([^<]*)</td>', page)
    assert cells == [("v-no", "NO"), ("v-yes", "yes"), ("v-none", "—"), ("v-no", "NO")]
    assert "td.v-yes{" in page and "with a pipe and K*E[θ]</td>" in page  # literal, no emphasis
    back = read_outcomes(tmp_path)
    assert [c for o in back for c in o.claims] == [c for o in outcomes for c in o.claims]
    import json

    data = json.loads((tmp_path / "outcomes.json").read_text())
    (a, b, c) = data["experiments"][0]["claims"]
    assert (a["id"], a["verdict"], a["tolerance"]["set_after_data"]) == ("E9.a", False, True)
    assert b["verdict"] is True and [p["id"] for p in b["all_of"]] == ["E9.b.sim", "E9.b.ode"]
    assert c["verdict"] is None and c["tolerance"] is None


def test_an_older_outcomes_json_is_refused_with_the_fix(tmp_path):
    """An outcomes.json from before claims were data (claims as text, no ids — the format of the
    gallery until 2026-12-02): reading it says so and how to regenerate it, instead of a KeyError
    deep in Claim.from_dict."""
    import json

    old_claim = {
        "claim": "Heads first move together",
        "quantity": "first t …",
        "value": "t = 2.17",
        "holds": True,
        "note": "",
        "tolerance": "cos ≥ 0.95",
    }
    data = {"scale": "quick", "seconds": 540.0, "environment": {},
            "experiments": [{"id": "E1", "title": "Two phases", "seconds": 151.9, "error": None,
                             "claims": [old_claim], "figures": [], "configs": []}]}  # fmt: skip
    (tmp_path / "outcomes.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=r"older headspec .* fix: run `headspec reproduce` again"):
        read_outcomes(tmp_path)


def test_the_committed_gallery_reads_back_with_its_verdicts():
    """docs/gallery (the report the site and the README show) is in today's format: every claim
    reads back, its verdict recomputed from its data equals the one written, and the report's
    headline count is those verdicts'."""
    import json
    import re

    gallery = Path(__file__).parents[1] / "docs" / "gallery"
    outcomes = read_outcomes(gallery)
    written = json.loads((gallery / "outcomes.json").read_text(encoding="utf-8"))
    claims = [c for o in outcomes for c in o.claims]
    stored = [c["verdict"] for e in written["experiments"] for c in e["claims"]]
    assert [c.verdict for c in claims] == stored
    head = (gallery / "index.md").read_text(encoding="utf-8")
    hold, fail = map(int, re.search(r"(\d+) claims hold, (\d+) do not", head).groups())
    assert (hold, fail) == (stored.count(True), stored.count(False))
