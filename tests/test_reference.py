"""The architecture redesign changed no number: five simulate/theory configs (full and reduced
engines, float32 and float64, a Gaussian law, a schedule, MC and Sobol drift samples, perturbed
and symmetric ODE starts) give bit-identical results to those stored before it
(tests/data/reference_before_redesign.nc, made at commit a6613a1 by tests/data/make_reference.py).
Exception, on purpose: ``sim_reduced`` was re-recorded when the reduced engine changed its random
stream for speed (block draws, an exact χ² sampler, a Cholesky re-basis; issue 14) — its law is
tested against the full engine in tests/test_reduced.py, its bits here from then on.

The same configs are also run in a fresh process that never turns on JAX's global 64-bit mode:
headspec chooses float64 where it needs it without changing the importing process's settings.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

REF = Path(__file__).parent / "data" / "reference_before_redesign.nc"
CASES = ("sim_full", "sim_reduced", "sim_f64_bayes", "theory", "theory_sym_mc")
VARS = ("risk", "risk_se", "risk_by_atom", "test_risk", "test_risk_se", "M", "Q", "b", "cos",
        "fail_step")  # fmt: skip


def run_case(ref: xr.Dataset, name: str) -> dict[str, np.ndarray]:
    from headspec.conventions.config import SimulateConfig, TheoryConfig, load_config
    from headspec.conventions.runs import simulate, solve

    overrides = json.loads(str(ref[f"{name}__overrides"].values))
    if name.startswith("sim"):
        ds = simulate(load_config(SimulateConfig, overrides=overrides))
    else:
        ds = solve(load_config(TheoryConfig, overrides=overrides))
    out = {v: ds[v].values for v in VARS}
    out["bayes_risk"] = np.asarray(ds.attrs["bayes_risk"])
    return out


def assert_identical(ref: xr.Dataset, name: str, got: dict[str, np.ndarray]) -> None:
    for v, x in got.items():
        want = ref[f"{name}__{v}"].values
        assert x.shape == want.shape, (name, v)
        assert np.array_equal(x, want, equal_nan=True), (
            f"{name}.{v} differs: max |Δ| = {np.nanmax(np.abs(x - want))}"
        )


@pytest.fixture(scope="module")
def ref():
    return xr.load_dataset(REF, engine="h5netcdf")


@pytest.mark.parametrize("name", CASES)
def test_bit_identical_to_before_the_redesign(ref, name):
    assert_identical(ref, name, run_case(ref, name))


@pytest.mark.slow  # default-suite time budget (~10 min on 2 cores); the in-process cases stay
def test_bit_identical_without_global_x64(tmp_path):
    """In a process whose JAX stays in 32-bit mode by default, importing headspec leaves it so,
    and the runs still give the stored float64 numbers."""
    code = f"""
import jax, numpy as np, xarray as xr, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import headspec
from test_reference import CASES, REF, assert_identical, run_case
assert not jax.config.jax_enable_x64, "importing headspec switched on jax_enable_x64"
ref = xr.load_dataset(REF, engine="h5netcdf")
for name in ("sim_full", "theory"):
    assert_identical(ref, name, run_case(ref, name))
assert not jax.config.jax_enable_x64, "running headspec switched on jax_enable_x64"
print("ok")
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("ok")
