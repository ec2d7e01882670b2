"""Saddles of a trajectory (headspec.dynamics.saddles, `headspec saddles`): slow stretches are
found between drops, polished into fixed points whose spectra predict the escape; the command
refuses bad input before any work and writes netCDF, JSON and a figure."""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from typer.testing import CliRunner

from headspec.apps.cli import app
from headspec.core.attention import Softmax
from headspec.core.latent import Discrete
from headspec.core.model import Model
from headspec.core.observables import BaseSamples
from headspec.dynamics.analysis import slow_stretches
from headspec.dynamics.ode import DriftProblem, Exact, OrderParameters
from headspec.dynamics.problem import FINE
from headspec.dynamics.saddles import describe_mode, group_heads, saddle_at

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
E1 = ROOT / "experiments" / "two_phase.toml"


def _two_drops(t):
    """0.5 → 0.3 near t = 3, then → 0.2 near t = 100 (logistic in log t)."""
    x = np.log(t)
    return 0.2 + 0.2 / (1 + np.exp(4 * (x - np.log(3)))) + 0.1 / (1 + np.exp(4 * (x - np.log(100))))


def test_slow_stretches_sit_between_the_drops_and_at_the_end():
    """A two-drop curve: one stretch on the middle plateau (level 0.3, around t ≈ 17, the
    geometric middle of the drops) and one at the end (level 0.2); the flat start on the log axis
    is not a candidate."""
    t = np.concatenate([[0.0], np.geomspace(0.01, 1e5, 120)])
    found = slow_stretches(t, _two_drops(np.maximum(t, 1e-12)))
    assert len(found) == 2, found
    mid, end = found
    assert abs(mid["level"] - 0.3) < 0.01 and 8 < mid["t_mid"] < 35, mid
    assert (
        mid["t_start"] < mid["t_mid"] < mid["t_end"] and 3 < mid["t_start"] and mid["t_end"] < 100
    )
    assert abs(end["level"] - 0.2) < 0.01 and end["t_end"] == t[-1]


def test_slow_stretches_ignore_noise_and_a_single_drop():
    """Noise of 10⁻⁴ on a two-drop curve adds no stretch (the dip criterion); a single drop has
    only the end."""
    t = np.geomspace(0.01, 1e5, 120)
    rng = np.random.default_rng(0)
    assert len(slow_stretches(t, _two_drops(t) + 1e-4 * rng.standard_normal(t.size))) == 2
    one = 0.2 + 0.3 / (1 + np.exp(4 * (np.log(t) - np.log(3))))
    assert [s["t_end"] for s in slow_stretches(t, one)] == [t[-1]]


def test_group_heads_is_complete_linkage():
    """Head 2 is within 0.98 of head 1 but not of head 0: it starts its own group."""
    c = np.array([[1.0, 0.99, 0.97], [0.99, 1.0, 0.99], [0.97, 0.99, 1.0]])
    assert group_heads(c, 0.98) == [[0, 1], [2]]
    assert group_heads(c, 0.9) == [[0, 1, 2]]


@pytest.mark.slow
def test_e1_common_phase_polished_from_a_perturbed_state():
    """Two softmax heads on E1's law (η = 1), taken 1 % apart near the common phase: polishing
    groups them and lands on the fixed point that least squares finds from a symmetric guess on
    the same samples (two routes, within 10⁻⁶), a true fixed point with the two biases as zero
    modes and one unstable head-difference mode of rate 0.038 (tests/test_fixed_points.py: 0.0383
    on 4096 samples; here within 5 s.e.), and escape time ln(D)/(2λ)."""
    from headspec.dynamics.fixed_points import find_fixed_point

    law = Discrete([[3.0, 0.0], [0.0, 3.0]], [0.7, 0.3])
    base = BaseSamples.sobol(0, law, 10, 2, 2**11)
    M = jnp.array([[1.80, 1.15], [1.82, 1.17]])
    st = OrderParameters(M, M @ M.T + 0.2 * jnp.eye(2) + 0.19 * (1 - jnp.eye(2)), jnp.zeros(2))
    problem = DriftProblem.sampled(Softmax(), law, base, 1.0)
    s = saddle_at(st, problem)
    assert s.groups == ((0, 1),) and s.is_fixed and s.converged, s
    guess = OrderParameters(jnp.array([[1.0, 0.4]]), jnp.array([[1.3]]), jnp.zeros(1))
    direct = find_fixed_point(guess, (2,), problem)
    for a, b in zip(s.state, direct.state, strict=True):
        assert np.allclose(a, b, atol=1e-6), (a, b)
    assert s.n_zero == 2  # the two biases (softmax is shift invariant)
    (lead,) = s.unstable
    assert lead.common < 1e-6 and "head-difference" in describe_mode(lead, 2, 2)
    assert abs(lead.eigenvalue.real - 0.0383) < 5 * lead.se, lead
    assert s.escape_time(1e4) == pytest.approx(np.log(1e4) / (2 * lead.eigenvalue.real))


