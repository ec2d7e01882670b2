"""Issue "Hardening and first contact", items 2, 6 and 9 (in part): size limits and plausible
ranges, refused before any work.

- item 2: runs that cannot fit in memory, never end or overflow (seeds, record.n_mc, task.D with
  the full engine, task.L, bayes.samples, theory.n, prune --n, sweeps of 10⁹ points, train.T =
  1e30, 64-bit overflow, config files that are devices or too large) are refused with the option,
  the estimate and a fix; the estimates themselves are unit-tested (no test allocates gigabytes);
- item 6: implausible initial keys, biases and signals (model.sigma0 = 1e30, model.b0 = 1e308,
  task.latent.scale = 1e300, …) are refused naming the field and the range, and a divergence names
  an unusual setting as its likely cause before the learning rate;
- item 9: `theory --init-from SIM.nc --seed 99` is refused before "compiling…".

Each CLI case: exit code 2, no traceback, the field or option named, "fix", no output file.
"""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import xarray as xr
from typer.testing import CliRunner

from headspec.apps.cli import app
from headspec.conventions import budget
from headspec.conventions.budget import check_budget, estimate
from headspec.conventions.config import (
    BayesRunConfig,
    ConfigError,
    SimulateConfig,
    TheoryConfig,
    load_config,
    merge,
    read_toml,
)
from results import write_result

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
G = 1000**3
E1 = str(ROOT / "experiments/two_phase.toml")

