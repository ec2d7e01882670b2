"""The recipe registry and the recipes' typed parameters: every shipped recipe is registered and
validates at every scale; a bad value is refused with the file, table, field and fix (exit 2 in
the CLI, before anything runs); adding a recipe is one module and one TOML."""

from __future__ import annotations

import shutil
import tomllib

import pytest
from typer.testing import CliRunner

from headspec.apps import experiments
from headspec.apps.cli import app
from headspec.apps.experiments import RECIPES, Claim, RecipeError, Tolerance, recipe, runner
from headspec.apps.experiments.params import RecipeParams, resolve
from headspec.apps.experiments.registry import Recipe


def _spec(exp_id):
    return runner.load_spec(exp_id)


def test_every_shipped_recipe_is_registered_in_order_and_validates_at_every_scale():
    assert list(RECIPES) == [f"E{i}" for i in range(1, len(RECIPES) + 1)] and len(RECIPES) >= 8
    shipped = {p.name for p in experiments.experiments_dir().iterdir() if p.suffix == ".toml"}
    assert {r.file for r in RECIPES.values()} == shipped
    for r in RECIPES.values():
        assert r.params is not RecipeParams and r.run.__module__.endswith(r.id.lower())
        spec = _spec(r.id)
        for scale in ("smoke", "quick", "overnight", "full"):
            p = resolve(spec, scale, r.params, r.file)
            assert p.title and p.seeds >= 1
    experiments.check(list(RECIPES), "quick")


@pytest.mark.parametrize(
    ("exp_id", "table", "key", "value", "expect"),
    [
        ("E1", "scale.smoke", "seeds", 0, ["[scale.smoke] seeds = 0", "greater than or equal to 1",
                                          "fix: give simulation seeds (an integer ≥ 1)"]),
        ("E2", "scale.smoke", "spec_cos", 1.5, ["[scale.smoke] spec_cos = 1.5", "≤ 1"]),
        ("E3", "experiment", "activations", ["softmax", "relu"],
         ["activations.1 = 'relu'", '"softmax" or "softmax1" or "bayes_softmax"']),
        ("E6", "experiment", "margni", 0.1, ["unknown parameter 'margni'", "margin"]),
        ("E6", "experiment", "contrast_head_cyclic", "sometimes", ['"auto" or true or false']),
        ("E1", "experiment", "after_data", {"no_such": "x"},
         ["after_data", "'no_such' is no parameter", "fix:"]),
    ],
)  # fmt: skip
def test_a_bad_parameter_names_file_table_field_and_fix(exp_id, table, key, value, expect):
    spec = _spec(exp_id)
    where = spec
    for part in table.split("."):
        where = where[part]
    where[key] = value
    r = RECIPES[exp_id]
    with pytest.raises(RecipeError) as e:
        resolve(spec, "smoke", r.params, r.file)
    assert str(e.value).startswith(r.file + ": ")
    for text in expect:
        assert text in str(e.value), (text, str(e.value))


def test_a_tolerance_set_after_data_is_stated_in_the_toml():
    spec = _spec("E1")
    p = resolve(spec, "quick", RECIPES["E1"].params, "e1")
    assert spec["experiment"]["after_data"] == {"saddle_tol": p.after_data["saddle_tol"]}
    tol = p.tolerance("at_most", "saddle_tol", why="the reason")
    assert tol.set_after_data and tol.bound == p.saddle_tol
    assert tol.why == p.after_data["saddle_tol"] + ", for this reason: the reason"
    plain = p.tolerance("at_most", "ode_risk_tol", why="the reason")
    assert not plain.set_after_data and plain.why == "the reason"


def test_reproduce_refuses_a_bad_recipe_before_running_anything(tmp_path, monkeypatch):
    folder = tmp_path / "recipes"
    shutil.copytree(experiments.experiments_dir(), folder)
    path = folder / RECIPES["E4"].file
    path.write_text(path.read_text().replace("pm_cos = 0.9", "pm_cos = 2.0"))
    monkeypatch.setattr(runner, "experiments_dir", lambda: folder)
    out = tmp_path / "report"
    with pytest.raises(RecipeError, match=r"pm_cos = 2\.0"):
        experiments.reproduce(scale="smoke", outdir=out, only=["E4"], folder=folder)
    assert not out.exists()
    r = CliRunner().invoke(app, ["reproduce", "--scale", "smoke", "--only", "E4", "--out",
                                 str(out)])  # fmt: skip
    text = r.stdout + r.stderr
    assert r.exit_code == 2 and "e4_bayes_softmax.toml: [experiment] pm_cos = 2.0" in text
    assert "fix: give" in text and not out.exists()


def test_the_registry_refuses_a_second_recipe_under_one_id():
    def other(ctx):
        """Another recipe function under E1's id (its body never runs)."""

    with pytest.raises(ValueError, match="registered twice"):
        recipe("E1", "e1_two_phases.toml")(other)
    assert RECIPES["E1"].run is experiments.e1.run


def test_adding_a_recipe_is_one_module_and_one_toml(tmp_path, monkeypatch):
    """A new recipe registers itself with @recipe (as a module e99.py would) and its TOML; the
    runner, the report and --only then know it, with no list to edit."""
    from pydantic import Field

    class Params(RecipeParams):
        answer: int = Field(ge=0, description="the answer")

    monkeypatch.setattr(runner, "RECIPES", RECIPES)  # the same table, restored below
    before = list(RECIPES)
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "e99_answer.toml").write_text('[experiment]\ntitle = "An answer"\nanswer = 42\n')
    try:

        @recipe("E99", "e99_answer.toml", Params)
        def run(ctx):
            ctx.claim(Claim("E99.answer", "the answer is 42", "answer", ctx.params.answer, 0.0,
                            Tolerance("at_least", 42, why="known")))  # fmt: skip

        assert list(RECIPES)[-1] == "E99"
        assert RECIPES["E99"] == Recipe("E99", "e99_answer.toml", run, Params)
        (o,) = experiments.reproduce(scale="smoke", outdir=tmp_path / "r", only=["E99"],
                                     folder=folder)  # fmt: skip
        assert o.error is None and o.title == "An answer" and o.claims[0].verdict is True
        assert "An answer" in (tmp_path / "r" / "index.md").read_text()
    finally:
        RECIPES.pop("E99", None)
    assert list(RECIPES) == before


def test_shipped_tomls_parse():
    for r in RECIPES.values():
        with (experiments.experiments_dir() / r.file).open("rb") as f:
            assert tomllib.load(f)["experiment"]["title"]
