"""Issue 26, classes 4–6: no impossible state is returned, guards see every size, result files
are checked for meaning.

- class 4: the diffusion engine keeps (M, Q) realisable — λ_min(Q − MMᵀ) ≥ −1e-9·|Q| and
  |cos| ≤ 1 + 1e-9 in every seed not marked failed — over extreme settings (a hypothesis property
  test on tiny sizes, and fixed extreme cases), marks a seed whose discretisation breaks down as
  failed with the check named, and refuses configs clearly outside its domain of validity;
- class 5: the size guard counts the law's atoms and task.L and names the real cause with a value
  that fits (10⁵ atoms, 5000 atoms in `bayes`, a huge L, 10⁹ seeds);
- class 6: loading a result refuses non-finite M/Q/b in a seed not marked failed, a non-PSD
  Q − MMᵀ, an asymmetric Q and a `step` inconsistent with D (exit 2, variable and seed named);
  `compare` names the failed seeds it leaves out.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from headspec.apps.cli import app
from headspec.conventions import results
from headspec.conventions.budget import check_budget
from headspec.conventions.config import (
    BayesRunConfig,
    ConfigError,
    SimulateConfig,
    TheoryConfig,
    load_config,
)
from headspec.conventions.refusal import fit_value
from headspec.core.latent import Discrete
from headspec.core.observables import BaseSamples
from headspec.dynamics.engines import seed_keys
from headspec.dynamics.engines.diffusion import DiffusionEngine
from headspec.dynamics.noise import gram_rest
from helpers import softmax_engine
from results import made_result

runner = CliRunner()
G = 1000**3
L, H, N, T = 4, 2, 64, 0.5  # tiny: one compiled program serves every example


# ============================================================================ class 4: diffusion
def _diffusion_states(scale, eta, D, noise_factor=1.0, seeds=(0, 1), dt=0.1):
    """(M, Q, fail_step, fail_check) of a tiny diffusion run to t = T (two atoms, F = 2)."""
    law = Discrete(atoms=[[2.0 * scale, 0.0], [0.0, 2.0 * scale]], probs=[0.6, 0.4])
    base = BaseSamples.draw(jax.random.key(1), law, L=L, H=H, n=N)
    gram = gram_rest(jax.random.key(2), N, L, int(D), law.F + H)
    eng = softmax_engine(
        DiffusionEngine,
        law,
        L,
        int(D),
        H,
        eta,
        base=base,
        gram=gram,
        dt=dt,
        horizon=T,
        noise_factor=noise_factor,
    )
    keys = seed_keys(list(seeds))
    state = eng.init(keys, sigma0=0.1, b0=0.0, dtype=jnp.float64)
    state = eng.advance(
        state, keys["train"], jnp.int64(0), jnp.int64(int(T * D))
    )  # t1 ≤ the horizon T
    return tuple(np.asarray(x) for x in (state.M, state.Q, state.fail_step, state.fail_check))


def _impossible(M, Q, fail_step) -> list[str]:
    """The seeds not marked failed whose state is not realisable, with why."""
    bad = []
    for s in range(M.shape[0]):
        if fail_step[s] >= 0:
            continue
        scale = np.abs(Q[s]).max()
        lam = np.linalg.eigvalsh(Q[s] - M[s] @ M[s].T).min()
        cos = np.abs(M[s]) / np.sqrt(np.diag(Q[s]))[:, None]
        if not np.isfinite(Q[s]).all() or lam < -1e-9 * scale or cos.max() > 1 + 1e-9:
            bad.append(f"seed {s}: λ_min {lam:.3g}, |Q| {scale:.3g}, cos {cos.max():.6g}")
    return bad


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    scale=st.floats(0.5, 20.0),
    eta=st.floats(0.1, 50.0),
    log_D=st.floats(2.0, 9.0),
)
def test_diffusion_never_returns_an_impossible_state(scale, eta, log_D):
    """Property (class 4): signal up to 20, η up to 50, D from 10² to 10⁹, engine built directly
    (outside the config's domain check): no seed that is not marked failed is impossible."""
    M, Q, fail, _ = _diffusion_states(scale, eta, round(10**log_D))
    assert not _impossible(M, Q, fail)


@pytest.mark.parametrize(
    "scale, eta, D",
    [(20.0, 1.0, 1000), (20.0, 0.1, 1000), (20.0, 50.0, 100), (20.0, 5.0, 10**9), (1.0, 50.0, 100),
     (0.5, 0.1, 10**9)],
)  # fmt: skip
def test_diffusion_extremes_are_realisable_or_marked(scale, eta, D):
    """The issue's case (scale 20, D = 10³: λ_min was −0.006 after one step, cos 2) and the
    corners of the property's box."""
    M, Q, fail, check = _diffusion_states(scale, eta, D)
    assert not _impossible(M, Q, fail)
    assert set(check[fail >= 0].tolist()) <= {1, 2} and set(check[fail < 0].tolist()) <= {0}


def test_issue_case_stays_inside_the_cone_with_margin():
    """Scale 20, η = 1, D = 10³: not merely within tolerance — C = Q − MMᵀ stays clearly PSD and no
    seed fails (the C coordinates remove the cause)."""
    M, Q, fail, _ = _diffusion_states(20.0, 1.0, 1000)
    lam = np.linalg.eigvalsh(Q - np.einsum("shf,skf->shk", M, M))[:, 0]
    assert (fail < 0).all() and (lam > 1e-3).all()


def test_a_broken_discretisation_is_marked_failed_with_its_check():
    """Noise × 10³ at D = 100 throws C out of the cone within a step: the seeds are marked failed
    at a step inside the run, with check 1 or 2, never returned as states."""
    M, Q, fail, check = _diffusion_states(1.0, 1.0, 100, noise_factor=1e3)  # compiled once: traced
    assert (fail >= 0).any() and not _impossible(M, Q, fail)
    assert set(check[fail >= 0].tolist()) <= {1, 2} and (fail[fail >= 0] <= T * 100).all()


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(scale=st.floats(0.5, 20.0), eta=st.floats(0.1, 50.0), log_D=st.floats(2.0, 9.0))
def test_diffusion_never_returns_an_impossible_state_many(scale, eta, log_D):
    M, Q, fail, _ = _diffusion_states(scale, eta, round(10**log_D), seeds=tuple(range(8)))
    assert not _impossible(M, Q, fail)


@pytest.mark.parametrize(
    "overrides, refused",
    [
        (["task.D=100", "task.latent.scale=20.0"], True),  # ρ = 32
        (["task.D=1000", "task.latent.scale=20.0", "train.lr=50.0"], True),  # ρ = 160
        (["task.D=50", "train.lr=50.0"], True),  # no large signal: η alone, ρ = 18
        (["task.D=1000", "task.latent.scale=20.0"], False),  # ρ = 3.2: inside
        (["task.D=1000000000", "task.latent.scale=20.0", "train.lr=50.0"], False),
    ],
)
def test_diffusion_domain_is_checked_on_the_config(overrides, refused):
    ov = ['train.engine="diffusion"', *overrides]
    if refused:
        with pytest.raises(ConfigError, match=r"domain of validity.*ρ = η·\(s² \+ L\)/D.*fix: "):
            load_config(SimulateConfig, overrides=ov)
    else:
        load_config(SimulateConfig, overrides=ov)


def test_cli_refuses_outside_the_domain_and_writes_nothing(tmp_path):
    out = tmp_path / "x.nc"
    r = runner.invoke(app, ["simulate", "--engine", "diffusion", "--scale", "20", "--D", "100",
                            "-o", str(out)])  # fmt: skip
    assert r.exit_code == 2 and "domain of validity" in r.output and "task.D ≥ 321" in r.output
    assert "Traceback" not in r.output and not out.exists()


def test_divergence_message_names_the_failed_check():
    from headspec.conventions.runs import divergence_message

    cfg = load_config(SimulateConfig, overrides=['train.engine="diffusion"'])
    ds = xr.Dataset(
        {"fail_step": ("seed", [1234]), "fail_t": ("seed", [1.234]),
         "fail_reason": ("seed", np.asarray(["Q − MMᵀ left the positive semi-definite cone"],
                                            dtype=object))},
        coords={"seed": [3]}, attrs={"lr": 1.0, "config_json": cfg.model_dump_json()},
    )  # fmt: skip
    msg = divergence_message(ds, 0)
    assert "seed 3 failed at step 1234 (t = 1.234)" in msg and "Q − MMᵀ" in msg
    assert "diffusion.dt" in msg


# ============================================================================ class 5: guards
def _atoms(J: int) -> str:
    return 'task.latent={kind="discrete", atoms=%s}' % [[float(i % 7 + 1), 1.0] for i in range(J)]


@pytest.mark.parametrize(
    "model, overrides, cause",
    [
        (BayesRunConfig, [_atoms(100_000)], "task.latent.atoms = 100,000"),  # 320 GB of Q
        (BayesRunConfig, [_atoms(5000)], "task.latent.atoms = 5,000"),  # days of eighs
        (SimulateConfig, [_atoms(100_000), "seeds=1"], "task.latent.atoms = 100,000"),
        (SimulateConfig, ["task.L=1000000", "seeds=1"], "task.L = 1,000,000"),
        (TheoryConfig, ["task.L=1000000", "seeds=1"], "task.L = 1,000,000"),
        (SimulateConfig, ["seeds=1000000000"], "seeds = 1,000,000,000"),
    ],
)
def test_guard_names_the_real_cause_and_a_value_that_fits(model, overrides, cause):
    with pytest.raises(ConfigError) as e:
        check_budget(load_config(model, overrides=overrides), available=8 * G)
    msg = str(e.value)
    assert f"the cause is {cause}" in msg and "at most" in msg
    if "seeds=1" in overrides:  # at one seed, fewer seeds is no fix
        assert "fewer seeds" not in msg


def test_the_value_offered_fits():
    """The fit the message offers passes the same guard (atoms in `bayes`, task.L in simulate)."""
    cfg = load_config(SimulateConfig, overrides=["task.L=1000000", "seeds=1"])
    with pytest.raises(ConfigError) as e:
        check_budget(cfg, available=8 * G)
    fit = int(str(e.value).split("task.L at most ")[1].split()[0].replace(",", ""))
    check_budget(load_config(SimulateConfig, overrides=[f"task.L={fit}", "seeds=1"]), 8 * G)
    assert fit_value([], "seeds", 10, 1.0) == 10  # nothing grows with it: all of it fits


def test_bayes_with_many_atoms_is_refused_before_any_work(tmp_path):
    cfg = tmp_path / "many.toml"
    atoms = ", ".join(f"[{i % 7 + 1}.0, 1.0]" for i in range(5000))
    cfg.write_text(f'[task.latent]\nkind = "discrete"\natoms = [{atoms}]\n')
    r = runner.invoke(app, ["bayes", "-c", str(cfg), "--json", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and "task.latent.atoms" in r.output and "at most" in r.output
    assert not (tmp_path / "o.json").exists()


# ============================================================================ class 6: loading
def _result(failed=()) -> xr.Dataset:
    """A tiny valid simulation result (two seeds, t = 0, 0.5, 1 at D = 20: steps 0, 10, 20; seeds
    in ``failed`` diverged at t = 0.5), made up (tests/results.py)."""
    return made_result("simulation", "task.D=20", failed=failed, risk=0.4, risk_se=0.01,
                       test_risk=0.45, test_risk_se=0.02)  # fmt: skip


def _nan_M(ds):
    ds["M"][1, 2, 0, 0] = np.nan


def _inf_b(ds):
    ds["b"][0, 1, 1] = np.inf


def _nan_Q(ds):
    ds["Q"][1, 0, 1, 1] = np.nan


def _not_psd(ds):  # cos 2: Q_hh = M_h0²/4
    ds["Q"][0, 1, 0, 0] = float(ds.M[0, 1, 0, 0]) ** 2 / 4


def _asymmetric(ds):
    ds["Q"][1, 1, 0, 1] += 0.5


def _step_vs_D(ds):
    ds.coords["step"] = ("t", [0, 5, 20])  # t = 0.5 is step 10 at D = 20


def _step_not_from_0(ds):
    ds.coords["step"] = ("t", [1, 10, 20])


def _diffusion_like(ds):  # λ_min = −1855 as in the issue, in a seed not marked failed
    ds["Q"][0, 2] = ds["Q"][0, 2] - 1855.0 * np.eye(2)


@pytest.mark.parametrize(
    "corrupt, names",
    [
        (_nan_M, ("'M'", "seed 1", "not marked failed")),
        (_inf_b, ("'b'", "seed 0", "not finite")),
        (_nan_Q, ("'Q'", "seed 1", "t = 0")),
        (_not_psd, ("'Q' and 'M'", "seed 0", "positive semi-definite", "float32")),
        (_asymmetric, ("'Q'", "seed 1", "not symmetric")),
        (_step_vs_D, ("'step'", "task.D = 20", "5·1/20")),
        (_step_not_from_0, ("'step'", "start at 0")),
        (_diffusion_like, ("seed 0", "eigenvalue -1855")),
    ],
)
def test_impossible_results_are_refused_on_load(tmp_path, corrupt, names):
    ds = _result()
    corrupt(ds)
    path = results.save(ds, tmp_path / "bad.nc")
    with pytest.raises(results.ResultError) as e:
        results.load(path)
    assert all(n in str(e.value) for n in names), str(e.value)
    r = runner.invoke(app, ["plot", str(path), "-o", str(tmp_path / "figs")])
    assert r.exit_code == 2 and "Traceback" not in r.output and names[0] in r.output
    assert not (tmp_path / "figs").exists()


def test_valid_results_load_failed_seeds_included(tmp_path):
    """A failed seed's NaN after fail_t is by design; an exactly singular Q − MMᵀ (aligned heads)
    is within the round-off tolerance."""
    ds = _result(failed=[1])
    ds["M"][1, 2] = np.nan
    ds["Q"][1, 2] = np.nan
    M = ds.M.values[0, 2]
    ds["Q"][0, 2] = M @ M.T  # Q − MMᵀ = 0 (keys inside span(K*))
    results.load(results.save(ds, tmp_path / "ok.nc"))


def test_compare_reports_the_failed_seeds_it_leaves_out(tmp_path):
    from headspec.conventions.comparison import compare

    sim = _result(failed=[1])
    sim["M"][1, 2] = np.nan
    sim["Q"][1, 2] = np.nan
    sim["risk"][1, 2] = np.nan
    th = _result()
    th.attrs["kind"] = "theory"
    cfg = json.loads(th.attrs["config_json"])
    cfg.pop("seeds"), cfg.pop("diffusion")
    th.attrs["config_json"] = TheoryConfig.model_validate(cfg).model_dump_json()
    dev = compare(sim, th)
    assert dev["risk"]["excluded"] == {"simulation": [1], "theory": []}
    assert np.isfinite(dev["M"]["max_dev"]) and dev["M"]["nan_points"] == 0
    s, t = results.save(sim, tmp_path / "s.nc"), results.save(th, tmp_path / "t.nc")
    r = runner.invoke(app, ["compare", str(s), str(t), "-o", str(tmp_path / "figs")])
    assert r.exit_code == 0, r.output
    assert "left out the simulation's seed(s) [1]" in r.output