# (command and arguments, texts the one-line refusal must contain). {tmp}: a temporary folder,
# {sim}/{theory}: tiny result files, {big}: a 2 MB "config". simulate/theory get -o {tmp}/out.nc.
CASES = {
    # ---- item 2: memory
    "simulate-1e9-seeds": (["simulate", "--seeds", "1000000000"], ("seeds", "memory", "GB")),
    "simulate-n_mc-1e10": (
        ["simulate", "--set", "record.n_mc=10000000000"],
        ("record.n_mc", "memory"),
    ),
    "simulate-full-D-1e9": (
        ["simulate", "--D", "1000000000", "--seeds", "1"],
        ("task.D", "memory", "train.engine (--engine) = reduced"),
    ),
    "simulate-test-set": (
        ["simulate", "--D", "100000", "--set", "record.n_test=100000000"],
        ("record.n_test", "memory"),
    ),
    "simulate-reduced-huge-batch": (
        ["simulate", "--engine", "reduced", "--D", "2000000", "--set", "train.batch=100000"],
        ("train.batch", "memory"),
    ),
    "theory-n-1e10": (["theory", "--n", "10000000000"], ("theory.n", "memory")),
    # every sample's Jacobian kept: P² = (64·2 + 64² + 64)² numbers each, ~600 GB at H = 64
    "saddles-H-64": (["saddles", "-c", E1, "--set", "model.H=64"], ("model.H", "memory")),
    "theory-1e9-seeds": (["theory", "--set", "seeds=1000000000"], ("seeds", "memory")),
    "bayes-L-1e9": (["bayes", "--L", "1000000000"], ("task.L", "memory")),
    "bayes-finite-D-1e9": (
        ["bayes", "--route", "finite", "--D", "1000000000"],
        ("task.D (--D)", "memory", "bayes.route (--route) = projected"),
    ),
    "bayes-samples-1e10": (["bayes", "-n", "10000000000"], ("bayes.samples", "memory")),
    "prune-n-1e11": (["prune", "{sim}", "--n", "100000000000"], ("--n", "memory")),
    "prune-random-orders": (
        ["prune", "{sim}", "--random-orders", "1000000000000"],
        ("--random-orders", "memory"),
    ),
    "diffusion-n-1e10": (
        ["simulate", "--engine", "diffusion", "--set", "diffusion.n=10000000000"],
        ("diffusion.n", "memory"),
    ),
    # ---- item 2: work, overflow, files
    "diffusion-dt-tiny": (
        ["simulate", "--engine", "diffusion", "--set", "diffusion.dt=1e-300"],
        ("diffusion.dt", "Euler–Maruyama steps"),
    ),
    "simulate-T-1e30": (["simulate", "--T", "1e30"], ("train.T", "SGD steps")),
    "simulate-steps-beyond-1e12": (
        ["simulate", "--engine", "reduced", "--D", "1000000000", "--T", "10000"],
        ("train.T", "task.D", "SGD steps"),
    ),
    "theory-T-1e30": (["theory", "--T", "1e30"], ("train.T", "2^53")),
    "simulate-int64-overflow": (
        ["simulate", "--set", "record.n_test=100000000000000000000"],
        ("record.n_test", "64-bit"),
    ),
    "simulate-config-dev-zero": (["simulate", "-c", "/dev/zero"], ("/dev/zero", "regular file")),
    "bayes-config-dev-zero": (["bayes", "-c", "/dev/zero"], ("/dev/zero", "regular file")),
    "theory-config-too-large": (["theory", "-c", "{big}"], ("big.toml", "larger than 1 MiB")),
    "sweep-spec-dev-zero": (["sweep", "/dev/zero", "-o", "{tmp}/sw"], ("/dev/zero",)),
    # ---- item 6: plausible ranges
    "sigma0-1e30": (["simulate", "--set", "model.sigma0=1e30"], ("model.sigma0", "0 … 1000")),
    "b0-1e308": (["simulate", "--set", "model.b0=1e308"], ("model.b0", "-1000 … 1000")),
    "b0-negative": (["theory", "--set", "model.b0=-5000"], ("model.b0", "plausible range")),
    "scale-1e300": (["simulate", "--scale", "1e300"], ("task.latent.scale", "0 … 1000")),
    "bayes-scale-1e300": (["bayes", "--scale", "1e300"], ("task.latent.scale", "1000")),
    "atoms-1e200": (
        ["bayes", "--latent", '{kind="discrete", atoms=[[1e200]]}'],
        ("task.latent.atoms", "plausible range"),
    ),
    "spike-a-2e3": (
        ["simulate", "--latent", '{kind="spike", a=[2e3]}'],
        ("task.latent.a", "plausible range"),
    ),
    "scaled-signal": (
        ["theory", "--latent", '{kind="flipped_spike", a=[100.0]}', "--scale", "100"],
        ("task.latent", "scale·θ", "10000"),
    ),
    "gaussian-var-1e7": (
        ["simulate", "--latent", '{kind="gaussian", mean=[0.0], var=[1e7]}'],
        ("task.latent.var", "plausible range"),
    ),
    "gaussian-cov-1e7": (
        ["bayes", "--latent", '{kind="gaussian", mean=[0.0], cov=[[1e7]]}'],
        ("task.latent.cov", "plausible range"),
    ),
    "given-M-1e4": (
        [
            "theory",
            "--H",
            "1",
            "--set",
            'theory.init={kind="given", M=[[1e4, 0.0]], Q=[[1e9]]}',
        ],
        ("theory.init.M", "plausible range"),
    ),
    # ---- item 9: --init-from with a seed not in the file, or a theory file, before compiling
    "init-from-missing-seed": (
        ["theory", "--init-from", "{sim}", "--seed", "99"],
        ("--seed 99", "use one of [0, 1]"),
    ),
    "init-from-theory-file": (["theory", "--init-from", "{theory}"], ("--init-from", "theory")),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("guards")
    big = folder / "big.toml"
    big.write_text("# padding\n" * 200_000)  # 2 MB of comments: valid TOML, too large
    return {
        "sim": str(write_result(folder / "sim.nc", "simulation", "task.D=20", test_risk=0.45)),
        "theory": str(write_result(folder / "theory.nc", "theory", "task.D=20")),
        "big": str(big),
    }


@pytest.mark.parametrize("name", list(CASES))
def test_refused_before_any_work(name, files, tmp_path):
    args, expect = CASES[name]
    subs = {"{tmp}": str(tmp_path), **{"{" + k + "}": v for k, v in files.items()}}
    args = [subs.get(a, a).replace("{tmp}", str(tmp_path)) for a in args]
    out = tmp_path / "out.nc"
    if args[0] in ("simulate", "theory", "saddles"):
        args += ["-o", str(out)]
    if args[0] == "bayes":
        args += ["--json", str(tmp_path / "out.json")]
    if args[0] == "prune":
        args += ["-o", str(tmp_path / "figs")]
    res = runner.invoke(app, args)
    text = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit | None)
    assert all(e in text for e in expect), res.output
    assert "fix" in text and text.startswith("error:"), res.output
    assert "compiling" not in text and "training" not in text  # refused before any work
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, nothing created