# ----------------------------------------------------------------------------------- the CLI
SMALL = ["--set", "model.H=2", "--set", "theory.n=256", "--set", "record.points=30",
         "--set", "record.n_mc=256", "--set", "train.T=100", "--n", "256"]  # fmt: skip


@pytest.mark.slow  # test tier: ≥ 20 s of the README tier's cold CI run (docs/tests.md)
def test_cli_saddles_from_config_writes_table_files_and_figure(tmp_path):
    """E1's config with two heads at D = 10⁴ (the exact ODE from the perturbed start stays near
    the common phase until t ≈ 45; at D = 100 it leaves before a slow stretch forms): one slow
    stretch whose fixed point is the common phase (one group of 2, unstable head-difference
    mode) — the point least squares finds from a symmetric guess with the same (exact) method
    and samples (within 10⁻⁶); netCDF, JSON and PNG agree."""
    from headspec.dynamics.fixed_points import find_fixed_point

    out = tmp_path / "s.nc"
    res = runner.invoke(app, ["saddles", "-c", str(E1), *SMALL, "--set", "task.D=10000",
                              "-o", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "fixed points along seed 0" in res.output and "head-difference" in res.output
    sd = xr.load_dataset(out)
    assert sd.attrs["kind"] == "saddles" and sd.attrs["D"] == 10000 and sd.sizes["saddle"] >= 1
    first = sd.isel(saddle=0)
    assert first.group.values.tolist() == [0, 0] and int(first.n_unstable) >= 1
    data = json.loads(out.with_suffix(".json").read_text())
    row = data["saddles"][0]
    assert row["groups"] == [[0, 1]] and row["is_fixed"]
    assert row["fixed_point_risk"] == pytest.approx(float(first.risk))
    assert row["escape_time"] == pytest.approx(np.log(1e4) / (2 * float(first.lead_rate)))
    assert (tmp_path / "s_saddles.png").stat().st_size > 10_000
    law = Discrete([[3.0, 0.0], [0.0, 3.0]], [0.7, 0.3])
    guess = OrderParameters(jnp.array([[1.0, 0.4]]), jnp.array([[1.3]]), jnp.zeros(1))
    base = BaseSamples.sobol(0, law, 10, 2, 256)
    direct = find_fixed_point(
        guess, (2,), DriftProblem(Model(Softmax(), law, 10), 2.0, method=Exact(base, FINE))
    )
    assert np.allclose(first.M, direct.state.M, atol=1e-6), (first.M.values, direct.state.M)


@pytest.fixture(scope="module")
def ok_result(tmp_path_factory):
    """A tiny theory result to point --from at (never analysed: refused before)."""
    tmp_path = tmp_path_factory.mktemp("result")
    from headspec.conventions.config import TheoryConfig, load_config
    from headspec.conventions.results import save
    from headspec.conventions.runs import solve

    cfg = load_config(TheoryConfig, overrides=["model.H=2", "task.L=4", "train.T=0.5",
                      "theory.n=64", "record.points=3", "record.n_mc=64"])  # fmt: skip
    return save(solve(cfg), tmp_path / "th.nc")


BAD = {
    "missing-from": (["--from", "{tmp}/nope.nc"], "does not exist"),
    "from-and-set": (["--from", "{res}", "--set", "model.H=3"], "drop --config/--set"),
    "seed-not-in-file": (["--from", "{res}", "--seed", "7"], "--seed 7 is not in"),
    "group-cos-2": (["--from", "{res}", "--group-cos", "2"], "--group-cos"),
    "n-1": (["--from", "{res}", "--n", "1"], "--n"),
    "bad-set": (["--set", "model.H=0"], "model.H"),
    "bad-config": (["-c", "{tmp}/nope.toml"], "nope.toml"),
    "out-folder-missing": (["--from", "{res}", "-o", "{tmp}/no/s.nc"], "does not exist"),
    "out-json": (["--from", "{res}", "-o", "{tmp}/s.json"], "ending in .nc"),
    "format-gif": (["--from", "{res}", "--format", "gif"], "--format 'gif'"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_cli_saddles_refuses_bad_input_before_any_work(name, tmp_path, ok_result):
    """Exit 2, the option or field named, no output file written."""
    args, expect = BAD[name]
    args = [a.format(tmp=tmp_path, res=ok_result) for a in args]
    if "-o" not in args:
        args += ["-o", str(tmp_path / "s.nc")]
    res = runner.invoke(app, ["saddles", *args])
    assert res.exit_code == 2, res.output
    assert expect in res.output, res.output
    assert not list(tmp_path.glob("s*")), list(tmp_path.iterdir())


@pytest.mark.slow
def test_cli_saddles_on_the_e1_config(tmp_path):
    """The E1 config itself (four softmax heads, η = 2, D = 100; about 35 s on 2 cores): its
    common-phase plateau is polished into the common fixed point (one group of four, a fixed
    point within 3 s.e., risk within 1 % of the plateau's), a saddle whose leading modes are
    three degenerate head-difference modes (the standard representation of the four heads'
    permutations).

    With the exact method (the default of `saddles`) the Jacobian's error bars are ~50× smaller
    than with 8192 Sobol samples, and it resolves slower growing modes that the sampled route
    could not tell from zero (measured: 6 at 0.0043 ± 0.00005, mixed common/difference, and 3 at
    0.0005 ± 0.000004, against the leading 0.0369 ± 0.000004): the test asks that the three
    leading modes are the degenerate head-difference ones and lead the others by ≥ 5×."""
    out = tmp_path / "e1.nc"
    res = runner.invoke(app, ["saddles", "-c", str(E1), "-o", str(out)])
    assert res.exit_code == 0, res.output
    sd = xr.load_dataset(out).isel(saddle=0)
    assert sd.group.values.tolist() == [0, 0, 0, 0] and float(sd.max_z) <= 3
    assert abs(float(sd.risk) / float(sd.level) - 1) < 0.01
    assert int(sd.n_unstable) >= 3 and int(sd.n_zero) == 4
    lead = sd.eig_real.values[:4]  # sorted by decreasing real part
    assert np.ptp(lead[:3]) < 3 * float(sd.eig_se.values[0]) and lead[3] < lead[0] / 5, lead
    assert np.all(sd.mode_common.values[:3] < 1e-6)


@pytest.mark.slow  # test tier: scaling across D = 10⁴ … 10⁶
def test_ode_head_differences_scale_like_one_over_sqrt_d():
    """The ODE from the exact finite-D initial law keeps the ln-D law of the escape only if its
    drift samples treat the heads alike: with head-cyclic samples (chosen automatically for
    task.D > theory.n) the head difference at t = 8 shrinks 10× from D = 10⁴ to 10⁶, like the
    initial 1/√D differences (linear regime; within 5 %), while plain samples (n = 512) force a
    difference of their own, O(1/√n), that does not shrink with D (headspec study escape_time found
    the ODE's escape time flat in D for D ≥ 10⁴ because of this). The sampled drift (qmc) is the
    case: the exact method's η-linear part treats heads alike by construction."""
    from headspec.conventions.config import TheoryConfig, load_config
    from headspec.conventions.runs import solve

    law = 'task.latent={kind="discrete", atoms=[[2.5, 0.0], [0.0, 2.5]], probs=[0.6, 0.4]}'

    def diff(D, *extra):
        cfg = load_config(TheoryConfig, overrides=[law, f"task.D={D}", "model.H=2", "train.lr=3.0",
                          "train.T=8", "theory.n=512", "record.points=1", 'record.grid="linear"',
                          "record.n_mc=64", "seeds=2", 'theory.method="qmc"', *extra])  # fmt: skip
        ds = solve(cfg)
        M = ds.M.values[:, -1]  # (S, H, F)
        return np.abs(M[:, 0] - M[:, 1]).max(-1).mean(), ds.attrs["head_cyclic"]

    (d4, c4), (d6, c6) = diff(10**4), diff(10**6)
    assert c4 == c6 == 1
    assert abs(d4 / d6 / 10 - 1) < 0.05, (d4, d6)
    d6_plain, c = diff(10**6, "theory.head_cyclic=false")
    assert c == 0 and d6_plain > 5 * d6, (d6_plain, d6)


@pytest.mark.slow
def test_e2_feature_order_in_simulation_is_the_predicted_one():
    """E2's law (Gaussian, mean 0, Var θ = (6, 2); four softmax-1 heads, η = 2): the Jacobian at
    the heads' common state predicts feature 1 first (head-difference rates 0.256 ± 0.009 vs
    0.085 ± 0.004, tests/test_jacobian.py::test_e2_growth_rates_order_the_features_by_variance).
    Reduced-engine SGD at D = 2000 (16 seeds; about 1 min): some head reaches |cos| ≥ 0.8 with
    feature 1 before any head does with feature 2 in every seed (measured: t ≈ 14–21 against
    64–144). A wrong prediction would show here: by symmetry of the two features' roles, a
    coin-flip order passes with probability 2⁻¹⁶."""
    import headspec as hs

    cfg = hs.load_config(hs.SimulateConfig, overrides=[
        'task.latent={kind="gaussian", mean=[0.0, 0.0], var=[6.0, 2.0]}', "task.L=10",
        "task.D=2000", "model.H=4", 'model.activation="softmax1"', "train.lr=2.0", "train.T=150",
        "seeds=16", 'train.engine="reduced"', 'record.grid="linear"', "record.points=150",
        "record.n_mc=64"])  # fmt: skip
    ds = hs.simulate(cfg)
    cos = np.abs(ds.cos.values).max(axis=2)  # (S, T, F): best head per feature
    picked = cos >= 0.8
    first = np.where(picked.any(1), picked.argmax(1), np.iinfo(int).max)  # (S, F) grid index
    assert np.all(first[:, 0] < first[:, 1]), ds.t.values[np.minimum(first, ds.sizes["t"] - 1)]
