"""The architecture redesign changed no number: five simulate/theory configs (full and reduced
engines, float32 and float64, a Gaussian law, a schedule, MC and Sobol drift samples, perturbed
and symmetric ODE starts) give the results stored before it
(tests/data/reference_before_redesign.nc, made at commit a6613a1 by
tests/data/make_reference_at_a6613a1.py.txt). Exception, on purpose:
``sim_reduced`` was re-recorded when the reduced engine changed its random stream for speed
(block draws, an exact χ² sampler, a Cholesky re-basis; issue 14) — its law is tested against the
full engine in tests/test_reduced.py, its numbers here from then on.

Bit-identity holds only on the CPU target that recorded the numbers: XLA compiles for the host CPU
(vector width, fused multiply-adds, reduction order), so another CPU model may round differently
in the last bits — measured on an AMD EPYC (Zen 3, AVX2) against numbers recorded elsewhere:
|Δ| ≤ 5.6e-8 in float32 runs, ≤ 1.7e-16 in float64 runs, identical ODE results. So:

- where the running CPU target and JAX version are those stored with the reference
  (:func:`headspec.conventions.provenance.cpu_target`), every variable must be bit-identical;
- elsewhere every variable must agree to within the rounding of the run's precision: these runs
  accumulate n ≤ 60 SGD steps (or an adaptive ODE) of O(1) quantities (risks, overlaps, cosines,
  biases are all ≤ 2.1 here), so |Δ| ≤ 8·ε·√(n + 1), ε the machine epsilon of the run's dtype
  (float32 runs: 8·1.19e-7·√41 = 6.1e-6 for sim_full; float64: ~1e-14). That is 100× the
  cross-CPU differences measured, and far below any change of the numerics that matters (a changed
  formula or random stream moves these numbers by 1e-4 … 1): such a change still fails.

The same configs are also run in a fresh process that never turns on JAX's global 64-bit mode:
headspec chooses float64 where it needs it without changing the importing process's settings.
"""

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
import xarray as xr

from headspec.conventions.provenance import cpu_target

REF = Path(__file__).parent / "data" / "reference_before_redesign.nc"
CASES = ("sim_full", "sim_reduced", "sim_f64_bayes", "theory", "theory_sym_mc")
VARS = ("risk", "risk_se", "risk_by_atom", "test_risk", "test_risk_se", "M", "Q", "b", "cos",
        "fail_step")  # fmt: skip


def run_case(ref: xr.Dataset, name: str) -> dict[str, np.ndarray]:
    from headspec.conventions.config import SimulateConfig, TheoryConfig, load_config
    from headspec.conventions.runs import simulate, solve

    overrides = json.loads(str(ref[f"{name}__overrides"].values))
    if name.startswith("theory") and not any("theory.sampler" in o for o in overrides):
        # recorded when every ODE drift was sampled, by scrambled Sobol unless said otherwise
        # (theory.sampler, today theory.method = "qmc"); the default is now the exact method
        overrides.append('theory.method="qmc"')
    if name.startswith("sim"):
        ds = simulate(load_config(SimulateConfig, overrides=overrides))
    else:
        ds = solve(load_config(TheoryConfig, overrides=overrides))
    out = {v: ds[v].values for v in VARS}
    out["bayes_risk"] = np.asarray(ds.attrs["bayes_risk"])
    out["_eps"] = np.asarray(np.finfo(ds.attrs.get("dtype", "float64")).eps)
    out["_steps"] = np.asarray(int(ds["step"].values[-1]) if name.startswith("sim") else 0)
    return out


def same_platform(ref: xr.Dataset) -> bool:
    """Whether this process runs on the CPU target and JAX version that recorded ``ref``."""
    return ref.attrs.get("cpu_target") == cpu_target() and ref.attrs.get("jax_version") == (
        jax.__version__
    )


def assert_matches(ref: xr.Dataset, name: str, got: dict[str, np.ndarray]) -> None:
    """Bit-identical on the recording platform, else within 8·ε·√(n + 1) (module docstring)."""
    exact = same_platform(ref)
    tol = 8.0 * float(got["_eps"]) * np.sqrt(float(got["_steps"]) + 1.0)
    bad = []
    for v, x in got.items():
        if v.startswith("_"):
            continue
        want = ref[f"{name}__{v}"].values
        assert x.shape == want.shape, (name, v)
        assert np.array_equal(np.isnan(x), np.isnan(want)), f"{name}.{v}: NaNs moved"
        if exact or x.dtype.kind != "f":
            if not np.array_equal(x, want, equal_nan=True):
                bad.append(f"{v} not bit-identical (max |Δ| {np.nanmax(np.abs(x - want)):.3g})")
        elif x.size and np.nanmax(np.abs(x - want), initial=0.0) > tol:
            bad.append(f"{v} max |Δ| {np.nanmax(np.abs(x - want)):.3g} > {tol:.3g}")
    where = "on the recording platform" if exact else f"on another CPU target ({cpu_target()})"
    assert not bad, f"{name} differs from the reference {where}: " + "; ".join(bad)


@pytest.fixture(scope="module")
def ref():
    return xr.load_dataset(REF, engine="h5netcdf")


@pytest.mark.parametrize("name", CASES)
def test_results_equal_those_before_the_redesign(ref, name):
    assert_matches(ref, name, run_case(ref, name))


def test_tolerance_catches_a_real_change(ref):
    """The cross-platform tolerance is not so loose that a changed run passes: the same config
    with another learning rate (a 1 % change) is refused."""
    changed = [*json.loads(str(ref["sim_full__overrides"].values)), "train.lr=1.01"]
    ref2 = ref.copy()
    ref2["sim_full__overrides"] = xr.DataArray(json.dumps(changed))
    got = run_case(ref2, "sim_full")
    with pytest.raises(AssertionError, match=r"M max \|Δ\| .* > "):
        assert_matches(ref.assign_attrs(cpu_target="another"), "sim_full", got)


@pytest.mark.slow  # default-suite time budget; the in-process cases stay
def test_same_results_without_global_x64(tmp_path):
    """In a process whose JAX stays in 32-bit mode by default, importing headspec leaves it so,
    and the runs still give the stored float64 numbers."""
    code = f"""
import jax, numpy as np, xarray as xr, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import headspec
from test_reference import CASES, REF, assert_matches, run_case
assert not jax.config.jax_enable_x64, "importing headspec switched on jax_enable_x64"
ref = xr.load_dataset(REF, engine="h5netcdf")
for name in ("sim_full", "theory"):
    assert_matches(ref, name, run_case(ref, name))
assert not jax.config.jax_enable_x64, "running headspec switched on jax_enable_x64"
print("ok")
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("ok")