def test_real_entry_point_refuses_dev_zero_and_a_billion_seeds_at_once(tmp_path):
    """`-c /dev/zero` used to hang and 10⁹ seeds took the whole machine: the installed command
    now exits 2 at once (one process, both refusals: the config file is read first)."""
    import subprocess
    import sys

    out = tmp_path / "x.nc"
    res = subprocess.run(
        [sys.executable, "-m", "headspec.apps.cli", "simulate", "-c", "/dev/zero",
         "--seeds", "1000000000", "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "/dev/zero" in res.stderr and "fix" in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()


def test_ten_to_the_nine_point_sweep_is_refused_before_its_configs(tmp_path):
    """Three axes of 1000 values: 10⁹ points (it used to build configs until MemoryError)."""
    spec = tmp_path / "spec.toml"
    spec.write_text(
        '[sweep]\nkind = "simulate"\nout = "never"\n[axes]\n'
        '"task.latent.scale" = {start = 0.1, stop = 2.0, num = 1000}\n'
        '"train.lr" = {start = 0.1, stop = 2.0, num = 1000}\n'
        '"model.sigma0" = {start = 0.01, stop = 1.0, num = 1000}\n'
    )
    res = runner.invoke(app, ["sweep", str(spec), "-o", str(tmp_path / "out")])
    text = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "1,000,000,000 grid points" in text and "axes" in text and "fix" in text
    assert "Traceback" not in res.output and not (tmp_path / "out").exists()
    # seed blocks count as tasks too, and a point that never ends is refused by name
    spec.write_text('[sweep]\nkind = "simulate"\nout = "never"\n[axes]\n"model.H" = [1, 2]\n')
    for extra, expect in (
        (
            ["--set", "sweep.seeds=1000000000", "--set", "sweep.seeds_per_task=1"],
            "2,000,000,000 tasks",
        ),
        (["--set", "config.train.T=1e30"], "sweep point model.H = 1: train.T"),
    ):
        res = runner.invoke(app, ["sweep", str(spec), "-o", str(tmp_path / "out"), *extra])
        text = " ".join(res.output.split())
        assert res.exit_code == 2 and expect in text and "fix" in text, res.output
        assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- the estimates
def _sim(*ov: str) -> SimulateConfig:
    return load_config(SimulateConfig, overrides=list(ov))


def test_estimate_is_affine_in_seeds_and_grows_with_each_size():
    """Per-seed parts scale exactly with the seeds; the estimate grows with D (full engine),
    batch, L, record.n_mc; the reduced engine's does not depend on D."""
    e = [estimate(_sim(f"seeds={s}", "record.n_test=16")).total for s in (1, 2, 3, 10)]
    assert e[1] - e[0] == pytest.approx(e[2] - e[1]) and e[3] > e[2] > e[1] > e[0]
    assert e[3] - e[0] == pytest.approx(9 * (e[1] - e[0]))
    for key, small, large in (
        ("task.D", 100, 10_000),
        ("train.batch", 1, 64),
        ("task.L", 4, 40),
        ("record.n_mc", 256, 65_536),
        ("model.H", 1, 16),
    ):
        assert estimate(_sim(f"{key}={large}")).total > estimate(_sim(f"{key}={small}")).total
    red = [estimate(_sim('train.engine="reduced"', f"task.D={D}")).total for D in (100, 10**9)]
    assert red[0] == red[1]
    full = [estimate(_sim(f"task.D={D}", "record.n_test=0")).total for D in (10**4, 10**5, 10**6)]
    assert full[2] - full[1] == pytest.approx(10 * (full[1] - full[0]))  # D-dim. tensors
    assert full[2] > 10 * red[0]


def test_estimate_of_theory_and_bayes_grows_with_samples():
    th = [
        estimate(load_config(TheoryConfig, overrides=[f"theory.n={n}"])).total for n in (1024, 8192)
    ]
    assert th[1] > 4 * th[0] - 1e8  # drift samples dominate
    cyc = estimate(load_config(TheoryConfig, overrides=["task.D=100000"])).total  # head-cyclic
    assert cyc > estimate(load_config(TheoryConfig, overrides=["task.D=1000"])).total
    by = [
        estimate(load_config(BayesRunConfig, overrides=[f"bayes.samples={n}"])).total
        for n in (10**5, 10**7)
    ]
    assert by[1] > by[0] + 70 * 8 * 10**6  # five predictors' losses of 10^7 samples, twice
    fin = load_config(BayesRunConfig, overrides=['bayes.route="finite"', "task.D=100000"])
    assert estimate(fin).total > by[0]
    pr = [budget.estimate_prune(n, 10, 4, 2, 2).total for n in (1000, 10**6)]
    assert pr[1] > 500 * pr[0]


def test_check_budget_refuses_exactly_above_the_available_memory():
    cfg = _sim("task.D=1000", "seeds=4")
    need = estimate(cfg).total
    assert check_budget(cfg, available=int(need) + 1).total == need
    with pytest.raises(ConfigError, match=r"simulate needs ~.* of memory.*; fix: "):
        check_budget(cfg, available=int(need) - 1)
    assert budget.format_bytes(16e9) == "16 GB" and budget.format_bytes(3.9e21) == "10^21 bytes"


def test_available_memory_and_its_override(monkeypatch):
    monkeypatch.delenv("HEADSPEC_MEMORY", raising=False)
    assert 2**26 < budget.available_memory() < 2**50
    monkeypatch.setenv("HEADSPEC_MEMORY", "3G")
    assert budget.available_memory() == 3 * 2**30
    with pytest.raises(ConfigError, match="seeds"):
        check_budget(_sim("seeds=100000"))  # 3 GiB × SAFETY is too little for 10^5 seeds
    assert budget.parse_bytes("512M") == 512 * 2**20 and budget.parse_bytes("1000") == 1000
    monkeypatch.setenv("HEADSPEC_MEMORY", "lots")
    with pytest.raises(ConfigError, match="HEADSPEC_MEMORY"):
        budget.available_memory()


def _recipe_configs():
    """(name, config) for experiments/*.toml and every registered recipe at each scale, resolved
    as the recipe's Context resolves it (its [config] with the scale's sections, `record`
    included; the seeds of its validated parameters; the recipe's own engine for the
    simulations), D swept as E2 sweeps it."""
    from headspec.apps.experiments import RECIPES
    from headspec.apps.experiments.params import resolve, split_spec
    from headspec.apps.experiments.runner import load_spec

    out = [
        ("two_phase", SimulateConfig, read_toml(ROOT / "experiments/two_phase.toml")),
        ("bayes_default", BayesRunConfig, read_toml(ROOT / "experiments/bayes_default.toml")),
        ("flipped_spike", BayesRunConfig, read_toml(ROOT / "experiments/flipped_spike.toml")),
    ]
    shipped = {
        Path(p).name for p in glob.glob(str(ROOT / "src/headspec/apps/experiments/recipes/*.toml"))
    }
    assert {r.file for r in RECIPES.values()} == shipped  # every shipped recipe is registered
    for r in RECIPES.values():
        spec = load_spec(r.id)
        assert set(spec["scale"]) >= {"smoke", "quick", "overnight", "full"}, r.id
        for scale in spec["scale"]:
            p = resolve(spec, scale, r.params, r.file)
            _, config, _ = split_spec(spec, scale)  # what Context.cfg starts from
            seeds = getattr(p, "seeds", 1)
            for D in getattr(p, "dims", None) or [config["task"].get("D", 1000)]:
                d = merge(config, {"task": {"D": D}, "seeds": seeds})
                name = f"{r.file.removesuffix('.toml')} {scale} D={D}"
                out.append((name, TheoryConfig, {k: v for k, v in d.items() if k != "diffusion"}))
                sim = {k: v for k, v in d.items() if k != "theory"}
                engine = sim.get("train", {}).get("engine", "full")
                out.append((f"{name} {engine}", SimulateConfig, sim))
    return out


def test_todays_runs_fit_an_8_gb_machine():
    """Every shipped config and experiment recipe, and the large runs of the README, pass."""
    cases = [
        *_recipe_configs(),
        ("reduced D=1e4, 64 seeds", SimulateConfig,
         {"task": {"D": 10_000}, "train": {"engine": "reduced", "T": 200.0}, "seeds": 64}),
        ("full D=1e4, 64 seeds", SimulateConfig,
         {"task": {"D": 10_000}, "train": {"T": 200.0}, "seeds": 64}),
        ("bayes 1e7 samples", BayesRunConfig, {"bayes": {"samples": 10**7}}),
    ]  # fmt: skip
    assert len(cases) > 60
    for name, model, data in cases:  # full scale is for a cluster: nodes of 32 GB
        available = (32 if " full " in name else 8) * G
        check_budget(model.model_validate(data), available=available)  # raises if refused
        assert name


def test_int_beyond_64_bits_and_endless_runs_are_refused_by_check_work():
    with pytest.raises(
        ConfigError, match=r"record\.n_mc = 10+ does not fit a 64-bit integer.*; fix"
    ):
        budget.check_work(_sim("record.n_mc=100000000000000000000"))
    with pytest.raises(ConfigError, match=r"SGD steps.*fix: lower train\.T"):
        budget.check_work(_sim("train.T=1e13", "task.D=1000"))
    budget.check_work(_sim("train.T=1e8", "task.D=1000"))  # 10^11 steps: long but allowed
    diffusion = _sim('train.engine="diffusion"', "task.D=1000000000000")  # cost free of D
    budget.check_work(diffusion)
    same = estimate(_sim('train.engine="diffusion"', "task.D=10000")).total  # both head-cyclic
    assert estimate(diffusion).total == same
    assert estimate(diffusion).total < 4 * G  # 8 seeds, diffusion.n = 8192 head-cyclic
    budget.check_work(load_config(TheoryConfig, overrides=["train.T=1e9", "task.D=1000000"]))


# ----------------------------------------------------------------------------- item 6
def test_plausible_ranges_accept_their_bounds_and_the_paper_values():
    for ov in (
        "model.sigma0=1000.0",
        "model.b0=-1000.0",
        "task.latent.scale=500.0",  # × the default atoms' 2: 1000
        'task.latent={kind="spike", a=[1.0], scale=1000.0}',
        'task.latent={kind="gaussian", mean=[0.0], var=[1e6]}',
        'task.latent={kind="discrete", atoms=[[3.0, 0.0], [0.0, 3.0]], scale=1.5}',
    ):
        _sim(ov)
    with pytest.raises(ConfigError, match=r"task\.latent: scale²·Var θ reaches 1e\+08"):
        _sim('task.latent={kind="gaussian", mean=[0.0], var=[1e4], scale=100.0}')


def _diverged(config: SimulateConfig) -> xr.Dataset:
    """A minimal result whose seed 0 diverged at step 7 (t = 0.35)."""
    return xr.Dataset(
        {"fail_step": ("seed", [7]), "fail_t": ("seed", [0.35])},
        coords={"seed": [0]},
        attrs={"lr": 2.0, "config_json": config.model_dump_json()},
    )


def test_divergence_names_an_unusual_setting_before_the_learning_rate():
    from headspec.conventions.runs import divergence_message

    msg = divergence_message(_diverged(_sim("model.sigma0=500.0")), 0)
    assert "likely cause: model.sigma0 = 500" in msg and "otherwise the learning rate" in msg
    msg = divergence_message(_diverged(_sim("task.latent.scale=100.0")), 0)
    assert "likely cause: task.latent" in msg and "task.latent.scale" in msg
    msg = divergence_message(_diverged(_sim("model.b0=-200.0")), 0)
    assert "model.b0 = -200" in msg
    plain = divergence_message(_diverged(_sim()), 0)
    assert "likely cause" not in plain and "learning rate (train.lr = 2.0)" in plain
    assert "step 7 (t = 0.35)" in plain


def test_refusals_name_the_running_commands_own_options():
    """headspec.conventions names settings by their config keys (it knows no CLI); the CLI adds
    the option that sets each one, only where the command has that option."""
    from headspec.apps.cli.common import with_flags

    text = "a smaller task.D or task.L, or the projected route: bayes.route = projected"
    assert with_flags(text, "bayes") == (
        "a smaller task.D (--D) or task.L (--L), or the projected route: bayes.route (--route) "
        "= projected"
    )
    assert with_flags("fewer prune.random_orders; prune.n = 3", "prune") == (
        "fewer --random-orders; --n = 3"
    )
    assert with_flags(text, "sweep") == text  # no such options there
    assert with_flags("task.D (--D) and task.Dx", "simulate") == "task.D (--D) and task.Dx"
